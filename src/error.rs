//! The crate's error type.

use std::fmt;

use cudarc::driver::sys::CUresult;
use cudarc::driver::DriverError;
use cudarc::nvrtc::CompileError;

/// Everything [`try_gpu_dot`](crate::GpuDot::try_gpu_dot) and its relatives can fail with.
///
/// Only [`ShapeMismatch`](GpuDotError::ShapeMismatch) and
/// [`BatchMismatch`](GpuDotError::BatchMismatch) are the caller's mistake; every other
/// variant describes the GPU or the environment, and [`Backend::Auto`](crate::Backend::Auto)
/// answers those by computing on the CPU instead.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum GpuDotError {
    /// The inner dimensions differ: `lhs` is `m × k`, `rhs` is `k2 × n`, and `k != k2`.
    ShapeMismatch {
        /// Rows of the left operand.
        m: usize,
        /// Columns of the left operand.
        k: usize,
        /// Rows of the right operand.
        k2: usize,
        /// Columns of the right operand.
        n: usize,
    },
    /// The two operands of a batched product hold different numbers of matrices.
    BatchMismatch {
        /// Matrices in the left operand.
        batch: usize,
        /// Matrices in the right operand.
        batch2: usize,
    },
    /// A product split across several devices ([`DotOptions::devices`](crate::DotOptions))
    /// failed on one of them.
    SplitFailed {
        /// The device that failed.
        ordinal: usize,
        /// How it failed.
        source: Box<GpuDotError>,
    },
    /// No usable CUDA device: the driver or NVRTC library is missing, the driver found no
    /// device, or the context could not be made. The text says which.
    NoDevice {
        /// Why no GPU is usable.
        reason: String,
    },
    /// A CUDA driver call failed.
    Driver {
        /// What the crate was doing.
        context: &'static str,
        /// The driver's error: its `CUresult` code, name and text.
        source: CudaError,
    },
    /// NVRTC rejected a kernel source.
    Compile {
        /// The kernel family being compiled.
        kernel: &'static str,
        /// NVRTC's log (or the failing NVRTC call when there is no log).
        log: String,
    },
    /// A device allocation failed for lack of memory.
    OutOfMemory {
        /// Bytes asked for in the allocation that failed.
        bytes: usize,
    },
    /// The output of a general product ([`try_general_mat_mul`](crate::try_general_mat_mul))
    /// does not have the shape `m × n` of the product, or the operands of an element-wise
    /// operation ([`GpuMatrix::copy_to`](crate::GpuMatrix::copy_to),
    /// [`GpuMatrix::relu_backward`](crate::GpuMatrix::relu_backward)) differ in shape.
    OutputShape {
        /// The product's shape.
        expected: (usize, usize),
        /// The output's shape.
        found: (usize, usize),
    },
    /// Host memory for the result (or page-locked staging memory) could not be allocated.
    HostOutOfMemory {
        /// Bytes asked for in the allocation that failed.
        bytes: usize,
    },
    /// A dimension does not fit the kernels' 32-bit dimension arguments.
    TooLarge {
        /// The product's dimensions `(m, k, n)`.
        dims: (usize, usize, usize),
    },
    /// A host thread copying operands or results failed (a bug in the crate); the product
    /// was abandoned.
    HostThread {
        /// What failed.
        what: String,
    },
    /// cuBLAS, the reference behind the `cublas` feature, failed.
    #[cfg(feature = "cublas")]
    Cublas {
        /// cuBLAS's status.
        status: String,
    },
    /// The device faulted (an illegal address, a trap, an uncorrectable ECC error, ...): a
    /// fault poisons the device's CUDA context for the whole process, so every operation
    /// running on it at that moment fails with this error. The next GPU call resets the
    /// device and makes a new context (modules loaded again, tuned plans kept); device
    /// matrices made before then are lost ([`MatrixLost`](Self::MatrixLost)). Where the
    /// driver refuses a new context after a fault (as some do until the process ends), later
    /// GPU calls get [`NoDevice`](Self::NoDevice) saying so, and `Auto` computes on the CPU.
    DeviceFault {
        /// What the crate was doing when the driver reported it.
        context: &'static str,
        /// The driver's error: its `CUresult` code, name and text.
        source: CudaError,
    },
    /// A [`GpuMatrix`](crate::GpuMatrix) made before the device was reset after a
    /// [`DeviceFault`](Self::DeviceFault): its contents are gone. Make it again.
    MatrixLost {
        /// The matrix's shape.
        dim: (usize, usize),
    },
    /// A [`GpuMatrix`](crate::GpuMatrix) of one device used in a product on another: device
    /// memory is not moved between devices behind the caller's back. Copy it with
    /// [`GpuMatrix::to_device`](crate::GpuMatrix::to_device), or run the product on its device.
    WrongDevice {
        /// The matrix's shape.
        dim: (usize, usize),
        /// The device it lives on.
        device: usize,
        /// The device the product runs on.
        expected: usize,
    },
    /// An environment variable holds a value the crate does not understand.
    InvalidEnv {
        /// The variable's name.
        var: &'static str,
        /// Its value.
        value: String,
        /// What would have been accepted.
        expected: &'static str,
    },
}

/// What a driver error that poisons its context runs before it becomes a
/// [`GpuDotError::DeviceFault`]: set by the device layer before it makes its first context
/// (no context, no such fault), so that the next GPU call rebuilds the faulted one.
static ON_STICKY_FAULT: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Sets [`ON_STICKY_FAULT`] (the first call wins; the device layer makes only one).
pub(crate) fn on_sticky_fault(note: fn()) {
    let _ = ON_STICKY_FAULT.set(note);
}

impl GpuDotError {
    /// Wraps a driver error, turning `CUDA_ERROR_OUT_OF_MEMORY` into [`OutOfMemory`](Self::OutOfMemory).
    /// A fault that poisons the context ([`DeviceFault`](Self::DeviceFault)) is recorded, so
    /// that the next GPU call rebuilds the context.
    pub(crate) fn driver(context: &'static str, bytes: usize, error: DriverError) -> Self {
        if error.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            GpuDotError::OutOfMemory { bytes }
        } else if is_sticky(error.0) {
            if let Some(note) = ON_STICKY_FAULT.get() {
                note();
            }
            GpuDotError::DeviceFault {
                context,
                source: CudaError::from(error),
            }
        } else {
            GpuDotError::Driver {
                context,
                source: CudaError::from(error),
            }
        }
    }

    /// A closure for `map_err` on driver calls that allocate nothing (see [`driver`](Self::driver)).
    pub(crate) fn at(context: &'static str) -> impl Fn(DriverError) -> Self {
        move |source| Self::driver(context, 0, source)
    }

    pub(crate) fn compile(kernel: &'static str, err: CompileError) -> Self {
        let log = match err {
            CompileError::CompileError {
                nvrtc,
                options,
                log,
            } => format!(
                "{} (options: {})\n{}",
                nvrtc.0 as i32,
                options.join(" "),
                log.to_string_lossy()
            ),
            other => format!("{other:?}"),
        };
        GpuDotError::Compile { kernel, log }
    }
}

/// An error the CUDA driver reported: its `CUresult` code, name and description, as the
/// driver gives them (`cuGetErrorName`, `cuGetErrorString`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CudaError {
    /// The `CUresult` value, e.g. 700 for `CUDA_ERROR_ILLEGAL_ADDRESS`.
    pub code: i32,
    /// The `CUresult` name, e.g. `CUDA_ERROR_ILLEGAL_ADDRESS`.
    pub name: String,
    /// The driver's description of it.
    pub description: String,
}

impl From<DriverError> for CudaError {
    fn from(e: DriverError) -> Self {
        let text = |r: Result<&std::ffi::CStr, DriverError>| {
            r.map(|s| s.to_string_lossy().into_owned()).ok()
        };
        CudaError {
            code: e.0 as i32,
            name: text(e.error_name()).unwrap_or_else(|| format!("{:?}", e.0)),
            description: text(e.error_string()).unwrap_or_default(),
        }
    }
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.code)?;
        if !self.description.is_empty() {
            write!(f, ": {}", self.description)?;
        }
        Ok(())
    }
}

impl std::error::Error for CudaError {}

/// The driver's errors after which the context is unusable: every later call in it fails.
fn is_sticky(code: CUresult) -> bool {
    use CUresult::*;
    matches!(
        code,
        CUDA_ERROR_ILLEGAL_ADDRESS
            | CUDA_ERROR_LAUNCH_TIMEOUT
            | CUDA_ERROR_ASSERT
            | CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUDA_ERROR_MISALIGNED_ADDRESS
            | CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUDA_ERROR_INVALID_PC
            | CUDA_ERROR_LAUNCH_FAILED
            | CUDA_ERROR_ECC_UNCORRECTABLE
    )
}

impl fmt::Display for GpuDotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuDotError::ShapeMismatch { m, k, k2, n } => write!(
                f,
                "inputs {m} × {k} and {k2} × {n} are not compatible for matrix multiplication"
            ),
            GpuDotError::BatchMismatch { batch, batch2 } => write!(
                f,
                "batches of {batch} and {batch2} matrices are not compatible for a batched product"
            ),
            GpuDotError::SplitFailed { ordinal, source } => write!(
                f,
                "device {ordinal} failed its share of a product split across devices: {source}"
            ),
            GpuDotError::NoDevice { reason } => write!(f, "no usable CUDA device: {reason}"),
            GpuDotError::Driver { context, source } => {
                write!(f, "CUDA driver error while {context}: {source}")
            }
            GpuDotError::Compile { kernel, log } => {
                write!(f, "NVRTC could not compile the {kernel} kernels: {log}")
            }
            GpuDotError::OutOfMemory { bytes } => {
                write!(f, "out of device memory allocating {bytes} bytes")
            }
            GpuDotError::OutputShape { expected, found } => write!(
                f,
                "the output is {} × {}, but the product is {} × {}",
                found.0, found.1, expected.0, expected.1
            ),
            GpuDotError::HostOutOfMemory { bytes } => {
                write!(f, "out of host memory allocating {bytes} bytes")
            }
            GpuDotError::TooLarge { dims: (m, k, n) } => write!(
                f,
                "product {m} × {k} × {n} has a dimension above the kernels' limit of {}",
                i32::MAX
            ),
            GpuDotError::HostThread { what } => write!(f, "host copy failed: {what}"),
            #[cfg(feature = "cublas")]
            GpuDotError::Cublas { status } => write!(f, "cuBLAS failed: {status}"),
            GpuDotError::DeviceFault { context, source } => write!(
                f,
                "the device faulted while {context} ({source}); its context is rebuilt on the \
                 next GPU call"
            ),
            GpuDotError::MatrixLost { dim: (r, c) } => write!(
                f,
                "this {r} × {c} device matrix was lost when the device was reset after a fault"
            ),
            GpuDotError::WrongDevice {
                dim: (r, c),
                device,
                expected,
            } => write!(
                f,
                "this {r} × {c} matrix lives on device {device}, but the product runs on \
                 device {expected}"
            ),
            GpuDotError::InvalidEnv {
                var,
                value,
                expected,
            } => write!(f, "{var}={value:?} is not valid: expected {expected}"),
        }
    }
}

impl std::error::Error for GpuDotError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GpuDotError::Driver { source, .. } | GpuDotError::DeviceFault { source, .. } => {
                Some(source)
            }
            GpuDotError::SplitFailed { source, .. } => Some(&**source),
            _ => None,
        }
    }
}

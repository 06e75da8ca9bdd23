//! The crate's error type.

use std::fmt;

use cudarc::driver::sys::CUresult;
use cudarc::driver::DriverError;
use cudarc::nvrtc::CompileError;

/// Everything [`try_gpu_dot`](crate::GpuDot::try_gpu_dot) and its relatives can fail with.
///
/// [`ShapeMismatch`](GpuDotError::ShapeMismatch), [`BatchMismatch`](GpuDotError::BatchMismatch),
/// [`OutputShape`](GpuDotError::OutputShape), [`OperandShapes`](GpuDotError::OperandShapes) and
/// [`CpuBackendWithDeviceOperands`](GpuDotError::CpuBackendWithDeviceOperands) are the
/// caller's mistake; every other variant describes the GPU or the environment, and
/// [`Backend::Auto`](crate::Backend::Auto) answers those by computing on the CPU instead.
///
/// Each error's `Display` describes its own level only; the error that caused it (the
/// driver's [`CudaError`], or a device's error in a split product) is its
/// [`source`](std::error::Error::source), as error-reporting crates (`anyhow`, `eyre`)
/// expect. The alternate form, `{:#}`, prints the whole chain on one line, each cause after
/// a colon:
///
/// ```
/// use gpu_dot::{Backend, DotOptions, GpuDot, GpuDotError};
/// use ndarray::Array2;
///
/// let (a, b) = (Array2::<f32>::ones((64, 64)), Array2::<f32>::ones((64, 64)));
/// let gpu = DotOptions::builtin().backend(Backend::Gpu);
/// match a.try_gpu_dot_with(&b, &gpu) {
///     Ok(p) => assert_eq!(p.c[[0, 0]], 64.0),
///     // "CUDA driver error while …: CUDA_ERROR_… (code): …" for a driver error.
///     Err(e) => eprintln!("{e:#}"),
/// }
/// ```
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
    /// failed on one of them. How it failed is the [`source`](std::error::Error::source).
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
    /// A CUDA driver call failed. The driver's error is the
    /// [`source`](std::error::Error::source).
    #[non_exhaustive]
    Driver {
        /// What the crate was doing.
        context: &'static str,
        /// The driver's error: its `CUresult` code, name and text.
        source: CudaError,
    },
    /// NVRTC rejected a kernel source.
    #[non_exhaustive]
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
    /// does not have the shape `m × n` of the product.
    #[non_exhaustive]
    OutputShape {
        /// The product's shape.
        expected: (usize, usize),
        /// The output's shape.
        found: (usize, usize),
    },
    /// The two operands of an element-wise operation differ in shape
    /// ([`GpuMatrix::copy_to`](crate::GpuMatrix::copy_to): the matrix and the array it is
    /// copied into; [`GpuMatrix::relu_backward`](crate::GpuMatrix::relu_backward): the
    /// gradient and the activation). Nothing was changed.
    OperandShapes {
        /// The shape of the matrix the method was called on.
        left: (usize, usize),
        /// The shape of the other operand.
        right: (usize, usize),
    },
    /// [`Backend::Cpu`](crate::Backend::Cpu) was asked for a product with a device operand or
    /// output (a [`GpuMatrix`](crate::GpuMatrix)): the CPU backend reads and writes host
    /// arrays only, and device memory is not downloaded behind the caller's back. Download
    /// the matrix ([`GpuMatrix::to_array`](crate::GpuMatrix::to_array)), or compute with
    /// [`Backend::Auto`](crate::Backend::Auto) or [`Backend::Gpu`](crate::Backend::Gpu).
    CpuBackendWithDeviceOperands,
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
    /// The driver's error is the [`source`](std::error::Error::source).
    #[non_exhaustive]
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
    #[non_exhaustive]
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

/// A value that [`Backend`](crate::Backend), [`Kernel`](crate::Kernel),
/// [`Precision`](crate::Precision) or [`Devices`](crate::Devices) cannot be parsed from
/// (their `FromStr`): they accept the values their environment variables document (the
/// README's table of settings), in any case, with spaces around them ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ParseOptionError {
    /// What was being parsed: `backend`, `kernel`, `precision` or `devices`.
    pub what: &'static str,
    /// The value as given.
    pub value: String,
    /// What would have been accepted, as [`GpuDotError::InvalidEnv`] says it.
    pub expected: &'static str,
}

impl fmt::Display for ParseOptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a valid {}: expected {}",
            self.value, self.what, self.expected
        )
    }
}

impl std::error::Error for ParseOptionError {}

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

/// This level's message (the causes are the [`source`](std::error::Error::source) chain);
/// the alternate form, `{:#}`, adds each cause after a colon.
impl fmt::Display for GpuDotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_level(f)?;
        if f.alternate() {
            let mut cause = std::error::Error::source(self);
            while let Some(e) = cause {
                write!(f, ": {e}")?;
                cause = e.source();
            }
        }
        Ok(())
    }
}

impl GpuDotError {
    /// This level's message, without its causes.
    fn fmt_level(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuDotError::ShapeMismatch { m, k, k2, n } => write!(
                f,
                "inputs {m} × {k} and {k2} × {n} are not compatible for matrix multiplication"
            ),
            GpuDotError::BatchMismatch { batch, batch2 } => write!(
                f,
                "batches of {batch} and {batch2} matrices are not compatible for a batched product"
            ),
            GpuDotError::SplitFailed { ordinal, .. } => write!(
                f,
                "device {ordinal} failed its share of a product split across devices"
            ),
            GpuDotError::NoDevice { reason } => write!(f, "no usable CUDA device: {reason}"),
            GpuDotError::Driver { context, .. } => write!(f, "CUDA driver error while {context}"),
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
            GpuDotError::OperandShapes { left, right } => write!(
                f,
                "the operands are {} × {} and {} × {}, but must have the same shape",
                left.0, left.1, right.0, right.1
            ),
            GpuDotError::CpuBackendWithDeviceOperands => f.write_str(
                "the CPU backend cannot take device operands or outputs: download them, or use \
                 the GPU or automatic backend",
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
            GpuDotError::DeviceFault { context, .. } => write!(
                f,
                "the device faulted while {context}; its context is rebuilt on the next GPU call"
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    fn cuda_error() -> CudaError {
        CudaError {
            code: 700,
            name: "CUDA_ERROR_ILLEGAL_ADDRESS".into(),
            description: "an illegal memory access was encountered".into(),
        }
    }

    /// The messages of every cause in `e`'s source chain, `e`'s own first.
    fn chain(e: &(dyn Error + 'static)) -> Vec<String> {
        let mut messages = Vec::new();
        let mut next = Some(e);
        while let Some(e) = next {
            messages.push(e.to_string());
            next = e.source();
        }
        messages
    }

    #[test]
    fn a_cause_is_the_source_and_not_in_the_message() {
        let driver = GpuDotError::Driver {
            context: "waiting for the product",
            source: cuda_error(),
        };
        let text = driver.to_string();
        assert_eq!(text, "CUDA driver error while waiting for the product");
        assert!(!text.contains("CUDA_ERROR_ILLEGAL_ADDRESS"), "{text}");
        let source = driver.source().expect("the driver's error is the source");
        assert_eq!(
            source.downcast_ref::<CudaError>(),
            Some(&cuda_error()),
            "{source}"
        );
        assert_eq!(
            chain(&driver),
            [
                "CUDA driver error while waiting for the product",
                "CUDA_ERROR_ILLEGAL_ADDRESS (700): an illegal memory access was encountered",
            ]
        );

        let fault = GpuDotError::DeviceFault {
            context: "synchronizing",
            source: cuda_error(),
        };
        assert_eq!(
            fault.to_string(),
            "the device faulted while synchronizing; its context is rebuilt on the next GPU call"
        );
        assert!(fault.source().unwrap().is::<CudaError>());

        // Two levels: the split, the device's fault, the driver's error; each says its own.
        let split = GpuDotError::SplitFailed {
            ordinal: 1,
            source: Box::new(fault.clone()),
        };
        assert_eq!(
            chain(&split),
            [
                "device 1 failed its share of a product split across devices".to_string(),
                fault.to_string(),
                cuda_error().to_string(),
            ]
        );
        // The alternate form prints the whole chain, each cause once.
        assert_eq!(format!("{split:#}"), chain(&split).join(": "));
        assert_eq!(format!("{driver:#}"), chain(&driver).join(": "));
        // Without a source, both forms are the same.
        let lost = GpuDotError::MatrixLost { dim: (2, 3) };
        assert!(lost.source().is_none());
        assert_eq!(format!("{lost:#}"), lost.to_string());
    }

    #[test]
    fn element_wise_shapes_and_the_cpu_backend_have_their_own_messages() {
        let e = GpuDotError::OperandShapes {
            left: (4, 5),
            right: (5, 4),
        };
        assert_eq!(
            e.to_string(),
            "the operands are 4 × 5 and 5 × 4, but must have the same shape"
        );
        let e = GpuDotError::CpuBackendWithDeviceOperands.to_string();
        assert!(
            e.starts_with("the CPU backend cannot take device operands"),
            "{e}"
        );
    }
}

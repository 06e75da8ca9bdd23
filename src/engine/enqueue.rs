//! How the engine's kernels go onto a stream: a kernel's arguments and its launch,
//! programmatic where the device and the kernels allow it.
//!
//! A product is often a chain of kernels on one stream: a GEMM and its split-K reduction, the
//! packing of panels and the GEMM that reads them, a training step's GEMMs and element-wise
//! kernels, and the dozen passes of a guarded Ozaki product, most of them short at mid sizes.
//! Launched plainly, each kernel waits for the one before to finish before the device even
//! starts it. Launched programmatically (`cuLaunchKernelEx` with programmatic stream
//! serialization, sm_90), a kernel is let in as soon as every block of the one before has
//! started, and its blocks wait at their first statement (`GD_AFTER_PREVIOUS` in
//! kernels/common.cuh) until that kernel has finished and its writes are visible: the launch
//! and the ramp overlap the kernel before, and nothing reads early. Every entry point of the
//! kernel families begins with that wait; the fault tests' own kernels (`device::testing`)
//! do not, and launch plainly through cudarc.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::{
    sys, CudaFunction, CudaStream, DevicePtr, DeviceRepr, DriverError, LaunchConfig,
};

use crate::device::context::Gpu;

/// Whether kernels compiled for compute capability `sm` (`Gpu::kernel_sm`) launch
/// programmatically: on sm_90 (H100, H200), whose modules hold the waits, unless
/// `__testing::programmatic_launches(false)`. Other devices keep plain launches.
pub(crate) fn programmatic_on(sm: u32) -> bool {
    sm == 90 && crate::device::overrides::programmatic_launches_on()
}

/// One launch of an entry point of the kernel families: its arguments, in order, each borrowed
/// for as long as the launch is being built (as cudarc's own builder borrows them).
pub(crate) struct Launch<'a> {
    stream: &'a Arc<CudaStream>,
    func: &'a CudaFunction,
    programmatic: bool,
    args: Vec<Arg>,
}

/// An argument: a borrowed value, or a device address held here.
enum Arg {
    Value(*mut c_void),
    Address(sys::CUdeviceptr),
}

impl<'a> Launch<'a> {
    /// A launch of `func` on `stream`, programmatic where `programmatic` (see
    /// [`programmatic_on`]).
    pub(crate) fn new(
        stream: &'a Arc<CudaStream>,
        func: &'a CudaFunction,
        programmatic: bool,
    ) -> Self {
        Launch {
            stream,
            func,
            programmatic,
            args: Vec::with_capacity(24),
        }
    }

    /// A launch of `func` on `stream` for `gpu`: programmatic where its kernels allow
    /// ([`programmatic_on`]).
    pub(crate) fn on(gpu: &Gpu, stream: &'a Arc<CudaStream>, func: &'a CudaFunction) -> Self {
        Self::new(stream, func, programmatic_on(gpu.kernel_sm()))
    }

    /// The next argument, passed by value.
    pub(crate) fn arg<T: DeviceRepr>(&mut self, value: &'a T) -> &mut Self {
        self.args.push(Arg::Value(value as *const T as *mut c_void));
        self
    }

    /// The next argument, the device address of a view (or slice). The context tracks no
    /// events (see `device::context`), so the address is all the launch needs.
    pub(crate) fn view<T, V: DevicePtr<T>>(&mut self, view: &V) -> &mut Self {
        let (ptr, _sync) = view.device_ptr(self.stream);
        self.args.push(Arg::Address(ptr));
        self
    }

    /// Enqueues the kernel with `cfg`.
    ///
    /// # Safety
    /// The arguments must be, in order and by type, those the entry takes, and every address
    /// among them must stay valid, with the extent the entry reads or writes, until the
    /// kernel has finished. A programmatic launch is only for entries that begin with
    /// `GD_AFTER_PREVIOUS` (every entry point of the kernel families).
    pub(crate) unsafe fn launch(&mut self, cfg: LaunchConfig) -> Result<(), DriverError> {
        self.stream.context().bind_to_thread()?;
        // One pointer a parameter: to the borrowed value, or to the address held in `args`
        // (which no longer changes).
        let mut params: Vec<*mut c_void> = self
            .args
            .iter()
            .map(|arg| match arg {
                Arg::Value(p) => *p,
                Arg::Address(a) => a as *const sys::CUdeviceptr as *mut c_void,
            })
            .collect();
        let mut attr = sys::CUlaunchAttribute {
            id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            pad: [0; 4],
            // SAFETY: the value is a C union of plain integers and arrays of them, for which
            // all bits zero is a valid value.
            value: unsafe { std::mem::zeroed() },
        };
        attr.value.programmaticStreamSerializationAllowed = 1;
        let config = sys::CUlaunchConfig {
            gridDimX: cfg.grid_dim.0,
            gridDimY: cfg.grid_dim.1,
            gridDimZ: cfg.grid_dim.2,
            blockDimX: cfg.block_dim.0,
            blockDimY: cfg.block_dim.1,
            blockDimZ: cfg.block_dim.2,
            sharedMemBytes: cfg.shared_mem_bytes,
            hStream: self.stream.cu_stream(),
            attrs: &mut attr,
            numAttrs: u32::from(self.programmatic),
        };
        // SAFETY: `config` and `attr` live across the call; `params` points at one value per
        // parameter, each borrowed for 'a or held in `args`, unchanged until the call returns
        // (the types and extents are the caller's contract above);
        // the function belongs to the stream's context, bound to this thread above.
        unsafe {
            sys::cuLaunchKernelEx(
                &config,
                self.func.cu_function(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()
    }
}

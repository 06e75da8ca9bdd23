//! The crate's own fault tests' kernel: one that faults on the device, through the crate's
//! context and streams. Hidden from the documentation; not part of the API, and never used by
//! the crate itself. The switches the tests flip (replaced sources, no prebuilt images, a
//! pretended compute capability) are in [`overrides`](super::overrides).

use cudarc::driver::PushKernelArg;
use cudarc::nvrtc::Ptx;

use crate::device::cache;
use crate::device::context;
use crate::error::GpuDotError;

/// How [`raise_device_fault`]'s kernel faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// The kernel executes a trap instruction.
    Trap,
    /// The kernel writes to an address outside every allocation.
    IllegalAddress,
}

const FAULT_SOURCE: &str = r#"
extern "C" __global__ void fault_trap(float* x) {
    if (threadIdx.x == 0) __trap();
    x[threadIdx.x] = 1.0f;
}
extern "C" __global__ void fault_illegal_address(float* x) {
    // An address in the first page, which the driver never maps.
    float* bad = (float*)(unsigned long long)(16 + 4 * threadIdx.x);
    *bad = x[0];
}
"#;

/// Launches a kernel that faults on the device the crate uses, on one of the crate's streams,
/// and waits for it: the error it returns is the driver's report of the fault
/// ([`GpuDotError::DeviceFault`] for a fault that poisons the context). Products running on
/// other threads at that moment fail with it too; the next GPU call rebuilds the context.
pub fn raise_device_fault(kind: Fault) -> Result<(), GpuDotError> {
    raise_device_fault_on(crate::Device::default(), kind)
}

/// [`raise_device_fault`] on `device`.
pub fn raise_device_fault_on(device: crate::Device, kind: Fault) -> Result<(), GpuDotError> {
    let gpu = context::gpu_on(device.ordinal())?;
    let (major, minor) = gpu.info.compute_capability;
    let options = [format!("--gpu-architecture=sm_{major}{minor}")];
    let cubin = cache::compile("fault", FAULT_SOURCE, &options)?;
    let module = gpu
        .ctx
        .load_module(Ptx::from_binary(cubin))
        .map_err(GpuDotError::at("loading the fault kernels"))?;
    let entry = match kind {
        Fault::Trap => "fault_trap",
        Fault::IllegalAddress => "fault_illegal_address",
    };
    let func = module
        .load_function(entry)
        .map_err(GpuDotError::at("looking up a fault kernel"))?;
    let stream = gpu.stream()?;
    let mut x = stream
        .alloc_zeros::<f32>(32)
        .map_err(GpuDotError::at("allocating a fault kernel's buffer"))?;
    let mut builder = stream.launch_builder(&func);
    builder.arg(&mut x);
    let cfg = cudarc::driver::LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (32, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: the fault kernels take one `float*`, here a buffer of 32 floats (one per
    // thread). They fault on purpose: the fault poisons only the device's context, which the
    // crate then rebuilds; no host memory is touched.
    unsafe { builder.launch(cfg) }.map_err(GpuDotError::at("launching a fault kernel"))?;
    stream
        .synchronize()
        .map_err(GpuDotError::at("waiting for a fault kernel"))
}

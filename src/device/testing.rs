//! Hooks for the crate's own fault tests: a kernel that faults on the device, and kernel
//! sources replaced before they are compiled. Hidden from the documentation; not part of the
//! API, and never used by the crate itself.

use std::collections::HashMap;
use std::sync::Mutex;

use cudarc::driver::PushKernelArg;
use cudarc::nvrtc::Ptx;
use once_cell::sync::Lazy;

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

static OVERRIDES: Lazy<Mutex<HashMap<&'static str, String>>> =
    Lazy::new(|| Mutex::new(HashMap::new()));

/// Replaces the source of the module named `family` (a name the engine's table checked), or
/// restores its own with `None`.
pub(crate) fn set_source_override(family: &'static str, source: Option<String>) {
    OVERRIDES_USED.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut map = OVERRIDES.lock().unwrap_or_else(|p| p.into_inner());
    match source {
        Some(s) => map.insert(family, s),
        None => map.remove(family),
    };
}

/// The source that replaces the module `family`'s, if a test asked for one.
pub(crate) fn source_override(family: &str) -> Option<String> {
    if OVERRIDES_USED.load(std::sync::atomic::Ordering::Relaxed) {
        let map = OVERRIDES.lock().unwrap_or_else(|p| p.into_inner());
        map.get(family).cloned()
    } else {
        None
    }
}

/// Whether modules may come from the prebuilt CUBINs: `false` makes every module not yet
/// loaded come from the disk cache or NVRTC, as on a device the crate ships no CUBINs for
/// (the tests of background compilation). `true` restores them.
pub fn use_prebuilt_kernels(allowed: bool) {
    NO_PREBUILT.store(!allowed, std::sync::atomic::Ordering::SeqCst);
}

static NO_PREBUILT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether modules may come from the prebuilt CUBINs: unless [`ENV_PREBUILT`] turns them off
/// (read once) or a test did ([`use_prebuilt_kernels`]).
pub(crate) fn prebuilt_allowed() -> bool {
    static FROM_ENV: once_cell::sync::Lazy<bool> = once_cell::sync::Lazy::new(|| {
        let Ok(value) = std::env::var(ENV_PREBUILT) else {
            return true;
        };
        parse_prebuilt(&value).unwrap_or_else(|e| {
            log::warn!("{e}; the prebuilt CUBINs stay on");
            true
        })
    });
    *FROM_ENV && !NO_PREBUILT.load(std::sync::atomic::Ordering::SeqCst)
}

/// A value of [`ENV_PREBUILT`]: an on/off switch, `none` being off too.
pub(crate) fn parse_prebuilt(value: &str) -> Result<bool, GpuDotError> {
    if value.trim().eq_ignore_ascii_case("none") {
        return Ok(false);
    }
    crate::settings::PREBUILT.switch(value)
}

pub use crate::settings::ENV_PREBUILT;

static OVERRIDES_USED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The compute capability (`major·10 + minor`) kernel choices are made for, in place of the
/// device's: `Some(75)` sends `f64` products to the SIMT kernel that devices without FP64
/// tensor cores run; `None` restores the device's own. The modules keep every entry of the
/// real device.
pub fn pretend_compute_capability(sm: Option<u32>) {
    PRETEND_SM.store(sm.unwrap_or(0), std::sync::atomic::Ordering::SeqCst);
}

static PRETEND_SM: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The compute capability set by [`pretend_compute_capability`], if any.
pub(crate) fn pretended_sm() -> Option<u32> {
    match PRETEND_SM.load(std::sync::atomic::Ordering::SeqCst) {
        0 => None,
        sm => Some(sm),
    }
}

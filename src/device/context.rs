//! The CUDA contexts, one per device used: each made on the device's first use, shared by
//! every thread, rebuilt after a fault.
//!
//! It holds the cudarc context, a pool of streams, the device's properties and the module
//! cache: each kernel family is compiled by NVRTC to a CUBIN for the device's own architecture
//! the first time it is needed, and never again in the process; the on-disk cache
//! (`src/cache.rs`) lets a later process load the CUBIN instead of compiling it again.

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use cudarc::driver::sys::{CUevent_flags, CUfunction_attribute};
use cudarc::driver::{CudaContext, CudaEvent, CudaFunction, CudaModule, CudaStream};
use cudarc::nvrtc::Ptx;
use once_cell::sync::OnceCell;

use crate::device::cache::{self, nvrtc_options};
use crate::device::compiler::{self, Request};
use crate::device::prebuilt;
use crate::error::GpuDotError;

/// A module a context can load: one kernel family of the engine's table, described by what
/// the device layer needs to compile, cache and load it.
pub(crate) trait ModuleSpec: Copy {
    /// Its slot in a context's module table: distinct per module, below [`MODULE_SLOTS`].
    fn slot(self) -> usize;
    /// Its name, e.g. "sgemm_fast".
    fn name(self) -> &'static str;
    /// The source NVRTC compiles.
    fn source(self) -> String;
    /// The architecture it is compiled for on a device of architecture `arch` (`sm_XY`).
    fn arch(self, arch: &str) -> String;
    /// Its entry points on a device of compute capability `sm` (`major·10 + minor`).
    fn entries(self, sm: u32) -> Vec<String>;
    /// Dynamic shared memory `entry` needs raised above the default 48 KiB limit.
    fn shared_bytes(self, entry: &str) -> Option<u32>;
}

/// How many modules a context can hold.
pub(crate) const MODULE_SLOTS: usize = 8;

/// Whether a module is ready to run on a context, as [`Gpu::prepare`] finds it.
#[derive(Debug, Clone)]
pub(crate) enum Readiness {
    /// Loaded (now or before): its kernels can be launched.
    Ready,
    /// NVRTC is compiling it on a background thread.
    Compiling,
}

/// What the crate knows about the device it uses.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DeviceInfo {
    /// The device's ordinal.
    pub ordinal: usize,
    /// The device's name, e.g. "NVIDIA H100 80GB HBM3".
    pub name: String,
    /// Compute capability `(major, minor)`; kernels are compiled for `sm_{major}{minor}`.
    pub compute_capability: (i32, i32),
    /// Global memory in bytes.
    pub total_memory: usize,
    /// Streaming multiprocessors.
    pub multiprocessors: i32,
    /// Milliseconds it took to load the driver and create the context.
    pub context_ms: f64,
}

/// Whether the GPU path is usable, as [`device_status`] reports it.
#[derive(Debug, Clone, PartialEq)]
pub enum DeviceStatus {
    /// A device is ready.
    Ready(DeviceInfo),
    /// No GPU is usable, and why.
    Unavailable(String),
}

impl fmt::Display for DeviceStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceStatus::Ready(d) => write!(
                f,
                "{} (device {}, compute capability {}.{}, {} SMs, {:.1} GiB)",
                d.name,
                d.ordinal,
                d.compute_capability.0,
                d.compute_capability.1,
                d.multiprocessors,
                d.total_memory as f64 / (1u64 << 30) as f64
            ),
            DeviceStatus::Unavailable(reason) => write!(f, "no usable GPU: {reason}"),
        }
    }
}

/// Reports the default device ([`Device::default`]), creating its context if this is its
/// first use.
///
/// Never panics: a missing driver, a missing NVRTC or a machine without a device give
/// [`DeviceStatus::Unavailable`] with the reason.
pub fn device_status() -> DeviceStatus {
    match default_ordinal() {
        Ok(ordinal) => Device::new(ordinal).status(),
        Err(e) => DeviceStatus::Unavailable(e.to_string()),
    }
}

/// One CUDA device of this machine, by ordinal: a handle, cheap to copy, that makes nothing
/// until used.
///
/// Each device the crate uses has its own context, compiled modules, streams, idle
/// workspaces and tuned plans; a fault on one device rebuilds only that device's context.
/// [`DotOptions::device`](crate::DotOptions::device) sends a product to a device, and
/// [`GpuMatrix::from_array_on`](crate::GpuMatrix::from_array_on) puts a matrix there. Without
/// either, products run on the default device: `GPU_DOT_DEVICE`, else device 0.
///
/// ```no_run
/// use gpu_dot::Device;
///
/// for device in Device::all() {
///     println!("{device}: {}", device.status());
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Device {
    ordinal: usize,
}

impl Device {
    /// The device of ordinal `ordinal` (whether it exists is known on first use).
    pub const fn new(ordinal: usize) -> Device {
        Device { ordinal }
    }

    /// How many CUDA devices the driver reports: 0 without a driver (never panics).
    pub fn count() -> usize {
        device_count().unwrap_or(0)
    }

    /// Every device the driver reports, by ordinal.
    pub fn all() -> Vec<Device> {
        (0..Device::count()).map(Device::new).collect()
    }

    /// The ordinal.
    pub const fn ordinal(self) -> usize {
        self.ordinal
    }

    /// Whether the device is usable, creating its context if this is its first use. Never
    /// panics.
    pub fn status(self) -> DeviceStatus {
        match gpu_on(self.ordinal) {
            Ok(gpu) => DeviceStatus::Ready(gpu.info.clone()),
            Err(e) => DeviceStatus::Unavailable(match e {
                GpuDotError::NoDevice { reason } => reason,
                other => other.to_string(),
            }),
        }
    }

    /// The modules loaded on this device so far, with what each cost on first use (empty
    /// when the device has not been used).
    pub fn module_loads(self) -> Vec<ModuleLoad> {
        match self.live() {
            Some(gpu) => gpu.module_loads(),
            None => Vec::new(),
        }
    }

    /// The device's context in use, if it has been made and has not faulted.
    pub(crate) fn live(self) -> Option<Arc<Gpu>> {
        live().into_iter().find(|g| g.info.ordinal == self.ordinal)
    }

    /// How many times this process has rebuilt the device's context after a fault.
    pub fn context_rebuilds(self) -> usize {
        DEVICES
            .get(self.ordinal)
            .map_or(0, |d| d.rebuilds.load(Ordering::SeqCst))
    }
}

impl Default for Device {
    /// The device that serves products whose options name none: `GPU_DOT_DEVICE`, else 0
    /// (also 0 when `GPU_DOT_DEVICE` is not an ordinal; products then report that error).
    fn default() -> Device {
        Device::new(default_ordinal().unwrap_or(0))
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device {}", self.ordinal)
    }
}

/// The first-use costs of one kernel family's module.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ModuleLoad {
    /// The family, e.g. "tiled".
    pub family: &'static str,
    /// Whether it came from the CUBINs the crate ships (`kernels/prebuilt/`), compiled ahead of
    /// time for the device's architecture.
    pub prebuilt: bool,
    /// Whether it was read from the on-disk kernel cache
    /// ([`kernel_cache_dir`](crate::kernel_cache_dir)) instead of compiled by NVRTC.
    pub cached: bool,
    /// Milliseconds NVRTC took to compile it (in the foreground or on a background thread);
    /// 0 when it was prebuilt or came from the cache.
    pub nvrtc_ms: f64,
    /// Milliseconds the driver took to load it and look up its entry points, plus the time to
    /// decompress a prebuilt CUBIN or to read and check a cache file.
    pub load_ms: f64,
}

/// NVRTC compilations made by this process so far (each module is compiled at most once,
/// whichever device or thread asks).
pub fn nvrtc_compilations() -> usize {
    compiler::compilations()
}

/// NVRTC compilations running now, in the foreground or on background threads.
pub fn nvrtc_compilations_in_flight() -> usize {
    compiler::in_flight()
}

/// The modules loaded on the default device so far, with what each cost on first use
/// (makes the device's context if it has none yet).
pub fn module_loads() -> Vec<ModuleLoad> {
    match gpu() {
        Ok(gpu) => gpu.module_loads(),
        Err(_) => Vec::new(),
    }
}

/// The driver entry points the crate calls (through cudarc).
const DRIVER_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGet",
    "cuDeviceGetCount",
    "cuDeviceGetAttribute",
    "cuDeviceGetName",
    "cuDeviceTotalMem_v2",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuDevicePrimaryCtxReset_v2",
    "cuCtxSetCurrent",
    "cuCtxGetCurrent",
    "cuCtxSynchronize",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuStreamWaitEvent",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuEventQuery",
    "cuEventElapsedTime",
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuMemsetD8Async",
    "cuMemGetInfo_v2",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuFuncSetAttribute",
    "cuLaunchKernel",
    "cuOccupancyMaxActiveClusters",
    "cuGetErrorName",
    "cuGetErrorString",
];

/// The NVRTC entry points the crate calls (through cudarc).
const NVRTC_SYMBOLS: &[&str] = &[
    "nvrtcVersion",
    "nvrtcCreateProgram",
    "nvrtcCompileProgram",
    "nvrtcDestroyProgram",
    "nvrtcGetProgramLogSize",
    "nvrtcGetProgramLog",
    "nvrtcGetCUBINSize",
    "nvrtcGetCUBIN",
];

/// The most devices one process can address (ordinals `0..MAX_DEVICES`).
pub(crate) const MAX_DEVICES: usize = 64;

/// The context in use on one device, or why there is none; `None` before its first use.
type Slot = Option<Result<Arc<Gpu>, String>>;

/// What the crate keeps for one device ordinal across the contexts it makes there: the
/// context in use (made on first use, rebuilt after a fault), the fault flag and the
/// generation count. The context value ([`Gpu`]) owns the modules, streams, idle workspaces
/// and high-water marks; tuned plans are keyed by ordinal and outlive a rebuild.
struct DeviceSlot {
    slot: Mutex<Slot>,
    /// Set when a driver call reports a fault that poisons this device's context (see
    /// [`GpuDotError::DeviceFault`]); the next [`gpu`] call for the device rebuilds it.
    faulted: AtomicBool,
    /// How many times the context has been made: 1 for the first, one more for each rebuild.
    /// Device memory that may outlive a rebuild ([`GpuMatrix`](crate::GpuMatrix)) is freed
    /// under the read lock, and only when its generation is current; an operation that uses
    /// it holds the context's `Arc`, which a rebuild waits for. A rebuild holds the write lock
    /// while it resets the device.
    generation: RwLock<u64>,
    /// Contexts rebuilt after a fault.
    rebuilds: AtomicUsize,
    /// The driver's handle of the context in use (0: none), for [`note_fault`], which must
    /// take no lock: it runs inside failing operations, some of them under the slot's lock.
    handle: AtomicUsize,
}

impl DeviceSlot {
    const fn new() -> DeviceSlot {
        DeviceSlot {
            slot: Mutex::new(None),
            faulted: AtomicBool::new(false),
            generation: RwLock::new(0),
            rebuilds: AtomicUsize::new(0),
            handle: AtomicUsize::new(0),
        }
    }
}

static DEVICES: [DeviceSlot; MAX_DEVICES] = [const { DeviceSlot::new() }; MAX_DEVICES];

/// How long a rebuild waits for the operations still running on a faulted context to end
/// (each fails at its next driver call).
const REBUILD_WAIT: Duration = Duration::from_secs(20);

/// The ordinal that serves products whose options name no device: `GPU_DOT_DEVICE`, else 0.
pub(crate) fn default_ordinal() -> Result<usize, GpuDotError> {
    // Read once, and alone: another variable's bad value must not move products off the GPU.
    static DEFAULT: once_cell::sync::Lazy<Result<usize, GpuDotError>> =
        once_cell::sync::Lazy::new(|| {
            crate::options::DotOptions::from_lookup(|name| {
                (name == crate::options::ENV_DEVICE)
                    .then(|| std::env::var(name).ok())
                    .flatten()
            })
            .map(|opts| opts.device.unwrap_or(0))
        });
    DEFAULT.clone()
}

fn device_slot(ordinal: usize) -> Result<&'static DeviceSlot, GpuDotError> {
    DEVICES.get(ordinal).ok_or_else(|| GpuDotError::NoDevice {
        reason: match device_count() {
            Err(reason) => reason,
            Ok(count) if ordinal >= count => {
                format!("device {ordinal} asked for, but only {count} found")
            }
            Ok(_) => {
                format!("device {ordinal} asked for, but gpu-dot addresses at most {MAX_DEVICES}")
            }
        },
    })
}

/// The context of the default device (`GPU_DOT_DEVICE`, else 0); see [`gpu_on`].
pub(crate) fn gpu() -> Result<Arc<Gpu>, GpuDotError> {
    gpu_on(default_ordinal()?)
}

/// The context of device `ordinal`, or why there is none. After a fault
/// ([`GpuDotError::DeviceFault`]) the first call waits for the operations still running on
/// the old context to fail, resets the device and makes a new context: modules are loaded
/// again (from the disk cache) and the pools start empty; tuned plans are kept. Where the
/// driver refuses a new context after a fault, the device stays unavailable for the rest of
/// the process ([`GpuDotError::NoDevice`], which sends `Auto` to the CPU). Other devices keep
/// their contexts; a faulted one is rebuilt before any device's next use, because its poison
/// reaches process-wide calls such as page-locked allocations. Some drivers (580, measured on
/// two H200s) let a fault on one device fail every later call on every device, reset or not:
/// there the other devices' operations fail with typed errors too, and each device then
/// reports itself unavailable.
pub(crate) fn gpu_on(ordinal: usize) -> Result<Arc<Gpu>, GpuDotError> {
    // A faulted context poisons calls beyond its device (page-locked allocations on every
    // device fail with its error until it is reset): rebuild any such context first.
    for (other, dev) in DEVICES.iter().enumerate() {
        if other != ordinal && dev.faulted.load(Ordering::Acquire) {
            let _ = settle(other);
        }
    }
    settle(ordinal)
}

/// [`gpu_on`] for one device alone: its context, made or rebuilt as needed.
fn settle(ordinal: usize) -> Result<Arc<Gpu>, GpuDotError> {
    let dev = device_slot(ordinal)?;
    let mut slot = dev.slot.lock().unwrap_or_else(|p| p.into_inner());
    match &*slot {
        Some(Ok(gpu)) if !dev.faulted.load(Ordering::Acquire) => return Ok(gpu.clone()),
        Some(Err(reason)) => {
            return Err(GpuDotError::NoDevice {
                reason: reason.clone(),
            })
        }
        Some(Ok(_)) => rebuild(dev, &mut slot)?,
        None => {
            *slot = Some(make(dev, ordinal, 1));
        }
    }
    match slot.as_ref().expect("made above") {
        Ok(gpu) => Ok(gpu.clone()),
        Err(reason) => Err(GpuDotError::NoDevice {
            reason: reason.clone(),
        }),
    }
}

/// The contexts in use, on every device made so far and not faulted; never makes one.
pub(crate) fn live() -> Vec<Arc<Gpu>> {
    DEVICES
        .iter()
        .filter_map(
            |dev| match &*dev.slot.lock().unwrap_or_else(|p| p.into_inner()) {
                Some(Ok(gpu)) => Some(gpu.clone()),
                _ => None,
            },
        )
        .collect()
}

/// Records that a driver call reported a fault that poisons a context: the context current
/// on this thread (cudarc makes a device's context current before each call on it), or, when
/// that cannot be told, every context in use.
pub(crate) fn note_fault() {
    let current = cudarc::driver::result::ctx::get_current()
        .ok()
        .flatten()
        .map_or(0, |c| c as usize);
    let in_use = |d: &&DeviceSlot| d.handle.load(Ordering::Acquire) != 0;
    let owner = DEVICES
        .iter()
        .filter(in_use)
        .find(|d| current != 0 && d.handle.load(Ordering::Acquire) == current);
    match owner {
        Some(dev) => dev.faulted.store(true, Ordering::Release),
        None => {
            for dev in DEVICES.iter().filter(in_use) {
                dev.faulted.store(true, Ordering::Release);
            }
        }
    }
}

impl Gpu {
    /// Where memory made on this context lives.
    pub(crate) fn home(&self) -> Home {
        Home {
            ordinal: self.info.ordinal,
            generation: self.generation,
        }
    }

    /// Whether memory that lives at `home` can be used on this context: an error when it is
    /// on another device ([`GpuDotError::WrongDevice`]) or was lost to a reset
    /// ([`GpuDotError::MatrixLost`]).
    pub(crate) fn check_home(&self, home: Home, dim: (usize, usize)) -> Result<(), GpuDotError> {
        if home.ordinal != self.info.ordinal {
            Err(GpuDotError::WrongDevice {
                dim,
                device: home.ordinal,
                expected: self.info.ordinal,
            })
        } else if home.generation != self.generation {
            Err(GpuDotError::MatrixLost { dim })
        } else {
            Ok(())
        }
    }

    fn module_loads(&self) -> Vec<ModuleLoad> {
        self.modules
            .iter()
            .filter_map(|m| m.get().map(|m| m.cost.clone()))
            .collect()
    }

    /// Whether this device's context has faulted (and waits for its rebuild).
    pub(crate) fn faulted(&self) -> bool {
        DEVICES[self.info.ordinal].faulted.load(Ordering::Acquire)
    }
}

/// The generation of the context in use on device `ordinal`, read-locked: device memory of
/// another generation must not be used or freed (the device was reset since).
pub(crate) fn generation(ordinal: usize) -> std::sync::RwLockReadGuard<'static, u64> {
    DEVICES[ordinal]
        .generation
        .read()
        .unwrap_or_else(|p| p.into_inner())
}

/// Makes the context of generation `generation` on device `ordinal`.
fn make(dev: &DeviceSlot, ordinal: usize, generation: u64) -> Result<Arc<Gpu>, String> {
    // A fault reported by any driver call from here on marks its context for a rebuild.
    crate::error::on_sticky_fault(note_fault);
    *dev.generation.write().unwrap_or_else(|p| p.into_inner()) = generation;
    // cudarc panics when a symbol it expects is missing from an old driver; that must not
    // take the caller down.
    let gpu = std::panic::catch_unwind(|| Gpu::new(ordinal, generation))
        .unwrap_or_else(|_| Err("the CUDA driver library panicked while loading".into()))
        .map(Arc::new)?;
    dev.handle
        .store(gpu.ctx.cu_ctx() as usize, Ordering::Release);
    Ok(gpu)
}

/// Replaces the faulted context in `slot` with a new one (see [`gpu_on`]).
fn rebuild(dev: &DeviceSlot, slot: &mut Slot) -> Result<(), GpuDotError> {
    let Some(Ok(old)) = slot.as_ref() else {
        unreachable!("a faulted context is in the slot")
    };
    let start = Instant::now();
    while Arc::strong_count(old) > 1 {
        if start.elapsed() > REBUILD_WAIT {
            return Err(GpuDotError::NoDevice {
                reason: format!(
                    "device {} faulted, and {} operations still hold its context after {} s",
                    old.info.ordinal,
                    Arc::strong_count(old) - 1,
                    REBUILD_WAIT.as_secs()
                ),
            });
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let Some(Ok(old)) = slot.take() else {
        unreachable!("checked above")
    };
    let (generation, device, ordinal) = (old.generation, old.ctx.cu_device(), old.info.ordinal);
    // Everything the crate keeps of the old context goes while its handles are still valid
    // (their frees fail on a poisoned context; the reset below reclaims the memory).
    old.idle.lock().unwrap_or_else(|p| p.into_inner()).clear();
    drop(old);
    dev.handle.store(0, Ordering::Release);
    {
        // Device memory of the old context that users still hold (device matrices) is never
        // touched again: its owners see another generation and forget it.
        let mut current = dev.generation.write().unwrap_or_else(|p| p.into_inner());
        *current = generation + 1;
        // SAFETY: `device` is the ordinal's device handle, valid for the process; no
        // operation of the crate uses the old context any more (the last holder of it is
        // gone, and device matrices of that generation are never used or freed again).
        // Other users of the device's primary context in this process lost it to the fault
        // already: a poisoned context fails every call.
        let reset = unsafe { cudarc::driver::sys::cuDevicePrimaryCtxReset_v2(device).result() };
        if let Err(e) = reset {
            *slot = Some(Err(format!(
                "device {ordinal} faulted and could not be reset: {e}"
            )));
            return Ok(());
        }
    }
    dev.faulted.store(false, Ordering::Release);
    *slot = Some(make(dev, ordinal, generation + 1).map_err(|e| {
        // Some drivers refuse every new context of a process after a fault (seen on H200s
        // with driver 580: each attempt fails with the fault's own error, and the fault
        // reaches every call on every device of the process); then only a new process can
        // use the device again.
        format!(
            "device {ordinal} faulted (or a fault on another device of this process reached \
             it), and CUDA could not make a new context in this process ({e}): restart the \
             process to use the GPU again"
        )
    }));
    if matches!(slot, Some(Ok(_))) {
        dev.rebuilds.fetch_add(1, Ordering::SeqCst);
    }
    Ok(())
}

/// How many times this process has rebuilt a CUDA context after a fault, on every device.
pub fn context_rebuilds() -> usize {
    DEVICES
        .iter()
        .map(|d| d.rebuilds.load(Ordering::SeqCst))
        .sum()
}

/// Where device memory lives: a device and the generation of the context it was made in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Home {
    pub(crate) ordinal: usize,
    pub(crate) generation: u64,
}

pub(crate) struct LoadedModule {
    _module: Arc<CudaModule>,
    functions: HashMap<String, CudaFunction>,
    cost: ModuleLoad,
}

pub(crate) struct Gpu {
    pub(crate) ctx: Arc<CudaContext>,
    /// Which context this is on its device (the device's generation count).
    pub(crate) generation: u64,
    pub(crate) info: DeviceInfo,
    arch: String,
    modules: [OnceCell<LoadedModule>; MODULE_SLOTS],
    /// A family NVRTC rejected: kept, so that later products fall back at once instead of
    /// compiling again.
    rejected: [OnceCell<GpuDotError>; MODULE_SLOTS],
    /// A family whose prebuilt CUBIN the driver refused on this context.
    prebuilt_refused: [AtomicBool; MODULE_SLOTS],
    streams: Mutex<Vec<Arc<CudaStream>>>,
    /// Idle workspaces kept for reuse (the pipeline's, which alone knows their type); freed
    /// with the context.
    pub(crate) idle: Mutex<Vec<Box<dyn Any + Send>>>,
    /// The largest reusable buffers made so far.
    pub(crate) high_water: HighWater,
}

/// The largest reusable device buffer and page-locked staging ring a device has made (bytes):
/// reused buffers grow to them, so they settle at one size after a warm-up.
#[derive(Default)]
pub(crate) struct HighWater {
    pub(crate) device: AtomicUsize,
    pub(crate) pinned: AtomicUsize,
}

/// Whether the driver and NVRTC libraries are loaded and have every entry point the crate
/// calls; checked once per process.
fn libraries() -> Result<(), String> {
    static READY: OnceCell<Result<(), String>> = OnceCell::new();
    READY
        .get_or_init(|| {
            std::panic::catch_unwind(check_libraries)
                .unwrap_or_else(|_| Err("the CUDA driver library panicked while loading".into()))
        })
        .clone()
}

/// The file names the driver library and NVRTC go by, most common first.
#[cfg(windows)]
const LIBRARY_NAMES: [&[&str]; 2] = [
    &["nvcuda.dll"],
    &[
        "nvrtc64_130_0.dll",
        "nvrtc64_120_0.dll",
        "nvrtc64_13.dll",
        "nvrtc64_12.dll",
        "nvrtc.dll",
    ],
];
#[cfg(not(windows))]
const LIBRARY_NAMES: [&[&str]; 2] = [
    &["libcuda.so.1", "libcuda.so"],
    &[
        "libnvrtc.so",
        "libnvrtc.so.12",
        "libnvrtc.so.13",
        "libnvrtc.so.11",
    ],
];

/// Opens the first of `names` the dynamic loader finds.
fn open_library(names: &[&str]) -> Option<libloading::Library> {
    names.iter().find_map(|name| {
        // SAFETY: the driver library and NVRTC run no initialisation code with requirements
        // on the caller when loaded; the handle only looks symbols up and is dropped after.
        unsafe { libloading::Library::new(*name) }.ok()
    })
}

/// Checks the two libraries through the dynamic loader itself, whichever way cudarc is
/// built to reach them (loaded at run time, or linked by another crate's choice of cudarc
/// features): both present, with every entry point the crate calls.
fn check_libraries() -> Result<(), String> {
    let [driver_names, nvrtc_names] = LIBRARY_NAMES;
    let Some(driver) = open_library(driver_names) else {
        return Err("the CUDA driver library (libcuda) was not found".into());
    };
    let Some(nvrtc) = open_library(nvrtc_names) else {
        return Err("the NVRTC library (libnvrtc) was not found".into());
    };
    // cudarc looks each entry point up on its first call and panics if it is missing; check
    // them all now, so that an old driver or NVRTC is a reason, never a panic later.
    // SAFETY: `get` only looks a symbol up; nothing is called.
    let missing = unsafe {
        DRIVER_SYMBOLS
            .iter()
            .find(|name| driver.get::<*const ()>(name.as_bytes()).is_err())
            .map(|name| {
                format!("the CUDA driver library lacks {name} (a driver older than CUDA 12?)")
            })
            .or_else(|| {
                NVRTC_SYMBOLS
                    .iter()
                    .find(|name| nvrtc.get::<*const ()>(name.as_bytes()).is_err())
                    .map(|name| {
                        format!("the NVRTC library lacks {name} (NVRTC older than CUDA 12?)")
                    })
            })
    };
    if let Some(reason) = missing {
        return Err(reason);
    }
    // cudarc finds the libraries by its own list of names (and panics where it finds none):
    // have it load both now, where a panic is caught, rather than at a later call.
    let loads = std::panic::catch_unwind(|| {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: nvrtcVersion only writes the two integers it is given.
        let nvrtc = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
        (cudarc::driver::result::init(), nvrtc)
    });
    match loads {
        Ok((Ok(()), cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS)) => Ok(()),
        Ok((Err(e), _)) if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_NO_DEVICE => {
            Err("the CUDA driver found no device".into())
        }
        Ok((Err(e), _)) => Err(format!("the CUDA driver could not initialise: {e:?}")),
        Ok((_, e)) => Err(format!("NVRTC does not answer: {e:?}")),
        Err(_) => Err(
            "cudarc could not load the CUDA driver library or NVRTC under the names it knows \
             (a CUDA 13 install needs the unversioned libnvrtc.so with the cuda-12080 bindings)"
                .into(),
        ),
    }
}

/// How many CUDA devices the driver reports, or why it cannot say.
pub(crate) fn device_count() -> Result<usize, String> {
    libraries()?;
    let count = CudaContext::device_count()
        .map_err(|e| format!("the CUDA driver could not count devices: {e}"))?;
    Ok(count.max(0) as usize)
}

impl Gpu {
    fn new(ordinal: usize, generation: u64) -> Result<Gpu, String> {
        let start = Instant::now();
        let count = device_count()?;
        if count == 0 {
            return Err("the CUDA driver found no device".into());
        }
        if ordinal >= count {
            return Err(format!(
                "device {ordinal} asked for, but only {count} found"
            ));
        }
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| format!("could not create a CUDA context on device {ordinal}: {e}"))?;
        // SAFETY: the crate orders every use of its device buffers itself: a workspace's
        // buffers are allocated and then synchronised before other streams use them, streams
        // are ordered by events within a product, and every product, upload and download
        // completes before it returns, so no buffer is used on two streams at once or freed
        // while in use. cudarc's per-buffer events would add two driver calls per buffer per
        // launch and copy.
        unsafe { ctx.disable_event_tracking() };
        let describe = |e| format!("could not query device {ordinal}: {e}");
        let info = DeviceInfo {
            ordinal,
            name: ctx.name().map_err(describe)?,
            compute_capability: ctx.compute_capability().map_err(describe)?,
            total_memory: ctx.total_mem().map_err(describe)?,
            multiprocessors: ctx
                .attribute(
                    cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                )
                .map_err(describe)?,
            context_ms: start.elapsed().as_secs_f64() * 1e3,
        };
        let (major, minor) = info.compute_capability;
        Ok(Gpu {
            ctx,
            generation,
            arch: format!("sm_{major}{minor}"),
            info,
            modules: Default::default(),
            rejected: Default::default(),
            prebuilt_refused: Default::default(),
            streams: Mutex::new(Vec::new()),
            idle: Default::default(),
            high_water: HighWater::default(),
        })
    }

    /// The compute capability kernels are chosen for: the device's, unless a test pretends
    /// otherwise (`__testing::pretend_compute_capability`).
    pub(crate) fn kernel_sm(&self) -> u32 {
        crate::device::overrides::pretended_sm().map_or(self.sm(), |sm| sm.min(self.sm()))
    }

    /// The compute capability as `major·10 + minor` (90 for sm_90).
    pub(crate) fn sm(&self) -> u32 {
        let (major, minor) = self.info.compute_capability;
        (major.max(0) * 10 + minor.max(0)) as u32
    }

    /// The entry point `entry` of `family`, loading the family on first use: from the
    /// prebuilt CUBINs, the disk cache or a finished background compilation, else compiled by
    /// NVRTC now (or, when a background thread is compiling it, once that one finishes).
    pub(crate) fn function(
        &self,
        family: impl ModuleSpec,
        entry: &str,
    ) -> Result<CudaFunction, GpuDotError> {
        let loaded = self.module(family, true)?.expect("waited for");
        loaded
            .functions
            .get(entry)
            .cloned()
            .ok_or(GpuDotError::Compile {
                kernel: family.name(),
                log: format!("the module has no entry point {entry}"),
            })
    }

    /// Loads `family` (waiting for NVRTC if it must be compiled) and says what its first use
    /// cost.
    pub(crate) fn load(&self, family: impl ModuleSpec) -> Result<ModuleLoad, GpuDotError> {
        Ok(self.module(family, true)?.expect("waited for").cost.clone())
    }

    /// Makes `family` ready without waiting on NVRTC: loads it when it is prebuilt, cached or
    /// compiled already, else starts its compilation on a background thread (once) and says
    /// so. An NVRTC failure is the typed [`GpuDotError::Compile`] with NVRTC's log.
    pub(crate) fn prepare(&self, family: impl ModuleSpec) -> Result<Readiness, GpuDotError> {
        Ok(match self.module(family, false)? {
            Some(_) => Readiness::Ready,
            None => Readiness::Compiling,
        })
    }

    /// The loaded module of `family`, loading it if need be; `None` when it must be compiled
    /// and `wait` is false (its compilation then runs on a background thread).
    fn module(
        &self,
        family: impl ModuleSpec,
        wait: bool,
    ) -> Result<Option<&LoadedModule>, GpuDotError> {
        let i = family.slot();
        if let Some(e) = self.rejected[i].get() {
            return Err(e.clone());
        }
        if let Some(loaded) = self.modules[i].get() {
            return Ok(Some(loaded));
        }
        let arch = family.arch(&self.arch);
        let request = Request {
            family: family.name(),
            source: family.source(),
            options: nvrtc_options(&arch),
            arch,
        };
        let quick = self.load_quick(family, &request);
        let compiled = match quick {
            Some(Ok(loaded)) => return Ok(Some(self.keep(i, loaded))),
            // A cached CUBIN the driver refused, or none: the compile queue's CUBIN, compiled
            // now, or already by another thread (finished, or waited for).
            Some(Err(_)) | None if wait => request.compile(),
            Some(Err(_)) | None => match request.compile_in_background() {
                Some(outcome) => outcome,
                None => return Ok(None),
            },
        };
        let outcome = compiled.and_then(|(cubin, nvrtc_ms)| {
            let start = Instant::now();
            let mut loaded = self.link(family, cubin.to_vec())?;
            loaded.cost.nvrtc_ms = nvrtc_ms;
            loaded.cost.load_ms = start.elapsed().as_secs_f64() * 1e3;
            Ok(loaded)
        });
        match outcome {
            Ok(loaded) => Ok(Some(self.keep(i, loaded))),
            Err(e) => {
                if matches!(e, GpuDotError::Compile { .. }) {
                    let _ = self.rejected[i].set(e.clone());
                }
                Err(e)
            }
        }
    }

    /// Stores a loaded module in slot `i` (or keeps the one another thread stored first).
    fn keep(&self, i: usize, loaded: LoadedModule) -> &LoadedModule {
        let _ = self.modules[i].set(loaded);
        self.modules[i].get().expect("set above")
    }

    /// Loads `family` without NVRTC: its prebuilt CUBIN, else its disk-cache entry. `None` when
    /// there is none (a finished compilation is the compile queue's to give); an error when the
    /// driver refused the cached one.
    fn load_quick(
        &self,
        family: impl ModuleSpec,
        request: &Request,
    ) -> Option<Result<LoadedModule, GpuDotError>> {
        let start = Instant::now();
        let ms = |since: Instant| since.elapsed().as_secs_f64() * 1e3;
        let refused = &self.prebuilt_refused[family.slot()];
        let image = prebuilt::find(request.family, &request.source, &request.arch)
            .filter(|_| crate::device::overrides::prebuilt_allowed())
            .filter(|_| !refused.load(Ordering::Relaxed))
            .and_then(|image| image.cubin());
        if let Some(cubin) = image {
            match self.link(family, cubin) {
                Ok(mut loaded) => {
                    log::debug!(
                        "the {} kernels for {}: prebuilt (NVRTC {})",
                        request.family,
                        request.arch,
                        prebuilt::NVRTC_VERSION
                    );
                    loaded.cost.prebuilt = true;
                    loaded.cost.load_ms = ms(start);
                    return Some(Ok(loaded));
                }
                // The driver refuses the shipped CUBIN (an older driver, say): never offered
                // again on this context; the disk cache or NVRTC serve instead.
                Err(e) => {
                    log::info!(
                        "the driver refused the prebuilt {} kernels ({e}); compiling them",
                        request.family
                    );
                    refused.store(true, Ordering::Relaxed);
                }
            }
        }
        let entry = cache::Entry::for_module(
            request.family,
            &request.source,
            &request.options,
            &request.arch,
        );
        if let Some(cubin) = entry.as_ref().and_then(|e| e.read()) {
            return Some(self.link(family, cubin).map(|mut loaded| {
                loaded.cost.cached = true;
                loaded.cost.load_ms = ms(start);
                loaded
            }));
        }
        None
    }

    /// Loads `cubin` as `family`'s module and looks up its entry points.
    fn link(&self, family: impl ModuleSpec, cubin: Vec<u8>) -> Result<LoadedModule, GpuDotError> {
        let module = self
            .ctx
            .load_module(Ptx::from_binary(cubin))
            .map_err(GpuDotError::at("loading a compiled module"))?;
        let mut functions = HashMap::new();
        for entry in family.entries(self.sm()) {
            let f = module
                .load_function(&entry)
                .map_err(GpuDotError::at("looking up a kernel entry point"))?;
            if let Some(bytes) = family.shared_bytes(&entry) {
                f.set_attribute(
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    bytes as i32,
                )
                .map_err(GpuDotError::at("raising a kernel's shared-memory limit"))?;
            }
            functions.insert(entry, f);
        }
        Ok(LoadedModule {
            _module: module,
            functions,
            cost: ModuleLoad {
                family: family.name(),
                prebuilt: false,
                cached: false,
                nvrtc_ms: 0.0,
                load_ms: 0.0,
            },
        })
    }

    /// A stream for one product, returned to the pool when the guard drops.
    pub(crate) fn stream(&self) -> Result<PooledStream<'_>, GpuDotError> {
        let pooled = self.streams.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let stream = match pooled {
            Some(s) => s,
            None => self
                .ctx
                .new_stream()
                .map_err(GpuDotError::at("creating a stream"))?,
        };
        Ok(PooledStream {
            gpu: self,
            stream: Some(stream),
        })
    }
}

/// A pair of timing events measuring device time of work enqueued on a stream.
pub(crate) struct Stopwatch {
    start: CudaEvent,
    end: CudaEvent,
}

impl Stopwatch {
    pub(crate) fn new(gpu: &Gpu) -> Result<Stopwatch, GpuDotError> {
        let event = || {
            gpu.ctx
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(GpuDotError::at("creating an event"))
        };
        Ok(Stopwatch {
            start: event()?,
            end: event()?,
        })
    }

    /// Milliseconds of device time taken by what `enqueue` puts on `stream`.
    pub(crate) fn time(
        &self,
        stream: &CudaStream,
        enqueue: impl FnOnce() -> Result<(), GpuDotError>,
    ) -> Result<f32, GpuDotError> {
        let record = GpuDotError::at("recording an event");
        self.start.record(stream).map_err(&record)?;
        enqueue()?;
        self.end.record(stream).map_err(&record)?;
        self.end
            .synchronize()
            .map_err(GpuDotError::at("waiting for an event"))?;
        self.start
            .elapsed_ms(&self.end)
            .map_err(GpuDotError::at("reading an event"))
    }
}

/// A stream borrowed from the context's pool.
pub(crate) struct PooledStream<'a> {
    gpu: &'a Gpu,
    stream: Option<Arc<CudaStream>>,
}

impl std::ops::Deref for PooledStream<'_> {
    type Target = Arc<CudaStream>;
    fn deref(&self) -> &Arc<CudaStream> {
        self.stream.as_ref().expect("present until drop")
    }
}

impl Drop for PooledStream<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.stream.take() {
            self.gpu
                .streams
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(s);
        }
    }
}

//! The CUDA contexts, one per device used: each made on the device's first use, shared by
//! every thread, rebuilt after a fault.
//!
//! It holds the cudarc context, a pool of streams, the device's properties and the module
//! cache: each kernel family is compiled by NVRTC to a CUBIN for the device's own architecture
//! the first time it is needed, and never again in the process; the on-disk cache
//! (`cache.rs`) lets a later process load the CUBIN instead of compiling it again.
//!
//! Loading modules is [`modules`](super::modules)' work, finding the libraries
//! [`libraries`](super::libraries)', and the exported [`Device`](crate::Device) API
//! [`api`](super::api)'s.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use cudarc::driver::{CudaContext, CudaFunction, CudaStream};

use crate::device::libraries::device_count;
use crate::device::modules::{ModuleLoad, ModuleSpec, Modules, Readiness};
use crate::error::GpuDotError;
use crate::host::staging::PinnedBuf;

/// The bytes of a buffer from [`Gpu::take_small_pinned`].
pub(crate) const SMALL_PINNED: usize = 256;

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

/// Whether device `ordinal` is known to be unusable for the rest of the process, told without
/// allocating: its context could not be made, so that [`gpu_on`] returns
/// [`GpuDotError::NoDevice`] (with a clone of the reason) every time, and no other device's
/// faulted context waits for the rebuild that [`gpu_on`] would make first. `false` for a device
/// not tried yet, whose first [`gpu_on`] makes its context.
pub(crate) fn known_unusable(ordinal: usize) -> bool {
    let lock = |dev: &'static DeviceSlot| dev.slot.lock().unwrap_or_else(|p| p.into_inner());
    let Some(dev) = DEVICES.get(ordinal) else {
        return false;
    };
    if !matches!(*lock(dev), Some(Err(_))) {
        return false;
    }
    !DEVICES.iter().enumerate().any(|(other, dev)| {
        other != ordinal && dev.faulted.load(Ordering::Acquire) && matches!(*lock(dev), Some(Ok(_)))
    })
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

/// The context in use on device `ordinal`, if one is made; never makes or rebuilds one, and
/// locks that device's slot alone.
pub(crate) fn live_on(ordinal: usize) -> Option<Arc<Gpu>> {
    let dev = DEVICES.get(ordinal)?;
    match &*dev.slot.lock().unwrap_or_else(|p| p.into_inner()) {
        Some(Ok(gpu)) => Some(gpu.clone()),
        _ => None,
    }
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

    /// Whether this device's context has faulted (and waits for its rebuild).
    pub(crate) fn faulted(&self) -> bool {
        DEVICES[self.info.ordinal].faulted.load(Ordering::Acquire)
    }

    /// Whether idle workspaces are kept for reuse on this device.
    pub(crate) fn keeps_idle(&self) -> bool {
        !self
            .idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// Frees the idle workspaces kept for reuse on this device (outside the pool's lock, as
    /// freeing waits for their streams); whether there were any.
    pub(crate) fn free_idle(&self) -> bool {
        let drained: Vec<_> = self
            .idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        !drained.is_empty()
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
pub(crate) fn rebuilds() -> usize {
    DEVICES
        .iter()
        .map(|d| d.rebuilds.load(Ordering::SeqCst))
        .sum()
}

/// How many times this process has rebuilt device `ordinal`'s context after a fault.
pub(crate) fn rebuilds_on(ordinal: usize) -> usize {
    DEVICES
        .get(ordinal)
        .map_or(0, |d| d.rebuilds.load(Ordering::SeqCst))
}

/// Where device memory lives: a device and the generation of the context it was made in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Home {
    pub(crate) ordinal: usize,
    pub(crate) generation: u64,
}

pub(crate) struct Gpu {
    /// Small page-locked buffers, for a few ints the host reads back while the device goes
    /// on (`take_small_pinned`); freed before the context (fields drop in order).
    small_pinned: Mutex<Vec<PinnedBuf>>,
    pub(crate) ctx: Arc<CudaContext>,
    /// Which context this is on its device (the device's generation count).
    pub(crate) generation: u64,
    pub(crate) info: DeviceInfo,
    /// The kernel families loaded on this context.
    modules: Modules,
    streams: Mutex<Vec<Arc<CudaStream>>>,
    /// Idle workspaces kept for reuse (the pipeline's, which alone knows their type); freed
    /// with the context.
    pub(crate) idle: Mutex<Vec<Box<dyn Any + Send>>>,
    /// The largest reusable buffers made so far.
    pub(crate) high_water: HighWater,
    /// Whether the device has unified addressing: kernels then reach page-locked host memory
    /// at its host address.
    unified_addressing: bool,
    /// Whether the device runs FP64 at half FP32's rate or better (the data-centre parts; the
    /// others run it at 1/32 or 1/64).
    fast_fp64: bool,
}

/// The largest reusable device buffer and page-locked staging ring a device has made (bytes):
/// reused buffers grow to them, so they settle at one size after a warm-up.
#[derive(Default)]
pub(crate) struct HighWater {
    pub(crate) device: AtomicUsize,
    pub(crate) pinned: AtomicUsize,
    /// The Karatsuba form's residues ([`crate::engine::args::Scratch`]), apart from `device`:
    /// tens of GiB at the largest sizes, they would size every other buffer up to them.
    pub(crate) residues: AtomicUsize,
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
        // A failed query leaves the feature unused.
        let unified_addressing = ctx
            .attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING,
            )
            .is_ok_and(|v| v == 1);
        let fast_fp64 = ctx
            .attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO,
            )
            .is_ok_and(|ratio| (1..=2).contains(&ratio));
        Ok(Gpu {
            unified_addressing,
            fast_fp64,
            modules: Modules::new(ctx.clone(), info.compute_capability),
            ctx,
            generation,
            info,
            streams: Mutex::new(Vec::new()),
            idle: Default::default(),
            high_water: HighWater::default(),
            small_pinned: Mutex::new(Vec::new()),
        })
    }

    /// A page-locked buffer of at least `SMALL_PINNED` bytes, for the caller alone until it
    /// gives it back (`give_small_pinned`): one kept from before, or a new one.
    pub(crate) fn take_small_pinned(&self) -> Result<PinnedBuf, GpuDotError> {
        let kept = self
            .small_pinned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop();
        match kept {
            Some(buf) => Ok(buf),
            None => PinnedBuf::new(&self.ctx, SMALL_PINNED),
        }
    }

    /// Keeps a buffer from `take_small_pinned` for the next caller; the giver has waited for
    /// the device's last copy into it.
    pub(crate) fn give_small_pinned(&self, buf: PinnedBuf) {
        self.small_pinned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(buf);
    }

    /// The compute capability kernels are chosen for: the device's, unless a test pretends
    /// otherwise (`__testing::pretend_compute_capability`).
    pub(crate) fn kernel_sm(&self) -> u32 {
        crate::device::overrides::pretended_sm().map_or(self.sm(), |sm| sm.min(self.sm()))
    }

    /// Whether the Ozaki split makes its residues in double arithmetic (three FP64 operations
    /// a residue, against about eight integer ones): on devices of sm_90 on, as kernels are
    /// chosen, whose FP64 runs at half FP32's rate or better. Elsewhere (so also where a test
    /// pretends an older device) it uses 32-bit integers.
    pub(crate) fn fast_fp64_split(&self) -> bool {
        self.fast_fp64 && self.kernel_sm() >= 90
    }

    /// Whether kernels may write page-locked host memory at its host address (unified
    /// addressing).
    pub(crate) fn maps_host(&self) -> bool {
        self.unified_addressing
    }

    /// The compute capability as `major·10 + minor` (90 for sm_90).
    pub(crate) fn sm(&self) -> u32 {
        let (major, minor) = self.info.compute_capability;
        (major.max(0) * 10 + minor.max(0)) as u32
    }

    /// The entry point `entry` of `family`, loading the family on first use (see
    /// [`Modules::function`]).
    pub(crate) fn function(
        &self,
        family: impl ModuleSpec,
        entry: &str,
    ) -> Result<CudaFunction, GpuDotError> {
        self.modules.function(family, entry)
    }

    /// Loads `family` and says what its first use cost (see [`Modules::load`]).
    pub(crate) fn load(&self, family: impl ModuleSpec) -> Result<ModuleLoad, GpuDotError> {
        self.modules.load(family)
    }

    /// Makes `family` ready without waiting on NVRTC (see [`Modules::prepare`]).
    pub(crate) fn prepare(&self, family: impl ModuleSpec) -> Result<Readiness, GpuDotError> {
        self.modules.prepare(family)
    }

    /// What each module loaded on this context so far cost on first use.
    pub(crate) fn module_loads(&self) -> Vec<ModuleLoad> {
        self.modules.loads()
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

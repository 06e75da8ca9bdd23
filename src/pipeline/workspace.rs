//! Workspaces: the streams, events, device buffers and page-locked staging rings one product
//! uses, kept in a bounded pool and reused, so that steady-state products allocate nothing.

use std::sync::{Arc, MutexGuard};

use cudarc::driver::sys::{CUdeviceptr, CUevent_flags};
use cudarc::driver::{result as driver, CudaContext, CudaEvent, CudaStream};

use crate::device::context::{self, Gpu};
use crate::engine::args::{self, DevBuf, Scratch};
use crate::error::GpuDotError;
use crate::host::staging::PinnedBuf;

use super::link::Stamp;

/// Idle workspaces kept for reuse.
const MAX_IDLE_WORKSPACES: usize = 64;
/// Page-locked bytes idle workspaces may hold together.
const MAX_IDLE_PINNED_BYTES: usize = 1 << 30;
/// Fraction (1/N) of device memory idle workspaces may hold together, but for one larger
/// workspace ([`give_back`]).
const IDLE_DEVICE_FRACTION: usize = 4;
/// Fraction (1/N) of device memory that must stay free for an idle workspace over
/// [`IDLE_DEVICE_FRACTION`] to be kept.
const LARGE_IDLE_FREE_FRACTION: usize = 8;

/// The three streams of a multi-panel product (copies up, kernels, copies down), and the
/// events that order them and tell the host when copies have landed.
pub(crate) struct Lanes {
    pub(crate) up: Arc<CudaStream>,
    pub(crate) compute: Arc<CudaStream>,
    pub(crate) down: Arc<CudaStream>,
    events: Vec<CudaEvent>,
    /// Timing events for a traced run's stamps, made on its first traced run.
    stamps: Vec<CudaEvent>,
}

impl Lanes {
    /// [`Lanes::events`], and with `timed` also the timing events of a traced run's stamps.
    pub(crate) fn events_and_stamps(
        &mut self,
        gpu: &Gpu,
        n: usize,
        timed: bool,
    ) -> Result<(&[CudaEvent], Option<&[CudaEvent]>), GpuDotError> {
        while timed && self.stamps.len() < Stamp::COUNT {
            self.stamps.push(
                gpu.ctx
                    .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                    .map_err(GpuDotError::at("creating a timing event"))?,
            );
        }
        self.events(gpu, n)?;
        Ok((&self.events[..n], timed.then_some(&self.stamps[..])))
    }

    /// At least `n` events, made once and kept.
    pub(crate) fn events(&mut self, gpu: &Gpu, n: usize) -> Result<&[CudaEvent], GpuDotError> {
        while self.events.len() < n {
            self.events.push(
                gpu.ctx
                    .new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
                    .map_err(GpuDotError::at("creating an event"))?,
            );
        }
        Ok(&self.events[..n])
    }

    fn sync_all(&self) -> Result<(), GpuDotError> {
        for s in [&self.up, &self.compute, &self.down] {
            s.synchronize()
                .map_err(GpuDotError::at("waiting for the product"))?;
        }
        Ok(())
    }
}

/// Device buffers: B, two slots each for panels of A and C, the unscaled product T (for the
/// general form's epilogue) and the split-K workspace. Raw bytes, seen typed by each product,
/// so that one pool serves every element type.
#[derive(Default)]
pub(crate) struct DevBufs {
    pub(crate) b: Option<DevBuf>,
    /// B expanded on the device from the complex parts that went up to `b`.
    pub(crate) b_wide: Option<DevBuf>,
    pub(crate) a: [Option<DevBuf>; 2],
    pub(crate) c: [Option<DevBuf>; 2],
    pub(crate) t: Option<DevBuf>,
    /// The split-K and Ozaki workspace, and the Karatsuba form's residues.
    pub(crate) scratch: Scratch,
    /// B of a product split across devices, which the other devices copy from.
    pub(crate) peer: Option<PeerBytes>,
}

impl DevBufs {
    fn bytes(&self) -> usize {
        let len = |b: &Option<DevBuf>| b.as_ref().map_or(0, DevBuf::bytes);
        len(&self.b)
            + len(&self.b_wide)
            + self.a.iter().chain(&self.c).map(len).sum::<usize>()
            + len(&self.t)
            + self.scratch.bytes()
            + self.peer.as_ref().map_or(0, |p| p.bytes)
    }
}

/// Device memory from `cuMemAlloc` rather than the stream-ordered pool the other buffers come
/// from: peer links reach it once peer access is on, where the pool's memory would need access
/// grants of its own (and copies between devices would go through the host). Freed on drop.
pub(crate) struct PeerBytes {
    ptr: CUdeviceptr,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

impl PeerBytes {
    pub(crate) fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }
}

impl Drop for PeerBytes {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `ptr` came from `cuMemAlloc` in this context (now current); the
            // workspace that owns it is idle (its streams synchronised, see `Workspace`'s
            // drop) and nothing refers to the memory after this. A failure (a faulted
            // context) leaves the memory to the context's teardown.
            let _ = unsafe { driver::free_sync(self.ptr) };
        }
    }
}

/// The page-locked staging rings, one per direction.
#[derive(Default)]
pub(crate) struct Staging {
    pub(crate) up: Option<PinnedBuf>,
    pub(crate) down: Option<PinnedBuf>,
}

impl Staging {
    fn bytes(&self) -> usize {
        [&self.up, &self.down]
            .iter()
            .map(|b| b.as_ref().map_or(0, PinnedBuf::bytes))
            .sum()
    }
}

/// Elements each buffer of a product must hold (0: not needed), `width` bytes each.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Needs {
    pub(crate) width: usize,
    pub(crate) b: usize,
    /// B as the product reads it, where the device expands it from what went up.
    pub(crate) b_wide: usize,
    pub(crate) a: usize,
    pub(crate) a_slots: usize,
    pub(crate) c: usize,
    pub(crate) c_slots: usize,
    pub(crate) t: usize,
    pub(crate) up_ring: usize,
    pub(crate) down_ring: usize,
}

/// Everything one product needs, kept across products.
pub(crate) struct Workspace {
    pub(crate) lanes: Lanes,
    pub(crate) dev: DevBufs,
    pub(crate) staging: Staging,
}

impl Workspace {
    fn new(gpu: &Gpu) -> Result<Workspace, GpuDotError> {
        let stream = || {
            gpu.ctx
                .new_stream()
                .map_err(GpuDotError::at("creating a stream"))
        };
        Ok(Workspace {
            lanes: Lanes {
                up: stream()?,
                compute: stream()?,
                down: stream()?,
                events: Vec::new(),
                stamps: Vec::new(),
            },
            dev: DevBufs::default(),
            staging: Staging::default(),
        })
    }

    /// Grows the buffers to `needs` (never shrinks them). Device buffers are allocated on the
    /// compute stream, which is then synchronised, so that the other streams may use them.
    pub(crate) fn provide(&mut self, gpu: &Gpu, needs: &Needs) -> Result<(), GpuDotError> {
        let stream = &self.lanes.compute;
        let mut allocated = false;
        let width = needs.width;
        let mut grow = |slot: &mut Option<DevBuf>, len: usize| {
            let bytes = len * width;
            if bytes > 0 && slot.as_ref().is_none_or(|b| b.bytes() < bytes) {
                args::scratch(stream, slot, bytes, &gpu.high_water.device)?;
                allocated = true;
            }
            Ok::<(), GpuDotError>(())
        };
        grow(&mut self.dev.b, needs.b)?;
        grow(&mut self.dev.b_wide, needs.b_wide)?;
        for s in 0..needs.a_slots {
            grow(&mut self.dev.a[s], needs.a)?;
        }
        for s in 0..needs.c_slots {
            grow(&mut self.dev.c[s], needs.c)?;
        }
        grow(&mut self.dev.t, needs.t)?;
        if allocated {
            stream
                .synchronize()
                .map_err(GpuDotError::at("waiting for device allocations"))?;
        }
        pinned(gpu, &mut self.staging.up, needs.up_ring * width)?;
        pinned(gpu, &mut self.staging.down, needs.down_ring * width)?;
        Ok(())
    }

    /// A peer-reachable device buffer ([`PeerBytes`]) of at least `bytes` bytes, kept with
    /// the workspace (grown, never shrunk).
    pub(crate) fn peer_bytes(
        &mut self,
        gpu: &Gpu,
        bytes: usize,
    ) -> Result<CUdeviceptr, GpuDotError> {
        if self.dev.peer.as_ref().is_none_or(|p| p.bytes < bytes) {
            // The old buffer first, then the larger one.
            self.dev.peer = None;
            let len = args::grown(&gpu.high_water.device, bytes.max(1));
            gpu.ctx
                .bind_to_thread()
                .map_err(GpuDotError::at("making a device current"))?;
            // SAFETY: the device's context is current on this thread (bound above); the
            // memory is uninitialised and its users write it before reading it.
            let ptr = unsafe { driver::malloc_sync(len) }
                .map_err(|e| GpuDotError::driver("allocating device memory", len, e))?;
            self.dev.peer = Some(PeerBytes {
                ptr,
                bytes: len,
                ctx: gpu.ctx.clone(),
            });
        }
        Ok(self.dev.peer.as_ref().expect("provided above").ptr())
    }

    fn device_bytes(&self) -> usize {
        self.dev.bytes()
    }

    fn pinned_bytes(&self) -> usize {
        self.staging.bytes()
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        // The staging rings may only be freed once no copy uses them. A workspace that saw an
        // error may still have copies in flight; if even waiting fails (the context is
        // broken), the rings are leaked rather than freed under a copy.
        if self.lanes.sync_all().is_err() {
            if let Some(b) = self.staging.up.take() {
                b.leak();
            }
            if let Some(b) = self.staging.down.take() {
                b.leak();
            }
        }
    }
}

/// A staging ring of at least `bytes` bytes in `slot`, grown when too small.
fn pinned(gpu: &Gpu, slot: &mut Option<PinnedBuf>, bytes: usize) -> Result<(), GpuDotError> {
    if bytes > 0 && slot.as_ref().is_none_or(|p| p.bytes() < bytes) {
        *slot = None;
        *slot = Some(PinnedBuf::new(
            &gpu.ctx,
            args::grown(&gpu.high_water.pinned, bytes),
        )?);
    }
    Ok(())
}

/// A device's idle workspaces: the context's idle pool, which holds this module's workspaces
/// alone.
fn idle(gpu: &Gpu) -> MutexGuard<'_, Vec<Box<dyn std::any::Any + Send>>> {
    gpu.idle.lock().unwrap_or_else(|p| p.into_inner())
}

/// A pooled workspace.
fn unbox(ws: &dyn std::any::Any) -> &Workspace {
    ws.downcast_ref()
        .expect("the idle pool holds workspaces alone")
}

/// An idle workspace of the device, or a new one.
pub(crate) fn take(gpu: &Gpu) -> Result<Workspace, GpuDotError> {
    match idle(gpu).pop() {
        Some(ws) => Ok(*ws
            .downcast::<Workspace>()
            .expect("the idle pool holds workspaces alone")),
        None => Workspace::new(gpu),
    }
}

/// Returns a workspace whose work is complete to the pool, or frees it when the pool is full
/// or the context has faulted.
///
/// Idle workspaces keep at most a quarter of the device's memory together, but for one that
/// is larger on its own (the emulation of a complex 16384³ product needs 21–42 GiB): it is kept
/// while the others fit the quarter and an eighth of the device's memory is still free.
/// Freeing it would have the next such product map all of it again, tens of milliseconds. The
/// crate's own allocations that find the device full free the idle workspaces and try again
/// ([`with_room`](crate::engine::args::with_room)); [`trim`] frees them for anyone else.
pub(crate) fn give_back(gpu: &Gpu, ws: Workspace) {
    if gpu.faulted() {
        return drop(ws);
    }
    let mut pool = idle(gpu);
    let pinned: usize = pool.iter().map(|w| unbox(w.as_ref()).pinned_bytes()).sum();
    let sizes = pool.iter().map(|w| unbox(w.as_ref()).device_bytes());
    let device = sizes.clone().sum::<usize>() + ws.device_bytes();
    let largest = sizes.max().unwrap_or(0).max(ws.device_bytes());
    let quarter = gpu.info.total_memory / IDLE_DEVICE_FRACTION;
    let margin = gpu.info.total_memory / LARGE_IDLE_FREE_FRACTION;
    // Free memory is asked of the driver (a query of microseconds) only for a pool over the
    // quarter, under the pool's lock so that two workspaces given back at once are weighed in
    // turn.
    if pool.len() < MAX_IDLE_WORKSPACES
        && pinned + ws.pinned_bytes() <= MAX_IDLE_PINNED_BYTES
        && room_for(device, largest, (quarter, margin), || {
            free_device_memory(gpu)
        })
    {
        pool.push(Box::new(ws));
    } else {
        drop(pool);
        drop(ws);
    }
}

/// Whether idle workspaces may hold `all` bytes of device memory together, the largest of
/// them `largest`, `budget` being the share of device memory they may hold: within it, or,
/// for one workspace over it, while the others are within it and the device has `margin`
/// bytes free (`free`, asked only then).
fn room_for(
    all: usize,
    largest: usize,
    (budget, margin): (usize, usize),
    free: impl FnOnce() -> Option<usize>,
) -> bool {
    all <= budget || (all - largest <= budget && free().is_some_and(|free| free >= margin))
}

/// The device's free memory, as the driver counts it (memory the stream-ordered pool holds
/// counts as used); `None` where the driver does not say.
fn free_device_memory(gpu: &Gpu) -> Option<usize> {
    gpu.ctx.mem_get_info().ok().map(|(free, _)| free)
}

/// Idle workspaces in the device's pool.
pub(crate) fn idle_count(gpu: &Gpu) -> usize {
    idle(gpu).len()
}

/// Frees the device's idle workspaces.
pub(crate) fn trim_device(gpu: &Gpu) {
    gpu.free_idle();
}

/// Frees the device and page-locked memory that idle workspaces keep for reuse, on every
/// device, and the spare result (see [`retained_host_memory`]); the next products allocate
/// them again. Products running on other threads are not affected.
pub fn trim() {
    for gpu in context::live() {
        trim_device(&gpu);
    }
    crate::host::fresh::trim_spare();
}

/// Bytes of ordinary (pageable) host memory the crate keeps between products: the spare
/// result, the next large result of a loop of products made ready in the background (see
/// `GPU_DOT_SPARE_RESULT`); freed by [`trim`].
pub fn retained_host_memory() -> usize {
    crate::host::fresh::spare_bytes()
}

/// Bytes of device memory and of page-locked host memory that idle workspaces keep for reuse,
/// summed over every device (freed by [`trim`]).
pub fn retained_memory() -> (usize, usize) {
    context::live()
        .iter()
        .map(|gpu| retained_by(gpu))
        .fold((0, 0), |(d, p), (d2, p2)| (d + d2, p + p2))
}

/// [`retained_memory`] of one device.
pub(crate) fn retained_by(gpu: &Gpu) -> (usize, usize) {
    let pool = idle(gpu);
    (
        pool.iter().map(|w| unbox(w.as_ref()).device_bytes()).sum(),
        pool.iter().map(|w| unbox(w.as_ref()).pinned_bytes()).sum(),
    )
}

impl crate::Device {
    /// Frees the device and page-locked memory that idle workspaces of this device keep for
    /// reuse (see [`crate::trim`]).
    pub fn trim(self) {
        if let Some(gpu) = self.live() {
            trim_device(&gpu);
        }
    }

    /// Bytes of device memory and of page-locked host memory that idle workspaces of this
    /// device keep for reuse.
    pub fn retained_memory(self) -> (usize, usize) {
        self.live().map_or((0, 0), |gpu| retained_by(&gpu))
    }
}

#[cfg(test)]
mod tests {
    use super::room_for;

    const GIB: usize = 1 << 30;

    #[test]
    fn idle_workspaces_keep_a_quarter_and_one_larger_while_an_eighth_is_free() {
        let limits = (20 * GIB, 10 * GIB);
        let never = || -> Option<usize> { panic!("free memory asked within the budget") };
        // Within the quarter, free memory is not asked.
        assert!(room_for(7 * GIB, 7 * GIB, limits, never));
        assert!(room_for(20 * GIB, 10 * GIB, limits, never));
        // One workspace over it, alone or beside smaller ones within it: kept while an eighth
        // of the device is free, not otherwise.
        assert!(room_for(27 * GIB, 27 * GIB, limits, || Some(37 * GIB)));
        assert!(room_for(45 * GIB, 42 * GIB, limits, || Some(10 * GIB)));
        assert!(room_for(28 * GIB, 27 * GIB, limits, || Some(30 * GIB)));
        assert!(!room_for(27 * GIB, 27 * GIB, limits, || Some(10 * GIB - 1)));
        assert!(!room_for(48 * GIB, 27 * GIB, limits, || Some(30 * GIB)));
        // Nor where the driver does not say.
        assert!(!room_for(27 * GIB, 27 * GIB, limits, || None));
        // Nor two over the quarter.
        assert!(!room_for(54 * GIB, 27 * GIB, limits, || Some(40 * GIB)));
    }
}

//! Host memory page-locked in place (`cuMemHostRegister`) for the lifetime of a
//! [`PinnedArray`](crate::PinnedArray), and the lookup that lets a transfer copy straight from
//! or into it instead of through staging.
//!
//! The lookup is a hint of speed, not of safety: an asynchronous copy from or into memory the
//! driver does not hold page-locked is still correct (the driver stages it and returns once the
//! host side is done with), only slower. A range counts as registered only while the context
//! that registered it is the device's current one (a device reset after a fault drops every
//! registration with its context).

use std::sync::{Arc, RwLock};

use cudarc::driver::sys;

use crate::device::context;
use crate::error::GpuDotError;

/// A registered range, or one whose registration failed (kept so that products through it can
/// say why they were staged).
struct Region {
    start: usize,
    end: usize,
    /// The device whose context registered it, and that context's generation.
    ordinal: usize,
    generation: u64,
    /// Why it is not page-locked, where registration failed.
    failed: Option<Arc<str>>,
    /// Made by the tests without a device (`simulate_locked`, `simulate_refused`): counted
    /// as page-locked unless `failed`.
    simulated: bool,
}

/// Every live [`Registration`]'s range (a few at most, in practice: one per pinned array).
static REGIONS: RwLock<Vec<Region>> = RwLock::new(Vec::new());

fn regions() -> std::sync::RwLockReadGuard<'static, Vec<Region>> {
    REGIONS.read().unwrap_or_else(|p| p.into_inner())
}

fn regions_mut() -> std::sync::RwLockWriteGuard<'static, Vec<Region>> {
    REGIONS.write().unwrap_or_else(|p| p.into_inner())
}

/// What a transfer's host memory is, for the copy that reads or writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Memory {
    /// Page-locked in place: copied straight by DMA.
    Locked,
    /// Inside a pinned array whose registration failed (the reason): staged.
    Unlocked(Arc<str>),
    /// Ordinary memory: staged.
    Pageable,
}

/// What `bytes` bytes at `addr` are, for a product on the context `on` (its device's ordinal
/// and generation): [`Memory::Locked`] where one registration made by that very context covers
/// them all. A registration made by another device's context is page-locked for this one too,
/// but a reset of its own device would drop it under this product's copies, which that reset
/// does not wait for: such memory is staged.
pub(crate) fn memory(addr: usize, bytes: usize, on: (usize, u64)) -> Memory {
    let regions = regions();
    if regions.is_empty() {
        return Memory::Pageable;
    }
    let end = addr.saturating_add(bytes);
    let Some(r) = regions.iter().find(|r| r.start <= addr && end <= r.end) else {
        return Memory::Pageable;
    };
    match &r.failed {
        Some(why) => Memory::Unlocked(why.clone()),
        None if r.simulated => Memory::Locked,
        None if (r.ordinal, r.generation) == on => Memory::Locked,
        None if r.ordinal == on.0 => {
            Memory::Unlocked("the device was reset since the array was registered".into())
        }
        None => Memory::Unlocked(
            format!(
                "page-locked by device {}'s context, and this product runs on device {}",
                r.ordinal, on.0
            )
            .into(),
        ),
    }
}

/// A range page-locked in place, or recorded as not (see [`register`]); undone on drop.
#[derive(Debug)]
pub(crate) struct Registration {
    start: usize,
    end: usize,
    ordinal: usize,
    generation: u64,
    error: Option<GpuDotError>,
}

impl Registration {
    /// Why the range is not page-locked, if it is not.
    pub(crate) fn error(&self) -> Option<&GpuDotError> {
        self.error.as_ref()
    }

    /// Whether the range is page-locked now (registered, and its context not reset since).
    pub(crate) fn locked(&self) -> bool {
        self.start < self.end
            && self.error.is_none()
            && *context::generation(self.ordinal) == self.generation
    }
}

/// Page-locks `bytes` bytes at `ptr` in place, with the default device's context, for every
/// context (`CU_MEMHOSTREGISTER_PORTABLE`). Never fails: where the driver refuses (no device,
/// a locked-memory limit, memory registered already), the registration records why, and the
/// range is staged like any other memory.
///
/// # Safety
/// `ptr..ptr + bytes` is memory that the caller owns, which stays allocated, and is not
/// moved or reallocated, until the registration is dropped.
pub(crate) unsafe fn register(ptr: *mut u8, bytes: usize) -> Registration {
    let (start, end) = (ptr as usize, ptr as usize + bytes);
    let mut reg = Registration {
        start,
        end,
        ordinal: 0,
        generation: 0,
        error: None,
    };
    if bytes == 0 {
        // Nothing to lock, and nothing any copy would read or write.
        return reg;
    }
    // SAFETY: the caller's contract, passed on.
    match unsafe { lock(ptr, bytes) } {
        Ok((ordinal, generation)) => (reg.ordinal, reg.generation) = (ordinal, generation),
        Err(e) => {
            log::debug!("gpu-dot: a pinned array of {bytes} bytes is staged: {e}");
            reg.error = Some(e);
        }
    }
    regions_mut().push(Region {
        start,
        end,
        ordinal: reg.ordinal,
        generation: reg.generation,
        failed: reg.error.as_ref().map(|e| Arc::from(e.to_string())),
        simulated: false,
    });
    reg
}

/// Pinned arrays alive now, registered or not: the tests read it to see that none outlives
/// its owner.
pub fn live_registrations() -> usize {
    regions().iter().filter(|r| !r.simulated).count()
}

/// Counts `bytes` bytes at `ptr` as page-locked until the guard is dropped, without a device:
/// for tests whose copies a simulated device makes.
#[cfg(test)]
pub(crate) fn simulate_locked(ptr: *const u8, bytes: usize) -> Simulated {
    simulate(ptr, bytes, None)
}

/// Records `bytes` bytes at `ptr` as a pinned array whose registration failed for `why`, until
/// the guard is dropped.
#[cfg(test)]
pub(crate) fn simulate_refused(ptr: *const u8, bytes: usize, why: &str) -> Simulated {
    simulate(ptr, bytes, Some(why.into()))
}

#[cfg(test)]
fn simulate(ptr: *const u8, bytes: usize, failed: Option<Arc<str>>) -> Simulated {
    let (start, end) = (ptr as usize, ptr as usize + bytes);
    regions_mut().push(Region {
        start,
        end,
        ordinal: 0,
        generation: 0,
        failed,
        simulated: true,
    });
    Simulated { start, end }
}

/// See [`simulate_locked`].
#[cfg(test)]
pub(crate) struct Simulated {
    start: usize,
    end: usize,
}

#[cfg(test)]
impl Drop for Simulated {
    fn drop(&mut self) {
        let mut regions = regions_mut();
        if let Some(i) = regions
            .iter()
            .position(|r| r.simulated && (r.start, r.end) == (self.start, self.end))
        {
            regions.swap_remove(i);
        }
    }
}

/// `cuMemHostRegister` on the default device's context: its ordinal and generation.
///
/// # Safety
/// As [`register`].
unsafe fn lock(ptr: *mut u8, bytes: usize) -> Result<(usize, u64), GpuDotError> {
    let gpu = context::gpu()?;
    gpu.ctx
        .bind_to_thread()
        .map_err(GpuDotError::at("binding the context"))?;
    // SAFETY: the range is memory the caller owns and keeps in place while registered (the
    // function's contract); the driver only pins its pages and maps them for DMA.
    let r =
        unsafe { sys::cuMemHostRegister_v2(ptr.cast(), bytes, sys::CU_MEMHOSTREGISTER_PORTABLE) };
    r.result()
        .map_err(|e| GpuDotError::driver("page-locking an array in place", bytes, e))?;
    Ok((gpu.info.ordinal, gpu.generation))
}

impl Drop for Registration {
    fn drop(&mut self) {
        {
            let mut regions = regions_mut();
            if let Some(i) = regions
                .iter()
                .position(|r| !r.simulated && r.start == self.start && r.end == self.end)
            {
                regions.swap_remove(i);
            }
        }
        if self.error.is_some() || self.start == self.end {
            return;
        }
        // The context that registered the range, if it is still the device's: found before
        // the generation's read lock is taken (a rebuild takes the device's slot, then that
        // lock), and never made or rebuilt here.
        let Some(gpu) = context::live_on(self.ordinal).filter(|g| g.generation == self.generation)
        else {
            return;
        };
        let current = context::generation(self.ordinal);
        if *current == self.generation && gpu.ctx.bind_to_thread().is_ok() {
            // SAFETY: the range was registered by this context, which the read guard keeps
            // from being reset meanwhile, and is still allocated (the owner drops the
            // registration before the memory); no copy uses it, since every product that read
            // or wrote it has returned (they borrow the owner), and a product returns only
            // once its copies are done.
            let _ = unsafe { sys::cuMemHostUnregister(self.start as *mut _) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The context the simulated products run on.
    const ON: (usize, u64) = (0, 0);

    #[test]
    fn a_range_is_locked_only_inside_one_registration() {
        let buf = vec![0u8; 4096];
        let p = buf.as_ptr();
        let at = |i: usize| p as usize + i;
        let _locked = simulate_locked(p, 1000);
        assert_eq!(memory(at(0), 1000, ON), Memory::Locked);
        assert_eq!(memory(at(10), 20, ON), Memory::Locked);
        // Reaching past its end, or starting before it: not locked.
        assert_eq!(memory(at(990), 20, ON), Memory::Pageable);
        assert_eq!(memory(at(2000), 8, ON), Memory::Pageable);
        // A refused neighbour says why, and a range across both is not locked.
        let _refused = simulate_refused(p.wrapping_add(1000), 1000, "RLIMIT_MEMLOCK");
        assert_eq!(
            memory(at(1500), 8, ON),
            Memory::Unlocked("RLIMIT_MEMLOCK".into())
        );
        assert_eq!(memory(at(900), 200, ON), Memory::Pageable);
    }

    #[test]
    fn dropped_registrations_are_forgotten() {
        let buf = [0u8; 64];
        let guard = simulate_locked(buf.as_ptr(), 64);
        assert_eq!(memory(buf.as_ptr() as usize, 64, ON), Memory::Locked);
        drop(guard);
        assert_eq!(memory(buf.as_ptr() as usize, 64, ON), Memory::Pageable);
        let guard = simulate_refused(buf.as_ptr(), 64, "no device");
        assert!(matches!(
            memory(buf.as_ptr() as usize, 8, ON),
            Memory::Unlocked(_)
        ));
        drop(guard);
        assert_eq!(memory(buf.as_ptr() as usize, 8, ON), Memory::Pageable);
    }

    #[test]
    fn an_empty_range_registers_nothing() {
        let before = live_registrations();
        let mut v: Vec<f32> = Vec::new();
        // SAFETY: zero bytes: nothing is registered.
        let reg = unsafe { register(v.as_mut_ptr().cast(), 0) };
        assert!(!reg.locked() && reg.error().is_none());
        assert_eq!(live_registrations(), before);
    }
}

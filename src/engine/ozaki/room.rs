//! The device memory an emulated product needs: its workspace and, in the Karatsuba form, the
//! residues' buffer, grown where they are kept between products, and made room for on a full
//! device by freeing what this product does not need.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use cudarc::driver::CudaStream;

use crate::device::context::Gpu;
use crate::engine::args::{grow_to, scratch, with_room, DevBuf, Scratch};

use super::passes::OzError;

/// `slot` grown to at least `bytes`, where the device has room for it once its idle
/// workspaces are freed (a larger one may sit idle while this product holds a smaller); else
/// [`OzError::Unavailable`]: the product runs natively, and the route report says the
/// emulation could not run. A buffer grows to the size `high_water` records (up to 4× what
/// this product needs, so that reused buffers settle at one size); where that does not fit,
/// it grows to this product's own size.
pub(super) fn room<'s>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    slot: &'s mut Option<DevBuf>,
    bytes: usize,
    high_water: &AtomicUsize,
) -> Result<&'s mut DevBuf, OzError> {
    if with_room(gpu, || {
        scratch(stream, &mut *slot, bytes, high_water).map(drop)
    })
    .is_err()
    {
        // Sized by no other product's record.
        let own = AtomicUsize::new(0);
        with_room(gpu, || scratch(stream, &mut *slot, bytes, &own).map(drop))
            .map_err(|_| OzError::Unavailable)?;
    }
    scratch(stream, slot, bytes, high_water).map_err(|_| OzError::Unavailable)
}

/// The workspace grown to `total` bytes and, for the Karatsuba form, the residues' buffer to
/// `early` (none for a real product), each by [`room`]. One workspace serves real and complex
/// products in turn, and neither buffer shrinks; so where the two do not fit together, the one
/// this product does not need at its size goes first: the residues where the workspace cannot
/// grow (a real product uses none, and a complex one has written none yet), and a workspace
/// grown past `total` by another product where the residues cannot. The residues' buffer grows
/// by its own record of sizes, so that a real product's workspace is not sized up to the
/// residues of a complex one. Where nothing fits, [`OzError::Unavailable`], before the guard
/// has run.
pub(super) fn provide(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    bufs: &mut Scratch,
    total: usize,
    early: usize,
) -> Result<(), OzError> {
    let high_water = &gpu.high_water;
    if room(gpu, stream, &mut bufs.ws, total, &high_water.device).is_err() {
        bufs.residues = None;
        room(gpu, stream, &mut bufs.ws, total, &high_water.device)?;
    }
    if early == 0 || room(gpu, stream, &mut bufs.residues, early, &high_water.residues).is_ok() {
        return Ok(());
    }
    if bufs.ws.as_ref().is_some_and(|w| w.bytes() > grow_to(total)) {
        // At this product's own size, sized by no other buffer's record.
        bufs.ws = None;
        room(gpu, stream, &mut bufs.ws, total, &AtomicUsize::new(0))?;
    }
    room(gpu, stream, &mut bufs.residues, early, &high_water.residues).map(drop)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::{Mutex, MutexGuard};

    use cudarc::driver::CudaSlice;

    use super::*;
    use crate::device::context;
    use crate::engine::args::grown;

    const MIB: usize = 1 << 20;

    /// One test at a time holds the device's memory.
    fn device_lock() -> MutexGuard<'static, ()> {
        static LOCK: Mutex<()> = Mutex::new(());
        LOCK.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Device memory held in chunks until dropped, leaving about `leave` bytes free (give or
    /// take one 2 MiB chunk).
    fn hold_all_but(gpu: &Gpu, stream: &Arc<CudaStream>, leave: usize) -> Vec<CudaSlice<u8>> {
        const MIN_CHUNK: usize = 2 * MIB;
        let mut held = Vec::new();
        let mut chunk = 1 << 30;
        while chunk >= MIN_CHUNK {
            let (free, _) = gpu.ctx.mem_get_info().expect("reading free device memory");
            if free <= leave + MIN_CHUNK {
                break;
            }
            let want = chunk.min(free - leave) / MIN_CHUNK * MIN_CHUNK;
            // SAFETY: the memory is never read or written; it is only held.
            match unsafe { stream.alloc::<u8>(want) } {
                Ok(buf) => held.push(buf),
                Err(_) => chunk /= 2,
            }
            stream.synchronize().expect("synchronizing the stream");
        }
        held
    }

    /// What `room` or `provide` gave.
    fn what<T: std::fmt::Debug>(got: &Result<T, OzError>) -> String {
        match got {
            Ok(v) => format!("Ok({v:?})"),
            Err(OzError::Unavailable) => "Unavailable".into(),
            Err(OzError::Guarded(_)) => "Guarded".into(),
            Err(OzError::Gpu(e)) => format!("Gpu({e})"),
        }
    }

    /// The device, its stream and no idle workspace kept on it.
    fn device() -> (Arc<Gpu>, Arc<CudaStream>) {
        let gpu = context::gpu().expect("a CUDA GPU");
        let stream = gpu.ctx.new_stream().expect("creating a stream");
        gpu.free_idle();
        (gpu, stream)
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn a_recorded_size_too_large_for_the_device_gives_way_to_the_products_own() {
        let _lock = device_lock();
        let (gpu, stream) = device();
        let bytes = 256 * MIB;
        let record = AtomicUsize::new(4 * bytes);
        assert_eq!(
            grown(&record, bytes),
            4 * bytes,
            "the record sizes the buffer"
        );

        let held = hold_all_but(&gpu, &stream, 2 * bytes);
        // SAFETY: never read or written; dropped at once where it was made.
        let recorded_fits = unsafe { stream.alloc::<u8>(4 * bytes) }.is_ok();
        assert!(
            !recorded_fits,
            "the recorded size must not fit for this test"
        );
        let mut slot = None;
        let got = room(&gpu, &stream, &mut slot, bytes, &record).map(|b| b.bytes());
        assert!(
            matches!(got, Ok(b) if b == bytes),
            "room at the product's own size: {}",
            what(&got)
        );
        assert_eq!(
            record.load(Ordering::Relaxed),
            4 * bytes,
            "the record is kept"
        );

        // Where not even the product's own size fits, the emulation is unavailable.
        drop(slot);
        let more = hold_all_but(&gpu, &stream, bytes / 2);
        let mut slot = None;
        let got = room(&gpu, &stream, &mut slot, bytes, &record).map(|b| b.bytes());
        assert!(matches!(got, Err(OzError::Unavailable)), "{}", what(&got));
        assert!(slot.is_none());
        drop((more, held));
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn residues_that_do_not_fit_take_the_room_of_a_workspace_grown_past_the_product() {
        let _lock = device_lock();
        let (gpu, stream) = device();
        let (total, early) = (256 * MIB, 512 * MIB);
        let mut bufs = Scratch::default();
        // A workspace another product grew to four times this one's.
        let own = AtomicUsize::new(0);
        scratch(&stream, &mut bufs.ws, 4 * total, &own).expect("the larger workspace");

        let held = hold_all_but(&gpu, &stream, early - 64 * MIB);
        let got = provide(&gpu, &stream, &mut bufs, total, early);
        assert!(got.is_ok(), "room for both buffers: {}", what(&got));
        let ws = bufs.ws.as_ref().map(DevBuf::bytes);
        let residues = bufs.residues.as_ref().map(DevBuf::bytes);
        assert_eq!(
            ws,
            Some(grow_to(total)),
            "the workspace at this product's size"
        );
        assert!(residues >= Some(early), "residues {residues:?}");

        // Where the workspace cannot grow beside the residues, the residues go first; here the
        // workspace then fits and the residues do not, so the emulation is unavailable.
        drop(held);
        bufs.ws = None;
        let held = hold_all_but(&gpu, &stream, total / 2);
        let larger = 384 * MIB;
        let got = provide(&gpu, &stream, &mut bufs, larger, early);
        assert!(matches!(got, Err(OzError::Unavailable)), "{}", what(&got));
        assert!(
            bufs.residues.is_none(),
            "the residues were freed for the workspace"
        );
        let ws = bufs.ws.as_ref().map(DevBuf::bytes);
        assert!(
            ws >= Some(larger),
            "the workspace grew in their room: {ws:?}"
        );
        drop(held);
    }
}

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

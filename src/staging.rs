//! Host side of the transfers: page-locked staging buffers and the multi-threaded copies that
//! pack any ndarray view into them and unpack results out of them.
//!
//! The driver copies page-locked ("pinned") memory by DMA at full link speed and
//! asynchronously; pageable memory it first copies through a bounce buffer of its own, at a
//! fifth of the speed and blocking the caller. So every transfer goes through a
//! [`PinnedBuf`]: the host threads copy the view into it (packing strided views on the way),
//! and the copy engine moves it while the host prepares the next piece.

use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{result, CudaContext, CudaEvent, CudaStream};
use ndarray::{ArrayView2, ArrayViewMut2, Axis};
use rayon::prelude::*;

use crate::error::GpuDotError;

/// Copies smaller than this run on the calling thread: below it, waking the pool's threads
/// costs more than the copy.
const PARALLEL_COPY_BYTES: usize = 1 << 20;
/// Each parallel copy task moves about this much.
const TASK_BYTES: usize = 512 << 10;

/// A page-locked host buffer of `f32`, with an event marking the last device copy that uses
/// it: the host waits for that event before touching the memory again.
pub(crate) struct PinnedBuf {
    ptr: *mut f32,
    len: usize,
    in_use_until: CudaEvent,
}

// SAFETY: the buffer is plain host memory owned by this value (like a `Box<[f32]>`); every
// access goes through `&self`/`&mut self`, after waiting for the device's last use of it.
unsafe impl Send for PinnedBuf {}
// SAFETY: as above; `&PinnedBuf` only gives shared reads.
unsafe impl Sync for PinnedBuf {}

impl PinnedBuf {
    /// Allocates `len` floats of page-locked memory (cacheable, not write-combined: the host
    /// reads results back out of it).
    pub(crate) fn new(ctx: &Arc<CudaContext>, len: usize) -> Result<PinnedBuf, GpuDotError> {
        let bytes = len.max(1) * std::mem::size_of::<f32>();
        ctx.bind_to_thread()
            .map_err(GpuDotError::at("binding the context"))?;
        let in_use_until = ctx
            .new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
            .map_err(GpuDotError::at("creating an event"))?;
        // SAFETY: cuMemHostAlloc with flags 0 returns `bytes` bytes of page-locked memory or an
        // error; the pointer is freed once, in `Drop`.
        let ptr = unsafe { result::malloc_host(bytes, 0) }
            .map_err(|e| GpuDotError::driver("allocating page-locked host memory", bytes, e))?;
        Ok(PinnedBuf {
            ptr: ptr.cast(),
            len: len.max(1),
            in_use_until,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn bytes(&self) -> usize {
        self.len * std::mem::size_of::<f32>()
    }

    /// Waits until the device no longer uses the buffer.
    fn wait(&self) -> Result<(), GpuDotError> {
        self.in_use_until
            .synchronize()
            .map_err(GpuDotError::at("waiting for a transfer"))
    }

    /// The first `len` floats, for the host to write, once the device is done with them.
    pub(crate) fn host_mut(&mut self, len: usize) -> Result<&mut [f32], GpuDotError> {
        assert!(len <= self.len, "staging buffer too small");
        self.wait()?;
        // SAFETY: `ptr` holds `self.len ≥ len` floats, allocated in `new` and alive until
        // `Drop`; the device's last copy from or into it has completed (`wait`), and `&mut
        // self` excludes other host access. Pinned memory from cuMemHostAlloc is zeroed or
        // has been written by earlier use, and f32 accepts any bit pattern.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr, len) })
    }

    /// The first `len` floats, for the host to read, once the device is done with them.
    pub(crate) fn host(&mut self, len: usize) -> Result<&[f32], GpuDotError> {
        self.host_mut(len).map(|s| &*s)
    }

    /// Enqueues a copy of the first `len` floats to the device at `dst` on `stream`.
    ///
    /// # Safety
    /// `dst` must be valid for `len` floats on `stream`, and nothing may read or write it
    /// concurrently on another stream until the copy completes.
    pub(crate) unsafe fn copy_to_device(
        &mut self,
        len: usize,
        dst: cudarc::driver::sys::CUdeviceptr,
        stream: &CudaStream,
    ) -> Result<(), GpuDotError> {
        assert!(len <= self.len, "staging buffer too small");
        let src = std::slice::from_raw_parts(self.ptr, len);
        result::memcpy_htod_async(dst, src, stream.cu_stream())
            .map_err(GpuDotError::at("copying to the device"))?;
        self.in_use_until
            .record(stream)
            .map_err(GpuDotError::at("recording an event"))
    }

    /// Enqueues a copy of `len` floats from the device at `src` into the buffer on `stream`.
    ///
    /// # Safety
    /// `src` must be valid for `len` floats on `stream`, and its contents final once the work
    /// enqueued before this on `stream` completes.
    pub(crate) unsafe fn copy_from_device(
        &mut self,
        len: usize,
        src: cudarc::driver::sys::CUdeviceptr,
        stream: &CudaStream,
    ) -> Result<(), GpuDotError> {
        assert!(len <= self.len, "staging buffer too small");
        let dst = std::slice::from_raw_parts_mut(self.ptr, len);
        result::memcpy_dtoh_async(dst, src, stream.cu_stream())
            .map_err(GpuDotError::at("copying to the host"))?;
        self.in_use_until
            .record(stream)
            .map_err(GpuDotError::at("recording an event"))
    }
}

impl Drop for PinnedBuf {
    fn drop(&mut self) {
        // A failed wait leaves the memory possibly in use by a copy; leaking it is the only
        // safe choice then.
        if self.wait().is_ok() {
            // SAFETY: `ptr` came from cuMemHostAlloc in `new`, is freed only here, and no
            // device copy uses it any more (`wait`).
            let _ = unsafe { result::free_host(self.ptr.cast()) };
        }
    }
}

/// Rows per parallel task for rows of `row_len` floats.
fn rows_per_task(row_len: usize) -> usize {
    (TASK_BYTES / (row_len.max(1) * std::mem::size_of::<f32>())).max(1)
}

fn copy_rows_out(src: ArrayView2<'_, f32>, dst: &mut [f32]) {
    let cols = src.ncols();
    for (row, out) in src
        .rows()
        .into_iter()
        .zip(dst.chunks_exact_mut(cols.max(1)))
    {
        match row.as_slice() {
            Some(s) => out.copy_from_slice(s),
            None => out.iter_mut().zip(row.iter()).for_each(|(o, &v)| *o = v),
        }
    }
}

fn copy_rows_in(src: &[f32], mut dst: ArrayViewMut2<'_, f32>) {
    let cols = dst.ncols();
    for (mut row, inp) in dst
        .rows_mut()
        .into_iter()
        .zip(src.chunks_exact(cols.max(1)))
    {
        match row.as_slice_mut() {
            Some(s) => s.copy_from_slice(inp),
            None => row.iter_mut().zip(inp).for_each(|(o, &v)| *o = v),
        }
    }
}

/// Copies `src` (any strides: sliced, stepped, negative, broadcast) into `dst` in row-major
/// order; `dst` holds exactly `rows · cols` floats. Large copies are split over the rayon
/// pool's threads by rows.
pub fn pack(src: ArrayView2<'_, f32>, dst: &mut [f32]) {
    let (rows, cols) = src.dim();
    assert_eq!(
        dst.len(),
        rows * cols,
        "destination size differs from the view's"
    );
    if cols == 0 || rows == 0 {
        return;
    }
    if std::mem::size_of_val(dst) < PARALLEL_COPY_BYTES {
        return copy_rows_out(src, dst);
    }
    let step = rows_per_task(cols);
    let tasks: Vec<_> = src
        .axis_chunks_iter(Axis(0), step)
        .zip(dst.chunks_mut(step * cols))
        .collect();
    tasks
        .into_par_iter()
        .for_each(|(part, out)| copy_rows_out(part, out));
}

/// Copies the row-major `src` (exactly `rows · cols` floats) into `dst`, a view of any strides
/// (it must not alias itself: ndarray's mutable views never do). The inverse of [`pack`].
pub fn unpack(src: &[f32], mut dst: ArrayViewMut2<'_, f32>) {
    let (rows, cols) = dst.dim();
    assert_eq!(
        src.len(),
        rows * cols,
        "source size differs from the view's"
    );
    if cols == 0 || rows == 0 {
        return;
    }
    if std::mem::size_of_val(src) < PARALLEL_COPY_BYTES {
        return copy_rows_in(src, dst);
    }
    let step = rows_per_task(cols);
    let tasks: Vec<_> = dst
        .axis_chunks_iter_mut(Axis(0), step)
        .zip(src.chunks(step * cols))
        .collect();
    tasks
        .into_par_iter()
        .for_each(|(part, inp)| copy_rows_in(inp, part));
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{s, Array1, Array2};

    fn sample(r: usize, c: usize) -> Array2<f32> {
        Array2::from_shape_fn((r, c), |(i, j)| (i * 1000 + j) as f32)
    }

    fn packed(v: ArrayView2<'_, f32>) -> Vec<f32> {
        let mut out = vec![f32::NAN; v.len()];
        pack(v, &mut out);
        out
    }

    #[test]
    fn pack_gives_row_major_order_for_any_strides() {
        // Large enough for the parallel path too.
        let a = sample(700, 900);
        let views = [
            a.view(),
            a.t(),
            a.slice(s![3..650, 5..800]),
            a.slice(s![..;3, ..;-2]),
            a.slice(s![..;-1, ..]).reversed_axes(),
        ];
        for v in views {
            let want: Vec<f32> = v.iter().copied().collect();
            assert_eq!(packed(v), want);
        }
        let row = Array1::from_iter((0..900).map(|x| x as f32));
        let b = row.broadcast((600, 900)).unwrap();
        assert_eq!(packed(b), b.iter().copied().collect::<Vec<_>>());
    }

    #[test]
    fn unpack_inverts_pack_into_any_layout() {
        for (r, c) in [(1, 1), (5, 3), (700, 900)] {
            let src = sample(r, c);
            let flat = packed(src.view());
            let mut f = Array2::<f32>::from_elem((c, r), f32::NAN);
            unpack(&flat, f.view_mut().reversed_axes());
            assert_eq!(f.t(), src);
            let mut big = Array2::<f32>::from_elem((2 * r, 2 * c), -1.0);
            unpack(&flat, big.slice_mut(s![..;-2, 1..;2]));
            assert_eq!(big.slice(s![..;-2, 1..;2]), src);
            assert!(big.slice(s![..;-2, ..;2]).iter().all(|&x| x == -1.0));
        }
    }

    #[test]
    fn empty_views_copy_nothing() {
        let a = Array2::<f32>::zeros((0, 5));
        pack(a.view(), &mut []);
        let mut b = Array2::<f32>::zeros((4, 0));
        unpack(&[], b.view_mut());
    }
}

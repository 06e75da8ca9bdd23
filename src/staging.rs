//! Host side of the transfers: page-locked staging buffers, and the copies between ndarray
//! views of any strides and the row-major order the device reads.
//!
//! The driver copies page-locked ("pinned") memory by DMA at full link speed and
//! asynchronously; pageable memory it first copies through a bounce buffer of its own, at a
//! fifth of the speed and blocking the caller. So transfers go through a [`PinnedBuf`]: the
//! crew's threads copy pieces of a view into it (packing strided views on the way), and the
//! copy engine moves each parcel while the threads prepare the next.
//!
//! A [`HostMat`] is a view reduced to a pointer, a shape and element strides, so that several
//! threads can copy disjoint ranges of its row-major order at once.

use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::driver::{result, CudaContext};
use ndarray::{ArrayView2, ArrayViewMut2};

use crate::error::GpuDotError;

/// Floats per 4 KiB page: a fresh output is touched once per page to fault it in.
const PAGE_FLOATS: usize = 1024;

/// A page-locked host buffer of `f32`.
///
/// It carries no record of the device's use: whoever enqueues copies from or into it waits
/// for them (the transfer schedule's events, or a stream synchronisation) before touching the
/// memory again or dropping the buffer.
pub(crate) struct PinnedBuf {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: the buffer is plain host memory owned by this value (like a `Box<[f32]>`); the
// transfer code hands out disjoint ranges of it to threads and orders them against the device
// with events.
unsafe impl Send for PinnedBuf {}
// SAFETY: as above.
unsafe impl Sync for PinnedBuf {}

impl PinnedBuf {
    /// Allocates `len` floats of page-locked memory (cacheable, not write-combined: the host
    /// reads results back out of it).
    pub(crate) fn new(ctx: &Arc<CudaContext>, len: usize) -> Result<PinnedBuf, GpuDotError> {
        let len = len.max(1);
        let bytes = len * std::mem::size_of::<f32>();
        ctx.bind_to_thread()
            .map_err(GpuDotError::at("binding the context"))?;
        // SAFETY: cuMemHostAlloc with flags 0 returns `bytes` bytes of page-locked memory or an
        // error; the pointer is freed once, in `Drop`.
        let ptr = unsafe { result::malloc_host(bytes, 0) }
            .map_err(|e| GpuDotError::driver("allocating page-locked host memory", bytes, e))?;
        Ok(PinnedBuf {
            ptr: ptr.cast(),
            len,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn bytes(&self) -> usize {
        self.len * std::mem::size_of::<f32>()
    }

    /// The buffer as a staging ring for one run.
    pub(crate) fn ring(&self) -> Ring<'_> {
        Ring {
            ptr: self.ptr,
            len: self.len,
            _buf: PhantomData,
        }
    }

    /// Leaks the memory instead of freeing it: for a buffer a device copy may still use after
    /// a failure that left the device's state unknown.
    pub(crate) fn leak(self) {
        std::mem::forget(self);
    }
}

impl Drop for PinnedBuf {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from cuMemHostAlloc in `new` and is freed only here; the owner
        // has waited for the device's last copy (see the type's docs).
        let _ = unsafe { result::free_host(self.ptr.cast()) };
    }
}

/// Staging memory as a run uses it: an address and a length, borrowed from a [`PinnedBuf`],
/// from which the threads of a run take disjoint ranges (the run's schedule keeps them apart).
#[derive(Clone, Copy)]
pub(crate) struct Ring<'a> {
    ptr: *mut f32,
    len: usize,
    _buf: PhantomData<&'a [f32]>,
}

// SAFETY: a Ring is an address and a length into memory borrowed for `'a`; the run that uses
// it gives each thread disjoint ranges (see `conduct.rs`).
unsafe impl Send for Ring<'_> {}
// SAFETY: as above.
unsafe impl Sync for Ring<'_> {}

impl Ring<'_> {
    /// The address of float `offset`.
    ///
    /// # Panics
    /// If `offset + len` floats do not fit the ring.
    pub(crate) fn at(&self, offset: usize, len: usize) -> *mut f32 {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len),
            "staging range out of bounds"
        );
        // SAFETY: `offset ≤ self.len` (asserted), so the result points into or one past the
        // memory.
        unsafe { self.ptr.add(offset) }
    }

    /// Ordinary memory as a ring, for tests that simulate the device.
    #[cfg(test)]
    pub(crate) fn of_slice(s: &mut [f32]) -> Ring<'_> {
        Ring {
            ptr: s.as_mut_ptr(),
            len: s.len(),
            _buf: PhantomData,
        }
    }
}

/// A 2-D host matrix as a pointer to element (0, 0), a shape and element strides (possibly
/// negative or zero), read or written in ranges of its row-major order.
///
/// Made from a view ([`HostMat::of_view`], [`HostMat::of_view_mut`]) whose borrow the caller
/// keeps alive while the matrix is used; several threads may copy disjoint ranges of it at
/// once.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HostMat {
    ptr: *mut f32,
    rows: usize,
    cols: usize,
    row_stride: isize,
    col_stride: isize,
}

// SAFETY: a HostMat is an address and a layout; the code that copies through it keeps the
// borrowed view alive and gives each thread a disjoint range (see `read`, `write`).
unsafe impl Send for HostMat {}
// SAFETY: as above.
unsafe impl Sync for HostMat {}

impl HostMat {
    /// The matrix of a view, for reading only.
    pub(crate) fn of_view(v: &ArrayView2<'_, f32>) -> HostMat {
        let s = v.strides();
        HostMat {
            ptr: v.as_ptr().cast_mut(),
            rows: v.nrows(),
            cols: v.ncols(),
            row_stride: s[0],
            col_stride: s[1],
        }
    }

    /// The matrix of a mutable view, for reading and writing.
    pub(crate) fn of_view_mut(v: &mut ArrayViewMut2<'_, f32>) -> HostMat {
        let s = v.strides();
        let (rows, cols) = v.dim();
        let (row_stride, col_stride) = (s[0], s[1]);
        HostMat {
            ptr: v.as_mut_ptr(),
            rows,
            cols,
            row_stride,
            col_stride,
        }
    }

    /// A contiguous row-major `rows × cols` matrix at `ptr`.
    pub(crate) fn row_major(ptr: *mut f32, rows: usize, cols: usize) -> HostMat {
        HostMat {
            ptr,
            rows,
            cols,
            row_stride: cols as isize,
            col_stride: 1,
        }
    }

    pub(crate) fn dim(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// The address of element (0, 0).
    pub(crate) fn addr(&self) -> usize {
        self.ptr as usize
    }

    pub(crate) fn len(&self) -> usize {
        self.rows * self.cols
    }

    /// Element strides `(rows, cols)`.
    pub(crate) fn strides(&self) -> (isize, isize) {
        (self.row_stride, self.col_stride)
    }

    /// The transpose (no copy).
    pub(crate) fn t(&self) -> HostMat {
        HostMat {
            ptr: self.ptr,
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
        }
    }

    /// Rows `r0..r1`.
    pub(crate) fn rows(&self, r0: usize, r1: usize) -> HostMat {
        assert!(r0 <= r1 && r1 <= self.rows, "row range out of bounds");
        let ptr = if r0 < self.rows && self.cols > 0 {
            // SAFETY: row r0 exists and has at least one element, so its first element lies
            // inside the viewed allocation.
            unsafe { self.ptr.offset(r0 as isize * self.row_stride) }
        } else {
            self.ptr
        };
        HostMat {
            ptr,
            rows: r1 - r0,
            ..*self
        }
    }

    /// Columns `c0..c1`.
    pub(crate) fn cols(&self, c0: usize, c1: usize) -> HostMat {
        self.t().rows(c0, c1).t()
    }

    /// Calls `f(row, col, n)` for each run of row-major elements `e0..e1` that lies in one
    /// row: `n` elements from `(row, col)`.
    fn runs(&self, e0: usize, e1: usize, mut f: impl FnMut(usize, usize, usize, usize)) {
        assert!(e0 <= e1 && e1 <= self.len(), "element range out of bounds");
        if e0 == e1 {
            return;
        }
        let (mut row, mut col) = (e0 / self.cols, e0 % self.cols);
        let mut done = 0;
        while done < e1 - e0 {
            let n = (self.cols - col).min(e1 - e0 - done);
            f(done, row, col, n);
            done += n;
            row += 1;
            col = 0;
        }
    }

    /// The address of element `(row, col)`.
    ///
    /// # Safety
    /// `(row, col)` must be inside the matrix.
    unsafe fn elem(&self, row: usize, col: usize) -> *mut f32 {
        self.ptr
            .offset(row as isize * self.row_stride + col as isize * self.col_stride)
    }

    /// Copies elements `e0..e1` of the row-major order into `dst` (`e1 − e0` floats).
    ///
    /// # Safety
    /// The view the matrix was made from must be alive and not written during the call.
    pub(crate) unsafe fn read(&self, e0: usize, e1: usize, dst: &mut [f32]) {
        assert_eq!(
            dst.len(),
            e1 - e0,
            "destination size differs from the range"
        );
        self.runs(e0, e1, |at, row, col, n| {
            let src = self.elem(row, col);
            let out = &mut dst[at..at + n];
            if self.col_stride == 1 {
                out.copy_from_slice(std::slice::from_raw_parts(src, n));
            } else {
                for (j, o) in out.iter_mut().enumerate() {
                    *o = *src.offset(j as isize * self.col_stride);
                }
            }
        });
    }

    /// Copies `src` (`e1 − e0` floats) into elements `e0..e1` of the row-major order.
    ///
    /// # Safety
    /// The matrix must have been made from a mutable view (or own memory) that is alive, and
    /// no other thread may read or write elements `e0..e1` during the call. The destination
    /// may be uninitialised: it is only written.
    pub(crate) unsafe fn write(&self, e0: usize, e1: usize, src: &[f32]) {
        assert_eq!(src.len(), e1 - e0, "source size differs from the range");
        self.runs(e0, e1, |at, row, col, n| {
            let dst = self.elem(row, col);
            let inp = &src[at..at + n];
            if self.col_stride == 1 {
                std::ptr::copy_nonoverlapping(inp.as_ptr(), dst, n);
            } else {
                for (j, &v) in inp.iter().enumerate() {
                    dst.offset(j as isize * self.col_stride).write(v);
                }
            }
        });
    }

    /// Writes 0.0 to the first element of each 4 KiB page of elements `e0..e1` of a contiguous
    /// row-major matrix, so that the pages are faulted in before the results arrive.
    ///
    /// # Safety
    /// As for [`HostMat::write`]; the elements written here are overwritten by the results.
    pub(crate) unsafe fn touch(&self, e0: usize, e1: usize) {
        assert!(
            self.row_stride == self.cols as isize && self.col_stride == 1,
            "only contiguous results are touched"
        );
        assert!(e0 <= e1 && e1 <= self.len(), "element range out of bounds");
        let first_page = (self.ptr.add(e0) as usize).next_multiple_of(PAGE_FLOATS * 4);
        let mut at = (first_page - self.ptr as usize) / 4;
        if e0 < e1 && at > e0 {
            self.ptr.add(e0).write(0.0);
        }
        while at < e1 {
            self.ptr.add(at).write(0.0);
            at += PAGE_FLOATS;
        }
    }
}

/// Copies `src` (any strides: sliced, stepped, negative, broadcast) into `dst` in row-major
/// order; `dst` holds exactly `rows · cols` floats.
pub fn pack(src: ArrayView2<'_, f32>, dst: &mut [f32]) {
    assert_eq!(
        dst.len(),
        src.len(),
        "destination size differs from the view's"
    );
    let m = HostMat::of_view(&src);
    // SAFETY: `src` is borrowed for the whole call and cannot be written meanwhile.
    unsafe { m.read(0, m.len(), dst) };
}

/// Copies the row-major `src` (exactly `rows · cols` floats) into `dst`, a view of any strides
/// (it must not alias itself: ndarray's mutable views never do). The inverse of [`pack`].
pub fn unpack(src: &[f32], mut dst: ArrayViewMut2<'_, f32>) {
    assert_eq!(src.len(), dst.len(), "source size differs from the view's");
    let m = HostMat::of_view_mut(&mut dst);
    // SAFETY: `dst` is borrowed mutably for the whole call, so nothing else reads or writes it.
    unsafe { m.write(0, m.len(), src) };
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
        let a = sample(70, 90);
        let views = [
            a.view(),
            a.t(),
            a.slice(s![3..65, 5..80]),
            a.slice(s![..;3, ..;-2]),
            a.slice(s![..;-1, ..]).reversed_axes(),
        ];
        for v in views {
            let want: Vec<f32> = v.iter().copied().collect();
            assert_eq!(packed(v), want);
        }
        let row = Array1::from_iter((0..90).map(|x| x as f32));
        let b = row.broadcast((60, 90)).unwrap();
        assert_eq!(packed(b), b.iter().copied().collect::<Vec<_>>());
    }

    #[test]
    fn ranges_split_anywhere_give_the_same_order() {
        let a = sample(13, 7);
        for v in [a.view(), a.t(), a.slice(s![1..;2, ..;-1])] {
            let m = HostMat::of_view(&v);
            let want: Vec<f32> = v.iter().copied().collect();
            for cut in [0, 1, 6, 7, 8, 20, m.len()] {
                let cut = cut.min(m.len());
                let mut out = vec![f32::NAN; m.len()];
                let (lo, hi) = out.split_at_mut(cut);
                // SAFETY: `v` is alive and read-only here.
                unsafe {
                    m.read(0, cut, lo);
                    m.read(cut, m.len(), hi);
                }
                assert_eq!(out, want);
            }
        }
    }

    #[test]
    fn row_and_column_blocks_address_the_right_elements() {
        let a = sample(9, 11);
        let m = HostMat::of_view(&a.view());
        let block = m.rows(2, 5).cols(3, 10);
        let mut out = vec![0.0; block.len()];
        // SAFETY: `a` is alive and read-only here.
        unsafe { block.read(0, block.len(), &mut out) };
        let want: Vec<f32> = a.slice(s![2..5, 3..10]).iter().copied().collect();
        assert_eq!(out, want);
        assert_eq!(m.rows(9, 9).len(), 0);
    }

    #[test]
    fn unpack_inverts_pack_into_any_layout() {
        for (r, c) in [(1, 1), (5, 3), (70, 90)] {
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
    fn touch_writes_only_inside_its_range() {
        let mut v = vec![1.0f32; 5000];
        let m = HostMat::row_major(v.as_mut_ptr(), 50, 100);
        // SAFETY: `v` is alive and only this thread uses it.
        unsafe { m.touch(10, 3000) };
        assert!(v[..10].iter().all(|&x| x == 1.0));
        assert!(v[3000..].iter().all(|&x| x == 1.0));
        assert_eq!(v[10], 0.0);
    }

    #[test]
    fn empty_views_copy_nothing() {
        let a = Array2::<f32>::zeros((0, 5));
        pack(a.view(), &mut []);
        let mut b = Array2::<f32>::zeros((4, 0));
        unpack(&[], b.view_mut());
    }
}

//! Host side of the transfers: page-locked staging buffers, and the copies between ndarray
//! views of any strides and the row-major order the device reads.
//!
//! The driver copies page-locked ("pinned") memory by DMA at full link speed and
//! asynchronously; pageable memory it first copies through a bounce buffer of its own, at a
//! fifth of the speed and blocking the caller. So transfers go through a [`PinnedBuf`]: the
//! crew's threads copy pieces of a view into it (packing strided views on the way), and the
//! copy engine moves each parcel while the threads prepare the next.
//!
//! A [`HostMat`] is a view reduced to a pointer, a shape, element strides and an element
//! width, so that several threads can copy disjoint ranges of its row-major order at once.
//! The transfer layer works in elements of any width (4 bytes for `f32`, 8 for `f64`): it
//! moves bits and never does arithmetic on them.

use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::driver::{result, CudaContext};
use ndarray::{ArrayView2, ArrayViewMut2};

use crate::element::Element;
use crate::error::GpuDotError;

/// Bytes per 4 KiB page: a fresh output is touched once per page to fault it in.
const PAGE: usize = 4096;

/// A page-locked host buffer.
///
/// It carries no record of the device's use: whoever enqueues copies from or into it waits
/// for them (the transfer schedule's events, or a stream synchronisation) before touching the
/// memory again or dropping the buffer.
pub(crate) struct PinnedBuf {
    ptr: *mut u8,
    bytes: usize,
}

// SAFETY: the buffer is plain host memory owned by this value (like a `Box<[u8]>`); the
// transfer code hands out disjoint ranges of it to threads and orders them against the device
// with events.
unsafe impl Send for PinnedBuf {}
// SAFETY: as above.
unsafe impl Sync for PinnedBuf {}

impl PinnedBuf {
    /// Allocates `bytes` bytes of page-locked memory (cacheable, not write-combined: the host
    /// reads results back out of it).
    pub(crate) fn new(ctx: &Arc<CudaContext>, bytes: usize) -> Result<PinnedBuf, GpuDotError> {
        let bytes = bytes.max(16);
        ctx.bind_to_thread()
            .map_err(GpuDotError::at("binding the context"))?;
        // SAFETY: cuMemHostAlloc with flags 0 returns `bytes` bytes of page-locked memory or an
        // error; the pointer is freed once, in `Drop`.
        let ptr = unsafe { result::malloc_host(bytes, 0) }
            .map_err(|e| GpuDotError::driver("allocating page-locked host memory", bytes, e))?;
        Ok(PinnedBuf {
            ptr: ptr.cast(),
            bytes,
        })
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The buffer's address, which is also the address a device with unified addressing uses
    /// for it (page-locked memory from `cuMemHostAlloc` is mapped for every such device, at its
    /// host address).
    pub(crate) fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// The buffer as a staging ring of elements `width` bytes wide, for one run.
    pub(crate) fn ring(&self, width: usize) -> Ring<'_> {
        Ring {
            ptr: self.ptr,
            len: self.bytes / width,
            width,
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

/// Staging memory as a run uses it: an address, a length in elements and the element width,
/// borrowed from a [`PinnedBuf`], from which the threads of a run take disjoint ranges (the
/// run's schedule keeps them apart).
#[derive(Clone, Copy)]
pub(crate) struct Ring<'a> {
    ptr: *mut u8,
    len: usize,
    width: usize,
    _buf: PhantomData<&'a [u8]>,
}

// SAFETY: a Ring is an address and a length into memory borrowed for `'a`; the run that uses
// it gives each thread disjoint ranges (see `conduct.rs`).
unsafe impl Send for Ring<'_> {}
// SAFETY: as above.
unsafe impl Sync for Ring<'_> {}

impl Ring<'_> {
    /// The address of element `offset`.
    ///
    /// # Panics
    /// If `offset + len` elements do not fit the ring.
    pub(crate) fn at(&self, offset: usize, len: usize) -> *mut u8 {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len),
            "staging range out of bounds"
        );
        // SAFETY: `offset ≤ self.len` (asserted), so the result points into or one past the
        // memory.
        unsafe { self.ptr.add(offset * self.width) }
    }

    /// Ordinary memory as a ring, for tests that simulate the device.
    #[cfg(test)]
    pub(crate) fn of_slice<T: Element>(s: &mut [T]) -> Ring<'_> {
        Ring {
            ptr: s.as_mut_ptr().cast(),
            len: s.len(),
            width: std::mem::size_of::<T>(),
            _buf: PhantomData,
        }
    }
}

/// A 2-D host matrix as a pointer to element (0, 0), a shape, element strides (possibly
/// negative or zero) and the element width in bytes, read or written in ranges of its
/// row-major order.
///
/// Made from a view ([`HostMat::of_view`], [`HostMat::of_view_mut`]) whose borrow the caller
/// keeps alive while the matrix is used; several threads may copy disjoint ranges of it at
/// once.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HostMat {
    ptr: *mut u8,
    rows: usize,
    cols: usize,
    row_stride: isize,
    col_stride: isize,
    width: usize,
}

// SAFETY: a HostMat is an address and a layout; the code that copies through it keeps the
// borrowed view alive and gives each thread a disjoint range (see `read`, `write`).
unsafe impl Send for HostMat {}
// SAFETY: as above.
unsafe impl Sync for HostMat {}

/// How a copy into staging stores its elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stores {
    /// Plain stores: the lines stay in the writing core's caches.
    Cached,
    /// Stores that bypass the caches (x86-64's non-temporal stores; plain stores elsewhere),
    /// fenced before the copy returns.
    ///
    /// Staging that a DMA copy reads soon after it is written: written with plain stores, its
    /// lines sit in the cores' caches, and the copy engine's reads of them ran at 22–36 GB/s
    /// on an H100 host, against 47–52 GB/s from staging written with streaming stores
    /// (`examples/transfer --pack-and-copy`; BENCHMARKS.md).
    Streaming,
}

/// Copies `n` elements of type `W` (a plain word as wide as the element) from `src`, `stride`
/// elements apart, to consecutive `dst`, with `stores`.
///
/// # Safety
/// `src` valid for reads at each of the `n` strided places, `dst` for `n` writes.
unsafe fn gather<W: Word>(src: *const u8, stride: isize, dst: *mut u8, n: usize, stores: Stores) {
    match (stores, stride) {
        (Stores::Cached, 1) => {
            std::ptr::copy_nonoverlapping(src, dst, n * std::mem::size_of::<W>());
        }
        (Stores::Cached, _) => {
            let (src, dst) = (src.cast::<W>(), dst.cast::<W>());
            for j in 0..n {
                dst.add(j)
                    .write_unaligned(src.offset(j as isize * stride).read());
            }
        }
        (Stores::Streaming, 1) => stream_copy(src, dst, n * std::mem::size_of::<W>()),
        (Stores::Streaming, _) => {
            let (src, dst) = (src.cast::<W>(), dst.cast::<W>());
            for j in 0..n {
                W::stream(dst.add(j), src.offset(j as isize * stride).read());
            }
            store_fence();
        }
    }
}

/// What the host does with staging lines it has read, so that the next DMA copy into them does
/// not find them in a core's cache: a copy from the device into lines the host had just read
/// ran at 27–33 GB/s on an H100 host, against 51–53 GB/s into lines demoted to the shared
/// cache (`cldemote`) or flushed (`clflushopt`) after the reading (`examples/transfer
/// --pack-and-copy`, BENCHMARKS.md); demoting cost the reading nothing measurable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineRelease {
    /// `cldemote`: the lines move to the last-level cache.
    Demote,
    /// `clflushopt`: the lines leave the caches.
    FlushOpt,
    /// Neither instruction: the lines stay where they are.
    Keep,
}

/// The CPU's [`LineRelease`], found once (CPUID leaf 7).
static LINE_RELEASE: once_cell::sync::Lazy<LineRelease> = once_cell::sync::Lazy::new(|| {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__cpuid, __cpuid_count};
        if __cpuid(0).eax >= 7 {
            let leaf = __cpuid_count(7, 0);
            if leaf.ecx & (1 << 25) != 0 {
                return LineRelease::Demote;
            }
            if leaf.ebx & (1 << 23) != 0 {
                return LineRelease::FlushOpt;
            }
        }
    }
    LineRelease::Keep
});

/// Releases the cache lines of `bytes` bytes from `ptr` ([`LineRelease`]): staging the host
/// has read, which a DMA copy writes next.
///
/// # Safety
/// `ptr` valid for `bytes` bytes. (The instructions change only where lines are cached, never
/// their contents, so other threads may use the memory meanwhile.)
pub(crate) unsafe fn release_lines(ptr: *const u8, bytes: usize) {
    let release = *LINE_RELEASE;
    if release == LineRelease::Keep || bytes == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let first = ptr as usize & !63;
        let end = ptr as usize + bytes;
        for line in (first..end).step_by(64) {
            // SAFETY: `line` is the address of a cache line holding at least one byte of the
            // caller's range; the CPU has the instruction (CPUID above), and neither changes
            // memory, the stack or the flags.
            unsafe {
                match release {
                    LineRelease::Demote => std::arch::asm!(
                        "cldemote [{0}]",
                        in(reg) line,
                        options(nostack, preserves_flags)
                    ),
                    _ => std::arch::asm!(
                        "clflushopt [{0}]",
                        in(reg) line,
                        options(nostack, preserves_flags)
                    ),
                }
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = ptr;
}

/// A plain word as wide as an element, stored around the caches.
trait Word: Copy {
    /// Writes `v` at `dst` (aligned to the word's width when the element is: `dst` is
    /// staging, whose elements are) with a non-temporal store where the CPU has one.
    ///
    /// # Safety
    /// `dst` valid for one write.
    unsafe fn stream(dst: *mut Self, v: Self);
}

impl Word for u32 {
    unsafe fn stream(dst: *mut u32, v: u32) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's `dst`; SSE2 (movnti) is part of x86-64, and an unaligned
        // address only makes the store slower, not invalid.
        unsafe {
            std::arch::x86_64::_mm_stream_si32(dst.cast::<i32>(), v as i32)
        }
        #[cfg(not(target_arch = "x86_64"))]
        // SAFETY: the caller's `dst`.
        unsafe {
            dst.write_unaligned(v)
        }
    }
}

impl Word for u64 {
    unsafe fn stream(dst: *mut u64, v: u64) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as for u32 (movnti with a 64-bit register).
        unsafe {
            std::arch::x86_64::_mm_stream_si64(dst.cast::<i64>(), v as i64)
        }
        #[cfg(not(target_arch = "x86_64"))]
        // SAFETY: the caller's `dst`.
        unsafe {
            dst.write_unaligned(v)
        }
    }
}

/// Orders every non-temporal store of this thread before its later stores (an atomic that
/// says the staging is packed): they are weakly ordered otherwise.
fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no operands; SSE is part of x86-64.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    }
}

/// Copies `bytes` bytes from `src` to `dst` with 16-byte non-temporal stores from `dst`'s
/// first 16-byte boundary (x86-64; a plain copy elsewhere), then fences the stores.
///
/// # Safety
/// `src` valid for `bytes` reads and `dst` for `bytes` writes; the ranges do not overlap.
unsafe fn stream_copy(src: *const u8, dst: *mut u8, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's ranges. The head copies up to `dst`'s first 16-byte boundary (at
    // most `bytes`); each streaming store writes one aligned 16-byte block inside the range,
    // loaded unaligned from the same offset of `src`; the tail copies the rest.
    unsafe {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let head = ((16 - dst as usize % 16) % 16).min(bytes);
        std::ptr::copy_nonoverlapping(src, dst, head);
        let blocks = (bytes - head) / 16;
        let (s, d) = (src.add(head), dst.add(head));
        let mut b = 0;
        while b + 4 <= blocks {
            let v0 = _mm_loadu_si128(s.add(16 * b).cast::<__m128i>());
            let v1 = _mm_loadu_si128(s.add(16 * b + 16).cast::<__m128i>());
            let v2 = _mm_loadu_si128(s.add(16 * b + 32).cast::<__m128i>());
            let v3 = _mm_loadu_si128(s.add(16 * b + 48).cast::<__m128i>());
            _mm_stream_si128(d.add(16 * b).cast::<__m128i>(), v0);
            _mm_stream_si128(d.add(16 * b + 16).cast::<__m128i>(), v1);
            _mm_stream_si128(d.add(16 * b + 32).cast::<__m128i>(), v2);
            _mm_stream_si128(d.add(16 * b + 48).cast::<__m128i>(), v3);
            b += 4;
        }
        while b < blocks {
            let v = _mm_loadu_si128(s.add(16 * b).cast::<__m128i>());
            _mm_stream_si128(d.add(16 * b).cast::<__m128i>(), v);
            b += 1;
        }
        let done = head + 16 * blocks;
        std::ptr::copy_nonoverlapping(src.add(done), dst.add(done), bytes - done);
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the caller's ranges.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, bytes)
    }
    store_fence();
}

/// Copies `n` consecutive elements of type `W` from `src` to `dst`, `stride` elements apart.
///
/// # Safety
/// `src` valid for `n` reads, `dst` for writes at each of the `n` strided places.
unsafe fn scatter<W: Copy>(src: *const u8, dst: *mut u8, stride: isize, n: usize) {
    let (src, dst) = (src.cast::<W>(), dst.cast::<W>());
    if stride == 1 {
        std::ptr::copy_nonoverlapping(src, dst, n);
    } else {
        for j in 0..n {
            dst.offset(j as isize * stride)
                .write(src.add(j).read_unaligned());
        }
    }
}

impl HostMat {
    /// The matrix of a view, for reading only.
    pub(crate) fn of_view<T: Element>(v: &ArrayView2<'_, T>) -> HostMat {
        let s = v.strides();
        HostMat {
            ptr: v.as_ptr().cast_mut().cast(),
            rows: v.nrows(),
            cols: v.ncols(),
            row_stride: s[0],
            col_stride: s[1],
            width: std::mem::size_of::<T>(),
        }
    }

    /// The matrix of a mutable view, for reading and writing.
    pub(crate) fn of_view_mut<T: Element>(v: &mut ArrayViewMut2<'_, T>) -> HostMat {
        let s = v.strides();
        let (rows, cols) = v.dim();
        let (row_stride, col_stride) = (s[0], s[1]);
        HostMat {
            ptr: v.as_mut_ptr().cast(),
            rows,
            cols,
            row_stride,
            col_stride,
            width: std::mem::size_of::<T>(),
        }
    }

    /// A contiguous row-major `rows × cols` matrix of `T` at `ptr`.
    pub(crate) fn row_major<T: Element>(ptr: *mut T, rows: usize, cols: usize) -> HostMat {
        HostMat {
            ptr: ptr.cast(),
            rows,
            cols,
            row_stride: cols as isize,
            col_stride: 1,
            width: std::mem::size_of::<T>(),
        }
    }

    pub(crate) fn dim(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// Bytes per element.
    pub(crate) fn width(&self) -> usize {
        self.width
    }

    /// The address of element (0, 0).
    pub(crate) fn addr(&self) -> usize {
        self.ptr as usize
    }

    pub(crate) fn len(&self) -> usize {
        self.rows * self.cols
    }

    /// The address and byte length of the matrix where its row-major order is one
    /// contiguous run of memory (element `e` at `addr + e · width`); `None` where it is not,
    /// or where it is empty.
    pub(crate) fn contiguous(&self) -> Option<(usize, usize)> {
        let rows_follow = self.rows <= 1 || self.row_stride == self.cols as isize;
        (self.len() > 0 && (self.col_stride == 1 || self.cols <= 1) && rows_follow)
            .then(|| (self.ptr as usize, self.len() * self.width))
    }

    /// The transpose (no copy).
    pub(crate) fn t(&self) -> HostMat {
        HostMat {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..*self
        }
    }

    /// Rows `r0..r1`.
    pub(crate) fn rows(&self, r0: usize, r1: usize) -> HostMat {
        assert!(r0 <= r1 && r1 <= self.rows, "row range out of bounds");
        let ptr = if r0 < self.rows && self.cols > 0 {
            // SAFETY: row r0 exists and has at least one element, so its first element lies
            // inside the viewed allocation.
            unsafe { self.elem(r0, 0) }
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
    unsafe fn elem(&self, row: usize, col: usize) -> *mut u8 {
        self.ptr.offset(
            (row as isize * self.row_stride + col as isize * self.col_stride) * self.width as isize,
        )
    }

    /// Copies elements `e0..e1` of the row-major order to `dst` (`e1 − e0` elements), with
    /// `stores`.
    ///
    /// # Safety
    /// The view the matrix was made from must be alive and not written during the call, and
    /// `dst` valid for `(e1 − e0) · width` bytes that nothing else uses meanwhile.
    pub(crate) unsafe fn read_raw(&self, e0: usize, e1: usize, dst: *mut u8, stores: Stores) {
        self.runs(e0, e1, |at, row, col, n| {
            let (src, out) = (self.elem(row, col), dst.add(at * self.width));
            match self.width {
                4 => gather::<u32>(src, self.col_stride, out, n, stores),
                8 => gather::<u64>(src, self.col_stride, out, n, stores),
                w => unreachable!("no {w}-byte elements"),
            }
        });
    }

    /// Copies `e1 − e0` elements from `src` into elements `e0..e1` of the row-major order.
    ///
    /// # Safety
    /// The matrix must have been made from a mutable view (or own memory) that is alive, and
    /// no other thread may read or write elements `e0..e1` during the call; `src` must be valid
    /// for `(e1 − e0) · width` bytes. The destination may be uninitialised: it is only written.
    pub(crate) unsafe fn write_raw(&self, e0: usize, e1: usize, src: *const u8) {
        self.runs(e0, e1, |at, row, col, n| {
            let (inp, dst) = (src.add(at * self.width), self.elem(row, col));
            match self.width {
                4 => scatter::<u32>(inp, dst, self.col_stride, n),
                8 => scatter::<u64>(inp, dst, self.col_stride, n),
                w => unreachable!("no {w}-byte elements"),
            }
        });
    }

    /// [`read_raw`](HostMat::read_raw) into a typed slice of `e1 − e0` elements.
    ///
    /// # Safety
    /// As for `read_raw`.
    pub(crate) unsafe fn read<T: Element>(&self, e0: usize, e1: usize, dst: &mut [T]) {
        assert_eq!(std::mem::size_of::<T>(), self.width, "element width");
        assert_eq!(
            dst.len(),
            e1 - e0,
            "destination size differs from the range"
        );
        self.read_raw(e0, e1, dst.as_mut_ptr().cast(), Stores::Cached);
    }

    /// [`write_raw`](HostMat::write_raw) from a typed slice of `e1 − e0` elements.
    ///
    /// # Safety
    /// As for `write_raw`.
    pub(crate) unsafe fn write<T: Element>(&self, e0: usize, e1: usize, src: &[T]) {
        assert_eq!(std::mem::size_of::<T>(), self.width, "element width");
        assert_eq!(src.len(), e1 - e0, "source size differs from the range");
        self.write_raw(e0, e1, src.as_ptr().cast());
    }

    /// Writes zero bits (0.0) to the first element of each 4 KiB page of elements `e0..e1` of
    /// a contiguous row-major matrix, so that the pages are faulted in before the results
    /// arrive.
    ///
    /// # Safety
    /// As for [`HostMat::write_raw`]; the elements written here are overwritten by the results.
    pub(crate) unsafe fn touch(&self, e0: usize, e1: usize) {
        assert!(
            self.row_stride == self.cols as isize && self.col_stride == 1,
            "only contiguous results are touched"
        );
        assert!(e0 <= e1 && e1 <= self.len(), "element range out of bounds");
        let w = self.width;
        let zero = |at: usize| std::ptr::write_bytes(self.ptr.add(at * w), 0, w);
        let first_page = (self.ptr.add(e0 * w) as usize).next_multiple_of(PAGE);
        let mut at = (first_page - self.ptr as usize) / w;
        if e0 < e1 && at > e0 {
            zero(e0);
        }
        while at < e1 {
            zero(at);
            at += PAGE / w;
        }
    }
}

/// Copies `src` (any strides: sliced, stepped, negative, broadcast) into `dst` in row-major
/// order; `dst` holds exactly `rows · cols` elements.
pub fn pack<T: Element>(src: ArrayView2<'_, T>, dst: &mut [T]) {
    assert_eq!(
        dst.len(),
        src.len(),
        "destination size differs from the view's"
    );
    let m = HostMat::of_view(&src);
    // SAFETY: `src` is borrowed for the whole call and cannot be written meanwhile.
    unsafe { m.read(0, m.len(), dst) };
}

/// Copies the row-major `src` (exactly `rows · cols` elements) into `dst`, a view of any
/// strides (it must not alias itself: ndarray's mutable views never do). The inverse of
/// [`pack`].
pub fn unpack<T: Element>(src: &[T], mut dst: ArrayViewMut2<'_, T>) {
    assert_eq!(src.len(), dst.len(), "source size differs from the view's");
    let m = HostMat::of_view_mut(&mut dst);
    // SAFETY: `dst` is borrowed mutably for the whole call, so nothing else reads or writes it.
    unsafe { m.write(0, m.len(), src) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{s, Array1, Array2};

    #[test]
    fn releasing_lines_keeps_their_contents() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 13 + 1) as u8).collect();
        let copy = data.clone();
        for (start, len) in [(0, 0), (0, 1), (3, 64), (63, 65), (100, 5000), (0, 10_000)] {
            // SAFETY: `start + len` ≤ the vector's length.
            unsafe { release_lines(data.as_ptr().add(start), len) };
        }
        assert_eq!(data, copy);
    }

    #[test]
    fn streaming_copies_every_byte_at_every_alignment() {
        let src: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        for src_off in [0, 1, 5, 8] {
            for dst_off in 0..17 {
                for bytes in [0, 1, 3, 15, 16, 17, 31, 63, 64, 65, 127, 200, 1000, 4000] {
                    let mut dst = vec![0xAAu8; 4096 + 64];
                    // SAFETY: both ranges lie inside their vectors and do not overlap.
                    unsafe {
                        stream_copy(
                            src.as_ptr().add(src_off),
                            dst.as_mut_ptr().add(dst_off),
                            bytes,
                        )
                    };
                    assert_eq!(
                        &dst[dst_off..dst_off + bytes],
                        &src[src_off..src_off + bytes],
                        "{src_off} {dst_off} {bytes}"
                    );
                    assert!(dst[..dst_off].iter().all(|&b| b == 0xAA), "wrote before");
                    assert!(
                        dst[dst_off + bytes..].iter().all(|&b| b == 0xAA),
                        "wrote after"
                    );
                }
            }
        }
    }

    #[test]
    fn strided_gathers_store_each_element_once() {
        for (width, stores) in [4usize, 8].into_iter().flat_map(|w| {
            [Stores::Cached, Stores::Streaming]
                .into_iter()
                .map(move |s| (w, s))
        }) {
            let src: Vec<u64> = (0..300).map(|i| i * 0x0101_0101_0101 + 7).collect();
            for stride in [-3isize, 2, 5] {
                let n = 50;
                let first = if stride < 0 { 200 } else { 0 };
                let mut dst = vec![0u64; 64];
                // SAFETY: element `first + j·stride` of `src` (as words of `width` bytes) lies
                // inside it for j < n, and `dst` holds n words.
                unsafe {
                    let base = src.as_ptr().cast::<u8>().add(first * width);
                    if width == 4 {
                        gather::<u32>(base, stride, dst.as_mut_ptr().cast(), n, stores);
                    } else {
                        gather::<u64>(base, stride, dst.as_mut_ptr().cast(), n, stores);
                    }
                }
                let bytes = |v: &[u64]| -> Vec<u8> {
                    v.iter().flat_map(|w| w.to_ne_bytes()).collect::<Vec<u8>>()
                };
                let (s, d) = (bytes(&src), bytes(&dst));
                for j in 0..n {
                    let at = (first as isize + j as isize * stride) as usize * width;
                    assert_eq!(&d[j * width..(j + 1) * width], &s[at..at + width]);
                }
                assert!(d[n * width..].iter().all(|&b| b == 0), "wrote past n");
            }
        }
    }

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
    fn f64_views_pack_and_unpack_in_any_layout() {
        let a = Array2::from_shape_fn((13, 9), |(i, j)| (i * 100 + j) as f64 + 0.25);
        for v in [a.view(), a.t(), a.slice(s![1..;2, ..;-1])] {
            let mut out = vec![f64::NAN; v.len()];
            pack(v, &mut out);
            assert_eq!(out, v.iter().copied().collect::<Vec<_>>());
            let mut back = Array2::<f64>::from_elem((v.ncols(), v.nrows()), f64::NAN);
            unpack(&out, back.view_mut().reversed_axes());
            assert_eq!(back.t(), v);
        }
        let mut w = vec![1.0f64; 3000];
        let m = HostMat::row_major(w.as_mut_ptr(), 30, 100);
        // SAFETY: `w` is alive and only this thread uses it.
        unsafe { m.touch(5, 2000) };
        assert!(w[..5].iter().all(|&x| x == 1.0));
        assert!(w[2000..].iter().all(|&x| x == 1.0));
        assert_eq!(w[5], 0.0);
    }

    #[test]
    fn empty_views_copy_nothing() {
        let a = Array2::<f32>::zeros((0, 5));
        pack(a.view(), &mut []);
        let mut b = Array2::<f32>::zeros((4, 0));
        unpack(&[], b.view_mut());
    }
}

//! What every launch takes: the device operand and the GEMM's launch arguments (checked on
//! construction), device buffers and their growth rule, uploads, poisoning, and grid sizes.

use std::sync::Arc;

use cudarc::driver::{
    CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DeviceSlice, LaunchConfig,
};

use crate::element::Element;
use crate::engine::enqueue::Launch;
use crate::error::GpuDotError;
use crate::options::Precision;

/// Largest grid extent along y; rows of tiles past it are covered by the kernels' loop.
pub(crate) const MAX_GRID_Y: usize = 65_535;

/// A matrix on the device, as a kernel reads it.
pub(crate) struct DeviceOperand<'a, T> {
    pub(crate) buf: CudaView<'a, T>,
    /// Column-major (element (r, c) at `c * ld + r`) instead of row-major.
    pub(crate) trans: bool,
    pub(crate) ld: usize,
}

impl<T> DeviceOperand<'_, T> {
    /// Whether the buffer holds every element of a `rows × cols` matrix in this layout.
    pub(super) fn covers(&self, rows: usize, cols: usize) -> bool {
        let (outer, inner) = if self.trans {
            (cols, rows)
        } else {
            (rows, cols)
        };
        inner <= self.ld
            && (outer - 1)
                .checked_mul(self.ld)
                .and_then(|x| x.checked_add(inner))
                .is_some_and(|need| need <= self.buf.len())
    }

    /// Whether the 16-byte-load entries may read it: 16-byte aligned, and a leading dimension
    /// that keeps every row (or column) so.
    pub(crate) fn aligned(&self) -> bool {
        let elems = 16 / std::mem::size_of::<T>();
        let ptr = self.buf.device_ptr(self.buf.stream()).0;
        ptr % 16 == 0 && self.ld.is_multiple_of(elems)
    }
}

/// A device buffer of raw bytes that the pipeline reuses for every element type, seen typed
/// through [`DevBuf::view`] and [`DevBuf::view_mut`].
pub(crate) struct DevBuf(CudaSlice<u8>);

impl DevBuf {
    pub(crate) fn bytes(&self) -> usize {
        self.0.len()
    }

    /// The first `len` elements as `T`.
    pub(crate) fn view<T: Element>(&self, len: usize) -> CudaView<'_, T> {
        // SAFETY: the memory is plain device memory of at least `len · size_of::<T>()` bytes
        // (checked by cudarc, which returns None otherwise) at a 256-byte-aligned address;
        // every bit pattern is a valid f32 or f64, so no typed view can see an invalid value.
        unsafe { self.0.transmute::<T>(len) }.expect("device buffer too small")
    }

    /// The first `len` elements as `T`, mutably.
    pub(crate) fn view_mut<T: Element>(&mut self, len: usize) -> CudaViewMut<'_, T> {
        // SAFETY: as for `view`; the exclusive borrow of `self` keeps the view unique.
        unsafe { self.0.transmute_mut::<T>(len) }.expect("device buffer too small")
    }

    pub(crate) fn addr(&self, stream: &Arc<CudaStream>) -> u64 {
        self.0.device_ptr(stream).0
    }
}

/// Allocates `len` uninitialised elements on `stream`.
pub(crate) fn alloc<T: Element>(
    stream: &Arc<CudaStream>,
    len: usize,
) -> Result<CudaSlice<T>, GpuDotError> {
    let bytes = len * std::mem::size_of::<T>();
    // SAFETY: the memory is uninitialised; every caller writes it (copy or kernel output
    // covering every element) before reading it back.
    unsafe { stream.alloc::<T>(len) }
        .map_err(|e| GpuDotError::driver("allocating device memory", bytes, e))
}

/// `f`, and once more after the device's idle workspaces are freed where `f` found the
/// device's memory full while some were kept (when it began, or when it failed: `f` may have
/// taken one and freed it with its error). The memory idle workspaces keep is the crate's to
/// give back before an allocation fails.
pub(crate) fn with_room<R>(
    gpu: &crate::device::context::Gpu,
    mut f: impl FnMut() -> Result<R, GpuDotError>,
) -> Result<R, GpuDotError> {
    let kept = gpu.keeps_idle();
    match f() {
        Err(GpuDotError::OutOfMemory { .. }) if gpu.free_idle() || kept => f(),
        done => done,
    }
}

/// The device buffers a product's launches reuse: the split-K and Ozaki workspace, and the
/// residues of an Ozaki product in the Karatsuba form, which are most of its memory and are
/// sized for the count its guard chose rather than for the most it weighs.
#[derive(Default)]
pub(crate) struct Scratch {
    pub(crate) ws: Option<DevBuf>,
    pub(crate) residues: Option<DevBuf>,
}

impl Scratch {
    /// The bytes of device memory both buffers hold.
    pub(crate) fn bytes(&self) -> usize {
        [&self.ws, &self.residues]
            .iter()
            .map(|b| b.as_ref().map_or(0, DevBuf::bytes))
            .sum()
    }
}

/// A device buffer of at least `bytes` bytes kept in `slot` across calls: grown (never
/// shrunk) when too small, so steady-state calls allocate nothing. `high_water` is the
/// device's record of the largest such buffer.
pub(crate) fn scratch<'s>(
    stream: &Arc<CudaStream>,
    slot: &'s mut Option<DevBuf>,
    bytes: usize,
    high_water: &std::sync::atomic::AtomicUsize,
) -> Result<&'s mut DevBuf, GpuDotError> {
    if slot.as_ref().is_none_or(|b| b.bytes() < bytes) {
        // Free the old buffer before allocating the larger one.
        *slot = None;
        let len = grown(high_water, bytes);
        // SAFETY: as for `alloc`: the bytes are written before they are read.
        let buf = unsafe { stream.alloc::<u8>(len) }
            .map_err(|e| GpuDotError::driver("allocating device memory", len, e))?;
        *slot = Some(DevBuf(buf));
    }
    Ok(slot.as_mut().expect("filled above"))
}

/// The size to grow a reusable buffer to for `len` bytes: [`grow_to`], or the largest such
/// buffer made so far (`high_water`) when that is at most 4× more. Reused buffers then settle
/// at one size after a warm-up, instead of creeping up as each meets a larger product.
pub(crate) fn grown(high_water: &std::sync::atomic::AtomicUsize, len: usize) -> usize {
    use std::sync::atomic::Ordering;
    let want = grow_to(len);
    let hw = high_water.fetch_max(want, Ordering::Relaxed).max(want);
    if hw <= want.saturating_mul(4) {
        hw
    } else {
        want
    }
}

/// The size a buffer asked to hold `len` bytes is grown to: the next power of two up to
/// 4 MiB, then the next multiple of 4 MiB (so repeated growth is geometric while small and
/// wastes at most 4 MiB when large).
pub(crate) fn grow_to(len: usize) -> usize {
    const STEP: usize = 4 << 20;
    if len <= STEP {
        len.next_power_of_two()
    } else {
        len.div_ceil(STEP) * STEP
    }
}

/// Copies `data` into a new device buffer.
pub(crate) fn upload<T: Element>(
    stream: &Arc<CudaStream>,
    data: &[T],
) -> Result<CudaSlice<T>, GpuDotError> {
    let mut buf = alloc(stream, data.len())?;
    stream
        .memcpy_htod(data, &mut buf)
        .map_err(GpuDotError::at("copying an operand to the device"))?;
    Ok(buf)
}

/// Fills `buf` with NaN (every byte 0xFF is a quiet NaN in both element types).
pub(crate) fn poison<T: Element, D: cudarc::driver::DevicePtrMut<T>>(
    stream: &Arc<CudaStream>,
    buf: &mut D,
) -> Result<(), GpuDotError> {
    let bytes = buf.len() * std::mem::size_of::<T>();
    stream
        .context()
        .bind_to_thread()
        .map_err(GpuDotError::at("binding the context"))?;
    let (ptr, _record) = buf.device_ptr_mut(stream);
    // SAFETY: `ptr` is valid for `bytes` bytes (the whole slice) on `stream`; `_record` keeps
    // cudarc's stream ordering for the slice until the memset is enqueued.
    unsafe { cudarc::driver::result::memset_d8_async(ptr, 0xFF, bytes, stream.cu_stream()) }
        .map_err(GpuDotError::at("poisoning the output"))
}

/// The launch shape of the grid-stride element-wise kernels ([`Aux`](crate::engine::table::Aux)): 256 threads a block,
/// at most 8192 blocks, which loop over the rest.
pub(crate) fn grid_stride(elements: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (elements.div_ceil(256).clamp(1, 8192) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Checks that each dimension fits the kernels' `int` arguments.
pub(crate) fn check_dims(m: usize, k: usize, n: usize) -> Result<(), GpuDotError> {
    let max = i32::MAX as usize;
    if m > max || k > max || n > max {
        return Err(GpuDotError::TooLarge { dims: (m, k, n) });
    }
    Ok(())
}

/// The arguments of every GEMM and GEMV entry, `(M, N, K, A, lda, B, ldb, C, ldc)`
/// (`GEMM_PARAMS` in kernels/common.cuh), checked on construction: dimensions at least 1 and
/// within `int`, and buffers that hold every element a kernel may index.
pub(crate) struct GemmArgs<'v, 'a, T> {
    pub(super) m: i32,
    pub(super) n: i32,
    pub(super) k: i32,
    pub(super) a: &'v DeviceOperand<'a, T>,
    pub(super) lda: i64,
    pub(super) b: &'v DeviceOperand<'a, T>,
    pub(super) ldb: i64,
    pub(super) ldc: i64,
    /// The precision asked for (f32 products; see [`TileRow::of`](crate::engine::table::TileRow::of)).
    pub(super) precision: Precision,
    /// The product is a complex one read as reals (see `DotOptions::complex_pairs`).
    pub(super) pairs: bool,
}

impl<'v, 'a, T> GemmArgs<'v, 'a, T> {
    /// Element strides `(sr, sk)` of op(A) (`m × k`) and of op(B)ᵀ (`n × k`): element (r, k)
    /// at `r·sr + k·sk`.
    pub(crate) fn row_strides(&self) -> ((i64, i64), (i64, i64)) {
        (
            if self.a.trans {
                (1, self.lda)
            } else {
                (self.lda, 1)
            },
            if self.b.trans {
                (self.ldb, 1)
            } else {
                (1, self.ldb)
            },
        )
    }

    pub(crate) fn new(
        (m, k, n): (usize, usize, usize),
        a: &'v DeviceOperand<'a, T>,
        b: &'v DeviceOperand<'a, T>,
        c: &CudaViewMut<'_, T>,
        ldc: usize,
    ) -> Result<Self, GpuDotError> {
        check_dims(m, k, n)?;
        assert!(m > 0 && k > 0 && n > 0, "empty products never launch");
        assert!(
            a.covers(m, k) && b.covers(k, n),
            "operand buffers too small"
        );
        assert!(
            n <= ldc && (m - 1) * ldc + n <= c.len(),
            "output buffer too small"
        );
        Ok(GemmArgs {
            m: m as i32,
            n: n as i32,
            k: k as i32,
            a,
            lda: a.ld as i64,
            b,
            ldb: b.ld as i64,
            ldc: ldc as i64,
            precision: Precision::Native,
            pairs: false,
        })
    }

    /// The same product in `precision` (f32 products; f64 ignores it).
    pub(crate) fn with_precision(self, precision: Precision) -> Self {
        GemmArgs { precision, ..self }
    }

    pub(crate) fn precision(&self) -> Precision {
        self.precision
    }

    /// The same product, marked as a complex one read as reals where `pairs` (op(A) `m × 2k`
    /// with each row's parts interleaved, op(B) the `2k × 2n` expansion of a complex `k × n`).
    pub(crate) fn with_pairs(self, pairs: bool) -> Self {
        GemmArgs { pairs, ..self }
    }

    /// Whether the product is a complex one read as reals ([`with_pairs`](Self::with_pairs)).
    pub(crate) fn pairs(&self) -> bool {
        self.pairs
    }

    pub(crate) fn dims(&self) -> (usize, usize, usize) {
        (self.m as usize, self.k as usize, self.n as usize)
    }

    /// The operands' buffers.
    pub(crate) fn bufs(&self) -> (&'v CudaView<'a, T>, &'v CudaView<'a, T>) {
        (&self.a.buf, &self.b.buf)
    }

    /// C's leading dimension.
    pub(crate) fn ldc(&self) -> i64 {
        self.ldc
    }

    pub(crate) fn trans(&self) -> (bool, bool) {
        (self.a.trans, self.b.trans)
    }

    /// The same product writing `c` with leading dimension `ldc` instead (split-K partials).
    pub(super) fn with_ldc(&self, ldc: usize) -> Self {
        GemmArgs {
            ldc: ldc as i64,
            ..*self
        }
    }

    /// Pushes the nine arguments in order onto `builder`, with `c` as C.
    pub(super) fn push<'b>(&'b self, builder: &mut Launch<'b>, c: &CudaViewMut<'_, T>)
    where
        T: Element,
    {
        builder
            .arg(&self.m)
            .arg(&self.n)
            .arg(&self.k)
            .view(&self.a.buf)
            .arg(&self.lda)
            .view(&self.b.buf)
            .arg(&self.ldb)
            .view(c)
            .arg(&self.ldc);
    }
}

impl<T> Clone for GemmArgs<'_, '_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for GemmArgs<'_, '_, T> {}

/// A grid extent along x for `blocks` blocks, or [`GpuDotError::TooLarge`].
pub(crate) fn grid_x(blocks: usize) -> Result<u32, GpuDotError> {
    u32::try_from(blocks)
        .ok()
        .filter(|&b| b <= i32::MAX as u32)
        .ok_or(GpuDotError::TooLarge {
            dims: (blocks, 0, 0),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_grow_geometrically_then_by_steps() {
        assert_eq!(grow_to(1), 1);
        assert_eq!(grow_to(1000), 1024);
        assert_eq!(grow_to(4 << 20), 4 << 20);
        assert_eq!(grow_to((4 << 20) + 1), 8 << 20);
        let hw = std::sync::atomic::AtomicUsize::new(0);
        assert_eq!(grown(&hw, 16 << 20), 16 << 20);
        // Reuses the high-water size when at most 4× the need.
        assert_eq!(grown(&hw, 5 << 20), 16 << 20);
        assert_eq!(grown(&hw, 1 << 20), 1 << 20);
    }
}

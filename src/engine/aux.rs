//! The auxiliary kernels around the GEMMs: `C = alpha·T + beta·C` and the element-wise
//! kernels of [`GpuMatrix`](crate::GpuMatrix).

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr};

use crate::device::context::Gpu;
use crate::element::Element;
use crate::engine::args::grid_stride;
use crate::engine::enqueue::Launch;
use crate::engine::family::Family;
use crate::engine::table::Aux;
use crate::error::GpuDotError;

/// Enqueues `C = alpha·T + beta·C` over a `rows × cols` block (T row-major with leading
/// dimension `cols`; `None` means T is zero).
#[allow(clippy::too_many_arguments)]
pub(crate) fn axpby<T: Element>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    (rows, cols): (usize, usize),
    alpha: T,
    t: Option<&CudaView<'_, T>>,
    beta: T,
    c: &mut CudaViewMut<'_, T>,
    ldc: usize,
) -> Result<(), GpuDotError> {
    assert!(
        cols <= ldc && (rows - 1) * ldc + cols <= c.len(),
        "output too small"
    );
    assert!(t.is_none_or(|t| t.len() >= rows * cols), "T too small");
    let func = aux(gpu, Aux::Axpby, T::DTYPE)?;
    let cfg = grid_stride(rows * cols);
    let (m, n, ldt, ldc) = (rows as i32, cols as i32, cols as i64, ldc as i64);
    let null = 0u64;
    let mut builder = Launch::on(gpu, stream, &func);
    builder.arg(&m).arg(&n).arg(&alpha);
    match t {
        Some(t) => builder.view(t),
        None => builder.arg(&null),
    };
    builder.arg(&ldt).arg(&beta).view(c).arg(&ldc);
    // SAFETY: arguments match `{s,d}gemm_axpby(int M, int N, T alpha, const T* T, long long
    // ldt, T beta, T* C, long long ldc)` in order and type (a null T is a 64-bit zero); T
    // holds rows·cols elements at leading dimension cols and C covers rows × cols at ldc
    // (asserted above); the kernel loops over all M·N elements whatever the grid.
    unsafe { builder.launch(cfg) }
        .map(drop)
        .map_err(GpuDotError::at("launching the epilogue"))
}

/// An element-wise operation on device buffers of `len` elements ([`elementwise`]).
pub(crate) enum Elementwise<'a, T> {
    /// `x = max(x, 0)`.
    Relu(&'a mut CudaSlice<T>),
    /// `g = h > 0 ? g : 0`.
    ReluBackward {
        g: &'a mut CudaSlice<T>,
        h: &'a CudaSlice<T>,
    },
}

/// Runs `op` over the first `len` elements of its buffers and waits for it.
pub(crate) fn elementwise<T: Element>(
    gpu: &Gpu,
    op: Elementwise<'_, T>,
    len: usize,
) -> Result<(), GpuDotError> {
    if len == 0 {
        return Ok(());
    }
    let stream = gpu.stream()?;
    let n = len as i64;
    let cfg = grid_stride(len);
    match op {
        Elementwise::Relu(x) => {
            assert!(x.len() >= len, "buffer too small");
            let func = aux(gpu, Aux::Relu, T::DTYPE)?;
            let mut builder = Launch::on(gpu, &stream, &func);
            builder.arg(&n).view(x);
            // SAFETY: arguments match `{,d}elem_relu(long long N, T* X)` in order and type; X
            // holds at least N elements (asserted above); the kernel loops over all N
            // elements whatever the grid.
            unsafe { builder.launch(cfg) }
        }
        Elementwise::ReluBackward { g, h } => {
            assert!(g.len() >= len && h.len() >= len, "buffer too small");
            let func = aux(gpu, Aux::ReluBackward, T::DTYPE)?;
            let mut builder = Launch::on(gpu, &stream, &func);
            builder.arg(&n).view(g).view(h);
            // SAFETY: arguments match `{,d}elem_relu_backward(long long N, T* G, const T* H)`
            // in order and type; G and H hold at least N elements each (asserted above) and
            // are different buffers (one borrowed mutably); the kernel loops over all N
            // elements whatever the grid.
            unsafe { builder.launch(cfg) }
        }
    }
    .map_err(GpuDotError::at("launching an element-wise kernel"))?;
    stream
        .synchronize()
        .map_err(GpuDotError::at("waiting for an element-wise kernel"))
}

/// A complex matrix on the device as the complex kernels read it: `rows × cols` elements of
/// `Complex<T>`, element `(r, c)` at the reals `2·(r·sr + c·sc)` and the one after.
#[derive(Clone, Copy)]
pub(crate) struct ComplexMat<'a, T> {
    pub(crate) buf: &'a CudaSlice<T>,
    pub(crate) dim: (usize, usize),
    /// Row and column strides, in complex elements.
    pub(crate) strides: (usize, usize),
}

impl<T> ComplexMat<'_, T> {
    /// Whether the buffer holds every element (a matrix of no elements reads nothing).
    fn covered(&self) -> bool {
        let ((rows, cols), (sr, sc)) = (self.dim, self.strides);
        if rows == 0 || cols == 0 {
            return true;
        }
        let last = (rows - 1)
            .checked_mul(sr)
            .and_then(|r| (cols - 1).checked_mul(sc).and_then(|c| r.checked_add(c)));
        last.and_then(|l| l.checked_mul(2)?.checked_add(1))
            .is_some_and(|l| l < self.buf.len())
    }
}

/// How [`complex_layout`] writes a complex matrix as reals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ComplexLayout {
    /// `rows × 2·cols` reals, row-major, each row's parts interleaved.
    Gathered,
    /// `2·rows × 2·cols` reals, row-major: each element `x + iy` the block `[[x, y], [−y, x]]`.
    Expanded,
}

impl ComplexLayout {
    /// The reals the layout takes for a `rows × cols` complex matrix.
    pub(crate) fn len(self, (rows, cols): (usize, usize)) -> usize {
        match self {
            ComplexLayout::Gathered => 2 * rows * cols,
            ComplexLayout::Expanded => 4 * rows * cols,
        }
    }
}

/// Enqueues the copy of `x` into `y` in `layout` (`y` from its start). A matrix of no elements
/// enqueues nothing.
pub(crate) fn complex_layout<T: Element>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    x: ComplexMat<'_, T>,
    layout: ComplexLayout,
    y: &mut CudaSlice<T>,
) -> Result<(), GpuDotError> {
    let (rows, cols) = x.dim;
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    assert!(x.covered(), "complex operand too small");
    assert!(y.len() >= layout.len(x.dim), "complex output too small");
    let which = match layout {
        ComplexLayout::Gathered => Aux::ComplexGather,
        ComplexLayout::Expanded => Aux::ComplexExpand,
    };
    // SAFETY: X holds every element the strides reach (`covered`, asserted above, with no
    // overflow in the index), Y the layout's reals (asserted above); X and Y are different
    // buffers (Y borrowed mutably).
    unsafe { launch_layout(gpu, stream, which, x.dim, x.strides, x.buf, y) }
}

/// Enqueues the expansion ([`ComplexLayout::Expanded`]) of the C-order `rows × cols` complex
/// matrix whose parts `x` holds (`rows × 2·cols` reals, each row's parts interleaved) into
/// the first `4·rows·cols` reals of `y`. A matrix of no elements enqueues nothing.
pub(crate) fn complex_expand<T: Element>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    (rows, cols): (usize, usize),
    x: &CudaView<'_, T>,
    y: &mut CudaViewMut<'_, T>,
) -> Result<(), GpuDotError> {
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    let layout = ComplexLayout::Expanded;
    assert!(x.len() >= 2 * rows * cols, "complex operand too small");
    assert!(
        y.len() >= layout.len((rows, cols)),
        "complex output too small"
    );
    // SAFETY: X holds the `rows × cols` elements at strides `(cols, 1)` (asserted above), Y the
    // layout's reals (asserted above); X and Y are different buffers (Y borrowed mutably).
    unsafe {
        launch_layout(
            gpu,
            stream,
            Aux::ComplexExpand,
            (rows, cols),
            (cols, 1),
            x,
            &*y,
        )
    }
}

/// Enqueues the layout kernel `which` from the `dim` complex elements of `x` at `strides` into
/// `y`.
///
/// # Safety
/// `x` holds every element the strides reach, `y` the layout's reals, and the two do not
/// overlap; both stay valid until the kernel has run.
unsafe fn launch_layout<T: Element, X: DevicePtr<T>, Y: DevicePtr<T>>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    which: Aux,
    (rows, cols): (usize, usize),
    (sr, sc): (usize, usize),
    x: &X,
    y: &Y,
) -> Result<(), GpuDotError> {
    let func = aux(gpu, which, T::DTYPE)?;
    let cfg = grid_stride(rows * cols);
    let (r, c, sr, sc) = (rows as i64, cols as i64, sr as i64, sc as i64);
    let mut builder = Launch::on(gpu, stream, &func);
    builder.arg(&r).arg(&c).view(x).arg(&sr).arg(&sc).view(y);
    // SAFETY: arguments match `{,d}elem_complex_{gather,expand}(long long rows, long long
    // cols, const T* X, long long sr, long long sc, T* Y)` in order and type; the caller
    // vouches for the extents and the disjointness of X and Y; the kernel loops over all
    // rows·cols elements whatever the grid.
    unsafe { builder.launch(cfg) }
        .map(drop)
        .map_err(GpuDotError::at("launching a complex layout kernel"))
}

/// Enqueues `C = alpha·P + beta·C` over `m × n` complex elements: `P` gathered (`m × 2n`
/// reals, `None` for zero), `C` with leading dimension `ldc` in complex elements. `beta == 0`
/// never reads `C`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn complex_axpby<T: Element>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    (m, n): (usize, usize),
    alpha: num_complex::Complex<T>,
    p: Option<&CudaSlice<T>>,
    beta: num_complex::Complex<T>,
    c: &mut CudaSlice<T>,
    ldc: usize,
) -> Result<(), GpuDotError> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    assert!(
        n <= ldc && 2 * ((m - 1) * ldc + n) <= c.len(),
        "complex output too small"
    );
    assert!(p.is_none_or(|p| p.len() >= 2 * m * n), "P too small");
    let func = aux(gpu, Aux::ComplexAxpby, T::DTYPE)?;
    let cfg = grid_stride(m * n);
    let fit = |x: usize| i32::try_from(x).expect("dimensions checked against the kernels' int");
    let (mi, ni, ldc) = (fit(m), fit(n), ldc as i64);
    let null = 0u64;
    let mut builder = Launch::on(gpu, stream, &func);
    builder.arg(&mi).arg(&ni).arg(&alpha.re).arg(&alpha.im);
    match p {
        Some(p) => builder.view(p),
        None => builder.arg(&null),
    };
    builder.arg(&beta.re).arg(&beta.im).view(c).arg(&ldc);
    // SAFETY: arguments match `{,d}elem_complex_axpby(int M, int N, T ar, T ai, const T* P,
    // T br, T bi, T* C, long long ldc)` in order and type (a null P is a 64-bit zero); P
    // holds 2·m·n reals and C covers m rows of n complex elements at ldc (asserted above);
    // P and C are different buffers (C borrowed mutably); the kernel loops over all m·n
    // elements whatever the grid.
    unsafe { builder.launch(cfg) }
        .map(drop)
        .map_err(GpuDotError::at("launching the complex epilogue"))
}

fn aux(gpu: &Gpu, aux: Aux, dtype: crate::element::Dtype) -> Result<CudaFunction, GpuDotError> {
    gpu.function(Family::fast(dtype), aux.entry(dtype))
}

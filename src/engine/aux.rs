//! The auxiliary kernels around the GEMMs: `C = alpha·T + beta·C` and the element-wise
//! kernels of [`GpuMatrix`](crate::GpuMatrix).

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut};

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

fn aux(gpu: &Gpu, aux: Aux, dtype: crate::element::Dtype) -> Result<CudaFunction, GpuDotError> {
    gpu.function(Family::fast(dtype), aux.entry(dtype))
}

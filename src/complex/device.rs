//! Complex products over device operands: [`GpuMatrix`](crate::GpuMatrix)es of `Complex<f32>`
//! and `Complex<f64>`, their views, and the general product into one or from one.
//!
//! The product is the host arrays' ([`stacked`](super::stacked)): one real product of `A` read
//! as `m × 2k` reals, times `B` expanded to `2k × 2n`, into `C` read as `m × 2n` reals, in the
//! precision the options ask for and under the default's guard. A device `A` is read in
//! place, or gathered on the device when it is a transposed view (its parts are then not side
//! by side along its rows); a device `B` is expanded on the device. A host operand is read as
//! the host arrays' route reads it. A device `C` is written in place when `alpha` is one and
//! `beta` zero; otherwise the product lands in device memory of its own, and the complex
//! epilogue applies `alpha` and `beta` there (`beta == 0` never reads `C`). A host `C` takes
//! `alpha·P + beta·C` on the host, as the host arrays' route computes it.

use cudarc::driver::CudaSlice;
use ndarray::{Array2, ArrayViewMut2, Zip};
use num_complex::Complex;
use num_traits::{One, Zero};

use crate::device::context::{self, Gpu, Home};
use crate::element::Element;
use crate::engine::aux::{self, ComplexLayout, ComplexMat};
use crate::error::GpuDotError;
use crate::matrix;
use crate::options::{Backend, DotOptions};
use crate::pipeline::{self, DevMat, Dst, Src};
use crate::route::{self, Route};
use crate::scalar::{Operand, Output};

/// `c = alpha·a·b + beta·c` over host or device operands (`matrix::general` for the complex
/// types). All on the host, it is the host arrays' general product, with their threshold and
/// fallback; with a device operand or output it runs on that device, and a failure there is
/// returned (a device matrix has no CPU product to fall back on).
pub(crate) fn general<T: Element>(
    alpha: Complex<T>,
    a: &Operand<'_, Complex<T>>,
    b: &Operand<'_, Complex<T>>,
    beta: Complex<T>,
    c: &mut Output<'_, Complex<T>>,
    opts: &DotOptions,
    fall_back: bool,
) -> Result<Route, GpuDotError> {
    if let (Src::Host(av), Src::Host(bv), Dst::Host(cv)) = (&a.0, &b.0, &mut c.0) {
        let (av, bv) = (av.view(), bv.view());
        return super::general(alpha, av, bv, beta, cv.view_mut(), opts, fall_back);
    }
    route::check_shapes(a.0.dim(), b.0.dim())?;
    let ((m, k), n) = (a.0.dim(), b.0.dim().1);
    if c.0.dim() != (m, n) {
        return Err(GpuDotError::OutputShape {
            expected: (m, n),
            found: c.0.dim(),
        });
    }
    if m == 0 || n == 0 {
        return Ok(Route::Empty);
    }
    if opts.backend == Backend::Cpu {
        return Err(GpuDotError::CpuBackendWithDeviceOperands);
    }
    let homes = [a.0.home(), b.0.home(), c.0.home()];
    let gpu = context::gpu_on(route::device_for(
        opts,
        homes.map(|h| h.map(|(home, _)| home)),
    )?)?;
    for (home, dim) in homes.into_iter().flatten() {
        gpu.check_home(home, dim)?;
    }
    // The real product's dimensions, and the epilogue's, fit the kernels' arguments.
    crate::engine::args::check_dims(m, 2 * k.max(1), 2 * n)?;
    if k == 0 {
        // alpha·A·B is zero: C = beta·C.
        scale(&gpu, beta, &mut c.0)?;
        return Ok(Route::Empty);
    }
    let direct = alpha.is_one() && beta.is_zero() && matches!(c.0, Dst::Device { .. });
    let a_host = match &a.0 {
        Src::Host(v) => Some(super::as_reals(v.view())),
        _ => None,
    };
    let a_dev = match &a.0 {
        Src::Device { mat, .. } if mat.trans => {
            Some(laid_out(&gpu, device_mat(&a.0), ComplexLayout::Gathered)?)
        }
        _ => None,
    };
    let b_host = match &b.0 {
        Src::Host(v) => Some(super::as_reals(v.view())),
        _ => None,
    };
    let b_dev = match &b.0 {
        Src::Device { .. } => Some(laid_out(&gpu, device_mat(&b.0), ComplexLayout::Expanded)?),
        _ => None,
    };
    // The real product writes every element of its own memory (its `beta` is zero).
    let mut p = if direct {
        None
    } else {
        Some(uninit::<T>(&gpu, 2 * m * n)?)
    };
    let home = gpu.home();
    let a_r = match (&a.0, &a_host, &a_dev) {
        (_, Some(host), _) => Src::Host(host.view()),
        (_, _, Some(buf)) => dense(buf, m, 2 * k, home),
        (Src::Device { mat, home, .. }, ..) => Src::Device {
            mat: DevMat {
                buf: mat.buf,
                trans: false,
                ld: 2 * mat.ld,
            },
            rows: m,
            cols: 2 * k,
            home: *home,
        },
        (Src::Host(_) | Src::HostParts(_), None, _) => {
            unreachable!("a host A is read as reals above")
        }
    };
    let b_r = match (&b_host, &b_dev) {
        (Some(host), _) => Src::HostParts(host.view()),
        (_, Some(buf)) => dense(buf, 2 * k, 2 * n, home),
        (None, None) => unreachable!("B is on the host or the device"),
    };
    let c_r = c_reals(p.as_mut(), &mut c.0, (m, n), home);
    let route = stacked_product(gpu.info.ordinal, a_r, b_r, c_r, opts)?;
    if let Some(p) = &p {
        finish(&gpu, alpha, p, beta, &mut c.0)?;
    }
    Ok(route)
}

/// The real product `c = a·b` of a complex product's stacked parts on `device`, whatever the
/// options' backend (the complex route chose the device, and answers a failure there itself),
/// marked as a complex product's (the paired forms of the emulation); its route, marked
/// complex.
pub(super) fn stacked_product<T: Element>(
    device: usize,
    a: Src<'_, T>,
    b: Src<'_, T>,
    c: Dst<'_, T>,
    opts: &DotOptions,
) -> Result<Route, GpuDotError> {
    let opts = opts
        .clone()
        .device(device)
        .backend(Backend::Gpu)
        .complex_pairs();
    let (a, b, mut c) = (Operand(a), Operand(b), Output(c));
    let route = matrix::general_real(T::one(), &a, &b, T::zero(), &mut c, &opts, false)?;
    Ok(super::stacked_route(route))
}

/// `len` reals of new device memory, uninitialised, once the allocation is done: for a
/// buffer that a kernel writes whole before anything reads it.
fn uninit<T: Element>(gpu: &Gpu, len: usize) -> Result<CudaSlice<T>, GpuDotError> {
    let stream = gpu.stream()?;
    let buf = crate::engine::args::with_room(gpu, || {
        crate::engine::args::alloc::<T>(&stream, len.max(1))
    })?;
    stream
        .synchronize()
        .map_err(GpuDotError::at("waiting for a device allocation"))?;
    Ok(buf)
}

/// A C-order `rows × cols` real matrix in `buf`, on the device at `home`.
pub(super) fn dense<T>(buf: &CudaSlice<T>, rows: usize, cols: usize, home: Home) -> Src<'_, T> {
    Src::Device {
        mat: DevMat {
            buf,
            trans: false,
            ld: cols,
        },
        rows,
        cols,
        home,
    }
}

/// The `m × 2n` reals the real product writes: the product's own memory `p` (on the device at
/// `home`), else the device `C` in place.
fn c_reals<'s, T>(
    p: Option<&'s mut CudaSlice<T>>,
    c: &'s mut Dst<'_, Complex<T>, T>,
    (m, n): (usize, usize),
    home: Home,
) -> Dst<'s, T> {
    match (p, c) {
        (Some(p), _) => Dst::Device {
            buf: p,
            rows: m,
            cols: 2 * n,
            ld: 2 * n,
            home,
        },
        (None, Dst::Device { buf, ld, home, .. }) => Dst::Device {
            buf,
            rows: m,
            cols: 2 * n,
            ld: 2 * *ld,
            home: *home,
        },
        (None, _) => unreachable!("only a device C is written in place"),
    }
}

/// The complex matrix a device operand holds, as the complex kernels read it.
fn device_mat<'a, T>(src: &Src<'a, Complex<T>, T>) -> ComplexMat<'a, T> {
    let Src::Device {
        mat, rows, cols, ..
    } = src
    else {
        unreachable!("only device operands are laid out on the device")
    };
    ComplexMat {
        buf: mat.buf,
        dim: (*rows, *cols),
        strides: if mat.trans { (1, mat.ld) } else { (mat.ld, 1) },
    }
}

/// `x` in `layout`, in new device memory, once the device has written it.
fn laid_out<T: Element>(
    gpu: &Gpu,
    x: ComplexMat<'_, T>,
    layout: ComplexLayout,
) -> Result<CudaSlice<T>, GpuDotError> {
    let stream = gpu.stream()?;
    // Every element is the layout kernel's (it writes all `layout.len` reals), so the memory
    // is not cleared first.
    let len = layout.len(x.dim).max(1);
    let mut y =
        crate::engine::args::with_room(gpu, || crate::engine::args::alloc::<T>(&stream, len))?;
    aux::complex_layout(gpu, &stream, x, layout, &mut y)?;
    stream
        .synchronize()
        .map_err(GpuDotError::at("waiting for a complex layout kernel"))?;
    Ok(y)
}

/// `C = alpha·P + beta·C`, `P` the product on the device (`m × 2n` reals).
fn finish<T: Element>(
    gpu: &Gpu,
    alpha: Complex<T>,
    p: &CudaSlice<T>,
    beta: Complex<T>,
    c: &mut Dst<'_, Complex<T>, T>,
) -> Result<(), GpuDotError> {
    let (m, n) = c.dim();
    match c {
        Dst::Device { buf, ld, .. } => epilogue(gpu, (m, n), alpha, Some(p), beta, buf, *ld),
        Dst::Host(c) => {
            let reals = pipeline::download_fresh(gpu, p, (m, 2 * n))?;
            let p = from_reals(reals);
            if beta.is_zero() {
                Zip::from(c).and(&p).for_each(|c, &p| *c = alpha * p);
            } else {
                Zip::from(c)
                    .and(&p)
                    .for_each(|c, &p| *c = alpha * p + beta * *c);
            }
            Ok(())
        }
        Dst::Fresh(_) => unreachable!("a complex output is never fresh memory"),
    }
}

/// `C = beta·C`, the product of an empty sum (`k == 0`): `beta == 0` never reads `C`.
fn scale<T: Element>(
    gpu: &Gpu,
    beta: Complex<T>,
    c: &mut Dst<'_, Complex<T>, T>,
) -> Result<(), GpuDotError> {
    let (m, n) = c.dim();
    match c {
        Dst::Device { buf, ld, .. } => epilogue(gpu, (m, n), Complex::zero(), None, beta, buf, *ld),
        Dst::Host(c) if beta.is_zero() => {
            c.fill(Complex::zero());
            Ok(())
        }
        Dst::Host(c) => {
            c.map_inplace(|z| *z = beta * *z);
            Ok(())
        }
        Dst::Fresh(_) => unreachable!("a complex output is never fresh memory"),
    }
}

/// Runs the complex epilogue on a device `C` and waits for it.
fn epilogue<T: Element>(
    gpu: &Gpu,
    (m, n): (usize, usize),
    alpha: Complex<T>,
    p: Option<&CudaSlice<T>>,
    beta: Complex<T>,
    c: &mut CudaSlice<T>,
    ldc: usize,
) -> Result<(), GpuDotError> {
    let stream = gpu.stream()?;
    aux::complex_axpby(gpu, &stream, (m, n), alpha, p, beta, c, ldc)?;
    stream
        .synchronize()
        .map_err(GpuDotError::at("waiting for the complex epilogue"))
}

/// A C-order array of `rows × 2·cols` reals as the complex matrix it holds.
pub(crate) fn from_reals<T: Element>(reals: Array2<T>) -> Array2<Complex<T>> {
    let (rows, width) = reals.dim();
    let standard = reals.as_standard_layout();
    let data = standard.as_slice().expect("a C-order array");
    let parts = data.chunks_exact(2).map(|p| Complex::new(p[0], p[1]));
    Array2::from_shape_vec((rows, width / 2), parts.collect()).expect("two reals an element")
}

/// `a`'s elements as `rows × 2·cols` reals, in place, where its columns are contiguous and its
/// rows do not run backwards; else `a` back.
#[allow(clippy::type_complexity)]
pub(crate) fn reals_of_view<T: Element>(
    mut a: ArrayViewMut2<'_, Complex<T>>,
) -> Result<ArrayViewMut2<'_, T>, ArrayViewMut2<'_, Complex<T>>> {
    let (rows, cols) = a.dim();
    let [rs, cs] = [a.strides()[0], a.strides()[1]];
    if rows == 0 || cols == 0 {
        return Ok(ArrayViewMut2::from_shape((rows, 2 * cols), &mut []).expect("empty"));
    }
    if (cols > 1 && cs != 1) || (rows > 1 && rs < 0) {
        return Err(a);
    }
    let row_stride = if rows > 1 { 2 * rs as usize } else { 2 * cols };
    let ptr = a.as_mut_ptr().cast::<T>();
    let shape = ndarray::ShapeBuilder::strides((rows, 2 * cols), (row_stride, 1));
    // SAFETY: `Complex<T>` is `#[repr(C)]` with two fields of `T` (its size two `T`s', its
    // alignment `T`'s), so element (r, c) of `a`, at `ptr + r·rs + c` complex numbers (its
    // columns contiguous, its row stride `rs ≥ 0`), is the reals at `ptr + 2·(r·rs + c)` and
    // the one after: the view's (r, 2c) and (r, 2c + 1). The view covers exactly `a`'s
    // elements, which `a` borrows mutably and exclusively for the returned lifetime (`a` is
    // consumed).
    Ok(unsafe { ArrayViewMut2::from_shape_ptr(shape, ptr) })
}

//! Complex products: `Complex<f32>` and `Complex<f64>` operands, as ndarray's `dot` takes
//! them.
//!
//! On the GPU a complex matrix product is one real product of its stacked parts
//! ([`stacked`]): `A` read as an `m × 2k` real matrix (in place when in C order), times `B`
//! expanded to `2k × 2n` (each element the block `[[bᵣ, bᵢ], [−bᵢ, bᵣ]]`), lands in `C` read
//! as an `m × 2n` real matrix:
//!
//! ```text
//! cᵣ = Σ aᵣ·bᵣ + aᵢ·(−bᵢ)        cᵢ = Σ aᵣ·bᵢ + aᵢ·bᵣ
//! ```
//!
//! It is the real type's product with its precision, its guard and its errors, over `2k`
//! terms. Every element of a real product the guard passes keeps `7·u·Σ|x||y|` over its
//! terms, which for each part is at most `7·u·Σₖ|aᵢₖ||bₖⱼ|` (Cauchy–Schwarz on each pair of
//! terms), so the modulus of a complex element's error stays within
//! `7·√2·u·Σₖ|aᵢₖ||bₖⱼ|` (docs/precision.md), the complex form of the real contract. Batches
//! run as four real batches of the parts (`re = Aᵣ·Bᵣ − Aᵢ·Bᵢ`, `im = Aᵣ·Bᵢ + Aᵢ·Bᵣ`), read
//! in place as views with stride 2, within `(7·√2 + 1)·u·Σₖ|aᵢₖ||bₖⱼ|`. A complex product
//! runs on one device. The CPU route is ndarray's own complex product.

use std::mem::MaybeUninit;

use ndarray::linalg::general_mat_mul;
use ndarray::{
    Array2, Array3, ArrayBase, ArrayView2, ArrayView3, ArrayViewMut2, CowArray, Data, DataMut, Ix2,
    ShapeBuilder, Zip,
};
use num_complex::Complex;
use num_traits::Zero;

use crate::batch;
use crate::device::api::Device;
use crate::device::context;
use crate::element::Element;
use crate::error::GpuDotError;
use crate::matrix::{try_general_mat_mul_with, GpuMatrix};
use crate::options::{Backend, DotOptions, Precision};
use crate::pipeline::{Dst, Src};
use crate::route::{self, CpuReason, Decision, HostCopies, Product, Route};
use crate::scalar::dispatch::Dispatch;
use crate::scalar::Rhs;
use crate::scalar::{Operand, Output};

mod device;

impl<T: Element> Dispatch for Complex<T> {
    #[inline(always)]
    fn cpu_first(batch: usize, mkn: (usize, usize, usize)) -> bool {
        // Four real products: 8·m·k·n real flops against the complex threshold.
        route::cpu_first_complex(batch, mkn, T::DTYPE)
    }

    fn dot_as<S1, S2, C>(
        a: &ArrayBase<S1, Ix2>,
        b: &ArrayBase<S2, Ix2>,
        opts: &DotOptions,
        fall_back: bool,
        finish: impl FnOnce(Array2<Complex<T>>) -> C,
        cpu: impl FnOnce() -> C,
    ) -> Result<Product<C>, GpuDotError>
    where
        S1: Data<Elem = Complex<T>>,
        S2: Data<Elem = Complex<T>>,
    {
        dot_as(a.view(), b.view(), opts, fall_back, finish, cpu)
    }

    fn general(
        alpha: Complex<T>,
        a: ArrayView2<'_, Complex<T>>,
        b: ArrayView2<'_, Complex<T>>,
        beta: Complex<T>,
        c: &mut ArrayBase<impl DataMut<Elem = Complex<T>>, Ix2>,
        opts: &DotOptions,
        fall_back: bool,
    ) -> Result<Route, GpuDotError> {
        general(alpha, a, b, beta, c.view_mut(), opts, fall_back)
    }

    fn batch_dot(
        a: ArrayView3<'_, Complex<T>>,
        b: Rhs<'_, Complex<T>>,
        opts: &DotOptions,
        fall_back: bool,
    ) -> Result<Product<Array3<Complex<T>>>, GpuDotError> {
        batch_dot(a, b, opts, fall_back)
    }

    fn batch_cpu(a: &ArrayView3<'_, Complex<T>>, b: &Rhs<'_, Complex<T>>) -> Array3<Complex<T>> {
        batch::cpu(a, b)
    }

    type Reals = T;

    fn device_reals(a: ArrayView2<'_, Complex<T>>) -> CowArray<'_, T, Ix2> {
        as_reals(a)
    }

    fn device_reals_mut(
        a: ArrayViewMut2<'_, Complex<T>>,
    ) -> Result<ArrayViewMut2<'_, T>, ArrayViewMut2<'_, Complex<T>>> {
        device::reals_of_view(a)
    }

    fn from_device_reals(reals: Array2<T>) -> Array2<Complex<T>> {
        device::from_reals(reals)
    }

    fn general_operands(
        alpha: Complex<T>,
        a: &Operand<'_, Complex<T>>,
        b: &Operand<'_, Complex<T>>,
        beta: Complex<T>,
        c: &mut Output<'_, Complex<T>>,
        opts: &DotOptions,
        fall_back: bool,
    ) -> Result<Route, GpuDotError> {
        device::general(alpha, a, b, beta, c, opts, fall_back)
    }
}

/// `a · b` as `opts` asks, in ndarray's memory order for the operands; `finish` and `cpu` as
/// in [`route::dot_as`].
pub(crate) fn dot_as<'a, T: Element, C>(
    a: ArrayView2<'a, Complex<T>>,
    b: ArrayView2<'a, Complex<T>>,
    opts: &DotOptions,
    fall_back: bool,
    finish: impl FnOnce(Array2<Complex<T>>) -> C,
    cpu: impl FnOnce() -> C,
) -> Result<Product<C>, GpuDotError> {
    route::check_shapes(a.dim(), b.dim())?;
    let ((m, k), n) = (a.dim(), b.ncols());
    let f_order = route::f_order_result(&a, &b);
    if m == 0 || n == 0 || k == 0 {
        return Ok(Product {
            c: finish(Array2::zeros((m, n).set_f(f_order))),
            route: Route::Empty,
        });
    }
    let device = match decide::<T>(opts, (m, k, n), fall_back)? {
        Ok(device) => device,
        Err(why) => {
            return Ok(Product {
                c: cpu(),
                route: Route::Cpu(why),
            })
        }
    };
    // Both operands column-major: Cᵀ = Bᵀ·Aᵀ, whose parts are then read row by row, into a
    // C-order n × m array, which is C in F order (as the real route does).
    let (av, bv) = if f_order {
        (b.reversed_axes(), a.reversed_axes())
    } else {
        (a, b)
    };
    let product = on_gpu(device, av, bv, opts);
    match product {
        Ok((c, route)) => {
            log::<T>(m, k, n, &Ok(Decision::Done(route.clone())));
            Ok(Product {
                c: finish(if f_order { c.reversed_axes() } else { c }),
                route,
            })
        }
        Err(e) if fall_back || opts.backend == Backend::Auto => {
            let why = CpuReason::GpuUnavailable(e);
            log::<T>(m, k, n, &Ok(Decision::Cpu(why.clone())));
            Ok(Product {
                c: cpu(),
                route: Route::Cpu(why),
            })
        }
        Err(e) => Err(e),
    }
}

/// `c = alpha·a·b + beta·c` over host arrays whose shapes agree, as ndarray's
/// `general_mat_mul` computes it (`beta == 0` never reads `c`). `c` is written only once the
/// device's part is done, so a GPU failure is answered on the CPU whatever `beta`.
pub(crate) fn general<T: Element>(
    alpha: Complex<T>,
    a: ArrayView2<'_, Complex<T>>,
    b: ArrayView2<'_, Complex<T>>,
    beta: Complex<T>,
    mut c: ArrayViewMut2<'_, Complex<T>>,
    opts: &DotOptions,
    fall_back: bool,
) -> Result<Route, GpuDotError> {
    route::check_shapes(a.dim(), b.dim())?;
    let ((m, k), n) = (a.dim(), b.ncols());
    if c.dim() != (m, n) {
        return Err(GpuDotError::OutputShape {
            expected: (m, n),
            found: c.dim(),
        });
    }
    if m == 0 || n == 0 {
        return Ok(Route::Empty);
    }
    let cpu = |c: &mut ArrayViewMut2<'_, Complex<T>>| general_mat_mul(alpha, &a, &b, beta, c);
    if k == 0 {
        cpu(&mut c);
        return Ok(Route::Empty);
    }
    let device = match decide::<T>(opts, (m, k, n), fall_back)? {
        Ok(device) => device,
        Err(why) => {
            cpu(&mut c);
            return Ok(Route::Cpu(why));
        }
    };
    let product = on_gpu(device, a, b, opts);
    match product {
        Ok((p, route)) => {
            if beta.is_zero() {
                Zip::from(&mut c).and(&p).for_each(|c, &p| *c = alpha * p);
            } else {
                Zip::from(&mut c)
                    .and(&p)
                    .for_each(|c, &p| *c = alpha * p + beta * *c);
            }
            log::<T>(m, k, n, &Ok(Decision::Done(route.clone())));
            Ok(route)
        }
        Err(e) if fall_back || opts.backend == Backend::Auto => {
            let why = CpuReason::GpuUnavailable(e);
            log::<T>(m, k, n, &Ok(Decision::Cpu(why.clone())));
            cpu(&mut c);
            Ok(Route::Cpu(why))
        }
        Err(e) => Err(e),
    }
}

/// The batch `a · b` as `opts` asks, in standard (C) order: four real batches of the parts
/// (each the real types' batch: each part is uploaded for the two batches it is in, and each
/// batch is one launch for every item), combined on the host. `fall_back`: a failing GPU computes on the CPU whatever the backend.
pub(crate) fn batch_dot<T: Element>(
    a: ArrayView3<'_, Complex<T>>,
    b: Rhs<'_, Complex<T>>,
    opts: &DotOptions,
    fall_back: bool,
) -> Result<Product<Array3<Complex<T>>>, GpuDotError> {
    let (batch, m, k) = a.dim();
    let (batch2, k2, n) = b.dim();
    batch::check_batch_shapes((batch, m, k), (batch2, k2, n))?;
    if batch == 0 || m == 0 || n == 0 || k == 0 {
        return Ok(Product {
            c: Array3::zeros((batch, m, n)),
            route: Route::Empty,
        });
    }
    let cpu = || batch::cpu(&a, &b);
    let flops = route::flops(batch.saturating_mul(m), k, n).saturating_mul(4);
    if let Some(why) = route::cpu_under(opts, flops, opts.complex_threshold(T::DTYPE)) {
        return Ok(Product {
            c: cpu(),
            route: Route::Cpu(why),
        });
    }
    // Under Auto, the CPU while the kernels compile or without a usable device, as the real
    // batches decide; then the parts' batches go to the GPU together or not at all.
    if opts.backend == Backend::Auto {
        let why = match route::device_for(opts, []).and_then(context::gpu_on) {
            Ok(gpu) => route::compiling(&gpu, T::DTYPE, opts, true),
            Err(e) => Some(CpuReason::GpuUnavailable(e)),
        };
        if let Some(why) = why {
            return Ok(Product {
                c: cpu(),
                route: Route::Cpu(why),
            });
        }
    }
    let parts_opts = opts.clone().backend(Backend::Gpu);
    let Complex { re: ar, im: ai } = a.split_complex();
    let (br, bi) = match &b {
        Rhs::Each(v) => {
            let Complex { re, im } = v.split_complex();
            (Rhs::Each(re), Rhs::Each(im))
        }
        Rhs::Shared(v) => {
            let Complex { re, im } = v.split_complex();
            (Rhs::Shared(re), Rhs::Shared(im))
        }
    };
    let parts = (|| {
        let one = |x: ArrayView3<'_, T>, y: &Rhs<'_, T>| {
            batch::batch_dot(x, y.clone(), &parts_opts, false)
        };
        let (rr, ii) = (one(ar, &br)?, one(ai, &bi)?);
        let (ri, ir) = (one(ar, &bi)?, one(ai, &br)?);
        Ok::<_, GpuDotError>((
            [rr.route, ii.route, ri.route, ir.route],
            [rr.c, ii.c, ri.c, ir.c],
        ))
    })();
    match parts {
        Ok((routes, [rr, ii, ri, ir])) => {
            let mut c = Array3::<Complex<T>>::zeros((batch, m, n));
            Zip::from(&mut c)
                .and(&rr)
                .and(&ii)
                .and(&ri)
                .and(&ir)
                .for_each(|c, &rr, &ii, &ri, &ir| *c = Complex::new(rr - ii, ri + ir));
            Ok(Product {
                c,
                route: joint(routes),
            })
        }
        Err(e) if fall_back || opts.backend == Backend::Auto => Ok(Product {
            c: cpu(),
            route: Route::Cpu(CpuReason::GpuUnavailable(e)),
        }),
        Err(e) => Err(e),
    }
}

/// Where an all-host complex `m × k × n` product goes: the device it runs on, or the CPU and
/// why (the options, its flops, or a GPU that is not usable when a failing GPU sends products
/// to the CPU).
fn decide<T: Element>(
    opts: &DotOptions,
    (m, k, n): (usize, usize, usize),
    fall_back: bool,
) -> Result<Result<usize, CpuReason>, GpuDotError> {
    // Logged, then taken back: the reason is not copied.
    let cpu = |why: CpuReason| {
        let decision = Ok(Decision::Cpu(why));
        log::<T>(m, k, n, &decision);
        let Ok(Decision::Cpu(why)) = decision else {
            unreachable!("made above")
        };
        Ok(Err(why))
    };
    let flops = route::flops(m, k, n).saturating_mul(4);
    if let Some(why) = route::cpu_under(opts, flops, opts.complex_threshold(T::DTYPE)) {
        return cpu(why);
    }
    let fall_back = fall_back || opts.backend == Backend::Auto;
    let gpu = crate::engine::args::check_dims(m, k, n)
        .and_then(|()| route::device_for(opts, []))
        .and_then(context::gpu_on);
    let gpu = match gpu {
        Ok(gpu) => gpu,
        Err(e) if fall_back => return cpu(CpuReason::GpuUnavailable(e)),
        Err(e) => return Err(e),
    };
    if opts.backend == Backend::Auto {
        if let Some(why) = route::compiling(&gpu, T::DTYPE, opts, false) {
            return cpu(why);
        }
    }
    Ok(Ok(gpu.info.ordinal))
}

/// `a · b` on `device` into a new C-order host array: one real product of the stacked parts
/// ([`stacked`]), or, where the tests asked for it
/// ([`complex_four_products`](crate::device::overrides::complex_four_products)), four real
/// products of the parts.
fn on_gpu<T: Element>(
    device: usize,
    a: ArrayView2<'_, Complex<T>>,
    b: ArrayView2<'_, Complex<T>>,
    opts: &DotOptions,
) -> Result<(Array2<Complex<T>>, Route), GpuDotError> {
    if !crate::device::overrides::complex_four_products_on() {
        return stacked(device, a, b, opts);
    }
    let (re, im, route) = planar(device, a, b, opts)?;
    let mut c = zeros::<T>((a.nrows(), b.ncols()))?;
    download(&re, &im, c.view_mut())?;
    Ok((c, route))
}

/// `a · b` as one real product: `A` read as an `m × 2k` real matrix (each row's parts
/// interleaved, `aᵣ aᵢ aᵣ aᵢ …`), times [`expanded`] `B` (`2k × 2n`), lands in `C` read as an
/// `m × 2n` real matrix, `cᵣ cᵢ cᵣ cᵢ …`:
///
/// ```text
/// cᵣ = Σ aᵣ·bᵣ + aᵢ·(−bᵢ)        cᵢ = Σ aᵣ·bᵢ + aᵢ·bᵣ
/// ```
///
/// The same `8·m·k·n` real flops as four products, in one, with no accumulation passes, and
/// each part of an element one sum over `2k` terms: within the real type's bound for `2k`
/// terms of `|a'||b'|`, whose sum is at most `Σ|a||b|` for each part (Cauchy–Schwarz on each
/// pair of terms), and, in IEEE arithmetic, with Inf and NaN where the four products put
/// them. A C-order `A` is read in place.
pub(crate) fn stacked<T: Element>(
    device: usize,
    a: ArrayView2<'_, Complex<T>>,
    b: ArrayView2<'_, Complex<T>>,
    opts: &DotOptions,
) -> Result<(Array2<Complex<T>>, Route), GpuDotError> {
    // `B`'s parts go up once, side by side, ahead of the first panel, whose kernels expand
    // them on the device; `A` and `C` cross the link in row panels, as a real product's host
    // operands do.
    let (k, n) = b.dim();
    crate::engine::args::check_dims(a.nrows(), 2 * k, 2 * n)?;
    let (a_reals, b_reals) = (as_reals(a), as_reals(b));
    // C's reals in fresh memory, as a real product's result: not cleared first, and its pages
    // touched in parallel while the device works.
    let m = a.nrows();
    let mut c = crate::host::fresh::fresh_vec::<T>((m, 2 * n))?;
    let c_view = ArrayViewMut2::from_shape((m, 2 * n), &mut c[..]).expect("m · 2n reals");
    // A failure on the device is answered by ndarray's complex product, not the real one's
    // fallback.
    let route = self::device::stacked_product(
        device,
        Src::Host(a_reals.view()),
        Src::HostParts(b_reals.view()),
        Dst::Fresh(c_view),
        opts,
    )?;
    // SAFETY: the real product returned Ok for m, 2n ≥ 1, so it has written every element of
    // its fresh output (its download pieces cover all of it, and it returns only once all of
    // them are unpacked).
    let c = unsafe { filled((m, n), c) };
    crate::host::fresh::result_filled::<T>(2 * m * n);
    Ok((c, route))
}

/// The route of a complex product from that of the real product of its stacked parts,
/// marked complex (where it was emulated, the real route names the form it ran in: the
/// Karatsuba form or the real form of the stacked parts, as the launcher chose it).
pub(crate) fn stacked_route(mut route: Route) -> Route {
    if let Route::Gpu { complex, .. } = &mut route {
        *complex = true;
    }
    route
}

/// `a` as an `m × 2k` real matrix, each row's parts interleaved: in place where `a` is in C
/// order, else copied (row by row, over several threads when it is large).
pub(crate) fn as_reals<T: Element>(a: ArrayView2<'_, Complex<T>>) -> CowArray<'_, T, Ix2> {
    let (m, k) = a.dim();
    match a.to_slice() {
        Some(slice) => {
            // SAFETY: `Complex<T>` is `#[repr(C)]` with two fields of `T` (its size two `T`s',
            // its alignment `T`'s), so the `len` complex numbers of `slice` are `2·len`
            // initialised `T`s at the same address, borrowed for the same lifetime.
            let reals =
                unsafe { std::slice::from_raw_parts(slice.as_ptr().cast::<T>(), 2 * slice.len()) };
            CowArray::from(ArrayView2::from_shape((m, 2 * k), reals).expect("2k reals a row"))
        }
        None => CowArray::from(by_rows(m, 2 * k, 1, |i, row| {
            for (pair, z) in row.chunks_exact_mut(2).zip(a.row(i)) {
                pair[0] = z.re;
                pair[1] = z.im;
            }
        })),
    }
}

/// `b` (`k × n`) as the `2k × 2n` real matrix whose product with [`as_reals`]`(a)` is `a · b`
/// read as reals: each element `bᵣ + i·bᵢ` becomes the block `[[bᵣ, bᵢ], [−bᵢ, bᵣ]]`, so
/// that row `2q` is row `q` of `b` read as reals and row `2q + 1` is row `q` of `i·b`.
pub(crate) fn expanded<T: Element>(b: ArrayView2<'_, Complex<T>>) -> Array2<T> {
    let (k, n) = b.dim();
    by_rows(k, 4 * n, 2, |q, rows| {
        let (even, odd) = rows.split_at_mut(2 * n);
        for ((e, o), z) in even
            .chunks_exact_mut(2)
            .zip(odd.chunks_exact_mut(2))
            .zip(b.row(q))
        {
            (e[0], e[1]) = (z.re, z.im);
            (o[0], o[1]) = (-z.im, z.re);
        }
    })
}

/// A new C-order `(rows · per) × (width / per)` real array whose `width` elements from row
/// `i · per` on are written by `fill(i, ..)` for each `i < rows`: on the calling thread when
/// the array is small, else in blocks of rows shared with the crate's host helpers
/// ([`crew`](crate::host::crew::crew)).
fn by_rows<T: Element>(
    rows: usize,
    width: usize,
    per: usize,
    fill: impl Fn(usize, &mut [T]) + Sync,
) -> Array2<T> {
    /// Below this many elements the calling thread fills the array faster than helpers join.
    const ONE_THREAD: usize = 1 << 18;
    let mut out = Array2::<T>::zeros((rows * per, width / per));
    if rows == 0 || width == 0 {
        return out;
    }
    let data = out.as_slice_mut().expect("a new C-order array");
    let crew = crate::host::crew::crew();
    if rows * width < ONE_THREAD || crew.helpers() == 0 {
        for (i, row) in data.chunks_exact_mut(width).enumerate() {
            fill(i, row);
        }
        return out;
    }
    // Blocks of rows claimed in turn by the calling thread and the helpers, so that a busy
    // crew leaves every block to the calling thread.
    let block = rows.div_ceil((crew.helpers() + 1) * 4).max(1);
    let blocks: Vec<std::sync::Mutex<&mut [T]>> = data
        .chunks_mut(block * width)
        .map(std::sync::Mutex::new)
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let claim = || loop {
        let b = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(chunk) = blocks.get(b) else { break };
        let mut chunk = chunk.lock().unwrap_or_else(|p| p.into_inner());
        for (i, row) in chunk.chunks_exact_mut(width).enumerate() {
            fill(b * block + i, row);
        }
    };
    let work = |_helper: usize| claim();
    crew.run(crew.helpers(), &work, |_| claim());
    // Every block is filled once no one holds its lock; one whose filler panicked is poisoned.
    for chunk in &blocks {
        if chunk.lock().is_err() {
            panic!("a host helper panicked while building a complex operand");
        }
    }
    out
}

/// A C-order complex array as its `rows × 2·cols` reals, to be written in place.
pub(crate) fn reals_mut<T: Element>(c: &mut Array2<Complex<T>>) -> ArrayViewMut2<'_, T> {
    let (m, n) = c.dim();
    let slice = c.as_slice_mut().expect("a new C-order array");
    // SAFETY: as in `as_reals`: the `len` complex numbers are `2·len` `T`s at the same address,
    // borrowed mutably, and exclusively, for the same lifetime.
    let reals =
        unsafe { std::slice::from_raw_parts_mut(slice.as_mut_ptr().cast::<T>(), 2 * slice.len()) };
    ArrayViewMut2::from_shape((m, 2 * n), reals).expect("2n reals a row")
}

/// The product `a · b` on `device` as two real matrices, its real and imaginary parts, with
/// the route of the four real products ([`joint`]).
fn planar<T: Element>(
    device: usize,
    a: ArrayView2<'_, Complex<T>>,
    b: ArrayView2<'_, Complex<T>>,
    opts: &DotOptions,
) -> Result<(GpuMatrix<T>, GpuMatrix<T>, Route), GpuDotError> {
    let on = Device::new(device);
    let Complex { re: ar, im: ai } = a.split_complex();
    let Complex { re: br, im: bi } = b.split_complex();
    let up = |v: &ArrayView2<'_, T>| GpuMatrix::from_array_on(v, on);
    let parts = [up(&ar)?, up(&ai)?, up(&br)?, up(&bi)?];
    let mut re = GpuMatrix::zeros_on((a.nrows(), b.ncols()), on)?;
    let mut im = GpuMatrix::zeros_on((a.nrows(), b.ncols()), on)?;
    // The products run where their operands are; the options' devices are not consulted again.
    let opts = opts.clone().device(device).backend(Backend::Gpu);
    let route = products(&parts, &mut re, &mut im, &opts)?;
    Ok((re, im, route))
}

/// The four real products of a complex product, in the order they run: the part of A and the
/// part of B they multiply (0 the real part, 1 the imaginary one), `alpha`, `beta` and the
/// part of C they write: `re = Aᵣ·Bᵣ − Aᵢ·Bᵢ`, `im = Aᵣ·Bᵢ + Aᵢ·Bᵣ`, the second of each pair
/// accumulating into the first's result.
pub(crate) const FOUR: [(usize, usize, f64, f64, usize); 4] = [
    (0, 0, 1.0, 0.0, 0),
    (1, 1, -1.0, 1.0, 0),
    (0, 1, 1.0, 0.0, 1),
    (1, 0, 1.0, 1.0, 1),
];

/// The four real products ([`FOUR`]) of a complex product whose parts `[Aᵣ, Aᵢ, Bᵣ, Bᵢ]` are on
/// the device, into the parts of the product, with their joint route.
pub(crate) fn products<T: Element>(
    parts: &[GpuMatrix<T>; 4],
    re: &mut GpuMatrix<T>,
    im: &mut GpuMatrix<T>,
    opts: &DotOptions,
) -> Result<Route, GpuDotError> {
    let c = [re, im];
    let mut routes = Vec::with_capacity(4);
    for (a, b, alpha, beta, out) in FOUR {
        let (x, y) = (&parts[a], &parts[2 + b]);
        let (alpha, beta) = (T::from_f64(alpha), T::from_f64(beta));
        routes.push(try_general_mat_mul_with(alpha, x, y, beta, c[out], opts)?);
    }
    let routes: [Route; 4] = routes.try_into().expect("four products");
    Ok(joint(routes))
}

/// Downloads the two parts into the complex array `c` of their shape.
pub(crate) fn download<T: Element>(
    re: &GpuMatrix<T>,
    im: &GpuMatrix<T>,
    c: ArrayViewMut2<'_, Complex<T>>,
) -> Result<(), GpuDotError> {
    let Complex {
        re: mut cr,
        im: mut ci,
    } = c.split_complex();
    re.copy_to(&mut cr)?;
    im.copy_to(&mut ci)
}

/// The route of a complex product from those of its four real products: the first of the
/// weakest precision that ran (native where the guard refused, or where emulation was asked
/// for and could not run, or simply native), else the first, marked complex.
fn joint(routes: [Route; 4]) -> Route {
    let weaker = |r: &Route| match r {
        Route::Gpu { guard: Some(g), .. } if g.failed > 0 || g.skipped => true,
        Route::Gpu {
            precision,
            precision_unavailable,
            ..
        } => *precision == Precision::Native || precision_unavailable.is_some(),
        _ => false,
    };
    let pick = routes.iter().position(weaker).unwrap_or(0);
    let mut route = routes[pick].clone();
    if let Route::Gpu { complex, host, .. } = &mut route {
        *complex = true;
        // The four products multiply the parts on the device; the parts went up, and the
        // result comes down, through staging (they are stepped views of the host arrays).
        *host = HostCopies::Staged;
    }
    route
}

/// Logs a complex product's route, as the router logs a real one's.
fn log<T: Element>(m: usize, k: usize, n: usize, decision: &Result<Decision, GpuDotError>) {
    route::log_route(1, (m, k, n), T::DTYPE, decision);
}

/// A C-order `rows × cols` complex array of zeros, in zeroed memory that is not written here
/// (the allocator's fresh pages, touched first by the download).
fn zeros<T: Element>((rows, cols): (usize, usize)) -> Result<Array2<Complex<T>>, GpuDotError> {
    let too_large = GpuDotError::TooLarge {
        dims: (rows, 0, cols),
    };
    let len = rows.checked_mul(cols).ok_or(too_large.clone())?;
    let reals = len
        .checked_mul(2)
        .filter(|&r| r <= isize::MAX as usize / std::mem::size_of::<T>())
        .ok_or(too_large)?;
    let data = std::mem::ManuallyDrop::new(vec![T::zero(); reals]);
    let data = if data.capacity() == reals {
        let mut data = data;
        // SAFETY: `Complex<T>` is `#[repr(C)]` with two fields of `T`: its size is two `T`s'
        // and its alignment `T`'s. The allocation holds `reals = 2·len` initialised `T`s and
        // has exactly that capacity, so it is an allocation of `len` `Complex<T>` of the same
        // size and alignment, every one initialised (to zero), and it is not freed as a
        // `Vec<T>` (ManuallyDrop).
        unsafe { Vec::from_raw_parts(data.as_mut_ptr().cast::<Complex<T>>(), len, len) }
    } else {
        drop(std::mem::ManuallyDrop::into_inner(data));
        vec![Complex::zero(); len]
    };
    Ok(Array2::from_shape_vec((rows, cols), data).expect("rows · cols elements"))
}

/// The C-order `rows × cols` complex array whose parts `data` holds, `rows × 2·cols` reals
/// in row-major order: in place where the allocation is exactly theirs, else copied.
///
/// # Safety
/// Every one of `data`'s `2 · rows · cols` elements is initialised.
unsafe fn filled<T: Element>(
    (rows, cols): (usize, usize),
    data: Vec<MaybeUninit<T>>,
) -> Array2<Complex<T>> {
    let len = rows * cols;
    assert_eq!(data.len(), 2 * len, "two reals an element");
    let data = if data.capacity() == 2 * len {
        let mut data = std::mem::ManuallyDrop::new(data);
        // SAFETY: `Complex<T>` is `#[repr(C)]` with two fields of `T` (its size two `T`s', its
        // alignment `T`'s), and `MaybeUninit<T>` has `T`'s layout. The allocation holds
        // `2·len` initialised `T`s (the caller's promise) and has exactly that capacity, so it
        // is an allocation of `len` initialised `Complex<T>` of the same size and alignment;
        // it is not freed as the old vector (ManuallyDrop).
        unsafe { Vec::from_raw_parts(data.as_mut_ptr().cast::<Complex<T>>(), len, len) }
    } else {
        data.chunks_exact(2)
            // SAFETY: every element is initialised (the caller's promise).
            .map(|p| unsafe { Complex::new(p[0].assume_init(), p[1].assume_init()) })
            .collect()
    };
    Array2::from_shape_vec((rows, cols), data).expect("rows · cols elements")
}

#[cfg(test)]
mod tests;

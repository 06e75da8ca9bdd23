//! Complex products, `Complex<f32>` and `Complex<f64>`, in every form `gpu_dot` takes: on the
//! CPU route they are ndarray's own products bit for bit; on the GPU they are checked against
//! a Dot2 reference with the complex componentwise measure `|ĉ − c| / (u·Σ|a||b|)`, on odd and
//! rectangular shapes, every layout (transposed, sliced, stepped, negative strides), views,
//! shared and copy-on-write arrays, vectors, batches and the general product. The GPU tests
//! (ignored here) run on the device with `--include-ignored`.

mod common;

use common::panic_message;
use gpu_dot::accuracy::complex::ComplexReference;
use gpu_dot::num_complex::Complex;
use gpu_dot::{
    try_general_mat_mul_with, Backend, DotOptions, Dtype, Element, GpuDot, GpuDotError, GpuMatrix,
    Plan, Precision, Route,
};
use ndarray::{s, ArcArray2, Array1, Array2, Array3, ArrayView2, CowArray};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use common::{assert_complex_product, both_parts, complex_ratio, expect_device};

/// A `rows × cols` complex matrix with parts uniform in [-1, 1), from a fresh seed.
fn random<T: Element>(rows: usize, cols: usize) -> Array2<Complex<T>> {
    common::random_complex(rows, cols)
}

fn cpu() -> DotOptions {
    DotOptions::builtin().backend(Backend::Cpu)
}

fn gpu(precision: Precision) -> DotOptions {
    DotOptions::builtin()
        .backend(Backend::Gpu)
        .precision(precision)
        .poison_output(true)
}

/// The tests that weigh emulation at every size (a switch of the whole process) hold this
/// for writing; the other GPU tests hold it for reading, so that no product of theirs runs
/// while the switch is on.
static TURN: RwLock<()> = RwLock::new(());

/// A GPU test's share of [`TURN`].
fn shared_turn() -> RwLockReadGuard<'static, ()> {
    TURN.read().unwrap_or_else(|e| e.into_inner())
}

/// [`TURN`] alone, for a test that turns the switch on.
fn own_turn() -> RwLockWriteGuard<'static, ()> {
    TURN.write().unwrap_or_else(|e| e.into_inner())
}

/// The worst complex componentwise ratio of `c` against `a · b`, asserting the Inf and NaN
/// pattern is the reference's.
fn is_complex_gpu(route: &Route) -> bool {
    matches!(route, Route::Gpu { complex: true, .. })
}

both_parts!(every_form_on_the_cpu_is_ndarrays_own);
/// With the CPU backend (and below the threshold, with the defaults), every form returns
/// exactly what ndarray's `dot` returns, in its memory order.
fn every_form_on_the_cpu_is_ndarrays_own<T: Element>() {
    let (a, b) = (random::<T>(7, 5), random::<T>(5, 6));
    let p = a.try_gpu_dot_with(&b, &cpu()).unwrap();
    assert_eq!(p.c, a.dot(&b));
    assert!(matches!(p.route, Route::Cpu(_)));
    assert_eq!(a.gpu_dot(&b), a.dot(&b));
    // Column-major operands give a column-major result, as dot does.
    let (af, bf) = (
        a.t().as_standard_layout().into_owned().reversed_axes(),
        b.t().as_standard_layout().into_owned().reversed_axes(),
    );
    assert!(af.t().is_standard_layout() && bf.t().is_standard_layout());
    let c = af.gpu_dot(&bf);
    assert_eq!(c, af.dot(&bf));
    assert_eq!(c.strides(), af.dot(&bf).strides());
    // Views, transposes, steps and negative strides.
    let big = random::<T>(14, 12);
    let av = big.slice(s![..;2, 1..6]);
    let bv = big.slice(s![..;-2, ..;2]).slice_move(s![..5, ..]);
    assert_eq!(av.gpu_dot(&bv), av.dot(&bv));
    assert_eq!(b.t().gpu_dot(&a.t()), b.t().dot(&a.t()));
    // Shared and copy-on-write arrays.
    let shared: ArcArray2<Complex<T>> = a.to_shared();
    let cow = CowArray::from(b.view());
    assert_eq!(shared.gpu_dot(&cow), a.dot(&b));
    // Vectors.
    let x: Array1<Complex<T>> = random::<T>(1, 5).row(0).to_owned();
    let y: Array1<Complex<T>> = random::<T>(1, 7).row(0).to_owned();
    assert_eq!(a.gpu_dot(&x), a.dot(&x));
    assert_eq!(y.gpu_dot(&a), y.dot(&a));
    assert_eq!(x.gpu_dot(&x), x.dot(&x));
    assert_eq!(a.try_gpu_dot_with(&x, &cpu()).unwrap().c, a.dot(&x));
    // Batches.
    let stack = Array3::from_shape_fn((3, 7, 5), |(z, i, q)| {
        a[[i, q]] * T::from_f64(z as f64 + 1.0)
    });
    let rhs = Array3::from_shape_fn((3, 5, 6), |(z, q, j)| {
        b[[q, j]] * T::from_f64(z as f64 - 1.0)
    });
    let c = stack.gpu_dot(&rhs);
    for z in 0..3 {
        let want = stack
            .index_axis(ndarray::Axis(0), z)
            .dot(&rhs.index_axis(ndarray::Axis(0), z));
        assert_eq!(c.index_axis(ndarray::Axis(0), z), want);
    }
    let c = stack.gpu_dot(&b);
    for z in 0..3 {
        assert_eq!(
            c.index_axis(ndarray::Axis(0), z),
            stack.index_axis(ndarray::Axis(0), z).dot(&b)
        );
    }
    // The general product with complex alpha and beta.
    let (alpha, beta) = (
        Complex::new(T::from_f64(0.5), T::from_f64(-2.0)),
        Complex::new(T::from_f64(1.5), T::from_f64(0.25)),
    );
    let c0 = random::<T>(7, 6);
    let (mut got, mut want) = (c0.clone(), c0.clone());
    gpu_dot::general_mat_mul(alpha, &a, &b, beta, &mut got);
    ndarray::linalg::general_mat_mul(alpha, &a, &b, beta, &mut want);
    assert_eq!(got, want);
}

both_parts!(shapes_panic_and_fail_as_dot_does);
/// Incompatible shapes panic with ndarray's message in `gpu_dot`, and are typed errors in the
/// `try_` forms, for complex operands as for real ones.
fn shapes_panic_and_fail_as_dot_does<T: Element>() {
    let (a, b) = (random::<T>(3, 4), random::<T>(5, 2));
    let ours = panic_message(|| {
        a.gpu_dot(&b);
    });
    let theirs = panic_message(|| {
        a.dot(&b);
    });
    assert_eq!(ours, theirs);
    assert!(matches!(
        a.try_gpu_dot(&b),
        Err(GpuDotError::ShapeMismatch {
            m: 3,
            k: 4,
            k2: 5,
            n: 2
        })
    ));
    let x = Array1::<Complex<T>>::zeros(5);
    assert!(matches!(
        a.try_gpu_dot_with(&x, &gpu(Precision::Auto)),
        Err(GpuDotError::ShapeMismatch { k: 4, k2: 5, .. })
    ));
    let mut c = Array2::<Complex<T>>::zeros((3, 3));
    let ours = panic_message(|| {
        gpu_dot::general_mat_mul(
            Complex::new(T::one(), T::zero()),
            &a,
            &random::<T>(4, 2),
            Complex::new(T::zero(), T::zero()),
            &mut c,
        )
    });
    let theirs = panic_message(|| {
        ndarray::linalg::general_mat_mul(
            Complex::new(T::one(), T::zero()),
            &a,
            &random::<T>(4, 2),
            Complex::new(T::zero(), T::zero()),
            &mut c,
        )
    });
    assert_eq!(ours, theirs);
}

both_parts!(
    #[ignore = "needs a CUDA GPU"]
    matrices_of_every_layout_on_the_gpu
);
/// Odd and rectangular shapes in every layout, native and default, against the reference;
/// the route says the product ran on the GPU as a complex one, and the memory order is dot's.
fn matrices_of_every_layout_on_the_gpu<T: Element>() {
    expect_device();
    let _turn = shared_turn();
    every_layout::<T>(&[(1, 1, 1), (37, 129, 65), (300, 513, 257), (1024, 768, 1000)]);
}

/// Each shape in C order, F order, C·F, stepped with negative strides, and copy-on-write ·
/// shared, native and default, against the reference; the route says the product ran on the
/// GPU as a complex one, and an F·F product is in F order.
fn every_layout<T: Element>(shapes: &[(usize, usize, usize)]) {
    for &(m, k, n) in shapes {
        let (a, b) = (random::<T>(m, k), random::<T>(k, n));
        let af = a.t().as_standard_layout().into_owned().reversed_axes();
        let bf = b.t().as_standard_layout().into_owned().reversed_axes();
        assert!(af.t().is_standard_layout() && bf.t().is_standard_layout());
        let wide_a = random::<T>(2 * m, 2 * k + 1);
        let wide_b = random::<T>(k, 2 * n);
        let stepped_a = wide_a.slice(s![..;-2, 1..;2]);
        let stepped_b = wide_b.slice(s![.., ..;-2]);
        for precision in [Precision::Native, Precision::Auto] {
            let opts = gpu(precision);
            let what = |form: &str| format!("{} {m}×{k}×{n} {precision} {form}", T::DTYPE);
            let p = a.try_gpu_dot_with(&b, &opts).unwrap();
            assert!(is_complex_gpu(&p.route), "{}: {}", what("C·C"), p.route);
            assert_complex_product(p.c.view(), a.view(), b.view(), &what("C·C"));
            let p = af.try_gpu_dot_with(&bf, &opts).unwrap();
            assert!(
                p.c.t().is_standard_layout() || m == 1 || n == 1,
                "{}: F order",
                what("F·F")
            );
            assert_complex_product(p.c.view(), af.view(), bf.view(), &what("F·F"));
            let p = a.try_gpu_dot_with(&bf, &opts).unwrap();
            assert_complex_product(p.c.view(), a.view(), bf.view(), &what("C·F"));
            let p = stepped_a.try_gpu_dot_with(&stepped_b, &opts).unwrap();
            assert_complex_product(p.c.view(), stepped_a, stepped_b, &what("stepped, negative"));
            let shared = b.to_shared();
            let p = CowArray::from(a.view())
                .try_gpu_dot_with(&shared, &opts)
                .unwrap();
            assert_complex_product(p.c.view(), a.view(), b.view(), &what("cow·arc"));
        }
    }
}

both_parts!(
    #[ignore = "needs a CUDA GPU"]
    vectors_batches_and_the_general_product_on_the_gpu
);
/// Matrix·vector, vector·matrix, vector·vector, 3-D batches and the general product with
/// complex alpha and beta, on the GPU, against the reference.
fn vectors_batches_and_the_general_product_on_the_gpu<T: Element>() {
    expect_device();
    let _turn = shared_turn();
    let opts = gpu(Precision::Auto);
    let (m, k, n) = (700, 1300, 900);
    let (a, b) = (random::<T>(m, k), random::<T>(k, n));
    let x = random::<T>(k, 1);
    let y = random::<T>(1, m);
    let p = a.try_gpu_dot_with(&x.column(0), &opts).unwrap();
    assert!(is_complex_gpu(&p.route), "{}", p.route);
    assert_complex_product(
        p.c.insert_axis(ndarray::Axis(1)).view(),
        a.view(),
        x.view(),
        "matrix·vector",
    );
    let p = y.row(0).try_gpu_dot_with(&a, &opts).unwrap();
    assert_complex_product(
        p.c.insert_axis(ndarray::Axis(0)).view(),
        y.view(),
        a.view(),
        "vector·matrix",
    );
    // Long enough for the GPU's vector kernels, short enough that the bound (k + 2)·u·Σ|a||b|
    // stays far below |c| (about Σ|a||b|/√k): a wrong sign or part fails it.
    let long = random::<T>(1, 1 << 12);
    let p = long.row(0).try_gpu_dot_with(&long.row(0), &opts).unwrap();
    let c = Array2::from_elem((1, 1), p.c);
    assert_complex_product(c.view(), long.view(), long.t(), "vector·vector");

    let (batch, bm, bk, bn) = (5, 96, 160, 80);
    let (flat_a, flat_b) = (random::<T>(batch * bm, bk), random::<T>(batch * bk, bn));
    let stack = Array3::from_shape_fn((batch, bm, bk), |(z, i, q)| flat_a[[z * bm + i, q]]);
    let rhs = Array3::from_shape_fn((batch, bk, bn), |(z, q, j)| flat_b[[z * bk + q, j]]);
    let p = stack.try_gpu_dot_with(&rhs, &opts).unwrap();
    assert!(is_complex_gpu(&p.route), "batch: {}", p.route);
    for z in 0..batch {
        let (az, bz) = (
            stack.index_axis(ndarray::Axis(0), z),
            rhs.index_axis(ndarray::Axis(0), z),
        );
        assert_complex_product(p.c.index_axis(ndarray::Axis(0), z), az, bz, "batch item");
    }
    let p = stack
        .try_gpu_dot_with(&b.slice(s![..bk, ..bn]), &opts)
        .unwrap();
    for z in 0..batch {
        let az = stack.index_axis(ndarray::Axis(0), z);
        assert_complex_product(
            p.c.index_axis(ndarray::Axis(0), z),
            az,
            b.slice(s![..bk, ..bn]),
            "shared rhs",
        );
    }

    // C = alpha·A·B + beta·C, through the environment's options (large enough for the GPU).
    let alpha = Complex::new(T::from_f64(0.75), T::from_f64(-1.25));
    let beta = Complex::new(T::from_f64(-0.5), T::from_f64(2.0));
    let c0 = random::<T>(m, n);
    let mut c = c0.clone();
    gpu_dot::general_mat_mul(alpha, &a, &b, beta, &mut c);
    let reference = ComplexReference::new(a.view(), b.view());
    let u = if T::DTYPE == Dtype::F32 {
        2f64.powi(-24)
    } else {
        2f64.powi(-53)
    };
    let wide = |z: Complex<T>| Complex::new(z.re.into_f64(), z.im.into_f64());
    let (alpha64, beta64) = (wide(alpha), wide(beta));
    for ((ij, got), c0) in c.indexed_iter().zip(&c0) {
        let (p, abs) = (reference.c[ij], reference.abs[ij]);
        let want = alpha64 * p + beta64 * wide(*c0);
        let bound = alpha64.norm() * (k as f64 + 2.0) * u * abs
            + 8.0 * u * (alpha64.norm() * p.norm() + beta64.norm() * wide(*c0).norm());
        let err = (wide(*got) - want).norm();
        assert!(
            err <= bound,
            "general product at {ij:?}: error {err:e} above {bound:e}"
        );
    }
    // beta = 0 never reads C: NaN in it does not spread.
    let mut c = Array2::from_elem((m, n), Complex::new(T::nan(), T::nan()));
    gpu_dot::general_mat_mul(alpha, &a, &b, Complex::new(T::zero(), T::zero()), &mut c);
    assert!(
        c.iter().all(|z| z.re.is_finite() && z.im.is_finite()),
        "beta = 0 read C"
    );
}

both_parts!(
    #[ignore = "needs a CUDA GPU"]
    vectors_and_batches_when_every_size_emulates
);
/// Matrix·vector, vector·matrix, vector·vector and a batch with the default precision while
/// the tests weigh emulation at every size (vector shapes keep their vector kernels, and
/// batches emulate only when asked to): each within the native bound (the guarded one is
/// tighter), each step named on stderr as it starts, so that a product that does not return
/// shows where.
fn vectors_and_batches_when_every_size_emulates<T: Element>() {
    expect_device();
    let _turn = own_turn();
    let _on = EmulateEverySize::on();
    let opts = gpu(Precision::Auto);
    let (m, k) = (700, 1300);
    let a = random::<T>(m, k);
    let (x, y) = (random::<T>(k, 1), random::<T>(1, m));
    eprintln!("{}: matrix·vector", T::DTYPE);
    let p = a.try_gpu_dot_with(&x.column(0), &opts).unwrap();
    let c = p.c.insert_axis(ndarray::Axis(1));
    assert_complex_product(
        c.view(),
        a.view(),
        x.view(),
        &format!("matrix·vector ({})", p.route),
    );
    eprintln!("{}: vector·matrix", T::DTYPE);
    let p = y.row(0).try_gpu_dot_with(&a, &opts).unwrap();
    let c = p.c.insert_axis(ndarray::Axis(0));
    assert_complex_product(
        c.view(),
        y.view(),
        a.view(),
        &format!("vector·matrix ({})", p.route),
    );
    eprintln!("{}: vector·vector", T::DTYPE);
    let long = random::<T>(1, 1 << 12);
    let p = long.row(0).try_gpu_dot_with(&long.row(0), &opts).unwrap();
    let c = Array2::from_elem((1, 1), p.c);
    assert_complex_product(c.view(), long.view(), long.t(), "vector·vector");
    eprintln!("{}: batch", T::DTYPE);
    let flat = random::<T>(3 * 64, 96);
    let stack = Array3::from_shape_fn((3, 64, 96), |(z, i, q)| flat[[z * 64 + i, q]]);
    let rhs = random::<T>(96, 48);
    let p = stack.try_gpu_dot_with(&rhs, &opts).unwrap();
    for z in 0..3 {
        let az = stack.index_axis(ndarray::Axis(0), z);
        let what = format!("batch item {z} ({})", p.route);
        assert_complex_product(p.c.index_axis(ndarray::Axis(0), z), az, rhs.view(), &what);
    }
    eprintln!("{}: done", T::DTYPE);
}

both_parts!(
    #[ignore = "needs a CUDA GPU"]
    the_four_products_match_the_reference
);
/// Complex products run as four real products of their parts (the crate's switch for
/// measuring that form beside the stacked one): the layouts of [`every_layout`], native and
/// default, and the general product with complex `alpha` and `beta`, each against the
/// reference.
fn the_four_products_match_the_reference<T: Element>() {
    expect_device();
    let _turn = own_turn();
    let _four = Switch::on(gpu_dot::__testing::complex_four_products);
    every_layout::<T>(&[(1, 1, 1), (37, 129, 65), (300, 513, 257)]);
    // Through the environment's options: 8·200·200·120 real flops, above both thresholds.
    let (a, b) = (random::<T>(200, 200), random::<T>(200, 120));
    let (alpha, beta) = (
        Complex::new(T::from_f64(0.5), T::from_f64(1.5)),
        Complex::new(T::from_f64(-2.0), T::from_f64(0.25)),
    );
    let c0 = random::<T>(200, 120);
    let mut c = c0.clone();
    gpu_dot::general_mat_mul(alpha, &a, &b, beta, &mut c);
    let mut want = c0.clone();
    ndarray::linalg::general_mat_mul(alpha, &a, &b, beta, &mut want);
    let tol = if T::DTYPE == Dtype::F32 { 1e-3 } else { 1e-11 };
    for (ij, got) in c.indexed_iter() {
        let wide = |z: Complex<T>| Complex::new(z.re.into_f64(), z.im.into_f64());
        let (got, want) = (wide(*got), wide(want[ij]));
        assert!(
            (got - want).norm() <= tol * (1.0 + want.norm()),
            "general at {ij:?}: {got} against {want}"
        );
    }
}

/// A switch of the crate's tests, on for this value's life and off again on drop (a failed
/// assertion included).
struct Switch(fn(bool));

impl Switch {
    fn on(set: fn(bool)) -> Switch {
        set(true);
        Switch(set)
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        (self.0)(false);
    }
}

/// Turns `emulate_every_size` on for its life, and off again on drop (a failed assertion
/// included).
struct EmulateEverySize;

impl EmulateEverySize {
    fn on() -> EmulateEverySize {
        gpu_dot::__testing::emulate_every_size(true);
        EmulateEverySize
    }
}

impl Drop for EmulateEverySize {
    fn drop(&mut self) {
        gpu_dot::__testing::emulate_every_size(false);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_default_emulates_large_products_under_its_guard() {
    // One test for both types: the switch is the process's, so its two users may not overlap.
    let _turn = own_turn();
    let _on = EmulateEverySize::on();
    default_emulates::<f32>();
    default_emulates::<f64>();
}

/// At sizes where the real default emulates, the complex default does too (each real product
/// passes the guard), within the guarded bound; with Inf and NaN in one part, the default's
/// pattern is native's, part by part.
fn default_emulates<T: Element>() {
    expect_device();
    let (a, b) = (random::<T>(256, 2048), random::<T>(2048, 192));
    let p = a.try_gpu_dot_with(&b, &gpu(Precision::Auto)).unwrap();
    let worst = complex_ratio(p.c.view(), a.view(), b.view(), "default");
    println!("{} default: {} ratio {worst:.3}", T::DTYPE, p.route);
    assert!(
        gpu_dot::accuracy::emulated(&p.route),
        "not emulated: {}",
        p.route
    );
    // Each real product the guard passed keeps 7·u·Σ|x||y|; the complex modulus of the error
    // is then within (7·√2 + 1)·u·Σ|a||b| < 11·u·Σ|a||b| (docs/precision.md).
    assert!(worst <= 11.0, "guarded default above its bound: {worst}");

    let (mut a, mut b) = (a, b);
    a[[3, 5]].re = T::infinity();
    a[[7, 11]].im = T::neg_infinity();
    b[[9, 4]].im = T::nan();
    b[[100, 150]].re = T::infinity();
    let native = a.try_gpu_dot_with(&b, &gpu(Precision::Native)).unwrap().c;
    let default = a.try_gpu_dot_with(&b, &gpu(Precision::Auto)).unwrap().c;
    let class = |x: T| {
        if x.is_nan() {
            0
        } else if x == T::infinity() {
            1
        } else if x == T::neg_infinity() {
            2
        } else {
            3
        }
    };
    for ((i, j), (n, d)) in native.indexed_iter().map(|(ij, n)| (ij, (n, default[ij]))) {
        assert_eq!(
            (class(n.re), class(n.im)),
            (class(d.re), class(d.im)),
            "element ({i}, {j}): native {n}, default {d}"
        );
    }
    assert!(
        native.iter().any(|z| z.re.is_nan() || z.im.is_nan()),
        "no NaN reached the product"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_default_takes_the_karatsuba_form_from_its_size_up() {
    expect_device();
    // The switches at their defaults: a test that emulates every size holds its own turn.
    let _turn = shared_turn();
    // (complex m·k·n, the form): below 3584³ the real form of the stacked parts, from it up
    // the Karatsuba form; each emulated under the guard, within its bound on sampled rows.
    // Device matrices: host arrays of these sizes cross in row panels, where the default
    // runs natively.
    for (m, k, n, karatsuba) in [(2048, 2048, 2048, false), (3584, 3584, 3584, true)] {
        let (a, b) = (random::<f32>(m, k), random::<f32>(k, n));
        let (ga, gb) = (
            GpuMatrix::from_array(&a).unwrap(),
            GpuMatrix::from_array(&b).unwrap(),
        );
        let mut gc = GpuMatrix::<Complex<f32>>::zeros((m, n)).unwrap();
        let one = Complex::new(1.0, 0.0);
        let zero = Complex::new(0.0, 0.0);
        let route =
            try_general_mat_mul_with(one, &ga, &gb, zero, &mut gc, &gpu(Precision::Auto)).unwrap();
        let c = gc.to_array().unwrap();
        let what = format!("c32 {m}×{k}×{n}: {route}");
        assert!(
            matches!(
                route,
                Route::Gpu {
                    precision: Precision::Ozaki { .. },
                    ..
                }
            ),
            "{what}: not emulated"
        );
        let form = matches!(
            route,
            Route::Gpu {
                karatsuba: true,
                ..
            }
        );
        assert_eq!(form, karatsuba, "{what}");
        let text = route.to_string();
        let named = if karatsuba {
            "Karatsuba form"
        } else {
            "f32 products of its parts"
        };
        assert!(text.contains(named), "{what}");
        let rows = s![..m;m / 4, ..];
        let worst = complex_ratio(c.slice(rows), a.slice(rows), b.view(), &what);
        assert!(worst <= 11.0, "{what}: above the guarded bound: {worst}");
    }
}

both_parts!(
    #[ignore = "needs a CUDA GPU"]
    every_ix2_form_matches_ndarray_within_rounding
);
/// `gpu_dot` (default options) on a product large enough for the GPU equals ndarray's `dot`
/// within rounding, for owned arrays and views of both layouts.
fn every_ix2_form_matches_ndarray_within_rounding<T: Element>() {
    expect_device();
    let _turn = shared_turn();
    let (a, b) = (random::<T>(513, 300), random::<T>(300, 257));
    let c = a.gpu_dot(&b);
    assert_complex_product(c.view(), a.view(), b.view(), "gpu_dot");
    let d = a.dot(&b);
    assert_complex_product(d.view(), a.view(), b.view(), "dot");
    let p = a.try_gpu_dot(&b).unwrap();
    assert_eq!(p.dim(), d.dim());
    let bt = b.t().to_owned();
    let c = a.gpu_dot(&bt.t());
    assert_complex_product(c.view(), a.view(), b.view(), "gpu_dot on a transposed view");
}

/// Complex products count real flops (`8·m·k·n`) against their own threshold: `Complex<f32>`
/// against [`gpu_dot::DEFAULT_MIN_GPU_FLOPS_C32`], `Complex<f64>` against the `f64` one.
#[test]
fn complex_products_weigh_their_own_thresholds() {
    use gpu_dot::{CpuReason, DEFAULT_MIN_GPU_FLOPS_C32, DEFAULT_MIN_GPU_FLOPS_F64};
    let _turn = shared_turn(); // with a GPU, the c64 product runs there
    let n = 82; // 8·82³ = 4.4 Mflop: between the f64 threshold and the c32 one
    let flops = 8 * (n as u64).pow(3);
    assert!(DEFAULT_MIN_GPU_FLOPS_F64 < flops && flops < DEFAULT_MIN_GPU_FLOPS_C32);
    let a = random::<f32>(n, n);
    let p = a.try_gpu_dot_with(&a, &DotOptions::builtin()).unwrap();
    match p.route {
        Route::Cpu(CpuReason::BelowThreshold {
            flops: f,
            threshold,
        }) => assert_eq!((f, threshold), (flops, DEFAULT_MIN_GPU_FLOPS_C32)),
        other => panic!("c32 {n}³: {other}"),
    }
    assert_eq!(a.gpu_dot(&a), a.dot(&a));
    let a = random::<f64>(n, n);
    let p = a.try_gpu_dot_with(&a, &DotOptions::builtin()).unwrap();
    assert!(
        !matches!(p.route, Route::Cpu(CpuReason::BelowThreshold { .. })),
        "c64 {n}³: {}",
        p.route
    );
    // An explicit threshold is every element type's.
    let p = a
        .try_gpu_dot_with(&a, &DotOptions::builtin().min_gpu_flops(flops + 1))
        .unwrap();
    assert!(matches!(
        p.route,
        Route::Cpu(CpuReason::BelowThreshold { .. })
    ));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_karatsuba_form_gives_the_real_forms_bits() {
    // One test for both types: the switches are the process's.
    let _turn = own_turn();
    let _on = EmulateEverySize::on();
    // The paired forms are the default; the test says so rather than assume it.
    gpu_dot::__testing::complex_paired(true);
    karatsuba_bits::<f32>();
    karatsuba_bits::<f64>();
}

/// With the paired forms on (the default; the crate's `complex_paired` switch), emulated
/// complex products run in the Karatsuba form, three INT8 products a modulus; the real form of
/// the stacked parts with the same paired shifts (the `complex_karatsuba` switch off) makes the
/// same integers, so the two give the same bits, and for `c64` at a fixed count both are the
/// CPU model's stacked product bit for bit. On odd and even shapes, a transposed and a reversed
/// operand, parts at scales far apart, a purely imaginary row, parts that cancel between
/// `Aᵣ·Bᵣ` and `Aᵢ·Bᵢ`, a column of zeros, and Inf and NaN in one part.
fn karatsuba_bits<T: Element>() {
    expect_device();
    let shapes = [
        (1, 1, 1),
        (2, 1, 1),
        (3, 5, 7),
        (37, 129, 65),
        (300, 513, 257),
        (256, 2048, 192),
        (777, 300, 600),
    ];
    for (case, &(m, k, n)) in shapes.iter().enumerate() {
        let (mut a, mut b) = (random::<T>(m, k), random::<T>(k, n));
        if m >= 3 && n >= 3 {
            let two = |e: i32| T::from_f64(2f64.powi(e));
            a.row_mut(0).map_inplace(|z| z.re = T::zero());
            a.row_mut(1)
                .map_inplace(|z| *z = Complex::new(z.re * two(20), z.im * two(-20)));
            for q in 0..k {
                // Row 2 times column 0: Σ aᵣ·aᵢ − aᵢ·aᵣ, the real part cancels exactly.
                b[[q, 0]] = Complex::new(a[[2, q]].im, a[[2, q]].re);
                b[[q, 1]] = Complex::new(b[[q, 1]].re, b[[q, 1]].im * two(-30));
                b[[q, 2]] = Complex::new(T::zero(), T::zero());
            }
        }
        if case == 3 {
            a[[3, 5]].re = T::infinity();
            a[[7, 11]].im = T::neg_infinity();
            b[[9, 4]].im = T::nan();
        }
        // A transposed operand and a reversed one, on alternate shapes.
        let at = a.t().to_owned();
        let a_view = if case % 2 == 1 { at.t() } else { a.view() };
        let b_rev = b.slice(s![..;-1, ..]).to_owned();
        let b_view = if case % 2 == 0 {
            b_rev.slice(s![..;-1, ..])
        } else {
            b.view()
        };
        for precision in [
            Precision::Ozaki { moduli: 6 },
            Precision::Ozaki { moduli: 14 },
            Precision::Auto,
        ] {
            let what = format!("{} {m}×{k}×{n} {precision:?}", T::DTYPE);
            let run = |karatsuba: bool| {
                gpu_dot::__testing::complex_karatsuba(karatsuba);
                let p = a_view.try_gpu_dot_with(&b_view, &gpu(precision));
                gpu_dot::__testing::complex_karatsuba(true);
                p.unwrap_or_else(|e| panic!("{what}: {e}"))
            };
            let (kara, real) = (run(true), run(false));
            // Emulated: guarded and passed, or at a fixed count, unguarded (a product the
            // guard refuses reports native).
            let ozaki = |r: &Route| {
                matches!(
                    r,
                    Route::Gpu {
                        precision: Precision::Ozaki { .. },
                        ..
                    }
                )
            };
            let emulated = ozaki(&kara.route);
            assert_eq!(
                emulated,
                ozaki(&real.route),
                "{what}: {} against {}",
                kara.route,
                real.route
            );
            // A product that runs as a GEMV (one row or one column in a panel) does so in
            // either form, and a GEMV is never emulated; the larger shapes are never GEMVs.
            let gemv = matches!(
                kara.route,
                Route::Gpu {
                    plan: Some(Plan::GemvRow | Plan::GemvCol),
                    ..
                }
            );
            assert!(!gemv || m.min(n) < 32, "{what}: a GEMV: {}", kara.route);
            if precision != Precision::Auto && !gemv {
                assert!(emulated, "{what}: not emulated: {}", kara.route);
            }
            // The report names the form that ran: Karatsuba where emulated with the switch
            // on, never with it off or natively.
            let form = |r: &Route| {
                matches!(
                    r,
                    Route::Gpu {
                        karatsuba: true,
                        ..
                    }
                )
            };
            assert_eq!(form(&kara.route), emulated, "{what}: {}", kara.route);
            assert!(!form(&real.route), "{what}: {}", real.route);
            if emulated {
                assert!(
                    kara.route.to_string().contains("Karatsuba"),
                    "{what}: {}",
                    kara.route
                );
            }
            if !emulated {
                continue;
            }
            for (ij, (x, y)) in kara.c.indexed_iter().map(|(ij, x)| (ij, (x, real.c[ij]))) {
                let same = |p: T, q: T| {
                    (p.is_nan() && q.is_nan()) || p.into_f64().to_bits() == q.into_f64().to_bits()
                };
                assert!(
                    same(x.re, y.re) && same(x.im, y.im),
                    "{what} at {ij:?}: Karatsuba {x}, real form {y}"
                );
            }
            if let (Dtype::F64, Precision::Ozaki { moduli }) = (T::DTYPE, precision) {
                if case != 3 {
                    let model = stacked_model(a_view, b_view, moduli as usize);
                    for (ij, x) in kara.c.indexed_iter() {
                        let want = model[ij];
                        assert!(
                            x.re.into_f64().to_bits() == want.re.to_bits()
                                && x.im.into_f64().to_bits() == want.im.to_bits(),
                            "{what} at {ij:?}: {x} against the model's {want}"
                        );
                    }
                }
            }
            if precision == Precision::Auto && case != 3 {
                let worst = complex_ratio(kara.c.view(), a_view, b_view, &what);
                assert!(
                    worst <= 11.0,
                    "{what}: guarded default above its bound: {worst}"
                );
            }
        }
    }
}

/// The CPU model of Ozaki scheme II on the stacked parts of `a · b` (`A` as `m × 2k` reals,
/// `B` expanded to `2k × 2n`), at `moduli` moduli, read back as complex.
fn stacked_model<T: Element>(
    a: ArrayView2<Complex<T>>,
    b: ArrayView2<Complex<T>>,
    moduli: usize,
) -> Array2<Complex<f64>> {
    let (m, k, n) = (a.nrows(), a.ncols(), b.ncols());
    let x: Vec<f64> = a
        .rows()
        .into_iter()
        .flat_map(|row| {
            row.into_iter()
                .flat_map(|z| [z.re.into_f64(), z.im.into_f64()])
                .collect::<Vec<_>>()
        })
        .collect();
    let mut y = vec![0.0; 4 * k * n];
    for ((q, j), z) in b.indexed_iter() {
        let (re, im) = (z.re.into_f64(), z.im.into_f64());
        y[2 * q * 2 * n + 2 * j] = re;
        y[2 * q * 2 * n + 2 * j + 1] = im;
        y[(2 * q + 1) * 2 * n + 2 * j] = -im;
        y[(2 * q + 1) * 2 * n + 2 * j + 1] = re;
    }
    let c = gpu_dot::__testing::ozaki_reference(&x, &y, (m, 2 * k, 2 * n), moduli);
    Array2::from_shape_fn((m, n), |(i, j)| {
        Complex::new(c[i * 2 * n + 2 * j], c[i * 2 * n + 2 * j + 1])
    })
}

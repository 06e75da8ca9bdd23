//! Edge cases and IEEE behaviour: zero dimensions, degenerate shapes (1 × 1, one row, one
//! column, outer and inner products) and broadcast (stride-0) operands in every layout; NaN,
//! ±Inf, Inf·0, overflow near `f32::MAX` and subnormals, compared element by element with
//! ndarray's `dot`; and a left operand of more than 2³¹ elements.
//!
//! The documented expectation is the CPU's: a product has NaN, +Inf and −Inf at the same
//! positions as ndarray's `dot` of the same operands, and its finite values agree within the
//! rounding bound of a k-term dot product. Each case runs on the CPU path here and, ignored
//! without a GPU, over every kernel (`cargo test --test edge -- --include-ignored`).

mod common;

use common::{check, random, reference};
use gpu_dot::{
    device_status, layout_of, Backend, CpuReason, DeviceStatus, DotOptions, GpuDot, GpuDotError,
    Kernel, Route,
};
use ndarray::{s, Array2, ArrayView2};
use rand::{rngs::StdRng, Rng, SeedableRng};

/// Every concrete kernel, then `Auto`.
fn kernels() -> impl Iterator<Item = Kernel> {
    Kernel::ALL.into_iter().chain([Kernel::Auto])
}

/// The GPU with `kernel`, the output poisoned with NaN before the launch.
fn on(kernel: Kernel) -> DotOptions {
    DotOptions::builtin()
        .backend(Backend::Gpu)
        .kernel(kernel)
        .poison_output(true)
}

fn cpu() -> DotOptions {
    DotOptions::builtin().backend(Backend::Cpu)
}

/// `Backend::Auto` with no threshold: the GPU when there is one, else the CPU.
fn auto() -> DotOptions {
    DotOptions::builtin().min_gpu_flops(0)
}

fn expect_device() {
    if let DeviceStatus::Unavailable(reason) = device_status() {
        panic!("this test needs a CUDA GPU: {reason}");
    }
}

/// A random number generator from a fresh seed (printed by nothing: replay through
/// `GPU_DOT_TEST_SEED`, which `common::fresh_seed` reads).
fn rng() -> StdRng {
    StdRng::seed_from_u64(common::fresh_seed())
}

// ---------------------------------------------------------------------------------------------
// The same values in several memory layouts.

/// How a matrix's values lie in memory.
#[derive(Debug, Clone, Copy)]
enum Lay {
    /// Contiguous, row-major.
    C,
    /// Contiguous, column-major: `.t()` of a stored transpose.
    F,
    /// A window of a larger matrix whose other elements are NaN (gaps between rows): an element
    /// read from outside the view shows up as NaN.
    Padded,
    /// `s![..;2, ..;3]` of a NaN-filled matrix holding the values at those steps.
    Stepped,
    /// Negative strides on both axes: `s![..;-1, ..;-1]` of the values stored reversed.
    Reversed,
}

const LAYS: [Lay; 5] = [Lay::C, Lay::F, Lay::Padded, Lay::Stepped, Lay::Reversed];

/// A matrix's values stored as `lay` says; `view()` gives them back.
struct Laid {
    store: Array2<f32>,
    lay: Lay,
    dim: (usize, usize),
}

impl Laid {
    fn new(values: &Array2<f32>, lay: Lay) -> Self {
        let (r, c) = values.dim();
        let store = match lay {
            Lay::C => values.clone(),
            Lay::F => values.t().as_standard_layout().into_owned(),
            Lay::Padded => {
                let mut store = Array2::from_elem((r + 3, c + 2), f32::NAN);
                store.slice_mut(s![2..2 + r, 1..1 + c]).assign(values);
                store
            }
            Lay::Stepped => {
                let mut store = Array2::from_elem((2 * r, 3 * c), f32::NAN);
                store.slice_mut(s![..;2, ..;3]).assign(values);
                store
            }
            Lay::Reversed => values.slice(s![..;-1, ..;-1]).to_owned(),
        };
        let laid = Laid {
            store,
            lay,
            dim: (r, c),
        };
        let same = laid
            .view()
            .iter()
            .zip(values)
            .all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(
            same && laid.view().dim() == values.dim(),
            "{lay:?} changed the values"
        );
        laid
    }

    fn view(&self) -> ArrayView2<'_, f32> {
        let (r, c) = self.dim;
        match self.lay {
            Lay::C => self.store.view(),
            Lay::F => self.store.t(),
            Lay::Padded => self.store.slice(s![2..2 + r, 1..1 + c]),
            Lay::Stepped => self.store.slice(s![..;2, ..;3]),
            Lay::Reversed => self.store.slice(s![..;-1, ..;-1]),
        }
    }
}

/// Calls `f` with `a` and `b` in every pair of layouts (25 pairs).
fn in_every_layout(
    a: &Array2<f32>,
    b: &Array2<f32>,
    mut f: impl FnMut(&str, ArrayView2<f32>, ArrayView2<f32>),
) {
    for la in LAYS {
        let a_laid = Laid::new(a, la);
        for lb in LAYS {
            let b_laid = Laid::new(b, lb);
            f(&format!("{la:?} · {lb:?}"), a_laid.view(), b_laid.view());
        }
    }
}

/// Checks one CPU-path product: `Backend::Cpu` equals ndarray's `dot` exactly, and
/// `Backend::Auto`, `gpu_dot` and `try_gpu_dot` match the f64 reference.
#[track_caller]
fn check_cpu_paths(a: ArrayView2<f32>, b: ArrayView2<f32>, what: &str) {
    let r = reference(&a, &b);
    let p = a.gpu_dot_with(&b, &cpu()).unwrap();
    assert!(
        matches!(p.route, Route::Cpu(CpuReason::Requested)),
        "{what}: {:?}",
        p.route
    );
    assert_eq!(p.c, a.dot(&b), "{what}: Backend::Cpu is not ndarray's dot");
    check(&p.c, &a, &b, &r, &format!("{what} Backend::Cpu"));
    let p = a.gpu_dot_with(&b, &auto()).unwrap();
    check(
        &p.c,
        &a,
        &b,
        &r,
        &format!("{what} Backend::Auto ({})", p.route),
    );
    check(&a.gpu_dot(&b), &a, &b, &r, &format!("{what} gpu_dot"));
    check(&a.try_gpu_dot(&b).unwrap(), &a, &b, &r, what);
}

/// Checks every kernel on one product against the f64 reference, and that the route names the
/// kernel and the layouts `layout_of` gives.
#[track_caller]
fn check_kernels(a: ArrayView2<f32>, b: ArrayView2<f32>, what: &str) {
    let r = reference(&a, &b);
    for kernel in kernels() {
        let p = a
            .gpu_dot_with(&b, &on(kernel))
            .unwrap_or_else(|e| panic!("{what} {kernel}: {e}"));
        match p.route {
            Route::Gpu {
                kernel: ran,
                a_layout,
                b_layout,
                ..
            } => {
                assert_eq!(ran, kernel, "{what}");
                assert_eq!(
                    (a_layout, b_layout),
                    (layout_of(&a), layout_of(&b)),
                    "{what}"
                );
            }
            other => panic!("{what} {kernel}: ran {other:?}"),
        }
        check(&p.c, &a, &b, &r, &format!("{what} {kernel}"));
    }
}

// ---------------------------------------------------------------------------------------------
// Zero dimensions.

/// Each of m, k, n zero, and all, with the empty operands in every layout and broadcast: every
/// backend and every kernel gives `Route::Empty` and an `m × n` matrix of zeros, as ndarray's
/// `dot` does. `Route::Empty` is decided before any device is touched, so this needs no GPU
/// and holds on a GPU machine alike.
#[test]
fn zero_dimensions_in_every_layout_backend_and_kernel() {
    let mut rng = rng();
    for (m, k, n) in [
        (0, 7, 5),
        (6, 0, 5),
        (6, 7, 0),
        (0, 0, 0),
        (0, 7, 0),
        (1, 0, 1),
    ] {
        let a = Array2::from_shape_simple_fn((m, k), || rng.random_range(-1.0f32..1.0));
        let b = Array2::from_shape_simple_fn((k, n), || rng.random_range(-1.0f32..1.0));
        let row = Array2::<f32>::ones((1, k));
        let mut cases = 0;
        let mut check_empty = |what: &str, a: ArrayView2<f32>, b: ArrayView2<f32>| {
            let expected = a.dot(&b);
            assert_eq!(expected, Array2::<f32>::zeros((m, n)), "ndarray's dot");
            let mut options = vec![cpu(), auto(), DotOptions::builtin()];
            options.extend(kernels().map(on));
            for opts in options {
                let p = a.gpu_dot_with(&b, &opts).unwrap();
                assert!(
                    matches!(p.route, Route::Empty),
                    "{what} {opts:?}: {:?}",
                    p.route
                );
                assert_eq!(p.c, expected, "{what} {opts:?}");
            }
            assert_eq!(a.gpu_dot(&b), expected, "{what} gpu_dot");
            assert_eq!(a.try_gpu_dot(&b).unwrap(), expected, "{what} try_gpu_dot");
            cases += 1;
        };
        in_every_layout(&a, &b, &mut check_empty);
        let broadcast = row.broadcast((m, k)).unwrap();
        check_empty("broadcast", broadcast, b.view());
        assert_eq!(cases, 26, "{m}×{k}×{n}");
    }
}

// ---------------------------------------------------------------------------------------------
// Degenerate shapes and broadcast operands.

/// 1 × 1, one row, one column, an outer product (k = 1), an inner product, and one shape of
/// ordinary size, the last two dimensions past a tile edge.
const SMALL_SHAPES: [(usize, usize, usize); 7] = [
    (1, 1, 1),
    (1, 45, 37),
    (1, 129, 257),
    (37, 45, 1),
    (37, 1, 35),
    (1, 45, 1),
    (33, 17, 65),
];

#[test]
fn degenerate_shapes_in_every_layout_on_the_cpu_path() {
    for (m, k, n) in SMALL_SHAPES {
        let (a, b) = (random(m, k), random(k, n));
        in_every_layout(&a, &b, |lays, av, bv| {
            check_cpu_paths(av, bv, &format!("{m}×{k}×{n} {lays}"));
        });
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn degenerate_shapes_in_every_layout_on_every_kernel() {
    expect_device();
    for (m, k, n) in SMALL_SHAPES {
        let (a, b) = (random(m, k), random(k, n));
        in_every_layout(&a, &b, |lays, av, bv| {
            check_kernels(av, bv, &format!("{m}×{k}×{n} {lays}"));
        });
    }
}

/// Stride-0 operands: one stored row, column or element broadcast to the operand's shape, for
/// either operand or both, beside C, F and negative-stride partners.
fn with_broadcast_operands(mut f: impl FnMut(&str, ArrayView2<f32>, ArrayView2<f32>)) {
    for (m, k, n) in [(65, 33, 47), (1, 33, 47), (65, 33, 1), (40, 1, 30)] {
        let (a_row, a_col, a_one) = (random(1, k), random(m, 1), random(1, 1));
        let (b_row, b_col, b_one) = (random(1, n), random(k, 1), random(1, 1));
        let (a, b) = (random(m, k), random(k, n));
        let (a_f, b_f) = (Laid::new(&a, Lay::F), Laid::new(&b, Lay::F));
        let b_rev = Laid::new(&b, Lay::Reversed);
        let a_views = [
            ("row-broadcast", a_row.broadcast((m, k)).unwrap()),
            ("column-broadcast", a_col.broadcast((m, k)).unwrap()),
            ("element-broadcast", a_one.broadcast((m, k)).unwrap()),
            ("C", a.view()),
            ("F", a_f.view()),
        ];
        let b_views = [
            ("row-broadcast", b_row.broadcast((k, n)).unwrap()),
            ("column-broadcast", b_col.broadcast((k, n)).unwrap()),
            ("element-broadcast", b_one.broadcast((k, n)).unwrap()),
            ("C", b.view()),
            ("F", b_f.view()),
            ("reversed", b_rev.view()),
        ];
        for (an, av) in &a_views {
            for (bn, bv) in &b_views {
                if !an.contains("broadcast") && !bn.contains("broadcast") {
                    continue;
                }
                f(&format!("{m}×{k}×{n} {an} · {bn}"), av.view(), bv.view());
            }
        }
    }
}

#[test]
fn broadcast_operands_on_the_cpu_path() {
    let mut cases = 0;
    with_broadcast_operands(|what, a, b| {
        check_cpu_paths(a, b, what);
        cases += 1;
    });
    assert_eq!(cases, 4 * (5 * 6 - 2 * 3));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn broadcast_operands_on_every_kernel() {
    expect_device();
    with_broadcast_operands(|what, a, b| check_kernels(a, b, what));
}

// ---------------------------------------------------------------------------------------------
// IEEE behaviour: NaN, infinities, overflow, subnormals.

/// The class of a value, compared position by position with ndarray's `dot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Nan,
    PosInf,
    NegInf,
    Finite,
}

fn class(x: f32) -> Class {
    if x.is_nan() {
        Class::Nan
    } else if x == f32::INFINITY {
        Class::PosInf
    } else if x == f32::NEG_INFINITY {
        Class::NegInf
    } else {
        Class::Finite
    }
}

/// The spacing of f32 subnormals, `MIN_POSITIVE · EPSILON` = 2⁻¹⁴⁹: below `MIN_POSITIVE`
/// rounding errors are absolute, at most half of it per operation.
const SUBNORMAL_SPACING: f64 = f32::MIN_POSITIVE as f64 * f32::EPSILON as f64;

/// `(|a|·|b|)ᵢⱼ` in f64 over the finite elements of `a` and `b` (an element of C that meets a
/// non-finite input is not finite, so its bound is never used).
fn abs_product(a: &ArrayView2<f32>, b: &ArrayView2<f32>) -> Array2<f64> {
    let finite_abs = |x: &f32| {
        if x.is_finite() {
            f64::from(x.abs())
        } else {
            0.0
        }
    };
    a.map(finite_abs).dot(&b.map(finite_abs))
}

/// The worst-case rounding error of one f32 dot product of `k` terms against the exact value,
/// per element: `γₖ·(|a|·|b|)ᵢⱼ` with `γₖ = k·u/(1 − k·u)`, `u = ε/2`, plus `k` half-spacings
/// of the subnormal range, where errors are absolute (products and partial sums that
/// underflow). It holds for any order of summation, with or without fused multiply-adds.
fn rounding_bound(k: usize, abs: f64) -> f64 {
    let ku = k as f64 * f64::from(f32::EPSILON) / 2.0;
    ku / (1.0 - ku) * abs + k as f64 * SUBNORMAL_SPACING / 2.0
}

/// An IEEE fixture: operands, and the class every element of the product must have.
struct Fixture {
    name: &'static str,
    a: Array2<f32>,
    b: Array2<f32>,
    classes: Array2<Class>,
    /// Products or inputs below `f32::MIN_POSITIVE`: results must keep them.
    subnormal: bool,
}

/// `a · b` with a plain f64 sum (IEEE semantics: NaN propagates, Inf·0 and Inf − Inf are NaN)
/// and classed as an f32 result: beyond `f32::MAX` is an infinity. A value within 1 ‰ of
/// `f32::MAX` other than `f32::MAX` itself, where rounding could go either way, is a fixture
/// error.
fn f64_classes(a: &Array2<f32>, b: &Array2<f32>) -> Array2<Class> {
    let (m, k, n) = (a.nrows(), a.ncols(), b.ncols());
    Array2::from_shape_fn((m, n), |(i, j)| {
        let v: f64 = (0..k)
            .map(|p| f64::from(a[[i, p]]) * f64::from(b[[p, j]]))
            .sum();
        let max = f64::from(f32::MAX);
        assert!(
            !(v.is_finite() && v.abs() != max && (v.abs() - max).abs() < 1e-3 * max),
            "C[{i}, {j}] = {v:e} is too close to f32::MAX to class"
        );
        match v {
            v if v.is_nan() => Class::Nan,
            v if v > max => Class::PosInf,
            v if v < -max => Class::NegInf,
            _ => Class::Finite,
        }
    })
}

fn uniform(rng: &mut StdRng, dim: (usize, usize), lo: f32, hi: f32) -> Array2<f32> {
    Array2::from_shape_simple_fn(dim, || rng.random_range(lo..hi))
}

/// NaN in both operands, in the first and last row and column and on a tile edge: a NaN in
/// row i of A makes row i of C NaN, a NaN in column j of B makes column j NaN.
fn nan_fixture(rng: &mut StdRng) -> Fixture {
    let (m, k, n) = (37, 45, 35);
    let mut a = uniform(rng, (m, k), -1.0, 1.0);
    let mut b = uniform(rng, (k, n), -1.0, 1.0);
    for (i, p) in [(0, 0), (36, 44), (17, 16)] {
        a[[i, p]] = f32::NAN;
    }
    for (p, j) in [(44, 34), (0, 20), (31, 33)] {
        b[[p, j]] = f32::NAN;
    }
    let classes = Array2::from_shape_fn((m, n), |(i, j)| {
        if [0, 36, 17].contains(&i) || [34, 20, 33].contains(&j) {
            Class::Nan
        } else {
            Class::Finite
        }
    });
    assert_eq!(classes, f64_classes(&a, &b));
    Fixture {
        name: "NaN",
        a,
        b,
        classes,
        subnormal: false,
    }
}

/// ±Inf in both operands: Inf times a finite non-zero value is an infinity of the product's
/// sign, Inf·0 is NaN (zeros placed where infinities meet them), and +Inf − Inf is NaN.
fn inf_fixture(rng: &mut StdRng) -> Fixture {
    let (m, k, n) = (37, 45, 35);
    let mut a = uniform(rng, (m, k), -1.0, 1.0);
    let mut b = uniform(rng, (k, n), -1.0, 1.0);
    a[[3, 5]] = f32::INFINITY;
    a[[3, 6]] = f32::NEG_INFINITY; // with b[5, j] and b[6, j] of one sign: Inf − Inf
    a[[30, 44]] = f32::NEG_INFINITY;
    b[[12, 7]] = f32::INFINITY;
    b[[0, 34]] = f32::NEG_INFINITY;
    b[[5, 2]] = 0.0; // Inf · 0 at (3, 2), beside Inf · b[6, 2]
    b[[6, 2]] = 0.0; // and −Inf · 0: C[3, 2] is NaN
    b[[44, 9]] = 0.0; // −Inf · 0 at (30, 9)
    a[[20, 12]] = 0.0; // 0 · Inf at (20, 7)
    for j in 10..20 {
        b[[5, j]] = 0.5 + 0.01 * j as f32; // same sign at rows 5 and 6: Inf − Inf at (3, j)
        b[[6, j]] = 0.25;
    }
    for j in 20..25 {
        b[[5, j]] = 0.5;
        b[[6, j]] = -0.5; // opposite signs: +Inf + Inf at (3, j)
    }
    let classes = f64_classes(&a, &b);
    for (i, j) in [(3, 2), (30, 9), (20, 7), (3, 10), (3, 19)] {
        assert_eq!(classes[[i, j]], Class::Nan, "({i}, {j})");
    }
    assert_eq!(classes[[3, 20]], Class::PosInf);
    assert!(classes.iter().any(|&c| c == Class::NegInf));
    Fixture {
        name: "±Inf",
        a,
        b,
        classes,
        subnormal: false,
    }
}

/// Values near `f32::MAX`. Every element of C is a sum of terms of one sign, so its partial
/// sums only grow and whether it overflows does not depend on the order of summation: rows
/// of A scaled by 1, 1e36, 4e37 and 3e38, columns of B by ±1e-3, ±1 and ±2, so that single
/// products overflow (3e38 · 2), sums of finite products overflow (4e37 · 1 · 45 terms), and
/// large sums stay finite (1e36 · 2 · 45 terms); one element is exactly `f32::MAX` (a unit
/// column of B picking `f32::MAX` from A).
fn overflow_fixture(rng: &mut StdRng) -> Fixture {
    let (m, k, n) = (36, 45, 36);
    let row_scale = [1.0f32, 1e36, 4e37, 3e38];
    let col_scale = [1e-3f32, 1.0, 2.0, -1e-3, -1.0, -2.0];
    let mut a = uniform(rng, (m, k), 0.25, 1.0);
    let mut b = uniform(rng, (k, n), 0.25, 1.0);
    for (i, mut row) in a.rows_mut().into_iter().enumerate() {
        row *= row_scale[i % row_scale.len()];
    }
    for (j, mut col) in b.columns_mut().into_iter().enumerate() {
        col *= col_scale[j % col_scale.len()];
    }
    a[[3, 7]] = f32::MAX; // row 3 is scaled by 3e38
    b.column_mut(33).fill(0.0);
    b[[7, 33]] = 1.0;
    let classes = f64_classes(&a, &b);
    assert_eq!(classes[[3, 33]], Class::Finite);
    for class in [Class::PosInf, Class::NegInf, Class::Finite] {
        assert!(classes.iter().any(|&c| c == class), "no {class:?}");
    }
    Fixture {
        name: "overflow",
        a,
        b,
        classes,
        subnormal: false,
    }
}

/// Subnormal inputs: A's elements are positive subnormals (below `f32::MIN_POSITIVE`), B's in
/// [0.25, 1). Flushing subnormal inputs to zero (DAZ) would give zeros.
fn subnormal_input_fixture(rng: &mut StdRng) -> Fixture {
    let a = uniform(rng, (33, 16), 0.0, 1.0).mapv(|x| (x * 0.9 + 0.05) * f32::MIN_POSITIVE);
    let b = uniform(rng, (16, 35), 0.25, 1.0);
    assert!(a.iter().all(|x| x.is_subnormal()));
    subnormal_fixture("subnormal inputs", a, b)
}

/// Normal inputs near 2⁻⁶⁶ whose products (near 2⁻¹³²) and sums of 20 stay below
/// `f32::MIN_POSITIVE` = 2⁻¹²⁶: every product and every element of C is subnormal. Flushing
/// results to zero (FTZ) would give zeros.
fn subnormal_result_fixture(rng: &mut StdRng) -> Fixture {
    let scale = 2f32.powi(-66);
    let a = uniform(rng, (33, 20), 0.5 * scale, scale);
    let b = uniform(rng, (20, 35), 0.5 * scale, scale);
    subnormal_fixture("subnormal products and results", a, b)
}

/// The same tiny inputs over k = 1000: each product is subnormal, their sum (near 2⁻¹²³) is
/// normal. Flushing the products would lose the whole sum, or, with fused multiply-adds, the
/// terms taken while the partial sum was still subnormal.
fn subnormal_partial_fixture(rng: &mut StdRng) -> Fixture {
    let scale = 2f32.powi(-66);
    let a = uniform(rng, (33, 1000), 0.5 * scale, scale);
    let b = uniform(rng, (1000, 35), 0.5 * scale, scale);
    subnormal_fixture("subnormal products, normal results", a, b)
}

fn subnormal_fixture(name: &'static str, a: Array2<f32>, b: Array2<f32>) -> Fixture {
    let classes = Array2::from_elem((a.nrows(), b.ncols()), Class::Finite);
    assert_eq!(classes, f64_classes(&a, &b));
    Fixture {
        name,
        a,
        b,
        classes,
        subnormal: true,
    }
}

/// What a product of a fixture's operands, in one pair of layouts, must match.
struct Expected<'f> {
    fx: &'f Fixture,
    /// ndarray's `dot` of the same views.
    dot: Array2<f32>,
    /// The product in f64 (exact for the subnormal fixtures' magnitudes, up to f64 rounding).
    exact: Array2<f64>,
    abs: Array2<f64>,
    k: usize,
}

impl<'f> Expected<'f> {
    fn new(fx: &'f Fixture, a: &ArrayView2<f32>, b: &ArrayView2<f32>) -> Self {
        Expected {
            fx,
            dot: a.dot(b),
            exact: a.mapv(f64::from).dot(&b.mapv(f64::from)),
            abs: abs_product(a, b),
            k: a.ncols(),
        }
    }

    /// Checks `c` element by element: the fixture's designed class at every position, the
    /// same class as ndarray's `dot` (NaN, +Inf, −Inf, finite), and finite values within twice
    /// the rounding bound of ndarray's (both results are rounded). For the subnormal fixtures,
    /// also every element non-zero and within the rounding bound of the exact product: a flush
    /// to zero misses it by about the result itself.
    #[track_caller]
    fn check(&self, c: &Array2<f32>, what: &str) {
        let what = format!("{} {what}", self.fx.name);
        assert_eq!(c.dim(), self.dot.dim(), "{what}: wrong shape");
        for ((i, j), &x) in c.indexed_iter() {
            let (y, s) = (self.dot[[i, j]], self.abs[[i, j]]);
            let at = format!("{what}: C[{i}, {j}] = {x:e}, ndarray's dot gives {y:e}");
            assert_eq!(class(x), self.fx.classes[[i, j]], "{at}: not as designed");
            assert_eq!(class(x), class(y), "{at}");
            if class(y) == Class::Finite {
                let (err, bound) = (
                    (f64::from(x) - f64::from(y)).abs(),
                    2.0 * rounding_bound(self.k, s),
                );
                assert!(err <= bound, "{at}: {err:e} above {bound:e}");
            }
            if self.fx.subnormal {
                let r = self.exact[[i, j]];
                let (err, bound) = ((f64::from(x) - r).abs(), rounding_bound(self.k, s));
                assert!(x > 0.0, "{at}, exact {r:e}: flushed to zero");
                assert!(err <= bound, "{at}, exact {r:e}: {err:e} above {bound:e}");
            }
        }
    }
}

fn ieee_fixtures() -> Vec<Fixture> {
    let mut rng = rng();
    vec![
        nan_fixture(&mut rng),
        inf_fixture(&mut rng),
        overflow_fixture(&mut rng),
        subnormal_input_fixture(&mut rng),
        subnormal_result_fixture(&mut rng),
        subnormal_partial_fixture(&mut rng),
    ]
}

/// The fixtures' premises, checked on ndarray's own `dot`: the designed classes, gradual
/// underflow (results within the bound of the exact product), results all subnormal where
/// designed so, and normal results from subnormal products.
#[test]
fn ieee_fixtures_hold_for_ndarrays_dot() {
    let fixtures = ieee_fixtures();
    for fx in &fixtures {
        let (a, b) = (fx.a.view(), fx.b.view());
        Expected::new(fx, &a, &b).check(&a.dot(&b), "ndarray");
    }
    let [.., sub, partial] = &fixtures[..] else {
        unreachable!()
    };
    assert!(sub.a.dot(&sub.b).iter().all(|x| x.is_subnormal()));
    let max_product = f64::from(partial.a.fold(0.0f32, |m, &x| m.max(x))).powi(2);
    assert!(max_product < f64::from(f32::MIN_POSITIVE));
    assert!(partial.a.dot(&partial.b).iter().all(|x| x.is_normal()));
}

/// On the CPU path, in every layout pair, through `Backend::Cpu`, `Backend::Auto`, `gpu_dot`
/// and `try_gpu_dot`: the classes of ndarray's `dot` at every position, finite values within
/// the bound, subnormals kept.
#[test]
fn ieee_values_on_the_cpu_path_in_every_layout() {
    for fx in ieee_fixtures() {
        in_every_layout(&fx.a, &fx.b, |lays, a, b| {
            let expected = Expected::new(&fx, &a, &b);
            let p = a.gpu_dot_with(&b, &cpu()).unwrap();
            assert!(matches!(p.route, Route::Cpu(CpuReason::Requested)));
            expected.check(&p.c, &format!("{lays} Backend::Cpu"));
            let p = a.gpu_dot_with(&b, &auto()).unwrap();
            expected.check(&p.c, &format!("{lays} Backend::Auto ({})", p.route));
            expected.check(&a.gpu_dot(&b), &format!("{lays} gpu_dot"));
            expected.check(&a.try_gpu_dot(&b).unwrap(), &format!("{lays} try_gpu_dot"));
        });
    }
}

/// Every kernel, in every layout pair, behaves as ndarray's `dot` on NaN, ±Inf, Inf·0,
/// overflow and subnormals. The documented expectation is the CPU's: the kernels are compiled
/// without flushing subnormals to zero, so a flushed result here is a finding, not noise.
#[test]
#[ignore = "needs a CUDA GPU"]
fn ieee_values_on_every_kernel_in_every_layout() {
    expect_device();
    for fx in ieee_fixtures() {
        in_every_layout(&fx.a, &fx.b, |lays, a, b| {
            let expected = Expected::new(&fx, &a, &b);
            for kernel in kernels() {
                let what = format!("{lays} {kernel}");
                let p = a
                    .gpu_dot_with(&b, &on(kernel))
                    .unwrap_or_else(|e| panic!("{} {what}: {e}", fx.name));
                assert!(p.route.is_gpu(), "{} {what}: {:?}", fx.name, p.route);
                expected.check(&p.c, &what);
            }
        });
    }
}

// ---------------------------------------------------------------------------------------------
// More than 2³¹ elements.

/// A left operand of 65 600 × 32 769 = 2 149 646 400 elements (more than 2³¹), as one random
/// row broadcast with stride 0, times a random 32 769 × 8 matrix, on every kernel, with the
/// row panels the crate chooses and as one panel (so that the kernel itself indexes past 2³¹):
/// each row of C is the row times B, checked against the f64 reference of that one product
/// within `common::check`'s bound, rows past 65 535 (whose offsets `row · 32 769` pass 2³¹)
/// included. A product may fail only with a typed error (`OutOfMemory`, `TooLarge`), never
/// return a wrong result. The view costs no host memory; the product moves 8.6 GB to the
/// device, and as one panel stages all of it in page-locked host memory. Slow under
/// compute-sanitizer (skip it there with `--skip more_than_2_pow_31`).
#[test]
#[ignore = "needs a CUDA GPU"]
fn left_operand_of_more_than_2_pow_31_elements() {
    expect_device();
    const M: usize = 65_600;
    const K: usize = 32_769;
    const N: usize = 8;
    const _: () = assert!(M * K > 1 << 31);
    let row = random(1, K);
    let a = row.broadcast((M, K)).unwrap();
    let b = random(K, N);
    let r = reference(&row, &b); // 1 × N
    let abs = row
        .mapv(|x| f64::from(x.abs()))
        .dot(&b.mapv(|x| f64::from(x.abs())));
    let bound = 4.0
        * f64::from(f32::EPSILON)
        * (K as f64).sqrt()
        * abs.iter().map(|s| s * s).sum::<f64>().sqrt();
    for kernel in kernels() {
        for panel_rows in [None, Some(M)] {
            let what = format!("{kernel}, panel rows {panel_rows:?}");
            let t = std::time::Instant::now();
            match a.gpu_dot_with(&b, &on(kernel).panel_rows(panel_rows)) {
                Ok(p) => {
                    assert!(p.route.is_gpu(), "{what}: {:?}", p.route);
                    assert_eq!(p.c.dim(), (M, N));
                    for (i, ci) in p.c.rows().into_iter().enumerate() {
                        let err = ci
                            .iter()
                            .zip(&r)
                            .map(|(&x, &y)| (f64::from(x) - y).powi(2))
                            .sum::<f64>()
                            .sqrt();
                        assert!(
                            err <= bound,
                            "{what}: row {i} of C is {err:.3e} from row · B (bound {bound:.3e})"
                        );
                    }
                    let secs = t.elapsed().as_secs_f64();
                    println!("{what}: {} in {secs:.1} s", p.route);
                }
                Err(e @ (GpuDotError::OutOfMemory { .. } | GpuDotError::TooLarge { .. })) => {
                    println!("{what}: {e}");
                }
                Err(e) => panic!("{what}: {e:?}"),
            }
        }
    }
}

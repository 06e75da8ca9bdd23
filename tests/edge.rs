//! Edge cases and IEEE behaviour: zero dimensions, degenerate shapes (1 × 1, one row, one
//! column, outer and inner products) and broadcast (stride-0) operands in every layout; NaN,
//! ±Inf, Inf·0, overflow near the largest finite value and subnormals, compared element by
//! element with ndarray's `dot`; and a left operand of more than 2³¹ elements.
//!
//! The documented expectation is the CPU's: a product has NaN, +Inf and −Inf at the same
//! positions as ndarray's `dot` of the same operands, and its finite values agree within the
//! rounding bound of a k-term dot product. Each case runs for `f32` and `f64` (`NAME::f32`,
//! `NAME::f64`) on the CPU path here and, ignored without a GPU, over every kernel
//! (`cargo test --test edge -- --include-ignored`).

mod common;

use common::{both_types, check, expect_device, random, reference, uniform, TestElem};
use gpu_dot::{layout_of, Backend, CpuReason, DotOptions, GpuDot, GpuDotError, Kernel, Route};
use ndarray::{s, Array2, ArrayView2};
use rand::{rngs::StdRng, SeedableRng};

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
struct Laid<T> {
    store: Array2<T>,
    lay: Lay,
    dim: (usize, usize),
}

impl<T: TestElem> Laid<T> {
    fn new(values: &Array2<T>, lay: Lay) -> Self {
        let (r, c) = values.dim();
        let store = match lay {
            Lay::C => values.clone(),
            Lay::F => values.t().as_standard_layout().into_owned(),
            Lay::Padded => {
                let mut store = Array2::from_elem((r + 3, c + 2), T::nan());
                store.slice_mut(s![2..2 + r, 1..1 + c]).assign(values);
                store
            }
            Lay::Stepped => {
                let mut store = Array2::from_elem((2 * r, 3 * c), T::nan());
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
            .all(|(&x, &y)| x.bits() == y.bits());
        assert!(
            same && laid.view().dim() == values.dim(),
            "{lay:?} changed the values"
        );
        laid
    }

    fn view(&self) -> ArrayView2<'_, T> {
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
fn in_every_layout<T: TestElem>(
    a: &Array2<T>,
    b: &Array2<T>,
    mut f: impl FnMut(&str, ArrayView2<T>, ArrayView2<T>),
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
/// `Backend::Auto`, `gpu_dot` and `try_gpu_dot` match the reference.
#[track_caller]
fn check_cpu_paths<T: TestElem>(a: ArrayView2<T>, b: ArrayView2<T>, what: &str) {
    let r = reference(&a, &b);
    let p = a.try_gpu_dot_with(&b, &cpu()).unwrap();
    assert!(
        matches!(p.route, Route::Cpu(CpuReason::Requested)),
        "{what}: {:?}",
        p.route
    );
    assert_eq!(p.c, a.dot(&b), "{what}: Backend::Cpu is not ndarray's dot");
    check(&p.c, &a, &b, &r, &format!("{what} Backend::Cpu"));
    let p = a.try_gpu_dot_with(&b, &auto()).unwrap();
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

/// Checks every kernel on one product against the reference, and that the route names the
/// element type, the kernel and the layouts `layout_of` gives.
#[track_caller]
fn check_kernels<T: TestElem>(a: ArrayView2<T>, b: ArrayView2<T>, what: &str) {
    let r = reference(&a, &b);
    for kernel in kernels() {
        let p = a
            .try_gpu_dot_with(&b, &on(kernel))
            .unwrap_or_else(|e| panic!("{what} {kernel}: {e}"));
        match p.route {
            Route::Gpu {
                dtype,
                kernel: ran,
                a_layout,
                b_layout,
                ..
            } => {
                assert_eq!(dtype, T::DTYPE, "{what}");
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

both_types!(zero_dimensions_in_every_layout_backend_and_kernel);
/// Each of m, k, n zero, and all, with the empty operands in every layout and broadcast: every
/// backend and every kernel gives `Route::Empty` and an `m × n` matrix of zeros, as ndarray's
/// `dot` does. `Route::Empty` is decided before any device is touched, so this needs no GPU
/// and holds on a GPU machine alike.
fn zero_dimensions_in_every_layout_backend_and_kernel<T: TestElem>() {
    let mut rng = rng();
    for (m, k, n) in [
        (0, 7, 5),
        (6, 0, 5),
        (6, 7, 0),
        (0, 0, 0),
        (0, 7, 0),
        (1, 0, 1),
    ] {
        let a = Array2::from_shape_simple_fn((m, k), || uniform::<T>(&mut rng, -1.0, 1.0));
        let b = Array2::from_shape_simple_fn((k, n), || uniform::<T>(&mut rng, -1.0, 1.0));
        let row = Array2::<T>::ones((1, k));
        let mut cases = 0;
        let mut check_empty = |what: &str, a: ArrayView2<T>, b: ArrayView2<T>| {
            let expected = a.dot(&b);
            assert_eq!(expected, Array2::<T>::zeros((m, n)), "ndarray's dot");
            let mut options = vec![cpu(), auto(), DotOptions::builtin()];
            options.extend(kernels().map(on));
            for opts in options {
                let p = a.try_gpu_dot_with(&b, &opts).unwrap();
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

both_types!(degenerate_shapes_in_every_layout_on_the_cpu_path);
fn degenerate_shapes_in_every_layout_on_the_cpu_path<T: TestElem>() {
    for (m, k, n) in SMALL_SHAPES {
        let (a, b) = (random::<T>(m, k), random::<T>(k, n));
        in_every_layout(&a, &b, |lays, av, bv| {
            check_cpu_paths(av, bv, &format!("{m}×{k}×{n} {lays}"));
        });
    }
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    degenerate_shapes_in_every_layout_on_every_kernel
);
fn degenerate_shapes_in_every_layout_on_every_kernel<T: TestElem>() {
    expect_device();
    for (m, k, n) in SMALL_SHAPES {
        let (a, b) = (random::<T>(m, k), random::<T>(k, n));
        in_every_layout(&a, &b, |lays, av, bv| {
            check_kernels(av, bv, &format!("{m}×{k}×{n} {lays}"));
        });
    }
}

/// Stride-0 operands: one stored row, column or element broadcast to the operand's shape, for
/// either operand or both, beside C, F and negative-stride partners.
fn with_broadcast_operands<T: TestElem>(mut f: impl FnMut(&str, ArrayView2<T>, ArrayView2<T>)) {
    for (m, k, n) in [(65, 33, 47), (1, 33, 47), (65, 33, 1), (40, 1, 30)] {
        let (a_row, a_col, a_one) = (random::<T>(1, k), random::<T>(m, 1), random::<T>(1, 1));
        let (b_row, b_col, b_one) = (random::<T>(1, n), random::<T>(k, 1), random::<T>(1, 1));
        let (a, b) = (random::<T>(m, k), random::<T>(k, n));
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

both_types!(broadcast_operands_on_the_cpu_path);
fn broadcast_operands_on_the_cpu_path<T: TestElem>() {
    let mut cases = 0;
    with_broadcast_operands::<T>(|what, a, b| {
        check_cpu_paths(a, b, what);
        cases += 1;
    });
    assert_eq!(cases, 4 * (5 * 6 - 2 * 3));
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    broadcast_operands_on_every_kernel
);
fn broadcast_operands_on_every_kernel<T: TestElem>() {
    expect_device();
    with_broadcast_operands::<T>(|what, a, b| check_kernels(a, b, what));
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

fn class<T: TestElem>(x: T) -> Class {
    if x.is_nan() {
        Class::Nan
    } else if x == T::infinity() {
        Class::PosInf
    } else if x == T::neg_infinity() {
        Class::NegInf
    } else {
        Class::Finite
    }
}

/// The spacing of `T`'s subnormals, `MIN_POSITIVE · EPSILON` (2⁻¹⁴⁹, 2⁻¹⁰⁷⁴): below
/// `MIN_POSITIVE` rounding errors are absolute, at most half of it per operation.
fn subnormal_spacing<T: TestElem>() -> f64 {
    T::min_positive_value().into_f64() * T::EPS
}

/// `(|a|·|b|)ᵢⱼ` in f64 over the finite elements of `a` and `b` (an element of C that meets a
/// non-finite input is not finite, so its bound is never used).
fn abs_product<T: TestElem>(a: &ArrayView2<T>, b: &ArrayView2<T>) -> Array2<f64> {
    let finite_abs = |&x: &T| {
        if x.is_finite() {
            x.into_f64().abs()
        } else {
            0.0
        }
    };
    a.map(finite_abs).dot(&b.map(finite_abs))
}

/// The worst-case rounding error of one dot product of `k` terms in `T` against the exact
/// value, per element: `γₖ·(|a|·|b|)ᵢⱼ` with `γₖ = k·u/(1 − k·u)`, `u = ε/2`, plus `k`
/// half-spacings of the subnormal range, where errors are absolute (products and partial sums
/// that underflow). It holds for any order of summation, with or without fused multiply-adds.
/// `scale` is the power of two the errors and `abs` are scaled by (see [`Fixture`]).
fn rounding_bound<T: TestElem>(k: usize, abs: f64, scale: f64) -> f64 {
    let ku = k as f64 * T::EPS / 2.0;
    ku / (1.0 - ku) * abs + k as f64 * (subnormal_spacing::<T>() * scale) / 2.0
}

/// An IEEE fixture: operands, the class every element of the product must have, and what the
/// bounds are taken from.
///
/// For the subnormal fixtures every value compared is scaled by `scale` = 1 / `MIN_POSITIVE`
/// (2¹²⁶ in `f32`, 2¹⁰²² in `f64`), a power of two that makes the subnormal range normal in
/// f64: the results, ndarray's, the exact product (computed from operands scaled by
/// `√scale`) and the bound. Scaling by a power of two changes no comparison; it keeps
/// `f64`'s subnormal spacing and the reference representable to the last bit.
struct Fixture<T> {
    name: &'static str,
    a: Array2<T>,
    b: Array2<T>,
    classes: Array2<Class>,
    /// The product, scaled, to well beyond `T`'s precision: for the subnormal fixtures, whose
    /// products and inputs lie below `MIN_POSITIVE` and whose results must keep them.
    exact: Option<Array2<f64>>,
    /// `|a|·|b|` over the finite elements, scaled.
    abs: Array2<f64>,
    scale: f64,
}

impl<T: TestElem> Fixture<T> {
    fn new(name: &'static str, a: Array2<T>, b: Array2<T>, classes: Array2<Class>) -> Self {
        Self::with(name, a, b, classes, false)
    }

    fn with(
        name: &'static str,
        a: Array2<T>,
        b: Array2<T>,
        classes: Array2<Class>,
        subnormal: bool,
    ) -> Self {
        let up = if subnormal {
            1.0 / T::min_positive_value().into_f64().sqrt()
        } else {
            1.0
        };
        let (a_up, b_up) = (
            a.mapv(|x| x * T::from_f64(up)),
            b.mapv(|x| x * T::from_f64(up)),
        );
        Fixture {
            name,
            exact: subnormal.then(|| reference(&a_up, &b_up)),
            abs: abs_product(&a_up.view(), &b_up.view()),
            scale: up * up,
            a,
            b,
            classes,
        }
    }
}

/// `a · b` classed as a result in `T`: beyond the largest finite value is an infinity. The sum
/// is taken in f64 (IEEE semantics: NaN propagates, Inf·0 and Inf − Inf are NaN) with each
/// factor scaled by 2⁻⁶⁴, so that products of `f64` operands near `f64::MAX` do not overflow
/// f64 itself (for `f32` operands the scaled sum is the unscaled one, times 2⁻¹²⁸). A value
/// within 1 ‰ of the largest finite value other than that value itself, where rounding could
/// go either way, is a fixture error.
fn classes<T: TestElem>(a: &Array2<T>, b: &Array2<T>) -> Array2<Class> {
    let down = 2f64.powi(-64);
    let (m, k, n) = (a.nrows(), a.ncols(), b.ncols());
    Array2::from_shape_fn((m, n), |(i, j)| {
        let v: f64 = (0..k)
            .map(|p| (a[[i, p]].into_f64() * down) * (b[[p, j]].into_f64() * down))
            .sum();
        let max = T::max_value().into_f64() * down * down;
        assert!(
            !(v.is_finite() && v.abs() != max && (v.abs() - max).abs() < 1e-3 * max),
            "C[{i}, {j}] = {v:e} · 2¹²⁸ is too close to the largest finite value to class"
        );
        match v {
            v if v.is_nan() => Class::Nan,
            v if v > max => Class::PosInf,
            v if v < -max => Class::NegInf,
            _ => Class::Finite,
        }
    })
}

fn uniform_matrix<T: TestElem>(
    rng: &mut StdRng,
    dim: (usize, usize),
    lo: f64,
    hi: f64,
) -> Array2<T> {
    Array2::from_shape_simple_fn(dim, || uniform::<T>(rng, lo, hi))
}

/// NaN in both operands, in the first and last row and column and on a tile edge: a NaN in
/// row i of A makes row i of C NaN, a NaN in column j of B makes column j NaN.
fn nan_fixture<T: TestElem>(rng: &mut StdRng) -> Fixture<T> {
    let (m, k, n) = (37, 45, 35);
    let mut a = uniform_matrix(rng, (m, k), -1.0, 1.0);
    let mut b = uniform_matrix(rng, (k, n), -1.0, 1.0);
    for (i, p) in [(0, 0), (36, 44), (17, 16)] {
        a[[i, p]] = T::nan();
    }
    for (p, j) in [(44, 34), (0, 20), (31, 33)] {
        b[[p, j]] = T::nan();
    }
    let classes_of = Array2::from_shape_fn((m, n), |(i, j)| {
        if [0, 36, 17].contains(&i) || [34, 20, 33].contains(&j) {
            Class::Nan
        } else {
            Class::Finite
        }
    });
    assert_eq!(classes_of, classes(&a, &b));
    Fixture::new("NaN", a, b, classes_of)
}

/// ±Inf in both operands: Inf times a finite non-zero value is an infinity of the product's
/// sign, Inf·0 is NaN (zeros placed where infinities meet them), and +Inf − Inf is NaN.
fn inf_fixture<T: TestElem>(rng: &mut StdRng) -> Fixture<T> {
    let (m, k, n) = (37, 45, 35);
    let mut a = uniform_matrix(rng, (m, k), -1.0, 1.0);
    let mut b = uniform_matrix(rng, (k, n), -1.0, 1.0);
    let v = T::from_f64;
    a[[3, 5]] = T::infinity();
    a[[3, 6]] = T::neg_infinity(); // with b[5, j] and b[6, j] of one sign: Inf − Inf
    a[[30, 44]] = T::neg_infinity();
    b[[12, 7]] = T::infinity();
    b[[0, 34]] = T::neg_infinity();
    b[[5, 2]] = T::zero(); // Inf · 0 at (3, 2), beside Inf · b[6, 2]
    b[[6, 2]] = T::zero(); // and −Inf · 0: C[3, 2] is NaN
    b[[44, 9]] = T::zero(); // −Inf · 0 at (30, 9)
    a[[20, 12]] = T::zero(); // 0 · Inf at (20, 7)
    for j in 10..20 {
        b[[5, j]] = v(0.5 + 0.01 * j as f64); // same sign at rows 5 and 6: Inf − Inf at (3, j)
        b[[6, j]] = v(0.25);
    }
    for j in 20..25 {
        b[[5, j]] = v(0.5);
        b[[6, j]] = v(-0.5); // opposite signs: +Inf + Inf at (3, j)
    }
    let classes = classes(&a, &b);
    for (i, j) in [(3, 2), (30, 9), (20, 7), (3, 10), (3, 19)] {
        assert_eq!(classes[[i, j]], Class::Nan, "({i}, {j})");
    }
    assert_eq!(classes[[3, 20]], Class::PosInf);
    assert!(classes.iter().any(|&c| c == Class::NegInf));
    Fixture::new("±Inf", a, b, classes)
}

/// Values near the largest finite value `MAX`. Every element of C is a sum of terms of one
/// sign, so its partial sums only grow and whether it overflows does not depend on the order
/// of summation: rows of A scaled by 1, 1e36, 4e37 and 3e38 in `f32` (0.29 %, 12 % and 88 % of
/// `MAX`; the same fractions of `f64::MAX` in `f64`), columns of B by ±1e-3, ±1 and ±2, so that
/// single products overflow (3e38 · 2), sums of finite products overflow (4e37 · 1 · 45
/// terms), and large sums stay finite (1e36 · 2 · 45 terms); one element is exactly `MAX` (a
/// unit column of B picking `MAX` from A).
fn overflow_fixture<T: TestElem>(rng: &mut StdRng) -> Fixture<T> {
    let (m, k, n) = (36, 45, 36);
    let range = T::max_value().into_f64() / f64::from(f32::MAX);
    let row_scale = [1.0, 1e36 * range, 4e37 * range, 3e38 * range].map(T::from_f64);
    let col_scale = [1e-3, 1.0, 2.0, -1e-3, -1.0, -2.0].map(T::from_f64);
    let mut a = uniform_matrix::<T>(rng, (m, k), 0.25, 1.0);
    let mut b = uniform_matrix::<T>(rng, (k, n), 0.25, 1.0);
    for (i, mut row) in a.rows_mut().into_iter().enumerate() {
        let s = row_scale[i % row_scale.len()];
        row.mapv_inplace(|x| x * s);
    }
    for (j, mut col) in b.columns_mut().into_iter().enumerate() {
        let s = col_scale[j % col_scale.len()];
        col.mapv_inplace(|x| x * s);
    }
    a[[3, 7]] = T::max_value(); // row 3 is scaled by 3e38
    b.column_mut(33).fill(T::zero());
    b[[7, 33]] = T::one();
    let classes = classes(&a, &b);
    assert_eq!(classes[[3, 33]], Class::Finite);
    for class in [Class::PosInf, Class::NegInf, Class::Finite] {
        assert!(classes.iter().any(|&c| c == class), "no {class:?}");
    }
    Fixture::new("overflow", a, b, classes)
}

/// Subnormal inputs: A's elements are positive subnormals (below `MIN_POSITIVE`), B's in
/// [0.25, 1). Flushing subnormal inputs to zero (DAZ) would give zeros.
fn subnormal_input_fixture<T: TestElem>(rng: &mut StdRng) -> Fixture<T> {
    let (width, offset) = (T::from_f64(0.9), T::from_f64(0.05));
    let a = uniform_matrix::<T>(rng, (33, 16), 0.0, 1.0)
        .mapv(|x| (x * width + offset) * T::min_positive_value());
    let b = uniform_matrix(rng, (16, 35), 0.25, 1.0);
    assert!(a.iter().all(|x| x.is_subnormal()));
    subnormal_fixture("subnormal inputs", a, b)
}

/// Inputs of about `√MIN_POSITIVE / 8` (2⁻⁶⁶ in `f32`, 2⁻⁵¹⁴ in `f64`), between half of it
/// and it: normal, but their products (below `MIN_POSITIVE / 64`) and sums of 20 stay below
/// `MIN_POSITIVE`: every product and every element of C is subnormal. Flushing results to
/// zero (FTZ) would give zeros.
fn subnormal_result_fixture<T: TestElem>(rng: &mut StdRng) -> Fixture<T> {
    let scale = tiny::<T>();
    let a = uniform_matrix(rng, (33, 20), 0.5 * scale, scale);
    let b = uniform_matrix(rng, (20, 35), 0.5 * scale, scale);
    subnormal_fixture("subnormal products and results", a, b)
}

/// The same tiny inputs over k = 1000: each product is subnormal, their sum (near
/// `4 · MIN_POSITIVE`) is normal. Flushing the products would lose the whole sum, or, with
/// fused multiply-adds, the terms taken while the partial sum was still subnormal.
fn subnormal_partial_fixture<T: TestElem>(rng: &mut StdRng) -> Fixture<T> {
    let scale = tiny::<T>();
    let a = uniform_matrix(rng, (33, 1000), 0.5 * scale, scale);
    let b = uniform_matrix(rng, (1000, 35), 0.5 * scale, scale);
    subnormal_fixture("subnormal products, normal results", a, b)
}

/// `√MIN_POSITIVE / 8`: 2⁻⁶⁶ in `f32`, 2⁻⁵¹⁴ in `f64`.
fn tiny<T: TestElem>() -> f64 {
    T::min_positive_value().into_f64().sqrt() / 8.0
}

fn subnormal_fixture<T: TestElem>(name: &'static str, a: Array2<T>, b: Array2<T>) -> Fixture<T> {
    let classes_of = Array2::from_elem((a.nrows(), b.ncols()), Class::Finite);
    assert_eq!(classes_of, classes(&a, &b));
    Fixture::with(name, a, b, classes_of, true)
}

/// What a product of a fixture's operands, in one pair of layouts, must match.
struct Expected<'f, T> {
    fx: &'f Fixture<T>,
    /// ndarray's `dot` of the same views.
    dot: Array2<T>,
    k: usize,
}

impl<'f, T: TestElem> Expected<'f, T> {
    fn new(fx: &'f Fixture<T>, a: &ArrayView2<T>, b: &ArrayView2<T>) -> Self {
        Expected {
            fx,
            dot: a.dot(b),
            k: a.ncols(),
        }
    }

    /// Checks `c` element by element: the fixture's designed class at every position, the
    /// same class as ndarray's `dot` (NaN, +Inf, −Inf, finite), and finite values within twice
    /// the rounding bound of ndarray's (both results are rounded). For the subnormal fixtures,
    /// also every element non-zero and within the rounding bound of the exact product: a flush
    /// to zero misses it by about the result itself.
    #[track_caller]
    fn check(&self, c: &Array2<T>, what: &str) {
        let what = format!("{} {} {what}", T::DTYPE, self.fx.name);
        assert_eq!(c.dim(), self.dot.dim(), "{what}: wrong shape");
        let (fx, scale) = (self.fx, self.fx.scale);
        for ((i, j), &x) in c.indexed_iter() {
            let (y, s) = (self.dot[[i, j]], fx.abs[[i, j]]);
            let at = format!("{what}: C[{i}, {j}] = {x:e}, ndarray's dot gives {y:e}");
            assert_eq!(class(x), fx.classes[[i, j]], "{at}: not as designed");
            assert_eq!(class(x), class(y), "{at}");
            let x_up = x.into_f64() * scale;
            if class(y) == Class::Finite {
                let (err, bound) = (
                    (x_up - y.into_f64() * scale).abs(),
                    2.0 * rounding_bound::<T>(self.k, s, scale),
                );
                assert!(err <= bound, "{at}: {err:e} above {bound:e} (scaled)");
            }
            if let Some(exact) = &fx.exact {
                let r = exact[[i, j]];
                let (err, bound) = ((x_up - r).abs(), rounding_bound::<T>(self.k, s, scale));
                assert!(x > T::zero(), "{at}, exact {r:e} (scaled): flushed to zero");
                assert!(
                    err <= bound,
                    "{at}, exact {r:e}: {err:e} above {bound:e} (scaled)"
                );
            }
        }
    }
}

fn ieee_fixtures<T: TestElem>() -> Vec<Fixture<T>> {
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

both_types!(ieee_fixtures_hold_for_ndarrays_dot);
/// The fixtures' premises, checked on ndarray's own `dot`: the designed classes, gradual
/// underflow (results within the bound of the exact product), results all subnormal where
/// designed so, and normal results from subnormal products.
fn ieee_fixtures_hold_for_ndarrays_dot<T: TestElem>() {
    let fixtures = ieee_fixtures::<T>();
    for fx in &fixtures {
        let (a, b) = (fx.a.view(), fx.b.view());
        Expected::new(fx, &a, &b).check(&a.dot(&b), "ndarray");
    }
    let [.., sub, partial] = &fixtures[..] else {
        unreachable!()
    };
    assert!(sub.a.dot(&sub.b).iter().all(|x| x.is_subnormal()));
    let max_product = partial
        .a
        .fold(T::zero(), |m, &x| m.max(x))
        .into_f64()
        .powi(2);
    assert!(max_product < T::min_positive_value().into_f64());
    assert!(partial.a.dot(&partial.b).iter().all(|x| x.is_normal()));
}

both_types!(ieee_values_on_the_cpu_path_in_every_layout);
/// On the CPU path, in every layout pair, through `Backend::Cpu`, `Backend::Auto`, `gpu_dot`
/// and `try_gpu_dot`: the classes of ndarray's `dot` at every position, finite values within
/// the bound, subnormals kept.
fn ieee_values_on_the_cpu_path_in_every_layout<T: TestElem>() {
    for fx in ieee_fixtures::<T>() {
        in_every_layout(&fx.a, &fx.b, |lays, a, b| {
            let expected = Expected::new(&fx, &a, &b);
            let p = a.try_gpu_dot_with(&b, &cpu()).unwrap();
            assert!(matches!(p.route, Route::Cpu(CpuReason::Requested)));
            expected.check(&p.c, &format!("{lays} Backend::Cpu"));
            let p = a.try_gpu_dot_with(&b, &auto()).unwrap();
            expected.check(&p.c, &format!("{lays} Backend::Auto ({})", p.route));
            expected.check(&a.gpu_dot(&b), &format!("{lays} gpu_dot"));
            expected.check(&a.try_gpu_dot(&b).unwrap(), &format!("{lays} try_gpu_dot"));
        });
    }
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    ieee_values_on_every_kernel_in_every_layout
);
/// Every kernel, in every layout pair, behaves as ndarray's `dot` on NaN, ±Inf, Inf·0,
/// overflow and subnormals. The documented expectation is the CPU's: the kernels are compiled
/// without flushing subnormals to zero, so a flushed result here is a finding, not noise.
fn ieee_values_on_every_kernel_in_every_layout<T: TestElem>() {
    expect_device();
    for fx in ieee_fixtures::<T>() {
        in_every_layout(&fx.a, &fx.b, |lays, a, b| {
            let expected = Expected::new(&fx, &a, &b);
            for kernel in kernels() {
                let what = format!("{lays} {kernel}");
                let p = a
                    .try_gpu_dot_with(&b, &on(kernel))
                    .unwrap_or_else(|e| panic!("{} {what}: {e}", fx.name));
                assert!(p.route.is_gpu(), "{} {what}: {:?}", fx.name, p.route);
                expected.check(&p.c, &what);
            }
        });
    }
}

// ---------------------------------------------------------------------------------------------
// More than 2³¹ elements.

both_types!(
    #[ignore = "needs a CUDA GPU"]
    left_operand_of_more_than_2_pow_31_elements
);
/// A left operand of 65 600 × 32 769 = 2 149 646 400 elements (more than 2³¹; 8.6 GB in `f32`,
/// 17.2 GB in `f64`), as one random row broadcast with stride 0, times a random 32 769 × 8
/// matrix, on every kernel, with the row panels the crate chooses and as one panel (so that
/// the kernel itself indexes past 2³¹): each row of C is the row times B, checked against the
/// reference of that one product within `common::check`'s bound, rows past 65 535 (whose
/// offsets `row · 32 769` pass 2³¹) included. A product may fail only with a typed error
/// (`OutOfMemory`, `TooLarge`), never return a wrong result. The view costs no host memory;
/// each product moves the whole operand to the device through the bounded staging rings, and
/// as one panel holds all of it in device memory at once. Slow under compute-sanitizer (skip
/// it there with `--skip more_than_2_pow_31`).
fn left_operand_of_more_than_2_pow_31_elements<T: TestElem>() {
    expect_device();
    const M: usize = 65_600;
    const K: usize = 32_769;
    const N: usize = 8;
    const _: () = assert!(M * K > 1 << 31);
    let row = random::<T>(1, K);
    let a = row.broadcast((M, K)).unwrap();
    let b = random::<T>(K, N);
    let r = reference(&row, &b); // 1 × N
    let abs = common::abs_product(&row, &b);
    let bound = 4.0 * T::EPS * (K as f64).sqrt() * abs.iter().map(|s| s * s).sum::<f64>().sqrt();
    for kernel in kernels() {
        for panel_rows in [None, Some(M)] {
            let what = format!("{} {kernel}, panel rows {panel_rows:?}", T::DTYPE);
            let t = std::time::Instant::now();
            match a.try_gpu_dot_with(&b, &on(kernel).panel_rows(panel_rows)) {
                Ok(p) => {
                    assert!(p.route.is_gpu(), "{what}: {:?}", p.route);
                    assert_eq!(p.c.dim(), (M, N));
                    for (i, ci) in p.c.rows().into_iter().enumerate() {
                        let err = ci
                            .iter()
                            .zip(&r)
                            .map(|(&x, &y)| (x.into_f64() - y).powi(2))
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

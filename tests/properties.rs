//! Property tests: random shapes `m × k · k × n` with m, k, n in 0..300 (biased toward 0, 1 and
//! the tile sizes ± 1), each operand in a random layout (C order, F order, a window of a larger
//! matrix, stepped or negative strides, stride-0 broadcasts), checked against a reference of
//! higher precision on fresh random values. A failing case shrinks to a minimal shape and
//! layout pair and is printed with the seed of its values, so that it can be replayed. Every
//! property runs for both element types (`NAME::f32`, `NAME::f64`).
//!
//! The CPU properties run everywhere (256 cases each; `PROPTEST_CASES` overrides). The GPU
//! property needs a CUDA GPU (`cargo test --test properties -- --include-ignored`): 1000 cases
//! over every kernel; `GPU_DOT_TEST_MAX_DIM` caps m, k and n (for runs under
//! compute-sanitizer).

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};

use common::{both_types, check, uniform, TestElem};
use gpu_dot::{
    device_status, flops, layout_of, Backend, CpuReason, DeviceStatus, DotOptions, Dtype, Element,
    GpuDot, GpuDotError, Kernel, Route,
};
use ndarray::{s, Array2, ArrayView2};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use rand::{rngs::SmallRng, SeedableRng};

/// `a · b` in f64. For `f32` operands through ndarray's f64 `dot`: its rounding (k·2⁻⁵³ at
/// most, relative to |a|·|b|) is far below the f32 bound `check` allows, and it costs a
/// fraction of the compensated sum in `common::reference` in unoptimised test builds. For
/// `f64` operands, `common::reference` (about twice f64 precision).
fn reference<T: TestElem>(a: &ArrayView2<T>, b: &ArrayView2<T>) -> Array2<f64> {
    match T::DTYPE {
        Dtype::F32 => a.mapv(Element::into_f64).dot(&b.mapv(Element::into_f64)),
        _ => common::reference(a, b),
    }
}

/// The largest m, k or n drawn.
const MAX_DIM: usize = 299;

/// Dimensions drawn more often than the rest: empty and single rows or columns, and one either
/// side of the tile sizes (16, 32, 64, 128, 256) where boundary checks and split loops change.
const EDGES: [usize; 21] = [
    0, 1, 2, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 257,
];

/// A dimension in `0..=max`: a quarter of the draws are 0 or 1 or an edge, the rest uniform.
fn dim(max: usize) -> impl Strategy<Value = usize> {
    let edges: Vec<usize> = EDGES.iter().copied().filter(|&d| d <= max).collect();
    prop_oneof![
        1 => Just(0),
        2 => Just(1.min(max)),
        8 => proptest::sample::select(edges),
        9 => 0..=max,
    ]
}

/// How the rows of a broadcast operand repeat.
#[derive(Debug, Clone, Copy)]
enum Repeat {
    /// One stored row for every row (row stride 0).
    Row,
    /// One stored column for every column (column stride 0).
    Column,
    /// One stored element everywhere (both strides 0).
    Element,
}

/// How an operand's elements lie in memory.
#[derive(Debug, Clone, Copy)]
enum Recipe {
    /// Contiguous, row-major.
    C,
    /// Contiguous, column-major: `.t()` of a stored transpose.
    F,
    /// A window of a larger matrix (stored in C order, or in F order when `f`), `top` rows and
    /// `left` columns in, with `pad` more rows and columns beyond it: gaps between the rows.
    Window {
        top: usize,
        left: usize,
        pad: usize,
        f: bool,
    },
    /// `s![..;rows, ..;cols]` of a matrix `|rows|` times taller and `|cols|` times wider:
    /// stepped, and negative strides for negative steps.
    Steps { rows: isize, cols: isize },
    /// A stride-0 view from `.broadcast(...)`.
    Broadcast(Repeat),
}

fn recipe() -> impl Strategy<Value = Recipe> {
    let step = || proptest::sample::select(vec![1isize, 2, -1, 3, -2, -3]);
    prop_oneof![
        Just(Recipe::C),
        Just(Recipe::F),
        (0..3usize, 0..3usize, 1..4usize, any::<bool>())
            .prop_map(|(top, left, pad, f)| Recipe::Window { top, left, pad, f }),
        (step(), step()).prop_map(|(rows, cols)| Recipe::Steps { rows, cols }),
        proptest::sample::select(vec![Repeat::Row, Repeat::Column, Repeat::Element])
            .prop_map(Recipe::Broadcast),
    ]
}

/// The storage behind one operand and the recipe for its view.
struct Operand<T> {
    store: Array2<T>,
    recipe: Recipe,
    dim: (usize, usize),
}

impl<T: TestElem> Operand<T> {
    /// A `rows × cols` operand laid out as `recipe`, its storage uniform in [-1, 1) with every
    /// bit of `T`'s precision random.
    fn new(recipe: Recipe, (rows, cols): (usize, usize), rng: &mut SmallRng) -> Self {
        let store_dim = match recipe {
            Recipe::C => (rows, cols),
            Recipe::F => (cols, rows),
            Recipe::Window {
                top,
                left,
                pad,
                f: false,
            } => (top + rows + pad, left + cols + pad),
            Recipe::Window {
                top,
                left,
                pad,
                f: true,
            } => (left + cols + pad, top + rows + pad),
            Recipe::Steps { rows: sr, cols: sc } => {
                (rows * sr.unsigned_abs(), cols * sc.unsigned_abs())
            }
            Recipe::Broadcast(Repeat::Row) => (1, cols),
            Recipe::Broadcast(Repeat::Column) => (rows, 1),
            Recipe::Broadcast(Repeat::Element) => (1, 1),
        };
        let store = Array2::from_shape_simple_fn(store_dim, || uniform::<T>(rng, -1.0, 1.0));
        Operand {
            store,
            recipe,
            dim: (rows, cols),
        }
    }

    fn view(&self) -> ArrayView2<'_, T> {
        let (rows, cols) = self.dim;
        let store = &self.store;
        let v = match self.recipe {
            Recipe::C => store.view(),
            Recipe::F => store.t(),
            Recipe::Window {
                top,
                left,
                f: false,
                ..
            } => store.slice(s![top..top + rows, left..left + cols]),
            Recipe::Window {
                top, left, f: true, ..
            } => store.t().slice_move(s![top..top + rows, left..left + cols]),
            Recipe::Steps { rows: sr, cols: sc } => store.slice(s![..;sr, ..;sc]),
            Recipe::Broadcast(_) => store
                .broadcast((rows, cols))
                .expect("a length-1 axis broadcasts"),
        };
        assert_eq!(v.dim(), self.dim, "{:?} built the wrong shape", self.recipe);
        v
    }
}

/// One product to try: `m × k · k2 × n` (`k2 == k` unless the case is a mismatch), each
/// operand's layout, and the seed of its values.
#[derive(Debug, Clone)]
struct Case {
    m: usize,
    k: usize,
    k2: usize,
    n: usize,
    a: Recipe,
    b: Recipe,
    seed: u64,
}

impl Case {
    fn operands<T: TestElem>(&self) -> (Operand<T>, Operand<T>) {
        let mut rng = SmallRng::seed_from_u64(self.seed);
        let a = Operand::new(self.a, (self.m, self.k), &mut rng);
        let b = Operand::new(self.b, (self.k2, self.n), &mut rng);
        (a, b)
    }

    fn is_empty(&self) -> bool {
        self.m == 0 || self.k == 0 || self.n == 0
    }
}

/// A compatible product with m, k, n in `0..=max`.
fn case(max: usize) -> impl Strategy<Value = Case> {
    (
        dim(max),
        dim(max),
        dim(max),
        recipe(),
        recipe(),
        any::<u64>(),
    )
        .prop_map(|(m, k, n, a, b, seed)| Case {
            m,
            k,
            k2: k,
            n,
            a,
            b,
            seed,
        })
}

/// A product whose inner dimensions differ.
fn mismatch() -> impl Strategy<Value = Case> {
    (
        dim(MAX_DIM),
        dim(MAX_DIM),
        dim(MAX_DIM),
        dim(MAX_DIM),
        recipe(),
        recipe(),
        any::<u64>(),
    )
        .prop_filter("k and k2 differ", |(_, k, k2, ..)| k != k2)
        .prop_map(|(m, k, k2, n, a, b, seed)| Case {
            m,
            k,
            k2,
            n,
            a,
            b,
            seed,
        })
}

/// `cases` cases (`PROPTEST_CASES` overrides), no regression files written into the tree: a
/// failure prints its minimal case, seed included.
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Runs `f`, which must panic, and returns its message.
fn panic_message(f: impl FnOnce()) -> Result<String, TestCaseError> {
    let err = catch_unwind(AssertUnwindSafe(f))
        .err()
        .ok_or_else(|| TestCaseError::fail("expected a panic"))?;
    err.downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
        .ok_or_else(|| TestCaseError::fail("a panic without a message"))
}

/// Checks the route `Backend::Auto` took for a non-empty product of `T` below or above
/// `threshold`.
fn check_auto_route<T: TestElem>(
    route: &Route,
    case: &Case,
    threshold: u64,
) -> Result<(), TestCaseError> {
    let f = flops(case.m, case.k, case.n);
    match (route, device_status()) {
        (
            Route::Cpu(CpuReason::BelowThreshold {
                flops,
                threshold: t,
            }),
            _,
        ) => {
            prop_assert!(
                f < threshold,
                "{f} flops ran below the threshold {threshold}"
            );
            prop_assert_eq!((*flops, *t), (f, threshold));
        }
        (Route::Gpu { kernel, dtype, .. }, DeviceStatus::Ready(_)) => {
            prop_assert!(f >= threshold, "{f} flops went to the GPU");
            prop_assert_eq!(*kernel, Kernel::Auto);
            prop_assert_eq!(*dtype, T::DTYPE);
        }
        (
            Route::Cpu(CpuReason::GpuUnavailable(GpuDotError::NoDevice { reason })),
            DeviceStatus::Unavailable(why),
        ) => {
            prop_assert!(f >= threshold, "{f} flops tried the GPU");
            prop_assert_eq!(reason, &why);
        }
        (route, status) => {
            return Err(TestCaseError::fail(format!(
                "route {route:?} with device {status:?}"
            )))
        }
    }
    Ok(())
}

both_types!(cpu_and_auto_match_the_reference);
/// `Backend::Cpu` is ndarray's `dot`, bit for bit, and within the rounding bound of the
/// reference; `Backend::Auto` (at the element type's default threshold and at 0), `gpu_dot` and
/// `try_gpu_dot` match the reference too; every result has the shape `m × n`, and a zero
/// dimension is `Route::Empty` with zeros.
fn cpu_and_auto_match_the_reference<T: TestElem>() {
    proptest!(config(256), |(case in case(MAX_DIM))| {
        let (a, b) = case.operands::<T>();
        let (a, b) = (a.view(), b.view());
        let r = reference(&a, &b);
        let cpu = DotOptions::builtin().backend(Backend::Cpu);
        let p = a.try_gpu_dot_with(&b, &cpu).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(p.c.dim(), (case.m, case.n));
        if case.is_empty() {
            prop_assert!(matches!(p.route, Route::Empty), "{:?}", p.route);
            prop_assert!(p.c.iter().all(|&x| x == T::zero()));
        } else {
            prop_assert!(matches!(p.route, Route::Cpu(CpuReason::Requested)), "{:?}", p.route);
            prop_assert_eq!(&p.c, &a.dot(&b));
        }
        check(&p.c, &a, &b, &r, "Backend::Cpu");
        // A result equal to the CPU's is within the bound just checked; any other is checked.
        let matches_reference = |c: &Array2<T>, what: &str| {
            if *c != p.c {
                check(c, &a, &b, &r, what);
            }
        };
        let default = DotOptions::builtin().threshold(T::DTYPE);
        for threshold in [default, 0] {
            let opts = DotOptions::builtin().min_gpu_flops(threshold);
            let q = a.try_gpu_dot_with(&b, &opts).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(q.c.dim(), (case.m, case.n));
            if case.is_empty() {
                prop_assert!(matches!(q.route, Route::Empty), "{:?}", q.route);
            } else {
                check_auto_route::<T>(&q.route, &case, threshold)?;
            }
            matches_reference(&q.c, &format!("Backend::Auto, threshold {threshold}"));
        }
        let c = a.gpu_dot(&b);
        prop_assert_eq!(c.dim(), (case.m, case.n));
        matches_reference(&c, "gpu_dot");
        let c = a.try_gpu_dot(&b).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(c.dim(), (case.m, case.n));
        matches_reference(&c, "try_gpu_dot");
    });
}

both_types!(mismatched_shapes_fail_like_ndarray);
/// Incompatible shapes: every fallible entry point returns exactly `ShapeMismatch` with the
/// operands' dimensions, whatever the backend, and `gpu_dot` panics with ndarray's message.
fn mismatched_shapes_fail_like_ndarray<T: TestElem>() {
    proptest!(config(256), |(case in mismatch())| {
        let (a, b) = case.operands::<T>();
        let (a, b) = (a.view(), b.view());
        let (m, k, k2, n) = (case.m, case.k, case.k2, case.n);
        let mut results = vec![("try_gpu_dot", a.try_gpu_dot(&b))];
        for backend in [Backend::Cpu, Backend::Auto, Backend::Gpu] {
            let opts = DotOptions::builtin().backend(backend).min_gpu_flops(0);
            results.push(("gpu_dot_with", a.try_gpu_dot_with(&b, &opts).map(|p| p.c)));
        }
        for (what, result) in results {
            match result {
                Err(GpuDotError::ShapeMismatch { m: m2, k: k3, k2: k4, n: n2 }) => {
                    prop_assert_eq!((m2, k3, k4, n2), (m, k, k2, n), "{}", what);
                }
                other => {
                    return Err(TestCaseError::fail(format!("{what}: {:?}", other.map(|c| c.dim()))))
                }
            }
        }
        let ours = panic_message(|| {
            a.gpu_dot(&b);
        })?;
        let ndarrays = panic_message(|| {
            a.dot(&b);
        })?;
        prop_assert_eq!(ours, ndarrays);
    });
}

fn max_dim() -> usize {
    std::env::var("GPU_DOT_TEST_MAX_DIM").map_or(usize::MAX, |v| v.parse().expect("an integer"))
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    every_kernel_matches_the_reference_on_the_gpu
);
/// On the GPU, every kernel (with the autotuner on or off for `Auto`) runs every random shape
/// and layout pair, reports the element type and the layouts `layout_of` gives, returns the
/// result in ndarray's memory order, and matches the reference within the rounding bound; the
/// output is poisoned with NaN first, so an unwritten element fails.
fn every_kernel_matches_the_reference_on_the_gpu<T: TestElem>() {
    if let DeviceStatus::Unavailable(reason) = device_status() {
        panic!("this test needs a CUDA GPU: {reason}");
    }
    let cap = max_dim().min(MAX_DIM);
    println!("{}: m, k, n in 0..={cap}", T::DTYPE);
    proptest!(config(1000), |(case in case(cap), autotune in any::<bool>())| {
        let (a, b) = case.operands::<T>();
        let (a, b) = (a.view(), b.view());
        let r = reference(&a, &b);
        let ndarrays = a.dot(&b);
        for kernel in Kernel::ALL.into_iter().chain([Kernel::Auto]) {
            let opts = DotOptions::builtin()
                .backend(Backend::Gpu)
                .kernel(kernel)
                .autotune(autotune)
                .poison_output(true);
            let p = a
                .try_gpu_dot_with(&b, &opts)
                .map_err(|e| TestCaseError::fail(format!("{kernel}: {e}")))?;
            prop_assert_eq!(p.c.dim(), (case.m, case.n));
            prop_assert_eq!(p.c.strides(), ndarrays.strides(), "{}: memory order", kernel);
            match p.route {
                Route::Empty => prop_assert!(case.is_empty(), "{}: Route::Empty", kernel),
                Route::Gpu { kernel: ran, dtype, a_layout, b_layout, .. } => {
                    prop_assert!(!case.is_empty(), "{}: an empty product ran", kernel);
                    prop_assert_eq!(ran, kernel);
                    prop_assert_eq!(dtype, T::DTYPE);
                    prop_assert_eq!((a_layout, b_layout), (layout_of(&a), layout_of(&b)));
                }
                other => return Err(TestCaseError::fail(format!("{kernel}: ran {other:?}"))),
            }
            check(&p.c, &a, &b, &r, &format!("{kernel} (autotune {autotune})"));
        }
    });
}

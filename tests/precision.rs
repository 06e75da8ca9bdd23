//! The precision axis of `f32` products ([`Precision`]): `GPU_DOT_PRECISION` parsing
//! (anywhere), and on the GPU the TF32 tensor-core kernels (3xTF32 and TF32) against an f64
//! reference over odd and rectangular shapes, every operand layout, split-K, batches and the
//! route report; Inf and NaN as on the FP32 path; integer-valued inputs exactly.

mod common;

use common::{abs_product, reference, rel_err};
use gpu_dot::{Backend, DotOptions, GpuDot, GpuDotError, Kernel, Precision, Route, ENV_PRECISION};
use ndarray::{s, Array2, Array3, ArrayBase, Data, Ix2};
use rand::{Rng, SeedableRng};

#[test]
fn the_precision_parses_from_the_environment() {
    let parse = |v: &str| DotOptions::from_lookup(|n| (n == ENV_PRECISION).then(|| v.to_string()));
    assert_eq!(DotOptions::builtin().precision, Precision::Auto);
    assert_eq!(parse("tf32x3").unwrap().precision, Precision::Tf32x3);
    assert_eq!(parse(" TF32x3").unwrap().precision, Precision::Tf32x3);
    assert_eq!(parse("TF32").unwrap().precision, Precision::Tf32);
    assert_eq!(parse("fp32").unwrap().precision, Precision::Native);
    // Only the documented spellings: not the empty value, nor `3xtf32` for `tf32x3`.
    for bad in ["bf16", "", "3xtf32"] {
        match parse(bad) {
            Err(GpuDotError::InvalidEnv { var, .. }) => assert_eq!(var, ENV_PRECISION),
            other => panic!("{bad:?}: expected InvalidEnv, got {other:?}"),
        }
    }
    for p in Precision::ALL {
        assert_eq!(p.name().parse::<Precision>(), Ok(p));
    }
}

/// Uniform values in [-1, 1) from a fresh seed.
fn random(rows: usize, cols: usize) -> Array2<f32> {
    common::random::<f32>(rows, cols)
}

fn options(precision: Precision, kernel: Kernel) -> DotOptions {
    DotOptions::builtin()
        .backend(Backend::Gpu)
        .kernel(kernel)
        .precision(precision)
        .poison_output(true)
}

/// The error bound of a precision: 3xTF32 must meet FP32's bound (the one every FP32 kernel
/// meets, 4·2⁻²⁴·√k·‖|A|·|B|‖); TF32 (10-bit factors) a bound 2¹³ times looser.
fn unit(precision: Precision) -> f64 {
    match precision {
        Precision::Tf32 => 2f64.powi(-11),
        _ => 2f64.powi(-24),
    }
}

#[track_caller]
fn check<S1: Data<Elem = f32>, S2: Data<Elem = f32>>(
    c: &Array2<f32>,
    a: &ArrayBase<S1, Ix2>,
    b: &ArrayBase<S2, Ix2>,
    precision: Precision,
    what: &str,
) -> f64 {
    let r = reference(a, b);
    let abs = abs_product(a, b);
    let (mut diff, mut scale) = (0.0f64, 0.0f64);
    for ((&x, &y), &s) in c.iter().zip(r.iter()).zip(abs.iter()) {
        diff += (x as f64 - y).powi(2);
        scale += s * s;
    }
    let bound = 4.0 * unit(precision) * (a.ncols().max(1) as f64).sqrt() * scale.sqrt();
    assert!(
        diff.sqrt() <= bound,
        "{what} ({precision}): ‖C − ref‖ = {:.3e} above {bound:.3e} (relative error {:.3e})",
        diff.sqrt(),
        rel_err(c, &r)
    );
    rel_err(c, &r)
}

fn precision_of(route: &Route) -> Precision {
    match route {
        Route::Gpu { precision, .. } => *precision,
        other => panic!("expected a GPU route, got {other}"),
    }
}

/// Every tensor-core kernel (both tiles, through `Reg64`/`Reg128`, and the autotuned plans
/// with split-K) over odd, one-row-of-tiles and rectangular shapes, A and B each in C order,
/// F order and strided (the 4-byte entries), output poisoned: within the precision's bound,
/// and the route names the precision.
#[test]
#[ignore = "needs a CUDA GPU"]
fn tensor_core_products_match_the_reference_over_shapes_and_layouts() {
    let cap = std::env::var("GPU_DOT_TEST_MAX_DIM").map_or(usize::MAX, |v| v.parse().unwrap());
    let shapes = [
        (1, 1, 1),
        (2, 3, 2),
        (17, 9, 33),
        (64, 32, 64),
        (129, 257, 63),
        (300, 1000, 200),
        (128, 4096, 96),
        (40, 1000, 700),
        (1000, 300, 700),
        (513, 2049, 1025),
    ];
    let mut worst = [0.0f64; 2];
    for &(m, k, n) in shapes.iter().filter(|s| s.0.max(s.1).max(s.2) <= cap) {
        let a = random(m, k);
        let b = random(k, n);
        let a_f = a.t().as_standard_layout().reversed_axes().to_owned();
        let b_f = b.t().as_standard_layout().reversed_axes().to_owned();
        let wide_a = random(m, 2 * k + 1);
        let a_s = wide_a.slice(s![.., 1..;2]);
        let wide_b = random(k + 1, n + 1);
        let b_s = wide_b.slice(s![1.., ..n]);
        for (pi, precision) in [Precision::Tf32x3, Precision::Tf32].into_iter().enumerate() {
            for kernel in [Kernel::Reg64, Kernel::Reg128, Kernel::Auto] {
                let opts = options(precision, kernel);
                let what = format!("{m}×{k}×{n} {kernel}");
                let p = a.try_gpu_dot_with(&b, &opts).expect(&what);
                if m > 1 && n > 1 {
                    assert_eq!(precision_of(&p.route), precision, "{what}: {}", p.route);
                    assert!(
                        p.route.to_string().contains(precision.name()),
                        "{}",
                        p.route
                    );
                }
                let e = check(&p.c, &a, &b, precision, &what);
                worst[pi] = worst[pi].max(e);
                let p = a_f.try_gpu_dot_with(&b_f, &opts).expect(&what);
                check(&p.c, &a, &b, precision, &format!("{what}, F · F"));
                let p = a.try_gpu_dot_with(&b_f, &opts).expect(&what);
                check(&p.c, &a, &b, precision, &format!("{what}, C · F"));
                let p = a_s.try_gpu_dot_with(&b_s, &opts).expect(&what);
                check(&p.c, &a_s, &b_s, precision, &format!("{what}, strided"));
            }
        }
    }
    println!(
        "worst relative error: 3xTF32 {:.3e}, TF32 {:.3e}",
        worst[0], worst[1]
    );
}

/// A stack times a stack and a stack times a shared matrix in 3xTF32: each item within the
/// bound, and the route names the precision.
#[test]
#[ignore = "needs a CUDA GPU"]
fn batches_run_in_the_precision_asked_for() {
    let (items, m, k, n) = (5, 70, 130, 90);
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::fresh_seed());
    let a = Array3::from_shape_simple_fn((items, m, k), || rng.random_range(-1.0f32..1.0));
    let b = Array3::from_shape_simple_fn((items, k, n), || rng.random_range(-1.0f32..1.0));
    let opts = options(Precision::Tf32x3, Kernel::Auto);
    let p = a.try_gpu_dot_with(&b, &opts).expect("a batch");
    assert_eq!(precision_of(&p.route), Precision::Tf32x3, "{}", p.route);
    for z in 0..items {
        let c = p.c.slice(s![z, .., ..]).to_owned();
        check(
            &c,
            &a.slice(s![z, .., ..]),
            &b.slice(s![z, .., ..]),
            Precision::Tf32x3,
            &format!("item {z}"),
        );
    }
}

/// Integer-valued inputs (|x| ≤ 100, sums below 2²⁴): every product and partial sum is exact
/// in FP32, so 3xTF32 and TF32 give exactly ndarray's answer.
#[test]
#[ignore = "needs a CUDA GPU"]
fn integer_valued_inputs_give_exactly_ndarrays_answer() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::fresh_seed());
    let (m, k, n) = (257, 1000, 193);
    let mut int =
        |r, c| Array2::from_shape_simple_fn((r, c), || rng.random_range(-100i32..=100) as f32);
    let (a, b) = (int(m, k), int(k, n));
    let want = a.dot(&b);
    for precision in [Precision::Tf32x3, Precision::Tf32] {
        for kernel in [Kernel::Reg64, Kernel::Reg128] {
            let p = a.try_gpu_dot_with(&b, &options(precision, kernel)).unwrap();
            assert_eq!(p.c, want, "{precision} {kernel}");
        }
    }
}

/// Inf and NaN in A and B, with finite values of both signs around them: every element of
/// the 3xTF32 and TF32 products is NaN, +Inf or −Inf exactly where the FP32 product (ndarray)
/// has one, and finite elsewhere.
#[test]
#[ignore = "needs a CUDA GPU"]
fn inf_and_nan_behave_as_on_the_fp32_path() {
    let (m, k, n) = (150, 70, 140);
    let mut a = random(m, k);
    let mut b = random(k, n);
    a[[3, 5]] = f32::INFINITY;
    a[[140, 0]] = f32::NEG_INFINITY;
    a[[77, 69]] = f32::NAN;
    b[[5, 130]] = f32::INFINITY;
    b[[10, 7]] = f32::NEG_INFINITY;
    b[[69, 60]] = f32::NAN;
    // A row whose infinities meet an infinity of the other sign: NaN on every path.
    a[[20, 5]] = f32::INFINITY;
    a[[20, 10]] = f32::INFINITY;
    let want = a.dot(&b);
    let class = |x: f32| {
        if x.is_nan() {
            0
        } else if x == f32::INFINITY {
            1
        } else if x == f32::NEG_INFINITY {
            2
        } else {
            3
        }
    };
    for precision in [Precision::Tf32x3, Precision::Tf32] {
        for kernel in [Kernel::Reg64, Kernel::Reg128] {
            let p = a.try_gpu_dot_with(&b, &options(precision, kernel)).unwrap();
            for ((i, &x), &y) in p.c.indexed_iter().zip(want.iter()) {
                assert_eq!(
                    class(x),
                    class(y),
                    "{precision} {kernel} at {i:?}: {x} where FP32 gives {y}"
                );
            }
        }
    }
}

/// Inputs spanning 2^±20 in magnitude, and inputs whose products cancel (each row of A paired
/// with a column of B summing to nearly zero): 3xTF32 stays within FP32's bound.
#[test]
#[ignore = "needs a CUDA GPU"]
fn wide_ranges_and_cancellation_stay_within_the_fp32_bound() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::fresh_seed());
    let (m, k, n) = (300, 512, 260);
    let mut wide = |r, c| {
        Array2::from_shape_simple_fn((r, c), || {
            let e = rng.random_range(-20i32..=20);
            rng.random_range(-1.0f32..1.0) * 2f32.powi(e)
        })
    };
    let (a, b) = (wide(m, k), wide(k, n));
    let opts = options(Precision::Tf32x3, Kernel::Auto);
    let p = a.try_gpu_dot_with(&b, &opts).unwrap();
    check(&p.c, &a, &b, Precision::Tf32x3, "entries over 2^±20");
    // Cancellation: B's second half is the negated first half plus a small perturbation.
    let a = random(m, k);
    let half = random(k / 2, n);
    let mut b = Array2::<f32>::zeros((k, n));
    b.slice_mut(s![..k / 2, ..]).assign(&half);
    let tiny = random(k / 2, n).mapv(|x| x * 1e-3);
    b.slice_mut(s![k / 2.., ..])
        .assign(&(&half.mapv(|x| -x) + &tiny));
    let mut a2 = a.clone();
    let left = a.slice(s![.., ..k / 2]).to_owned();
    a2.slice_mut(s![.., k / 2..]).assign(&left);
    let p = a2.try_gpu_dot_with(&b, &opts).unwrap();
    check(&p.c, &a2, &b, Precision::Tf32x3, "heavy cancellation");
}

/// On a device that pretends to be an sm_80 (no warpgroup instructions), the mma.sync
/// tensor-core kernels serve both tile configurations and the autotuned plans: every layout and a
/// split-K shape within the precision's bound, in the precision asked for. (Other tests of
/// this binary that run meanwhile only change kernels, never answers.)
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_mma_sync_kernels_serve_devices_before_hopper() {
    gpu_dot::__testing::pretend_compute_capability(Some(80));
    let result = std::panic::catch_unwind(|| {
        for (m, k, n) in [(129, 257, 63), (128, 4096, 96), (300, 1000, 200)] {
            let a = random(m, k);
            let b = random(k, n);
            let a_f = a.t().as_standard_layout().reversed_axes().to_owned();
            let b_f = b.t().as_standard_layout().reversed_axes().to_owned();
            for precision in [Precision::Tf32x3, Precision::Tf32] {
                for kernel in [Kernel::Reg64, Kernel::Reg128, Kernel::Auto] {
                    let opts = options(precision, kernel);
                    let what = format!("sm_80: {m}×{k}×{n} {kernel}");
                    let p = a.try_gpu_dot_with(&b, &opts).expect(&what);
                    assert_eq!(precision_of(&p.route), precision, "{what}");
                    check(&p.c, &a, &b, precision, &what);
                    let p = a_f.try_gpu_dot_with(&b_f, &opts).expect(&what);
                    check(&p.c, &a, &b, precision, &format!("{what}, F · F"));
                }
            }
        }
    });
    gpu_dot::__testing::pretend_compute_capability(None);
    result.unwrap();
}

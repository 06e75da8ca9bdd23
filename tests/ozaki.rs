//! Ozaki scheme II ([`Precision::Ozaki`]) on the INT8 tensor cores: bit for bit what the exact
//! CPU model computes (same scaling, exact integer product, one rounding) over odd and
//! rectangular shapes, every operand layout, explicit and automatic moduli, batches and
//! device matrices; accuracy against a compensated reference beside the native product; Inf
//! and NaN as the native product gives them; the fallback where it cannot run. Parsing runs
//! anywhere; the rest needs a device of compute capability 8.0 or more (9.0 for the
//! warpgroup GEMM; a test pretends 8.0 for the mma.sync one).

mod common;

use gpu_dot::__testing::{ozaki_auto_moduli, ozaki_reference};
use gpu_dot::{Backend, DotOptions, Dtype, GpuDot, GpuMatrix, Kernel, Precision, Route};
use ndarray::{s, Array2, Array3, ArrayBase, Data, Ix2};
use rand::{Rng, SeedableRng};

#[test]
fn ozaki_precisions_parse_and_print() {
    assert_eq!("ozaki".parse::<Precision>(), Ok(Precision::OZAKI));
    assert_eq!(
        "Ozaki-14".parse::<Precision>(),
        Ok(Precision::Ozaki { moduli: 14 })
    );
    assert!("ozaki-1".parse::<Precision>().is_err());
    assert!("ozaki-19".parse::<Precision>().is_err());
    assert_eq!(Precision::Ozaki { moduli: 9 }.to_string(), "ozaki-9");
    assert_eq!(Precision::OZAKI.to_string(), "ozaki");
}

fn options(precision: Precision) -> DotOptions {
    DotOptions::builtin()
        .backend(Backend::Gpu)
        .kernel(Kernel::Auto)
        .precision(precision)
        .poison_output(true)
}

fn rng() -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(common::fresh_seed())
}

fn uniform(rng: &mut impl Rng, rows: usize, cols: usize) -> Array2<f64> {
    Array2::from_shape_simple_fn((rows, cols), || rng.random_range(-1.0..1.0))
}

/// Entries uniform in [-1, 1) times 2^e, e a uniform integer in [-span, span].
fn wide(rng: &mut impl Rng, rows: usize, cols: usize, span: i32) -> Array2<f64> {
    Array2::from_shape_simple_fn((rows, cols), || {
        rng.random_range(-1.0..1.0) * 2f64.powi(rng.random_range(-span..=span))
    })
}

/// The model's answer for `a · b` on `moduli` moduli.
fn model<S1: Data<Elem = f64>, S2: Data<Elem = f64>>(
    a: &ArrayBase<S1, Ix2>,
    b: &ArrayBase<S2, Ix2>,
    moduli: usize,
) -> Array2<f64> {
    let (m, k, n) = (a.nrows(), a.ncols(), b.ncols());
    let av: Vec<f64> = a.iter().copied().collect();
    let bv: Vec<f64> = b.iter().copied().collect();
    Array2::from_shape_vec((m, n), ozaki_reference(&av, &bv, (m, k, n), moduli)).unwrap()
}

fn moduli_of(route: &Route) -> usize {
    match route {
        Route::Gpu {
            precision: Precision::Ozaki { moduli },
            ..
        } => *moduli as usize,
        other => panic!("expected an Ozaki product, got {other}"),
    }
}

/// Bitwise equality (NaN equal to NaN).
#[track_caller]
fn same_bits(got: &Array2<f64>, want: &Array2<f64>, what: &str) {
    assert_eq!(got.dim(), want.dim(), "{what}");
    let bad = got
        .iter()
        .zip(want.iter())
        .enumerate()
        .find(|(_, (g, w))| !(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan())));
    if let Some((i, (g, w))) = bad {
        panic!("{what}: element {i} is {g:e}, the model says {w:e}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn f64_products_equal_the_exact_model_bit_for_bit() {
    products_equal_the_model(&[
        (2, 3, 2),
        (37, 129, 53),
        (128, 128, 256),
        (129, 257, 255),
        (300, 1000, 517),
        (64, 4097, 70),
        (700, 96, 900),
        (150, 200, 400),
    ]);
}

/// On a device that pretends to be an sm_80 (no warpgroup instructions), the mma.sync INT8
/// GEMM runs the products, from residues the split makes in integers (`ozaki_split_int_*`, as
/// on devices with slow FP64) rather than in doubles: bit for bit the model's, as the
/// warpgroup GEMM's are. (Other tests
/// of this binary that run meanwhile may run it too; both GEMMs are exact, so their answers
/// are the same bits.)
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_mma_sync_gemm_serves_devices_before_hopper_bit_for_bit() {
    // f32 products and a batch, first on the device's own GEMM.
    let mut rng = rng();
    let a32 = uniform(&mut rng, 257, 1000).mapv(|x| x as f32);
    let b32 = uniform(&mut rng, 1000, 130).mapv(|x| x as f32);
    let opts = options(Precision::OZAKI);
    let own = a32.try_gpu_dot_with(&b32, &opts).unwrap();
    let batch_a = Array3::from_shape_simple_fn((3, 130, 200), || rng.random_range(-1.0..1.0));
    let batch_b = Array3::from_shape_simple_fn((3, 200, 140), || rng.random_range(-1.0..1.0));
    gpu_dot::__testing::pretend_compute_capability(Some(80));
    let result = std::panic::catch_unwind(|| {
        let p = a32.try_gpu_dot_with(&b32, &opts).unwrap();
        assert_eq!(moduli_of(&p.route), moduli_of(&own.route));
        assert!(
            p.c.iter()
                .zip(own.c.iter())
                .all(|(x, y)| x.to_bits() == y.to_bits()),
            "f32: the two GEMMs differ"
        );
        let p = batch_a.try_gpu_dot_with(&batch_b, &opts).unwrap();
        let moduli = moduli_of(&p.route);
        for z in 0..3 {
            let want = model(
                &batch_a.slice(s![z, .., ..]),
                &batch_b.slice(s![z, .., ..]),
                moduli,
            );
            same_bits(
                &p.c.slice(s![z, .., ..]).to_owned(),
                &want,
                &format!("item {z}"),
            );
        }
        products_equal_the_model(&[
            (2, 3, 2),
            (37, 129, 53),
            (128, 128, 128),
            (129, 257, 255),
            (300, 1000, 517),
            (64, 4097, 70),
            (700, 96, 900),
        ]);
        wide_products_equal_the_model(&[(150, 700, 300), (33, 20_000, 40)]);
    });
    gpu_dot::__testing::pretend_compute_capability(None);
    result.unwrap();
}

/// Uniform inputs of each shape, in every layout and a strided view, with the automatic
/// count of moduli, 8 and (smaller shapes) 17: the model's results bit for bit.
fn products_equal_the_model(shapes: &[(usize, usize, usize)]) {
    let mut rng = rng();
    for &(m, k, n) in shapes {
        let a = uniform(&mut rng, m, k);
        let b = uniform(&mut rng, k, n);
        let a_f = a.t().as_standard_layout().reversed_axes().to_owned();
        let b_f = b.t().as_standard_layout().reversed_axes().to_owned();
        let wide_a = uniform(&mut rng, m, 2 * k + 1);
        let a_s = wide_a.slice(s![.., 1..;2]);
        let wide_b = uniform(&mut rng, k + 1, n + 1);
        let b_s = wide_b.slice(s![1.., ..n]);
        // The automatic count (odd), an even one, and 17: the reconstruction in six limbs.
        let counts: &[u8] = if m * n <= 300 * 517 { &[8, 17] } else { &[8] };
        let precisions = std::iter::once(Precision::OZAKI)
            .chain(counts.iter().map(|&moduli| Precision::Ozaki { moduli }));
        for precision in precisions {
            let opts = options(precision);
            let what = format!("{m}×{k}×{n} {precision}");
            let p = a.try_gpu_dot_with(&b, &opts).expect(&what);
            let moduli = moduli_of(&p.route);
            match precision {
                Precision::Ozaki { moduli: 0 } => {
                    assert_eq!(moduli, ozaki_auto_moduli(Dtype::F64, k), "{what}")
                }
                Precision::Ozaki { moduli: n } => assert_eq!(moduli, n as usize, "{what}"),
                _ => unreachable!(),
            }
            assert!(p.route.to_string().contains(&format!("ozaki-{moduli}")));
            let want = model(&a, &b, moduli);
            same_bits(&p.c, &want, &what);
            same_bits(
                &a_f.try_gpu_dot_with(&b_f, &opts).expect(&what).c,
                &want,
                &format!("{what} F·F"),
            );
            same_bits(
                &a.try_gpu_dot_with(&b_f, &opts).expect(&what).c,
                &want,
                &format!("{what} C·F"),
            );
            let p = a_s.try_gpu_dot_with(&b_s, &opts).expect(&what);
            same_bits(&p.c, &model(&a_s, &b_s, moduli), &format!("{what} strided"));
        }
    }
}

/// Entries spanning 2^±30, with a row of A far below the rest and a column of B far above:
/// rows scaled by their norm (the kernels' `RowSize`, with its rescaling as larger binades
/// come) give the model's result bit for bit, on both of the scaling kernel's paths.
#[test]
#[ignore = "needs a CUDA GPU"]
fn wide_range_products_equal_the_exact_model_bit_for_bit() {
    wide_products_equal_the_model(&[(150, 700, 300), (64, 4097, 70), (33, 20_000, 40)]);
}

fn wide_products_equal_the_model(shapes: &[(usize, usize, usize)]) {
    let mut rng = rng();
    for &(m, k, n) in shapes {
        let mut a = wide(&mut rng, m, k, 30);
        let mut b = wide(&mut rng, k, n, 30);
        a.row_mut(m / 2).mapv_inplace(|x| x * 2f64.powi(-600));
        b.column_mut(n / 3).mapv_inplace(|x| x * 2f64.powi(600));
        let a_f = a.t().as_standard_layout().reversed_axes().to_owned();
        let b_f = b.t().as_standard_layout().reversed_axes().to_owned();
        for precision in [Precision::OZAKI, Precision::Ozaki { moduli: 8 }] {
            let opts = options(precision);
            let what = format!("{m}×{k}×{n} 2^±30 {precision}");
            let p = a.try_gpu_dot_with(&b, &opts).expect(&what);
            let want = model(&a, &b, moduli_of(&p.route));
            same_bits(&p.c, &want, &what);
            same_bits(
                &a_f.try_gpu_dot_with(&b_f, &opts).expect(&what).c,
                &want,
                &format!("{what} F·F"),
            );
        }
    }
}

/// Exact products of a few doubles each, summed with compensation (TwoProduct, TwoSum): a
/// reference far more accurate than FP64.
fn compensated<S1: Data<Elem = f64>, S2: Data<Elem = f64>>(
    a: &ArrayBase<S1, Ix2>,
    b: &ArrayBase<S2, Ix2>,
) -> Array2<f64> {
    let (m, n) = (a.nrows(), b.ncols());
    Array2::from_shape_fn((m, n), |(i, j)| {
        let (mut s, mut c) = (0.0f64, 0.0f64);
        for (x, y) in a.row(i).iter().zip(b.column(j).iter()) {
            let p = x * y;
            let pe = x.mul_add(*y, -p);
            let t = s + p;
            let z = t - s;
            let e = (s - (t - z)) + (p - z);
            s = t;
            c += e + pe;
        }
        s + c
    })
}

fn max_rel(c: &Array2<f64>, r: &Array2<f64>, scale: f64) -> f64 {
    c.iter()
        .zip(r.iter())
        .map(|(x, y)| (x - y).abs() / scale)
        .fold(0.0, f64::max)
}

/// On uniform inputs the automatic choice is at least as accurate as the native FP64 product
/// (errors against a compensated reference, relative to the largest |A|·|B| entry).
#[test]
#[ignore = "needs a CUDA GPU"]
fn automatic_moduli_are_as_accurate_as_native_fp64_on_uniform_inputs() {
    let mut rng = rng();
    for &(m, k, n) in &[(256, 2048, 256), (200, 8192, 150)] {
        let a = uniform(&mut rng, m, k);
        let b = uniform(&mut rng, k, n);
        let r = compensated(&a, &b);
        let scale = k as f64;
        let oz = a.try_gpu_dot_with(&b, &options(Precision::OZAKI)).unwrap();
        let native = a.try_gpu_dot_with(&b, &options(Precision::Native)).unwrap();
        let (e_oz, e_native) = (max_rel(&oz.c, &r, scale), max_rel(&native.c, &r, scale));
        println!(
            "{m}×{k}×{n}: ozaki-{} {e_oz:.3e}, native {e_native:.3e}",
            moduli_of(&oz.route)
        );
        assert!(
            e_oz <= e_native.max(2f64.powi(-52)),
            "{e_oz:e} above native {e_native:e}"
        );
    }
}

/// Relative Frobenius error of `c` against `r`.
fn frobenius(c: &Array2<f64>, r: &Array2<f64>) -> f64 {
    let diff: f64 = c.iter().zip(r.iter()).map(|(x, y)| (x - y) * (x - y)).sum();
    (diff / r.iter().map(|y| y * y).sum::<f64>()).sqrt()
}

/// On entries spanning 2^±30, where an element far below its row's largest keeps few bits
/// by that element alone, the automatic choice is still at least as accurate as the native
/// FP64 product.
#[test]
#[ignore = "needs a CUDA GPU"]
fn automatic_moduli_are_as_accurate_as_native_fp64_over_a_wide_range() {
    let mut rng = rng();
    for &(m, k, n) in &[(256, 1024, 256), (128, 4096, 96)] {
        let a = wide(&mut rng, m, k, 30);
        let b = wide(&mut rng, k, n, 30);
        let r = compensated(&a, &b);
        let oz = a.try_gpu_dot_with(&b, &options(Precision::OZAKI)).unwrap();
        let native = a.try_gpu_dot_with(&b, &options(Precision::Native)).unwrap();
        let (e_oz, e_native) = (frobenius(&oz.c, &r), frobenius(&native.c, &r));
        println!(
            "{m}×{k}×{n} 2^±30: ozaki-{} {e_oz:.3e}, native {e_native:.3e}",
            moduli_of(&oz.route)
        );
        assert!(e_oz <= e_native, "{e_oz:e} above native {e_native:e}");
    }
}

/// A row of A or a column of B holding Inf or NaN gives the native product's pattern there;
/// the rest is the model's.
#[test]
#[ignore = "needs a CUDA GPU"]
fn inf_and_nan_give_the_native_pattern() {
    let mut rng = rng();
    let (m, k, n) = (70, 300, 90);
    let mut a = uniform(&mut rng, m, k);
    let mut b = uniform(&mut rng, k, n);
    a[[3, 7]] = f64::INFINITY;
    a[[5, 0]] = f64::NAN;
    b[[11, 4]] = f64::NEG_INFINITY;
    b[[2, 9]] = f64::INFINITY;
    b[[2, 10]] = 0.0;
    a[[8, 2]] = 0.0; // Inf · 0 where row 8 meets column 9: NaN
    let p = a.try_gpu_dot_with(&b, &options(Precision::OZAKI)).unwrap();
    let native = a.try_gpu_dot_with(&b, &options(Precision::Native)).unwrap();
    let want = model(&a, &b, moduli_of(&p.route));
    for ((i, j), &x) in p.c.indexed_iter() {
        let special = [3, 5].contains(&i) || [4, 9].contains(&j);
        let y = native.c[[i, j]];
        if special {
            assert_eq!(x.is_nan(), y.is_nan(), "({i}, {j}): {x} against native {y}");
            if !y.is_nan() && y.is_infinite() {
                assert_eq!(x, y, "({i}, {j})");
            }
        } else {
            assert_eq!(x.to_bits(), want[[i, j]].to_bits(), "({i}, {j})");
        }
    }
}

/// f32 products by Ozaki: within one unit in the last place of the exactly rounded model
/// (which the CPU rounds to f64 first), and FP32-accurate.
#[test]
#[ignore = "needs a CUDA GPU"]
fn f32_products_are_fp32_accurate() {
    let mut rng = rng();
    for &(m, k, n) in &[(65, 513, 130), (256, 2048, 300)] {
        let a = uniform(&mut rng, m, k).mapv(|x| x as f32);
        let b = uniform(&mut rng, k, n).mapv(|x| x as f32);
        let p = a.try_gpu_dot_with(&b, &options(Precision::OZAKI)).unwrap();
        let moduli = moduli_of(&p.route);
        assert_eq!(moduli, ozaki_auto_moduli(Dtype::F32, k));
        let want = model(&a.mapv(f64::from), &b.mapv(f64::from), moduli);
        for (x, y) in p.c.iter().zip(want.iter()) {
            let y = *y as f32;
            let ulp = (y.abs() * f32::EPSILON).max(f32::MIN_POSITIVE);
            assert!((x - y).abs() <= ulp, "{x} against {y}");
        }
        let r = compensated(&a.mapv(f64::from), &b.mapv(f64::from));
        let err =
            p.c.iter()
                .zip(r.iter())
                .map(|(x, y)| (*x as f64 - y).abs())
                .fold(0.0, f64::max);
        assert!(err <= k as f64 * 2f64.powi(-24), "{m}×{k}×{n}: {err:e}");
    }
}

/// Batches and device matrices run Ozaki too, bit for bit as the model.
#[test]
#[ignore = "needs a CUDA GPU"]
fn batches_and_device_matrices_run_ozaki() {
    let mut rng = rng();
    let (items, m, k, n) = (3, 130, 200, 140);
    let a = Array3::from_shape_simple_fn((items, m, k), || rng.random_range(-1.0..1.0));
    let b = Array3::from_shape_simple_fn((items, k, n), || rng.random_range(-1.0..1.0));
    let opts = options(Precision::OZAKI);
    let p = a.try_gpu_dot_with(&b, &opts).expect("a batch");
    let moduli = moduli_of(&p.route);
    for z in 0..items {
        let want = model(&a.slice(s![z, .., ..]), &b.slice(s![z, .., ..]), moduli);
        same_bits(
            &p.c.slice(s![z, .., ..]).to_owned(),
            &want,
            &format!("item {z}"),
        );
    }
    let a2 = a.slice(s![0, .., ..]).to_owned();
    let b2 = b.slice(s![1, .., ..]).to_owned();
    let ga = GpuMatrix::from_array(&a2).unwrap();
    let c = GpuMatrix::product_with(&ga, &b2, &opts).unwrap();
    same_bits(
        &c.to_array().unwrap(),
        &model(&a2, &b2, moduli),
        "device matrix",
    );
}

/// Where Ozaki cannot run (k above 65 536) the native product runs and the report says so.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_product_ozaki_cannot_run_falls_back_to_native_and_says_so() {
    let mut rng = rng();
    let (m, k, n) = (40, 70_000, 40);
    let a = uniform(&mut rng, m, k);
    let b = uniform(&mut rng, k, n);
    let p = a.try_gpu_dot_with(&b, &options(Precision::OZAKI)).unwrap();
    match &p.route {
        Route::Gpu {
            precision,
            precision_unavailable,
            ..
        } => {
            assert_eq!(*precision, Precision::Native);
            assert_eq!(*precision_unavailable, Some(Precision::OZAKI));
        }
        other => panic!("{other}"),
    }
    assert!(
        p.route.to_string().contains("native (ozaki needs"),
        "{}",
        p.route
    );
    common::assert_close(&p.c, &a, &b, "native fallback");
}

/// The default precision remembers the shapes its guard refused: after two refusals in a row
/// (scales paired along k), the next product of the shape runs natively without the guard,
/// and says so; its result is the native one. Once the guard weighs the shape again and lets
/// a product emulate (uniform inputs), the shape is forgotten: the next product emulates too.
/// A product of host arrays in two row panels counts once, as one in a single panel does.
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_default_skips_the_guard_for_a_shape_it_keeps_refusing() {
    let sm = match gpu_dot::device_status() {
        gpu_dot::DeviceStatus::Ready(d) => d.compute_capability.0 * 10 + d.compute_capability.1,
        other => panic!("no GPU: {other}"),
    };
    // Large enough that the default emulates them, host to host, on any device with INT8
    // tensor cores: in one panel, and in two panels of 2048 rows.
    remembered_refusals(sm, (2560, 2560, 2560), 1);
    remembered_refusals(sm, (4096, 2560, 2560), 2);
}

/// The memory of refusals at `dims`, whose host product runs in `panels` row panels.
fn remembered_refusals(sm: i32, dims: (usize, usize, usize), panels: usize) {
    use gpu_dot::accuracy::{emulated, Family};
    use gpu_dot::GuardReport;
    let opts = |precision| {
        DotOptions::builtin()
            .backend(Backend::Gpu)
            .precision(precision)
            .autotune(false)
            .poison_output(true)
    };
    let guard_of = |route: &Route| match route {
        Route::Gpu {
            guard,
            precision,
            panels: p,
            ..
        } => {
            assert_eq!(*p, panels, "{dims:?}: {route}");
            (*guard, *precision)
        }
        other => panic!("not on the GPU: {other}"),
    };
    gpu_dot::__testing::forget_guard_refusals();
    let (a, b) = Family::PairedK(20).operands::<f32>(dims, common::fresh_seed());
    let native = a.try_gpu_dot_with(&b, &opts(Precision::Native)).unwrap().c;
    let scale = native.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let mut reports: Vec<Option<GuardReport>> = Vec::new();
    let mut refused_c: Option<Array2<f32>> = None;
    for i in 0..4 {
        let p = a.try_gpu_dot_with(&b, &opts(Precision::Auto)).unwrap();
        let (guard, precision) = guard_of(&p.route);
        let what = format!("{dims:?} paired-k product {i}: {}", p.route);
        println!("{what}");
        assert_eq!(precision, Precision::Native, "{what}");
        // Native either way: the bits of the refused products' native kernel, and within
        // FP32's rounding of the native precision's own product.
        let worst =
            p.c.iter()
                .zip(&native)
                .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(worst <= 1e-4 * scale, "{what}: {worst} off native");
        match &refused_c {
            None => refused_c = Some(p.c.clone()),
            Some(r) => assert_eq!(&p.c, r, "{what}: not the refused products' bits"),
        }
        if sm >= 80 {
            let g = guard.unwrap_or_else(|| panic!("{what}: no guard"));
            assert!(g.failed > 0, "{what}");
            assert!(p.route.to_string().contains("native"), "{what}");
            if g.skipped {
                assert!(p.route.to_string().contains("skipped"), "{what}");
            }
        } else {
            assert_eq!(guard, None, "{what}: no INT8 tensor cores, no guard");
        }
        reports.push(guard);
    }
    if sm < 80 {
        return;
    }
    let skipped: Vec<bool> = reports
        .iter()
        .map(|g| g.is_some_and(|g| g.skipped))
        .collect();
    // Refused twice, then one skips; the fourth is weighed (and refused) again.
    assert_eq!(
        skipped,
        [false, false, true, false],
        "{dims:?}: {reports:?}"
    );
    // Uniform inputs of the shape: skipped while the memory lasts (3 products after a third
    // refusal), then weighed and emulated; then forgotten.
    let (a, b) = Family::Uniform.operands::<f32>(dims, common::fresh_seed());
    let mut kinds = Vec::new();
    for _ in 0..5 {
        let p = a.try_gpu_dot_with(&b, &opts(Precision::Auto)).unwrap();
        let (guard, _) = guard_of(&p.route);
        kinds.push(match guard {
            Some(g) if g.skipped => "skipped",
            _ if emulated(&p.route) => "emulated",
            _ => panic!("{dims:?}: uniform inputs refused: {}", p.route),
        });
    }
    assert_eq!(
        kinds,
        ["skipped", "skipped", "skipped", "emulated", "emulated"],
        "{dims:?}"
    );
}

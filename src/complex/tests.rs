use super::*;
use crate::engine::ozaki::GuardReport;
use crate::options::Precision;

#[test]
fn zeros_are_zeros_of_the_shape_in_c_order() {
    for (rows, cols) in [(0, 3), (1, 1), (3, 5), (257, 129)] {
        let c = zeros::<f32>((rows, cols)).unwrap();
        assert_eq!(c.dim(), (rows, cols));
        assert!(c.is_standard_layout());
        assert!(c.iter().all(|z| *z == Complex::new(0.0, 0.0)));
        let c = zeros::<f64>((rows, cols)).unwrap();
        assert!(c.iter().all(|z| *z == Complex::new(0.0, 0.0)));
    }
    assert!(matches!(
        zeros::<f64>((usize::MAX / 2, 3)),
        Err(GpuDotError::TooLarge { .. })
    ));
}

#[test]
fn the_four_products_recombine_into_the_product() {
    // `products` runs the table FOUR on the device; here the same table runs on the CPU, over
    // the parts as `planar` reads them (strided views, in every layout), and must give
    // ndarray's complex product: a wrong sign, part or accumulation in FOUR fails here.
    let a = Array2::from_shape_fn((5, 7), |(i, q)| {
        Complex::new(i as f64 - 2.5 * q as f64, 0.5 * (i * q) as f64 - 1.0)
    });
    let b = Array2::from_shape_fn((7, 4), |(q, j)| {
        Complex::new(1.0 - (q + 2 * j) as f64, (q as f64 - j as f64) * 0.25)
    });
    let bt = b.t().to_owned();
    for (a, b) in [
        (a.view(), b.view()),
        (a.view(), bt.t()),
        (
            a.slice(ndarray::s![..;-1, ..]),
            b.slice(ndarray::s![.., ..;-1]),
        ),
    ] {
        let Complex { re: ar, im: ai } = a.split_complex();
        let Complex { re: br, im: bi } = b.split_complex();
        let parts = [ar, ai, br, bi];
        let mut c = [
            Array2::from_elem((a.nrows(), b.ncols()), f64::NAN),
            Array2::from_elem((a.nrows(), b.ncols()), f64::NAN),
        ];
        for (x, y, alpha, beta, out) in FOUR {
            general_mat_mul(alpha, &parts[x], &parts[2 + y], beta, &mut c[out]);
        }
        let want = a.dot(&b);
        // The operands are small integers and halves: every product is exact.
        assert_eq!(want.mapv(|z| z.re), c[0]);
        assert_eq!(want.mapv(|z| z.im), c[1]);
    }
}

fn gpu_route(guard: Option<GuardReport>, precision: Precision) -> Route {
    let mut route = crate::route::gpu_route::<f32>(
        &DotOptions::builtin(),
        crate::pipeline::Done::nothing(),
        1,
        vec![0],
    );
    if let Route::Gpu {
        guard: g,
        precision: p,
        ..
    } = &mut route
    {
        (*g, *p) = (guard, precision);
    }
    route
}

#[test]
fn the_joint_route_is_the_weakest_of_the_four_and_says_complex() {
    let passed = GuardReport {
        failed: 0,
        tiles: 4,
        skipped: false,
    };
    let refused = GuardReport {
        failed: 2,
        tiles: 4,
        skipped: false,
    };
    let ozaki = Precision::Ozaki { moduli: 14 };
    let all_passed = joint([0, 1, 2, 3].map(|_| gpu_route(Some(passed), ozaki)));
    assert!(matches!(
        all_passed,
        Route::Gpu { complex: true, guard: Some(g), precision: Precision::Ozaki { .. }, .. } if g.failed == 0
    ));
    let one_refused = joint([
        gpu_route(Some(passed), ozaki),
        gpu_route(Some(passed), ozaki),
        gpu_route(Some(refused), Precision::Native),
        gpu_route(Some(passed), ozaki),
    ]);
    assert!(matches!(
        one_refused,
        Route::Gpu { complex: true, guard: Some(g), precision: Precision::Native, .. } if g.failed == 2
    ));
    let text = one_refused.to_string();
    assert!(text.contains("c32"), "{text}");
}

#[test]
fn below_the_threshold_and_on_the_cpu_backend_it_is_ndarrays_product() {
    let a = Array2::from_shape_fn((6, 9), |(i, q)| {
        Complex::new(i as f32 * 0.5, q as f32 - 3.0)
    });
    let b = Array2::from_shape_fn((9, 4), |(q, j)| Complex::new(j as f32 + 1.0, -(q as f32)));
    let cpu = DotOptions::builtin().backend(Backend::Cpu);
    let p = dot_as(a.view(), b.view(), &cpu, false, |c| c, || a.dot(&b)).unwrap();
    assert!(matches!(p.route, Route::Cpu(CpuReason::Requested)));
    assert_eq!(p.c, a.dot(&b));
    let auto = DotOptions::builtin().min_gpu_flops(u64::MAX);
    let p = dot_as(a.view(), b.view(), &auto, false, |c| c, || a.dot(&b)).unwrap();
    // The flops counted are the complex product's real flops, 8·m·k·n.
    assert!(matches!(
        p.route,
        Route::Cpu(CpuReason::BelowThreshold { flops, .. }) if flops == 8 * 6 * 9 * 4
    ));
    let mut c = Array2::from_elem((6, 4), Complex::new(1.0f32, 2.0));
    let mut want = c.clone();
    let (alpha, beta) = (Complex::new(0.5, 1.0), Complex::new(-1.0, 0.5));
    general(alpha, a.view(), b.view(), beta, c.view_mut(), &cpu, false).unwrap();
    general_mat_mul(alpha, &a, &b, beta, &mut want);
    assert_eq!(c, want);
}

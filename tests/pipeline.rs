//! The host↔device paths: chunked and unchunked products through the pinned staging buffers,
//! device-resident matrices and chains, and the general form `C = alpha·A·B + beta·C`, for
//! both element types (`NAME::f32`, `NAME::f64`). GPU tests are ignored on machines without
//! one; run them with `--include-ignored`.

mod common;

use common::{both_types, check, random, reference, scaled_tolerance, TestElem};
use gpu_dot::{
    general_mat_mul, try_general_mat_mul, try_general_mat_mul_with, AsOperand, Backend, DotOptions,
    GpuDot, GpuDotError, GpuMatrix, Kernel, Layout, Route,
};
use ndarray::{s, Array2, ArrayView2, ShapeBuilder};

const NEEDS_GPU: &str = "needs a CUDA GPU";

fn gpu() -> DotOptions {
    DotOptions::builtin()
        .backend(Backend::Gpu)
        .poison_output(true)
}

/// Checks `c` against `alpha·a·b + beta·c0` in f64: the product's rounding bound (as
/// `common::check`) scaled by |alpha|, plus a few ulps of the other terms.
#[track_caller]
fn check_general<T: TestElem>(
    c: ArrayView2<T>,
    alpha: T,
    a: ArrayView2<T>,
    b: ArrayView2<T>,
    beta: T,
    c0: ArrayView2<T>,
    what: &str,
) {
    let r = reference(&a, &b);
    let abs = common::abs_product(&a, &b);
    let (alpha, beta) = (alpha.into_f64(), beta.into_f64());
    let (mut diff, mut scale, mut rest) = (0.0f64, 0.0f64, 0.0f64);
    for (((&x, &p), &s), &old) in c.iter().zip(r.iter()).zip(abs.iter()).zip(c0.iter()) {
        let old = if beta == 0.0 { 0.0 } else { old.into_f64() };
        let want = alpha * p + beta * old;
        diff += (x.into_f64() - want).powi(2);
        scale += s * s;
        rest += want * want + (beta * old).powi(2);
    }
    let eps = T::EPS;
    let bound = alpha.abs() * 4.0 * eps * (a.ncols().max(1) as f64).sqrt() * scale.sqrt()
        + 4.0 * eps * rest.sqrt()
        + f64::MIN_POSITIVE;
    assert!(
        diff.sqrt() <= bound,
        "{what} ({}): ‖C − ref‖ = {:.3e} above {bound:.3e}",
        T::DTYPE,
        diff.sqrt()
    );
}

fn panels(route: &Route) -> usize {
    match route {
        Route::Gpu { panels, .. } => *panels,
        other => panic!("expected a GPU route, got {other:?}"),
    }
}

// ---- CPU (run everywhere) ----------------------------------------------------------------

both_types!(general_form_on_the_cpu_matches_the_reference);
fn general_form_on_the_cpu_matches_the_reference<T: TestElem>() {
    let (a, b) = (random::<T>(37, 29), random::<T>(29, 41));
    for (alpha, beta) in [(1.0, 0.0), (0.5, -2.0), (0.0, 3.0), (-1.5, 1.0)] {
        let (alpha, beta) = (T::from_f64(alpha), T::from_f64(beta));
        let c0 = random::<T>(41, 37).reversed_axes(); // F order
        let mut c = c0.clone();
        let route = try_general_mat_mul_with(
            alpha,
            &a,
            &b,
            beta,
            &mut c,
            &DotOptions::builtin().backend(Backend::Cpu),
        )
        .unwrap();
        assert!(matches!(route, Route::Cpu(_)));
        check_general(c.view(), alpha, a.view(), b.view(), beta, c0.view(), "cpu");
    }
}

both_types!(general_form_with_beta_zero_never_reads_c);
fn general_form_with_beta_zero_never_reads_c<T: TestElem>() {
    let (a, b) = (random::<T>(8, 5), random::<T>(5, 6));
    let mut c = Array2::<T>::from_elem((8, 6), T::nan());
    general_mat_mul(T::one(), &a, &b, T::zero(), &mut c);
    assert!(c.iter().all(|x| x.is_finite()));
    check(&c, &a, &b, &reference(&a, &b), "beta = 0");
}

both_types!(general_form_shape_errors_match_ndarray);
fn general_form_shape_errors_match_ndarray<T: TestElem>() {
    let (a, b) = (Array2::<T>::ones((2, 3)), Array2::<T>::ones((3, 4)));
    let mut wrong = Array2::<T>::zeros((2, 5));
    let (one, zero) = (T::one(), T::zero());
    let ours = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        general_mat_mul(one, &a, &b, zero, &mut wrong.clone())
    }))
    .expect_err("a panic");
    let theirs = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ndarray::linalg::general_mat_mul(one, &a, &b, zero, &mut wrong.clone())
    }))
    .expect_err("a panic");
    let ours = ours.downcast_ref::<String>().expect("a message");
    assert_eq!(Some(ours), theirs.downcast_ref::<String>());
    match try_general_mat_mul(one, &a, &b, zero, &mut wrong) {
        Err(GpuDotError::OutputShape {
            expected, found, ..
        }) => {
            assert_eq!((expected, found), ((2, 4), (2, 5)))
        }
        other => panic!("{other:?}"),
    }
    match try_general_mat_mul(one, &a, &a, zero, &mut wrong) {
        Err(GpuDotError::ShapeMismatch { m, k, k2, n }) => assert_eq!((m, k, k2, n), (2, 3, 2, 3)),
        other => panic!("{other:?}"),
    }
}

// ---- GPU -----------------------------------------------------------------------------------

both_types!(
    #[ignore = "needs a CUDA GPU"]
    chunked_and_unchunked_products_agree_with_the_reference
);
fn chunked_and_unchunked_products_agree_with_the_reference<T: TestElem>() {
    let _ = NEEDS_GPU;
    let (m, k, n) = (1000, 300, 700);
    let a = random::<T>(m, k);
    let at = random::<T>(k, m);
    let b = random::<T>(k, n);
    let bt = random::<T>(n, k);
    let a_big = random::<T>(m + 7, 2 * k);
    let a_views = [
        (a.view(), Layout::C),
        (at.t(), Layout::F),
        (a_big.slice(s![3..m + 3;1, ..;2]), Layout::Copied),
    ];
    let b_views = [(b.view(), Layout::C), (bt.t(), Layout::F)];
    for (av, al) in &a_views {
        for (bv, bl) in &b_views {
            let r = reference(av, bv);
            // Both operands column-major: the product runs as Cᵀ = Bᵀ·Aᵀ (so that C comes back
            // in F order, as ndarray's), whose rows are C's n columns.
            let rows_of_c = if (*al, *bl) == (Layout::F, Layout::F) {
                n
            } else {
                m
            };
            for (rows, want_panels) in [
                (Some(rows_of_c), 1),
                (Some(128), rows_of_c.div_ceil(128)),
                (Some(300), rows_of_c.div_ceil(300)),
                (Some(1), rows_of_c),
            ] {
                let p = av
                    .try_gpu_dot_with(bv, &gpu().panel_rows(rows))
                    .unwrap_or_else(|e| panic!("{al:?}·{bl:?} {rows:?}: {e}"));
                assert_eq!(panels(&p.route), want_panels, "{al:?}·{bl:?} {rows:?}");
                match p.route {
                    Route::Gpu {
                        a_layout, b_layout, ..
                    } => assert_eq!((a_layout, b_layout), (*al, *bl)),
                    _ => unreachable!(),
                }
                check(
                    &p.c,
                    av,
                    bv,
                    &r,
                    &format!("{al:?}·{bl:?} panels of {rows:?}"),
                );
            }
        }
    }
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    large_products_are_chunked_by_default_with_every_kernel
);
fn large_products_are_chunked_by_default_with_every_kernel<T: TestElem>() {
    let (a, b) = (random::<T>(2048, 1024), random::<T>(1024, 1536));
    let r = reference(&a, &b);
    for kernel in [Kernel::Auto, Kernel::Reg128, Kernel::Tiled32] {
        let p = a.try_gpu_dot_with(&b, &gpu().kernel(kernel)).unwrap();
        assert!(panels(&p.route) > 1, "{kernel}: {}", p.route);
        check(&p.c, &a, &b, &r, &format!("{kernel}, {}", p.route));
    }
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    matrices_round_trip_through_the_device_exactly
);
fn matrices_round_trip_through_the_device_exactly<T: TestElem>() {
    for (r, c) in [(1, 1), (3, 1000), (777, 333), (3000, 3000)] {
        let host = random::<T>(r, c);
        let dev = GpuMatrix::from_array(&host).unwrap();
        assert_eq!(dev.dim(), (r, c));
        assert_eq!(dev.to_array().unwrap(), host);
        // From F order and from a stepped, reversed view.
        let f = host.t().as_standard_layout().reversed_axes().to_owned();
        assert_eq!(GpuMatrix::from_array(&f).unwrap().to_array().unwrap(), host);
        let mut dev = dev;
        let other = random::<T>(r, c);
        dev.assign(&other.slice(s![.., ..])).unwrap();
        assert_eq!(dev.to_array().unwrap(), other);
        // Another shape is an error, and the contents stay.
        match dev.assign(&random::<T>(r + 1, c)) {
            Err(GpuDotError::OperandShapes { left, right, .. }) => {
                assert_eq!((left, right), ((r, c), (r + 1, c)));
            }
            got => panic!("assign of another shape: {got:?}"),
        }
        assert_eq!(dev.to_array().unwrap(), other);
    }
    let v = random::<T>(40, 60);
    let stepped = v.slice(s![..;-2, ..;3]);
    assert_eq!(
        GpuMatrix::from_array(&stepped).unwrap().to_array().unwrap(),
        stepped
    );
    let z = GpuMatrix::<T>::zeros((5, 7)).unwrap().to_array().unwrap();
    assert!(z.iter().all(|&x| x == T::zero()));
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    device_resident_chains_match_the_host_result
);
fn device_resident_chains_match_the_host_result<T: TestElem>() {
    let x = random::<T>(300, 500);
    let (w1h, w2h) = (random::<T>(500, 400), random::<T>(400, 50));
    let (w1, w2) = (
        GpuMatrix::from_array(&w1h).unwrap(),
        GpuMatrix::from_array(&w2h).unwrap(),
    );
    // x·w1 on the device, then ·w2 without leaving it.
    let h = GpuMatrix::product(&x, &w1).unwrap();
    assert_eq!(h.dim(), (300, 400));
    check(
        &h.to_array().unwrap(),
        &x,
        &w1h,
        &reference(&x, &w1h),
        "x·w1",
    );
    let hh = h.to_array().unwrap();
    let y = h.try_dot(&w2).unwrap().to_array().unwrap();
    check(&y, &hh, &w2h, &reference(&hh, &w2h), "(x·w1)·w2");

    // Transposed device views and host views on either side.
    let xt = x.t().to_owned(); // 500 × 300
    let ht = GpuMatrix::product(&w1.t(), &xt)
        .unwrap()
        .to_array()
        .unwrap();
    check(&ht, &w1h.t(), &xt, &reference(&w1h.t(), &xt), "w1ᵀ·xᵀ");
    let dev_x = GpuMatrix::from_array(&x).unwrap();
    for (what, got) in [
        ("device·device", dev_x.try_dot(&w1).unwrap()),
        ("device·host", dev_x.try_dot(&w1h).unwrap()),
        (
            "device·hostᵀ",
            dev_x.try_dot(&w1h.t().to_owned().t()).unwrap(),
        ),
        ("view·view", dev_x.view().try_dot(&w1.view()).unwrap()),
    ] {
        check(
            &got.to_array().unwrap(),
            &x,
            &w1h,
            &reference(&x, &w1h),
            what,
        );
    }
    let g = GpuMatrix::product(&w2.t(), &w1.t()).unwrap(); // 50 × 500
    check(
        &g.to_array().unwrap(),
        &w2h.t(),
        &w1h.t(),
        &reference(&w2h.t(), &w1h.t()),
        "w2ᵀ·w1ᵀ",
    );
    assert!(matches!(
        GpuMatrix::product(&w1, &w1),
        Err(GpuDotError::ShapeMismatch { .. })
    ));
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    general_form_with_alpha_and_beta_on_host_and_device_outputs
);
fn general_form_with_alpha_and_beta_on_host_and_device_outputs<T: TestElem>() {
    let (m, k, n) = (333, 257, 190);
    let (a, b) = (random::<T>(m, k), random::<T>(k, n));
    let v = T::from_f64;
    for (alpha, beta) in [(1.0, 0.0), (0.5, 0.0), (1.0, 1.0), (-2.0, 0.5), (0.0, -1.5)] {
        let (alpha, beta) = (v(alpha), v(beta));
        for rows in [None, Some(64)] {
            let opts = gpu().panel_rows(rows);
            let what = format!("alpha {alpha} beta {beta} panels {rows:?}");
            // Host output in C order, F order and a stepped view.
            let c0 = random::<T>(m, n);
            let mut c = c0.clone();
            let route = try_general_mat_mul_with(alpha, &a, &b, beta, &mut c, &opts).unwrap();
            assert!(route.is_gpu(), "{what}: {route}");
            check_general(c.view(), alpha, a.view(), b.view(), beta, c0.view(), &what);

            let mut cf = Array2::<T>::zeros((m, n).f());
            cf.assign(&c0);
            try_general_mat_mul_with(alpha, &a, &b, beta, &mut cf, &opts).unwrap();
            check_general(cf.view(), alpha, a.view(), b.view(), beta, c0.view(), &what);

            let mut big = Array2::<T>::from_elem((2 * m, n + 3), v(7.0));
            big.slice_mut(s![..;-2, 1..n + 1]).assign(&c0);
            try_general_mat_mul_with(
                alpha,
                &a,
                &b.t().to_owned().t(),
                beta,
                &mut big.slice_mut(s![..;-2, 1..n + 1]),
                &opts,
            )
            .unwrap();
            check_general(
                big.slice(s![..;-2, 1..n + 1]),
                alpha,
                a.view(),
                b.view(),
                beta,
                c0.view(),
                &what,
            );
            // `..;-2` over 2m rows takes the odd rows, last first: the even rows and the
            // first column are outside the output view.
            assert!(big.slice(s![..;-2, 0]).iter().all(|&x| x == v(7.0)));
            assert!(big.slice(s![0..;2, ..]).iter().all(|&x| x == v(7.0)));

            // Device output, device and host operands.
            let mut dc = GpuMatrix::from_array(&c0).unwrap();
            let da = GpuMatrix::from_array(&a).unwrap();
            try_general_mat_mul_with(alpha, &da, &b, beta, &mut dc, &opts).unwrap();
            let got = dc.to_array().unwrap();
            check_general(
                got.view(),
                alpha,
                a.view(),
                b.view(),
                beta,
                c0.view(),
                &what,
            );
        }
    }
    // beta = 0 never reads C: NaN there is overwritten.
    let mut c = Array2::<T>::from_elem((m, n), T::nan());
    try_general_mat_mul_with(v(2.0), &a, &b, T::zero(), &mut c, &gpu()).unwrap();
    check_general(
        c.view(),
        v(2.0),
        a.view(),
        b.view(),
        T::zero(),
        c.view(),
        "NaN C, beta 0",
    );
    let mut dc = GpuMatrix::from_array(&Array2::<T>::from_elem((m, n), T::nan())).unwrap();
    try_general_mat_mul_with(T::one(), &a, &b, T::zero(), &mut dc, &gpu()).unwrap();
    let got = dc.to_array().unwrap();
    check(&got, &a, &b, &reference(&a, &b), "NaN device C, beta 0");
    // k = 0: C = beta·C.
    let (a0, b0) = (Array2::<T>::zeros((m, 0)), Array2::<T>::zeros((0, n)));
    let c0 = random::<T>(m, n);
    let mut c = c0.clone();
    try_general_mat_mul_with(T::one(), &a0, &b0, v(0.5), &mut c, &gpu()).unwrap();
    assert_eq!(c, c0.mapv(|x| v(0.5) * x));
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    sgd_updates_of_device_weights_match_the_cpu
);
fn sgd_updates_of_device_weights_match_the_cpu<T: TestElem>() {
    // The training step the `mlp` example runs: W ← W − lr·Xᵀ·G, with W on the device.
    let (x, g) = (random::<T>(256, 64), random::<T>(256, 32));
    let w0 = random::<T>(64, 32);
    let mut w = GpuMatrix::from_array(&w0).unwrap();
    let mut w_cpu = w0.clone();
    let lr = T::from_f64(-0.01);
    for _ in 0..5 {
        try_general_mat_mul(lr, &x.t(), &g, T::one(), &mut w).unwrap();
        ndarray::linalg::general_mat_mul(lr, &x.t(), &g, T::one(), &mut w_cpu);
    }
    let got = w.to_array().unwrap();
    let err = (&got - &w_cpu)
        .mapv(|d| d.abs().into_f64())
        .fold(0.0, |m: f64, &x| m.max(x));
    // 1e-4 in f32, as many ε in f64.
    let tolerance = scaled_tolerance::<T>(f64::from(1e-4f32));
    assert!(err < tolerance, "max difference {err}");
    let _ = x.as_operand();
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    relu_and_its_gradient_on_the_device_match_the_host
);
fn relu_and_its_gradient_on_the_device_match_the_host<T: TestElem>() {
    for (r, c) in [(1, 1), (3, 1000), (256, 1024), (1023, 2049)] {
        let mut h0 = random::<T>(r, c);
        // Special values where a sloppy kernel would differ: NaN (becomes 0, as `max`),
        // -0.0 (not positive), infinities and the smallest subnormals.
        let smallest = T::min_positive_value() * T::epsilon();
        let specials = [
            T::nan(),
            T::neg_zero(),
            T::infinity(),
            T::neg_infinity(),
            smallest,
            -smallest,
        ];
        for (x, &v) in h0.iter_mut().step_by(7).zip(specials.iter().cycle()) {
            *x = v;
        }
        let g0 = random::<T>(r, c);
        let mut h = GpuMatrix::from_array(&h0).unwrap();
        let mut g = GpuMatrix::from_array(&g0).unwrap();
        h.relu().unwrap();
        g.relu_backward(&h).unwrap();
        let h_cpu = h0.mapv(|v| v.max(T::zero()));
        let g_cpu = ndarray::Zip::from(&g0).and(&h_cpu).map_collect(|&g, &a| {
            if a > T::zero() {
                g
            } else {
                T::zero()
            }
        });
        let (h_gpu, g_gpu) = (h.to_array().unwrap(), g.to_array().unwrap());
        // Bit for bit (-0.0 and 0.0 alike are what `max` may give for -0.0).
        for (a, b) in h_gpu.iter().zip(&h_cpu) {
            assert!(a == b && !a.is_nan(), "relu: {a} against {b} ({r}×{c})");
        }
        for (&a, &b) in g_gpu.iter().zip(&g_cpu) {
            assert_eq!(a.bits(), b.bits(), "relu gradient ({r}×{c})");
        }
        // copy_to into an F-order array and into a stepped view gives the same values.
        let mut f = Array2::<T>::from_elem((r, c).f(), T::nan());
        g.copy_to(&mut f).unwrap();
        assert_eq!(f, g_gpu);
        let mut big = Array2::<T>::from_elem((2 * r, c), T::nan());
        g.copy_to(&mut big.slice_mut(s![..;2, ..])).unwrap();
        assert_eq!(big.slice(s![..;2, ..]), g_gpu);
        assert!(big.slice(s![1..;2, ..]).iter().all(|x| x.is_nan()));
    }
    // Shapes must agree: a typed error, and nothing changes.
    let mut g = GpuMatrix::from_array(&random::<T>(4, 5)).unwrap();
    let before = g.to_array().unwrap();
    let h = GpuMatrix::zeros((5, 4)).unwrap();
    assert!(matches!(
        g.relu_backward(&h),
        Err(GpuDotError::OperandShapes {
            left: (4, 5),
            right: (5, 4)
        })
    ));
    let mut wrong = Array2::<T>::zeros((4, 6));
    assert!(matches!(
        g.copy_to(&mut wrong),
        Err(GpuDotError::OperandShapes {
            left: (4, 5),
            right: (4, 6)
        })
    ));
    assert_eq!(g.to_array().unwrap(), before);
    assert!(wrong.iter().all(|&x| x == T::zero()));
}

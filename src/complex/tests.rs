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
fn the_stacked_route_names_the_form_the_launcher_ran() {
    let passed = GuardReport {
        failed: 0,
        tiles: 4,
        skipped: false,
    };
    // The real route of the stacked parts, as the launcher reported it.
    let emulated = |karatsuba| {
        let mut done = crate::pipeline::Done::nothing();
        done.ran = Some(crate::engine::tuner::Ran {
            kernel: crate::options::Kernel::Auto,
            plan: None,
            precision: Precision::Ozaki { moduli: 9 },
            guard: Some(passed),
            unavailable: false,
            karatsuba,
        });
        stacked_route(crate::route::gpu_route::<f32>(
            &DotOptions::builtin(),
            done,
            1,
            vec![0],
        ))
    };
    let karatsuba = emulated(true);
    assert!(matches!(
        karatsuba,
        Route::Gpu {
            complex: true,
            karatsuba: true,
            ..
        }
    ));
    let text = karatsuba.to_string();
    assert!(text.contains("c32 (Karatsuba form"), "{text}");
    // Below the Karatsuba form's size, the real form of the stacked parts.
    let real = emulated(false);
    assert!(matches!(
        real,
        Route::Gpu {
            complex: true,
            karatsuba: false,
            precision: Precision::Ozaki { moduli: 9 },
            ..
        }
    ));
    let text = real.to_string();
    assert!(text.contains("c32 (f32 products of its parts)"), "{text}");
    let native = stacked_route(gpu_route(None, Precision::Native));
    assert!(matches!(
        native,
        Route::Gpu {
            complex: true,
            karatsuba: false,
            ..
        }
    ));
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

#[test]
fn the_stacked_parts_multiply_into_the_product() {
    // `stacked` runs one real product of `as_reals(a)` and `expanded(b)` on the device and
    // reads the result as complex; here ndarray runs it, over C-order, F-order and stepped
    // operands, and it must give ndarray's complex product to rounding (the sums run in
    // another order). Small integers keep every sum exact, so the comparison is exact.
    let a = Array2::from_shape_fn((5, 7), |(i, q)| {
        Complex::new(i as f64 - 2.0 * q as f64, (i * q) as f64 - 1.0)
    });
    let b = Array2::from_shape_fn((7, 4), |(q, j)| {
        Complex::new(1.0 - (q + 2 * j) as f64, q as f64 - j as f64)
    });
    let wide = Array2::from_shape_fn((10, 15), |(i, q)| Complex::new(q as f64, -(i as f64)));
    let a_f = a.t().as_standard_layout().into_owned().reversed_axes();
    let stepped = wide.slice(ndarray::s![..;2, 1..;2]);
    for (a, b) in [
        (a.view(), b.view()),
        (a_f.view(), b.view()),
        (stepped, b.view()),
        (a.view(), a.t().slice_move(ndarray::s![..7, ..4])),
    ] {
        let (m, n) = (a.nrows(), b.ncols());
        let reals = as_reals(a).dot(&expanded(b));
        assert_eq!(reals.dim(), (m, 2 * n));
        let mut c = zeros::<f64>((m, n)).unwrap();
        reals_mut(&mut c).assign(&reals);
        assert_eq!(c, a.dot(&b));
    }
    // A C-order operand is read in place.
    assert_eq!(
        as_reals(a.view()).as_ptr().cast::<u8>(),
        a.as_ptr().cast::<u8>()
    );
    // Inf and NaN in one part land where the four products put them.
    let (mut a, mut b) = (a.clone(), b.clone());
    a[[1, 2]].re = f64::INFINITY;
    b[[3, 1]].im = f64::NAN;
    let mut c = zeros::<f64>((5, 4)).unwrap();
    reals_mut(&mut c).assign(&as_reals(a.view()).dot(&expanded(b.view())));
    // The four products' pattern (ndarray's complex `dot` scales by 1 + 0i, which turns an
    // infinite part into NaN): re = Aᵣ·Bᵣ − Aᵢ·Bᵢ, im = Aᵣ·Bᵢ + Aᵢ·Bᵣ.
    let parts = |x: &Array2<Complex<f64>>| (x.mapv(|z| z.re), x.mapv(|z| z.im));
    let ((ar, ai), (br, bi)) = (parts(&a), parts(&b));
    let (re, im) = (ar.dot(&br) - ai.dot(&bi), ar.dot(&bi) + ai.dot(&br));
    let four = ndarray::Zip::from(&re)
        .and(&im)
        .map_collect(|&r, &i| Complex::new(r, i));
    assert!(four.iter().any(|z| z.re.is_infinite() || z.im.is_nan()));
    let class = |x: f64| {
        (
            x.is_nan(),
            x.is_infinite(),
            x.is_sign_negative() && x.is_infinite(),
        )
    };
    for ((ij, got), want) in c.indexed_iter().zip(&four) {
        assert_eq!(
            (class(got.re), class(got.im)),
            (class(want.re), class(want.im)),
            "{ij:?}: {got} against {want}"
        );
    }
}

#[test]
fn large_operands_are_expanded_and_copied_over_several_threads_as_one() {
    // Past `by_rows`'s one-thread size the blocks of rows go to several threads; every
    // element must land where the element-by-element definitions put it.
    let wide = Array2::from_shape_fn((700, 330), |(i, q)| {
        Complex::new(i as f32 * 0.5 - q as f32, (i * 7 + q * 3) as f32)
    });
    let b = wide.slice(ndarray::s![..;2, ..;-1]); // 350 × 330, stepped and reversed
    let want = Array2::from_shape_fn((700, 660), |(q, j)| {
        let z = b[[q / 2, j / 2]];
        match (q % 2, j % 2) {
            (0, 1) => z.im,
            (1, 0) => -z.im,
            _ => z.re,
        }
    });
    assert_eq!(expanded(b), want);
    let a = wide.t(); // F order: copied
    let reals = as_reals(a);
    assert_eq!(reals.dim(), (330, 1400));
    for ((i, q), &x) in reals.indexed_iter() {
        let z = a[[i, q / 2]];
        assert_eq!(x, if q % 2 == 0 { z.re } else { z.im }, "({i}, {q})");
    }
    assert!(expanded(Array2::<Complex<f64>>::zeros((0, 3)).view()).is_empty());
}

#[test]
fn a_views_reals_in_place_are_its_parts_where_its_rows_allow() {
    let a = Array2::from_shape_fn((6, 5), |(i, j)| {
        Complex::new(i as f64 + 0.5 * j as f64, -(j as f64) - 10.0 * i as f64)
    });
    // Every row of a C-order array, every other row, one row, one column, and none.
    type View = fn(&mut Array2<Complex<f64>>) -> ArrayViewMut2<'_, Complex<f64>>;
    let cases: [(&str, View); 5] = [
        ("C order", |a| a.view_mut()),
        ("stepped rows", |a| a.slice_mut(ndarray::s![..;2, 1..4])),
        ("one row", |a| a.slice_mut(ndarray::s![3..4, ..])),
        ("one column of rows", |a| a.slice_mut(ndarray::s![.., 2..3])),
        ("no columns", |a| a.slice_mut(ndarray::s![.., 0..0])),
    ];
    for (what, view) in cases {
        let mut b = a.clone();
        let want = view(&mut a.clone()).to_owned();
        let mut reals = device::reals_of_view(view(&mut b)).unwrap_or_else(|_| panic!("{what}"));
        assert_eq!(reals.dim(), (want.nrows(), 2 * want.ncols()), "{what}");
        for ((i, j), z) in want.indexed_iter() {
            assert_eq!(
                (reals[[i, 2 * j]], reals[[i, 2 * j + 1]]),
                (z.re, z.im),
                "{what}"
            );
        }
        // Written through the reals, the parts land in the view's elements and nowhere else.
        reals.map_inplace(|x| *x = -*x - 1.0);
        let written = view(&mut b).to_owned();
        for (w, z) in written.iter().zip(&want) {
            assert_eq!(*w, Complex::new(-z.re - 1.0, -z.im - 1.0), "{what}");
        }
        let touched = b.iter().zip(&a).filter(|(x, y)| x != y).count();
        assert_eq!(touched, want.len(), "{what}: wrote outside the view");
    }
    // Columns not side by side, or rows that run backwards: handed back untouched.
    let mut f = Array2::from_elem((6, 5).f(), Complex::new(0.0, 0.0));
    f.assign(&a);
    assert!(device::reals_of_view(f.view_mut()).is_err());
    let mut b = a.clone();
    assert!(device::reals_of_view(b.slice_mut(ndarray::s![.., ..;2])).is_err());
    assert!(device::reals_of_view(b.slice_mut(ndarray::s![..;-1, ..])).is_err());
    assert_eq!(b, a);
}

#[test]
fn reals_read_back_as_the_matrix_they_hold() {
    let a = Array2::from_shape_fn((4, 3), |(i, j)| Complex::new(i as f32, j as f32 - 0.5));
    let reals = as_reals(a.view()).into_owned();
    assert_eq!(reals.dim(), (4, 6));
    assert_eq!(device::from_reals(reals), a);
    let empty = Array2::<f64>::zeros((3, 0));
    assert_eq!(device::from_reals(empty).dim(), (3, 0));
}

#[test]
fn filled_reals_are_the_complex_array_they_hold() {
    let want = Array2::from_shape_fn((3, 4), |(i, j)| Complex::new(i as f64, -(j as f64) - 0.25));
    let parts: Vec<f64> = want.iter().flat_map(|z| [z.re, z.im]).collect();
    // An allocation of exactly the reals (taken in place), and a larger one (copied).
    for spare in [0, 5] {
        let mut data: Vec<MaybeUninit<f64>> = Vec::with_capacity(parts.len() + spare);
        data.extend(parts.iter().map(|&x| MaybeUninit::new(x)));
        assert_eq!(data.capacity() == parts.len(), spare == 0);
        // SAFETY: every element was written just above.
        let c = unsafe { filled((3, 4), data) };
        assert_eq!(c, want);
        assert!(c.is_standard_layout());
    }
}

//! `f64` everywhere `f32` works: `gpu_dot` on every layout and kernel, the general form,
//! device matrices, the CPU fallback, bad input and ndarray's memory order for the result.
//!
//! The CPU tests run everywhere; the GPU tests need a CUDA GPU
//! (`cargo test --test f64 -- --include-ignored`).

mod common;

use std::panic::catch_unwind;

use common::{check, cpu_options, gpu_options, panic_message, random, reference};
use gpu_dot::{
    device_status, general_mat_mul, layout_of, try_general_mat_mul_with, Backend, CpuReason,
    DeviceStatus, DotOptions, Dtype, GpuDot, GpuDotError, GpuMatrix, Kernel, Route,
};
use ndarray::{s, Array2, ArrayView2, ShapeBuilder};

fn require_gpu() {
    if let DeviceStatus::Unavailable(reason) = device_status() {
        panic!("this test needs a CUDA GPU: {reason}");
    }
}

/// The panic message of `f`.

#[test]
fn the_cpu_route_is_ndarrays_f64_dot_in_every_layout() {
    let a = random::<f64>(37, 29);
    let b = random::<f64>(29, 41);
    let (at, bt) = (a.t().to_owned(), b.t().to_owned());
    let views: [(ArrayView2<f64>, ArrayView2<f64>); 4] = [
        (a.view(), b.view()),
        (at.t(), bt.t()),
        (a.slice(s![..;2, 1..]), b.slice(s![1.., ..;-1])),
        (a.slice(s![..;-1, ..]), bt.t()),
    ];
    for (a, b) in views {
        let p = a.try_gpu_dot_with(&b, &cpu_options()).unwrap();
        assert_eq!(p.c, a.dot(&b));
        assert_eq!(p.c.strides(), a.dot(&b).strides());
        assert!(matches!(p.route, Route::Cpu(CpuReason::Requested)));
    }
}

#[test]
fn both_operands_in_f_order_give_an_f_order_result_on_every_route() {
    let a = Array2::<f64>::from_shape_fn((6, 4).f(), |(i, j)| (i + 2 * j) as f64);
    let b = Array2::<f64>::from_shape_fn((4, 5).f(), |(i, j)| (3 * i) as f64 - j as f64);
    for opts in [cpu_options(), DotOptions::builtin()] {
        let p = a.try_gpu_dot_with(&b, &opts).unwrap();
        assert_eq!(p.c, a.dot(&b));
        assert!(p.c.t().is_standard_layout(), "{}: not F order", p.route);
    }
    let e = Array2::<f64>::zeros((0, 4).f());
    let p = e.try_gpu_dot_with(&b, &DotOptions::builtin()).unwrap();
    assert!(matches!(p.route, Route::Empty));
    assert_eq!(p.c.strides(), e.dot(&b).strides());
    // Mixed layouts give C order, as ndarray does.
    let c = a.view().gpu_dot(&b.as_standard_layout());
    assert!(c.is_standard_layout());
}

#[test]
fn f64_shape_errors_match_ndarray() {
    let a = Array2::<f64>::ones((2, 3));
    let b = Array2::<f64>::ones((4, 5));
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
            m: 2,
            k: 3,
            k2: 4,
            n: 5
        })
    ));
    let mut c = Array2::<f64>::zeros((2, 2));
    let err = try_general_mat_mul_with(
        1.0,
        &a,
        &a.t(),
        0.0,
        &mut c.slice_mut(s![.., ..1]),
        &cpu_options(),
    );
    assert!(matches!(err, Err(GpuDotError::OutputShape { .. })));
}

#[test]
fn zero_dimensions_give_empty_or_zero_f64_results() {
    for (m, k, n) in [(0, 3, 4), (3, 0, 4), (3, 4, 0), (0, 0, 0)] {
        let a = Array2::<f64>::ones((m, k));
        let b = Array2::<f64>::ones((k, n));
        let c = a.gpu_dot(&b);
        assert_eq!(c, a.dot(&b));
    }
}

#[test]
fn the_general_form_takes_f64_on_the_cpu() {
    let a = random::<f64>(9, 7);
    let b = random::<f64>(7, 5);
    let mut ours = random::<f64>(9, 5);
    let mut theirs = ours.clone();
    general_mat_mul(0.5, &a, &b, -2.0, &mut ours);
    ndarray::linalg::general_mat_mul(0.5, &a, &b, -2.0, &mut theirs);
    assert_eq!(ours, theirs);
}

/// A named operand pair and its reference.
type Pair<'a> = (
    &'a str,
    ArrayView2<'a, f64>,
    ArrayView2<'a, f64>,
    &'a Array2<f64>,
);

/// Shapes that reach every plan: GEMV rows and columns, thin split-K products, edge tiles,
/// and rectangles either way.
const SHAPES: [(usize, usize, usize); 12] = [
    (1, 1, 1),
    (7, 13, 5),
    (1, 300, 257),
    (300, 257, 1),
    (129, 67, 255),
    (64, 2048, 64),
    (33, 1500, 65),
    (256, 256, 256),
    (300, 40, 500),
    (500, 40, 300),
    (1000, 1, 1000),
    (130, 129, 131),
];

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_f64_kernel_matches_the_reference_over_shapes_and_layouts() {
    require_gpu();
    for (m, k, n) in SHAPES {
        let a = random::<f64>(m, k);
        let b = random::<f64>(k, n);
        let (at, bt) = (a.t().to_owned(), b.t().to_owned());
        // An odd-width window: leading dimensions that keep no 16-byte alignment.
        let wide_a = random::<f64>(m, k + 1);
        let r = reference(&a, &b);
        let r_window = reference(&wide_a.slice(s![.., 1..]), &b);
        let pairs: [Pair; 5] = [
            ("C·C", a.view(), b.view(), &r),
            ("F·F", at.t(), bt.t(), &r),
            ("C·F", a.view(), bt.t(), &r),
            ("F·C", at.t(), b.view(), &r),
            ("window·C", wide_a.slice(s![.., 1..]), b.view(), &r_window),
        ];
        for (name, av, bv, r) in pairs {
            for kernel in Kernel::ALL.into_iter().chain([Kernel::Auto]) {
                let what = format!("{m}×{k}×{n} {name} {kernel}");
                let p = av.try_gpu_dot_with(&bv, &gpu_options(kernel)).expect(&what);
                match p.route {
                    Route::Gpu {
                        dtype, a_layout, ..
                    } => {
                        assert_eq!(dtype, Dtype::F64, "{what}");
                        assert_eq!(a_layout, layout_of(&av), "{what}");
                    }
                    ref other => panic!("{what}: ran {other:?}"),
                }
                assert_eq!(p.c.strides(), av.dot(&bv).strides(), "{what}: order");
                check(&p.c, &av, &bv, r, &what);
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn nan_inf_and_subnormals_propagate_as_in_ndarrays_f64_dot() {
    require_gpu();
    let (m, k, n) = (130, 70, 90);
    let mut a = random::<f64>(m, k);
    let mut b = random::<f64>(k, n);
    a[[3, 5]] = f64::NAN;
    a[[7, 0]] = f64::INFINITY;
    b[[2, 11]] = f64::NEG_INFINITY;
    a[[20, 1]] = f64::MIN_POSITIVE / 8.0; // subnormal
    b[[1, 40]] = 1e-310;
    b[[9, 60]] = f64::MAX / 4.0;
    let want = a.dot(&b);
    for kernel in Kernel::ALL.into_iter().chain([Kernel::Auto]) {
        let got = a.try_gpu_dot_with(&b, &gpu_options(kernel)).unwrap().c;
        for ((i, j), &w) in want.indexed_iter() {
            let g = got[[i, j]];
            if w.is_nan() || w.is_infinite() {
                assert!(
                    (g.is_nan() && w.is_nan()) || g == w,
                    "{kernel} ({i}, {j}): {g} for {w}"
                );
            } else {
                let scale = (0..k)
                    .map(|q| (a[[i, q]] * b[[q, j]]).abs())
                    .fold(0.0, f64::max);
                assert!(
                    (g - w).abs() <= 1e-12 * scale.max(f64::MIN_POSITIVE),
                    "{kernel} ({i}, {j}): {g} for {w}"
                );
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_f64_general_form_and_device_matrices_work_on_the_gpu() {
    require_gpu();
    let opts = DotOptions::builtin().backend(Backend::Gpu);
    let a = random::<f64>(200, 150);
    let b = random::<f64>(150, 170);
    // Host output in F order, alpha and beta.
    let c0 = random::<f64>(200, 170);
    let mut c = Array2::<f64>::zeros((200, 170).f());
    c.assign(&c0);
    let route = try_general_mat_mul_with(0.5, &a, &b, -1.5, &mut c, &opts).unwrap();
    assert!(route.is_gpu(), "{route}");
    let want = reference(&a, &b).mapv(|x| 0.5 * x) - c0.mapv(|x| 1.5 * x);
    let diff = (&c - &want).mapv(f64::abs).fold(0.0, |x: f64, &y| x.max(y));
    assert!(diff < 1e-12, "general form off by {diff}");

    // Device matrices: a chain, a transposed view, ReLU and its gradient, downloads.
    let x = GpuMatrix::from_array(&a).unwrap();
    let w = GpuMatrix::from_array(&b).unwrap();
    let mut h = x.try_dot(&w).unwrap();
    assert_eq!(format!("{h:?}"), "GpuMatrix<f64>(200 × 170)");
    let hb = h.to_array().unwrap();
    check(&hb, &a, &b, &reference(&a, &b), "device chain");
    h.relu().unwrap();
    let relu = h.to_array().unwrap();
    assert_eq!(relu, hb.mapv(|v| v.max(0.0)));
    let mut g = GpuMatrix::from_array(&Array2::<f64>::ones((200, 170))).unwrap();
    g.relu_backward(&h).unwrap();
    assert_eq!(
        g.to_array().unwrap(),
        relu.mapv(|v| if v > 0.0 { 1.0 } else { 0.0 })
    );
    let back = GpuMatrix::product(&h.t(), &x).unwrap();
    let mut out = Array2::<f64>::zeros((170, 150).f());
    back.copy_to(&mut out).unwrap();
    check(&out, &relu.t(), &a, &reference(&relu.t(), &a), "hᵀ·x");
    // SGD step on device-resident weights: W ← W − 0.1·Xᵀ·G.
    let mut wd = GpuMatrix::from_array(&b).unwrap();
    let gr = random::<f64>(200, 170);
    try_general_mat_mul_with(-0.1, &x.t(), &gr, 1.0, &mut wd, &opts).unwrap();
    let want = &b - &reference(&a.t(), &gr).mapv(|v| 0.1 * v);
    let diff = (&wd.to_array().unwrap() - &want)
        .mapv(f64::abs)
        .fold(0.0, |x: f64, &y| x.max(y));
    assert!(diff < 1e-12, "SGD step off by {diff}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn f64_bad_input_gets_typed_errors_on_the_gpu() {
    require_gpu();
    // More device memory than any device has.
    let err = GpuMatrix::<f64>::zeros((1 << 20, 1 << 20)).unwrap_err();
    assert!(matches!(err, GpuDotError::OutOfMemory { .. }), "{err}");
    // Mixed shapes between device matrices.
    let a = GpuMatrix::from_array(&random::<f64>(4, 5)).unwrap();
    let b = GpuMatrix::from_array(&random::<f64>(4, 5)).unwrap();
    assert!(matches!(
        a.try_dot(&b),
        Err(GpuDotError::ShapeMismatch { k: 5, k2: 4, .. })
    ));
    // The CPU backend cannot take device operands.
    let mut c = Array2::<f64>::zeros((4, 4));
    assert!(matches!(
        try_general_mat_mul_with(1.0, &a, &b.t(), 0.0, &mut c, &cpu_options()),
        Err(GpuDotError::CpuBackendWithDeviceOperands)
    ));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn long_k_f64_products_split_and_stay_accurate() {
    require_gpu();
    for (m, k, n) in [(64, 8192, 512), (512, 8192, 64), (96, 20000, 96)] {
        let a = random::<f64>(m, k);
        let b = random::<f64>(k, n);
        let p = a.try_gpu_dot_with(&b, &gpu_options(Kernel::Auto)).unwrap();
        let err = gpu_dot::profile::relative_error_sampled(p.c.view(), a.view(), b.view(), 24);
        assert!(
            err < 1e-14,
            "{m}×{k}×{n}: relative error {err:.2e} ({})",
            p.route
        );
    }
}

/// Devices without FP64 tensor cores (before sm_80) run the SIMT DGEMM: chosen here on the
/// GPU at hand by pretending an sm_75 device, over shapes that reach both configurations,
/// split-K and edge tiles, in every layout pair.
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_simt_fallback_matches_the_reference() {
    require_gpu();
    gpu_dot::__testing::pretend_compute_capability(Some(75));
    let result = catch_unwind(|| {
        for (m, k, n) in [(7, 13, 5), (129, 67, 255), (64, 2048, 64), (300, 257, 400)] {
            let a = random::<f64>(m, k);
            let b = random::<f64>(k, n);
            let (at, bt) = (a.t().to_owned(), b.t().to_owned());
            let r = reference(&a, &b);
            for (name, av, bv) in [
                ("C·C", a.view(), b.view()),
                ("F·C", at.t(), b.view()),
                ("C·F", a.view(), bt.t()),
                ("F·F", at.t(), bt.t()),
            ] {
                for kernel in [Kernel::Reg64, Kernel::Reg128, Kernel::Auto] {
                    let what = format!("SIMT {m}×{k}×{n} {name} {kernel}");
                    let p = av.try_gpu_dot_with(&bv, &gpu_options(kernel)).expect(&what);
                    assert!(p.route.is_gpu(), "{what}");
                    check(&p.c, &av, &bv, &r, &what);
                }
            }
        }
    });
    gpu_dot::__testing::pretend_compute_capability(None);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

//! Tests that need no GPU: shapes, errors, dispatch, fallback, layouts through the CPU path,
//! options and environment parsing. They run in CI and on the device alike; those that multiply
//! run for both element types (`NAME::f32`, `NAME::f64`).

mod common;

use common::{assert_close, both_types, panic_message, random, test_name, TestElem};
use gpu_dot::{
    device_status, Backend, CpuReason, DeviceStatus, DotOptions, Dtype, GpuDot, GpuDotError,
    Kernel, Route, DEFAULT_MIN_GPU_FLOPS, DEFAULT_MIN_GPU_FLOPS_F64,
};
use ndarray::{arr2, s, ArcArray2, Array2, CowArray, Ix2};

fn cpu() -> DotOptions {
    DotOptions::builtin().backend(Backend::Cpu)
}

both_types!(shape_mismatch_panics_with_ndarrays_message);
fn shape_mismatch_panics_with_ndarrays_message<T: TestElem>() {
    let a = Array2::<T>::ones((2, 3));
    let b = Array2::<T>::ones((4, 5));
    let ours = panic_message(|| {
        a.gpu_dot(&b);
    });
    let ndarrays = panic_message(|| {
        a.dot(&b);
    });
    assert_eq!(ours, ndarrays);
    assert_eq!(
        ours,
        "ndarray: inputs 2 × 3 and 4 × 5 are not compatible for matrix multiplication"
    );
}

both_types!(shape_mismatch_panic_points_at_the_caller);
/// `gpu_dot` is `#[track_caller]`: the panic names the caller's line. Checked in a child
/// process, whose stderr carries the panic's location.
fn shape_mismatch_panic_points_at_the_caller<T: TestElem>() {
    const CHILD: &str = "GPU_DOT_TEST_PANIC_CHILD";
    let line = line!() + 3;
    if std::env::var_os(CHILD).is_some() {
        let a = Array2::<T>::ones((2, 3));
        a.gpu_dot(&a);
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &test_name::<T>("shape_mismatch_panic_points_at_the_caller"),
            "--nocapture",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the child did not panic");
    assert!(
        stderr.contains(&format!("cpu.rs:{line}:")),
        "panic not located at cpu.rs:{line}:\n{stderr}"
    );
    assert!(stderr.contains("are not compatible for matrix multiplication"));
}

both_types!(shape_mismatch_is_a_typed_error);
fn shape_mismatch_is_a_typed_error<T: TestElem>() {
    let a = Array2::<T>::ones((2, 3));
    let b = Array2::<T>::ones((4, 5));
    for result in [
        a.try_gpu_dot(&b).map(|_| ()),
        a.try_gpu_dot_with(&b, &cpu()).map(|_| ()),
        a.try_gpu_dot_with(&b, &DotOptions::builtin().backend(Backend::Gpu))
            .map(|_| ()),
    ] {
        let err = result.expect_err("mismatched shapes");
        assert!(
            matches!(
                err,
                GpuDotError::ShapeMismatch {
                    m: 2,
                    k: 3,
                    k2: 4,
                    n: 5
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "inputs 2 × 3 and 4 × 5 are not compatible for matrix multiplication"
        );
    }
}

both_types!(zero_dimensions_give_zeros_without_a_device);
fn zero_dimensions_give_zeros_without_a_device<T: TestElem>() {
    for (m, k, n) in [
        (0, 0, 4),
        (0, 5, 3),
        (4, 0, 3),
        (3, 5, 0),
        (0, 0, 0),
        (7, 0, 9),
    ] {
        let a = random::<T>(m, k);
        let b = random::<T>(k, n);
        for backend in [Backend::Auto, Backend::Gpu, Backend::Cpu] {
            let opts = DotOptions::builtin().backend(backend).min_gpu_flops(0);
            let p = a.try_gpu_dot_with(&b, &opts).unwrap();
            assert_eq!(p.c.dim(), (m, n));
            assert!(p.c.iter().all(|&x| x == T::zero()));
            assert!(matches!(p.route, Route::Empty), "{:?}", p.route);
        }
        assert_eq!(a.gpu_dot(&b), a.dot(&b));
    }
}

both_types!(cpu_backend_equals_ndarray_dot_in_every_layout);
fn cpu_backend_equals_ndarray_dot_in_every_layout<T: TestElem>() {
    let a = random::<T>(23, 31);
    let b = random::<T>(31, 17);
    let at = random::<T>(31, 23); // at.t() is 23 × 31, F order
    let bt = random::<T>(17, 31);
    let big_a = random::<T>(50, 70);
    let big_b = random::<T>(70, 40);
    let a_views = [
        a.view(),
        at.t(),
        big_a.slice(s![3..26, 5..36]),
        big_a.slice(s![..46;2, ..;2]).slice_move(s![..23, ..31]),
        big_a.slice(s![..;-2, 4..35]).slice_move(s![..23, ..]),
    ];
    let b_views = [
        b.view(),
        bt.t(),
        big_b.slice(s![7..38, 3..20]),
        big_b.slice(s![..;-2, ..;-2]).slice_move(s![..31, ..17]),
    ];
    for av in &a_views {
        for bv in &b_views {
            let p = av.try_gpu_dot_with(bv, &cpu()).unwrap();
            assert!(matches!(p.route, Route::Cpu(CpuReason::Requested)));
            assert_eq!(p.c, av.dot(bv));
        }
    }
}

both_types!(broadcast_operands_work);
fn broadcast_operands_work<T: TestElem>() {
    let row = ndarray::Array1::from_vec(vec![1.0, -2.0, 3.0]).mapv(T::from_f64);
    let a = row.broadcast((4, 3)).unwrap();
    let b = random::<T>(3, 5);
    assert_eq!(a.gpu_dot(&b), a.dot(&b));
    let col = random::<T>(1, 5);
    let bb = col.broadcast((3, 5)).unwrap();
    assert_eq!(a.gpu_dot(&bb), a.dot(&bb));
}

both_types!(every_array_kind_is_accepted_and_mixed);
fn every_array_kind_is_accepted_and_mixed<T: TestElem>() {
    let a: Array2<T> = random(6, 4);
    let b: Array2<T> = random(4, 5);
    let expected = a.dot(&b);
    let arc: ArcArray2<T> = b.to_shared();
    let cow: CowArray<T, Ix2> = CowArray::from(a.view());
    let mut b_mut = b.clone();
    let view_mut = b_mut.view_mut();
    assert_eq!(a.gpu_dot(&arc), expected);
    assert_eq!(cow.gpu_dot(&view_mut), expected);
    assert_eq!(a.view().gpu_dot(&b.view()), expected);
    let owned_f: Array2<T> = a.t().as_standard_layout().into_owned().reversed_axes(); // F order, owned
    assert!(owned_f.t().is_standard_layout());
    assert_eq!(owned_f.gpu_dot(&arc), expected);
}

both_types!(below_threshold_runs_on_the_cpu_and_says_so);
/// Below the element type's own default threshold ([`DEFAULT_MIN_GPU_FLOPS`],
/// [`DEFAULT_MIN_GPU_FLOPS_F64`]), the CPU, and the route says so.
fn below_threshold_runs_on_the_cpu_and_says_so<T: TestElem>() {
    let a = arr2(&[[1.0, 2.0], [3.0, 4.0]]).mapv(T::from_f64);
    let p = a.try_gpu_dot_with(&a, &DotOptions::builtin()).unwrap();
    assert_eq!(p.c, arr2(&[[7.0, 10.0], [15.0, 22.0]]).mapv(T::from_f64));
    let default = match T::DTYPE {
        Dtype::F32 => DEFAULT_MIN_GPU_FLOPS,
        _ => DEFAULT_MIN_GPU_FLOPS_F64,
    };
    assert_eq!(DotOptions::builtin().threshold(T::DTYPE), default);
    match p.route {
        Route::Cpu(CpuReason::BelowThreshold { flops, threshold }) => {
            assert_eq!(flops, 16);
            assert_eq!(threshold, default);
        }
        other => panic!("unexpected route {other:?}"),
    }
}

both_types!(auto_uses_the_gpu_when_there_is_one_else_the_cpu_with_the_reason);
fn auto_uses_the_gpu_when_there_is_one_else_the_cpu_with_the_reason<T: TestElem>() {
    let a = random::<T>(40, 50);
    let b = random::<T>(50, 30);
    let opts = DotOptions::builtin().min_gpu_flops(0);
    let p = a.try_gpu_dot_with(&b, &opts).unwrap();
    assert_close(&p.c, &a, &b, "auto");
    match (device_status(), &p.route) {
        (
            DeviceStatus::Ready(_),
            Route::Gpu {
                dtype,
                kernel,
                plan,
                ..
            },
        ) => {
            assert_eq!(*dtype, T::DTYPE);
            assert_eq!(*kernel, Kernel::Auto);
            assert!(plan.is_some(), "Auto reports the plan it ran");
        }
        (DeviceStatus::Unavailable(reason), Route::Cpu(CpuReason::GpuUnavailable(e))) => {
            assert!(matches!(e, GpuDotError::NoDevice { reason: r } if *r == reason));
        }
        (status, route) => panic!("status {status:?} but route {route:?}"),
    }
}

both_types!(gpu_backend_is_an_error_without_a_device_and_a_gpu_product_with_one);
fn gpu_backend_is_an_error_without_a_device_and_a_gpu_product_with_one<T: TestElem>() {
    let a = random::<T>(9, 8);
    let b = random::<T>(8, 7);
    let result = a.try_gpu_dot_with(&b, &DotOptions::builtin().backend(Backend::Gpu));
    match device_status() {
        DeviceStatus::Unavailable(reason) => match result {
            Err(GpuDotError::NoDevice { reason: r }) => assert_eq!(r, reason),
            other => panic!("expected NoDevice, got {other:?}"),
        },
        DeviceStatus::Ready(_) => {
            let p = result.expect("a GPU product");
            assert!(p.route.is_gpu());
            assert_close(&p.c, &a, &b, "gpu backend");
        }
    }
}

both_types!(without_a_visible_device_auto_falls_back_and_gpu_errors);
/// Runs the assertions of a machine without a usable device in a child process whose
/// `CUDA_VISIBLE_DEVICES` is empty, so it holds on a GPU machine as well as in CI.
fn without_a_visible_device_auto_falls_back_and_gpu_errors<T: TestElem>() {
    const CHILD: &str = "GPU_DOT_TEST_NO_DEVICE_CHILD";
    if std::env::var_os(CHILD).is_some() {
        let status = device_status();
        let DeviceStatus::Unavailable(reason) = status else {
            panic!("a device is visible: {status:?}");
        };
        assert!(!reason.is_empty());
        let a = random::<T>(64, 64);
        let opts = DotOptions::builtin().min_gpu_flops(0);
        let p = a.try_gpu_dot_with(&a, &opts).unwrap();
        assert!(matches!(
            p.route,
            Route::Cpu(CpuReason::GpuUnavailable(GpuDotError::NoDevice { .. }))
        ));
        assert_eq!(p.c, a.dot(&a));
        let err = a
            .try_gpu_dot_with(&a, &opts.clone().backend(Backend::Gpu))
            .unwrap_err();
        assert!(matches!(err, GpuDotError::NoDevice { .. }), "{err:?}");
        assert!(err.to_string().starts_with("no usable CUDA device: "));
        assert_eq!(a.gpu_dot(&a), a.dot(&a));
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([
            "--exact",
            &test_name::<T>("without_a_visible_device_auto_falls_back_and_gpu_errors"),
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env("CUDA_VISIBLE_DEVICES", "")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn options_parse_from_the_environment() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    };
    assert_eq!(
        DotOptions::from_lookup(env(&[])).unwrap(),
        DotOptions::builtin()
    );
    let o = DotOptions::from_lookup(env(&[
        ("GPU_DOT_BACKEND", "GPU"),
        ("GPU_DOT_KERNEL", "tiled16"),
        ("GPU_DOT_MIN_FLOPS", " 12345 "),
    ]))
    .unwrap();
    assert_eq!(o.backend, Backend::Gpu);
    assert_eq!(o.kernel, Kernel::Tiled16);
    assert_eq!(o.min_gpu_flops, Some(12345));
    for (v, b) in [
        ("cpu", Backend::Cpu),
        ("auto", Backend::Auto),
        ("gpu", Backend::Gpu),
    ] {
        assert_eq!(v.parse::<Backend>(), Ok(b));
    }
    for (v, k) in [
        ("naive", Kernel::Naive),
        ("tiled32", Kernel::Tiled32),
        ("auto", Kernel::Auto),
    ] {
        assert_eq!(v.parse::<Kernel>(), Ok(k));
        assert_eq!(k.name().parse::<Kernel>(), Ok(k));
    }
    for (pairs, var) in [
        (&[("GPU_DOT_BACKEND", "tpu")][..], "GPU_DOT_BACKEND"),
        (&[("GPU_DOT_KERNEL", "fastest")][..], "GPU_DOT_KERNEL"),
        (&[("GPU_DOT_MIN_FLOPS", "-1")][..], "GPU_DOT_MIN_FLOPS"),
    ] {
        let pairs: &'static [(&'static str, &'static str)] =
            Box::leak(pairs.to_vec().into_boxed_slice());
        match DotOptions::from_lookup(env(pairs)) {
            Err(GpuDotError::InvalidEnv { var: v, value, .. }) => {
                assert_eq!(v, var);
                assert_eq!(value, pairs[0].1);
            }
            other => panic!("expected InvalidEnv for {var}, got {other:?}"),
        }
    }
}

both_types!(default_products_match_ndarray_above_the_threshold);
fn default_products_match_ndarray_above_the_threshold<T: TestElem>() {
    // Large enough for Auto to try the GPU; on a machine without one this is the CPU path.
    let a = random::<T>(300, 280);
    let b = random::<T>(280, 310);
    let c = a.gpu_dot(&b);
    assert_close(&c, &a, &b, "default gpu_dot");
    let c2 = a.try_gpu_dot(&b).unwrap();
    assert_close(&c2, &a, &b, "default try_gpu_dot");
}

#[test]
fn device_status_never_panics_and_describes_itself() {
    let status = device_status();
    let text = status.to_string();
    match status {
        DeviceStatus::Ready(info) => {
            assert!(text.contains(&info.name));
            assert!(info.compute_capability.0 >= 3);
            assert!(info.total_memory > 0);
        }
        DeviceStatus::Unavailable(reason) => assert!(text.ends_with(&reason)),
    }
}

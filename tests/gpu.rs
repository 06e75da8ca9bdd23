//! GPU tests: every kernel against a reference of higher precision on fresh random inputs,
//! with the device output poisoned with NaN before each launch, for both element types (each
//! test is `NAME::f32` and `NAME::f64`). Run on a machine with a CUDA GPU:
//! `cargo test -- --include-ignored`.
//!
//! `GPU_DOT_TEST_MAX_DIM` caps the square sizes (for slow runs under compute-sanitizer); the
//! sizes left out are printed.

mod common;

use std::sync::Arc;

use common::expect_device;
use common::{
    assert_close, both_types, check, random, reference, scaled_tolerance, TestElem, KERNELS,
};
use gpu_dot::{
    device_status, module_loads, nvrtc_compilations, Backend, DeviceStatus, DotOptions, GpuDot,
    Kernel, Layout, Route,
};
use ndarray::{s, Array2, ArrayView2, ShapeBuilder};

const NEEDS_GPU: &str = "needs a CUDA GPU";

fn on(kernel: Kernel) -> DotOptions {
    DotOptions::builtin()
        .backend(Backend::Gpu)
        .kernel(kernel)
        .poison_output(true)
}

fn max_dim() -> usize {
    std::env::var("GPU_DOT_TEST_MAX_DIM").map_or(usize::MAX, |v| v.parse().expect("an integer"))
}

/// Multiplies on the GPU with `kernel` and checks against the reference `r`.
#[track_caller]
fn check_kernel<T: TestElem>(
    kernel: Kernel,
    a: ArrayView2<T>,
    b: ArrayView2<T>,
    r: &Array2<f64>,
    what: &str,
) -> Route {
    let p = a
        .try_gpu_dot_with(&b, &on(kernel))
        .unwrap_or_else(|e| panic!("{what} {kernel}: {e}"));
    match p.route {
        Route::Gpu { dtype, .. } => assert_eq!(dtype, T::DTYPE, "{what} {kernel}"),
        ref other => panic!("{what}: ran {other:?}"),
    }
    check(&p.c, &a, &b, r, &format!("{what} {kernel}"));
    p.route
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn device_is_ready_and_described() {
    let DeviceStatus::Ready(info) = device_status() else {
        panic!("{NEEDS_GPU}: {}", device_status());
    };
    assert!(!info.name.is_empty());
    assert!(info.compute_capability >= (5, 0));
    assert!(info.multiprocessors > 0 && info.total_memory > 0);
    println!(
        "{}; context created in {:.1} ms",
        device_status(),
        info.context_ms
    );
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    every_kernel_on_square_sizes
);
fn every_kernel_on_square_sizes<T: TestElem>() {
    expect_device();
    let cap = max_dim();
    let mut skipped = Vec::new();
    for size in [1, 7, 15, 16, 17, 31, 33, 127, 1000, 1023, 4097] {
        if size > cap {
            skipped.push(size);
            continue;
        }
        let a = random::<T>(size, size);
        let b = random::<T>(size, size);
        let r = reference(&a, &b);
        for kernel in KERNELS {
            check_kernel(kernel, a.view(), b.view(), &r, &format!("{size}³"));
        }
    }
    println!("sizes above GPU_DOT_TEST_MAX_DIM={cap} left out: {skipped:?}");
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    every_kernel_on_rectangular_shapes
);
fn every_kernel_on_rectangular_shapes<T: TestElem>() {
    expect_device();
    let shapes = [
        (1, 300, 257),
        (1, 1, 1),
        (257, 300, 1),
        (1, 4097, 1),
        (37, 129, 65),
        (65, 3, 700),
        (500, 1, 33),
        (2, 1000, 3),
        (1025, 17, 1),
        (33, 2049, 31),
        (16, 32, 48),
    ];
    for (m, k, n) in shapes {
        let a = random::<T>(m, k);
        let b = random::<T>(k, n);
        let r = reference(&a, &b);
        for kernel in KERNELS {
            check_kernel(kernel, a.view(), b.view(), &r, &format!("{m}×{k}×{n}"));
        }
    }
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    every_kernel_in_every_layout
);
fn every_kernel_in_every_layout<T: TestElem>() {
    expect_device();
    let (m, k, n) = (67, 45, 39);
    let a = random::<T>(m, k);
    let b = random::<T>(k, n);
    let in_f_order = |x: &Array2<T>| {
        let mut f = Array2::zeros(x.raw_dim().f());
        f.assign(x);
        f
    };
    let (a_f, b_f) = (in_f_order(&a), in_f_order(&b));
    let big = random::<T>(3 * m, 3 * k);
    let big_b = random::<T>(3 * k, 3 * n);
    let a_sliced = big.slice(s![5..5 + m, 7..7 + k]).to_owned();
    let a_views: Vec<(ArrayView2<T>, Layout, &str)> = vec![
        (a.view(), Layout::C, "C"),
        (a_f.view(), Layout::F, "F"),
        // A window keeps its rows contiguous: packed row by row.
        (big.slice(s![5..5 + m, 7..7 + k]), Layout::C, "sliced"),
        (
            big.slice(s![..2 * m;2, ..3 * k;3]),
            Layout::Copied,
            "stepped",
        ),
        // Rows in reverse order, each still contiguous.
        (big.slice(s![m..2 * m;-1, ..k]), Layout::C, "negative"),
    ];
    let b_views: Vec<(ArrayView2<T>, Layout, &str)> = vec![
        (b.view(), Layout::C, "C"),
        (b_f.view(), Layout::F, "F"),
        (big_b.slice(s![2..2 + k, 1..1 + n]), Layout::C, "sliced"),
        (
            big_b.slice(s![..;-3, ..;-3]),
            Layout::Copied,
            "negative stepped",
        ),
    ];
    assert_eq!(a_sliced, a_views[2].0);
    for (av, al, an) in &a_views {
        for (bv, bl, bn) in &b_views {
            let r = reference(av, bv);
            for kernel in KERNELS {
                let route = check_kernel(kernel, av.view(), bv.view(), &r, &format!("{an} · {bn}"));
                match route {
                    Route::Gpu {
                        a_layout, b_layout, ..
                    } => assert_eq!((a_layout, b_layout), (*al, *bl)),
                    other => panic!("{other:?}"),
                }
            }
        }
    }
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    zero_inner_dimension_gives_zeros
);
fn zero_inner_dimension_gives_zeros<T: TestElem>() {
    expect_device();
    let a = random::<T>(5, 0);
    let b = random::<T>(0, 6);
    for kernel in KERNELS {
        let p = a.try_gpu_dot_with(&b, &on(kernel)).unwrap();
        assert_eq!(p.c, Array2::<T>::zeros((5, 6)));
        assert!(matches!(p.route, Route::Empty));
    }
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    nan_and_inf_propagate_like_the_cpu
);
fn nan_and_inf_propagate_like_the_cpu<T: TestElem>() {
    expect_device();
    let (m, k, n) = (45, 70, 38);
    let mut a = random::<T>(m, k);
    let mut b = random::<T>(k, n);
    a[[3, 10]] = T::nan(); // row 3 of C is NaN
    a[[7, 0]] = T::infinity(); // row 7: ±Inf where b[0, j] != 0
    b[[5, 9]] = T::neg_infinity(); // column 9: ±Inf, NaN where it meets the Inf or NaN
    a[[20, 5]] = T::zero(); // Inf · 0 = NaN at (20, 9)
    b[[0, 2]] = T::zero(); // and at (7, 2)
    let cpu = a.dot(&b);
    // 1e-4 in f32 (about 840 ε), as many ε in f64.
    let tolerance = scaled_tolerance::<T>(f64::from(1e-4f32));
    for kernel in KERNELS {
        let c = a.try_gpu_dot_with(&b, &on(kernel)).unwrap().c;
        for ((i, j), &x) in c.indexed_iter() {
            let y = cpu[[i, j]];
            if y.is_finite() {
                let (x, y) = (x.into_f64(), y.into_f64());
                assert!(
                    (x - y).abs() <= tolerance * (1.0 + y.abs()),
                    "{kernel} ({i}, {j}): {x} vs {y}"
                );
            } else if y.is_nan() {
                assert!(x.is_nan(), "{kernel} ({i}, {j}): {x}, the CPU gives NaN");
            } else {
                assert_eq!(x, y, "{kernel} ({i}, {j})");
            }
        }
        assert!(c[[3, 0]].is_nan() && c[[20, 9]].is_nan() && c[[7, 2]].is_nan());
    }
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    sixteen_threads_multiply_at_once
);
fn sixteen_threads_multiply_at_once<T: TestElem>() {
    expect_device();
    let handles: Vec<_> = (0..16)
        .map(|t| {
            std::thread::spawn(move || {
                for round in 0..4 {
                    let kernel = Kernel::ALL[(t + round) % Kernel::ALL.len()];
                    let (m, k, n) = (50 + 13 * t + round, 70 + 7 * round, 40 + 11 * t);
                    let a = random::<T>(m, k);
                    let b = random::<T>(k, n);
                    let p = a.try_gpu_dot_with(&b, &on(kernel)).unwrap();
                    assert!(p.route.is_gpu());
                    assert_close(&p.c, &a, &b, &format!("thread {t} round {round} {kernel}"));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a thread failed");
    }
}

/// Set in the child process of `each_family_is_compiled_once_per_process`.
const COMPILE_CHILD: &str = "GPU_DOT_TEST_COMPILE_CHILD";
/// The line the child prints when its checks passed.
const COMPILE_REPORT: &str = "gpu-dot-compile-child: ok";

both_types!(
    #[ignore = "needs a CUDA GPU"]
    each_family_is_compiled_once_per_process
);
/// Counts NVRTC compilations in a child process of this test binary with an empty kernel
/// cache of its own, so that the count does not depend on what earlier runs left in the
/// default cache, nor on other tests of this process.
fn each_family_is_compiled_once_per_process<T: TestElem>() {
    if std::env::var_os(COMPILE_CHILD).is_some() {
        return count_compilations::<T>();
    }
    expect_device();
    let dir = std::env::temp_dir().join(format!(
        "gpu-dot-compile-count-{}-{}",
        std::process::id(),
        common::fresh_seed()
    ));
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &common::test_name::<T>("each_family_is_compiled_once_per_process"),
            "--nocapture",
            "--include-ignored",
        ])
        .env(COMPILE_CHILD, "1")
        // Compilations happen on devices the crate ships no CUBINs for: as on one of those.
        .env(gpu_dot::ENV_PREBUILT, "off")
        .env(gpu_dot::ENV_CACHE_DIR, &dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(COMPILE_REPORT),
        "the child failed ({})\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    println!(
        "{}",
        stdout
            .lines()
            .filter(|l| l.starts_with("first use"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The kernels of the two families that compile in well under a second.
const SIMPLE_KERNELS: [Kernel; 3] = [Kernel::Naive, Kernel::Tiled16, Kernel::Tiled32];

/// The child's checks: with an empty cache and the shipped CUBINs off, each of the two
/// families the simple kernels come from (naive, and tiled for both tile sizes) is compiled
/// exactly once, however many products use it. (The register-blocked families compile the
/// same way, for tens of seconds each on a cold machine.)
fn count_compilations<T: TestElem>() {
    expect_device();
    assert_eq!(
        nvrtc_compilations(),
        0,
        "nothing compiled before the first product"
    );
    let a = Arc::new(random::<T>(64, 48));
    let b = random::<T>(48, 80);
    for kernel in SIMPLE_KERNELS {
        a.try_gpu_dot_with(&b, &on(kernel)).unwrap();
    }
    let after_first = nvrtc_compilations();
    assert_eq!(after_first, 2, "two families, each compiled once");
    for _ in 0..5 {
        for kernel in SIMPLE_KERNELS {
            let c = a.try_gpu_dot_with(&b, &on(kernel)).unwrap().c;
            assert_close(&c, &*a, &b, "cached module");
        }
    }
    assert_eq!(
        nvrtc_compilations(),
        after_first,
        "a cached family was compiled again"
    );
    let loads = module_loads();
    assert_eq!(loads.len(), 2);
    for l in loads {
        assert!(!l.cached, "{} came from an empty cache", l.family);
        assert!(!l.prebuilt, "{} came from a shipped CUBIN", l.family);
        println!(
            "first use of {}: NVRTC {:.1} ms, load {:.1} ms",
            l.family, l.nvrtc_ms, l.load_ms
        );
    }
    println!("{COMPILE_REPORT}");
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    auto_sends_large_products_to_the_gpu
);
fn auto_sends_large_products_to_the_gpu<T: TestElem>() {
    expect_device();
    let a = random::<T>(300, 300);
    let p = a.try_gpu_dot_with(&a, &DotOptions::builtin()).unwrap();
    assert!(p.route.is_gpu(), "{}", p.route);
    assert_close(&p.c, &a, &a, "auto");
    let c = a.gpu_dot(&a);
    assert_close(&c, &a, &a, "gpu_dot");
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    auto_plans_on_the_shape_suite
);
/// The shapes the speed goals are set on, with the Auto plans (autotuned and fixed), and
/// shapes that exercise split-K, the GEMV kernels, the unaligned entries and edge tiles.
fn auto_plans_on_the_shape_suite<T: TestElem>() {
    expect_device();
    let cap = max_dim();
    let shapes = [
        (256, 256, 256),
        (512, 512, 512),
        (1000, 1000, 1000),
        (1024, 1024, 1024),
        (2048, 2048, 2048),
        (8192, 8192, 64),
        (64, 8192, 8192),
        (8192, 64, 8192),
        (1, 4096, 4096),
        (4096, 4096, 1),
        (33, 5000, 47),
        (130, 20000, 129),
        (129, 131, 127),
        (255, 17, 513),
        (2, 3, 2),
        (3, 1, 5),
    ];
    let mut skipped = Vec::new();
    for (m, k, n) in shapes {
        if m.max(k).max(n) > cap {
            skipped.push((m, k, n));
            continue;
        }
        let a = random::<T>(m, k);
        let b = random::<T>(k, n);
        let r = reference(&a, &b);
        for autotune in [true, false] {
            let opts = on(Kernel::Auto).autotune(autotune);
            let p = a.try_gpu_dot_with(&b, &opts).unwrap();
            assert!(p.route.is_gpu(), "{}", p.route);
            check(
                &p.c,
                &a,
                &b,
                &r,
                &format!("{m}×{k}×{n} {} (autotune {autotune})", p.route),
            );
        }
        for kernel in [Kernel::Reg64, Kernel::Reg128] {
            check_kernel(kernel, a.view(), b.view(), &r, &format!("{m}×{k}×{n}"));
        }
        // Transposed operands whose leading dimensions are not multiples of 16 bytes (4 f32 or
        // 2 f64 elements) take the unaligned entries.
        let at = a.t().as_standard_layout().into_owned();
        let bt = b.t().as_standard_layout().into_owned();
        check_kernel(
            Kernel::Auto,
            at.t(),
            bt.t(),
            &r,
            &format!("{m}×{k}×{n} transposed"),
        );
    }
    println!("plans chosen: {:?}", gpu_dot::tuned_plans());
    println!("shapes above GPU_DOT_TEST_MAX_DIM={cap} left out: {skipped:?}");
}

//! Kernels that must be compiled at run time, as on a device the crate ships no CUBINs for:
//! the prebuilt images are turned off for this whole test binary, and the kernel cache points
//! at a fresh folder. `Auto` products run on the CPU while NVRTC compiles on a background
//! thread, then on the GPU; `Backend::Gpu` waits; an NVRTC failure is the typed error.

mod common;

use std::time::{Duration, Instant};

use common::{assert_close, gpu_options, random};
use gpu_dot::{warm_up, Backend, CpuReason, DotOptions, Dtype, GpuDot, GpuDotError, Kernel, Route};

/// Prebuilt CUBINs off and an empty kernel cache, once for the binary.
fn cold() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        gpu_dot::__testing::use_prebuilt_kernels(false);
        let dir = std::env::temp_dir().join(format!("gpu-dot-cold-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::env::set_var(gpu_dot::ENV_CACHE_DIR, &dir);
    });
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn auto_products_run_on_the_cpu_while_their_kernels_compile_then_on_the_gpu() {
    cold();
    let (a, b) = (random::<f32>(300, 200), random::<f32>(200, 260));
    let opts = DotOptions::builtin().min_gpu_flops(0);
    let first = a.try_gpu_dot_with(&b, &opts).unwrap();
    match &first.route {
        Route::Cpu(CpuReason::Compiling { kernels }) => assert_eq!(*kernels, "sgemm_fast"),
        other => panic!("the first product should wait for nothing, but ran: {other}"),
    }
    assert_eq!(first.c, a.dot(&b), "the CPU route is ndarray's own product");
    assert!(first.route.to_string().contains("background"));

    // warm_up waits for the compilation already running instead of starting another.
    let done = warm_up(&opts, &[Dtype::F32]).unwrap();
    assert_eq!(done.modules.len(), 1);
    let module = &done.modules[0];
    assert_eq!(module.family, "sgemm_fast");
    assert!(
        !module.prebuilt && !module.cached && module.nvrtc_ms > 0.0,
        "{module:?}"
    );

    let later = a
        .try_gpu_dot_with(&b, &opts.clone().poison_output(true))
        .unwrap();
    assert!(later.route.is_gpu(), "{}", later.route);
    assert_close(&later.c, &a, &b, "after the compilation");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_gpu_backend_waits_for_its_kernels() {
    cold();
    let (a, b) = (random::<f64>(130, 70), random::<f64>(70, 90));
    let p = a.try_gpu_dot_with(&b, &gpu_options(Kernel::Auto)).unwrap();
    assert!(p.route.is_gpu(), "{}", p.route);
    assert_close(&p.c, &a, &b, "f64, compiled in the foreground");
    let loads = gpu_dot::module_loads();
    let dgemm = loads
        .iter()
        .find(|l| l.family == "dgemm")
        .expect("dgemm loaded");
    assert!(
        !dgemm.prebuilt && (dgemm.nvrtc_ms > 0.0 || dgemm.cached),
        "{dgemm:?}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_background_nvrtc_failure_leaves_auto_on_the_cpu_and_is_the_typed_error_for_the_gpu() {
    cold();
    assert!(gpu_dot::__testing::override_kernel_source(
        "naive",
        Some("extern \"C\" __global__ void broken( { this is not CUDA }".into())
    ));
    let (a, b) = (random::<f32>(64, 64), random::<f32>(64, 64));
    let auto = DotOptions::builtin().min_gpu_flops(0).kernel(Kernel::Naive);
    let first = a.try_gpu_dot_with(&b, &auto).unwrap();
    assert!(
        matches!(
            first.route,
            Route::Cpu(CpuReason::Compiling { kernels: "naive" })
        ),
        "{}",
        first.route
    );
    assert_eq!(first.c, a.dot(&b));
    // Once the background compilation has failed, Auto stays on the CPU and says why.
    let start = Instant::now();
    loop {
        let p = a.try_gpu_dot_with(&b, &auto).unwrap();
        assert_eq!(p.c, a.dot(&b));
        match p.route {
            Route::Cpu(CpuReason::Compiling { .. }) => {}
            Route::Cpu(CpuReason::GpuUnavailable(GpuDotError::Compile { kernel, log, .. })) => {
                assert_eq!(kernel, "naive");
                assert!(!log.is_empty());
                break;
            }
            other => panic!("a broken kernel ran: {other}"),
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "NVRTC never answered"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let gpu = DotOptions::builtin()
        .backend(Backend::Gpu)
        .kernel(Kernel::Naive);
    match a.try_gpu_dot_with(&b, &gpu) {
        Err(GpuDotError::Compile {
            kernel: "naive", ..
        }) => {}
        other => panic!("expected the Compile error, got {other:?}"),
    }
    let mut out = ndarray::Array2::<f32>::from_elem((64, 64), 7.0);
    assert!(matches!(
        gpu_dot::try_general_mat_mul_with(1.0, &a, &b, 0.0, &mut out, &gpu),
        Err(GpuDotError::Compile { .. })
    ));
    assert!(
        out.iter().all(|&x| x == 7.0),
        "a failed product loses nothing"
    );
}

/// A process that exits while NVRTC compiles on a background thread exits cleanly (status 0,
/// no crash at exit), and leaves the kernel cache usable: a later process with the same cache
/// folder computes right on the GPU. Each process is a child of this test.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_process_that_exits_while_compiling_exits_cleanly() {
    const CHILD: &str = "GPU_DOT_TEST_EXIT_CHILD";
    const NAME: &str = "a_process_that_exits_while_compiling_exits_cleanly";
    match std::env::var(CHILD).as_deref() {
        Ok("leave") => {
            let (a, b) = (random::<f64>(200, 200), random::<f64>(200, 200));
            let p = a
                .try_gpu_dot_with(&b, &DotOptions::builtin().min_gpu_flops(0))
                .unwrap();
            assert!(
                matches!(
                    p.route,
                    Route::Cpu(CpuReason::Compiling { kernels: "dgemm" })
                ),
                "{}",
                p.route
            );
            assert!(gpu_dot::nvrtc_compilations_in_flight() >= 1);
            // The test returns and the process exits with NVRTC still running.
            return;
        }
        Ok("after") => {
            let (a, b) = (random::<f64>(200, 200), random::<f64>(200, 200));
            let p = a.try_gpu_dot_with(&b, &gpu_options(Kernel::Auto)).unwrap();
            assert!(p.route.is_gpu(), "{}", p.route);
            assert_close(&p.c, &a, &b, "after a process left mid-compilation");
            return;
        }
        _ => {}
    }
    let dir = std::env::temp_dir().join(format!("gpu-dot-exit-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for stage in ["leave", "after"] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", NAME, "--nocapture", "--include-ignored"])
            .env(CHILD, stage)
            .env(gpu_dot::ENV_PREBUILT, "off")
            .env(gpu_dot::ENV_CACHE_DIR, &dir)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "the {stage} child failed ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

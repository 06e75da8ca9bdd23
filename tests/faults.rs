//! Faults: no driver library, no NVRTC, an absent device, NVRTC rejecting a source (through
//! cudarc, and through the crate with a test-only source override), device memory exhausted,
//! requests the kernels cannot take, a kernel that faults on the device while other threads
//! multiply, and products after each of them. Each GPU test runs for both element types
//! (`NAME::f32`, `NAME::f64`), with products of that type.
//!
//! On a machine with a CUDA GPU: `cargo test --release --test faults -- --include-ignored`.
//!
//! # How a library is made unloadable
//!
//! cudarc 0.19 (`dynamic-loading`) opens the driver and NVRTC by bare file name, trying each
//! name of `cudarc::get_lib_name_candidates` in turn (`libcuda.so`, `libcuda.so.1`, …;
//! `libnvrtc.so`, `libnvrtc.so.12`, …) through `dlopen`. For a name without a slash, glibc's
//! `dlopen` looks in `DT_RPATH`, then `LD_LIBRARY_PATH`, then `DT_RUNPATH`, then the
//! `ld.so.cache`, then `/lib` and `/usr/lib`; the first file found with the name is the one it
//! loads, and if that file is not an ELF object `dlopen` fails with "invalid ELF header"
//! without looking further (only ELF objects of another class or machine are passed over).
//! So a child process whose `LD_LIBRARY_PATH` starts with a fresh folder holding a non-ELF
//! file under every candidate name cannot load the library, even when the real one is in the
//! loader cache. The test binaries carry no `DT_RPATH`.
//! `ld_library_path_garbage_shadows_the_loader_cache` checks this behaviour of the loader on
//! any glibc machine, with a library that is always in the cache (`libresolv.so.2`).
//!
//! The child processes run the test binary itself (`--exact NAME`) with a marker variable;
//! the `CUDA_VISIBLE_DEVICES=` case is `without_a_visible_device_auto_falls_back_and_gpu_errors`
//! in `tests/cpu.rs`. The child tests are ignored without a GPU: on a machine with no driver
//! they would check nothing the CPU tests do not.
//!
//! The tests that use the device in this process hold [`device_lock`], so that the one that
//! fills device memory never runs beside another. compute-sanitizer reports the failing
//! allocations that test provokes as API errors: under it, pass
//! `--skip exhausted_device_memory`, and `--skip a_device_fault` (its fault is deliberate).

mod common;

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

use common::{assert_close, both_types, check, random, reference, test_name, Hog, TestElem};
use gpu_dot::{
    device_status, nvrtc_compilations, Backend, CpuReason, DeviceInfo, DeviceStatus, DotOptions,
    GpuDot, GpuDotError, Kernel, Route,
};
use ndarray::{Array1, Array2};

/// The marker variable a child process finds its test's name in.
const CHILD: &str = "GPU_DOT_TEST_FAULTS_CHILD";

/// Serialises the tests of this process that use the device.
fn device_lock() -> MutexGuard<'static, ()> {
    static DEVICE: Mutex<()> = Mutex::new(());
    DEVICE.lock().unwrap_or_else(|p| p.into_inner())
}

fn expect_device() -> DeviceInfo {
    match device_status() {
        DeviceStatus::Ready(info) => info,
        DeviceStatus::Unavailable(reason) => panic!("this test needs a CUDA GPU: {reason}"),
    }
}

/// Whether this process is the child spawned for `test`.
fn is_child(test: &str) -> bool {
    std::env::var(CHILD).is_ok_and(|v| v == test)
}

/// Runs `test` alone in a child process of this test binary with the extra variables `env`,
/// and asserts that it ran and passed. The child's output is printed.
fn run_child(test: &str, env: &[(&str, OsString)]) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--include-ignored"])
        .env(CHILD, test)
        // The children check Auto and gpu_dot's defaults.
        .env_remove(gpu_dot::ENV_BACKEND)
        .env_remove(gpu_dot::ENV_MIN_FLOPS)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("the test binary starts again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("child {test}:\n{stdout}{stderr}");
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child {test} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

/// A fresh temporary folder, removed on drop, holding a file that is not an ELF object under
/// each name given.
struct GarbageLibs {
    dir: common::TempDir,
}

impl GarbageLibs {
    fn new(names: &[String]) -> GarbageLibs {
        let dir = common::TempDir::new("garbage-libs");
        // Longer than an ELF header, so that the loader reads it and rejects its magic.
        let garbage = "not a shared library: a placeholder that shadows the real one\n".repeat(4);
        for name in names {
            std::fs::write(dir.0.join(name), &garbage).unwrap();
        }
        GarbageLibs { dir }
    }

    /// `LD_LIBRARY_PATH` for a child: this folder first, then the current value.
    fn ld_library_path(&self) -> OsString {
        let mut paths = vec![self.dir.0.clone()];
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
            paths.extend(std::env::split_paths(&old));
        }
        std::env::join_paths(paths).unwrap()
    }

    fn dir(&self) -> &Path {
        &self.dir.0
    }
}

/// Every file name cudarc tries for the libraries `libs` (e.g. `["cuda", "nvcuda"]`), plus
/// `extra`.
fn candidates(libs: &[&str], extra: &[&str]) -> Vec<String> {
    let mut names: Vec<String> = libs
        .iter()
        .flat_map(|lib| cudarc::get_lib_name_candidates(lib))
        .chain(extra.iter().map(|s| s.to_string()))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// What must hold in a process with no usable GPU: the status names why (`reason_has`), Auto
/// products of `T` large enough for the GPU come back right from the CPU with the reason, the
/// GPU backend is a `NoDevice` error, and `gpu_dot` gives the right product.
fn check_no_gpu_fallback<T: TestElem>(reason_has: &str) {
    let status = device_status();
    println!("device status: {status}");
    let DeviceStatus::Unavailable(reason) = status else {
        panic!("a device is usable: {status:?}");
    };
    assert!(
        reason.contains(reason_has),
        "the reason {reason:?} does not name {reason_has:?}"
    );
    let (a, b) = (random::<T>(256, 256), random::<T>(256, 256));
    let at = random::<T>(256, 256); // read through at.t(): F order
    for (what, a) in [("C order", a.view()), ("F order", at.t())] {
        let want = reference(&a, &b);
        let p = a.try_gpu_dot_with(&b, &DotOptions::builtin()).unwrap();
        match &p.route {
            Route::Cpu(CpuReason::GpuUnavailable(GpuDotError::NoDevice { reason: r })) => {
                assert_eq!(r, &reason)
            }
            other => panic!("{what}: Auto took {other:?}"),
        }
        check(&p.c, &a, &b, &want, &format!("Auto, {what}, CPU fallback"));
        match a.try_gpu_dot_with(&b, &DotOptions::builtin().backend(Backend::Gpu)) {
            Err(GpuDotError::NoDevice { reason: r }) => assert_eq!(r, reason),
            other => panic!("{what}: Backend::Gpu gave {other:?}"),
        }
        check(&a.gpu_dot(&b), &a, &b, &want, &format!("gpu_dot, {what}"));
        check(&a.try_gpu_dot(&b).unwrap(), &a, &b, &want, "try_gpu_dot");
    }
}

/// The loader behaviour the child tests rely on: a non-ELF file early in `LD_LIBRARY_PATH`
/// makes `dlopen` of its name fail, although the real library is in the loader cache.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn ld_library_path_garbage_shadows_the_loader_cache() {
    const NAME: &str = "ld_library_path_garbage_shadows_the_loader_cache";
    const LIB: &str = "libresolv.so.2"; // part of glibc, in every loader cache
    if is_child(NAME) {
        let dir = std::env::var("GPU_DOT_TEST_GARBAGE_DIR").unwrap();
        let err = dl::open(LIB).expect_err("the garbage file was not in the way");
        assert!(
            err.contains(&dir) && err.contains("invalid ELF header"),
            "dlopen failed, but not on the garbage file: {err}"
        );
        return;
    }
    dl::open(LIB).unwrap_or_else(|e| panic!("{LIB} does not load here: {e}"));
    let garbage = GarbageLibs::new(&[LIB.to_string()]);
    run_child(
        NAME,
        &[
            ("LD_LIBRARY_PATH", garbage.ld_library_path()),
            ("GPU_DOT_TEST_GARBAGE_DIR", garbage.dir().into()),
        ],
    );
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod dl {
    use std::ffi::{c_char, c_int, c_void, CStr, CString};

    extern "C" {
        fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
        fn dlerror() -> *mut c_char;
        fn dlclose(handle: *mut c_void) -> c_int;
    }
    const RTLD_NOW: c_int = 2;

    /// `dlopen(name, RTLD_NOW)` then `dlclose`, or `dlerror()`'s text.
    pub fn open(name: &str) -> Result<(), String> {
        let name = CString::new(name).unwrap();
        // SAFETY: `name` is a NUL-terminated string alive across the call; the library opened
        // is glibc's own libresolv, whose initialisers have no preconditions; the handle is
        // closed once and not used after; `dlerror` returns NULL or a NUL-terminated string
        // valid until the next dl call on this thread, copied before any.
        unsafe {
            let handle = dlopen(name.as_ptr(), RTLD_NOW);
            if handle.is_null() {
                let err = dlerror();
                return Err(if err.is_null() {
                    "dlopen failed without a message".into()
                } else {
                    CStr::from_ptr(err).to_string_lossy().into_owned()
                });
            }
            dlclose(handle);
        }
        Ok(())
    }
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    without_the_driver_library_auto_falls_back_and_gpu_errors
);
/// The driver library cannot be loaded: Auto computes on the CPU, the GPU backend is an error.
fn without_the_driver_library_auto_falls_back_and_gpu_errors<T: TestElem>() {
    let name = test_name::<T>("without_the_driver_library_auto_falls_back_and_gpu_errors");
    if is_child(&name) {
        // SAFETY: only tries to open the library (every candidate name); no symbol is called.
        assert!(!unsafe { cudarc::driver::sys::is_culib_present() });
        check_no_gpu_fallback::<T>("libcuda");
        return;
    }
    let _device = device_lock();
    // The driver loads in this process: whatever fails in the child is the shadowing.
    expect_device();
    let garbage = GarbageLibs::new(&candidates(&["cuda", "nvcuda"], &["libcuda.so.1"]));
    run_child(&name, &[("LD_LIBRARY_PATH", garbage.ld_library_path())]);
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    without_nvrtc_auto_falls_back_and_gpu_errors
);
/// NVRTC cannot be loaded while the driver can (a driver-only install): Auto computes on the
/// CPU, the GPU backend is an error.
fn without_nvrtc_auto_falls_back_and_gpu_errors<T: TestElem>() {
    let name = test_name::<T>("without_nvrtc_auto_falls_back_and_gpu_errors");
    if is_child(&name) {
        // SAFETY: these only try to open the libraries; no symbol is called.
        let (driver, nvrtc) = unsafe {
            (
                cudarc::driver::sys::is_culib_present(),
                cudarc::nvrtc::sys::is_culib_present(),
            )
        };
        assert!(driver, "the driver library should still load");
        assert!(!nvrtc, "NVRTC loaded despite the shadowing");
        check_no_gpu_fallback::<T>("libnvrtc");
        return;
    }
    let _device = device_lock();
    expect_device();
    let garbage = GarbageLibs::new(&candidates(
        &["nvrtc"],
        &["libnvrtc.so", "libnvrtc.so.12", "libnvrtc.so.13"],
    ));
    run_child(
        &name,
        &[
            ("LD_LIBRARY_PATH", garbage.ld_library_path()),
            // No compiled kernels from an earlier process either.
            ("GPU_DOT_CACHE_DIR", "off".into()),
        ],
    );
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    an_absent_device_ordinal_is_unavailable_and_auto_falls_back
);
/// `GPU_DOT_DEVICE` naming a device that is not there: unavailable, with the count found.
fn an_absent_device_ordinal_is_unavailable_and_auto_falls_back<T: TestElem>() {
    let name = test_name::<T>("an_absent_device_ordinal_is_unavailable_and_auto_falls_back");
    if is_child(&name) {
        check_no_gpu_fallback::<T>("device 99 asked for, but only");
        return;
    }
    let _device = device_lock();
    expect_device();
    run_child(&name, &[("GPU_DOT_DEVICE", "99".into())]);
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    nvrtc_rejections_leave_later_compilations_working
);
/// NVRTC rejecting a source. The crate compiles only its own kernel sources and has no public
/// way to be handed another, so this checks the layer below it, in a process where the
/// rejections come before any other compilation: cudarc returns NVRTC's log for a source with
/// an error and for an architecture NVRTC does not know (as for a device newer than the
/// NVRTC), and the crate's own compilations and products succeed afterwards.
fn nvrtc_rejections_leave_later_compilations_working<T: TestElem>() {
    let name = test_name::<T>("nvrtc_rejections_leave_later_compilations_working");
    if is_child(&name) {
        use cudarc::nvrtc::{compile_ptx_with_opts, CompileError, CompileOptions};
        let info = expect_device();
        let (major, minor) = info.compute_capability;
        let compile = |source: &str, arch: String| {
            compile_ptx_with_opts(
                source,
                CompileOptions {
                    options: vec![format!("--gpu-architecture={arch}")],
                    name: Some("broken.cu".into()),
                    ..Default::default()
                },
            )
        };
        let broken = r#"extern "C" __global__ void broken(float* x) { x[0] = not_declared; }"#;
        match compile(broken, format!("sm_{major}{minor}")) {
            Err(CompileError::CompileError { log, .. }) => {
                let log = log.to_string_lossy();
                println!("NVRTC log for a broken source:\n{log}");
                assert!(
                    log.contains("not_declared"),
                    "the log misses the error: {log}"
                );
            }
            other => panic!("expected NVRTC's compile error, got {other:?}"),
        }
        let fine = r#"extern "C" __global__ void fine(float* x) { x[0] = 1.0f; }"#;
        match compile(fine, "sm_1".into()) {
            Err(CompileError::CompileError { log, options, .. }) => {
                println!("NVRTC log for {options:?}:\n{}", log.to_string_lossy())
            }
            other => panic!("expected NVRTC to refuse the architecture, got {other:?}"),
        }
        assert_eq!(
            nvrtc_compilations(),
            0,
            "the crate compiled before the test"
        );
        // The crate's own compilation (the naive family, its shipped CUBIN set aside), then
        // products on every family.
        gpu_dot::__testing::use_prebuilt_kernels(false);
        let naive = DotOptions::builtin().kernel(Kernel::Naive);
        let done = gpu_dot::warm_up(&naive, &[T::DTYPE]).unwrap();
        assert!(done.modules.iter().all(|m| m.nvrtc_ms > 0.0), "{done:?}");
        assert!(
            nvrtc_compilations() > 0,
            "the kernels were not compiled in this process"
        );
        gpu_dot::__testing::use_prebuilt_kernels(true);
        products_succeed_on_every_family::<T>("after NVRTC errors and a compilation");
        return;
    }
    let _device = device_lock();
    expect_device();
    run_child(&name, &[("GPU_DOT_CACHE_DIR", "off".into())]);
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    exhausted_device_memory_is_an_error_then_products_recover
);
/// Device memory exhausted: the GPU backend fails with `OutOfMemory` (or another typed error,
/// printed), Auto falls back to the CPU with that reason, and once the memory is free again
/// GPU products succeed with every kernel family.
fn exhausted_device_memory_is_an_error_then_products_recover<T: TestElem>() {
    let _device = device_lock();
    let info = expect_device();
    // B, which a product keeps whole on the device, is 64 MiB in f32 and 128 MiB in f64; the
    // hog leaves about 8 MiB.
    let (m, k, n) = (256, 4096, 4096);
    let b_bytes = k * n * T::DTYPE.size();
    let leave = 8 << 20;
    let (a, b) = (random::<T>(m, k), random::<T>(k, n));
    let r = reference(&a, &b);
    let gpu = DotOptions::builtin().backend(Backend::Gpu);
    // First GPU use: modules compiled, streams made, the shape class tuned.
    let warm = a.try_gpu_dot_with(&b, &gpu).unwrap();
    assert!(warm.route.is_gpu(), "{}", warm.route);
    check(
        &warm.c,
        &a,
        &b,
        &r,
        "Backend::Gpu before the device is full",
    );

    // The crate keeps the buffers of finished products for reuse; free them, so that the next
    // product has to allocate while the device is full.
    gpu_dot::trim();
    let ctx = cudarc::driver::CudaContext::new(info.ordinal).unwrap();
    let hog = Hog::fill(&ctx, leave);
    let (free, total) = ctx.mem_get_info().unwrap();
    println!(
        "held {} MiB outside the crate; {} MiB of {} MiB free",
        hog.bytes() >> 20,
        free >> 20,
        total >> 20
    );
    assert!(
        free < b_bytes,
        "could not fill the device: {free} bytes free, B alone needs {b_bytes}"
    );

    match a.try_gpu_dot_with(&b, &gpu) {
        Err(GpuDotError::OutOfMemory { bytes }) => {
            println!("Backend::Gpu: OutOfMemory {{ bytes: {bytes} }} with {free} bytes free")
        }
        Err(e @ GpuDotError::Driver { .. }) => println!("Backend::Gpu: driver error {e}"),
        other => panic!("Backend::Gpu with the device full gave {other:?}"),
    }
    let p = a.try_gpu_dot_with(&b, &DotOptions::builtin()).unwrap();
    match &p.route {
        Route::Cpu(CpuReason::GpuUnavailable(
            GpuDotError::OutOfMemory { .. } | GpuDotError::Driver { .. },
        )) => println!("Backend::Auto: {}", p.route),
        other => panic!("Auto with the device full took {other:?}"),
    }
    check(&p.c, &a, &b, &r, "Auto with the device full");
    check(&a.gpu_dot(&b), &a, &b, &r, "gpu_dot with the device full");

    hog.release();
    let (free, _) = ctx.mem_get_info().unwrap();
    assert!(
        free > 4 * b_bytes,
        "the memory did not come back: {free} bytes free"
    );
    let p = a
        .try_gpu_dot_with(&b, &gpu)
        .expect("a GPU product after the memory is back");
    assert!(p.route.is_gpu(), "{}", p.route);
    check(&p.c, &a, &b, &r, "Backend::Gpu after the memory is back");
    products_succeed_on_every_family::<T>("after running out of device memory");
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    a_dimension_above_i32_max_is_too_large_then_products_succeed
);
/// A dimension above `i32::MAX` (broadcast views: no memory behind them) is `TooLarge` on the
/// GPU backend, and products succeed afterwards.
fn a_dimension_above_i32_max_is_too_large_then_products_succeed<T: TestElem>() {
    let _device = device_lock();
    expect_device();
    let big = i32::MAX as usize + 1;
    let one = Array1::from_elem(1, T::from_f64(0.5));
    let small = Array2::from_elem((1, 1), T::from_f64(0.25));
    let tall = one.broadcast((big, 1)).unwrap(); // m = big
    let wide = one.broadcast((1, big)).unwrap(); // k or n = big
    let gpu = DotOptions::builtin().backend(Backend::Gpu);
    for (what, result, dims) in [
        ("m", tall.try_gpu_dot_with(&small, &gpu), (big, 1, 1)),
        ("k", wide.try_gpu_dot_with(&tall, &gpu), (1, big, 1)),
        ("n", small.try_gpu_dot_with(&wide, &gpu), (1, 1, big)),
    ] {
        match result {
            Err(GpuDotError::TooLarge { dims: d }) => assert_eq!(d, dims, "{what}"),
            other => panic!("{what} = 2^31: expected TooLarge, got {other:?}"),
        }
    }
    products_succeed_on_every_family::<T>("after TooLarge");
}

/// The file names in the kernel cache folder `dir` (none when it was never made).
fn cache_names(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Products of `T` on the GPU with each kernel family (naive, tiled, register-blocked),
/// checked against the reference.
fn products_succeed_on_every_family<T: TestElem>(when: &str) {
    let (a, b) = (random::<T>(257, 300), random::<T>(300, 129));
    for kernel in [Kernel::Naive, Kernel::Tiled32, Kernel::Reg128, Kernel::Auto] {
        let opts = DotOptions::builtin().backend(Backend::Gpu).kernel(kernel);
        let p = a
            .try_gpu_dot_with(&b, &opts)
            .unwrap_or_else(|e| panic!("{kernel} {when}: {e}"));
        assert!(p.route.is_gpu(), "{kernel} {when}: {}", p.route);
        assert_close(&p.c, &a, &b, &format!("{kernel} {when}"));
    }
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    a_device_fault_is_contained_while_threads_multiply
);
/// A sticky fault, raised by a kernel that traps or one that writes to an illegal address
/// (through the crate's hidden test hook; each in its own process), while eight threads
/// multiply: every product either succeeds with the right answer or fails with a typed error,
/// no thread hangs, and `gpu_dot` (Auto) always answers correctly. Afterwards either the
/// context was rebuilt (tuned plans kept, device matrices made before the fault lost, products
/// on the GPU again and right) or, where the driver refuses every new context of a process
/// after a fault, the GPU reports itself unavailable with that reason and `Auto` answers on
/// the CPU; device matrices made before the fault fail with typed errors and drop safely.
fn a_device_fault_is_contained_while_threads_multiply<T: TestElem>() {
    let name = test_name::<T>("a_device_fault_is_contained_while_threads_multiply");
    const KIND: &str = "GPU_DOT_TEST_FAULT_KIND";
    if !is_child(&name) {
        let _device = device_lock();
        expect_device();
        for kind in ["trap", "illegal-address"] {
            run_child(&name, &[(KIND, kind.into())]);
        }
        return;
    }
    use gpu_dot::__testing::{raise_device_fault, Fault};
    use gpu_dot::{context_rebuilds, tuned_plans, GpuMatrix};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    let kind = match std::env::var(KIND).as_deref() {
        Ok("trap") => Fault::Trap,
        Ok("illegal-address") => Fault::IllegalAddress,
        other => panic!("{KIND}: {other:?}"),
    };
    expect_device();
    products_succeed_on_every_family::<T>("before the fault");
    let shapes = [
        (300, 200, 500),
        (512, 512, 512),
        (1024, 256, 1000),
        (1, 2048, 1024),
    ];
    let gpu = DotOptions::builtin().backend(Backend::Gpu);
    for &(m, k, n) in &shapes {
        let (a, b) = (random::<T>(m, k), random::<T>(k, n));
        for _ in 0..4 {
            let c = a.try_gpu_dot_with(&b, &gpu).unwrap().c;
            assert_close(&c, &a, &b, "warm-up");
        }
    }
    let plans_before = tuned_plans().len();
    assert!(plans_before > 0, "nothing was tuned");
    let old = GpuMatrix::from_array(&random::<T>(64, 64)).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let workers: Vec<_> = (0..8)
        .map(|t| {
            let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
            std::thread::spawn(move || {
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    let (m, k, n) = shapes[i % shapes.len()];
                    i += 1;
                    let (a, b) = (random::<T>(m, k), random::<T>(k, n));
                    if t % 2 == 0 {
                        // Auto: always an answer, and always the right one.
                        assert_close(&a.gpu_dot(&b), &a, &b, "gpu_dot under a fault");
                        ok.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let opts = DotOptions::builtin().backend(Backend::Gpu);
                    match a.try_gpu_dot_with(&b, &opts) {
                        Ok(p) => {
                            assert_close(&p.c, &a, &b, "GPU under a fault");
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(
                            GpuDotError::DeviceFault { .. }
                            | GpuDotError::Driver { .. }
                            | GpuDotError::NoDevice { .. },
                        ) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => panic!("unexpected error under a fault: {e}"),
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    match raise_device_fault(kind) {
        Err(GpuDotError::DeviceFault {
            context, source, ..
        }) => {
            println!("{kind:?}: DeviceFault while {context}: {source:?}")
        }
        other => panic!("{kind:?}: expected a DeviceFault, got {other:?}"),
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(60);
    for w in workers {
        while !w.is_finished() {
            assert!(Instant::now() < deadline, "a worker hung after the fault");
            std::thread::sleep(Duration::from_millis(10));
        }
        w.join()
            .expect("a worker panicked (a wrong answer or an unexpected error)");
    }
    println!(
        "{kind:?}: {} products answered, {} failed with typed errors",
        ok.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    );

    let (a, b) = (random::<T>(700, 300), random::<T>(300, 500));
    let host = random::<T>(64, 64);
    match a.try_gpu_dot_with(&b, &gpu) {
        Ok(p) => {
            println!("{kind:?}: the context was rebuilt");
            assert!(p.route.is_gpu(), "{}", p.route);
            assert_close(&p.c, &a, &b, "after the fault");
            assert_eq!(context_rebuilds(), 1);
            assert!(tuned_plans().len() >= plans_before, "tuned plans were lost");
            assert!(matches!(
                old.to_array(),
                Err(GpuDotError::MatrixLost { dim: (64, 64) })
            ));
            assert!(matches!(
                GpuMatrix::product(&host, &old),
                Err(GpuDotError::MatrixLost { .. })
            ));
            let fresh = GpuMatrix::from_array(&host).unwrap();
            assert_eq!(fresh.to_array().unwrap(), host);
            products_succeed_on_every_family::<T>("after the fault");
        }
        Err(GpuDotError::NoDevice { reason }) => {
            println!("{kind:?}: no new context: {reason}");
            assert!(reason.contains("faulted"), "{reason}");
            assert_eq!(context_rebuilds(), 0);
            assert!(matches!(device_status(), DeviceStatus::Unavailable(r) if r == reason));
            let p = a.try_gpu_dot_with(&b, &DotOptions::builtin()).unwrap();
            assert!(
                matches!(&p.route, Route::Cpu(CpuReason::GpuUnavailable(_))),
                "{}",
                p.route
            );
            assert_close(&p.c, &a, &b, "Auto after the fault");
            assert!(old.to_array().is_err());
            assert!(GpuMatrix::product(&host, &old).is_err());
            assert!(GpuMatrix::from_array(&host).is_err());
        }
        Err(e) => panic!("{kind:?}: after the fault: {e}"),
    }
    drop(old);
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    an_nvrtc_rejection_through_the_crate_falls_back_and_spares_other_families
);
/// NVRTC rejecting one of the crate's kernel families, through the crate (a test-only source
/// override): the product asking for that family gets [`GpuDotError::Compile`] with NVRTC's
/// log, `Auto` answers on the CPU, the other families still compile and run, and the rejected
/// source leaves nothing in the kernel cache.
fn an_nvrtc_rejection_through_the_crate_falls_back_and_spares_other_families<T: TestElem>() {
    let name =
        test_name::<T>("an_nvrtc_rejection_through_the_crate_falls_back_and_spares_other_families");
    if !is_child(&name) {
        let _device = device_lock();
        expect_device();
        let dir =
            std::env::temp_dir().join(format!("gpu-dot-nvrtc-{}-{}", std::process::id(), T::DTYPE));
        let _ = std::fs::remove_dir_all(&dir);
        run_child(&name, &[("GPU_DOT_CACHE_DIR", dir.clone().into())]);
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    use gpu_dot::__testing::override_kernel_source;
    let broken =
        r#"extern "C" __global__ void sgemm_tiled_16_nn(float* x) { x[0] = not_declared; }"#;
    assert!(override_kernel_source("tiled", Some(broken.into())));
    assert!(!override_kernel_source("no such family", None));
    let (a, b) = (random::<T>(300, 200), random::<T>(200, 100));
    let gpu = DotOptions::builtin()
        .backend(Backend::Gpu)
        .kernel(Kernel::Tiled16);
    match a.try_gpu_dot_with(&b, &gpu) {
        Err(GpuDotError::Compile { kernel, log, .. }) => {
            println!("NVRTC's log for the tiled family:\n{log}");
            assert_eq!(kernel, "tiled");
            assert!(
                log.contains("not_declared"),
                "the log misses the error: {log}"
            );
        }
        other => panic!("expected a Compile error, got {other:?}"),
    }
    // Auto falls back to the CPU and says why; the answer is right.
    let auto = DotOptions::builtin()
        .backend(Backend::Auto)
        .kernel(Kernel::Tiled16)
        .min_gpu_flops(0);
    let p = a.try_gpu_dot_with(&b, &auto).unwrap();
    match &p.route {
        Route::Cpu(CpuReason::GpuUnavailable(GpuDotError::Compile { .. })) => {}
        other => panic!("expected a CPU fallback for the compile error, got {other}"),
    }
    assert_close(&p.c, &a, &b, "Auto after a rejection");
    // The other families compile and run.
    for kernel in [Kernel::Naive, Kernel::Reg128, Kernel::Auto] {
        let opts = DotOptions::builtin().backend(Backend::Gpu).kernel(kernel);
        let p = a.try_gpu_dot_with(&b, &opts).unwrap();
        assert!(p.route.is_gpu());
        assert_close(&p.c, &a, &b, "another family after a rejection");
    }
    // The other families came from the shipped CUBINs or were compiled and cached; the
    // rejected one left nothing in the cache.
    let dir = gpu_dot::kernel_cache_dir().expect("the cache is on");
    let names = cache_names(&dir);
    assert!(!names.iter().any(|n| n.starts_with("tiled")), "{names:?}");
    for load in gpu_dot::module_loads() {
        assert!(
            load.prebuilt || names.iter().any(|n| n.starts_with(load.family)),
            "{load:?} neither shipped nor cached: {names:?}"
        );
    }
}

/// NVRTC rejecting the warpgroup family (kernels/sgemm_wg.cu, through the test-only source
/// override): 3xTF32 and TF32 products that would run on it fall back to the mma.sync
/// tensor-core kernels, in the precision asked for and within its bound, instead of failing.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_warpgroup_family_nvrtc_rejects_falls_back_to_the_mma_sync_kernels() {
    let name = "a_warpgroup_family_nvrtc_rejects_falls_back_to_the_mma_sync_kernels";
    if !is_child(name) {
        let _device = device_lock();
        expect_device();
        let dir = std::env::temp_dir().join(format!("gpu-dot-nvrtc-wg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        run_child(name, &[("GPU_DOT_CACHE_DIR", dir.clone().into())]);
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    use gpu_dot::__testing::override_kernel_source;
    use gpu_dot::Precision;
    let broken = r#"extern "C" __global__ void sgemm_wg_pack(float* x) { x[0] = not_declared; }"#;
    assert!(override_kernel_source("sgemm_wg", Some(broken.into())));
    let (a, b) = (random::<f32>(300, 700), random::<f32>(700, 260));
    for precision in [Precision::Tf32x3, Precision::Tf32] {
        for kernel in [Kernel::Reg128, Kernel::Auto] {
            let opts = DotOptions::builtin()
                .backend(Backend::Gpu)
                .kernel(kernel)
                .precision(precision)
                .poison_output(true);
            let p = a.try_gpu_dot_with(&b, &opts).unwrap();
            match &p.route {
                Route::Gpu { precision: ran, .. } => assert_eq!(*ran, precision, "{}", p.route),
                other => panic!("expected a GPU route, got {other}"),
            }
            let r = reference(&a, &b);
            let e = gpu_dot::profile::relative_error_to(p.c.view(), &r);
            let bound = if precision == Precision::Tf32 {
                1e-3
            } else {
                1e-5
            };
            assert!(e < bound, "{precision} {kernel}: relative error {e:.2e}");
        }
    }
    // The mma.sync families ran (on an sm_90 device only the fallback asks for their big
    // tile), from the shipped CUBINs or compiled and cached; the rejected family left nothing
    // in the cache and was never loaded.
    let dir = gpu_dot::kernel_cache_dir().expect("the cache is on");
    let names = cache_names(&dir);
    let loads = gpu_dot::module_loads();
    for family in ["sgemm_tf32x3", "sgemm_tf32"] {
        let load = loads.iter().find(|l| l.family == family);
        assert!(
            load.is_some_and(
                |l| l.prebuilt || names.iter().any(|n| n.starts_with(&format!("{family}-")))
            ),
            "{family}: {load:?}, cache {names:?}"
        );
    }
    assert!(
        !names.iter().any(|n| n.starts_with("sgemm_wg")),
        "{names:?}"
    );
    assert!(!loads.iter().any(|l| l.family == "sgemm_wg"), "{loads:?}");
}

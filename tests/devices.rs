//! The device axis: products and device matrices on a chosen device, each device with its
//! own context, and device memory that never crosses devices unasked.
//!
//! The tests without `ignore` run anywhere (on a machine without a GPU they check the
//! answers a missing device gets). Those ignored with "needs a CUDA GPU" run on one device
//! (`cargo test --test devices -- --include-ignored`); those whose names start with
//! `two_devices_` need two CUDA GPUs: they are built with the `two-gpus` feature alone
//! (`cargo test --features two-gpus --test devices -- --include-ignored two_devices_`), so that
//! the README's test command passes on a machine with one GPU; with the feature and fewer than
//! two devices they fail, naming what they need.

mod common;

use common::{check, random, reference};
use gpu_dot::{
    Backend, CpuReason, Device, DeviceStatus, DotOptions, GpuDot, GpuDotError, GpuMatrix, Route,
};

fn gpu() -> DotOptions {
    DotOptions::builtin()
        .backend(Backend::Gpu)
        .poison_output(true)
}

/// GPU tests take this lock: one of them faults a device on purpose.
static DEVICE_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn device_lock() -> std::sync::MutexGuard<'static, ()> {
    DEVICE_LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn expect_devices(n: usize) {
    let found = Device::count();
    assert!(
        found >= n,
        "this test needs {n} CUDA devices, found {found} ({})",
        gpu_dot::device_status()
    );
    for d in Device::all().into_iter().take(n) {
        assert!(
            matches!(d.status(), DeviceStatus::Ready(_)),
            "{d}: {}",
            d.status()
        );
    }
}

#[test]
fn the_device_option_parses_from_the_environment() {
    let opts = DotOptions::from_lookup(|name| (name == "GPU_DOT_DEVICE").then(|| " 3 ".into()))
        .expect("an ordinal parses");
    assert_eq!(opts.device, Some(3));
    assert_eq!(DotOptions::builtin().device, None);
    assert_eq!(DotOptions::builtin().device(2).device, Some(2));
    match DotOptions::from_lookup(|name| (name == "GPU_DOT_DEVICE").then(|| "first".into())) {
        Err(GpuDotError::InvalidEnv { var, value, .. }) => {
            assert_eq!((var, value.as_str()), ("GPU_DOT_DEVICE", "first"));
        }
        other => panic!("expected InvalidEnv, got {other:?}"),
    }
}

#[test]
fn device_handles_describe_themselves_and_never_panic() {
    let d = Device::new(5);
    assert_eq!(d.ordinal(), 5);
    assert_eq!(d.to_string(), "device 5");
    assert!(Device::new(1) < Device::new(2));
    assert_eq!(Device::all().len(), Device::count());
    // Far beyond any machine: a reason, never a panic.
    match Device::new(1000).status() {
        DeviceStatus::Unavailable(reason) => assert!(!reason.is_empty()),
        other => panic!("device 1000 is not unavailable: {other:?}"),
    }
    assert_eq!(Device::new(1000).module_loads(), vec![]);
    assert_eq!(Device::new(1000).retained_memory(), (0, 0));
    assert_eq!(Device::new(1000).context_rebuilds(), 0);
}

/// A product sent to a device that is not there: `Auto` computes on the CPU and says why,
/// `Gpu` is an error naming the device; other devices are not affected.
#[test]
fn an_absent_device_in_the_options_falls_back_under_auto_and_is_an_error_under_gpu() {
    let (a, b) = (random::<f32>(200, 190), random(190, 210));
    let absent = Device::count() + 7;
    let auto = DotOptions::builtin().min_gpu_flops(0).device(absent);
    let p = a.try_gpu_dot_with(&b, &auto).expect("Auto never fails");
    match &p.route {
        Route::Cpu(CpuReason::GpuUnavailable(e)) => {
            assert!(matches!(e, GpuDotError::NoDevice { .. }), "{e:?}");
        }
        other => panic!("expected a CPU fallback, got {other:?}"),
    }
    check(&p.c, &a, &b, &reference(&a, &b), "fallback");
    match a.try_gpu_dot_with(&b, &gpu().device(absent)) {
        Err(GpuDotError::NoDevice { reason }) => {
            // With a driver, the reason names the device and the count found.
            if Device::count() > 0 {
                assert!(reason.contains(&format!("device {absent}")), "{reason}");
            }
        }
        other => panic!("expected NoDevice, got {:?}", other.map(|p| p.route)),
    }
    assert!(matches!(
        GpuMatrix::<f32>::zeros_on((2, 2), Device::new(absent)),
        Err(GpuDotError::NoDevice { .. })
    ));
}

/// One device, named explicitly: products, device matrices and their copies live there.
#[test]
#[ignore = "needs a CUDA GPU"]
fn products_and_matrices_run_on_the_device_the_options_name() {
    let _lock = device_lock();
    expect_devices(1);
    let dev = Device::new(0);
    let (a, b) = (random::<f32>(300, 257), random(257, 129));
    let p = a.try_gpu_dot_with(&b, &gpu().device(0)).expect("device 0");
    assert!(p.route.is_gpu(), "{:?}", p.route);
    check(&p.c, &a, &b, &reference(&a, &b), "device 0");

    let (a64, b64) = (random::<f64>(130, 70), random::<f64>(70, 90));
    let ga = GpuMatrix::from_array_on(&a64, dev).expect("upload");
    assert_eq!(ga.device(), dev);
    let copy = ga.to_device(dev).expect("a copy on the same device");
    assert_eq!(copy.device(), dev);
    assert_eq!(copy.to_array().expect("download"), a64, "the copy is exact");
    let c = GpuMatrix::product_with(&copy, &b64, &gpu().device(0)).expect("product");
    assert_eq!(c.device(), dev);
    check(
        &c.to_array().expect("download"),
        &a64,
        &b64,
        &reference(&a64, &b64),
        "device matrices on device 0",
    );
    assert!(
        !dev.module_loads().is_empty(),
        "the device reports its modules"
    );
}

/// Two devices: each computes products of its own, matrices stay where they were made, a
/// product mixing devices is a typed error, and `to_device` moves a matrix.
#[cfg(feature = "two-gpus")]
#[test]
#[ignore = "needs two CUDA GPUs"]
fn two_devices_keep_their_own_products_and_matrices() {
    let _lock = device_lock();
    expect_devices(2);
    let (d0, d1) = (Device::new(0), Device::new(1));
    let (a, b) = (random::<f32>(333, 517), random(517, 261));
    let r = reference(&a, &b);
    for ordinal in [0, 1] {
        for kernel in [
            gpu_dot::Kernel::Auto,
            gpu_dot::Kernel::Reg64,
            gpu_dot::Kernel::Tiled32,
        ] {
            let p = a
                .try_gpu_dot_with(&b, &gpu().device(ordinal).kernel(kernel))
                .unwrap_or_else(|e| panic!("device {ordinal} {kernel}: {e}"));
            assert!(p.route.is_gpu(), "{:?}", p.route);
            check(&p.c, &a, &b, &r, &format!("device {ordinal} {kernel}"));
        }
    }
    for d in [d0, d1] {
        assert!(!d.module_loads().is_empty(), "{d} loaded its own modules");
    }

    let (x, w) = (random::<f64>(129, 65), random::<f64>(65, 33));
    let gx0 = GpuMatrix::from_array_on(&x, d0).expect("upload to 0");
    let gw1 = GpuMatrix::from_array_on(&w, d1).expect("upload to 1");
    assert_eq!((gx0.device(), gw1.device()), (d0, d1));
    match GpuMatrix::product(&gx0, &gw1) {
        Err(GpuDotError::WrongDevice {
            dim,
            device,
            expected,
        }) => assert_eq!((dim, device, expected), ((65, 33), 1, 0)),
        other => panic!("expected WrongDevice, got {other:?}"),
    }
    // The options name device 1: now the matrix on device 0 is the stranger.
    match GpuMatrix::product_with(&gx0, &gw1, &gpu().device(1)) {
        Err(GpuDotError::WrongDevice {
            device, expected, ..
        }) => assert_eq!((device, expected), (0, 1)),
        other => panic!("expected WrongDevice, got {other:?}"),
    }
    let gx1 = gx0.to_device(d1).expect("move to device 1");
    assert_eq!(gx1.device(), d1);
    let c = GpuMatrix::product(&gx1, &gw1).expect("both on device 1");
    assert_eq!(c.device(), d1, "the result lives with its operands");
    check(
        &c.to_array().expect("download"),
        &x,
        &w,
        &reference(&x, &w),
        "device 1",
    );
    // A host operand joins a device matrix on its device.
    let c = GpuMatrix::product(&x, &gw1).expect("host · device 1");
    assert_eq!(c.device(), d1);
}

/// A fault on one device rebuilds that device's context only: matrices on the other device
/// survive and its products go on. Some drivers (580 on H200s, measured) let a sticky fault
/// poison every CUDA call of the process on every device, reset or not; there every call on
/// the other device must end in a typed error, never a wrong number or a hang, and `Auto`
/// answers on the CPU. Runs in a child process, since the fault may outlive the test.
#[cfg(feature = "two-gpus")]
#[test]
#[ignore = "needs two CUDA GPUs"]
fn two_devices_a_fault_on_one_leaves_the_other_alone() {
    const NAME: &str = "two_devices_a_fault_on_one_leaves_the_other_alone";
    const CHILD: &str = "GPU_DOT_TEST_DEVICE_FAULT_CHILD";
    if std::env::var(CHILD).is_err() {
        let _lock = device_lock();
        expect_devices(2);
        let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
            .args(["--exact", NAME, "--nocapture", "--include-ignored"])
            .env(CHILD, "1")
            .output()
            .expect("the child runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        println!("child:\n{stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "the child failed ({})",
            out.status
        );
        return;
    }
    expect_devices(2);
    let (d0, d1) = (Device::new(0), Device::new(1));
    let keep = random::<f32>(64, 48);
    let on1 = GpuMatrix::from_array_on(&keep, d1).expect("upload to 1");
    let on0 = GpuMatrix::from_array_on(&keep, d0).expect("upload to 0");
    let rebuilds = (d0.context_rebuilds(), d1.context_rebuilds());
    let fault = gpu_dot::__testing::raise_device_fault_on(d0, gpu_dot::__testing::Fault::Trap);
    assert!(
        matches!(fault, Err(GpuDotError::DeviceFault { .. })),
        "{fault:?}"
    );
    let (a, b) = (random::<f32>(200, 300), random(300, 100));
    let typed = |e: &GpuDotError| {
        matches!(
            e,
            GpuDotError::DeviceFault { .. }
                | GpuDotError::Driver { .. }
                | GpuDotError::NoDevice { .. }
        )
    };
    match on1.to_array() {
        Ok(back) => {
            println!("device 1 survived the fault on device 0");
            assert_eq!(back, keep, "device 1's matrix reads back unchanged");
            let p = a
                .try_gpu_dot_with(&b, &gpu().device(1))
                .expect("device 1 computes");
            check(
                &p.c,
                &a,
                &b,
                &reference(&a, &b),
                "device 1 after a fault on 0",
            );
            assert_eq!(
                d1.context_rebuilds(),
                rebuilds.1,
                "device 1 was not rebuilt"
            );
            // Device 0 comes back with a new context (where the driver allows one); its old
            // matrix is lost.
            match a.try_gpu_dot_with(&b, &gpu().device(0)) {
                Ok(p) => {
                    check(&p.c, &a, &b, &reference(&a, &b), "device 0 rebuilt");
                    assert_eq!(d0.context_rebuilds(), rebuilds.0 + 1);
                    assert!(matches!(
                        on0.to_array(),
                        Err(GpuDotError::MatrixLost { .. })
                    ));
                }
                Err(GpuDotError::NoDevice { reason }) => {
                    assert!(reason.contains("device 0"), "{reason}");
                }
                Err(e) => panic!("device 0 after its fault: {e}"),
            }
        }
        Err(e) => {
            println!("the fault on device 0 reached device 1: {e}");
            assert!(typed(&e), "{e:?}");
            // Every later call on either device fails with a typed error, and a device that
            // cannot be used says why.
            for (d, what) in [(1, "device 1"), (0, "device 0")] {
                for _ in 0..3 {
                    match a.try_gpu_dot_with(&b, &gpu().device(d)) {
                        Ok(p) => {
                            check(&p.c, &a, &b, &reference(&a, &b), what);
                        }
                        Err(e) => assert!(typed(&e), "{what}: {e:?}"),
                    }
                }
            }
            assert!(on1.to_array().is_err_and(|e| typed(&e)));
            assert!(on0.to_array().is_err());
            // Auto answers on the CPU, right.
            for d in [0, 1] {
                let p = a
                    .try_gpu_dot_with(&b, &DotOptions::builtin().device(d))
                    .expect("Auto answers");
                check(&p.c, &a, &b, &reference(&a, &b), "Auto after the fault");
            }
            let c = a.gpu_dot(&b);
            check(&c, &a, &b, &reference(&a, &b), "gpu_dot after the fault");
        }
    }
    drop((on0, on1));
}

/// The default device reads `GPU_DOT_DEVICE` alone: a bad value there is the reason no GPU is
/// used, while a bad value of another variable leaves the device alone (that variable falls
/// back to its default, with a warning). Checked in child processes with each environment.
#[test]
fn the_default_device_reads_its_own_variable_alone() {
    const CHILD: &str = "GPU_DOT_TEST_DEVICE_ENV_CHILD";
    if let Ok(expect) = std::env::var(CHILD) {
        let status = gpu_dot::device_status().to_string();
        match expect.as_str() {
            "device" => assert!(status.contains("GPU_DOT_DEVICE"), "{status}"),
            _ => assert!(!status.contains("GPU_DOT_KERNEL"), "{status}"),
        }
        return;
    }
    let exe = std::env::current_exe().expect("the test binary");
    for (var, value, expect) in [
        ("GPU_DOT_DEVICE", "first", "device"),
        ("GPU_DOT_KERNEL", "fastest", "kernel"),
    ] {
        let out = std::process::Command::new(&exe)
            .args([
                "--exact",
                "the_default_device_reads_its_own_variable_alone",
                "--nocapture",
            ])
            .env(CHILD, expect)
            .env(var, value)
            .output()
            .expect("the child runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{var}={value}: child failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

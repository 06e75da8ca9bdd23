//! What the crate says through the `log` crate: each product's route at debug level, one
//! warning for the first product a missing or failing GPU sends to the CPU, and each GPU
//! product's phase times at trace level.

mod common;

use std::sync::{Mutex, MutexGuard, Once};

use common::{random, CAPTURE, RECORDS};
use gpu_dot::{Backend, Device, DotOptions, GpuDot};
use log::{Level, LevelFilter};

/// Installs the logger (once per process) and empties the records; the guard keeps the
/// tests of this binary from running at the same time, so that each sees its own records.
fn session() -> MutexGuard<'static, ()> {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        log::set_logger(&CAPTURE).expect("no other logger in this test binary");
        log::set_max_level(LevelFilter::Trace);
    });
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let guard = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    take();
    guard
}

fn take() -> Vec<(Level, String)> {
    std::mem::take(&mut *RECORDS.lock().unwrap_or_else(|p| p.into_inner()))
}

#[test]
fn routes_are_logged_and_the_first_fallback_is_a_warning() {
    let _session = session();
    let (a, b) = (random::<f32>(40, 30), random(30, 20));
    let cpu = DotOptions::builtin().backend(Backend::Cpu);
    a.try_gpu_dot_with(&b, &cpu).expect("the CPU backend");
    let logged = take();
    assert!(
        logged
            .iter()
            .any(|(l, m)| *l == Level::Debug && m.starts_with("40×30×20 f32: CPU")),
        "{logged:?}"
    );
    assert!(!logged.iter().any(|(l, _)| *l <= Level::Warn), "{logged:?}");

    // A device that is not there: Auto computes on the CPU, and says so once.
    let absent = Device::count() + 3;
    let auto = DotOptions::builtin().min_gpu_flops(0).device(absent);
    for _ in 0..3 {
        let p = a.try_gpu_dot_with(&b, &auto).expect("Auto never fails");
        assert!(!p.route.is_gpu());
    }
    let logged = take();
    let warnings: Vec<_> = logged.iter().filter(|(l, _)| *l == Level::Warn).collect();
    assert_eq!(warnings.len(), 1, "one warning: {logged:?}");
    assert!(warnings[0].1.contains("ran on the CPU"), "{warnings:?}");
    assert_eq!(
        logged.iter().filter(|(l, _)| *l == Level::Debug).count(),
        3,
        "each product's route: {logged:?}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_products_log_their_route_and_phase_times() {
    let _session = session();
    let (a, b) = (random::<f32>(300, 200), random(200, 100));
    let gpu = DotOptions::builtin().backend(Backend::Gpu);
    let p = a.try_gpu_dot_with(&b, &gpu).expect("a GPU product");
    assert!(p.route.is_gpu());
    let logged = take();
    assert!(
        logged
            .iter()
            .any(|(l, m)| *l == Level::Debug && m.starts_with("300×200×100 f32: GPU")),
        "{logged:?}"
    );
    assert!(
        logged
            .iter()
            .any(|(l, m)| *l == Level::Trace && m.starts_with("300x200x100 panels=")),
        "{logged:?}"
    );
}

/// A complex `gpu_dot` that the fast path keeps on the CPU logs its route with the complex
/// threshold: `Complex<f32>` products between the `f32` threshold and their own
/// (`DEFAULT_MIN_GPU_FLOPS_C32`), in real flops.
#[test]
fn complex_products_below_their_threshold_log_it() {
    use gpu_dot::num_complex::Complex;
    let _session = session();
    let n = 82; // 8·82³ = 4.4 Mflop: above the f32 threshold, below c32's
    let flops = 8 * (n as u64).pow(3);
    assert!(gpu_dot::DEFAULT_MIN_GPU_FLOPS < flops && flops < gpu_dot::DEFAULT_MIN_GPU_FLOPS_C32);
    let (re, im) = (random::<f32>(n, n), random::<f32>(n, n));
    let a = ndarray::Zip::from(&re)
        .and(&im)
        .map_collect(|&r, &i| Complex::new(r, i));
    assert_eq!(a.gpu_dot(&a), a.dot(&a));
    let logged = take();
    let want = format!("threshold of {}", gpu_dot::DEFAULT_MIN_GPU_FLOPS_C32);
    assert!(
        logged
            .iter()
            .any(|(l, m)| *l == Level::Debug && m.contains("CPU") && m.contains(&want)),
        "{logged:?}"
    );
}

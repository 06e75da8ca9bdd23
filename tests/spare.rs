//! The spare result: a loop of products with large host results gets each next result's
//! memory ready in the background, takes it, and `trim` frees it. GPU tests are ignored on
//! machines without one; run them with `--include-ignored`.

mod common;

use std::time::{Duration, Instant};

use common::{assert_close, random, TestElem};
use gpu_dot::{retained_host_memory, trim, Backend, DotOptions, GpuDot, Route};

/// Waits until the crate keeps `bytes` of host memory (the spare's preparation runs in the
/// background), failing after a generous time.
#[track_caller]
fn wait_for_retained(bytes: usize, what: &str) {
    let start = Instant::now();
    while retained_host_memory() != bytes {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{what}: the crate keeps {} bytes of host memory, not {bytes}",
            retained_host_memory()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Five products of one shape whose result is 32 MiB, each checked against the reference:
/// no spare after the first, one ready before each from the third on, none after `trim`.
fn a_loop_takes_spare_results<T: TestElem>() {
    let opts = DotOptions::builtin()
        .backend(Backend::Gpu)
        .poison_output(true);
    let n = 2048;
    let m = (32 << 20) / (n * std::mem::size_of::<T>());
    let k = 40;
    let bytes = m * n * std::mem::size_of::<T>();
    trim();
    assert_eq!(retained_host_memory(), 0, "trim frees the spare");
    let b = random::<T>(k, n);
    let mut kept = Vec::new();
    for round in 0..5 {
        if round >= 2 {
            wait_for_retained(bytes, &format!("{} round {round}", T::DTYPE));
        }
        let a = random::<T>(m, k);
        let p = a.try_gpu_dot_with(&b, &opts).unwrap();
        assert!(matches!(p.route, Route::Gpu { .. }), "{:?}", p.route);
        assert_close(&p.c, &a, &b, &format!("round {round}"));
        if round == 0 {
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(retained_host_memory(), 0, "one product is no loop");
        }
        // The caller keeps every result: a spare is new memory, never one of them.
        kept.push(p.c);
    }
    for (i, c) in kept.iter().enumerate() {
        for d in &kept[..i] {
            assert_ne!(c.as_ptr(), d.as_ptr(), "two results share memory");
        }
    }
    wait_for_retained(bytes, "after the loop");
    trim();
    assert_eq!(retained_host_memory(), 0, "trim frees the spare");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_loop_of_large_products_takes_spare_results_and_trim_frees_them() {
    // One test, so that no other product of this binary asks for a result meanwhile.
    a_loop_takes_spare_results::<f32>();
    a_loop_takes_spare_results::<f64>();
}

//! Products split across several devices ([`DotOptions::devices`]): `GPU_DOT_DEVICES` parsing
//! (anywhere), and on a machine with two GPUs (tests named `two_devices_`, built with the
//! `two-gpus` feature): every split against the reference over odd shapes, operand layouts
//! and outputs, and one device failing (its memory full) while the other works.

mod common;

use common::{check, random, reference};
use gpu_dot::{
    Backend, CpuReason, Devices, DotOptions, GpuDot, GpuDotError, Route, ENV_DEVICES, ENV_PEER_COPY,
};

#[test]
fn the_devices_option_parses_from_the_environment() {
    let parse = |v: &str| DotOptions::from_lookup(|n| (n == ENV_DEVICES).then(|| v.to_string()));
    assert_eq!(parse("all").unwrap().devices, Some(Devices::All));
    assert_eq!(parse(" ALL ").unwrap().devices, Some(Devices::All));
    assert_eq!(
        parse("0, 1,3").unwrap().devices,
        Some(Devices::List(vec![0, 1, 3]))
    );
    assert_eq!(parse("2").unwrap().devices, Some(Devices::List(vec![2])));
    for bad in ["", "one", "0,,1", "-1"] {
        match parse(bad) {
            Err(GpuDotError::InvalidEnv { var, .. }) => assert_eq!(var, ENV_DEVICES),
            other => panic!("{bad:?}: expected InvalidEnv, got {other:?}"),
        }
    }
    assert_eq!(DotOptions::builtin().devices, None);
    let peer = |v: &str| DotOptions::from_lookup(|n| (n == ENV_PEER_COPY).then(|| v.to_string()));
    assert!(DotOptions::builtin().peer_copies);
    assert!(!peer("0").unwrap().peer_copies);
    assert!(!peer(" off").unwrap().peer_copies);
    assert!(peer("1").unwrap().peer_copies);
    assert!(matches!(
        peer("sometimes"),
        Err(GpuDotError::InvalidEnv {
            var: ENV_PEER_COPY,
            ..
        })
    ));
}

/// Devices that cannot be used (absent ordinals, or no GPU at all): a split product computes
/// on the CPU under `Auto`, and the GPU backend names the device that failed.
#[test]
fn a_split_over_absent_devices_falls_back_under_auto() {
    let (a, b) = (random::<f32>(300, 200), random::<f32>(200, 100));
    let opts = DotOptions::builtin()
        .devices(Devices::List(vec![60, 61]))
        .min_split_flops(0)
        .min_gpu_flops(0);
    let p = a.try_gpu_dot_with(&b, &opts).unwrap();
    assert!(
        matches!(
            p.route,
            Route::Cpu(CpuReason::GpuUnavailable(GpuDotError::SplitFailed {
                ordinal: 60,
                ..
            }))
        ),
        "{}",
        p.route
    );
    check(&p.c, &a, &b, &reference(&a, &b), "Auto over absent devices");
    match a.try_gpu_dot_with(&b, &opts.backend(Backend::Gpu)) {
        Err(GpuDotError::SplitFailed { ordinal, source }) => {
            assert_eq!(ordinal, 60);
            assert!(matches!(*source, GpuDotError::NoDevice { .. }), "{source}");
        }
        other => panic!("expected SplitFailed, got {other:?}"),
    }
}

/// The tests that need two CUDA GPUs, built with the `two-gpus` feature alone, so that the
/// README's test command passes on a machine with one GPU:
/// `cargo test --features two-gpus --test multi_gpu -- --include-ignored`. With the feature
/// and fewer than two devices they fail, naming what they need.
#[cfg(feature = "two-gpus")]
mod two_gpus {
    use super::*;
    use common::{both_types, Hog, TestElem};
    use gpu_dot::Device;
    use ndarray::{s, Array2, ShapeBuilder};

    static DEVICE_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn expect_two() -> std::sync::MutexGuard<'static, ()> {
        let lock = DEVICE_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        assert!(
            Device::count() >= 2,
            "this test needs two CUDA devices, found {}",
            Device::count()
        );
        lock
    }

    fn split(devices: Devices) -> DotOptions {
        DotOptions::builtin()
            .backend(Backend::Gpu)
            .poison_output(true)
            .devices(devices)
            .min_split_flops(0)
    }

    both_types!(
        #[ignore = "needs two CUDA GPUs"]
        two_devices_split_products_match_the_reference
    );
    /// Split products over odd shapes, operands in C and F order and strided, into fresh results
    /// and into existing C (`general_mat_mul` with beta) of both orders, with B shared over peer
    /// links (where the devices have them) and uploaded by each device: each matches the
    /// reference, and the route names both devices.
    fn two_devices_split_products_match_the_reference<T: TestElem>() {
        let _lock = expect_two();
        // GPU_DOT_TEST_MAX_DIM (for runs under compute-sanitizer) leaves out the larger shapes
        // (the smallest, 256 rows, always runs).
        let cap = std::env::var("GPU_DOT_TEST_MAX_DIM")
            .map_or(usize::MAX, |v| v.parse().expect("an integer"));
        let shapes = [
            (256, 64, 3),
            (1000, 300, 700),
            (4097, 513, 1001),
            (3000, 1, 2000),
        ];
        for &(m, k, n) in shapes
            .iter()
            .filter(|s| s.0 == 256 || s.0.max(s.1).max(s.2) <= cap)
        {
            let a = random::<T>(m, k);
            let b = random::<T>(k, n);
            let a_f = a.t().as_standard_layout().reversed_axes().to_owned();
            let wide = random::<T>(2 * k, n + 3);
            let b_strided = wide.slice(s![..;2, 1..n + 1]);
            let r = reference(&a, &b);
            for (devices, peer) in [
                (Devices::List(vec![0, 1]), true),
                (Devices::List(vec![1, 0]), true),
                (Devices::All, true),
                (Devices::List(vec![0, 1]), false),
            ] {
                let opts = split(devices.clone()).peer_copies(peer);
                let what = format!("{m}×{k}×{n} on {devices:?}, peer copies {peer}");
                let p = a.try_gpu_dot_with(&b, &opts).expect(&what);
                match &p.route {
                    Route::Gpu { devices: used, .. } => {
                        assert_eq!(used.len(), 2, "{what}: {}", p.route)
                    }
                    other => panic!("{what}: {other}"),
                }
                check(&p.c, &a, &b, &r, &what);
                let p = a_f.try_gpu_dot_with(&b, &opts).expect(&what);
                check(&p.c, &a, &b, &r, &format!("{what}, A in F order"));
                let b_f = b.t().as_standard_layout().reversed_axes().to_owned();
                let p = a.try_gpu_dot_with(&b_f, &opts).expect(&what);
                check(&p.c, &a, &b, &r, &format!("{what}, B in F order"));
                let rs = reference(&a, &b_strided);
                let p = a.try_gpu_dot_with(&b_strided, &opts).expect(&what);
                check(&p.c, &a, &b_strided, &rs, &format!("{what}, B strided"));
                // Into existing C, both orders: C = 2·A·B − C₀.
                for f_order in [false, true] {
                    let c0 = random::<T>(m, n);
                    let mut c = Array2::<T>::zeros((m, n).set_f(f_order));
                    c.assign(&c0);
                    let two = T::from_f64(2.0);
                    gpu_dot::try_general_mat_mul_with(two, &a, &b, -T::one(), &mut c, &opts)
                        .expect(&what);
                    let want = &r * 2.0 - &c0.mapv(|x| x.into_f64());
                    let diff = (&c.mapv(|x| x.into_f64()) - &want)
                        .iter()
                        .fold(0.0f64, |acc, d| acc.max(d.abs()));
                    let scale = want.iter().fold(1.0f64, |acc, d| acc.max(d.abs()));
                    assert!(
                        diff <= scale * 64.0 * T::EPS * (k as f64).sqrt(),
                        "{what}, general form (F order {f_order}): max error {diff:e}"
                    );
                }
            }
        }
    }

    both_types!(
        #[ignore = "needs two CUDA GPUs"]
        two_devices_a_full_device_fails_the_split_with_its_ordinal
    );
    /// Device 1's memory full: a split product with the GPU backend is `SplitFailed` naming device
    /// 1 (never a wrong number), `Auto` answers on the CPU, right; once the memory is back the
    /// split works again.
    fn two_devices_a_full_device_fails_the_split_with_its_ordinal<T: TestElem>() {
        let _lock = expect_two();
        let (m, k, n) = (2048, 4096, 4096);
        let (a, b) = (random::<T>(m, k), random::<T>(k, n));
        let r = reference(&a, &b);
        let opts = split(Devices::List(vec![0, 1]));
        let warm = a
            .try_gpu_dot_with(&b, &opts)
            .expect("a split before the device is full");
        check(&warm.c, &a, &b, &r, "before");
        gpu_dot::trim();
        let ctx = cudarc::driver::CudaContext::new(1).unwrap();
        let hog = Hog::fill(&ctx, 8 << 20);
        match a.try_gpu_dot_with(&b, &opts) {
            Err(GpuDotError::SplitFailed { ordinal, source }) => {
                assert_eq!(ordinal, 1, "{source}");
                println!("device 1 full: {source}");
            }
            other => panic!("expected SplitFailed on device 1, got {other:?}"),
        }
        let auto = DotOptions::builtin()
            .devices(Devices::List(vec![0, 1]))
            .min_split_flops(0);
        let p = a.try_gpu_dot_with(&b, &auto).unwrap();
        assert!(
            matches!(
                &p.route,
                Route::Cpu(CpuReason::GpuUnavailable(GpuDotError::SplitFailed {
                    ordinal: 1,
                    ..
                }))
            ),
            "{}",
            p.route
        );
        check(&p.c, &a, &b, &r, "Auto with device 1 full");
        // Into existing C with the GPU backend: an error, and C either untouched or reported.
        let mut c = Array2::<T>::ones((m, n));
        let e = gpu_dot::try_general_mat_mul_with(T::one(), &a, &b, T::one(), &mut c, &opts)
            .expect_err("device 1 is full");
        assert!(
            matches!(e, GpuDotError::SplitFailed { ordinal: 1, .. }),
            "{e}"
        );
        hog.release();
        let p = a
            .try_gpu_dot_with(&b, &opts)
            .expect("a split after the memory is back");
        check(&p.c, &a, &b, &r, "after");
    }
}

//! The default precision's INT8 GEMM enqueued before the host reads the guard's verdict, under
//! a gate the device reads: the products it serves are bit for bit those whose GEMM is
//! enqueued after the verdict, where the gate holds (the first count, or the next with one
//! modulus added after the verdict) and where it does not (refused, unsure). Likewise the
//! kernels launched programmatically (each let in while the one before finishes) against
//! plain launches, on guarded Ozaki products and on native ones, and the INT8 GEMM in any tile
//! order against its own. Small shapes, so that the sanitizers run the binary; a binary of
//! its own, since it sets the crate's process-wide test switches (its tests take turns).

mod common;

use std::sync::Mutex;

use gpu_dot::accuracy::Family;
use gpu_dot::{
    try_general_mat_mul_with, Backend, DotOptions, Element, GpuDot, GpuMatrix, Precision, Route,
};

/// The tests' turns: each sets process-wide switches.
static TURN: Mutex<()> = Mutex::new(());

fn compute_capability() -> i32 {
    match gpu_dot::device_status() {
        gpu_dot::DeviceStatus::Ready(d) => d.compute_capability.0 * 10 + d.compute_capability.1,
        other => panic!("no GPU: {other}"),
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_gemm_before_the_verdict_gives_the_bits_of_the_gemm_after() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let sm = compute_capability();
    let kept = gpu_dot::__testing::gemms_before_verdict_kept();
    let (f64_kinds, f32_kinds) = both_types(
        gpu_dot::__testing::gemm_before_verdict,
        "GEMM before the verdict",
    );
    let kept = gpu_dot::__testing::gemms_before_verdict_kept() - kept;
    println!("f64 {f64_kinds:?}, f32 {f32_kinds:?}; {kept} GEMMs before the verdict kept");
    if sm >= 90 {
        // Where the guard's passes split early (Hopper), the uniform products keep the GEMM
        // before the verdict, and the paired-k ones are refused (the gated GEMM left at
        // once) in both types.
        assert!(kept >= 4, "{kept} kept");
        assert!(f64_kinds.emulated >= 2 && f32_kinds.emulated >= 2);
        assert!(f64_kinds.refused >= 2 && f32_kinds.refused >= 2);
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn programmatic_launches_give_the_bits_of_plain_launches() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let sm = compute_capability();
    let (f64_kinds, f32_kinds) = both_types(
        gpu_dot::__testing::programmatic_launches,
        "programmatic launches",
    );
    println!("f64 {f64_kinds:?}, f32 {f32_kinds:?}");
    if sm >= 90 {
        // Programmatic launches run on Hopper: both the emulated and the refused chains.
        assert!(f64_kinds.emulated >= 2 && f32_kinds.emulated >= 2);
        assert!(f64_kinds.refused >= 2 && f32_kinds.refused >= 2);
    }
    // The native chains: split-K products and their reduction, the warpgroup GEMM's packed
    // panels, a product of host arrays in row panels.
    native_on_and_off::<f64>(&[Precision::Native]);
    native_on_and_off::<f32>(&[Precision::Native, Precision::Tf32x3]);
}

/// Guarded products of both types (`f64`, then `f32`) with `switch` on and off. The guard
/// weighs every size (and the memory of refusals is off): these shapes are far below where
/// the default emulates.
fn both_types(switch: fn(bool), what: &str) -> (Kinds, Kinds) {
    gpu_dot::__testing::emulate_every_size(true);
    let kinds = (
        on_and_off::<f64>(switch, what),
        on_and_off::<f32>(switch, what),
    );
    gpu_dot::__testing::emulate_every_size(false);
    kinds
}

/// Native products of `A` at each precision, launched programmatically and plainly: the same
/// route and bits.
fn native_on_and_off<A: Element>(precisions: &[Precision]) {
    let switch = gpu_dot::__testing::programmatic_launches;
    for &precision in precisions {
        let opts = DotOptions::builtin()
            .backend(Backend::Gpu)
            .precision(precision)
            .autotune(false)
            .poison_output(true);
        for dims in [
            (64, 4096, 80),
            (300, 1000, 260),
            (1024, 768, 1100),
            (4100, 512, 300),
        ] {
            let (a, b) = Family::Uniform.operands::<A>(dims, common::fresh_seed());
            let run = |on: bool| {
                switch(on);
                let p = a.try_gpu_dot_with(&b, &opts);
                switch(true);
                p.unwrap_or_else(|e| panic!("{} {precision:?} {dims:?} ({on}): {e}", A::DTYPE))
            };
            let (on, off) = (run(true), run(false));
            let what = format!("{} {precision:?} {dims:?}: {}", A::DTYPE, on.route);
            assert_eq!(on.route.to_string(), off.route.to_string(), "{what}");
            let differ = common::first_bit_difference(&on.c, &off.c);
            assert!(differ.is_none(), "{what}: differ at element {differ:?}");
            println!("programmatic launches: {what}");
        }
    }
}

/// How the products of one type ran.
#[derive(Debug, Default)]
struct Kinds {
    emulated: usize,
    refused: usize,
}

/// Each case's product with `switch` on (its default) and off: the same route and bits.
fn on_and_off<A: Element>(switch: fn(bool), what: &str) -> Kinds {
    let opts = DotOptions::builtin()
        .backend(Backend::Gpu)
        .precision(Precision::Auto)
        .autotune(false)
        .poison_output(true);
    let mut kinds = Kinds::default();
    let cases = [
        // The first count: the GEMM before the verdict is the whole GEMM.
        (Family::Uniform, (200, 301, 330)),
        (Family::Uniform, (130, 1000, 260)),
        // Normal inputs at k = 4096: where the early refusal's lead is the next count, the
        // GEMM before the verdict is kept and one modulus's GEMM follows it.
        (Family::Normal, (96, 4096, 80)),
        (Family::LogNormal, (64, 2048, 72)),
        // Refused, or unsure: the gated GEMM leaves at once.
        (Family::PairedK(20), (200, 301, 330)),
        (Family::PairedK(40), (130, 1000, 260)),
        (Family::OneHuge(40), (200, 301, 330)),
    ];
    for (family, dims) in cases {
        let (a, b) = family.operands::<A>(dims, common::fresh_seed());
        let run = |on: bool| {
            switch(on);
            let p = a.try_gpu_dot_with(&b, &opts);
            switch(true);
            p.unwrap_or_else(|e| panic!("{} {dims:?} ({what} {on}): {e}", family.name()))
        };
        let (before, after) = (run(true), run(false));
        let what = format!(
            "{what}: {} {} {dims:?}: {} against {}",
            A::DTYPE,
            family.name(),
            before.route,
            after.route
        );
        assert_eq!(before.route.to_string(), after.route.to_string(), "{what}");
        let differ = common::first_bit_difference(&before.c, &after.c);
        assert!(differ.is_none(), "{what}: differ at element {differ:?}");
        match &before.route {
            Route::Gpu {
                precision: Precision::Ozaki { .. },
                ..
            } => kinds.emulated += 1,
            Route::Gpu { guard: Some(g), .. } if g.failed > 0 => kinds.refused += 1,
            _ => {}
        }
        println!("{what}");
    }
    kinds
}

/// A default product that the guard refuses runs natively with the plan that native products
/// of its shape settled on, once the autotuner is done with them: it is native's product bit
/// for bit. The tuner weighs the two precisions' plans apart, and a plan's split of K orders
/// each element's sum, so the default's own plan would be another draw of native's rounding.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_refused_default_takes_natives_tuned_plan() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let sm = compute_capability();
    gpu_dot::__testing::emulate_every_size(true);
    then_reset(
        || {
            refused_is_native::<f64>(sm);
            refused_is_native::<f32>(sm);
        },
        || {},
    );
}

/// Native products of a paired-k shape until the tuner has chosen their plan, then the
/// default's: refused (native outright below compute capability 8.0, which has no
/// emulation), and native's bits.
fn refused_is_native<A: Element>(sm: i32) {
    // A class of shapes no other test here tunes (the others turn the tuner off).
    let dims = (136, 1000, 264);
    let class = (256, 1024, 512);
    let (a, b) = Family::PairedK(40).operands::<A>(dims, common::fresh_seed());
    let opts = |precision| {
        DotOptions::builtin()
            .backend(Backend::Gpu)
            .precision(precision)
            .poison_output(true)
    };
    let settled = || {
        gpu_dot::tuned_plans()
            .iter()
            .any(|&(dtype, at, _)| dtype == A::DTYPE && at == class)
    };
    let native = || {
        a.try_gpu_dot_with(&b, &opts(Precision::Native))
            .unwrap_or_else(|e| panic!("{} native: {e}", A::DTYPE))
    };
    for _ in 0..200 {
        native();
        if settled() {
            break;
        }
    }
    assert!(
        settled(),
        "{}: native's plan not settled in 200 products",
        A::DTYPE
    );
    // The last trial may have run another candidate: native's product with the settled plan.
    let native = native();
    let default = a
        .try_gpu_dot_with(&b, &opts(Precision::Auto))
        .unwrap_or_else(|e| panic!("{} default: {e}", A::DTYPE));
    let what = format!(
        "{} {dims:?}: {} against {}",
        A::DTYPE,
        default.route,
        native.route
    );
    let refused = matches!(
        &default.route,
        Route::Gpu { guard: Some(g), precision: Precision::Native, .. } if g.failed > 0
    );
    let native_outright = matches!(
        &default.route,
        Route::Gpu {
            guard: None,
            precision: Precision::Native,
            ..
        }
    );
    assert!(
        if sm >= 80 { refused } else { native_outright },
        "{what}: not run natively as expected"
    );
    // The report names the plan that ran: native's.
    let plan = |r: &Route| match r {
        Route::Gpu { plan, .. } => *plan,
        _ => None,
    };
    assert_eq!(plan(&default.route), plan(&native.route), "{what}");
    let differ = common::first_bit_difference(&native.c, &default.c);
    assert!(differ.is_none(), "{what}: differ at element {differ:?}");
    println!("{what}");
}

/// The INT8 GEMM's tile order (its tile rows to a group) only permutes its units of work:
/// products whose GEMM takes its tiles 1, 3 or 8 tile rows to a group (rounded up to an even
/// count where its clusters pair tile rows) are the bits of the engine's own order, with the
/// guard (whose GEMMs take the order too) and without, in both pairings of the clusters.
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_gemm_tile_order_leaves_the_bits_alone() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    gpu_dot::__testing::emulate_every_size(true);
    then_reset(
        || {
            tile_orders::<f64>();
            tile_orders::<f32>();
        },
        || gpu_dot::__testing::ozaki_gemm_group(None),
    );
}

/// Runs `body`, then `reset` and the guard's weighing of every size off (the switches the
/// body set, back to the crate's own), even where the body panics.
fn then_reset(body: impl FnOnce() + std::panic::UnwindSafe, reset: impl FnOnce()) {
    let result = std::panic::catch_unwind(body);
    reset();
    gpu_dot::__testing::emulate_every_size(false);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

fn tile_orders<A: Element>() {
    // Device operands and result, so that the product is one GEMM (host arrays go in row
    // panels, each a tile row or two): 6 × 5 tiles of 192 × 256 (clusters pair tile rows,
    // 3 pairs down) and 5 × 4 (they pair tile columns, 5 tile rows).
    for dims in [(1000, 200, 1200), (900, 150, 1024)] {
        let (a, b) = Family::Uniform.operands::<A>(dims, common::fresh_seed());
        let (ga, gb) = (GpuMatrix::from_array(&a), GpuMatrix::from_array(&b));
        let (ga, gb) = (ga.expect("A up"), gb.expect("B up"));
        for precision in [Precision::Auto, Precision::OZAKI] {
            let opts = DotOptions::builtin()
                .backend(Backend::Gpu)
                .precision(precision)
                .autotune(false)
                .poison_output(true);
            let run = |group: Option<u32>| {
                gpu_dot::__testing::ozaki_gemm_group(group);
                let what = format!("{} {precision:?} {dims:?} group {group:?}", A::DTYPE);
                let mut c = GpuMatrix::<A>::zeros((dims.0, dims.2)).expect(&what);
                let route = try_general_mat_mul_with(A::one(), &ga, &gb, A::zero(), &mut c, &opts)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                (route, c.to_array().expect(&what))
            };
            let (route, own) = run(None);
            let what = format!("{} {precision:?} {dims:?}: {route}", A::DTYPE);
            assert!(
                matches!(
                    route,
                    Route::Gpu {
                        precision: Precision::Ozaki { .. },
                        ..
                    }
                ),
                "{what}"
            );
            assert!(!route.to_string().contains("row panels"), "{what}");
            for group in [1, 3, 8] {
                let (other_route, other) = run(Some(group));
                let what = format!("{what}, group {group}");
                assert_eq!(route.to_string(), other_route.to_string(), "{what}");
                let differ = common::first_bit_difference(&own, &other);
                assert!(differ.is_none(), "{what}: differ at element {differ:?}");
            }
            println!("tile orders: {what}");
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn small_inputs_read_in_place_give_the_bits_of_copied_inputs() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    then_reset(
        || {
            inputs_in_place::<f64>();
            inputs_in_place::<f32>();
        },
        || gpu_dot::__testing::mapped_inputs_up_to(None),
    );
}

/// Small products of host operands (C order, transposed, strided; into a fresh result, into
/// an array, with a device A) with the kernels reading A and B straight from staging, and
/// with them copied to the device first: the same route and bits, within the rounding bound
/// of the reference, and the in-place path taken by exactly the products whose host inputs
/// are within the limit.
fn inputs_in_place<A: common::TestElem>() {
    use ndarray::{s, Array2};
    const LIMIT: usize = 16 << 10;
    let limit = |bytes: usize| gpu_dot::__testing::mapped_inputs_up_to(Some(bytes));
    let size = std::mem::size_of::<A>();
    for (precision, every_size) in [
        (Precision::Auto, false),
        (Precision::Native, false),
        (Precision::OZAKI, true),
    ] {
        gpu_dot::__testing::emulate_every_size(every_size);
        // The autotuner off, so that both runs of a form take one plan.
        let opts = DotOptions::builtin()
            .backend(Backend::Gpu)
            .precision(precision)
            .autotune(false)
            .poison_output(true);
        for (m, k, n) in [
            (1, 1, 1),
            (16, 16, 16),
            (5, 7, 3),
            (33, 65, 17),
            (40, 30, 50),
            (100, 37, 90),
        ] {
            // Host A and B (fresh result, into an array), then B alone (device A).
            let within = |elements: usize| usize::from(elements * size <= LIMIT);
            let expected = 2 * within(m * k + k * n) + within(k * n);
            let a = common::random::<A>(m, k);
            let a_t = common::random::<A>(k, m);
            let a_wide = common::random::<A>(m + 3, 2 * k);
            let b = common::random::<A>(k, n);
            let b_t = common::random::<A>(n, k);
            let a_views = [a.view(), a_t.t(), a_wide.slice(s![2..m + 2, ..;2])];
            for av in a_views {
                for bv in [b.view(), b_t.t()] {
                    let r = common::reference(&av, &bv);
                    let what = format!("{} {precision:?} {m}×{k}×{n}", A::DTYPE);
                    // Each form once with inputs in place up to the limit, and once copied.
                    let run = |bytes: usize| {
                        limit(bytes);
                        let before = gpu_dot::__testing::mapped_input_products();
                        let fresh = av.try_gpu_dot_with(&bv, &opts).unwrap_or_else(|e| {
                            panic!("{what}: {e}");
                        });
                        let mut into = Array2::<A>::from_elem((m, n), A::nan());
                        let into_route = try_general_mat_mul_with(
                            A::one(),
                            &av,
                            &bv,
                            A::zero(),
                            &mut into,
                            &opts,
                        )
                        .unwrap_or_else(|e| panic!("{what}, into: {e}"));
                        let dev_a = GpuMatrix::from_array(&av.to_owned()).expect("A up");
                        let mut dev_into = Array2::<A>::from_elem((m, n), A::nan());
                        let dev_route = try_general_mat_mul_with(
                            A::one(),
                            &dev_a,
                            &bv,
                            A::zero(),
                            &mut dev_into,
                            &opts,
                        )
                        .unwrap_or_else(|e| panic!("{what}, device A: {e}"));
                        let routes = [&fresh.route, &into_route, &dev_route].map(|r| r.to_string());
                        let mapped = gpu_dot::__testing::mapped_input_products() - before;
                        (mapped, routes, [fresh.c, into, dev_into])
                    };
                    let (in_place, routes, own) = run(LIMIT);
                    let (copied, copied_routes, other) = run(0);
                    let what = format!("{what}: {}", routes[0]);
                    assert_eq!(
                        in_place, expected,
                        "{what}: products reading their inputs in place"
                    );
                    assert_eq!(
                        copied, 0,
                        "{what}: products reading in place with none allowed"
                    );
                    assert_eq!(routes, copied_routes, "{what}");
                    for (form, (c, c_other)) in ["fresh", "into", "device A"]
                        .iter()
                        .zip(own.iter().zip(&other))
                    {
                        let what = format!("{what}, {form}");
                        let differ = common::first_bit_difference(c, c_other);
                        assert!(differ.is_none(), "{what}: differ at element {differ:?}");
                        common::check(c, &av, &bv, &r, &what);
                    }
                }
            }
            println!("inputs in place: {} {precision:?} {m}×{k}×{n}", A::DTYPE);
        }
    }
}

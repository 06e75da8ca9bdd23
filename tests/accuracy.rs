//! The adversarial accuracy suite: the default precision against native's componentwise
//! bound, `|ĉ − c| ≤ small multiple of u·Σ|a||b|`, on every family of
//! `gpu_dot::accuracy::Family::suite` (elements spanning 2^±10/30/60, scales paired along k,
//! rows and columns far apart, one huge entry per row, cancellation, sparse with a spread,
//! near overflow and underflow, Inf and NaN), f64 and f32, at k from 256 to 16384. Each case
//! runs the native precision, the default (its guard weighing emulation at every size, as it
//! does on large products) and unguarded Ozaki, with the autotuner off (so that a default the
//! guard refuses runs native's own kernel plan), and prints their worst ratios as a table.
//! The default must stay within `max(2 × native's, 8)` and give native's Inf and NaN pattern;
//! unguarded Ozaki is reported, not judged. Needs a CUDA GPU (compute capability 8.0 or more
//! for the emulation; elsewhere every product is native and the test checks that much).

mod common;

use gpu_dot::accuracy::{componentwise, emulated, Family, Reference, SuiteCase, SUITE_KS};
use gpu_dot::{Backend, DotOptions, Dtype, Element, GpuDot, GuardReport, Precision, Route};
use ndarray::Array2;

fn options(precision: Precision) -> DotOptions {
    DotOptions::builtin()
        .backend(Backend::Gpu)
        .precision(precision)
        .poison_output(true)
}

fn suite<A: Element>(dtype: Dtype) -> (usize, usize) {
    let (mut cases, mut emulated_cases) = (0, 0);
    println!("\n| {dtype} | k | native | default | ran | unguarded Ozaki |");
    println!("|---|---|---|---|---|---|");
    for k in SUITE_KS {
        for family in Family::suite(dtype) {
            // The seed is in every message, so that a failing case can be drawn again.
            let seed = common::fresh_seed();
            let case = SuiteCase::run::<A>(family, k, seed)
                .unwrap_or_else(|e| panic!("{dtype} {} k = {k} seed {seed}: {e}", family.name()));
            let (native, default) = (case.native, case.default);
            println!(
                "| {} | {k} | {:.3} | {:.3} | {} | {:.3e} |",
                family.name(),
                native.worst,
                default.worst,
                case.ran(),
                case.unguarded.worst
            );
            let what = format!(
                "{dtype} {} k = {k} seed {seed}: {}",
                family.name(),
                case.route
            );
            assert!(
                matches!(case.route, Route::Gpu { .. }),
                "{what}: not on the GPU"
            );
            // Native's own ratio stays within the textbook bound k·u·Σ|a||b|.
            assert!(native.worst <= k as f64, "{what}: native {native:?}");
            assert!(
                case.meets_rule(),
                "{what}: default {default:?}, native {native:?} ({})",
                case.native_route
            );
            cases += 1;
            emulated_cases += case.emulated() as usize;
            // What the guard passes is never less accurate than its bound: 7·u·Σ|a||b|.
            if case.emulated() {
                assert!(default.worst <= 7.0, "{what}: {default:?}");
            }
        }
    }
    (cases, emulated_cases)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_default_is_within_native_bound_on_every_family() {
    gpu_dot::__testing::emulate_every_size(true);
    let sm = match gpu_dot::device_status() {
        gpu_dot::DeviceStatus::Ready(d) => d.compute_capability.0 * 10 + d.compute_capability.1,
        gpu_dot::DeviceStatus::Unavailable(why) => panic!("no GPU: {why}"),
    };
    for dtype in [Dtype::F64, Dtype::F32] {
        let (cases, emulated) = if dtype == Dtype::F64 {
            suite::<f64>(dtype)
        } else {
            suite::<f32>(dtype)
        };
        println!("{dtype}: {emulated} of {cases} cases emulated");
        if sm >= 80 {
            // The guard lets the benign families through: uniform, far rows and columns,
            // cancellation and the scaled ones, at least.
            assert!(
                emulated >= 4 * 4,
                "{dtype}: only {emulated} of {cases} emulated"
            );
        } else {
            assert_eq!(emulated, 0);
        }
    }
    // The device's guard decides as its CPU model does, in the epilogue of either INT8 GEMM:
    // the device's own, and on Hopper also the mma.sync one of earlier devices.
    guard_is_its_model::<f64>(sm);
    guard_is_its_model::<f32>(sm);
    // The guard's passes split the operands for the first count as the split does after the
    // verdict.
    early_split_is_the_split::<f64>(sm);
    early_split_is_the_split::<f32>(sm);
    if sm >= 90 {
        gpu_dot::__testing::pretend_compute_capability(Some(80));
        let mma = std::panic::catch_unwind(|| {
            guard_is_its_model::<f64>(80);
            guard_is_its_model::<f32>(80);
        });
        gpu_dot::__testing::pretend_compute_capability(None);
        if let Err(e) = mma {
            std::panic::resume_unwind(e);
        }
    }
    // Host arrays run in row panels, each guarded on its own: tall enough to emulate, within
    // the bound, and native where the guard refuses.
    host_panels::<f64>(sm);
    host_panels::<f32>(sm);
    // Panels share op(B)'s passes, and each panel's result is the bits of its rows' product
    // alone.
    panels_share_op_b::<f64>(sm);
    panels_share_op_b::<f32>(sm);
    gpu_dot::__testing::emulate_every_size(false);
}

/// The device's guard against its CPU model (`ozaki_guard_counts`), on every family of the
/// suite, at a shape of several output tiles with ragged edges and at three k (the f32 guard
/// sums a prefix of k; at k = 301 every other row of op(A) starts off a 16-byte boundary), and
/// at rows too long for the one-pass scaling's shared memory; and on the ordinary kinds of
/// input (positive, normal, ReLU, log-normal) at k = 4096, where many need the count after
/// the first: the default refuses exactly where the model finds an element that passes at no
/// candidate count, and otherwise runs at the largest count the model's elements need, or at
/// the model's early refusal's lead where that is one past it.
fn guard_is_its_model<A: Element>(sm: i32) {
    use gpu_dot::__testing::{ozaki_auto_moduli, ozaki_guard_counts, ozaki_refusal_lead};
    let suite = Family::suite(A::DTYPE);
    let ordinary: Vec<Family> = Family::ORDINARY.iter().map(|(_, f)| *f).collect();
    for (dims, families) in [
        ((200, 300, 330), &suite),
        ((200, 1000, 330), &suite),
        ((200, 301, 330), &suite),
        ((40, 20_000, 36), &suite),
        ((200, 4096, 330), &ordinary),
    ] {
        let k = dims.1;
        let auto = ozaki_auto_moduli(A::DTYPE, k);
        let counts: Vec<usize> = (auto..=(auto + 3).min(gpu_dot::MAX_MODULI)).collect();
        for &family in families {
            let (a, b) = family.operands::<A>(dims, common::fresh_seed());
            let wide = |x: &Array2<A>| x.iter().map(|&v| v.into_f64()).collect::<Vec<f64>>();
            let (wa, wb) = (wide(&a), wide(&b));
            let verdicts = ozaki_guard_counts(&wa, &wb, dims, A::DTYPE, &counts);
            let lead = ozaki_refusal_lead(&wa, &wb, dims, A::DTYPE, &counts);
            let model = verdicts
                .iter()
                .try_fold(0, |most, v| v.map(|c| most.max(c)))
                .map(|most| lead.map_or(most, |l| most.max(counts[l])));
            let p = a
                .try_gpu_dot_with(&b, &options(Precision::Auto))
                .unwrap_or_else(|e| panic!("default: {e}"));
            let what = format!("{} {} k={k}: {}", A::DTYPE, family.name(), p.route);
            let Route::Gpu {
                precision, guard, ..
            } = &p.route
            else {
                panic!("{what}: not on the GPU");
            };
            if sm < 80 {
                assert_eq!(*precision, Precision::Native, "{what}");
                continue;
            }
            let guard = guard
                .as_ref()
                .unwrap_or_else(|| panic!("{what}: unguarded"));
            match model {
                Some(count) => {
                    assert_eq!(guard.failed, 0, "{what}: the model passes every element");
                    assert_eq!(
                        *precision,
                        Precision::Ozaki {
                            moduli: count as u8
                        },
                        "{what}"
                    );
                }
                None => {
                    assert!(guard.failed > 0, "{what}: the model refuses an element");
                    assert_eq!(*precision, Precision::Native, "{what}");
                }
            }
        }
    }
}

/// Guarded products whose guard splits the operands on its way (one pass over op(A) with its
/// rows along k, op(B) or op(A) otherwise with its magnitudes), for the count its early
/// refusal's elements need (the first or the next), are bit for bit those that split after
/// the verdict: on every family of the suite (which chooses the first count, a later one, or
/// refuses), with op(A) and op(B) in C and F order and as strided views, at k with a ragged
/// last K tile and a guard's sample shorter than k; and on the ordinary kinds of input at
/// k = 4096, where the early refusal's lead is the next count, and the products that run at
/// it take the early split (normal, ReLU and log-normal inputs there do). Those that split
/// early enqueue the INT8 GEMM of the first count's layers before the host reads the
/// verdict, under the device's gate; they are bit for bit those that enqueue it after, and
/// the gate holds on many of them (the uniform family's, at least).
fn early_split_is_the_split<A: Element>(sm: i32) {
    use ndarray::s;
    let run = |a: ndarray::ArrayView2<'_, A>,
               b: ndarray::ArrayView2<'_, A>,
               early: bool,
               before: bool| {
        gpu_dot::__testing::split_early(early);
        gpu_dot::__testing::gemm_before_verdict(before);
        // Autotuning off: where the guard refuses, both runs take the same native kernel.
        let p = a.try_gpu_dot_with(&b, &options(Precision::Auto).autotune(false));
        gpu_dot::__testing::split_early(true);
        gpu_dot::__testing::gemm_before_verdict(true);
        p.unwrap_or_else(|e| panic!("default (early split {early}, GEMM before {before}): {e}"))
    };
    let kept_before = gpu_dot::__testing::gemms_before_verdict_kept();
    let f_order = |x: &Array2<A>| x.t().as_standard_layout().into_owned().reversed_axes();
    let mut emulated_first = 0;
    let suite = Family::suite(A::DTYPE);
    let ordinary: Vec<Family> = Family::ORDINARY.iter().map(|(_, f)| *f).collect();
    let at_next = gpu_dot::__testing::early_splits_at_next();
    for (dims, families) in [
        ((200, 301, 330), &suite),
        ((200, 1000, 330), &suite),
        ((200, 4096, 330), &ordinary),
    ] {
        for &family in families {
            let (a, b) = family.operands::<A>(dims, common::fresh_seed());
            let (af, bf) = (f_order(&a), f_order(&b));
            // Strided views: every other row and column of operands twice the size.
            let (a2, b2) = (
                Array2::from_shape_fn((2 * dims.0, 2 * dims.1), |(i, j)| a[(i / 2, j / 2)]),
                Array2::from_shape_fn((2 * dims.1, 2 * dims.2), |(i, j)| b[(i / 2, j / 2)]),
            );
            let layouts = [
                ("C · C", a.view(), b.view()),
                ("F · F", af.view(), bf.view()),
                ("C · F", a.view(), bf.view()),
                (
                    "strided",
                    a2.slice(s![..;2, ..;2]),
                    b2.slice(s![..;2, ..;2]),
                ),
            ];
            for (layout, x, y) in layouts {
                let (early, late) = (run(x, y, true, true), run(x, y, false, true));
                let after = run(x, y, true, false);
                assert_eq!(
                    early.route.to_string(),
                    after.route.to_string(),
                    "{layout}: the GEMM before the verdict"
                );
                assert!(
                    common::first_bit_difference(&early.c, &after.c).is_none(),
                    "{} {} {dims:?} {layout}: the GEMM before the verdict changes bits",
                    A::DTYPE,
                    family.name()
                );
                let what = format!(
                    "{} {} {dims:?} {layout}: {} against {}",
                    A::DTYPE,
                    family.name(),
                    early.route,
                    late.route
                );
                let (
                    Route::Gpu {
                        precision, guard, ..
                    },
                    Route::Gpu {
                        precision: late_precision,
                        guard: late_guard,
                        ..
                    },
                ) = (&early.route, &late.route)
                else {
                    panic!("{what}: not on the GPU");
                };
                // The same count, or both refused (the early refusal may test other elements
                // where the guard's passes split early, and so count the failed tiles
                // otherwise).
                let refused = |g: &Option<GuardReport>| g.map(|g| g.failed > 0);
                assert_eq!(
                    (precision, refused(guard)),
                    (late_precision, refused(late_guard)),
                    "{what}"
                );
                let differ = common::first_bit_difference(&early.c, &late.c);
                assert!(differ.is_none(), "{what}: differ at element {differ:?}");
                let first = gpu_dot::__testing::ozaki_auto_moduli(A::DTYPE, dims.1);
                emulated_first += (*precision
                    == Precision::Ozaki {
                        moduli: first as u8,
                    }) as usize;
            }
        }
    }
    // The uniform family runs at the first count in every layout on devices with INT8 tensor
    // cores.
    if sm >= 80 {
        assert!(emulated_first >= 8, "{}: {emulated_first}", A::DTYPE);
    }
    // The early split for the next count was taken, and the GEMM before the verdict ran and
    // was kept (both where the split runs in double arithmetic, on Hopper).
    let taken = [
        (
            gpu_dot::__testing::early_splits_at_next() - at_next,
            "split early at the next count",
        ),
        (
            gpu_dot::__testing::gemms_before_verdict_kept() - kept_before,
            "kept the GEMM enqueued before the verdict",
        ),
    ];
    for (count, what) in taken {
        println!("{}: {count} products {what}", A::DTYPE);
        if sm >= 90 {
            assert!(count >= 8, "{}: {count} products {what}", A::DTYPE);
        }
    }
}

/// The row panels of a product of host arrays share op(B): an emulated panel leaves op(B)'s
/// scaling, magnitudes and residues for the next, which takes them instead of doing them
/// again where its count is the same, splits op(B) again where it is not, and does it all
/// again after a panel the guard refused (which ran natively, and may have used the same
/// workspace). Each panel's rows come from another family (uniform, elements spread over
/// 2^±30, one huge entry per row, uniform again), with one op(B) in C order and then in F
/// order (the guard's one-pass scaling); every panel of the product must be, bit for bit,
/// the product of its rows alone, and the whole product is run twice with another op(B) of
/// the same shape in between (the same device buffer for op(B), none of it kept).
fn panels_share_op_b<A: Element>(sm: i32) {
    let (rows, k, n) = (256, 300, 330);
    let families = [
        Family::Uniform,
        Family::Spread(30),
        Family::OneHuge(40),
        Family::Uniform,
    ];
    let opts = |panel_rows| {
        DotOptions::builtin()
            .backend(Backend::Gpu)
            .precision(Precision::Auto)
            .autotune(false)
            .poison_output(true)
            .panel_rows(panel_rows)
    };
    let blocks: Vec<Array2<A>> = families
        .iter()
        .map(|f| f.operands::<A>((rows, k, n), common::fresh_seed()).0)
        .collect();
    let views: Vec<_> = blocks.iter().map(|b| b.view()).collect();
    let a = ndarray::concatenate(ndarray::Axis(0), &views).expect("the blocks stack");
    let (_, b_c) = Family::Uniform.operands::<A>((rows, k, n), common::fresh_seed());
    let (_, other) = Family::Spread(10).operands::<A>((rows, k, n), common::fresh_seed());
    let b_f = b_c.t().as_standard_layout().into_owned().reversed_axes();
    for (order, b) in [("C", &b_c), ("F", &b_f), ("C again", &b_c)] {
        let p = a
            .try_gpu_dot_with(b, &opts(Some(rows)))
            .unwrap_or_else(|e| panic!("{} B in {order} order: {e}", A::DTYPE));
        let what = format!("{} B in {order} order: {}", A::DTYPE, p.route);
        let Route::Gpu { panels, .. } = &p.route else {
            panic!("{what}: not on the GPU");
        };
        assert_eq!(*panels, families.len(), "{what}");
        let mut ran = Vec::new();
        for (i, block) in blocks.iter().enumerate() {
            let alone = block
                .try_gpu_dot_with(b, &opts(Some(rows)))
                .unwrap_or_else(|e| panic!("{what}: panel {i} alone: {e}"));
            // One panel: in panels of its own, each would weigh its count on its own rows.
            assert!(
                matches!(alone.route, Route::Gpu { panels: 1, .. }),
                "{what}: panel {i} alone: {}",
                alone.route
            );
            let got = p.c.slice(ndarray::s![i * rows..(i + 1) * rows, ..]);
            let differ = common::first_bit_difference(got.iter(), &alone.c);
            if let Some(at) = differ {
                panic!(
                    "{what}: panel {i} ({}, alone {}) differs from its rows' product alone at \
                     element {at}",
                    families[i].name(),
                    alone.route
                );
            }
            ran.push(alone.route.to_string());
        }
        println!("{what}: panels alone: {ran:?}");
        if sm >= 80 {
            // The uniform panels emulate; one is after a panel of another count or refused.
            assert!(emulated(&p.route), "{what}");
            assert!(ran[3].contains("ozaki"), "{what}: {ran:?}");
        }
        // Another op(B) of the same shape between the runs.
        let q = a
            .try_gpu_dot_with(&other, &opts(Some(rows)))
            .expect("another B");
        let native = a
            .try_gpu_dot_with(&other, &options(Precision::Native))
            .expect("native");
        let reference = Reference::new(a.view(), other.view());
        let (got, native) = (
            componentwise(q.c.view(), &reference).worst,
            componentwise(native.c.view(), &reference).worst,
        );
        assert!(
            got <= (2.0 * native).max(8.0),
            "{what}: another B: {got}, native {native}"
        );
    }
}

/// A product of host arrays in the default precision, in the panels the crate chooses for
/// it first (autotuning off), uniform and with scales paired along k.
fn host_panels<A: Element>(sm: i32) {
    let dims = (1024, 1024, 512);
    for family in [Family::Uniform, Family::PairedK(20)] {
        let (a, b) = family.operands::<A>(dims, common::fresh_seed());
        let reference = Reference::new(a.view(), b.view());
        let opts = |precision| {
            DotOptions::builtin()
                .backend(Backend::Gpu)
                .precision(precision)
                .autotune(false)
        };
        let native = a
            .try_gpu_dot_with(&b, &opts(Precision::Native))
            .expect("native");
        let default = a
            .try_gpu_dot_with(&b, &opts(Precision::Auto))
            .expect("default");
        let (native_r, default_r) = (
            componentwise(native.c.view(), &reference),
            componentwise(default.c.view(), &reference),
        );
        let route = &default.route;
        let what = format!("{} host panels, {}: {route}", A::DTYPE, family.name());
        println!(
            "{what}: native {:.3}, default {:.3}",
            native_r.worst, default_r.worst
        );
        let Route::Gpu { panels, .. } = route else {
            panic!("{what}: not on the GPU");
        };
        assert!(*panels > 1, "{what}: one panel");
        assert!(
            default_r.worst <= (2.0 * native_r.worst).max(8.0),
            "{what}: default {default_r:?}, native {native_r:?}"
        );
        // What the guard passes is within its bound; uniform inputs pass it on devices with
        // INT8 tensor cores (and never emulate elsewhere).
        if emulated(route) {
            assert!(default_r.worst <= 7.0, "{what}: {default_r:?}");
        }
        if family == Family::Uniform {
            assert_eq!(emulated(route), sm >= 80, "{what}");
        }
    }
}

//! The adversarial complex suite: the default precision against native's complex
//! componentwise bound, `|ĉ − c| ≤ small multiple of u·Σ|a||b|` with complex magnitudes, on
//! every family of `gpu_dot::accuracy::ComplexFamily::suite` (each real family in both parts,
//! parts 2^20 to 2^60 apart, purely imaginary rows, cancellation between `Aᵣ·Bᵣ` and `Aᵢ·Bᵢ`,
//! scales paired along k in both parts, Inf and NaN in one part only, subnormal results),
//! `Complex<f64>` and `Complex<f32>`, at k from 256 to 16384. Each case runs the native
//! precision, the default (its guard weighing emulation at every size) and unguarded Ozaki,
//! with the autotuner off (so that a default the guard refuses runs native's own kernel plan),
//! in both forms the default emulates in (the Karatsuba form and the real form of the stacked
//! parts), and prints their worst ratios as a table. The default must stay within
//! `max(2 × native's, 8)` and give native's Inf and NaN pattern; unguarded Ozaki is reported,
//! not judged. Needs a CUDA GPU.

mod common;

use gpu_dot::accuracy::complex::{ComplexFamily, ComplexSuiteCase};
use gpu_dot::accuracy::SUITE_KS;
use gpu_dot::{Dtype, Element, Route};

fn suite<T: Element>(dtype: Dtype) -> (usize, usize) {
    let (mut cases, mut emulated) = (0, 0);
    println!(
        "\n| c{} parts | k | native | default | route | unguarded Ozaki |",
        &dtype.name()[1..]
    );
    println!("|---|---|---|---|---|---|");
    for k in SUITE_KS {
        for family in ComplexFamily::suite(dtype) {
            // The seed is in every message, so that a failing case can be drawn again.
            let seed = common::fresh_seed();
            let case = ComplexSuiteCase::run::<T>(family, k, seed)
                .unwrap_or_else(|e| panic!("{dtype} {} k = {k} seed {seed}: {e}", family.name()));
            let (native, default) = (case.native, case.default);
            let ran = match &case.route {
                Route::Gpu {
                    precision,
                    guard: Some(g),
                    ..
                } if g.failed == 0 && !g.skipped => precision.to_string(),
                Route::Gpu { guard: Some(g), .. } => {
                    format!("native ({} of {} refused)", g.failed, g.tiles)
                }
                other => other.to_string(),
            };
            println!(
                "| {} | {k} | {:.3} | {:.3} | {ran} | {:.3e} |",
                family.name(),
                native.worst,
                default.worst,
                case.unguarded.worst
            );
            let what = format!(
                "{dtype} {} k = {k} seed {seed}: {}",
                family.name(),
                case.route
            );
            assert!(
                matches!(case.route, Route::Gpu { complex: true, .. }),
                "{what}: not a complex GPU product"
            );
            // Native's own ratio stays within the textbook bound (k + 2)·u·Σ|a||b|.
            assert!(native.worst <= k as f64 + 2.0, "{what}: native {native:?}");
            assert!(
                case.meets_rule(),
                "{what}: default {default:?}, native {native:?} ({})",
                case.native_route
            );
            cases += 1;
            emulated += case.emulated() as usize;
            if case.emulated() {
                // Each real product the guard passed keeps 7·u·Σ|x||y|: the complex modulus of
                // the error is within (7·√2 + 1)·u·Σ|a||b| < 11·u·Σ|a||b| (docs/precision.md).
                assert!(default.worst <= 11.0, "{what}: {default:?}");
            }
        }
    }
    (cases, emulated)
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_complex_default_is_within_native_bound_on_every_family() {
    let sm = match gpu_dot::device_status() {
        gpu_dot::DeviceStatus::Ready(d) => d.compute_capability.0 * 10 + d.compute_capability.1,
        gpu_dot::DeviceStatus::Unavailable(why) => panic!("no GPU: {why}"),
    };
    gpu_dot::__testing::emulate_every_size(true);
    // Both forms the default emulates in: the Karatsuba form (from its size up, and at every
    // size while every size emulates) and the real form of the stacked parts (below it).
    for (dtype, paired) in [
        (Dtype::F64, true),
        (Dtype::F32, true),
        (Dtype::F64, false),
        (Dtype::F32, false),
    ] {
        gpu_dot::__testing::complex_paired(paired);
        let (cases, emulated) = if dtype == Dtype::F64 {
            suite::<f64>(dtype)
        } else {
            suite::<f32>(dtype)
        };
        gpu_dot::__testing::complex_paired(true);
        let form = if paired { "Karatsuba" } else { "real" };
        println!(
            "c{}, the {form} form: {emulated} of {cases} cases emulated",
            &dtype.name()[1..]
        );
        if sm >= 80 {
            // The benign families emulate: uniform parts, parts apart, cancellation, at least.
            assert!(
                emulated >= 4 * 4,
                "{dtype}: only {emulated} of {cases} emulated"
            );
        } else {
            assert_eq!(emulated, 0);
        }
    }
    gpu_dot::__testing::emulate_every_size(false);
}

//! Where the default precision emulates on a Hopper: a model of a guarded Ozaki product's time
//! against the native product's, fitted to products measured on an H100 (the journal entry
//! benches/journal/2026-11-26-14-emulation-model-49db41b.md).
//!
//! A guarded product of `m × k · k × n` with `c` moduli (the guard's first count,
//! [`auto_moduli`]) runs its INT8 GEMMs
//! in `waves` of 132 tiles of 192 × 256 (`c` tiles per tile of the output), reads and splits
//! both operands ((m + n)·k elements: the guard's passes and the split), rebuilds m·n outputs,
//! and pays a fixed cost (launches, the guard's verdicts). Its time, in milliseconds:
//!
//! ```text
//! wave_k · waves · k / 1000 + wave · waves + operands · (m + n) k / 10⁶ + outputs · m n / 10⁶ + fixed
//! ```
//!
//! with the coefficients fitted (least squares on relative error, none negative) to the
//! default precision's times at 27 `f32` and 23 `f64` shapes from 512 × 65536 × 512 to
//! 65536 × 256 × 4096 (`ladder --shapes … --emulate-every-size`); the fit is within 8% of
//! every measured time but four (−17% and −15% at 512 × 65536 × 512, +12% and +13% at
//! 16384 × 4096 × 1024, all far from where the choice turns). The native product runs at `native_tflops`, the
//! speed cuBLAS and the native kernels reach at the large shapes (the model thus never makes
//! the native product slower than it is), and the default emulates where the model's native
//! time is at least [`MARGIN`] times the emulated one: enough that the guard's cost on inputs
//! it refuses (the native product after about 7% more) stays a rare loss of a few percent
//! against a common gain of a tenth or more.

use crate::element::Dtype;

use super::scaling::auto_moduli;

/// How much faster than the native product the model must find the emulated one.
pub(crate) const MARGIN: f64 = 1.08;

/// The output tiles of the INT8 GEMM (`oz::BM` × `oz::BN`) and the tiles a wave runs at
/// once (one a streaming multiprocessor of an H100 or H200).
const TILE: (usize, usize) = (192, 256);
const WAVE: usize = 132;

/// One element type's coefficients (milliseconds; see the module's formula).
struct Cost {
    wave_k: f64,
    wave: f64,
    operands: f64,
    outputs: f64,
    fixed: f64,
    native_tflops: f64,
}

/// `f32`, 8 moduli (9 from k = 16384): H100, 2026-11-26.
const F32: Cost = Cost {
    wave_k: 0.007_125,
    wave: 0.008_087,
    operands: 0.010_682,
    outputs: 0.000_905,
    fixed: 0.080_05,
    native_tflops: 49.0,
};
/// `f64`, 15 moduli (16 beyond k = 16384): H100, 2026-11-26.
const F64: Cost = Cost {
    wave_k: 0.007_820,
    wave: 0.0,
    operands: 0.018_413,
    outputs: 0.020_335,
    fixed: 0.024_58,
    native_tflops: 55.0,
};

impl Cost {
    fn of(dtype: Dtype) -> &'static Cost {
        match dtype {
            Dtype::F32 => &F32,
            Dtype::F64 => &F64,
        }
    }
}

/// The model's time of a guarded Ozaki product of `dtype`, in milliseconds.
pub(crate) fn emulated_ms(dtype: Dtype, (m, k, n): (usize, usize, usize)) -> f64 {
    let c = Cost::of(dtype);
    let tiles = m.div_ceil(TILE.0) * n.div_ceil(TILE.1) * auto_moduli(dtype, k);
    let waves = tiles.div_ceil(WAVE) as f64;
    let (m, k, n) = (m as f64, k as f64, n as f64);
    c.wave_k * waves * k / 1e3
        + c.wave * waves
        + c.operands * (m + n) * k / 1e6
        + c.outputs * m * n / 1e6
        + c.fixed
}

/// The model's time of the native product, in milliseconds.
pub(crate) fn native_ms(dtype: Dtype, (m, k, n): (usize, usize, usize)) -> f64 {
    2.0 * m as f64 * k as f64 * n as f64 / (Cost::of(dtype).native_tflops * 1e9)
}

/// Whether the model finds the guarded Ozaki product [`MARGIN`] times faster than the native
/// one on a Hopper.
pub(crate) fn emulation_pays_on_hopper(dtype: Dtype, dims: (usize, usize, usize)) -> bool {
    native_ms(dtype, dims) >= MARGIN * emulated_ms(dtype, dims)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The products the model was fitted to (H100, 2026-11-26; in
    /// benches/results/2026-11-26-14-emulation-model-49db41b/, emulation-shapes-*.json and
    /// ladder-2026-11-26-nvidia-h100-8192-clocks.json): shape, the moduli the default used, the native product's time and the
    /// default's (guarded Ozaki), in milliseconds.
    type Measured = (Dtype, (usize, usize, usize), usize, f64, f64);
    #[rustfmt::skip]
    const MEASURED: [Measured; 50] = [
        (Dtype::F32, (512, 65536, 512), 9, 0.821, 1.534),
        (Dtype::F32, (768, 65536, 768), 9, 1.717, 1.756),
        (Dtype::F32, (1024, 1024, 1024), 8, 0.069, 0.138),
        (Dtype::F32, (1024, 1024, 8192), 8, 0.378, 0.367),
        (Dtype::F32, (1024, 2048, 1024), 8, 0.129, 0.175),
        (Dtype::F32, (1024, 4096, 2048), 8, 0.423, 0.321),
        (Dtype::F32, (1024, 8192, 1024), 8, 0.420, 0.391),
        (Dtype::F32, (1024, 65536, 1024), 9, 3.155, 2.476),
        (Dtype::F32, (1536, 1536, 1536), 8, 0.211, 0.194),
        (Dtype::F32, (2048, 512, 8192), 8, 0.381, 0.418),
        (Dtype::F32, (2048, 1024, 4096), 8, 0.382, 0.324),
        (Dtype::F32, (2048, 2048, 2048), 8, 0.379, 0.299),
        (Dtype::F32, (2048, 16384, 2048), 9, 2.951, 1.472),
        (Dtype::F32, (3072, 3072, 3072), 8, 1.235, 0.613),
        (Dtype::F32, (4096, 1024, 4096), 8, 0.737, 0.518),
        (Dtype::F32, (4096, 4096, 512), 8, 0.424, 0.377),
        (Dtype::F32, (4096, 16384, 4096), 9, 11.486, 4.638),
        (Dtype::F32, (8192, 512, 8192), 8, 1.439, 1.228),
        (Dtype::F32, (8192, 768, 8192), 8, 2.108, 1.394),
        (Dtype::F32, (8192, 1024, 8192), 8, 2.827, 1.567),
        (Dtype::F32, (8192, 2048, 8192), 8, 5.639, 2.453),
        (Dtype::F32, (8192, 8192, 8192), 8, 22.322, 7.629),
        (Dtype::F32, (16384, 512, 16384), 8, 5.720, 4.403),
        (Dtype::F32, (16384, 1024, 4096), 8, 2.810, 1.613),
        (Dtype::F32, (16384, 4096, 1024), 8, 2.866, 1.469),
        (Dtype::F32, (32768, 512, 4096), 8, 2.846, 2.374),
        (Dtype::F32, (65536, 256, 4096), 8, 2.899, 4.025),
        (Dtype::F64, (512, 65536, 512), 16, 0.662, 2.085),
        (Dtype::F64, (1024, 65536, 1024), 16, 2.783, 3.957),
        (Dtype::F64, (2048, 2048, 2048), 15, 0.308, 0.445),
        (Dtype::F64, (2048, 16384, 2048), 16, 2.509, 2.724),
        (Dtype::F64, (3072, 3072, 3072), 15, 1.013, 1.049),
        (Dtype::F64, (4096, 2048, 8192), 15, 2.572, 2.490),
        (Dtype::F64, (4096, 4096, 512), 15, 0.313, 0.554),
        (Dtype::F64, (4096, 4096, 4096), 15, 2.512, 2.109),
        (Dtype::F64, (4096, 8192, 4096), 15, 5.137, 4.121),
        (Dtype::F64, (4096, 16384, 4096), 16, 10.349, 8.627),
        (Dtype::F64, (6144, 3072, 6144), 15, 4.290, 3.655),
        (Dtype::F64, (8192, 512, 8192), 15, 1.229, 2.184),
        (Dtype::F64, (8192, 1024, 8192), 15, 2.512, 2.961),
        (Dtype::F64, (8192, 1024, 16384), 15, 5.183, 5.778),
        (Dtype::F64, (8192, 1536, 8192), 15, 3.765, 3.761),
        (Dtype::F64, (8192, 2048, 8192), 15, 5.176, 4.630),
        (Dtype::F64, (8192, 8192, 8192), 15, 20.273, 14.394),
        (Dtype::F64, (16384, 1024, 4096), 15, 2.463, 2.929),
        (Dtype::F64, (16384, 2048, 16384), 15, 20.400, 17.206),
        (Dtype::F64, (16384, 4096, 1024), 15, 2.505, 2.617),
        (Dtype::F64, (16384, 4096, 2048), 15, 5.194, 4.445),
        (Dtype::F64, (32768, 512, 4096), 15, 2.424, 4.337),
        (Dtype::F64, (65536, 256, 4096), 15, 2.840, 7.194),
    ];

    /// The model counts the moduli the default used (its guard's first count, on uniform
    /// inputs the next at k = 16384 for `f64`), and comes within 18% of every measured time,
    /// within 8% of all but four.
    #[test]
    fn the_model_fits_the_measured_products() {
        let mut loose = Vec::new();
        for (dtype, dims, moduli, _, emulated) in MEASURED {
            // The guard's first count, or the next where it found the first too few.
            let first = auto_moduli(dtype, dims.1);
            assert!(moduli == first || moduli == first + 1, "{dtype} {dims:?}");
            let fit = emulated_ms(dtype, dims) / emulated;
            assert!((0.82..=1.18).contains(&fit), "{dtype} {dims:?}: {fit:.3}");
            if !(0.92..=1.08).contains(&fit) {
                loose.push((dtype, dims, fit));
            }
        }
        assert!(loose.len() <= 4, "{loose:?}");
    }

    /// Every product the emulation ran 1.35 times faster than native emulates, and none that
    /// it ran slower than native does. (One ran 1.32 times faster, 1024 × 4096 · 4096 × 2048
    /// `f32`, where the native product ran at 41 TFLOP/s, slower than the model's rate: the
    /// model leaves it native.)
    #[test]
    fn the_default_emulates_where_it_was_measured_faster() {
        for (dtype, dims, _, native, emulated) in MEASURED {
            let gain = native / emulated;
            let pays = emulation_pays_on_hopper(dtype, dims);
            if gain >= 1.35 {
                assert!(
                    pays,
                    "{dtype} {dims:?}: measured {gain:.2}× faster emulated"
                );
            }
            if gain < 1.0 {
                assert!(!pays, "{dtype} {dims:?}: measured {gain:.2}× emulated");
            }
        }
    }

    /// The shapes the rule before the model left native, and now emulates: thin and
    /// rectangular `f32` products with k from 512 and a 2048³ cube, an `f64` product with
    /// k = 2048; and the ones it keeps native.
    #[test]
    fn thin_products_emulate_where_they_pay() {
        for dims in [
            (16384, 1024, 4096),
            (8192, 1024, 8192),
            (16384, 4096, 1024),
            (2048, 2048, 2048),
            // tests/ozaki.rs's shapes for the guard's memory of refusals.
            (2560, 2560, 2560),
            (4096, 2560, 2560),
        ] {
            assert!(emulation_pays_on_hopper(Dtype::F32, dims), "{dims:?}");
        }
        assert!(emulation_pays_on_hopper(Dtype::F64, (8192, 2048, 8192)));
        // As before the model.
        assert!(emulation_pays_on_hopper(Dtype::F64, (4096, 4096, 4096)));
        for dims in [
            (1024, 1024, 1024),
            (65536, 256, 4096),
            (512, 65536, 512),
            (256, 256, 256),
        ] {
            assert!(!emulation_pays_on_hopper(Dtype::F32, dims), "{dims:?}");
            assert!(!emulation_pays_on_hopper(Dtype::F64, dims), "{dims:?}");
        }
        assert!(!emulation_pays_on_hopper(Dtype::F64, (2048, 2048, 2048)));
    }
}

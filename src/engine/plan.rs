//! The plan `Kernel::Auto` runs for a shape: which tile configuration, how many K splits, or
//! a GEMV for one-row and one-column products.

use std::fmt;

use crate::element::Dtype;
use crate::engine::table::{TileConfig, TileRow, WgRow};
use crate::options::Precision;

/// Fewest K elements one split of a warpgroup kernel's big tiles gets in the heuristic's plan:
/// below this the partial products and the reduction cost more than the extra blocks gain.
/// (The tuner's other candidates split by [`splits_for`], with the element type's
/// `min_k_per_split`, for every tile configuration.)
const MIN_K_PER_SPLIT: usize = 256;
/// Most K splits of one product.
pub(crate) const MAX_SPLITS: usize = 64;
/// Products with at most this many rows or columns, or at most [`DIRECT_WORK`] multiply-adds,
/// take the direct warpgroup kernels where there are any.
const DIRECT_THIN: usize = 128;
const DIRECT_WORK: usize = 1 << 28;
/// Fewest K elements a split of a direct warpgroup kernel gets.
const DIRECT_MIN_K_PER_SPLIT: usize = 64;

/// The device a plan is made for: element type, compute capability and multiprocessors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) dtype: Dtype,
    /// The precision asked for (its rows may fall back to FP32 ones).
    pub(crate) precision: Precision,
    pub(crate) sm: u32,
    pub(crate) sms: usize,
}

/// Per element type: big tiles from `big_from`·multiprocessors on, split-K for small tiles
/// below `split_below`·multiprocessors, the resident small-tile blocks per multiprocessor
/// that split-K aims to fill, and the fewest K elements a split gets (below it the partial
/// products and the reduction cost more than the extra blocks gain).
struct Thresholds {
    big_from: f64,
    split_below: f64,
    small_blocks_per_sm: usize,
    min_k_per_split: usize,
}

fn thresholds(dtype: Dtype) -> Thresholds {
    match dtype {
        // Measured on an H200 with 128 × 128 tiles: 1024³ (64 big tiles at two resident
        // blocks per multiprocessor) ran at 0.6× the small tiles' speed; big tiles paid from
        // about 240 per 132 SMs. The 64 × 128 tiles (four resident blocks) keep that product
        // size: twice the tiles.
        //
        // Splits of 64 K elements (four K tiles): on an H100 (2026-11-27, ladder with
        // autotuning off, benches/results/2026-11-27-05-guard-memory-split-k-6d6c1ac/
        // split-k-small-*), 384³ ran in 17.9 µs against 29.5
        // with splits of 256 (that is, none), 512³ in 24.6 against 35.4 and 256³ in 18.0
        // against 22.4: 1.2–1.4× cuBLAS's speed where it was 0.8–1.0×; host to host, 192³ to
        // 512³ ran 3–14% faster in the same call.
        Dtype::F32 => Thresholds {
            big_from: 480.0 / 132.0,
            split_below: 200.0 / 132.0,
            small_blocks_per_sm: 6,
            min_k_per_split: 64,
        },
        // Measured on an H200 (tools/dgemm-lab): the 64 × 64 tiles (three resident blocks per
        // multiprocessor) beat the 128 × 64 ones up to about 4096 × 8192, and lose at 8192³
        // (39.5 against 50 TFLOP/s); split-K pays below about 200 small tiles, and three
        // blocks per multiprocessor give the best measured splits (2 at 512³, 3 for
        // 64 × 8192 × 8192 and 8192 × 8192 × 64).
        // Splits of 64 gained 0–1.5 µs on the kernels at 128³–512³ in the same runs, but host
        // to host the tuner then chose more panels at 768³ and 1024³ and ran up to 34% slower:
        // 256 stays.
        Dtype::F64 => Thresholds {
            big_from: 40.0,
            split_below: 1.5,
            small_blocks_per_sm: 3,
            min_k_per_split: 256,
        },
    }
}

/// How a product is computed by the register-blocked family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Plan {
    /// A tiled SGEMM, the K range cut into `splits` parts when `splits > 1`.
    Tile {
        /// The tile configuration.
        config: TileConfig,
        /// K splits (1: none).
        splits: u32,
    },
    /// One-row product (`m == 1`): a vector times a matrix.
    GemvRow,
    /// One-column product (`n == 1`): a matrix times a vector.
    GemvCol,
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Plan::Tile { config, splits: 1 } => write!(f, "{}", config.name()),
            Plan::Tile { config, splits } => write!(f, "{} split-K {splits}", config.name()),
            Plan::GemvRow => write!(f, "gemv (one row)"),
            Plan::GemvCol => write!(f, "gemv (one column)"),
        }
    }
}

fn tiles(t: Target, config: TileConfig, m: usize, n: usize) -> usize {
    TileRow::of(t.dtype, t.precision, config, t.sm).tiles(m, n)
}

/// Splits that bring `tiles` small-tile blocks to about one full wave on the target's
/// multiprocessors, keeping at least the element type's `min_k_per_split` of K per split.
fn splits_for(t: Target, tiles: usize, k: usize) -> u32 {
    let th = thresholds(t.dtype);
    let want = (th.small_blocks_per_sm * t.sms) / tiles.max(1);
    let most = (k / th.min_k_per_split).clamp(1, MAX_SPLITS);
    want.clamp(1, most) as u32
}

/// The fixed plan for a shape, used when autotuning is off and as the first candidate when it
/// is on.
///
/// One row or one column: GEMV. Otherwise the big tiles when they are many enough to fill the
/// device, else 64×64 tiles, split along K when even those are few and K is long.
pub(crate) fn heuristic(t: Target, m: usize, k: usize, n: usize) -> Plan {
    if m == 1 {
        return Plan::GemvRow;
    }
    if n == 1 {
        return Plan::GemvCol;
    }
    let (sms, th) = (t.sms as f64, thresholds(t.dtype));
    if let Some(big) = WgRow::of(t.dtype, t.precision, TileConfig::Big, t.sm) {
        // The warpgroup kernels (one block per multiprocessor) outrun the mma.sync tiles at
        // every size. Thin and small products take the direct kernels, whose operands need no
        // panels (measured on an H200: 8192 × 8192 × 64 in 3xTF32 in 0.21 ms against 0.39
        // from panels, 512³ in 0.022 against 0.029; 1024³ in 0.062 against 0.048); the rest
        // the big tiles from panels. Either is split along K until it fills one wave.
        let (config, row) = match WgRow::of(t.dtype, t.precision, TileConfig::Small, t.sm) {
            Some(direct) if m.min(n) <= DIRECT_THIN || m * n * k <= DIRECT_WORK => {
                (TileConfig::Small, direct)
            }
            _ => (TileConfig::Big, big),
        };
        // The direct kernels' partial products are few and small: they split down to two K
        // tiles a split (measured on an H200: 256³ in 3xTF32 in 0.011 ms in four splits,
        // 0.022 unsplit).
        let min_k = if row.direct {
            DIRECT_MIN_K_PER_SPLIT
        } else {
            MIN_K_PER_SPLIT
        };
        let tiles = row.tiles(m, n);
        let most = (k / min_k).clamp(1, MAX_SPLITS);
        let splits = if tiles < t.sms && k >= 2 * min_k {
            (t.sms / tiles).clamp(1, most) as u32
        } else {
            1
        };
        return Plan::Tile { config, splits };
    }
    if tiles(t, TileConfig::Big, m, n) as f64 >= th.big_from * sms {
        return Plan::Tile {
            config: TileConfig::Big,
            splits: 1,
        };
    }
    let small = tiles(t, TileConfig::Small, m, n);
    let splits = if (small as f64) < th.split_below * sms && k >= 2 * th.min_k_per_split {
        splits_for(t, small, k)
    } else {
        1
    };
    Plan::Tile {
        config: TileConfig::Small,
        splits,
    }
}

/// The plans the autotuner measures for a shape (the heuristic's first).
///
/// When the heuristic splits K, only split plans compete: besides filling the device, split-K
/// shortens each sequential f32 sum, which keeps long-K skinny products as accurate as cuBLAS
/// (measured on an H200: 64×8192×8192 unsplit had 2.8× cuBLAS's error).
pub(crate) fn candidates(t: Target, m: usize, k: usize, n: usize) -> Vec<Plan> {
    let first = heuristic(t, m, k, n);
    let must_split = match first {
        Plan::GemvRow | Plan::GemvCol => return vec![first],
        Plan::Tile { splits, .. } => splits > 1,
    };
    let mut plans = vec![first];
    for config in TileConfig::ALL {
        let count = tiles(t, config, m, n);
        for splits in [1, splits_for(t, count, k)] {
            let plan = Plan::Tile { config, splits };
            if (splits > 1 || !must_split) && !plans.contains(&plan) {
                plans.push(plan);
            }
        }
    }
    plans
}

impl crate::device::context::Gpu {
    /// What kernel plans for `dtype` are made for on this device.
    pub(crate) fn target(
        &self,
        dtype: crate::element::Dtype,
        precision: crate::options::Precision,
    ) -> Target {
        Target {
            dtype,
            precision: precision.for_dtype(dtype),
            sm: self.kernel_sm(),
            sms: self.info.multiprocessors.max(1) as usize,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H200: Target = Target {
        dtype: Dtype::F32,
        precision: Precision::Native,
        sm: 90,
        sms: 132,
    };

    fn heuristic(m: usize, k: usize, n: usize, _sms: usize) -> Plan {
        super::heuristic(H200, m, k, n)
    }

    fn candidates(m: usize, k: usize, n: usize, _sms: usize) -> Vec<Plan> {
        super::candidates(H200, m, k, n)
    }

    fn splits_for(tiles: usize, k: usize, _sms: usize) -> u32 {
        super::splits_for(H200, tiles, k)
    }

    #[test]
    fn f64_plans_use_the_f64_tiles_and_split_thin_products() {
        let t = Target {
            dtype: Dtype::F64,
            ..H200
        };
        assert_eq!(
            super::heuristic(t, 8192, 8192, 8192),
            Plan::Tile {
                config: TileConfig::Big,
                splits: 1
            }
        );
        assert_eq!(
            super::heuristic(t, 4096, 4096, 4096),
            Plan::Tile {
                config: TileConfig::Small,
                splits: 1
            }
        );
        assert!(matches!(
            super::heuristic(t, 64, 8192, 8192),
            Plan::Tile { splits, .. } if splits > 1
        ));
        // Old devices run the SIMT fallback for both configurations.
        assert_eq!(
            TileRow::of(Dtype::F64, Precision::Native, TileConfig::Big, 75).stem,
            "dgemm_simt"
        );
    }

    #[test]
    fn tensor_core_f32_plans_on_sm_90_take_the_warpgroup_tiles_split_to_fill_a_wave() {
        for precision in [Precision::Tf32x3, Precision::Tf32] {
            let t = Target { precision, ..H200 };
            let plan = |m, k, n| super::heuristic(t, m, k, n);
            let big = |splits| Plan::Tile {
                config: TileConfig::Big,
                splits,
            };
            let direct = |splits| Plan::Tile {
                config: TileConfig::Small,
                splits,
            };
            assert_eq!(plan(4096, 4096, 4096), big(1));
            assert_eq!(plan(2048, 2048, 2048), big(1));
            // 64 tiles of 128 × 128 (3xTF32), 32 of 128 × 256 (TF32).
            let fill = if precision == Precision::Tf32 { 4 } else { 2 };
            assert_eq!(plan(1024, 1024, 1024), big(fill));
            // 4 tiles: split K until about one block per multiprocessor, at most K / 256.
            assert_eq!(plan(256, 8192, 256), big(32));
            assert_eq!(plan(8192, 64, 8192), big(1));
            // Thin and small products: the direct kernels (128 × 64 tiles either way round).
            assert_eq!(plan(8192, 8192, 64), direct(2));
            assert_eq!(plan(64, 8192, 8192), direct(2));
            assert_eq!(plan(512, 512, 512), direct(4));
            assert_eq!(plan(256, 256, 256), direct(4));
            assert_eq!(plan(256, 1024, 256), direct(16));
            assert_eq!(plan(100, 64, 100), direct(1));
            assert_eq!(plan(1, 64, 100), Plan::GemvRow);
            // Elsewhere the mma.sync plans stand.
            let t80 = Target { sm: 80, ..t };
            assert_eq!(
                super::heuristic(t80, 1024, 1024, 1024),
                super::heuristic(Target { sm: 80, ..H200 }, 1024, 1024, 1024)
            );
        }
    }

    #[test]
    fn one_row_and_one_column_products_use_gemv() {
        assert_eq!(heuristic(1, 4096, 4096, 132), Plan::GemvRow);
        assert_eq!(heuristic(4096, 4096, 1, 132), Plan::GemvCol);
        assert_eq!(candidates(1, 7, 9, 132), vec![Plan::GemvRow]);
    }

    #[test]
    fn large_products_use_big_tiles_and_small_ones_split_k() {
        let big = Plan::Tile {
            config: TileConfig::Big,
            splits: 1,
        };
        assert_eq!(heuristic(4096, 4096, 4096, 132), big);
        match heuristic(256, 4096, 256, 132) {
            Plan::Tile {
                config: TileConfig::Small,
                splits,
            } => assert!(splits > 1),
            other => panic!("{other:?}"),
        }
        // Short K is never split below the element type's least K per split: 64 for f32,
        // 256 for f64.
        assert_eq!(
            heuristic(256, 64, 256, 132),
            Plan::Tile {
                config: TileConfig::Small,
                splits: 1
            }
        );
        assert!(matches!(
            heuristic(512, 512, 512, 132),
            Plan::Tile { config: TileConfig::Small, splits } if splits == 8
        ));
        let f64 = Target {
            dtype: Dtype::F64,
            ..H200
        };
        assert!(matches!(
            super::heuristic(f64, 512, 511, 512),
            Plan::Tile { splits: 1, .. }
        ));
    }

    #[test]
    fn split_counts_stay_within_bounds() {
        for tiles in [1, 3, 50, 131, 132, 1000] {
            for k in [1, 255, 256, 4096, 1 << 20] {
                let s = splits_for(tiles, k, 132) as usize;
                assert!((1..=MAX_SPLITS).contains(&s));
                assert!(s == 1 || k / s >= thresholds(Dtype::F32).min_k_per_split);
            }
        }
    }

    #[test]
    fn split_shapes_only_compete_with_split_plans() {
        for (m, k, n) in [(64, 8192, 8192), (8192, 8192, 64), (256, 4096, 256)] {
            for plan in candidates(m, k, n, 132) {
                assert!(
                    matches!(plan, Plan::Tile { splits, .. } if splits > 1),
                    "{plan:?}"
                );
            }
        }
    }

    #[test]
    fn candidates_are_distinct_and_start_with_the_heuristic() {
        let c = candidates(512, 8192, 512, 132);
        assert_eq!(c[0], heuristic(512, 8192, 512, 132));
        for (i, p) in c.iter().enumerate() {
            assert!(!c[i + 1..].contains(p));
        }
    }

    #[test]
    fn the_default_and_native_have_the_same_plans() {
        // A default product that the guard refuses runs natively with the plan chosen for the
        // default (tuner::launch); the accuracy suites compare it with native's, the tuner
        // off, and need the two heuristics and candidate lists to agree.
        for dtype in [Dtype::F32, Dtype::F64] {
            for sm in [80, 90] {
                let native = Target { dtype, sm, ..H200 };
                let auto = Target {
                    precision: Precision::Auto,
                    ..native
                };
                for (m, k, n) in [
                    (48, 512, 80),
                    (48, 32768, 80),
                    (300, 513, 257),
                    (4096, 4096, 4096),
                ] {
                    assert_eq!(
                        super::heuristic(native, m, k, n),
                        super::heuristic(auto, m, k, n),
                        "{dtype} sm {sm} {m}×{k}×{n}"
                    );
                    assert_eq!(
                        super::candidates(native, m, k, n),
                        super::candidates(auto, m, k, n),
                        "{dtype} sm {sm} {m}×{k}×{n}"
                    );
                }
            }
        }
    }
}

//! Launchers for the register-blocked kernels of `kernels/sgemm_fast.cu`: two tile
//! configurations, split-K with a deterministic reduction, and GEMV kernels for one-row and
//! one-column products; plus the plan that `Kernel::Auto` runs for a shape.

use std::fmt;
use std::sync::Arc;

use cudarc::driver::{
    CudaSlice, CudaStream, CudaViewMut, DevicePtr, DeviceSlice, LaunchConfig, PushKernelArg,
};

use crate::context::Gpu;
use crate::error::GpuDotError;
use crate::registry::{layout_suffix, Family, TileConfig};
use crate::sgemm::{self, DeviceOperand};

/// Split-K ranges are multiples of the kernels' K tile.
const SPLIT_K_GRANULE: usize = 16;
/// Fewest K elements one split should get: below this the partial products and the
/// reduction cost more than the extra blocks gain.
const MIN_K_PER_SPLIT: usize = 256;
const MAX_SPLITS: usize = 64;
/// Big tiles from this many per multiprocessor·(240/132) on: fewer leave the device
/// under-filled at two resident blocks per multiprocessor (measured on an H200: 1024³, 64 big
/// tiles, ran at 0.6× the small tiles' speed).
const BIG_TILES_PER_SM: f64 = 240.0 / 132.0;
/// Small tiles below this many per multiprocessor·(200/132) get split-K when K allows.
const SPLIT_BELOW_TILES_PER_SM: f64 = 200.0 / 132.0;
/// Resident small-tile blocks per multiprocessor: split-K aims at one such wave.
const SMALL_BLOCKS_PER_SM: usize = 6;

/// How a product is computed by the register-blocked family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

fn tiles(config: TileConfig, m: usize, n: usize) -> usize {
    let (bm, bn) = config.tile();
    m.div_ceil(bm) * n.div_ceil(bn)
}

/// Splits that bring `tiles` small-tile blocks to about one full wave on `sms`
/// multiprocessors, keeping at least [`MIN_K_PER_SPLIT`] of K per split.
fn splits_for(tiles: usize, k: usize, sms: usize) -> u32 {
    let want = (SMALL_BLOCKS_PER_SM * sms) / tiles.max(1);
    let most = (k / MIN_K_PER_SPLIT).clamp(1, MAX_SPLITS);
    want.clamp(1, most) as u32
}

/// The fixed plan for a shape, used when autotuning is off and as the first candidate when it
/// is on.
///
/// One row or one column: GEMV. Otherwise 128×128 tiles when they are many enough to fill the
/// device, else 64×64 tiles, split along K when even those are few and K is long.
pub(crate) fn heuristic(m: usize, k: usize, n: usize, sms: usize) -> Plan {
    if m == 1 {
        return Plan::GemvRow;
    }
    if n == 1 {
        return Plan::GemvCol;
    }
    let sms_f = sms as f64;
    if tiles(TileConfig::Big, m, n) as f64 >= BIG_TILES_PER_SM * sms_f {
        return Plan::Tile {
            config: TileConfig::Big,
            splits: 1,
        };
    }
    let small = tiles(TileConfig::Small, m, n);
    let splits = if (small as f64) < SPLIT_BELOW_TILES_PER_SM * sms_f && k >= 2 * MIN_K_PER_SPLIT {
        splits_for(small, k, sms)
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
pub(crate) fn candidates(m: usize, k: usize, n: usize, sms: usize) -> Vec<Plan> {
    let first = heuristic(m, k, n, sms);
    let must_split = match first {
        Plan::GemvRow | Plan::GemvCol => return vec![first],
        Plan::Tile { splits, .. } => splits > 1,
    };
    let mut plans = vec![first];
    for config in [TileConfig::Big, TileConfig::Small] {
        let t = tiles(config, m, n);
        for splits in [1, splits_for(t, k, sms)] {
            let plan = Plan::Tile { config, splits };
            if (splits > 1 || !must_split) && !plans.contains(&plan) {
                plans.push(plan);
            }
        }
    }
    plans
}

/// Whether the 128-bit-load entries may read this operand.
fn aligned(op: &DeviceOperand) -> bool {
    let ptr = op.buf.device_ptr(op.buf.stream()).0;
    ptr % 16 == 0 && op.ld % 4 == 0
}

/// Enqueues `C = op(A) · op(B)` by `plan` on `stream` (dimensions at least 1, checked to fit).
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    plan: Plan,
    (m, k, n): (usize, usize, usize),
    a: &DeviceOperand,
    b: &DeviceOperand,
    c: &mut CudaViewMut<'_, f32>,
    ldc: usize,
    scratch: &mut Option<CudaSlice<f32>>,
) -> Result<(), GpuDotError> {
    sgemm::check_launch((m, k, n), a, b, c, ldc)?;
    let suffix = layout_suffix(a.trans, b.trans);
    match plan {
        Plan::GemvRow | Plan::GemvCol => {
            let (entry, blocks) = match plan {
                Plan::GemvRow => (
                    "sgemv_m1",
                    if b.trans {
                        n.div_ceil(8)
                    } else {
                        n.div_ceil(16)
                    },
                ),
                _ => (
                    "sgemv_n1",
                    if a.trans {
                        m.div_ceil(16)
                    } else {
                        m.div_ceil(8)
                    },
                ),
            };
            assert!(
                (plan == Plan::GemvRow && m == 1) || (plan == Plan::GemvCol && n == 1),
                "a GEMV plan for a product with more than one row and column"
            );
            let func = gpu.function(Family::Fast, &format!("{entry}_{suffix}"))?;
            let cfg = LaunchConfig {
                grid_dim: (grid_x(blocks)?, 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            };
            let scalars = sgemm::Scalars::new((m, k, n), a, b, ldc);
            let mut builder = stream.launch_builder(&func);
            sgemm::push_args(&mut builder, &scalars, &a.buf, &b.buf, c);
            // SAFETY: arguments in the order and types of `SGF_PARAMS` (int M, N, K; const
            // float* A; long long lda; const float* B; long long ldb; float* C; long long
            // ldc); the entry's layout suffix matches a.trans/b.trans; m == 1 (row GEMV) or
            // n == 1 (column GEMV), asserted above; the grid is the one the kernel file's
            // launch table gives for the entry (one block per 16 or 8 outputs, 256 threads);
            // the buffers cover op(A), op(B) and C (check_launch), and the kernels guard every
            // access by M, N and K.
            unsafe { builder.launch(cfg) }
                .map(drop)
                .map_err(GpuDotError::at("launching a GEMV kernel"))
        }
        Plan::Tile { config, splits } => {
            let al = if aligned(a) && aligned(b) { "" } else { "_u" };
            let base = format!("sgemm_fast_{}_{suffix}{al}", config.name_in_source());
            let tile_count = tiles(config, m, n);
            let grid_tiles = grid_x(tile_count)?;
            let block = (config.threads(), 1, 1);
            let smem = config.smem_bytes();
            if splits <= 1 {
                let func = gpu.function(Family::Fast, &base)?;
                let cfg = LaunchConfig {
                    grid_dim: (grid_tiles, 1, 1),
                    block_dim: block,
                    shared_mem_bytes: smem,
                };
                let scalars = sgemm::Scalars::new((m, k, n), a, b, ldc);
                let mut builder = stream.launch_builder(&func);
                sgemm::push_args(&mut builder, &scalars, &a.buf, &b.buf, c);
                // SAFETY: arguments in the order and types of `SGF_PARAMS`; the entry's layout
                // suffix matches a.trans/b.trans, and the 128-bit-load entry is chosen only
                // when both operands are 16-byte aligned with leading dimensions divisible by
                // 4 (`aligned`); the grid has one block per output tile (the kernel maps
                // blockIdx.x to a tile); block size and dynamic shared memory are the
                // configuration's, and the function's shared-memory limit was raised to it
                // when the module was loaded; the buffers cover op(A), op(B) and C
                // (check_launch), and edge tiles are guarded in the kernel.
                return unsafe { builder.launch(cfg) }
                    .map(drop)
                    .map_err(GpuDotError::at("launching an SGEMM kernel"));
            }
            let k_per_split = k
                .div_ceil(splits as usize)
                .next_multiple_of(SPLIT_K_GRANULE);
            let parts = k.div_ceil(k_per_split);
            let work = sgemm::scratch(stream, scratch, parts * m * n)?;
            let mut work = work.slice_mut(..parts * m * n);
            let func = gpu.function(Family::Fast, &format!("{base}_splitk"))?;
            let cfg = LaunchConfig {
                grid_dim: (grid_tiles, 1, parts as u32),
                block_dim: block,
                shared_mem_bytes: smem,
            };
            // The partial products go to the workspace with leading dimension n.
            let scalars = sgemm::Scalars::new((m, k, n), a, b, n);
            let kps = k_per_split as i32;
            let mut builder = stream.launch_builder(&func);
            sgemm::push_args(&mut builder, &scalars, &a.buf, &b.buf, &mut work);
            builder.arg(&kps);
            // SAFETY: as for the unsplit entry, plus the trailing `int k_per_split`, a positive
            // multiple of 16; gridDim.z = ceil(K / k_per_split) ≤ MAX_SPLITS, so every split
            // has a K range and writes its whole m × n partial product to the workspace at
            // z·m·n with leading dimension n; `work` holds parts·m·n floats.
            unsafe { builder.launch(cfg) }
                .map_err(GpuDotError::at("launching a split-K kernel"))?;

            let reduce = gpu.function(Family::Fast, "sgemm_splitk_reduce")?;
            let cfg = sgemm::grid_stride(m * n);
            let (mi, ni, parts_i, ldc) = (m as i32, n as i32, parts as i32, ldc as i64);
            let work = work.as_view();
            let mut builder = stream.launch_builder(&reduce);
            builder
                .arg(&mi)
                .arg(&ni)
                .arg(&parts_i)
                .arg(&work)
                .arg(c)
                .arg(&ldc);
            // SAFETY: arguments match `sgemm_splitk_reduce(int M, int N, int splits, const
            // float* W, float* C, long long ldc)`; W holds splits·m·n floats written by the
            // launch before it on the same stream; C covers m × n at ldc (check_launch); the
            // kernel loops over all m·n outputs whatever the grid.
            unsafe { builder.launch(cfg) }
                .map(drop)
                .map_err(GpuDotError::at("launching the split-K reduction"))
        }
    }
}

fn grid_x(blocks: usize) -> Result<u32, GpuDotError> {
    u32::try_from(blocks)
        .ok()
        .filter(|&b| b <= i32::MAX as u32)
        .ok_or(GpuDotError::TooLarge {
            dims: (blocks, 0, 0),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // Short K is never split below MIN_K_PER_SPLIT.
        assert_eq!(
            heuristic(256, 64, 256, 132),
            Plan::Tile {
                config: TileConfig::Small,
                splits: 1
            }
        );
    }

    #[test]
    fn split_counts_stay_within_bounds() {
        for tiles in [1, 3, 50, 131, 132, 1000] {
            for k in [1, 255, 256, 4096, 1 << 20] {
                let s = splits_for(tiles, k, 132) as usize;
                assert!((1..=MAX_SPLITS).contains(&s));
                assert!(s == 1 || k / s >= MIN_K_PER_SPLIT);
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
}

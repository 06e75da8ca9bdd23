//! The launcher: the INT8 GEMM chosen for the device and shape, the workspace, and the passes
//! of kernels/ozaki.cu enqueued in order (scale, split, the GEMMs, the reconstruction).

use std::sync::Arc;

use cudarc::driver::{CudaStream, CudaViewMut, LaunchConfig, PushKernelArg};

use crate::device::context::Gpu;
use crate::element::{Dtype, Element};
use crate::engine::args::{check_dims, grid_x, scratch, DevBuf, GemmArgs};
use crate::engine::family::Family;
use crate::engine::table::{OZAKI_GEMM, OZAKI_GEMM_MMA, OZAKI_GEMM_MMA_TILE, OZAKI_GEMM_TILE};
use crate::error::GpuDotError;
use crate::options::Precision;

use super::scaling::moduli_for;
use super::scheme::{norm_bound, scaling_bits, Consts, MAX_K};

/// Why [`launch`] launched nothing, or failed.
pub(crate) enum OzError {
    /// The product cannot run this way here (compute capability below 8.0, k of 0 or above
    /// [`MAX_K`], no room for the workspace, or the family does not build): nothing was
    /// enqueued, and the native kernels run it.
    Unavailable,
    Gpu(GpuDotError),
}

pub(super) const ALIGN: usize = 256;
/// The INT8 GEMM's output tile and threads (kernels/ozaki.cu's `@launch` line).
pub(super) const GEMM_TILE: (usize, usize) = OZAKI_GEMM_TILE.0;
pub(super) const GEMM_THREADS: u32 = OZAKI_GEMM_TILE.1;

/// How the INT8 GEMM's clusters of two blocks pair their tiles for an `m × n` result: tile
/// rows (sharing op(B)'s tiles) where their count is even or that of tile columns odd, else
/// tile columns (sharing op(A)'s); and the panels' padded extents `(Mp, Np)`, whole pairs.
pub(super) fn pairing(m: usize, n: usize) -> (bool, usize, usize) {
    let (tiles_m, tiles_n) = (m.div_ceil(GEMM_TILE.0), n.div_ceil(GEMM_TILE.1));
    let pair_m = tiles_m % 2 == 0 || tiles_n % 2 == 1;
    if pair_m {
        (
            true,
            tiles_m.next_multiple_of(2) * GEMM_TILE.0,
            tiles_n * GEMM_TILE.1,
        )
    } else {
        (
            false,
            tiles_m * GEMM_TILE.0,
            tiles_n.next_multiple_of(2) * GEMM_TILE.1,
        )
    }
}

/// The INT8 GEMM that runs a product: the warpgroup one (sm_90a), its clusters pairing tile
/// rows or tile columns, or the mma.sync one (sm_80 on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Gemm {
    Wg { pair_m: bool },
    Mma,
}

impl Gemm {
    /// The GEMM for an `m × n` result on a device of compute capability `sm` (≥ 80).
    pub(super) fn of(sm: u32, m: usize, n: usize) -> Gemm {
        if sm == 90 {
            Gemm::Wg {
                pair_m: pairing(m, n).0,
            }
        } else {
            Gemm::Mma
        }
    }

    /// The rows of the panels' tiles (X's, Y's) and the panels' padded extents `(Mp, Np)`.
    pub(super) fn panels(self, m: usize, n: usize) -> ((usize, usize), (usize, usize)) {
        match self {
            Gemm::Wg { .. } => {
                let (_, mp, np) = pairing(m, n);
                (GEMM_TILE, (mp, np))
            }
            Gemm::Mma => {
                let t = OZAKI_GEMM_MMA_TILE.0;
                (t, (m.next_multiple_of(t.0), n.next_multiple_of(t.1)))
            }
        }
    }
}

/// Bytes of the workspace of an `m × k × n` product on `count` moduli by `gemm`, and the
/// sections' offsets: (total, [EA, EB, PA, PB, R]).
pub(super) fn workspace(
    count: usize,
    (m, k, n): (usize, usize, usize),
    gemm: Gemm,
) -> (usize, [usize; 5]) {
    let (_, (mp, np)) = gemm.panels(m, n);
    let kp = k.next_multiple_of(128);
    let sizes = [
        4 * mp,
        4 * np,
        count * mp * kp,
        count * np * kp,
        count * m * n,
    ];
    let mut at = [0; 5];
    let mut total = 0;
    for (o, s) in at.iter_mut().zip(sizes) {
        *o = total;
        total += s.next_multiple_of(ALIGN);
    }
    (total, at)
}

/// Enqueues `C = op(A) · op(B)` by Ozaki scheme II on the first `moduli_for(..)` moduli, with
/// the workspace in `ws` (grown as needed), and returns the precision it ran in.
pub(crate) fn launch<T: Element>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    moduli: u8,
    args: GemmArgs<'_, '_, T>,
    c: &mut CudaViewMut<'_, T>,
    ws: &mut Option<DevBuf>,
) -> Result<Precision, OzError> {
    let (m, k, n) = args.dims();
    let sm = gpu.kernel_sm();
    if sm < 80 || k == 0 || k > MAX_K {
        return Err(OzError::Unavailable);
    }
    let count = moduli_for(T::DTYPE, moduli, k);
    let (bits_a, bits_b) = scaling_bits(count, k);
    if bits_a < 1 || bits_b < 1 {
        return Err(OzError::Unavailable);
    }
    let bound = norm_bound(count, k);
    let consts = Consts::cached(count);
    let gemm_kind = Gemm::of(sm, m, n);
    let (tile_rows, (mp, np)) = gemm_kind.panels(m, n);
    let kp = k.next_multiple_of(128);
    // Padded extents past `int`: the native kernels, which need no padding, may still run it.
    check_dims(mp, kp, np).map_err(|_| OzError::Unavailable)?;
    let function = |entry: &str| {
        gpu.function(Family::Ozaki, entry).map_err(|e| match e {
            GpuDotError::Compile { .. } => OzError::Unavailable,
            e => OzError::Gpu(e),
        })
    };
    let suffix = match T::DTYPE {
        Dtype::F64 => "d",
        Dtype::F32 => "s",
    };
    let scale = function(&format!("ozaki_scale_{suffix}"))?;
    let split = function(&format!("ozaki_split_{suffix}"))?;
    let gemm = function(match gemm_kind {
        Gemm::Wg { .. } => OZAKI_GEMM.0,
        Gemm::Mma => OZAKI_GEMM_MMA.0,
    })?;
    // The reconstruction for the fewest moduli that covers `count` (its limbs fit them).
    let upto = match count {
        0..=8 => 8,
        9..=16 => 16,
        _ => 18,
    };
    let rebuild = function(&format!("ozaki_rebuild{upto}_{suffix}"))?;
    let (total, at) = workspace(count, (m, k, n), gemm_kind);
    let work =
        scratch(stream, ws, total, &gpu.high_water.device).map_err(|_| OzError::Unavailable)?;
    let base = work.addr(stream);
    let fail = |what: &'static str| move |e| OzError::Gpu(GpuDotError::at(what)(e));
    let (ea, eb, pa, pb, r) = (
        base + at[0] as u64,
        base + at[1] as u64,
        base + at[2] as u64,
        base + at[3] as u64,
        base + at[4] as u64,
    );
    let (a_strides, b_strides) = args.row_strides();
    let (a_buf, b_buf) = args.bufs();
    let (mi, ni, ki, kpi) = (m as i32, n as i32, k as i32, kp as i32);
    // Scales, then residue panels, of op(A) (m × k) and op(B)ᵀ (n × k).
    for (rows, rows_p, tile_rows, x, (sr, sk), e, p, bits) in [
        (mi, mp, tile_rows.0 as i32, a_buf, a_strides, ea, pa, bits_a),
        (ni, np, tile_rows.1 as i32, b_buf, b_strides, eb, pb, bits_b),
    ] {
        // Rows along the contiguous index: one block of 32 × 32 threads per 32 rows; else a
        // warp per row.
        let along_r = sk != 1 && sr == 1;
        let cfg = LaunchConfig {
            grid_dim: (
                grid_x((rows as usize).div_ceil(32)).map_err(OzError::Gpu)?,
                if along_r { 1 } else { 4 },
                1,
            ),
            block_dim: (32, if along_r { 32 } else { 8 }, 1),
            shared_mem_bytes: 0,
        };
        let mut builder = stream.launch_builder(&scale);
        builder
            .arg(&rows)
            .arg(&ki)
            .arg(x)
            .arg(&sr)
            .arg(&sk)
            .arg(&bits)
            .arg(&bound)
            .arg(&e);
        // SAFETY: arguments match `ozaki_scale_{d,s}(int R, int K, const T* X, i64 sr, i64 sk,
        // int bits, double bound, int* E)` in order and type (T the entry's element type by
        // its suffix); element (r, k) of the R × K operand at X[r·sr + k·sk] lies in the
        // buffer (the operand covers its matrix, checked when the arguments were made) and
        // the kernel reads only r < R, k < K; E is the workspace's section of Rp ≥ R ints; one
        // block per 32 rows, of (32, 32) threads and grid y 1 where rows run along the
        // contiguous index (the kernel's own test), else of (32, 8) and grid y 4; static
        // shared memory only.
        unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki scaling"))?;
        let cfg = LaunchConfig {
            grid_dim: ((kp / 64) as u32, (rows_p / 32).min(65_535) as u32, 1),
            block_dim: (32, 8, 1),
            shared_mem_bytes: 0,
        };
        let rp = rows_p as i32;
        let mut builder = stream.launch_builder(&split);
        builder
            .arg(&rows)
            .arg(&ki)
            .arg(x)
            .arg(&sr)
            .arg(&sk)
            .arg(&e)
            .arg(&p)
            .arg(&rp)
            .arg(&kpi)
            .arg(&tile_rows)
            .arg(&consts);
        // SAFETY: arguments match `ozaki_split_{d,s}(int R, int K, const T* X, i64 sr, i64 sk,
        // const int* E, signed char* P, int Rp, int Kp, int TM, Consts c)`; X as for the
        // scaling, whose E (R ints) the launch before it on this stream wrote; P is the
        // workspace's section of count·Rp·Kp bytes, written whole (Rp a multiple of the GEMM's
        // tile rows TM: 192 or 256, or 128 for the mma.sync GEMM, all multiples of 32); grid
        // x = Kp/64, grid
        // y ≤ Rp/32 with the kernel looping over the rest, block (32, 8); `Consts` matches the
        // kernel's struct by value.
        unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki split"))?;
    }
    let (mpi, npi) = (mp as i32, np as i32);
    match gemm_kind {
        Gemm::Wg { pair_m } => {
            // A persistent grid: as many clusters as fit on the device at once (at most one per
            // unit of work, a pair of tiles of one layer), each looping over its units; one
            // cluster per unit where the driver cannot say how many fit (a cluster beyond them
            // would wait for another's whole share). The query needs the context current on
            // this thread, which the launches above made it.
            let units = (mp / GEMM_TILE.0) * (np / GEMM_TILE.1) / 2 * count;
            let block_dim = (GEMM_THREADS, 1, 1);
            let shared_mem_bytes = OZAKI_GEMM.1;
            let fit = gemm
                .occupancy_max_active_clusters(
                    LaunchConfig {
                        grid_dim: (2, 1, 1),
                        block_dim,
                        shared_mem_bytes,
                    },
                    stream,
                )
                .ok()
                .filter(|&n| n > 0)
                .map_or(units, |n| n as usize);
            let cfg = LaunchConfig {
                grid_dim: (grid_x(2 * units.min(fit)).map_err(OzError::Gpu)?, 1, 1),
                block_dim,
                shared_mem_bytes,
            };
            let pair_mi = pair_m as i32;
            let mut builder = stream.launch_builder(&gemm);
            builder
                .arg(&mi)
                .arg(&ni)
                .arg(&pa)
                .arg(&pb)
                .arg(&mpi)
                .arg(&npi)
                .arg(&kpi)
                .arg(&r)
                .arg(&consts)
                .arg(&pair_mi);
            // SAFETY: arguments match `ozaki_gemm(int M, int N, const signed char* PA, const
            // signed char* PB, int Mp, int Np, int Kp, unsigned char* R, Consts c, int
            // pair_m)`; PA and PB are the panels the split launches before it on this stream
            // write, in tiles of 192 and 256 rows (count·Mp·Kp and count·Np·Kp bytes at
            // 256-byte-aligned offsets, Kp a multiple of 128); `pairing` made Mp a multiple of
            // 384 and Np of 256 where pair_m, else Mp of 192 and Np of 512, so the units
            // (pairs of tiles of a layer) are whole; the grid an even count of blocks (the
            // kernel's clusters of two), each cluster looping over its units; R is the
            // workspace's section of count·M·N bytes, written whole (tiles past M or N store
            // nothing); 384 threads (the kernel's launch bound) and the table's dynamic shared
            // memory, to which the function's limit was raised when the module was loaded;
            // the kernel's instructions exist on sm_90 only (`Gemm::of`).
            unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki INT8 GEMM"))?;
        }
        Gemm::Mma => {
            let (tile, threads) = OZAKI_GEMM_MMA_TILE;
            let cfg = LaunchConfig {
                grid_dim: (
                    grid_x((mp / tile.0) * (np / tile.1)).map_err(OzError::Gpu)?,
                    1,
                    count as u32,
                ),
                block_dim: (threads, 1, 1),
                shared_mem_bytes: OZAKI_GEMM_MMA.1,
            };
            let mut builder = stream.launch_builder(&gemm);
            builder
                .arg(&mi)
                .arg(&ni)
                .arg(&pa)
                .arg(&pb)
                .arg(&mpi)
                .arg(&npi)
                .arg(&kpi)
                .arg(&r)
                .arg(&consts);
            // SAFETY: arguments match `ozaki_gemm_mma(int M, int N, const signed char* PA,
            // const signed char* PB, int Mp, int Np, int Kp, unsigned char* R, Consts c)`; PA
            // and PB are the panels the split launches before it on this stream write, in
            // tiles of 128 rows (count·Mp·Kp and count·Np·Kp bytes at 256-byte-aligned
            // offsets, Mp and Np multiples of 128, Kp of 128); one block per 128 × 128 tile of
            // Mp × Np in x and per modulus in z; R is the workspace's section of count·M·N
            // bytes, written whole (tiles past M or N store nothing); 256 threads (the
            // kernel's launch bound) and the table's dynamic shared memory, to which the
            // function's limit was raised when the module was loaded; mma.sync, ldmatrix and
            // cp.async exist from sm_80 on, checked above.
            unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki INT8 GEMM"))?;
        }
    }
    let cfg = LaunchConfig {
        grid_dim: (n.div_ceil(4 * 256) as u32, m.min(65_535) as u32, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let ldc = args.ldc();
    let ((asr, ask), (bsr, bsk)) = (a_strides, b_strides);
    let mut builder = stream.launch_builder(&rebuild);
    builder
        .arg(&mi)
        .arg(&ni)
        .arg(&ki)
        .arg(&r)
        .arg(&ea)
        .arg(&eb)
        .arg(&mut *c)
        .arg(&ldc)
        .arg(a_buf)
        .arg(&asr)
        .arg(&ask)
        .arg(b_buf)
        .arg(&bsr)
        .arg(&bsk)
        .arg(&consts);
    // SAFETY: arguments match `ozaki_rebuild{8,16,18}_{d,s}(int M, int N, int K, const unsigned char*
    // R, const int* EA, const int* EB, T* C, i64 ldc, const T* A, i64 asr, i64 ask, const T*
    // B, i64 bsr, i64 bsk, Consts c)`; R, EA and EB were written by the launches before it on
    // this stream; C covers M × N at ldc (checked when the arguments were made); A and B are
    // the operands with the strides of op(A) and op(B)ᵀ, read only for k < K; the kernel
    // loops over all rows (grid y) and quads of columns (grid x) whatever the grid.
    unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki reconstruction"))?;
    Ok(Precision::Ozaki {
        moduli: count as u8,
    })
}

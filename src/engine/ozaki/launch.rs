//! The launcher: the INT8 GEMM chosen for the device and shape, the workspace, and the passes
//! of kernels/ozaki.cu enqueued in order (scale, split, the GEMMs, the reconstruction).

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, CudaViewMut, LaunchConfig, PushKernelArg};

use crate::device::context::Gpu;
use crate::element::{Dtype, Element};
use crate::engine::args::{check_dims, grid_x, scratch, DevBuf, GemmArgs};
use crate::engine::family::Family;
use crate::engine::table::{
    OZAKI_GEMM, OZAKI_GEMM_MMA, OZAKI_GEMM_MMA_TILE, OZAKI_GEMM_TILE, OZAKI_GUARD_GEMM,
    OZAKI_GUARD_GEMM_MMA, OZAKI_GUARD_ROWS_SMEM, OZAKI_SURE_GEMM, OZAKI_SURE_GEMM_MMA,
};
use crate::error::GpuDotError;
use crate::options::{Precision, MAX_MODULI};

use super::guard::{guard_sample, unit_roundoff, GUARD};
use super::scaling::moduli_for;
use super::scheme::{norm_bound, scaling_bits, Consts, MAX_K};

/// Why [`launch`] launched nothing, or failed.
pub(crate) enum OzError {
    /// The product cannot run this way here (compute capability below 8.0, k of 0 or above
    /// [`MAX_K`], no room for the workspace, or the family does not build): nothing was
    /// enqueued, and the native kernels run it.
    Unavailable,
    /// The guard found an element that no count it weighed keeps within native's bound:
    /// nothing more was enqueued, and the native kernels run the product.
    Guarded(GuardReport),
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

/// Sections of the workspace, by index into [`workspace`]'s offsets.
const EA: usize = 0;
const EB: usize = 1;
const PA: usize = 2;
const PB: usize = 3;
const R: usize = 4;
const SA: usize = 5;
const SB: usize = 6;
const LA: usize = 7;
const LB: usize = 8;
const NEED: usize = 9;
const FLAGS: usize = 10;
const KEYS: usize = 11;

/// Bytes of the workspace of an `m × k × n` product on up to `count` moduli by `gemm`, with
/// `shifts` layers of row shifts (one, or one per candidate count for the guard), and the
/// sections' offsets: [EA, EB, PA, PB, R] and, when `guarded`, the guard's [SA, SB, LA, LB,
/// NEED, FLAGS, KEYS] (the magnitude shifts, the scaled 1-norms, one int per strip of a GEMM
/// tile, the early refusal's int and the sure test's, and the sure test's keys, 8 bytes a row
/// of X and of Y).
pub(super) fn workspace(
    count: usize,
    shifts: usize,
    guarded: bool,
    (m, k, n): (usize, usize, usize),
    gemm: Gemm,
) -> (usize, [usize; 12]) {
    let ((tm, tn), (mp, np)) = gemm.panels(m, n);
    let kp = k.next_multiple_of(128);
    let g = guarded as usize;
    let sizes = [
        4 * mp * shifts,
        4 * np * shifts,
        count * mp * kp,
        count * np * kp,
        count.max(4 * g) * m * n,
        4 * mp * g,
        4 * np * g,
        8 * mp * g,
        8 * np * g,
        4 * (mp / tm) * (np / tn) * JUDGE_STRIPS * g,
        8 * g,
        8 * (mp + np) * g,
    ];
    let mut at = [0; 12];
    let mut total = 0;
    for (o, s) in at.iter_mut().zip(sizes) {
        *o = total;
        total += s.next_multiple_of(ALIGN);
    }
    (total, at)
}

/// The guard's arguments to the scaling pass (`oz::GuardScale`): the candidate counts'
/// scaling bits and norm bounds, `n` of them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct GuardScale {
    n: i32,
    bits: [i32; MAX_CANDIDATES],
    unused: i32,
    bound: [f64; MAX_CANDIDATES],
}

const _: () = assert!(std::mem::size_of::<GuardScale>() == 56);

// SAFETY: `GuardScale` is `#[repr(C)]` plain data (integers and doubles), laid out as the
// kernels' `oz::GuardScale` (56 bytes, asserted on both sides).
unsafe impl cudarc::driver::DeviceRepr for GuardScale {}

/// The guard GEMM's epilogue arguments (`oz::Guard`): the rows' shifts for each candidate
/// count (`ea[c·lde_a + i]`), magnitude shifts, scaled 1-norms, and one int per output tile
/// (`need[tile_row·tiles_n + tile_col]`) that receives the largest, over the tile's elements,
/// of the index of the first candidate each passes at (`n`: none).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct GuardArgs {
    ea: u64,
    eb: u64,
    sa: u64,
    sb: u64,
    la: u64,
    lb: u64,
    need: u64,
    lde_a: i32,
    lde_b: i32,
    tiles_n: i32,
    k: i32,
    n: i32,
    unused: i32,
    gu: f64,
}

const _: () = assert!(std::mem::size_of::<GuardArgs>() == 88);

// SAFETY: `GuardArgs` is `#[repr(C)]` plain data (device addresses as integers, integers and
// a double), laid out as the kernels' `oz::Guard` (88 bytes, asserted on both sides); the
// addresses point into the workspace the launches that read them are ordered after.
unsafe impl cudarc::driver::DeviceRepr for GuardArgs {}

/// The strips of rows the guard's judge splits each output tile into (a block and a verdict
/// each): enough blocks to keep the loads of S in flight.
const JUDGE_STRIPS: usize = 8;

// A strip's rows fit the judge's shared array (`JUDGE_ROWS` in kernels/ozaki.cu).
const _: () = assert!(
    GEMM_TILE.0.div_ceil(JUDGE_STRIPS) <= 64
        && OZAKI_GEMM_MMA_TILE.0 .0.div_ceil(JUDGE_STRIPS) <= 64
);

/// Threads of a block of the guard's one-pass scaling (`ROWS_NT` in kernels/ozaki.cu).
const GUARD_ROWS_THREADS: u32 = 256;

/// Elements the early refusal tests, a block each.
const REFUSAL_ELEMENTS: u32 = 8;

/// The most candidate counts the guard weighs at once.
pub(crate) const MAX_CANDIDATES: usize = 4;

/// What the guard found for one product: the output tiles of its INT8 GEMM, and those that
/// no candidate count passed (then the whole product runs natively).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuardReport {
    /// Output tiles the guard judged.
    pub tiles: usize,
    /// Tiles with an element that no count of moduli the guard weighed keeps within native's
    /// bound: any sends the product to the native kernels. Where the guard refused before
    /// its GEMM (an element that fails whatever its magnitudes' sum, as when the inputs'
    /// scales pair along k), every tile counts.
    pub failed: usize,
}

/// How an Ozaki launch ended.
pub(crate) struct Emulated {
    /// The precision it ran in (`Ozaki` with its count).
    pub(crate) precision: Precision,
    /// The guard's verdict, when the product was guarded.
    pub(crate) guard: Option<GuardReport>,
}

/// Enqueues `C = op(A) · op(B)` by Ozaki scheme II, with the workspace in `ws` (grown as
/// needed), and returns the precision it ran in. Unguarded, it runs on the first
/// `moduli_for(..)` moduli. `guarded` (the default precision), it first runs the guard
/// (kernels/ozaki.cu, `ozaki_guard_*`) for the automatic count and up to three more, waits
/// for its verdict, and runs on the fewest moduli that every element passes at; where some
/// element passes at none, nothing more is enqueued and [`OzError::Guarded`] says so (the
/// native kernels then run the product).
pub(crate) fn launch<T: Element>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    moduli: u8,
    guarded: bool,
    args: GemmArgs<'_, '_, T>,
    c: &mut CudaViewMut<'_, T>,
    ws: &mut Option<DevBuf>,
) -> Result<Emulated, OzError> {
    let (m, k, n) = args.dims();
    let sm = gpu.kernel_sm();
    if sm < 80 || k == 0 || k > MAX_K {
        return Err(OzError::Unavailable);
    }
    let first = moduli_for(T::DTYPE, moduli, k);
    // The counts weighed: the automatic one alone unguarded, else it and up to three more.
    let candidates: Vec<usize> = if guarded {
        (first..=(first + MAX_CANDIDATES - 1).min(MAX_MODULI)).collect()
    } else {
        vec![first]
    };
    let (bits_a, bits_b) = scaling_bits(first, k);
    if bits_a < 1 || bits_b < 1 {
        return Err(OzError::Unavailable);
    }
    let most = *candidates.last().expect("at least one count");
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
    let (total, at) = workspace(most, candidates.len(), guarded, (m, k, n), gemm_kind);
    let work =
        scratch(stream, ws, total, &gpu.high_water.device).map_err(|_| OzError::Unavailable)?;
    let base = work.addr(stream);
    let sec = |i: usize| base + at[i] as u64;
    let fail = |what: &'static str| move |e| OzError::Gpu(GpuDotError::at(what)(e));
    let (a_strides, b_strides) = args.row_strides();
    let (a_buf, b_buf) = args.bufs();
    let ((asr, ask), (bsr, bsk)) = (a_strides, b_strides);
    let (mi, ni, ki, kpi) = (m as i32, n as i32, k as i32, kp as i32);
    // op(A) (m × k) and op(B)ᵀ (n × k), as rows.
    let operands = [
        (
            mi,
            mp,
            tile_rows.0 as i32,
            a_buf,
            a_strides,
            sec(EA),
            sec(PA),
            sec(SA),
            sec(LA),
        ),
        (
            ni,
            np,
            tile_rows.1 as i32,
            b_buf,
            b_strides,
            sec(EB),
            sec(PB),
            sec(SB),
            sec(LB),
        ),
    ];
    let (scale, guard_scale) = if guarded {
        (
            None,
            Some(function(&format!("ozaki_guard_scale_{suffix}"))?),
        )
    } else {
        (Some(function(&format!("ozaki_scale_{suffix}"))?), None)
    };
    // 1. Scales: each row's shift (for each candidate count when guarded, with the guard's
    // magnitude shift and scaled 1-norm).
    let mut weighed = GuardScale {
        n: candidates.len() as i32,
        ..GuardScale::default()
    };
    for (i, &count) in candidates.iter().enumerate() {
        weighed.bits[i] = scaling_bits(count, k).0;
        weighed.bound[i] = norm_bound(count, k);
    }
    // The guard's sample of k, and the operands whose scaling and magnitudes run as one pass:
    // rows along k's contiguous index, short enough to sit in shared memory.
    let kg = guard_sample(T::DTYPE, k);
    let kgp = kg.next_multiple_of(128);
    let (kgi, kgpi) = (kg as i32, kgp as i32);
    let row_bytes = (k * std::mem::size_of::<T>()).next_multiple_of(16) + kgp;
    let one_pass = |sk: i64| guarded && sk == 1 && row_bytes <= OZAKI_GUARD_ROWS_SMEM as usize;
    for &(rows, rows_p, tm, x, (sr, sk), e, p, s, l) in &operands {
        if one_pass(sk) {
            let rows_fn = function(&format!("ozaki_guard_rows_{suffix}"))?;
            let cfg = LaunchConfig {
                grid_dim: (grid_x(rows_p).map_err(OzError::Gpu)?, 1, 1),
                block_dim: (GUARD_ROWS_THREADS, 1, 1),
                shared_mem_bytes: row_bytes as u32,
            };
            let lde = rows_p as i32;
            let mut builder = stream.launch_builder(&rows_fn);
            builder
                .arg(&rows)
                .arg(&ki)
                .arg(x)
                .arg(&sr)
                .arg(&weighed)
                .arg(&e)
                .arg(&lde)
                .arg(&s)
                .arg(&l)
                .arg(&p)
                .arg(&kgi)
                .arg(&kgpi)
                .arg(&tm);
            // SAFETY: arguments match `ozaki_guard_rows_{d,s}(int R, int K, const T* X, i64
            // sr, GuardScale g, int* E, int ldE, int* S, double* L, signed char* P, int Kg, int
            // Kgp, int TM)`; X as for `ozaki_guard_scale_*` with sk = 1 (row r's K elements
            // contiguous from X + r·sr); E, S and L as for that kernel; P is the start of the
            // panel section (at least Rp·Kgp bytes, Kgp ≤ the product's Kp), written whole in
            // the tiles of TM rows, as by `ozaki_magnitudes_*`; one block of
            // `GUARD_ROWS_THREADS` per row of Rp; `row_bytes` of dynamic shared memory (K
            // elements rounded up to 16 bytes, then Kgp), at most the limit the module raised
            // for the entry (`OZAKI_GUARD_ROWS_SMEM`).
            unsafe { builder.launch(cfg) }
                .map_err(fail("launching the Ozaki guard's one-pass scaling"))?;
            continue;
        }
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
        match (&scale, &guard_scale) {
            (Some(scale), _) => {
                let (bits, bound) = (bits_a, norm_bound(first, k));
                let mut builder = stream.launch_builder(scale);
                builder
                    .arg(&rows)
                    .arg(&ki)
                    .arg(x)
                    .arg(&sr)
                    .arg(&sk)
                    .arg(&bits)
                    .arg(&bound)
                    .arg(&e);
                // SAFETY: arguments match `ozaki_scale_{d,s}(int R, int K, const T* X, i64
                // sr, i64 sk, int bits, double bound, int* E)` in order and type (T the
                // entry's element type by its suffix); element (r, k) of the R × K operand at
                // X[r·sr + k·sk] lies in the buffer (the operand covers its matrix, checked
                // when the arguments were made) and the kernel reads only r < R, k < K; E is
                // the workspace's section of Rp ≥ R ints; one block per 32 rows, of (32, 32)
                // threads and grid y 1 where rows run along the contiguous index (the
                // kernel's own test), else of (32, 8) and grid y 4; static shared memory only.
                unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki scaling"))?;
            }
            (None, Some(guard_scale)) => {
                let lde = rows_p as i32;
                let mut builder = stream.launch_builder(guard_scale);
                builder
                    .arg(&rows)
                    .arg(&ki)
                    .arg(x)
                    .arg(&sr)
                    .arg(&sk)
                    .arg(&weighed)
                    .arg(&e)
                    .arg(&lde)
                    .arg(&s)
                    .arg(&l);
                // SAFETY: arguments match `ozaki_guard_scale_{d,s}(int R, int K, const T* X,
                // i64 sr, i64 sk, GuardScale g, int* E, int ldE, int* S, double* L)`; X as for
                // `ozaki_scale_*`; E is the workspace's section of g.n · Rp ints (layer c at
                // E + c·ldE, ldE = Rp ≥ R), S and L its sections of Rp ints and Rp doubles,
                // written for r < R; `GuardScale` matches the kernel's struct by value; the
                // grid and block as for `ozaki_scale_*`.
                unsafe { builder.launch(cfg) }
                    .map_err(fail("launching the Ozaki guard's scaling"))?;
            }
            (None, None) => unreachable!("one of the two scalings"),
        }
    }
    // 2. The guard: magnitude panels, their product judged tile by tile, and its verdict.
    let mut chosen = 0;
    let mut report = None;
    if guarded {
        // The early refusal's int, then the sure test's.
        let refused = sec(FLAGS);
        let unsure = refused + 4;
        // SAFETY: the workspace's FLAGS section holds two ints from `refused`, cleared on this
        // stream before the launches below read and set them.
        unsafe { cudarc::driver::result::memset_d8_async(refused, 0, 8, stream.cu_stream()) }
            .map_err(fail("clearing the Ozaki guard's flags"))?;
        let tiles = (mp / tile_rows.0) * (np / tile_rows.1);
        let need = sec(NEED);
        // The magnitudes' int32 product lies in the residues' section until the GEMM below
        // writes them (it holds at least 4·m·n bytes: `most` ≥ 4 where guarded).
        let sums = sec(R);
        let guard = GuardArgs {
            ea: sec(EA),
            eb: sec(EB),
            sa: sec(SA),
            sb: sec(SB),
            la: sec(LA),
            lb: sec(LB),
            need,
            lde_a: mp as i32,
            lde_b: np as i32,
            tiles_n: (np / tile_rows.1) as i32,
            k: ki,
            n: candidates.len() as i32,
            unused: 0,
            gu: GUARD * unit_roundoff(T::DTYPE),
        };
        // An early verdict from a few elements' exact magnitudes' sums: where one fails at
        // every count, the product is refused at once (the magnitudes, the keys and the sure
        // test's GEMM then leave without work, and the host launches nothing more).
        let refuse = function(&format!("ozaki_guard_refuse_{suffix}"))?;
        let cfg = LaunchConfig {
            grid_dim: (REFUSAL_ELEMENTS, 1, 1),
            block_dim: (1024, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut builder = stream.launch_builder(&refuse);
        builder
            .arg(&mi)
            .arg(&ni)
            .arg(&kgi)
            .arg(a_buf)
            .arg(&asr)
            .arg(&ask)
            .arg(b_buf)
            .arg(&bsr)
            .arg(&bsk)
            .arg(&guard)
            .arg(&refused);
        // SAFETY: arguments match `ozaki_guard_refuse_{d,s}(int M, int N, int Kg, const T* X,
        // i64 xsr, i64 xsk, const T* Y, i64 ysr, i64 ysk, Guard g, int* refused)`; X and Y are
        // the operands with the strides of op(A) and op(B)ᵀ, read for rows below M and N and
        // k < Kg = kg ≤ k; `GuardArgs` as for the judge below, whose sigmas, norms and shifts
        // the scalings before it on this stream wrote; `refused` the FLAGS section's first
        // int, zeroed above; blocks of 1024 threads, static shared memory only.
        unsafe { builder.launch(cfg) }
            .map_err(fail("launching the Ozaki guard's early refusal"))?;
        // The magnitudes of the first `kg` inner indices, in panels `kgp` wide, of the
        // operands the one-pass scaling did not take.
        let magnitudes = function(&format!("ozaki_magnitudes_{suffix}"))?;
        for &(rows, rows_p, tm, x, (sr, sk), _, p, s, _) in &operands {
            if one_pass(sk) {
                continue;
            }
            let cfg = split_config(kgp, rows_p);
            let rp = rows_p as i32;
            let mut builder = stream.launch_builder(&magnitudes);
            builder
                .arg(&rows)
                .arg(&kgi)
                .arg(x)
                .arg(&sr)
                .arg(&sk)
                .arg(&s)
                .arg(&p)
                .arg(&rp)
                .arg(&kgpi)
                .arg(&tm)
                .arg(&refused);
            // SAFETY: arguments match `ozaki_magnitudes_{d,s}(int R, int K, const T* X, i64
            // sr, i64 sk, const int* S, signed char* P, int Rp, int Kp, int TM, const int*
            // refused)`; X as for the scaling, whose S (R ints) a launch before it on this
            // stream wrote, read for k < K = kg ≤ the operand's k; P is the start of the
            // workspace's panel section (Rp·Kp bytes, Kp = kgp ≤ the product's Kp, of at
            // least count·Rp·Kp), written whole, in the tiles of the GEMM's rows TM (as for
            // `ozaki_split_*`); `refused` the int the early refusal wrote; grid and block as
            // for the split with Kp = kgp (the kernel's layout: one block per 64 k and 32
            // rows).
            unsafe { builder.launch(cfg) }
                .map_err(fail("launching the Ozaki guard's magnitudes"))?;
        }
        // The sure test: each row's key, then the magnitudes' product with each element
        // tested in the GEMM's epilogue against a sufficient condition of passing at the first
        // count. Where every element meets it, that is every verdict, and the guard's GEMM and
        // judge below do not run.
        let keys = function("ozaki_guard_keys")?;
        let (kx, ky) = (sec(KEYS), sec(KEYS) + (8 * mp) as u64);
        let (mpi, npi) = (mp as i32, np as i32);
        let cfg = LaunchConfig {
            grid_dim: (grid_x((mp + np).div_ceil(256)).map_err(OzError::Gpu)?, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut builder = stream.launch_builder(&keys);
        builder
            .arg(&guard)
            .arg(&mi)
            .arg(&mpi)
            .arg(&ni)
            .arg(&npi)
            .arg(&kx)
            .arg(&ky)
            .arg(&refused);
        // SAFETY: arguments match `ozaki_guard_keys(Guard g, int M, int Mp, int N, int Np, Key*
        // KX, Key* KY, const int* refused)`; `GuardArgs` as for the early refusal (the rows'
        // sigmas, norms and shifts, for M and N rows, that the scaling before it on this
        // stream wrote); KX and KY the KEYS section's Mp and Np keys of 8 bytes, one thread
        // writing each; `refused` the int the early refusal wrote; blocks of 256 threads
        // covering Mp + Np rows.
        unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki guard's keys"))?;
        // The magnitudes' product (one layer over the guard's K) by this device's GEMM, the
        // warpgroup one's entry or the mma.sync one's, ending in `tail`.
        let magnitudes_product = |entries: (&str, &str), tail: GemmTail<'_>| {
            let f = function(match gemm_kind {
                Gemm::Wg { .. } => entries.0,
                Gemm::Mma => entries.1,
            })?;
            let dims = (mi, ni, mp, np, kgpi, 1);
            enqueue_gemm(stream, &f, gemm_kind, dims, (sec(PA), sec(PB)), tail)
        };
        magnitudes_product(
            (OZAKI_SURE_GEMM, OZAKI_SURE_GEMM_MMA),
            GemmTail::Sure {
                keys: (kx, ky),
                unsure,
                refused,
            },
        )?;
        // The two ints `refused` and `unsure`, the FLAGS section.
        let mut flags = [0i32; 2];
        read_back(
            stream,
            &mut flags,
            refused,
            "reading the Ozaki guard's sure test",
        )?;
        if flags[0] != 0 {
            return Err(OzError::Guarded(GuardReport {
                tiles,
                failed: tiles,
            }));
        }
        if flags[1] == 0 {
            report = Some(GuardReport { tiles, failed: 0 });
        } else {
            // Some element is not surely within: the magnitudes' product S, judged exactly.
            magnitudes_product(
                (OZAKI_GUARD_GEMM, OZAKI_GUARD_GEMM_MMA),
                GemmTail::Sums(sums, refused),
            )?;
            let judge = function("ozaki_guard_judge")?;
            let cfg = LaunchConfig {
                grid_dim: (grid_x(tiles).map_err(OzError::Gpu)?, JUDGE_STRIPS as u32, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            };
            let (tm, tn) = (tile_rows.0 as i32, tile_rows.1 as i32);
            let mut builder = stream.launch_builder(&judge);
            builder
                .arg(&mi)
                .arg(&ni)
                .arg(&sums)
                .arg(&tm)
                .arg(&tn)
                .arg(&guard)
                .arg(&refused);
            // SAFETY: arguments match `ozaki_guard_judge(int M, int N, const int* S, int tm, int
            // tn, Guard g, const int* refused)`; S is the M × N int32 product the guard GEMM
            // before it on this stream wrote (or, where `refused` — written by the early refusal
            // before both — is set, neither writes nor reads anything); `GuardArgs` matches the kernel's struct by value, its addresses the
            // workspace's sections that the guard's scaling wrote (shifts for g.n candidates at
            // ld Mp and Np, sigmas, norms) and `need`, (Mp/tm)·(Np/tn)·JUDGE_STRIPS ints, one
            // block per strip of a tile writing its own; 256 threads and a static shared array of
            // 32 ints.
            unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki guard's judge"))?;
            // The section's `tiles · JUDGE_STRIPS` ints.
            let mut strips = vec![0i32; tiles * JUDGE_STRIPS];
            read_back(
                stream,
                &mut strips,
                need,
                "reading the Ozaki guard's verdicts",
            )?;
            // A tile's verdict: the worst of its strips'.
            let verdict: Vec<i32> = strips
                .chunks(JUDGE_STRIPS)
                .map(|s| s.iter().copied().max().unwrap_or(0))
                .collect();
            let none = candidates.len() as i32;
            let failed = verdict.iter().filter(|&&v| v >= none).count();
            let guard_report = GuardReport { tiles, failed };
            if failed > 0 {
                return Err(OzError::Guarded(guard_report));
            }
            chosen = verdict.iter().copied().max().unwrap_or(0).max(0) as usize;
            report = Some(guard_report);
        }
    }
    let count = candidates[chosen];
    let consts = Consts::cached(count);
    // The chosen count's shifts: layer `chosen` of the E sections.
    let (ea, eb) = (
        sec(EA) + (4 * chosen * mp) as u64,
        sec(EB) + (4 * chosen * np) as u64,
    );
    // 3. Residue panels of op(A) and op(B)ᵀ.
    let split = function(&format!("ozaki_split_{suffix}"))?;
    for (&(rows, rows_p, tm, x, (sr, sk), _, p, _, _), e) in operands.iter().zip([ea, eb]) {
        let cfg = split_config(kp, rows_p);
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
            .arg(&tm)
            .arg(&consts);
        // SAFETY: arguments match `ozaki_split_{d,s}(int R, int K, const T* X, i64 sr, i64 sk,
        // const int* E, signed char* P, int Rp, int Kp, int TM, Consts c)`; X as for the
        // scaling, whose E (R ints, of the chosen layer) a launch before it on this stream
        // wrote; P is the workspace's section of count·Rp·Kp bytes, written whole (Rp a
        // multiple of the GEMM's tile rows TM: 192 or 256, or 128 for the mma.sync GEMM, all
        // multiples of 32); grid x = Kp/64, grid y ≤ Rp/32 with the kernel looping over the
        // rest, block (32, 8); `Consts` matches the kernel's struct by value.
        unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki split"))?;
    }
    // 4. The INT8 GEMM of every modulus.
    let gemm = function(match gemm_kind {
        Gemm::Wg { .. } => OZAKI_GEMM.0,
        Gemm::Mma => OZAKI_GEMM_MMA.0,
    })?;
    enqueue_gemm(
        stream,
        &gemm,
        gemm_kind,
        (mi, ni, mp, np, kpi, count),
        (sec(PA), sec(PB)),
        GemmTail::Residues(sec(R), &consts),
    )?;
    // 5. The reconstruction, for the fewest moduli that covers `count` (its limbs fit them).
    let upto = match count {
        0..=8 => 8,
        9..=16 => 16,
        _ => 18,
    };
    let rebuild = function(&format!("ozaki_rebuild{upto}_{suffix}"))?;
    let cfg = LaunchConfig {
        grid_dim: (n.div_ceil(4 * 256) as u32, m.min(65_535) as u32, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let ldc = args.ldc();
    let r = sec(R);
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
    // SAFETY: arguments match `ozaki_rebuild{8,16,18}_{d,s}(int M, int N, int K, const
    // unsigned char* R, const int* EA, const int* EB, T* C, i64 ldc, const T* A, i64 asr, i64
    // ask, const T* B, i64 bsr, i64 bsk, Consts c)`; R, EA and EB (the chosen count's layer)
    // were written by the launches before it on this stream; C covers M × N at ldc (checked
    // when the arguments were made); A and B are the operands with the strides of op(A) and
    // op(B)ᵀ, read only for k < K; the kernel loops over all rows (grid y) and quads of
    // columns (grid x) whatever the grid.
    unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki reconstruction"))?;
    Ok(Emulated {
        precision: Precision::Ozaki {
            moduli: count as u8,
        },
        guard: report,
    })
}

/// Copies `dst.len()` ints of the workspace at `src` into `dst` once every launch before on
/// `stream` is done, and waits for them.
fn read_back(
    stream: &Arc<CudaStream>,
    dst: &mut [i32],
    src: u64,
    what: &'static str,
) -> Result<(), OzError> {
    let fail = |e| OzError::Gpu(GpuDotError::at(what)(e));
    // SAFETY: the caller passes `src` holding at least `dst.len()` ints of the workspace,
    // written by launches before it on this stream; the copy is ordered after them, and the
    // synchronize below completes it before `dst` is read or dropped.
    unsafe { cudarc::driver::result::memcpy_dtoh_async(dst, src, stream.cu_stream()) }
        .map_err(fail)?;
    stream.synchronize().map_err(fail)
}

/// The split's and the magnitudes' grid: one block of (32, 8) threads per 64 k, and up to
/// Rp/32 along y (the kernels loop over the rest).
fn split_config(kp: usize, rows_p: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((kp / 64) as u32, (rows_p / 32).min(65_535) as u32, 1),
        block_dim: (32, 8, 1),
        shared_mem_bytes: 0,
    }
}

/// What an INT8 GEMM does with its products: residues modulo each modulus into R, or (the
/// guard's) the int32 sums into an M × N array.
enum GemmTail<'a> {
    Residues(u64, &'a Consts),
    /// The product's array and the early refusal's int (the GEMM leaves at once where set).
    Sums(u64, u64),
    /// The sure test's keys of X's and Y's rows, its flag, and the early refusal's int.
    Sure {
        keys: (u64, u64),
        unsure: u64,
        refused: u64,
    },
}

/// Enqueues an INT8 GEMM of `layers` layers of the panels at `(pa, pb)`: the warpgroup one
/// (persistent clusters of two) or the mma.sync one, with its tail's arguments.
fn enqueue_gemm(
    stream: &Arc<CudaStream>,
    func: &CudaFunction,
    kind: Gemm,
    (mi, ni, mp, np, kpi, layers): (i32, i32, usize, usize, i32, usize),
    (pa, pb): (u64, u64),
    tail: GemmTail<'_>,
) -> Result<(), OzError> {
    let fail = |what: &'static str| move |e| OzError::Gpu(GpuDotError::at(what)(e));
    let (mpi, npi) = (mp as i32, np as i32);
    match kind {
        Gemm::Wg { pair_m } => {
            // A persistent grid: as many clusters as fit on the device at once (at most one per
            // unit of work, a pair of tiles of one layer), each looping over its units; one
            // cluster per unit where the driver cannot say how many fit (a cluster beyond them
            // would wait for another's whole share). The query needs the context current on
            // this thread, which the launches before it made it.
            let units = (mp / GEMM_TILE.0) * (np / GEMM_TILE.1) / 2 * layers;
            let block_dim = (GEMM_THREADS, 1, 1);
            let shared_mem_bytes = OZAKI_GEMM.1;
            let fit = func
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
            let mut builder = stream.launch_builder(func);
            builder
                .arg(&mi)
                .arg(&ni)
                .arg(&pa)
                .arg(&pb)
                .arg(&mpi)
                .arg(&npi)
                .arg(&kpi);
            match &tail {
                GemmTail::Residues(r, consts) => builder.arg(r).arg(*consts).arg(&pair_mi),
                GemmTail::Sums(sums, refused) => builder.arg(&pair_mi).arg(sums).arg(refused),
                GemmTail::Sure {
                    keys: (kx, ky),
                    unsure,
                    refused,
                } => builder
                    .arg(&pair_mi)
                    .arg(kx)
                    .arg(ky)
                    .arg(unsure)
                    .arg(refused),
            };
            // SAFETY: arguments match `ozaki_gemm(int M, int N, const signed char* PA, const
            // signed char* PB, int Mp, int Np, int Kp, unsigned char* R, Consts c, int
            // pair_m)`, or for the guard `ozaki_guard_gemm(int M, int N, const signed char*
            // PA, const signed char* PB, int Mp, int Np, int Kp, int pair_m, int* S, const int*
            // refused)` (an int the launches before it wrote), or for the sure test
            // `ozaki_guard_sure_gemm(int M, int N, const signed char* PA, const signed char*
            // PB, int Mp, int Np, int Kp, int pair_m, const Key* KX, const Key* KY, int*
            // unsure, const int* refused)` (Mp and Np keys of 8 bytes the keys' launch before
            // it wrote, two ints of the UK section); PA and PB are the panels the launches before it on this stream wrote, in tiles of 192
            // and 256 rows (layers·Mp·Kp and layers·Np·Kp bytes at 256-byte-aligned offsets,
            // Kp a multiple of 128); `pairing` made Mp a multiple of 384 and Np of 256 where
            // pair_m, else Mp of 192 and Np of 512, so the units (pairs of tiles of a layer)
            // are whole; the grid an even count of blocks (the kernel's clusters of two), each
            // cluster looping over its units; R is the workspace's section of count·M·N bytes,
            // written whole (tiles past M or N store nothing), or S, M·N ints written whole, or
            // `unsure`, set by an atomic; 384 threads (the kernel's launch bound) and the
            // table's dynamic shared memory, to which the function's limit was raised when
            // the module was loaded; the kernel's instructions exist on sm_90 only
            // (`Gemm::of`).
            unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki INT8 GEMM"))?;
        }
        Gemm::Mma => {
            let (tile, threads) = OZAKI_GEMM_MMA_TILE;
            let cfg = LaunchConfig {
                grid_dim: (
                    grid_x((mp / tile.0) * (np / tile.1)).map_err(OzError::Gpu)?,
                    1,
                    layers as u32,
                ),
                block_dim: (threads, 1, 1),
                shared_mem_bytes: OZAKI_GEMM_MMA.1,
            };
            let mut builder = stream.launch_builder(func);
            builder
                .arg(&mi)
                .arg(&ni)
                .arg(&pa)
                .arg(&pb)
                .arg(&mpi)
                .arg(&npi)
                .arg(&kpi);
            match &tail {
                GemmTail::Residues(r, consts) => builder.arg(r).arg(*consts),
                GemmTail::Sums(sums, refused) => builder.arg(sums).arg(refused),
                GemmTail::Sure {
                    keys: (kx, ky),
                    unsure,
                    refused,
                } => builder.arg(kx).arg(ky).arg(unsure).arg(refused),
            };
            // SAFETY: arguments match `ozaki_gemm_mma(int M, int N, const signed char* PA,
            // const signed char* PB, int Mp, int Np, int Kp, unsigned char* R, Consts c)`, or
            // for the guard `ozaki_guard_gemm_mma(int M, int N, const signed char* PA, const
            // signed char* PB, int Mp, int Np, int Kp, int* S, const int* refused)` (an int
            // the launches before it wrote), or `ozaki_guard_sure_gemm_mma(int M, int N, const
            // signed char* PA, const signed char* PB, int Mp, int Np, int Kp, const Key* KX,
            // const Key* KY, int* unsure, const int* refused)` (as for the warpgroup one); PA
            // and PB are the panels the
            // launches before it on this stream wrote, in tiles of 128 rows (layers·Mp·Kp and
            // layers·Np·Kp bytes at 256-byte-aligned offsets, Mp and Np multiples of 128, Kp
            // of 128); one block per 128 × 128 tile of Mp × Np in x and per layer in z; R is
            // the workspace's section of count·M·N bytes, written whole (tiles past M or N
            // store nothing), or S, M·N ints written whole, or `unsure`, set by an atomic; 256
            // threads (the kernel's launch bound) and the table's dynamic shared memory, to
            // which the function's limit was raised when the module was loaded; mma.sync,
            // ldmatrix and cp.async exist from sm_80 on, checked by the caller.
            unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki INT8 GEMM"))?;
        }
    }
    Ok(())
}

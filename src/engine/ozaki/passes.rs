//! What every pass of an Ozaki product shares: the INT8 GEMM chosen for the device and
//! shape, the workspace's sections, the operands as rows, and the helpers that enqueue a GEMM
//! and read the guard's answers back.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, CudaView, DriverError, LaunchConfig};

use crate::engine::args::grid_x;
use crate::engine::table::{OZAKI_GEMM, OZAKI_GEMM_MMA, OZAKI_GEMM_MMA_TILE, OZAKI_GEMM_TILE};
use crate::error::GpuDotError;

use super::scheme::Consts;
use crate::engine::enqueue::Launch;

/// Why an Ozaki launch launched nothing, or failed.
pub(crate) enum OzError {
    /// The product cannot run this way here (compute capability below 8.0, k of 0 or above
    /// `MAX_K`, no room for the workspace, or the family does not build): nothing was
    /// enqueued, and the native kernels run it.
    Unavailable,
    /// The guard found an element that no count it weighed keeps within native's bound:
    /// nothing more was enqueued, and the native kernels run the product.
    Guarded(GuardReport),
    Gpu(GpuDotError),
}

/// What the guard found for one product: the output tiles of its INT8 GEMM, and those that
/// no candidate count passed (then the whole product runs natively).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct GuardReport {
    /// Output tiles the guard judged.
    pub tiles: usize,
    /// Tiles with an element that no count of moduli the guard weighed keeps within native's
    /// bound: any sends the product to the native kernels. Where the guard refused early
    /// (one of the few elements it decides first, from the operands, fails at every count, as
    /// when the inputs' scales pair along k), every tile counts.
    pub failed: usize,
    /// The guard did not run on this product (on any of its row panels): it refused the last
    /// products of its shape (twice in a row or more; see `GPU_DOT_GUARD_MEMORY`), so this
    /// one ran natively without it, and `tiles` and `failed` are the last refusal's.
    pub skipped: bool,
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

/// The tile rows to a group of the warpgroup INT8 GEMM's grouped tile order (they take their
/// tiles column by column, sharing op(B)'s panels in L2): [`GROUP_ROWS`], or the count a
/// benchmark set (`ozaki_gemm_group`); an even count where the clusters pair tile rows.
pub(super) fn group_rows(pair_m: bool) -> i32 {
    let rows = crate::device::overrides::ozaki_gemm_group_set()
        .unwrap_or(GROUP_ROWS)
        .clamp(1, 1 << 16);
    if pair_m {
        rows.next_multiple_of(2) as i32
    } else {
        rows as i32
    }
}

/// The warpgroup INT8 GEMM's tile rows to a group. With 66 clusters at once (132 SMs), 16
/// rows of 192 and about 8 columns of 256 are in flight: near the fewest panel bytes for
/// that many tiles (√(132 · 256 / 192) ≈ 13 rows). At 8192³ in f64 the GEMM read 16.4–16.7
/// GB from DRAM against 8 rows' 19.8–21.8 GB (H100, ncu). The products took the same time
/// within ±1% with 8 to 32 rows in f32 and f64 (BENCHMARKS.md, c3bc2f9): the GEMM is bound by
/// its SMs, not by these bytes.
pub(super) const GROUP_ROWS: u32 = 16;

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

/// The Karatsuba form of a complex `m × k × n` product read as reals (`k` and `n` even; see
/// kernels/ozaki.cu, THE KARATSUBA FORM): its three INT8 products a modulus are `m × k/2` by
/// `k/2 × n/2`, by `gemm`, from panels in tiles of `tile_rows` rows padded to `padded`
/// `(Mp, Np)` and `kp` (`k/2` padded to 128).
#[derive(Debug, Clone, Copy)]
pub(super) struct Pairs {
    pub(super) gemm: Gemm,
    pub(super) tile_rows: (usize, usize),
    pub(super) padded: (usize, usize),
    pub(super) kp: usize,
}

impl Pairs {
    /// The form's products for an `m × k × n` product read as reals on a device of compute
    /// capability `sm`.
    pub(super) fn of(sm: u32, (m, k, n): (usize, usize, usize)) -> Pairs {
        let gemm = Gemm::of(sm, m, n / 2);
        let (tile_rows, padded) = gemm.panels(m, n / 2);
        Pairs {
            gemm,
            tile_rows,
            padded,
            kp: (k / 2).next_multiple_of(128),
        }
    }

    /// The bytes of one part's residue panels of op(A) and op(B)ᵀ, and of its residue
    /// products, for `count` moduli and `m` rows.
    pub(super) fn part_bytes(&self, count: usize, m: usize, n: usize) -> (u64, u64, u64) {
        let ((kmp, knp), kkp) = (self.padded, self.kp);
        (
            (count * kmp * kkp) as u64,
            (count * knp * kkp) as u64,
            (count * m * (n / 2)) as u64,
        )
    }

    /// The buffer of the form's residues, apart from the workspace and sized once the count is
    /// chosen (they are most of the product's memory: a complex 16384³ product's residues take
    /// 2.25 GiB a modulus): its bytes for `count` moduli and `m` rows, and the offsets of its
    /// sections, the three parts' panels of op(A) and of op(B)ᵀ and their three products (by
    /// [`RESIDUES_PA`], [`RESIDUES_PB`], [`RESIDUES_R`]). Before the verdict it holds the guard's
    /// int32 sums ([`Pairs::sums_bytes`]).
    pub(super) fn residues(&self, count: usize, m: usize, n: usize) -> (usize, [usize; 3]) {
        let (pa, pb, r) = self.part_bytes(count, m, n);
        let mut at = [0; 3];
        let mut total = 0;
        for (o, part) in at.iter_mut().zip([pa, pb, r]) {
            *o = total;
            total += (3 * part as usize).next_multiple_of(ALIGN);
        }
        (total, at)
    }

    /// The bytes of the guard's int32 sums of the stacked `m × n` product, which the residues'
    /// buffer holds until the verdict.
    pub(super) fn sums_bytes(m: usize, n: usize) -> usize {
        4 * m * n
    }
}

/// The sections of the Karatsuba form's residues ([`Pairs::residues`]).
pub(super) const RESIDUES_PA: usize = 0;
pub(super) const RESIDUES_PB: usize = 1;
pub(super) const RESIDUES_R: usize = 2;

/// Sections of the workspace, by index into [`workspace`]'s offsets. op(B)'s come first, at
/// offsets that do not depend on m, so that the row panels of one product find op(B)'s
/// scaling, magnitudes and residues where the panel before left them (see [`SharedB`]).
pub(super) const EB: usize = 0;
pub(super) const SB: usize = 1;
pub(super) const LB: usize = 2;
pub(super) const MB: usize = 3;
pub(super) const PB: usize = 4;
pub(super) const EA: usize = 5;
pub(super) const PA: usize = 6;
pub(super) const R: usize = 7;
pub(super) const SA: usize = 8;
pub(super) const LA: usize = 9;
pub(super) const NEED: usize = 10;
pub(super) const FLAGS: usize = 11;
pub(super) const KEYS: usize = 12;
pub(super) const MA: usize = 13;

/// The most candidate counts the guard weighs at once.
pub(crate) const MAX_CANDIDATES: usize = 4;

/// The ints of the FLAGS section (kernels/ozaki.cu's `FLAG_INTS`): the early refusal's
/// verdict, the sure test's, the lead (`settle_lead`), the early refusal's blocks done, and
/// the largest and smallest ratio of its elements at each candidate count.
pub(super) const FLAG_INTS: usize = 4 + 2 * MAX_CANDIDATES;

/// The strips of rows the guard's judge splits each output tile into (a block and a verdict
/// each): enough blocks to keep the loads of S in flight.
pub(super) const JUDGE_STRIPS: usize = 8;

// A strip's rows fit the judge's shared array (`JUDGE_ROWS` in kernels/ozaki.cu).
const _: () = assert!(
    GEMM_TILE.0.div_ceil(JUDGE_STRIPS) <= 64
        && OZAKI_GEMM_MMA_TILE.0 .0.div_ceil(JUDGE_STRIPS) <= 64
);

/// How many sections a workspace has.
pub(super) const SECTIONS: usize = 14;

/// Bytes of the workspace of an `m × k × n` product on up to `count` moduli by `gemm`, with
/// `shifts` layers of row shifts (one, or one per candidate count for the guard), and the
/// sections' offsets: the row shifts (EB, EA), the residue panels (PB, PA) and the residue
/// products (R); and, when `guarded`, the magnitude shifts (SB, SA), the scaled 1-norms (LB,
/// LA), the magnitudes (MB, MA, `kgp` bytes a row), one int per strip of a GEMM tile (NEED),
/// the guard's [`FLAG_INTS`] ints (FLAGS), and the sure test's keys, 8 bytes a row of X and
/// of Y (KEYS). The magnitudes have sections of their own so that the guard's
/// passes may split the operands into residues for the first count meanwhile. With `pairs`,
/// a complex product in the Karatsuba form, whose residues and guard's sums lie apart, in a
/// buffer sized for the count the guard chooses ([`Pairs::residues`]): the workspace's PB, PA
/// and R sections are then empty.
pub(super) fn workspace(
    count: usize,
    shifts: usize,
    guarded: bool,
    kgp: usize,
    (m, k, n): (usize, usize, usize),
    gemm: Gemm,
    pairs: Option<&Pairs>,
) -> (usize, [usize; SECTIONS]) {
    let ((tm, tn), (mp, np)) = gemm.panels(m, n);
    let kp = k.next_multiple_of(128);
    let g = guarded as usize;
    // The residue panels of op(B) and op(A) and the residue products; the guard's int32 sums
    // (M × N) take the products' section too.
    let (pb, pa, r) = match pairs {
        None => (count * np * kp, count * mp * kp, count.max(4 * g) * m * n),
        Some(_) => (0, 0, 0),
    };
    let sizes = [
        4 * np * shifts,
        4 * np * g,
        8 * np * g,
        np * kgp * g,
        pb,
        4 * mp * shifts,
        pa,
        r,
        4 * mp * g,
        8 * mp * g,
        4 * (mp / tm) * (np / tn) * JUDGE_STRIPS * g,
        4 * FLAG_INTS * g,
        8 * (mp + np) * g,
        mp * kgp * g,
    ];
    let mut at = [0; SECTIONS];
    let mut total = 0;
    for (o, s) in at.iter_mut().zip(sizes) {
        *o = total;
        total += s.next_multiple_of(ALIGN);
    }
    (total, at)
}

/// The row panels of one product, which share op(B): what a panel's Ozaki launch left of
/// op(B) in the workspace (its scaling, the guard's magnitudes, and its residues for one
/// count), for the next panel to use instead of doing it again. Lives for one product (op(B)
/// does not change within it); a launch takes what is kept and gives it back only when it
/// ran to the end, and a product's native kernels, which may use the workspace too, drop it.
pub(crate) struct SharedB {
    /// The whole product's rows, and its panels' (the last may be shorter): its panels
    /// emulate where it would.
    pub(crate) rows: usize,
    pub(crate) panel_rows: usize,
    kept: Option<KeptB>,
    /// What the default precision's memory of refusals decided for the product, on its first
    /// panel that weighed emulation: the later panels follow it ([`super::recent`]).
    pub(crate) recalled: Option<Recalled>,
    /// The plan native products of the product's shape settled on, which its panels take where
    /// the default runs them natively ([`crate::engine::tuner::settled_native_plan`]).
    pub(crate) native_plan: Option<crate::engine::plan::Plan>,
}

/// The memory of refusals' decision for a product in row panels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recalled {
    /// Every panel runs natively without the guard (its last refusal's report).
    Skip(GuardReport),
    /// Every panel is weighed by the guard; the first one's verdict is remembered.
    Weigh,
}

impl SharedB {
    /// For the panels of `panel_rows` rows of a product of `rows` rows.
    pub(crate) fn new(rows: usize, panel_rows: usize) -> SharedB {
        SharedB {
            rows,
            panel_rows,
            kept: None,
            recalled: None,
            native_plan: None,
        }
    }

    /// Forgets what was kept: the workspace is about to be used otherwise.
    pub(crate) fn forget(&mut self) {
        self.kept = None;
    }

    /// What was kept for a product on `key`, taken (a launch that fails leaves nothing).
    pub(super) fn take(&mut self, key: &KeyB) -> Option<KeptB> {
        self.kept.take().filter(|k| k.key == *key)
    }

    pub(super) fn keep(&mut self, kept: KeptB) {
        self.kept = Some(kept);
    }
}

/// Everything op(B)'s sections depend on: the workspace (its address and size: a workspace
/// grown since is another, even at the same address), op(B) (address, strides, rows and k),
/// the padded rows and tile of its panels, the counts weighed and whether guarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct KeyB {
    pub(super) base: u64,
    pub(super) bytes: usize,
    pub(super) y: u64,
    pub(super) strides: (i64, i64),
    pub(super) dims: (usize, usize),
    pub(super) padded: usize,
    pub(super) tile: usize,
    pub(super) counts: (usize, usize),
    pub(super) guarded: bool,
}

/// op(B)'s sections as a launch left them: scaled (with the guard's magnitudes when
/// guarded), and split into residues for `split` moduli.
#[derive(Debug, Clone, Copy)]
pub(super) struct KeptB {
    pub(super) key: KeyB,
    pub(super) split: usize,
}

/// One operand of a product as the passes read it: op(A) (m × k) or op(B)ᵀ (n × k), as rows,
/// with its sections of the workspace.
pub(super) struct Rows<'v, 'a, T> {
    /// Its rows (R) and their count padded to whole GEMM tiles (Rp).
    pub(super) rows: i32,
    pub(super) padded: usize,
    /// The GEMM's tile rows for it (TM).
    pub(super) tile: i32,
    pub(super) x: &'v CudaView<'a, T>,
    /// The strides of its rows and of k (element (r, k) at `x[r·sr + k·sk]`).
    pub(super) strides: (i64, i64),
    /// Its shifts (E), residue panels (P), and the guard's sigmas (S), scaled norms (L) and
    /// magnitudes' panel.
    pub(super) shifts: u64,
    pub(super) panels: u64,
    pub(super) sigmas: u64,
    pub(super) norms: u64,
    pub(super) magnitudes: u64,
    /// Whether the guard's one-pass scaling also wrote its magnitudes.
    pub(super) one_pass: bool,
    /// Where the guard's pass that writes its magnitudes also splits it (`None`: split after
    /// the verdict), the constants of the counts it may split for.
    pub(super) early: Option<Early<'v>>,
    /// Whether its scaling (and the guard's magnitudes) are in the workspace already, left
    /// by the panel before ([`SharedB`]).
    pub(super) kept: bool,
}

/// The counts a guard's pass that splits early may split for: the first candidate, or the
/// next where the early refusal's lead is a later one (kernels/ozaki.cu, `settle_lead`). The
/// passes read the lead from the device, so the host gives both.
#[derive(Clone, Copy)]
pub(super) struct Early<'v> {
    pub(super) first: &'v Consts,
    pub(super) next: &'v Consts,
}

/// The candidate an early split splits for, by the early refusal's lead (kernels/ozaki.cu,
/// `lead_of`): the first or the next.
pub(super) fn early_candidate(lead: usize) -> usize {
    lead.min(1)
}

impl<T> Rows<'_, '_, T> {
    /// Pushes what every pass over the operand's rows takes first, `int R, int K, const T* X,
    /// i64 sr, i64 sk`: its rows, `k` (the product's K), its elements and their strides.
    pub(super) fn push_rows<'b>(&'b self, builder: &mut Launch<'b>, k: &'b i32) {
        let (sr, sk) = &self.strides;
        builder.arg(&self.rows).arg(k).view(self.x).arg(sr).arg(sk);
    }
}

/// Pushes both operands' elements and strides, `const T* X, i64 xsr, i64 xsk, const T* Y,
/// i64 ysr, i64 ysk`, as the guard's early refusals take them.
pub(super) fn push_pair<'b, T>(builder: &mut Launch<'b>, [x, y]: &'b [Rows<'_, '_, T>; 2]) {
    for op in [x, y] {
        let (sr, sk) = &op.strides;
        builder.view(op.x).arg(sr).arg(sk);
    }
}

/// What every pass of one product reads: its stream, its kernels' entries, the GEMM and its
/// tiles, the dimensions and the workspace's sections.
pub(super) struct Run<'r> {
    pub(super) stream: &'r Arc<CudaStream>,
    /// An entry of the Ozaki family by name.
    pub(super) entry: &'r dyn Fn(&str) -> Result<CudaFunction, OzError>,
    /// The element type's suffix of the typed entries (`d`, `s`).
    pub(super) suffix: &'static str,
    pub(super) gemm: Gemm,
    /// The GEMM's tile rows for X and Y, and the padded row counts `(Mp, Np)`.
    pub(super) tile_rows: (usize, usize),
    pub(super) padded: (usize, usize),
    /// `(M, N, K)`.
    pub(super) dims: (i32, i32, i32),
    /// The address of each section of the workspace (by [`EA`] … [`KEYS`]).
    pub(super) sec: [u64; SECTIONS],
    /// Whether its kernels launch programmatically (see [`enqueue`](crate::engine::enqueue)).
    pub(super) programmatic: bool,
}

impl Run<'_> {
    /// The entry `stem` of this product's element type (`stem_d`, `stem_s`).
    pub(super) fn typed(&self, stem: &str) -> Result<CudaFunction, OzError> {
        (self.entry)(&format!("{stem}_{}", self.suffix))
    }
}

/// A driver error while `what`, as an [`OzError`].
pub(super) fn fail(what: &'static str) -> impl Fn(DriverError) -> OzError {
    move |e| OzError::Gpu(GpuDotError::at(what)(e))
}

/// Copies `dst.len()` ints of the workspace at `src` into `dst` once every launch before on
/// `stream` is done, and waits for them.
pub(super) fn read_back(
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
pub(super) fn split_config(kp: usize, rows_p: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((kp / 64) as u32, (rows_p / 32).min(65_535) as u32, 1),
        block_dim: (32, 8, 1),
        shared_mem_bytes: 0,
    }
}

/// What an INT8 GEMM does with its products: residues modulo each modulus into R, or (the
/// guard's) the int32 sums into an M × N array.
pub(super) enum GemmTail<'a> {
    /// R, the constants of the product's count, the first layer this launch computes (it
    /// computes `count - z0`), and its gate.
    Residues {
        r: u64,
        consts: &'a Consts,
        z0: i32,
        gate: Gate,
    },
    /// The product's array and the early refusal's int (the GEMM leaves at once where set).
    Sums(u64, u64),
    /// The sure test's keys of X's and Y's rows, its flag, and the early refusal's int.
    Sure {
        keys: (u64, u64),
        unsure: u64,
        refused: u64,
    },
}

/// Where an INT8 GEMM of residues runs only if the guard's flags hold (kernels/ozaki.cu,
/// `gate_holds`): the FLAGS section, and the leads `lo ..= hi` whose residues the panels hold.
/// A GEMM enqueued before the host has read the guard's verdict runs under one; `flags` 0
/// runs it whatever they hold.
#[derive(Clone, Copy)]
pub(super) struct Gate {
    pub(super) flags: u64,
    pub(super) lo: i32,
    pub(super) hi: i32,
}

impl Gate {
    pub(super) const NONE: Gate = Gate {
        flags: 0,
        lo: 0,
        hi: 0,
    };

    /// Pushes what the GEMMs of residues take last, `int z0, const int* gate, int lo, int
    /// hi`: the first layer and this gate.
    fn push<'a, 'b>(&'b self, builder: &'a mut Launch<'b>, z0: &'b i32) -> &'a mut Launch<'b> {
        builder.arg(z0).arg(&self.flags).arg(&self.lo).arg(&self.hi)
    }

    /// Whether a GEMM under this gate ran, by the flags the host read back (as the kernel
    /// decides it).
    pub(super) fn held(&self, flags: &[i32]) -> bool {
        self.flags != 0 && flags[0] == 0 && flags[1] == 0 && (self.lo..=self.hi).contains(&flags[2])
    }
}

/// Enqueues an INT8 GEMM of `layers` layers of the panels at `(pa, pb)`: the warpgroup one
/// (persistent clusters of two) or the mma.sync one, with its tail's arguments, on `stream`,
/// launched programmatically where `programmatic` (see [`enqueue`](crate::engine::enqueue)).
pub(super) fn enqueue_gemm(
    (stream, programmatic): (&Arc<CudaStream>, bool),
    func: &CudaFunction,
    kind: Gemm,
    (mi, ni, mp, np, kpi, layers): (i32, i32, usize, usize, i32, usize),
    (pa, pb): (u64, u64),
    tail: GemmTail<'_>,
) -> Result<(), OzError> {
    let (mpi, npi) = (mp as i32, np as i32);
    let call = GemmCall {
        stream,
        programmatic,
        func,
        dims: (mi, ni),
        panels: (pa, pb),
        padded: (mp, np),
        padded_i32: (mpi, npi),
        kp: kpi,
        layers,
    };
    match kind {
        Gemm::Wg { pair_m } => enqueue_wg(&call, pair_m, &tail),
        Gemm::Mma => enqueue_mma(&call, &tail),
    }
}

/// One INT8 GEMM as [`enqueue_gemm`] enqueues it: its stream, entry and launch mode, what
/// both GEMMs take first (`int M, int N, const signed char* PA, const signed char* PB, int
/// Mp, int Np, int Kp`), and the layers it computes.
struct GemmCall<'c> {
    stream: &'c Arc<CudaStream>,
    programmatic: bool,
    func: &'c CudaFunction,
    /// `(M, N)`, the panels' addresses `(PA, PB)`, their padded rows `(Mp, Np)` (also as the
    /// ints pushed) and `Kp`.
    dims: (i32, i32),
    panels: (u64, u64),
    padded: (usize, usize),
    padded_i32: (i32, i32),
    kp: i32,
    layers: usize,
}

impl GemmCall<'_> {
    /// A launch of the GEMM with its first arguments pushed, `int M, int N, const signed
    /// char* PA, const signed char* PB, int Mp, int Np, int Kp`.
    fn begin(&self) -> Launch<'_> {
        let mut builder = Launch::new(self.stream, self.func, self.programmatic);
        builder
            .arg(&self.dims.0)
            .arg(&self.dims.1)
            .arg(&self.panels.0)
            .arg(&self.panels.1)
            .arg(&self.padded_i32.0)
            .arg(&self.padded_i32.1)
            .arg(&self.kp);
        builder
    }
}

/// The warpgroup GEMM's grid, persistent: as many clusters of two as fit on the device.
fn persistent_config(call: &GemmCall<'_>) -> Result<LaunchConfig, OzError> {
    let (stream, func) = (call.stream, call.func);
    let ((mp, np), layers) = (call.padded, call.layers);
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
    Ok(LaunchConfig {
        grid_dim: (grid_x(2 * units.min(fit)).map_err(OzError::Gpu)?, 1, 1),
        block_dim,
        shared_mem_bytes,
    })
}

/// The warpgroup INT8 GEMM (sm_90a), its clusters of two pairing tile rows where `pair_m`,
/// else tile columns, on its [`persistent_config`] grid.
fn enqueue_wg(call: &GemmCall<'_>, pair_m: bool, tail: &GemmTail<'_>) -> Result<(), OzError> {
    let cfg = persistent_config(call)?;
    let pair_mi = pair_m as i32;
    let group = group_rows(pair_m);
    let mut builder = call.begin();
    match tail {
        GemmTail::Residues {
            r,
            consts,
            z0,
            gate,
        } => gate.push(builder.arg(r).arg(*consts).arg(&pair_mi).arg(&group), z0),
        GemmTail::Sums(sums, refused) => builder.arg(&pair_mi).arg(&group).arg(sums).arg(refused),
        GemmTail::Sure {
            keys: (kx, ky),
            unsure,
            refused,
        } => builder
            .arg(&pair_mi)
            .arg(&group)
            .arg(kx)
            .arg(ky)
            .arg(unsure)
            .arg(refused),
    };
    // SAFETY: arguments match `ozaki_gemm(int M, int N, const signed char* PA, const signed char*
    // PB, int Mp, int Np, int Kp, unsigned char* R, Consts c, int pair_m, int group, int z0, const
    // int* gate, int lo, int hi)` (the first seven pushed by `GemmCall::begin`; layers z0 ..
    // c.count − 1, `layers` of them, read from PA and PB's layers from z0 on, written into R's;
    // `gate` null or the FLAGS section, read only, which the launches before it on this stream
    // wrote), or for the guard `ozaki_guard_gemm(int M, int N, const signed char* PA, const signed
    // char* PB, int Mp, int Np, int Kp, int pair_m, int group, int* S, const int* refused)` (an int
    // the launches before it wrote), or for the sure test `ozaki_guard_sure_gemm(int M, int N,
    // const signed char* PA, const signed char* PB, int Mp, int Np, int Kp, int pair_m, int group,
    // const Key* KX, const Key* KY, int* unsure, const int* refused)` (Mp and Np keys of 8 bytes
    // the keys' launch before it wrote, two ints of the UK section); PA and PB are the panels the
    // launches before it on this stream wrote, in tiles of 192 and 256 rows (layers·Mp·Kp and
    // layers·Np·Kp bytes at 256-byte-aligned offsets, Kp a multiple of 128); `pairing` made Mp a
    // multiple of 384 and Np of 256 where pair_m, else Mp of 192 and Np of 512, so the units (pairs
    // of tiles of a layer) are whole; `group_rows` gave a positive group, even where pair_m (the
    // order only permutes the units); the grid (`persistent_config`) an even count of blocks (the
    // kernel's clusters of two), each cluster looping over its units; R is a section of
    // count·M·N bytes (the workspace's, or in the Karatsuba form one of the residues' buffer),
    // written whole (tiles past M or N store nothing), or S, M·N ints written whole (the same
    // places), or `unsure`, set by an atomic; 384 threads (the kernel's launch bound) and the
    // table's dynamic shared memory, to which the function's limit was raised when the module was
    // loaded; the kernel's instructions exist on sm_90 only (`Gemm::of`).
    unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki INT8 GEMM"))?;
    Ok(())
}

/// The mma.sync INT8 GEMM (sm_80 on): a block per tile of 128 × 128 and per layer.
fn enqueue_mma(call: &GemmCall<'_>, tail: &GemmTail<'_>) -> Result<(), OzError> {
    let ((mp, np), layers) = (call.padded, call.layers);
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
    let mut builder = call.begin();
    match tail {
        GemmTail::Residues {
            r,
            consts,
            z0,
            gate,
        } => gate.push(builder.arg(r).arg(*consts), z0),
        GemmTail::Sums(sums, refused) => builder.arg(sums).arg(refused),
        GemmTail::Sure {
            keys: (kx, ky),
            unsure,
            refused,
        } => builder.arg(kx).arg(ky).arg(unsure).arg(refused),
    };
    // SAFETY: arguments match `ozaki_gemm_mma(int M, int N, const signed char* PA, const signed
    // char* PB, int Mp, int Np, int Kp, unsigned char* R, Consts c, int z0, const int* gate, int
    // lo, int hi)` (the first seven pushed by `GemmCall::begin`; layers and gate as for
    // `ozaki_gemm`), or for the guard `ozaki_guard_gemm_mma(int M, int N, const signed char* PA,
    // const signed char* PB, int Mp, int Np, int Kp, int* S, const int* refused)` (an int the
    // launches before it wrote), or `ozaki_guard_sure_gemm_mma(int M, int N, const signed char* PA,
    // const signed char* PB, int Mp, int Np, int Kp, const Key* KX, const Key* KY, int* unsure,
    // const int* refused)` (as for the warpgroup one); PA and PB are the panels the launches before
    // it on this stream wrote, in tiles of 128 rows (layers·Mp·Kp and layers·Np·Kp bytes at
    // 256-byte-aligned offsets, Mp and Np multiples of 128, Kp of 128); one block per 128 × 128
    // tile of Mp × Np in x and per layer in z; R is a section of count·M·N bytes (the
    // workspace's, or in the Karatsuba form one of the residues' buffer), written whole (tiles
    // past M or N store nothing), or S, M·N ints written whole (the same places), or `unsure`,
    // set by an atomic; 256 threads (the kernel's launch bound) and the table's dynamic shared
    // memory, to which the function's limit was raised when the module was loaded; mma.sync,
    // ldmatrix and cp.async exist from sm_80 on, checked by the caller.
    unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki INT8 GEMM"))?;
    Ok(())
}

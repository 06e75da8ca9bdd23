//! Products on the INT8 tensor cores by Ozaki scheme II (kernels/ozaki.cu): the moduli, the
//! constants of the reconstruction, the choice of scaling bits and moduli, the launcher, and
//! an exact CPU model of what the kernels compute (the tests' oracle).
//!
//! `C = op(A) · op(B)` becomes, with X = op(A) (m × k) and Y = op(B)ᵀ (n × k):
//! X' = rint(diag(2^s) X) and Y' = rint(diag(2^t) Y), integers of at most `bits` bits chosen
//! so that `k · 2^(bits_a + bits_b) ≤ M / 4` (M the product of the moduli); C' = X' Y'ᵀ is
//! then recovered exactly from its residues modulo each modulus (one exact INT8 GEMM per
//! modulus) by the Chinese remainder theorem, and C = diag(2^-s) C' diag(2^-t), rounded once.

use std::sync::Arc;

use cudarc::driver::{CudaStream, CudaViewMut, LaunchConfig, PushKernelArg};

use crate::device::context::Gpu;
use crate::element::{Dtype, Element};
use crate::engine::launch::{check_dims, grid_x, scratch, DevBuf, GemmArgs};
use crate::engine::table::{
    Family, OZAKI_GEMM, OZAKI_GEMM_MMA, OZAKI_GEMM_MMA_TILE, OZAKI_GEMM_TILE,
};
use crate::error::GpuDotError;
use crate::options::Precision;

/// The moduli, pairwise coprime, largest first; a product uses the first `count`.
pub(crate) const MODULI: [u32; MAX_MODULI] = [
    256, 255, 253, 251, 247, 241, 239, 233, 229, 227, 223, 217, 211, 199, 197, 193, 191, 181,
];
/// The most moduli a product may use (M < 2^141: the reconstruction's sum
/// `S < 9 · 2^25 · M` fits six 32-bit limbs).
pub const MAX_MODULI: usize = 18;
/// The fewest.
pub const MIN_MODULI: usize = 2;
/// The longest inner dimension: the INT8 products' int32 sums stay below 2^30.
pub const MAX_K: usize = 65_536;
/// Scaling bits the automatic choice of moduli asks for per `f64` operand element: 52 up to
/// k = 2048, 50 beyond (the native product's own error grows with k; the accuracy study in
/// BENCHMARKS.md measured both against it).
const AUTO_BITS_F64: (i32, i32) = (52, 50);
/// … and per `f32` one.
const AUTO_BITS_F32: i32 = 24;
/// The largest scaling: `rint(x · 2^s) ≤ 2^61`, split by the kernel into two chunks of 21
/// bits and a signed rest of at most 2^19.
const MAX_BITS: i32 = 61;
/// The shift of a row that holds Inf or NaN.
pub(crate) const FLAG: i32 = i32::MIN;
const LIMBS: usize = 5;
/// The 32-bit limbs of the sum the reconstruction makes for `count` moduli (S < 9·2^25·M).
fn s_limbs(count: usize) -> usize {
    match count {
        0..=8 => 3,
        9..=16 => LIMBS,
        _ => LIMBS + 1,
    }
}

/// … and of C' (|C'| ≤ M/4 < 2^62 up to 8 moduli, < 2^124 up to 16, < 2^139 beyond), in two's
/// complement.
fn d_limbs(count: usize) -> usize {
    s_limbs(count) - 1
}

/// The moduli's pairs in the reconstruction.
const PAIRS: usize = MAX_MODULI / 2;

/// The kernels' `oz::Consts`, by value (720 bytes, `#[repr(C)]` as in kernels/ozaki.cu).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Consts {
    count: i32,
    unused: i32,
    moduli: [u32; MAX_MODULI],
    p21: [u32; MAX_MODULI],
    p42: [u32; MAX_MODULI],
    off: [u32; MAX_MODULI],
    magic: [u64; MAX_MODULI],
    e: [[u32; 2]; PAIRS],
    w: [[u32; LIMBS]; PAIRS],
    nm: [u32; LIMBS],
    inv_m: f64,
}

const _: () = assert!(std::mem::size_of::<Consts>() == 720);

// SAFETY: `Consts` is `#[repr(C)]` plain data (integers and a double, no pointers), laid out
// exactly as the kernels' `oz::Consts` (720 bytes, asserted on both sides), so the driver may
// copy its bytes into the kernel's parameter space.
unsafe impl cudarc::driver::DeviceRepr for Consts {}

/// A little-endian unsigned integer of six 32-bit limbs (enough for M ≤ 2^141 times 256).
type Big = [u32; LIMBS + 1];

fn big_mul_small(a: &mut Big, x: u32) {
    let mut carry = 0u64;
    for limb in a.iter_mut() {
        let v = *limb as u64 * x as u64 + carry;
        *limb = v as u32;
        carry = v >> 32;
    }
    assert_eq!(carry, 0, "within six limbs");
}

fn big_mod_small(a: &Big, m: u32) -> u32 {
    a.iter()
        .rev()
        .fold(0u64, |r, &limb| ((r << 32) | limb as u64) % m as u64) as u32
}

fn big_bits(a: &Big) -> u32 {
    a.iter()
        .enumerate()
        .rev()
        .find(|(_, &l)| l != 0)
        .map_or(0, |(i, &l)| 32 * i as u32 + 32 - l.leading_zeros())
}

fn big_f64(a: &Big) -> f64 {
    a.iter()
        .enumerate()
        .map(|(i, &l)| l as f64 * 2f64.powi(32 * i as i32))
        .sum()
}

fn inverse_mod(a: u32, m: u32) -> u32 {
    (1..m)
        .find(|&x| (a as u64 * x as u64) % m as u64 == 1)
        .expect("coprime moduli")
}

/// The product of the first `count` moduli.
fn product(count: usize) -> Big {
    let mut m: Big = [0; LIMBS + 1];
    m[0] = 1;
    for &x in &MODULI[..count] {
        big_mul_small(&mut m, x);
    }
    m
}

impl Consts {
    /// [`Consts::new`], made once per count for the process.
    pub(crate) fn cached(count: usize) -> Consts {
        static MADE: [once_cell::sync::OnceCell<Consts>; MAX_MODULI + 1] =
            [const { once_cell::sync::OnceCell::new() }; MAX_MODULI + 1];
        *MADE[count].get_or_init(|| Consts::new(count))
    }

    /// The constants for the first `count` moduli (`MIN_MODULI ..= MAX_MODULI`).
    pub(crate) fn new(count: usize) -> Consts {
        assert!((MIN_MODULI..=MAX_MODULI).contains(&count));
        let mut c = Consts {
            count: count as i32,
            unused: 0,
            moduli: [0; MAX_MODULI],
            p21: [0; MAX_MODULI],
            p42: [0; MAX_MODULI],
            off: [0; MAX_MODULI],
            magic: [0; MAX_MODULI],
            e: [[0; 2]; PAIRS],
            w: [[0; LIMBS]; PAIRS],
            nm: [0; LIMBS],
            inv_m: 0.0,
        };
        let big_m = product(count);
        assert_eq!(big_m[LIMBS], 0, "M fits five limbs");
        // 2^(32 n) - M in n limbs: C' = S - qM is found modulo 2^(32 n).
        let n = d_limbs(count);
        let mut borrow = 0i64;
        for (nm, &limb) in c.nm.iter_mut().zip(&big_m).take(n) {
            let v = -(limb as i64) - borrow;
            *nm = v as u32;
            borrow = (v < 0) as i64;
        }
        c.inv_m = 1.0 / big_f64(&big_m);
        for (l, &m) in MODULI[..count].iter().enumerate() {
            c.moduli[l] = m;
            c.p21[l] = ((1u64 << 21) % m as u64) as u32;
            c.p42[l] = ((1u64 << 42) % m as u64) as u32;
            c.off[l] = ((1u32 << 27) / m + 1) * m;
            c.magic[l] = (1u64 << 40).div_ceil(m as u64);
        }
        for (p, pair) in MODULI[..count].chunks(2).enumerate() {
            // The pair's product mm, and E_a ≡ 1 (mod a), ≡ 0 (mod b), E_b the other way
            // round (E_b = 0 for a modulus alone).
            let (a, b) = (pair[0], pair.get(1).copied().unwrap_or(1));
            let mm = a * b;
            c.e[p] = if b == 1 {
                [1, 0]
            } else {
                [b * inverse_mod(b % a, a), a * inverse_mod(a % b, b)]
            };
            // W_p = (M / mm) · ((M / mm)⁻¹ mod mm) < M.
            let mut others: Big = [0; LIMBS + 1];
            others[0] = 1;
            for (j, &x) in MODULI[..count].iter().enumerate() {
                if j / 2 != p {
                    big_mul_small(&mut others, x);
                }
            }
            let inv = inverse_mod(big_mod_small(&others, mm), mm);
            big_mul_small(&mut others, inv);
            assert_eq!(others[LIMBS], 0, "W below M");
            c.w[p].copy_from_slice(&others[..LIMBS]);
        }
        c
    }
}

/// The scaling bits `(bits_a, bits_b)` of a product with inner dimension `k` on the first
/// `count` moduli: the most equal pair with `k · 2^(bits_a + bits_b) ≤ M / 4`, at most 61
/// each (zeros where `count` is too few for `k`).
pub fn scaling_bits(count: usize, k: usize) -> (i32, i32) {
    let m_bits = big_bits(&product(count)) as i32; // M ≥ 2^(m_bits - 1)
    let k_bits = k.max(1).next_power_of_two().trailing_zeros() as i32;
    let total = (m_bits - 1 - 2 - k_bits).max(0);
    // Equal halves, so that C and Cᵀ = op(B)ᵀ op(A)ᵀ (which the crate computes for
    // column-major results) round alike.
    let a = (total / 2).min(MAX_BITS);
    (a, a)
}

/// The bound on the squared 2-norm of a scaled row, for rows the kernels scale by their norm
/// rather than their largest magnitude (`ozaki_scale_*`'s `bound`): `B` with
/// `√B = √(M/4) · (1 − 2^-30) − √k / 2`, so that `(√B · (1 + 2^-31) + √k / 2)² < M / 4`
/// (rounding a row to integers adds at most `√k / 2` to its norm; the factor leaves room
/// for the rounding of the sums of squares, below 2^-36 at k = 65 536). Then any two
/// rows with `|x|² ≤ B`, or scaled by [`scaling_bits`], have integer products below `M / 4`
/// (Cauchy–Schwarz). 0, scaling by the largest magnitude alone, where `count` gives fewer
/// than 8 bits for `k`.
pub fn norm_bound(count: usize, k: usize) -> f64 {
    let (bits, _) = scaling_bits(count, k);
    if bits < 8 {
        return 0.0;
    }
    let root =
        (big_f64(&product(count)) / 4.0).sqrt() * (1.0 - 2f64.powi(-30)) - (k as f64).sqrt() / 2.0;
    root * root
}

/// A row's size as `ozaki_scale_*` gathers it (`oz::RowSize`, step for step, but for the order
/// of the sum of squares: the kernel's threads each take every 32nd element and their sums
/// are merged): its largest magnitude, whether it holds Inf or NaN, and its squared norm
/// `s · 4^anchor`. The order can move `s` by a few units in the last place, and so, for a row
/// whose `s · 4^t` lies that close to the bound (about one row in 2^40), the shift by one
/// between the kernel and this model, or between the two paths of the kernel (rows along the
/// contiguous index or not): both results are then within the bound, but their bits differ.
struct RowSize {
    mx: f64,
    s: f64,
    anchor: i32,
    bad: bool,
}

impl RowSize {
    fn of(row: impl Iterator<Item = f64>) -> RowSize {
        let mut z = RowSize {
            mx: 0.0,
            s: 0.0,
            anchor: -1000,
            bad: false,
        };
        let (mut inv, mut cap) = (2f64.powi(1000), 2f64.powi(-999));
        for v in row {
            let x = v.abs();
            z.bad |= !v.is_finite();
            z.mx = z.mx.max(x);
            if x >= cap && v.is_finite() {
                let e = ilogb(x);
                z.s = ldexp(z.s, 2 * (z.anchor - e));
                z.anchor = e;
                inv = ldexp(1.0, -e);
                cap = ldexp(1.0, e + 1);
            }
            let r = x * inv;
            z.s = r.mul_add(r, z.s);
        }
        z
    }

    /// The row's shift (`oz::RowSize::shift`): the larger of the one by its largest
    /// magnitude (`bits`) and the one by its norm (`bound`, where above 0), capped so that
    /// the scaled elements stay below 2^61.
    fn shift(&self, bits: i32, bound: f64) -> i32 {
        if self.bad {
            return FLAG;
        }
        if self.mx == 0.0 {
            return 0;
        }
        let e = ilogb(self.mx);
        let by_max = bits - 1 - e;
        if bound <= 0.0 {
            return by_max;
        }
        let mut t = ((ilogb(bound) - ilogb(self.s)) >> 1) - self.anchor;
        while ldexp(self.s, 2 * (self.anchor + t + 1)) <= bound {
            t += 1;
        }
        while ldexp(self.s, 2 * (self.anchor + t)) > bound {
            t -= 1;
        }
        by_max.max(t.min(MAX_BITS - 1 - e))
    }
}

/// The moduli an `auto` Ozaki product (`Precision::Ozaki { moduli: 0 }`) of `dtype` with
/// inner dimension `k` uses: the fewest that keep 52 bits of each `f64` element (50 beyond
/// k = 2048; 24 of each `f32` one) below the largest magnitude of its row, at most
/// 18 (`MAX_MODULI`).
pub fn auto_moduli(dtype: Dtype, k: usize) -> usize {
    let want = match dtype {
        Dtype::F64 if k <= 2048 => AUTO_BITS_F64.0,
        Dtype::F64 => AUTO_BITS_F64.1,
        Dtype::F32 => AUTO_BITS_F32,
    };
    (MIN_MODULI..=MAX_MODULI)
        .find(|&n| {
            let (a, b) = scaling_bits(n, k);
            a.min(b) >= want
        })
        .unwrap_or(MAX_MODULI)
}

/// The moduli a product asked for with `moduli` (0: automatic) uses.
pub(crate) fn moduli_for(dtype: Dtype, moduli: u8, k: usize) -> usize {
    match moduli as usize {
        0 => auto_moduli(dtype, k),
        n => n.clamp(MIN_MODULI, MAX_MODULI),
    }
}

/// Why [`launch`] launched nothing, or failed.
pub(crate) enum OzError {
    /// The product cannot run this way here (compute capability below 8.0, k of 0 or above
    /// [`MAX_K`], no room for the workspace, or the family does not build): nothing was
    /// enqueued, and the native kernels run it.
    Unavailable,
    Gpu(GpuDotError),
}

const ALIGN: usize = 256;
/// The INT8 GEMM's output tile and threads (kernels/ozaki.cu's `@launch` line).
const GEMM_TILE: (usize, usize) = OZAKI_GEMM_TILE.0;
const GEMM_THREADS: u32 = OZAKI_GEMM_TILE.1;

/// How the INT8 GEMM's clusters of two blocks pair their tiles for an `m × n` result: tile
/// rows (sharing op(B)'s tiles) where their count is even or that of tile columns odd, else
/// tile columns (sharing op(A)'s); and the panels' padded extents `(Mp, Np)`, whole pairs.
fn pairing(m: usize, n: usize) -> (bool, usize, usize) {
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
enum Gemm {
    Wg { pair_m: bool },
    Mma,
}

impl Gemm {
    /// The GEMM for an `m × n` result on a device of compute capability `sm` (≥ 80).
    fn of(sm: u32, m: usize, n: usize) -> Gemm {
        if sm == 90 {
            Gemm::Wg {
                pair_m: pairing(m, n).0,
            }
        } else {
            Gemm::Mma
        }
    }

    /// The rows of the panels' tiles (X's, Y's) and the panels' padded extents `(Mp, Np)`.
    fn panels(self, m: usize, n: usize) -> ((usize, usize), (usize, usize)) {
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
fn workspace(count: usize, (m, k, n): (usize, usize, usize), gemm: Gemm) -> (usize, [usize; 5]) {
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

/// What the kernels compute, on the CPU, exactly: the same scaling, the exact integer
/// product (no residues), and one rounding. `a` is `m × k` and `b` is `k × n`, row-major;
/// returns `m × n` row-major. Results in the subnormal range may differ from the kernels'
/// (they round twice there).
pub fn reference(a: &[f64], b: &[f64], (m, k, n): (usize, usize, usize), count: usize) -> Vec<f64> {
    let (bits_a, bits_b) = scaling_bits(count, k);
    let bound = norm_bound(count, k);
    let shift = |row: &mut dyn Iterator<Item = f64>, bits: i32| RowSize::of(row).shift(bits, bound);
    let sa: Vec<i32> = (0..m)
        .map(|i| shift(&mut (0..k).map(|p| a[i * k + p]), bits_a))
        .collect();
    let sb: Vec<i32> = (0..n)
        .map(|j| shift(&mut (0..k).map(|p| b[p * n + j]), bits_b))
        .collect();
    let int = |v: f64, s: i32| -> i128 { ldexp(v, s).round_ties_even() as i128 };
    let xa: Vec<i128> = (0..m * k)
        .map(|x| {
            if sa[x / k] == FLAG {
                0
            } else {
                int(a[x], sa[x / k])
            }
        })
        .collect();
    let yb: Vec<i128> = (0..k * n)
        .map(|x| {
            if sb[x % n] == FLAG {
                0
            } else {
                int(b[x], sb[x % n])
            }
        })
        .collect();
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            if sa[i] == FLAG || sb[j] == FLAG {
                c[i * n + j] = (0..k).fold(0.0, |s, p| a[i * k + p].mul_add(b[p * n + j], s));
                continue;
            }
            // Exact sum of products of up to 2^61 · 2^61: high and low 64-bit halves apart.
            let (mut hi, mut lo) = (0i128, 0i128);
            for p in 0..k {
                let prod = xa[i * k + p] * yb[p * n + j];
                hi += prod >> 64;
                lo += prod & ((1i128 << 64) - 1);
            }
            hi += lo >> 64;
            let lo = (lo & ((1i128 << 64) - 1)) as u128;
            c[i * n + j] = ldexp(wide_to_f64(hi, lo), -(sa[i] + sb[j]));
        }
    }
    c
}

/// `hi · 2^64 + lo` (lo < 2^64) rounded once to the nearest f64, ties to even.
fn wide_to_f64(hi: i128, lo: u128) -> f64 {
    let neg = hi < 0;
    let (mag_hi, mag_lo) = if neg {
        // −(hi·2^64 + lo) = (−hi − 1)·2^64 + (2^64 − lo), or −hi·2^64 when lo = 0.
        if lo == 0 {
            ((-hi) as u128, 0u128)
        } else {
            ((-hi - 1) as u128, (1u128 << 64) - lo)
        }
    } else {
        (hi as u128, lo)
    };
    let x = if mag_hi >> 64 == 0 {
        // At most 128 bits: converted exactly once.
        ((mag_hi << 64) | mag_lo) as f64
    } else {
        // Over 64 significant bits in mag_hi: its low bit stands in for anything below.
        ((mag_hi | (mag_lo != 0) as u128) as f64) * 2f64.powi(64)
    };
    if neg {
        -x
    } else {
        x
    }
}

/// `x · 2^e`, exactly where the result is a normal number.
fn ldexp(x: f64, e: i32) -> f64 {
    let mut x = x;
    let mut e = e;
    while e > 1000 {
        x *= 2f64.powi(1000);
        e -= 1000;
    }
    while e < -1000 {
        x *= 2f64.powi(-1000);
        e += 1000;
    }
    x * 2f64.powi(e)
}

/// The exponent of |x| (x finite and nonzero): x = 1.f · 2^e.
fn ilogb(x: f64) -> i32 {
    let bits = x.abs().to_bits();
    let exp = (bits >> 52) as i32;
    if exp == 0 {
        // Subnormal: the leading one's position.
        -1074 + 63 - bits.leading_zeros() as i32
    } else {
        exp - 1023
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reconstruction of kernels/ozaki.cu (`oz::rebuild`), step for step, on residues
    /// `res` (each in [0, m_l)): C' rounded once to f64 (no scaling).
    #[allow(clippy::needless_range_loop)] // step for step as the kernel's limb loops
    fn rebuild_model(res: &[u32], c: &Consts) -> f64 {
        let count = c.count as usize;
        let (limbs, nl) = (s_limbs(count), d_limbs(count));
        let mut acc = [0u64; LIMBS + 1];
        for (p, pair) in res.chunks(2).enumerate() {
            let (ra, rb) = (pair[0], pair.get(1).copied().unwrap_or(0));
            let t = ra * c.e[p][0] + rb * c.e[p][1];
            assert!(t < 1 << 25);
            for u in 0..LIMBS {
                acc[u] += t as u64 * c.w[p][u] as u64;
            }
        }
        let (mut s, mut carry) = ([0u32; LIMBS + 1], 0u64);
        for t in 0..limbs {
            let v = acc[t] + carry;
            s[t] = v as u32;
            carry = v >> 32;
        }
        assert_eq!(carry, 0);
        let sd = (0..limbs)
            .rev()
            .fold(0.0f64, |sd, t| sd.mul_add(2f64.powi(32), s[t] as f64));
        let q = (sd * c.inv_m).round_ties_even() as u32;
        assert!(q < 1 << 29);
        let mut d = [0u32; LIMBS];
        carry = 0;
        for t in 0..nl {
            let v = q as u64 * c.nm[t] as u64 + s[t] as u64 + carry;
            d[t] = v as u32;
            carry = v >> 32;
        }
        let neg = (d[nl - 1] as i32) < 0;
        let flip = if neg { u32::MAX } else { 0 };
        carry = neg as u64;
        for x in d[..nl].iter_mut() {
            let v = (*x ^ flip) as u64 + carry;
            *x = v as u32;
            carry = v >> 32;
        }
        let (mut e, mut sticky) = (0, 0);
        if nl == 5 && d[4] != 0 {
            sticky = d[0];
            d.copy_within(1..5, 0);
            e = 32;
        }
        let hi = (d[3] as u64) << 32 | d[2] as u64;
        let lo = (d[1] as u64) << 32 | d[0] as u64;
        let x = if hi == 0 {
            lo as f64
        } else {
            let lz = hi.leading_zeros();
            let (top, rest) = if lz > 0 {
                (hi << lz | lo >> (64 - lz), lo << lz)
            } else {
                (hi, lo)
            };
            e += 64 - lz as i32;
            (top | ((rest | sticky as u64) != 0) as u64) as f64
        };
        let x = ldexp(x, e);
        if neg {
            -x
        } else {
            x
        }
    }

    /// A small deterministic generator (xorshift), so the tests need no crate.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn unit(&mut self) -> f64 {
            (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        }
    }

    #[test]
    fn the_moduli_are_pairwise_coprime_and_the_constants_consistent() {
        fn gcd(a: u32, b: u32) -> u32 {
            if b == 0 {
                a
            } else {
                gcd(b, a % b)
            }
        }
        for (i, &a) in MODULI.iter().enumerate() {
            assert!((173..=256).contains(&a));
            for &b in &MODULI[i + 1..] {
                assert_eq!(gcd(a, b), 1, "{a} and {b}");
            }
        }
        let c = Consts::new(MAX_MODULI);
        for (l, &m) in MODULI.iter().enumerate() {
            // umod's magic number is exact over its whole range, in the kernel's form
            // (x + umulhi(x, magic - 2^32)) >> 8, whose sum stays below 2^32.
            assert_eq!(c.magic[l] >> 32, 1, "magic in [2^32, 2^33)");
            assert_eq!(c.off[l] % m, 0);
            assert!(c.off[l] > 1 << 27 && c.off[l] <= (1 << 27) + m);
            let lo = c.magic[l] as u32 as u64;
            for x in (0..(1u32 << 31) + 1024)
                .step_by(9973)
                .chain([(1u32 << 31) + 1023])
            {
                let sum = x as u64 + ((x as u64 * lo) >> 32);
                assert!(sum < 1 << 32);
                let q = (sum >> 8) as u32;
                assert_eq!(x - q * m, x % m, "{x} mod {m}");
            }
        }
    }

    /// The residue panels' byte for the scaled integer `v` and modulus `l`, step for step as
    /// kernels/ozaki.cu's `oz::split` (32-bit wrapping arithmetic).
    fn split_model(v: i64, c: &Consts, l: usize) -> i8 {
        let (c0, c1, c2) = (
            v as u32 & 0x1f_ffff,
            (v >> 21) as u32 & 0x1f_ffff,
            (v >> 42) as i32,
        );
        let (m, half, lo) = (c.moduli[l], (c.moduli[l] - 1) / 2, c.magic[l] as u32);
        let y = (c2 as u32)
            .wrapping_mul(c.p42[l])
            .wrapping_add(c1 * c.p21[l])
            .wrapping_add(c0)
            .wrapping_add(c.off[l]);
        assert!(y < 1 << 30, "y = {y} for v = {v}, m = {m}");
        let x = y + half;
        let q = (x + ((x as u64 * lo as u64) >> 32) as u32) >> 8;
        y.wrapping_sub(q.wrapping_mul(m)) as u8 as i8
    }

    #[test]
    fn split_residues_are_balanced_and_congruent_over_the_whole_range() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let c = Consts::new(MAX_MODULI);
        let edges = [
            0i64,
            1,
            -1,
            1 << 61,
            -(1 << 61),
            (1 << 42) - 1,
            -(1 << 42),
            127,
            -128,
        ];
        for i in 0..20_000 {
            let v = match i {
                i if i < edges.len() => edges[i],
                // Every magnitude up to 2^61.
                _ => {
                    let bits = (rng.next() % 62) as u32;
                    let mag = (rng.next() >> (64 - bits.max(1))) as i64;
                    if rng.next() & 1 == 1 {
                        -mag
                    } else {
                        mag
                    }
                }
            };
            for (l, &m) in MODULI.iter().enumerate() {
                let b = split_model(v, &c, l) as i64;
                if m != 256 {
                    assert!(2 * b.abs() < m as i64, "{v} mod {m}: {b} not balanced");
                }
                assert_eq!((v - b).rem_euclid(m as i64), 0, "{v} mod {m}: {b}");
            }
        }
    }

    #[test]
    fn the_pairs_constants_select_each_pair_modulo_m() {
        for count in [2, 3, 15, 16, 17, MAX_MODULI] {
            let c = Consts::new(count);
            for (p, pair) in MODULI[..count].chunks(2).enumerate() {
                let mm = pair.iter().product::<u32>();
                // E_a ≡ (1, 0) and E_b ≡ (0, 1) modulo (a, b).
                for (i, &m) in pair.iter().enumerate() {
                    for (j, &e) in c.e[p].iter().enumerate() {
                        assert_eq!(e % m, (i == j) as u32, "pair {p}: e {j} mod {m}");
                    }
                }
                // W_p ≡ 1 (mod mm) and ≡ 0 modulo every modulus of another pair.
                let mut w: Big = [0; LIMBS + 1];
                w[..LIMBS].copy_from_slice(&c.w[p]);
                assert_eq!(big_mod_small(&w, mm), 1 % mm, "W_{p} mod {mm}");
                for (j, &x) in MODULI[..count].iter().enumerate() {
                    if j / 2 != p {
                        assert_eq!(big_mod_small(&w, x), 0, "W_{p} mod {x}");
                    }
                }
            }
        }
    }

    #[test]
    fn residues_rebuild_every_integer_within_a_quarter_of_m() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for count in [2, 5, 9, 12, 15, 16, 17, 18] {
            let c = Consts::new(count);
            let m_bits = big_bits(&product(count)) as i32;
            for trial in 0..400 {
                // Magnitudes up to 2^(m_bits - 3) ≤ M/4, and small ones.
                let bits = if trial % 4 == 0 {
                    trial % 40
                } else {
                    m_bits - 3
                };
                let bits = bits.min(m_bits - 3).min(126);
                let mag = ((rng.next() as u128) << 64 | rng.next() as u128) >> (128 - bits.max(1));
                let x = if rng.next() & 1 == 1 {
                    -(mag as i128)
                } else {
                    mag as i128
                };
                let res: Vec<u32> = MODULI[..count]
                    .iter()
                    .map(|&m| x.rem_euclid(m as i128) as u32)
                    .collect();
                assert_eq!(rebuild_model(&res, &c), x as f64, "{count} moduli, {x}");
            }
            // Beyond 2^126 (17 and 18 moduli): x = hi·2^64 + lo.
            let hi_bits = m_bits - 3 - 64;
            for _ in 0..400 {
                if hi_bits <= 62 {
                    break;
                }
                let mag =
                    (((rng.next() as u128) << 64 | rng.next() as u128) >> (128 - hi_bits)) as i128;
                let hi = if rng.next() & 1 == 1 { -mag } else { mag };
                let lo = rng.next() as u128;
                let res: Vec<u32> = MODULI[..count]
                    .iter()
                    .map(|&m| {
                        let m = m as i128;
                        (hi.rem_euclid(m) * ((1i128 << 64) % m) + lo as i128 % m).rem_euclid(m)
                            as u32
                    })
                    .collect();
                assert_eq!(
                    rebuild_model(&res, &c),
                    wide_to_f64(hi, lo),
                    "{count}: {hi}, {lo}"
                );
            }
            // The largest residues everywhere: M - 1, i.e. -1.
            let top: Vec<u32> = MODULI[..count].iter().map(|&m| m - 1).collect();
            assert_eq!(rebuild_model(&top, &c), -1.0, "{count} moduli");
        }
    }

    #[test]
    fn an_ozaki_request_is_served_by_the_count_that_runs() {
        let ran = |n: u8| Precision::Ozaki { moduli: n };
        assert!(Precision::OZAKI.served_by(ran(15)));
        assert!(ran(12).served_by(ran(12)));
        assert!(!ran(12).served_by(ran(15)));
        assert!(ran(1).served_by(ran(2)) && ran(25).served_by(ran(18)));
        assert!(!Precision::OZAKI.served_by(Precision::Fp32));
        assert_eq!(moduli_for(Dtype::F64, 25, 4096), MAX_MODULI);
        assert_eq!(moduli_for(Dtype::F64, 1, 4096), MIN_MODULI);
    }

    #[test]
    fn scaling_keeps_the_product_below_a_quarter_of_m() {
        for count in MIN_MODULI..=MAX_MODULI {
            let m_bits = big_bits(&product(count)) as i32;
            for k in [1, 2, 3, 100, 1024, 8191, 8192, 65_536] {
                let (a, b) = scaling_bits(count, k);
                assert!(a <= MAX_BITS && b <= MAX_BITS);
                // Equal halves: rows scaled by their largest magnitude then have norms of at
                // most √(k · 4^a) ≤ √(M/4), which the mixing with the norm rule needs.
                assert_eq!(a, b, "{count} moduli, k {k}");
                if a < 1 || b < 1 {
                    // Too few moduli for this k: `launch` refuses such products.
                    continue;
                }
                // k · 2^(a + b) ≤ 2^(m_bits - 3) ≤ M / 4.
                let k_bits = (k as f64).log2().ceil() as i32;
                assert!(k_bits + a + b <= m_bits - 3, "{count} moduli, k {k}");
            }
        }
        assert_eq!(auto_moduli(Dtype::F64, 8192), 15);
        assert_eq!(auto_moduli(Dtype::F64, 256), 15);
        assert_eq!(auto_moduli(Dtype::F32, 8192), 8);
        assert!(auto_moduli(Dtype::F64, 64) <= auto_moduli(Dtype::F64, 65_536));
    }

    #[test]
    fn the_gemm_pairs_whole_tiles() {
        // (m, n) → (tile rows paired, Mp, Np)
        assert_eq!(pairing(4096, 4096), (true, 4224, 4096));
        assert_eq!(pairing(8192, 8192), (false, 8256, 8192));
        assert_eq!(pairing(100, 100), (true, 384, 256));
        assert_eq!(pairing(150, 400), (false, 192, 512));
        assert_eq!(pairing(150, 600), (true, 384, 768));
        for m in [1, 191, 192, 193, 384, 385, 5000] {
            for n in [1, 255, 256, 257, 512, 513, 5000] {
                let (pair_m, mp, np) = pairing(m, n);
                assert!(mp >= m && np >= n && mp % 192 == 0 && np % 256 == 0);
                let pairs_of = if pair_m { mp / 192 } else { np / 256 };
                assert_eq!(pairs_of % 2, 0, "{m} × {n}");
            }
        }
    }

    #[test]
    fn the_mma_sync_gemm_serves_sm_80_to_89_in_whole_tiles_of_128() {
        assert_eq!(Gemm::of(90, 4096, 4096), Gemm::Wg { pair_m: true });
        assert_eq!(Gemm::of(90, 8192, 8192), Gemm::Wg { pair_m: false });
        for sm in [80, 86, 89] {
            assert_eq!(Gemm::of(sm, 4096, 4096), Gemm::Mma);
        }
        for m in [1, 127, 128, 129, 4097] {
            for n in [1, 127, 128, 129, 4097] {
                let (tiles, (mp, np)) = Gemm::Mma.panels(m, n);
                assert_eq!(tiles, (128, 128));
                assert!(mp >= m && np >= n && mp - m < 128 && np - n < 128);
                assert!(mp % 128 == 0 && np % 128 == 0, "{m} × {n}");
            }
        }
        let (_, (mp, np)) = Gemm::Wg { pair_m: true }.panels(4096, 4096);
        assert_eq!((mp, np), (4224, 4096));
    }

    #[test]
    fn the_norm_bound_leaves_room_for_rounding_to_integers() {
        for count in MIN_MODULI..=MAX_MODULI {
            let quarter = big_f64(&product(count)) / 4.0;
            for k in [1, 2, 3, 100, 1024, 3000, 8192, 65_536] {
                let bound = norm_bound(count, k);
                if scaling_bits(count, k).0 < 8 {
                    assert_eq!(bound, 0.0, "{count} moduli, k {k}");
                    continue;
                }
                // A row at the bound, its sum of squares rounded low by 2^-36, then rounded
                // to integers: its norm squared stays below M/4.
                let norm = (bound * (1.0 + 2f64.powi(-36))).sqrt() + (k as f64).sqrt() / 2.0;
                assert!(norm * norm < quarter, "{count} moduli, k {k}");
                // … and the bound gives away no more than that room.
                let given = quarter.sqrt() * (1.0 - 2f64.powi(-29)) - (k as f64).sqrt() / 2.0;
                assert!(bound.sqrt() > given, "{count} moduli, k {k}");
            }
        }
    }

    /// The exact integer product of two rows scaled as the kernels scale them.
    fn scaled_dot(x: &[f64], y: &[f64], count: usize) -> f64 {
        let k = x.len();
        let (bits, bound) = (scaling_bits(count, k).0, norm_bound(count, k));
        let int = |row: &[f64]| -> Vec<i128> {
            let s = RowSize::of(row.iter().copied()).shift(bits, bound);
            row.iter()
                .map(|&v| ldexp(v, s).round_ties_even() as i128)
                .collect()
        };
        let (xi, yi) = (int(x), int(y));
        xi.iter().zip(&yi).map(|(&a, &b)| (a * b) as f64).sum()
    }

    #[test]
    fn rows_are_scaled_by_their_norm_where_it_keeps_more_bits() {
        let k = 4096;
        let (bits, bound) = (scaling_bits(15, k).0, norm_bound(15, k));
        let by_max = |row: &[f64]| bits - 1 - ilogb(row.iter().fold(0f64, |m, v| m.max(v.abs())));
        let shift = |row: &[f64]| RowSize::of(row.iter().copied()).shift(bits, bound);
        // One large element among tiny ones: the norm is the largest element's, and the row
        // keeps about log2(k)/2 = 6 bits more than by its largest element.
        let mut spiky = vec![2f64.powi(-40); k];
        spiky[17] = -1.5;
        assert!(shift(&spiky) >= by_max(&spiky) + 5, "{}", shift(&spiky));
        // Equal magnitudes: Cauchy–Schwarz is tight, and the norm gains only what rounding k
        // up to a power of two gave away; the product of two such rows stays below M/4 for
        // every k, including values just below a power of two.
        let quarter = big_f64(&product(15)) / 4.0;
        for k in [1, 3, 1000, 3000, 4095, 4096, 65_536] {
            for v in [1.0, 1.0 - f64::EPSILON / 2.0, 0.75, -1.0 + f64::EPSILON] {
                let row = vec![v; k];
                let c = scaled_dot(&row, &row, 15);
                assert!(c.abs() <= quarter, "k {k}, {v}: {c:e} against {quarter:e}");
                assert!(RowSize::of(row.iter().copied()).shift(bits, bound) >= by_max(&row));
            }
        }
        // Rows with entries over 2^±30 (random binades): every integer product stays below
        // M/4, for every count.
        let mut rng = Rng(777);
        for count in [4, 8, 12, 15, 18] {
            for _ in 0..4 {
                let mut row = || -> Vec<f64> {
                    (0..k)
                        .map(|_| {
                            let e = (rng.unit() * 30.0).round() as i32;
                            ldexp(rng.unit(), e)
                        })
                        .collect()
                };
                let (x, y) = (row(), row());
                let quarter = big_f64(&product(count)) / 4.0;
                for c in [scaled_dot(&x, &y, count), scaled_dot(&x, &x, count)] {
                    assert!(
                        c.abs() <= quarter,
                        "{count} moduli: {c:e} against {quarter:e}"
                    );
                }
            }
        }
        // Tiny, huge and subnormal rows scale like any other.
        for v in [f64::MIN_POSITIVE / 8.0, 1e300, -1e-300] {
            let row = vec![v; 64];
            let s = RowSize::of(row.iter().copied()).shift(bits, bound);
            let scaled = ldexp(v.abs(), s);
            assert!(
                (2f64.powi(40)..2f64.powi(61)).contains(&scaled),
                "{v:e}: {scaled:e}"
            );
        }
    }

    #[test]
    fn the_reference_is_exact_on_integers_and_close_on_random_inputs() {
        let mut rng = Rng(12345);
        let (m, k, n) = (7, 33, 5);
        let a: Vec<f64> = (0..m * k).map(|_| (rng.unit() * 1000.0).round()).collect();
        let b: Vec<f64> = (0..k * n).map(|_| (rng.unit() * 1000.0).round()).collect();
        let exact = |a: &[f64], b: &[f64]| -> Vec<f64> {
            (0..m * n)
                .map(|x| {
                    let (i, j) = (x / n, x % n);
                    (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum()
                })
                .collect()
        };
        assert_eq!(reference(&a, &b, (m, k, n), 9), exact(&a, &b));
        let a: Vec<f64> = (0..m * k).map(|_| rng.unit()).collect();
        let b: Vec<f64> = (0..k * n).map(|_| rng.unit()).collect();
        let want = exact(&a, &b);
        let got = reference(&a, &b, (m, k, n), 16);
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-13, "{g} against {w}");
        }
        // Fewer moduli, fewer bits: a coarser but still bounded result.
        let coarse = reference(&a, &b, (m, k, n), 6);
        let (bits, _) = scaling_bits(6, k);
        for (g, w) in coarse.iter().zip(&want) {
            assert!(
                (g - w).abs() <= k as f64 * 2f64.powi(-bits),
                "{g} against {w}"
            );
        }
        // A row with NaN gives NaN where it meets; others are untouched.
        let mut a2 = a.clone();
        a2[k] = f64::NAN;
        let got = reference(&a2, &b, (m, k, n), 16);
        assert!(got[n..2 * n].iter().all(|x| x.is_nan()));
        assert!(got[..n].iter().chain(&got[2 * n..]).all(|x| x.is_finite()));
    }
}

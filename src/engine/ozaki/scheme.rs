//! The scheme's arithmetic: the moduli, the constants of the reconstruction (the Chinese
//! remainder theorem in 32-bit limbs, as kernels/ozaki.cu's `oz::Consts`), and the exactness
//! bounds that decide how many bits a scaled operand may keep.

use crate::options::{MAX_MODULI, MIN_MODULI};

/// The moduli, pairwise coprime, largest first; a product uses the first `count`.
pub(crate) const MODULI: [u32; MAX_MODULI] = [
    256, 255, 253, 251, 247, 241, 239, 233, 229, 227, 223, 217, 211, 199, 197, 193, 191, 181,
];
/// The longest inner dimension: the INT8 products' int32 sums stay below 2^30.
pub const MAX_K: usize = 65_536;
/// The largest scaling: `rint(x · 2^s) ≤ 2^61`, split by the kernel into two chunks of 21
/// bits and a signed rest of at most 2^19.
pub(super) const MAX_BITS: i32 = 61;
/// The shift of a row that holds Inf or NaN.
pub(crate) const FLAG: i32 = i32::MIN;
pub(super) const LIMBS: usize = 5;
/// The 32-bit limbs of the sum the reconstruction makes for `count` moduli (S < 9·2^25·M).
pub(super) fn s_limbs(count: usize) -> usize {
    match count {
        0..=8 => 3,
        9..=16 => LIMBS,
        _ => LIMBS + 1,
    }
}

/// … and of C' (|C'| ≤ M/4 < 2^62 up to 8 moduli, < 2^124 up to 16, < 2^139 beyond), in two's
/// complement.
pub(super) fn d_limbs(count: usize) -> usize {
    s_limbs(count) - 1
}

/// The moduli's pairs in the reconstruction.
pub(super) const PAIRS: usize = MAX_MODULI / 2;

/// The kernels' `oz::Consts`, by value (1008 bytes, `#[repr(C)]` as in kernels/ozaki.cu).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Consts {
    pub(super) count: i32,
    pub(super) unused: i32,
    pub(super) moduli: [u32; MAX_MODULI],
    pub(super) p21: [u32; MAX_MODULI],
    pub(super) p42: [u32; MAX_MODULI],
    pub(super) off: [u32; MAX_MODULI],
    pub(super) p32: [f64; MAX_MODULI],
    pub(super) recip: [f64; MAX_MODULI],
    pub(super) magic: [u64; MAX_MODULI],
    pub(super) e: [[u32; 2]; PAIRS],
    pub(super) w: [[u32; LIMBS]; PAIRS],
    pub(super) nm: [u32; LIMBS],
    pub(super) inv_m: f64,
}

const _: () = assert!(std::mem::size_of::<Consts>() == 1008);

// SAFETY: `Consts` is `#[repr(C)]` plain data (integers and a double, no pointers), laid out
// exactly as the kernels' `oz::Consts` (1008 bytes, asserted on both sides), so the driver may
// copy its bytes into the kernel's parameter space.
unsafe impl cudarc::driver::DeviceRepr for Consts {}

/// A little-endian unsigned integer of six 32-bit limbs (enough for M ≤ 2^141 times 256).
pub(super) type Big = [u32; LIMBS + 1];

pub(super) fn big_mul_small(a: &mut Big, x: u32) {
    let mut carry = 0u64;
    for limb in a.iter_mut() {
        let v = *limb as u64 * x as u64 + carry;
        *limb = v as u32;
        carry = v >> 32;
    }
    assert_eq!(carry, 0, "within six limbs");
}

pub(super) fn big_mod_small(a: &Big, m: u32) -> u32 {
    a.iter()
        .rev()
        .fold(0u64, |r, &limb| ((r << 32) | limb as u64) % m as u64) as u32
}

pub(super) fn big_bits(a: &Big) -> u32 {
    a.iter()
        .enumerate()
        .rev()
        .find(|(_, &l)| l != 0)
        .map_or(0, |(i, &l)| 32 * i as u32 + 32 - l.leading_zeros())
}

pub(super) fn big_f64(a: &Big) -> f64 {
    a.iter()
        .enumerate()
        .map(|(i, &l)| l as f64 * 2f64.powi(32 * i as i32))
        .sum()
}

pub(super) fn inverse_mod(a: u32, m: u32) -> u32 {
    (1..m)
        .find(|&x| (a as u64 * x as u64) % m as u64 == 1)
        .expect("coprime moduli")
}

/// The product of the first `count` moduli.
pub(super) fn product(count: usize) -> Big {
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
            p32: [0.0; MAX_MODULI],
            recip: [0.0; MAX_MODULI],
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
            c.p32[l] = ((1u64 << 32) % m as u64) as f64;
            c.recip[l] = 1.0 / m as f64;
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

//! The moduli and their constants, the split into residues and the reconstruction, against
//! models of the kernels.

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
        assert_eq!(c.p32[l], ((1u64 << 32) % m as u64) as f64);
        assert_eq!(c.recip[l], 1.0 / m as f64);
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

/// The split's rounding constant, 1.5 · 2^52 (kernels/ozaki.cu's `oz::ROUND`).
const ROUND: f64 = 6_755_399_441_055_744.0;

/// The low 32 bits of a double's pattern (CUDA's `__double2loint`).
fn low_word(x: f64) -> u32 {
    x.to_bits() as u32
}

/// The residue panels' byte for the scaled element `x` (`x · 2^s`, |x| ≤ 2^61) and modulus
/// `l`, step for step as kernels/ozaki.cu's `oz::SplitResidues` (fused multiply-adds, 32-bit
/// wrapping arithmetic).
fn split_model(x: f64, c: &Consts, l: usize) -> i8 {
    let a = x.mul_add(2f64.powi(-32), ROUND) - ROUND;
    let bm = (-a).mul_add(2f64.powi(32), x) + ROUND;
    let tm = a.mul_add(c.p32[l], bm);
    let q = low_word((tm - ROUND).mul_add(c.recip[l], ROUND));
    low_word(tm).wrapping_sub(q.wrapping_mul(c.moduli[l])) as u8 as i8
}

/// … and as `oz::SplitResiduesInt`, from `v = rint(x)` (32-bit wrapping arithmetic).
fn split_model_int(v: i64, c: &Consts, l: usize) -> i8 {
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
    let p61 = 2f64.powi(61);
    let edges = [
        0.0,
        -0.0,
        0.5,
        -0.5,
        1.5,
        2.5,
        -2.5,
        1.0,
        -1.0,
        p61,
        -p61,
        2f64.powi(42) - 1.0,
        -(2f64.powi(42)),
        2f64.powi(31) + 0.5,
        2f64.powi(31) - 0.5,
        -(2f64.powi(31)) - 0.5,
        2f64.powi(32) + 2f64.powi(31),
        -(2f64.powi(32) + 2f64.powi(31)),
        4_294_967_295.5,
        2f64.powi(52) + 1.0,
        2f64.powi(53) - 1.0,
        127.0,
        -128.0,
        1e-300,
    ];
    for i in 0..40_000 {
        let x = match i {
            i if i < edges.len() => edges[i],
            // Every magnitude up to 2^61, with fractions, halves among them.
            _ => {
                let bits = (rng.next() % 62) as i32;
                let frac = match rng.next() % 3 {
                    0 => 0.5,
                    1 => 0.0,
                    _ => rng.unit().abs(),
                };
                let mag = ((rng.next() >> 11) as f64 * 2f64.powi(bits - 53)).floor() + frac;
                let mag = mag.min(p61);
                if rng.next() & 1 == 1 {
                    -mag
                } else {
                    mag
                }
            }
        };
        // The integer the panels hold: rint(x), ties to even, exactly (|x| ≤ 2^61).
        let v = x.round_ties_even() as i64;
        for (l, &m) in MODULI.iter().enumerate() {
            // Both kernels' arithmetic stores the same byte.
            let b = split_model(x, &c, l);
            assert_eq!(split_model_int(v, &c, l), b, "{x} mod {m}: integer split");
            let b = b as i64;
            if m != 256 {
                assert!(2 * b.abs() < m as i64, "{x} mod {m}: {b} not balanced");
            }
            assert_eq!(
                (v - b).rem_euclid(m as i64),
                0,
                "{x} (rint {v}) mod {m}: {b}"
            );
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
                    (hi.rem_euclid(m) * ((1i128 << 64) % m) + lo as i128 % m).rem_euclid(m) as u32
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

/// A count's constants of each modulus are those of every other count that uses it: the GEMM
/// enqueued before the verdict computes the first count's layers with the first count's
/// constants, and the product keeps them at a later count.
#[test]
fn a_moduluss_constants_are_the_same_at_every_count() {
    let most = Consts::new(MAX_MODULI);
    for count in MIN_MODULI..MAX_MODULI {
        let c = Consts::new(count);
        for l in 0..count {
            assert_eq!(
                (c.moduli[l], c.magic[l], c.p21[l], c.p42[l], c.off[l]),
                (
                    most.moduli[l],
                    most.magic[l],
                    most.p21[l],
                    most.p42[l],
                    most.off[l]
                ),
                "count {count}, layer {l}"
            );
            assert_eq!((c.p32[l], c.recip[l]), (most.p32[l], most.recip[l]));
        }
    }
}

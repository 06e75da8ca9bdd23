//! The scheme's arithmetic, scaling and the CPU model against models of the kernels.

use super::model::*;
use super::passes::*;
use super::scaling::*;
use super::scheme::*;
use crate::element::Dtype;
use crate::options::{Precision, MAX_MODULI, MIN_MODULI};

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
    /// True with probability `1/n`.
    fn one_in(&mut self, n: u64) -> bool {
        self.next().is_multiple_of(n)
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

#[test]
fn an_ozaki_request_is_served_by_the_count_that_runs() {
    let ran = |n: u8| Precision::Ozaki { moduli: n };
    assert!(Precision::OZAKI.served_by(ran(15)));
    assert!(ran(12).served_by(ran(12)));
    assert!(!ran(12).served_by(ran(15)));
    assert!(ran(1).served_by(ran(2)) && ran(25).served_by(ran(18)));
    assert!(!Precision::OZAKI.served_by(Precision::Native));
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
fn the_tile_order_groups_whole_pairs_of_tile_rows() {
    assert_eq!(group_rows(false), GROUP_ROWS as i32);
    assert_eq!(group_rows(true), GROUP_ROWS as i32);
    assert_eq!(GROUP_ROWS % 2, 0);
    // A benchmark's count: as set where the clusters pair tile columns, else rounded up to a
    // whole number of pairs of tile rows.
    for (set, columns, rows) in [
        (0, 1, 2),
        (1, 1, 2),
        (2, 2, 2),
        (3, 3, 4),
        (12, 12, 12),
        (u32::MAX, 1 << 16, 1 << 16),
    ] {
        crate::device::overrides::ozaki_gemm_group(Some(set));
        assert_eq!(
            (group_rows(false), group_rows(true)),
            (columns, rows),
            "{set}"
        );
    }
    crate::device::overrides::ozaki_gemm_group(None);
    assert_eq!(group_rows(false), GROUP_ROWS as i32);
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

/// The componentwise ratio of `got`, element `(i, j)` of a model product rounded to `dtype`,
/// against that element of `reference`.
fn element_ratio(
    dtype: Dtype,
    reference: &crate::accuracy::Reference,
    (i, j): (usize, usize),
    got: f64,
) -> crate::accuracy::Componentwise {
    use crate::accuracy::{componentwise, Reference};
    let one = Reference {
        c: ndarray::arr2(&[[reference.c[[i, j]]]]),
        abs: ndarray::arr2(&[[reference.abs[[i, j]]]]),
        k: reference.k,
    };
    match dtype {
        Dtype::F64 => componentwise(ndarray::arr2(&[[got]]).view(), &one),
        Dtype::F32 => componentwise(ndarray::arr2(&[[got as f32]]).view(), &one),
    }
}

/// The guard's model is sound: every element it passes errs by at most `GUARD + 1` times
/// native's componentwise bound, on every family of the accuracy suite, f64 and f32; and it
/// is useful: uniform inputs pass at the automatic count, and the families that break the
/// unguarded scheme (scales paired along k, one huge entry a row) pass nowhere. The early
/// refusal and the sure test agree with it.
#[test]
fn the_guard_passes_only_what_meets_native_bound() {
    use super::guard::{guard_counts, GUARD};
    use crate::accuracy::{Family, Reference};
    for dtype in [Dtype::F64, Dtype::F32] {
        for k in [64, 512] {
            let dims = (6, k, 5);
            let auto = auto_moduli(dtype, k);
            let counts: Vec<usize> = (auto..=(auto + 3).min(MAX_MODULI)).collect();
            for family in Family::suite(dtype) {
                let (a, b) = family.operands::<f64>(dims, 5);
                let narrow = |x: f64| {
                    if dtype == Dtype::F32 {
                        x as f32 as f64
                    } else {
                        x
                    }
                };
                let (a, b) = (a.mapv(narrow), b.mapv(narrow));
                let (sa, sb) = (a.as_slice().unwrap(), b.as_slice().unwrap());
                let verdicts = guard_counts(sa, sb, dims, dtype, &counts);
                let reference = Reference::new(a.view(), b.view());
                let products: Vec<Vec<f64>> = counts
                    .iter()
                    .map(|&c| super::model::reference(sa, sb, dims, c))
                    .collect();
                for (idx, verdict) in verdicts.iter().enumerate() {
                    let Some(count) = verdict else { continue };
                    let got = products[count - auto][idx];
                    let (i, j) = (idx / dims.2, idx % dims.2);
                    let ratio = element_ratio(dtype, &reference, (i, j), got);
                    assert!(
                        ratio.worst <= GUARD + 1.0 && ratio.pattern_mismatches == 0,
                        "{dtype} {} k={k} ({i}, {j}) at {count} moduli: {ratio:?}",
                        family.name()
                    );
                }
                // The early refusal and the sure test agree with the guard; the refusal
                // catches scales paired along k and one huge entry a row, and on uniform
                // inputs it leads with the first count, which the sure test passes for every
                // element.
                let what = format!("{dtype} {} k={k}", family.name());
                let (lead, sure) = refusal_and_sure_agree(sa, sb, dims, dtype, &counts, &what);
                if matches!(family, Family::PairedK(_) | Family::OneHuge(_)) {
                    assert_eq!(lead, None, "{what}: not refused early");
                }
                if family == Family::Uniform {
                    assert_eq!(lead, Some(0), "{what}");
                    assert!(sure.iter().all(|&s| s), "{what}: {sure:?}");
                }
                let passed = verdicts.iter().filter(|v| v.is_some()).count();
                match family {
                    Family::Uniform => assert!(
                        verdicts.iter().all(|v| *v == Some(auto)),
                        "{dtype} uniform k={k}: {verdicts:?}"
                    ),
                    Family::PairedK(_) | Family::OneHuge(_) => {
                        assert_eq!(passed, 0, "{dtype} {} k={k}", family.name())
                    }
                    _ => {}
                }
            }
        }
    }
}

/// The early refusal and the sure test of `a · b` against the guard's verdicts (the model's,
/// `guard_counts` over `counts`): the refusal refuses only where some element passes at no
/// count; else its lead is at most one past the count the product runs at (the latest count
/// its elements need, or the next); and the sure test, at the lead's count, passes only
/// elements that pass at that count or before. Returns the lead and the sure test's
/// elements.
fn refusal_and_sure_agree(
    a: &[f64],
    b: &[f64],
    dims: (usize, usize, usize),
    dtype: Dtype,
    counts: &[usize],
    what: &str,
) -> (Option<usize>, Vec<bool>) {
    use super::guard::{guard_counts, refusal_lead, surely_at};
    let verdicts = guard_counts(a, b, dims, dtype, counts);
    let runs_at: Option<Vec<usize>> = verdicts.iter().copied().collect();
    let runs_at = runs_at.map(|each| each.into_iter().max().unwrap_or(counts[0]));
    let lead = refusal_lead(a, b, dims, dtype, counts);
    let Some(l) = lead else {
        assert_eq!(
            runs_at, None,
            "{what}: refused early, but every element passes"
        );
        return (lead, vec![false; verdicts.len()]);
    };
    if let Some(count) = runs_at {
        assert!(
            counts[l] <= count + 1,
            "{what}: the lead is {}, the product runs at {count}",
            counts[l]
        );
    }
    let sure = surely_at(a, b, dims, dtype, counts[l]);
    for (idx, (&s, v)) in sure.iter().zip(&verdicts).enumerate() {
        assert!(
            !s || v.is_some_and(|c| c <= counts[l]),
            "{what} element {idx}: sure at {}, but the guard says {v:?}",
            counts[l]
        );
    }
    (lead, sure)
}

/// The early refusal's lead finds the count ordinary inputs need: on uniform, positive,
/// normal, ReLU and log-normal operands (64 × k · k × 64), wherever half the elements or more
/// need a count after the first, the lead is the count the product runs at, so the guard's
/// passes split for it; on uniform operands, which pass at the first count with room to
/// spare, the lead is the first; and on f32 normal ones at k = 4096, it is the next, where
/// the eight elements' spread says so.
#[test]
fn the_lead_finds_the_count_of_ordinary_inputs() {
    use super::guard::guard_counts;
    use crate::accuracy::Family;
    let mut later = 0;
    for dtype in [Dtype::F64, Dtype::F32] {
        for k in [2048, 4096] {
            let dims = (64, k, 64);
            let auto = auto_moduli(dtype, k);
            let counts: Vec<usize> = (auto..=(auto + 3).min(MAX_MODULI)).collect();
            for (_, family) in Family::ORDINARY {
                let (a, b) = match dtype {
                    Dtype::F32 => {
                        let (a, b) = family.operands::<f32>(dims, k as u64 + 7);
                        (a.mapv(f64::from), b.mapv(f64::from))
                    }
                    Dtype::F64 => family.operands::<f64>(dims, k as u64 + 7),
                };
                let (sa, sb) = (a.as_slice().unwrap(), b.as_slice().unwrap());
                let what = format!("{dtype} {} k={k}", family.name());
                let (lead, _) = refusal_and_sure_agree(sa, sb, dims, dtype, &counts, &what);
                let verdicts = guard_counts(sa, sb, dims, dtype, &counts);
                let each: Vec<usize> = verdicts
                    .iter()
                    .map(|v| v.unwrap_or_else(|| panic!("{what}: refused")))
                    .collect();
                let runs_at = each.iter().copied().max().unwrap_or(auto);
                let needing_more = each.iter().filter(|&&c| c > auto).count();
                if 2 * needing_more >= each.len() {
                    later += 1;
                    assert_eq!(lead.map(|l| counts[l]), Some(runs_at), "{what}");
                }
                if family == Family::Uniform {
                    assert_eq!(lead, Some(0), "{what}");
                }
                // f32 normal inputs at k = 4096: the eight elements pass at the first count, but
                // their spread says a large product's elements need the next (a 4096³
                // product's do); at 2048 they pass with room to spare.
                if dtype == Dtype::F32 && family == Family::Normal {
                    assert_eq!(lead, Some(usize::from(k == 4096)), "{what}");
                }
            }
        }
    }
    // Ordinary inputs at these k need a later count (f64 ReLU from k = 2048, normal at 4096).
    assert!(later >= 2, "{later} cases needed a later count");
}

/// Operands built to break the guard, at random: each element `x · 2^e` with `e` spread as
/// the case draws (a share of them zero), and on top of that any of scales paired along a
/// random part of k, one huge entry in random rows and columns (inside or past the guard's
/// sample of k), rows and columns scaled far apart, a second half of k that cancels the
/// first, elements at ties, and whole operands moved toward underflow or overflow. `b` is row-major `k × n`.
fn hostile_operands(
    r: &mut Rng,
    dtype: Dtype,
    (m, k, n): (usize, usize, usize),
) -> (Vec<f64>, Vec<f64>) {
    let pick = |r: &mut Rng, n: u64| (r.next() % n) as i32;
    let pow2 = |e: i32| {
        2f64.powi(e.clamp(-1022, 1023)) * if e < -1022 { 2f64.powi(e + 1022) } else { 1.0 }
    };
    let wide = match dtype {
        Dtype::F64 => 60,
        Dtype::F32 => 20,
    };
    let spread = [0, 4, 16, wide][pick(r, 4) as usize];
    let zeros = [0.0, 0.0, 0.5, 0.9][pick(r, 4) as usize];
    let draw = |r: &mut Rng| {
        if zeros > 0.0 && (r.unit() + 1.0) / 2.0 < zeros {
            0.0
        } else {
            r.unit() * pow2(pick(r, 2 * spread as u64 + 1) - spread)
        }
    };
    let mut a: Vec<f64> = (0..m * k).map(|_| draw(r)).collect();
    let mut b: Vec<f64> = (0..k * n).map(|_| draw(r)).collect();
    if r.one_in(2) {
        // Scales paired along a part of k: every such term stays O(1).
        let t = [8, 20, wide][pick(r, 3) as usize];
        let part = [1, 4, 64][pick(r, 3) as usize];
        for q in 0..k {
            if r.one_in(part) {
                let e = pick(r, 2 * t as u64 + 1) - t;
                (0..m).for_each(|i| a[i * k + q] *= pow2(e));
                (0..n).for_each(|j| b[q * n + j] *= pow2(-e));
            }
        }
    }
    if r.one_in(3) {
        // One huge entry in some rows of A and columns of B, anywhere along k.
        let big = [10, 30, wide][pick(r, 3) as usize];
        for i in 0..m {
            if r.one_in(2) {
                a[i * k + pick(r, k as u64) as usize] = pow2(big) * r.unit();
            }
        }
        for j in 0..n {
            if r.one_in(2) {
                b[pick(r, k as u64) as usize * n + j] = pow2(big) * r.unit();
            }
        }
    }
    if r.one_in(3) {
        // Rows of A and columns of B far apart.
        let s = [10, wide][pick(r, 2) as usize];
        for i in 0..m {
            let e = pow2(pick(r, 2 * s as u64 + 1) - s);
            (0..k).for_each(|q| a[i * k + q] *= e);
        }
        for j in 0..n {
            let e = pow2(pick(r, 2 * s as u64 + 1) - s);
            (0..k).for_each(|q| b[q * n + j] *= e);
        }
    }
    if k >= 2 && r.one_in(4) {
        // The second half of k nearly undoes the first: |c| is 2^-bits of Σ|a||b|.
        let (h, eps) = (k / 2, pow2(-[8, 20, 40][pick(r, 3) as usize]));
        for q in 0..h {
            (0..m).for_each(|i| a[i * k + h + q] = a[i * k + q]);
            (0..n).for_each(|j| b[(h + q) * n + j] = -b[q * n + j] * (1.0 + eps));
        }
    }
    if r.one_in(4) {
        // Elements at ties, `(⌊|x|·2^p⌋ + ½)·2^-p` with x's sign: where the scaling's shift
        // is p, each rounds to an integer with the largest error, ½.
        let p = pick(r, 40) - 8;
        for x in a.iter_mut().chain(b.iter_mut()).filter(|x| **x != 0.0) {
            *x = ((*x * pow2(p)).abs().floor() + 0.5) * pow2(-p) * x.signum();
        }
    }
    // Σ|a||b| stays below the type's largest by 2^4 (so that neither the result nor the
    // reference overflows); one case in four moves both operands to that top or to where
    // the results are subnormal. A single f32 element may overflow to Inf on the way: an
    // input the guard must handle too.
    let (top, bottom) = match dtype {
        Dtype::F64 => (1019, -1060),
        Dtype::F32 => (123, -140),
    };
    let abs = (0..m * n)
        .map(|x| {
            (0..k)
                .map(|q| (a[x / n * k + q] * b[q * n + x % n]).abs())
                .sum::<f64>()
        })
        .fold(0f64, f64::max);
    if abs > 0.0 {
        let at = abs.log2().ceil() as i32;
        let e = match r.next() % 8 {
            0 => top - at,
            1 => bottom - at,
            _ => (top - at).min(0),
        };
        a.iter_mut().for_each(|x| *x *= pow2(e / 2));
        b.iter_mut().for_each(|x| *x *= pow2(e - e / 2));
    }
    if dtype == Dtype::F32 {
        a.iter_mut().for_each(|x| *x = *x as f32 as f64);
        b.iter_mut().for_each(|x| *x = *x as f32 as f64);
    }
    (a, b)
}

/// The guard's model on hostile operands drawn at random (`hostile_operands`), f64 and f32,
/// odd and whole-tile k: every element it passes, at whichever count, errs by at most
/// `GUARD + 1` times native's componentwise bound and keeps the reference's Inf and NaN
/// pattern; the early refusal refuses only where the guard refuses somewhere, and the sure
/// test passes only what passes at the first count. The cases must also pass elements (the
/// check is not vacuous) and refuse some.
#[test]
fn the_guard_holds_on_random_hostile_operands() {
    use super::guard::{guard_counts, GUARD};
    use crate::accuracy::Reference;
    let mut r = Rng(0x9a4d_5eed_0f0f_1234);
    let ks = [1, 2, 3, 31, 127, 128, 129, 200, 383, 640, 2049, 4097];
    let (mut checked, mut passed, mut refused) = (0usize, 0usize, 0usize);
    for case in 0..2000 {
        let dtype = if case % 2 == 0 {
            Dtype::F64
        } else {
            Dtype::F32
        };
        let k = ks[(r.next() % ks.len() as u64) as usize];
        let dims = (1 + (r.next() % 6) as usize, k, 1 + (r.next() % 6) as usize);
        let (a, b) = hostile_operands(&mut r, dtype, dims);
        let auto = auto_moduli(dtype, k);
        let counts: Vec<usize> = (auto..=(auto + 3).min(MAX_MODULI)).collect();
        let verdicts = guard_counts(&a, &b, dims, dtype, &counts);
        let (av, bv) = (
            ndarray::ArrayView2::from_shape((dims.0, k), &a).unwrap(),
            ndarray::ArrayView2::from_shape((k, dims.2), &b).unwrap(),
        );
        let reference = Reference::new(av, bv);
        let products: Vec<Vec<f64>> = counts
            .iter()
            .map(|&c| super::model::reference(&a, &b, dims, c))
            .collect();
        for (idx, verdict) in verdicts.iter().enumerate() {
            checked += 1;
            let Some(count) = verdict else {
                refused += 1;
                continue;
            };
            passed += 1;
            let got = products[count - auto][idx];
            let (i, j) = (idx / dims.2, idx % dims.2);
            let ratio = element_ratio(dtype, &reference, (i, j), got);
            assert!(
                ratio.worst <= GUARD + 1.0 && ratio.pattern_mismatches == 0,
                "case {case}: {dtype} {dims:?} ({i}, {j}) at {count} moduli: {ratio:?}"
            );
        }
        let what = format!("case {case}: {dtype} {dims:?}");
        refusal_and_sure_agree(&a, &b, dims, dtype, &counts, &what);
    }
    assert!(
        passed * 4 >= checked && refused * 20 >= checked,
        "{passed} of {checked} elements passed and {refused} were refused: the cases lost their edge"
    );
}

/// The workspace's sections: disjoint and 256-byte aligned, within its size, op(B)'s at
/// offsets that do not depend on m (the row panels that share op(B) find them), and when
/// guarded, op(A)'s magnitudes in a section of their own (the guard's passes write op(A)'s
/// residues meanwhile), of `Mp · Kgp` bytes.
#[test]
fn workspace_sections_are_disjoint_and_op_b_sits_still() {
    let sizes = |at: &[usize; SECTIONS], total: usize| {
        let mut order: Vec<(usize, usize)> = (0..SECTIONS).map(|s| (at[s], s)).collect();
        order.sort();
        order
            .iter()
            .enumerate()
            .map(|(i, &(o, s))| {
                let end = order.get(i + 1).map_or(total, |&(next, _)| next);
                (s, o, end - o)
            })
            .collect::<Vec<_>>()
    };
    for gemm in [Gemm::Wg { pair_m: true }, Gemm::Mma] {
        for (m, k, n) in [(4096, 4096, 4096), (200, 301, 330), (1000, 3000, 500)] {
            for guarded in [false, true] {
                let (count, shifts, kgp) = (8, if guarded { 4 } else { 1 }, 1024);
                let (total, at) = workspace(count, shifts, guarded, kgp, (m, k, n), gemm);
                let (_, (mp, np)) = gemm.panels(m, n);
                let kp = k.next_multiple_of(128);
                for (s, offset, room) in sizes(&at, total) {
                    assert_eq!(offset % ALIGN, 0, "section {s}");
                    let need = match s {
                        PA => count * mp * kp,
                        PB => count * np * kp,
                        MA => mp * kgp * guarded as usize,
                        MB => np * kgp * guarded as usize,
                        R => count.max(4 * guarded as usize) * m * n,
                        _ => 0,
                    };
                    assert!(
                        room >= need,
                        "{gemm:?} {m}×{k}×{n} guarded {guarded}: section {s}"
                    );
                }
                // op(B)'s sections (EB to PB) at the same offsets for any m.
                let (_, other) = workspace(count, shifts, guarded, kgp, (m + 384, k, n), gemm);
                assert_eq!(at[..=PB], other[..=PB]);
            }
        }
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

/// The host reads a gate as kernels/ozaki.cu's `gate_holds` does: nothing refused, every
/// element surely within, the lead within its leads; and a GEMM without a gate never counts
/// as run before the verdict.
#[test]
fn a_gate_holds_as_the_kernel_reads_it() {
    let gate = Gate {
        flags: 0x1000,
        lo: 0,
        hi: 1,
    };
    let flags = |refused, unsure, lead| {
        let mut f = [0i32; FLAG_INTS];
        f[..3].copy_from_slice(&[refused, unsure, lead]);
        f
    };
    assert!(gate.held(&flags(0, 0, 0)));
    assert!(gate.held(&flags(0, 0, 1)));
    assert!(!gate.held(&flags(0, 0, 2)));
    assert!(!gate.held(&flags(1, 0, 0)));
    assert!(!gate.held(&flags(0, 1, 0)));
    assert!(!gate.held(&flags(0, 0, -1)));
    let one = Gate {
        lo: 1,
        hi: 1,
        ..gate
    };
    assert!(!one.held(&flags(0, 0, 0)) && one.held(&flags(0, 0, 1)));
    assert!(!Gate::NONE.held(&flags(0, 0, 0)));
}

//! The Karatsuba form of a complex product, modelled in residues on the stacked form's
//! scaling: per modulus, three INT8 products, `T₁ = Aᵣ'·Bᵣ'`, `T₂ = Aᵢ'·Bᵢ'` and
//! `T₃ = (Aᵣ' + Aᵢ')·(Bᵣ' + Bᵢ')` (the sums reduced mod p, so every operand stays an INT8
//! residue), combined as `re ≡ T₁ − T₂` and `im ≡ T₃ − T₁ − T₂ (mod p)`, give by the Chinese
//! remainder theorem the exact integers of the stacked product (one real product of `2k` terms
//! whose moduli bound is the stacked form's). So the scheme's CPU model of the stacked form is
//! the model of the Karatsuba form, bit for bit, at three INT8 products per modulus where the
//! stacked form runs four.

use super::*;

/// Complex operands as the stacked form reads them: `a` (`m × k`) as `m × 2k` reals, each
/// row's parts interleaved, and `b` (`k × n`) expanded to `2k × 2n` (each element the block
/// `[[bᵣ, bᵢ], [−bᵢ, bᵣ]]`), both row-major.
fn stacked(a: &[(f64, f64)], b: &[(f64, f64)], (m, k, n): (usize, usize, usize)) -> Stacked {
    let x = (0..m * 2 * k)
        .map(|e| {
            let z = a[(e / (2 * k)) * k + (e % (2 * k)) / 2];
            if e % 2 == 0 {
                z.0
            } else {
                z.1
            }
        })
        .collect();
    let y = (0..2 * k * 2 * n)
        .map(|e| {
            let (q, j) = (e / (2 * n), e % (2 * n));
            let z = b[(q / 2) * n + j / 2];
            match (q % 2, j % 2) {
                (0, 1) => z.1,
                (1, 0) => -z.1,
                _ => z.0,
            }
        })
        .collect();
    Stacked { x, y, m, k, n }
}

struct Stacked {
    x: Vec<f64>,
    y: Vec<f64>,
    m: usize,
    k: usize,
    n: usize,
}

/// `x` mod `p` in `[-p/2, p/2)`: an INT8 value for every modulus (at most 256).
fn residue(x: i128, p: u32) -> i32 {
    let p = p as i128;
    let r = x.rem_euclid(p);
    (if r >= (p + 1) / 2 { r - p } else { r }) as i32
}

/// The integer in `[-M/2, M/2)` with the given residues modulo the first moduli (Garner's
/// form, in `i128`: the tests keep `M` below 2^121).
fn crt(residues: &[i32]) -> i128 {
    let (mut x, mut modulus) = (0i128, 1i128);
    for (&r, &p) in residues.iter().zip(&MODULI) {
        let p128 = p as i128;
        let inv = inverse_mod((modulus % p128) as u32, p) as i128;
        let t = ((r as i128 - x).rem_euclid(p128) * inv).rem_euclid(p128);
        x += t * modulus;
        modulus *= p128;
    }
    if x >= modulus / 2 {
        x - modulus
    } else {
        x
    }
}

/// The model's shifts of the stacked operands' rows (of `x`) and columns (of `y`), for
/// `count` moduli and `2k` terms.
fn shifts(s: &Stacked, count: usize) -> (Vec<i32>, Vec<i32>) {
    let (kk, nn) = (2 * s.k, 2 * s.n);
    let (bits, _) = scaling_bits(count, kk);
    let bound = norm_bound(count, kk);
    let sa = (0..s.m)
        .map(|i| RowSize::of((0..kk).map(|q| s.x[i * kk + q])).shift(bits, bound))
        .collect();
    let sb = (0..nn)
        .map(|j| RowSize::of((0..kk).map(|q| s.y[q * nn + j])).shift(bits, bound))
        .collect();
    (sa, sb)
}

#[test]
fn three_int8_products_a_modulus_give_the_stacked_products_integers() {
    let mut rng = Rng(0x6B61_7261_7473_7562);
    let mut cases = 0;
    for (count, (m, k, n)) in [
        (6, (3, 1, 2)),
        (8, (5, 7, 4)),
        (11, (4, 64, 3)),
        (14, (3, 300, 5)),
        (15, (2, 33, 2)),
    ] {
        // Real and imaginary parts at scales far apart, a purely imaginary row, a zero
        // column, parts that cancel between Aᵣ·Bᵣ and Aᵢ·Bᵢ.
        let a: Vec<(f64, f64)> = (0..m * k)
            .map(|e| match e / k {
                0 => (0.0, rng.unit()),
                1 => (rng.unit(), rng.unit() * 2f64.powi(-30)),
                _ => (rng.unit() * 1e6, rng.unit() * 1e-3),
            })
            .collect();
        let b: Vec<(f64, f64)> = (0..k * n)
            .map(|e| match e % n {
                0 => (0.0, 0.0),
                1 => {
                    let z = a[e / n % (m * k)];
                    (z.1, z.0)
                }
                _ => (rng.unit() * 2f64.powi(40), rng.unit()),
            })
            .collect();
        let s = stacked(&a, &b, (m, k, n));
        let (sa, sb) = shifts(&s, count);
        // The parts of a complex column share their scaling, as the Karatsuba form needs.
        for j in 0..n {
            assert_eq!(sb[2 * j], sb[2 * j + 1], "column {j}");
        }
        assert!(sa.iter().chain(&sb).all(|&t| t != FLAG));
        let int = |v: f64, t: i32| ldexp(v, t).round_ties_even() as i128;
        let (kk, nn) = (2 * k, 2 * n);
        let xi: Vec<i128> = (0..m * kk).map(|e| int(s.x[e], sa[e / kk])).collect();
        let yi: Vec<i128> = (0..kk * nn).map(|e| int(s.y[e], sb[e % nn])).collect();
        // The parts as the Karatsuba form holds them: Aᵣ', Aᵢ' (m × k) and Bᵣ', Bᵢ' (k × n).
        let ar = |i: usize, p: usize| xi[i * kk + 2 * p];
        let ai = |i: usize, p: usize| xi[i * kk + 2 * p + 1];
        let br = |p: usize, j: usize| yi[2 * p * nn + 2 * j];
        let bi = |p: usize, j: usize| yi[2 * p * nn + 2 * j + 1];
        // … which are the expanded rows' too, since rounding is odd: −rint(x) = rint(−x).
        for (p, j) in (0..k).flat_map(|p| (0..n).map(move |j| (p, j))) {
            assert_eq!(yi[(2 * p + 1) * nn + 2 * j], -bi(p, j));
            assert_eq!(yi[(2 * p + 1) * nn + 2 * j + 1], br(p, j));
        }
        let bound = big_f64(&product(count)) / 4.0;
        let model = model::reference(&s.x, &s.y, (m, kk, nn), count);
        for (i, j) in (0..m).flat_map(|i| (0..n).map(move |j| (i, j))) {
            // The stacked product's exact integers.
            let exact = |col: usize| (0..kk).map(|q| xi[i * kk + q] * yi[q * nn + col]).sum();
            let (re, im): (i128, i128) = (exact(2 * j), exact(2 * j + 1));
            assert!((re.abs() as f64) < bound && (im.abs() as f64) < bound);
            // Three INT8 products a modulus, each sum of k products of residues an int32.
            let (mut res_re, mut res_im) = (Vec::new(), Vec::new());
            for &p in &MODULI[..count] {
                let r = |x: i128| residue(x, p);
                let (mut t1, mut t2, mut t3) = (0i32, 0i32, 0i32);
                for q in 0..k {
                    let (xr, xi_, yr, yi_) = (r(ar(i, q)), r(ai(i, q)), r(br(q, j)), r(bi(q, j)));
                    let (xs, ys) = (
                        residue((xr + xi_) as i128, p),
                        residue((yr + yi_) as i128, p),
                    );
                    for v in [xr, xi_, yr, yi_, xs, ys] {
                        assert!((-128..=127).contains(&v));
                    }
                    t1 += xr * yr;
                    t2 += xi_ * yi_;
                    t3 += xs * ys;
                }
                let (t1, t2, t3) = (t1 as i128, t2 as i128, t3 as i128);
                res_re.push(residue(t1 - t2, p));
                res_im.push(residue(t3 - t1 - t2, p));
            }
            assert_eq!(crt(&res_re), re, "re ({i}, {j}), {count} moduli");
            assert_eq!(crt(&res_im), im, "im ({i}, {j}), {count} moduli");
            // One rounding of those integers is the model's stacked product, bit for bit.
            for (col, v) in [(2 * j, re), (2 * j + 1, im)] {
                let hi = v >> 64;
                let lo = (v & ((1i128 << 64) - 1)) as u128;
                let c = ldexp(model::wide_to_f64(hi, lo), -(sa[i] + sb[col]));
                assert_eq!(c.to_bits(), model[i * nn + col].to_bits(), "({i}, {col})");
            }
            cases += 1;
        }
    }
    assert_eq!(cases, 3 * 2 + 5 * 4 + 4 * 3 + 3 * 5 + 2 * 2);
}

#[test]
fn complex_products_take_the_karatsuba_form_from_its_size_up() {
    // The default switches (no unit test turns them off); `m × k × n` complex elements read as
    // `m × 2k × 2n` reals.
    let form = |m: usize, k: usize, n: usize| crate::engine::ozaki::complex_form((m, 2 * k, 2 * n));
    // Below it, the real form of the stacked parts, each column's parts scaled on their own.
    assert_eq!(form(2048, 2048, 2048), (false, false));
    assert_eq!(form(3072, 3072, 3072), (false, false));
    // From it up, the paired shifts and three INT8 products a modulus.
    assert_eq!(form(3584, 3584, 3584), (true, true));
    assert_eq!(form(4096, 4096, 4096), (true, true));
    assert_eq!(form(16384, 16384, 16384), (true, true));
    // By volume, not by side.
    assert_eq!(form(16384, 1024, 1024), (false, false));
    assert_eq!(form(1024, 8192, 8192), (true, true));
}

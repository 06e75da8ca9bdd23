//! The CPU model: what the kernels compute, exactly, for the tests' oracle.

use super::scaling::{ldexp, RowSize};
use super::scheme::{norm_bound, scaling_bits, FLAG};

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
pub(super) fn wide_to_f64(hi: i128, lo: u128) -> f64 {
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

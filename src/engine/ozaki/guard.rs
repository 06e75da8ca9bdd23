//! The guard: whether an element of an Ozaki product is within native's componentwise bound
//! on these very inputs, told from bounds the device can compute before the product runs.
//!
//! With `x = a_i · 2^s` and `y = b_j · 2^t` (row i of X and row j of Y, scaled by the product's
//! shifts) rounded to integers `x'` and `y'` (errors `|ξ|, |η| ≤ ½`, and zero where the element
//! is zero), the exact integer product gives
//!
//! ```text
//! |2^-(s+t) Σ x'y' − Σ a b| ≤ ½·2^-t·‖a_i‖₁ + ½·2^-s·‖b_j‖₁ + ¼·k·2^-(s+t)  =: E_ij
//! ```
//!
//! and one final rounding adds `u·|ĉ|`. Native's bound is `u·Σ|a_ik||b_kj|`; its lower bound
//! `L_ij` comes from one INT8 product of the magnitudes truncated to 7 bits below each row's
//! largest (`⌊|a_ik|·2^σ_i⌋ ≤ 127`), over the first [`guard_sample`] inner indices, which
//! never exceeds the true one. An element passes when
//! `E_ij ≤ GUARD · u · L_ij`; then `|ĉ − c| ≤ (GUARD + 1 + 2⁻²⁰) · u · Σ|a||b|` for f64 results
//! (for f32 ones, whose integer product is rounded to f64 before f32, `GUARD + 1 + 2⁻²⁸`
//! more). Rows holding Inf or NaN are computed natively by the kernels and pass; a zero row
//! makes its products exact (zero) and passes.
//!
//! This is the CPU model the kernels' guard is checked against: the same shifts (the
//! product's [`RowSize`] rule), the same truncated magnitudes and the same comparison, done in
//! the scaled form `E_ij · 2^(σ_i + τ_j) ≤ GUARD · u · S_ij` (S the exact integer product of
//! the magnitudes) so that nothing underflows.

use super::scaling::{ilogb, ldexp, RowSize};
use super::scheme::{norm_bound, scaling_bits, FLAG};
use crate::element::Dtype;

/// An element passes when its error bound is at most `GUARD` times native's `u·Σ|a||b|`
/// (as bounded below by the magnitudes' product): its result then errs by at most
/// `GUARD + 1` times native's bound, less than twice the largest ratio native products
/// reach on the suite's inputs (up to 35) and within the suite's target of 8.
pub const GUARD: f64 = 6.0;

/// The inner indices the magnitudes' product sums over: the first `guard_sample(dtype, k)`.
/// Any of them gives a lower bound of `Σ|a||b|`, and fewer cost less: `f32` products sum a
/// quarter of k (whole K tiles of 128), which on the accuracy suite's uniform, cancelling and
/// far-apart inputs kept the count the whole sum chose; `f64` products sum three quarters,
/// which on uniform inputs keeps the count of the whole sum at every k from 2048 to 16384
/// (half of k needed one more modulus at k = 4096 and 8192).
pub(crate) fn guard_sample(dtype: Dtype, k: usize) -> usize {
    match dtype {
        Dtype::F64 => (3 * k).div_ceil(4).next_multiple_of(128).min(k),
        Dtype::F32 => k.div_ceil(4).next_multiple_of(128).min(k),
    }
}

/// Bits of the truncated magnitudes: the largest of a row becomes 64 to 127, an `i8`.
pub(crate) const MAG_BITS: i32 = 7;

/// What the guard keeps of one row of X (or of Y): its magnitude shift `σ` (its largest
/// magnitude times `2^σ` in `[2^6, 2^7)`) and its 1-norm times `2^σ`, rounded upwards.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GuardRow {
    pub(crate) sigma: i32,
    pub(crate) l1: f64,
}

impl GuardRow {
    /// The row's guard data; `None` for a zero row or one holding Inf or NaN.
    pub(crate) fn of(row: impl Iterator<Item = f64> + Clone) -> Option<GuardRow> {
        let mx = row.clone().fold(0f64, |m, x| m.max(x.abs()));
        if mx == 0.0 || !mx.is_finite() || row.clone().any(|x| x.is_nan()) {
            return None;
        }
        let sigma = MAG_BITS - 1 - ilogb(mx);
        // Each scaled magnitude is exact (a power of two apart); their sum of at most 2^16
        // terms errs by at most k·2⁻⁵³ of itself: 2⁻³⁰ more covers it.
        let sum: f64 = row.map(|x| ldexp(x.abs(), sigma)).sum();
        Some(GuardRow {
            sigma,
            l1: sum * (1.0 + 2f64.powi(-30)),
        })
    }

    /// An element's truncated magnitude, `⌊|x|·2^σ⌋` (0 to 127).
    pub(crate) fn magnitude(&self, x: f64) -> i64 {
        ldexp(x.abs(), self.sigma).floor() as i64
    }
}

/// The unit roundoff of results of `dtype`.
pub(crate) fn unit_roundoff(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::F64 => 2f64.powi(-53),
        Dtype::F32 => 2f64.powi(-24),
    }
}

/// Whether element (i, j) passes: `s`, `t` the product's shifts of row i of X and row j of
/// Y, `ga`, `gb` their guard data, `mags` the exact integer product of their magnitudes, `k`
/// the inner dimension.
pub(crate) fn passes(
    (s, ga): (i32, Option<GuardRow>),
    (t, gb): (i32, Option<GuardRow>),
    mags: i64,
    k: usize,
    dtype: Dtype,
) -> bool {
    if s == FLAG || t == FLAG {
        return true;
    }
    let (Some(ga), Some(gb)) = (ga, gb) else {
        // A zero row: every product is an exact zero.
        return true;
    };
    let (da, db) = (ga.sigma - s, gb.sigma - t);
    // A row's shift lies within [sigma - 6, sigma + max(54, bits - 7)] (`RowSize::shift`), so
    // the kernels scale by normal powers of two, exactly.
    debug_assert!(
        (-200..=6).contains(&da) && (-200..=6).contains(&db),
        "{da} {db}"
    );
    let bound =
        0.5 * ldexp(ga.l1, db) + 0.5 * ldexp(gb.l1, da) + 0.25 * k as f64 * ldexp(1.0, da + db);
    // Three rounded terms and a sum: 2⁻⁵⁰ more bounds their rounding.
    bound * (1.0 + 2f64.powi(-50)) <= GUARD * unit_roundoff(dtype) * mags as f64
}

/// For each element of `a · b` (`a` m × k, `b` k × n, row-major), the first of `counts` (in
/// increasing order) whose Ozaki product passes the guard, or `None` when none does: the
/// model of the kernels' guard.
pub fn guard_counts(
    a: &[f64],
    b: &[f64],
    (m, k, n): (usize, usize, usize),
    dtype: Dtype,
    counts: &[usize],
) -> Vec<Option<usize>> {
    let rows_a: Vec<Vec<f64>> = (0..m).map(|i| a[i * k..(i + 1) * k].to_vec()).collect();
    let rows_b: Vec<Vec<f64>> = (0..n)
        .map(|j| (0..k).map(|p| b[p * n + j]).collect())
        .collect();
    let ga: Vec<Option<GuardRow>> = rows_a
        .iter()
        .map(|r| GuardRow::of(r.iter().copied()))
        .collect();
    let gb: Vec<Option<GuardRow>> = rows_b
        .iter()
        .map(|r| GuardRow::of(r.iter().copied()))
        .collect();
    let mags = |g: &Option<GuardRow>, r: &[f64]| -> Vec<i64> {
        match g {
            Some(g) => r.iter().map(|&x| g.magnitude(x)).collect(),
            None => vec![0; r.len()],
        }
    };
    let ma: Vec<Vec<i64>> = rows_a.iter().zip(&ga).map(|(r, g)| mags(g, r)).collect();
    let mb: Vec<Vec<i64>> = rows_b.iter().zip(&gb).map(|(r, g)| mags(g, r)).collect();
    let shifts: Vec<(Vec<i32>, Vec<i32>)> = counts
        .iter()
        .map(|&count| {
            let (bits_a, bits_b) = scaling_bits(count, k);
            let bound = norm_bound(count, k);
            let sa = rows_a
                .iter()
                .map(|r| RowSize::of(r.iter().copied()).shift(bits_a, bound));
            let sb = rows_b
                .iter()
                .map(|r| RowSize::of(r.iter().copied()).shift(bits_b, bound));
            (sa.collect(), sb.collect())
        })
        .collect();
    let kg = guard_sample(dtype, k);
    let mut out = Vec::with_capacity(m * n);
    for i in 0..m {
        for j in 0..n {
            let s: i64 = ma[i][..kg]
                .iter()
                .zip(&mb[j][..kg])
                .map(|(x, y)| x * y)
                .sum();
            let first = counts
                .iter()
                .zip(&shifts)
                .find(|(_, (sa, sb))| passes((sa[i], ga[i]), (sb[j], gb[j]), s, k, dtype));
            out.push(first.map(|(&c, _)| c));
        }
    }
    out
}

/// For each element of `a · b`, whether the guard's sure test (kernels/ozaki.cu, `keys`)
/// passes it at the candidate count `count` (the early refusal's lead): with each row's key
/// `p = 2^(σ − s)` (`s` its shift at that count)
/// and `w = (‖·‖₁·2^σ / 2 + k·p / 8)·(1 + 2⁻¹⁸) / (GUARD·u)` rounded up to an `f32`, an
/// element passes when its magnitudes' sum, as an `f32`, is at least
/// `fma(w_i, p_j, p_i·w_j)` in `f32`. Rows without guard data have `w = p = 0`. The model of
/// the test the kernels run before the guard's GEMM: where it passes every element, that GEMM
/// and its judge do not run.
#[cfg(test)]
pub(crate) fn surely_at(
    a: &[f64],
    b: &[f64],
    (m, k, n): (usize, usize, usize),
    dtype: Dtype,
    count: usize,
) -> Vec<bool> {
    let rows_a: Vec<Vec<f64>> = (0..m).map(|i| a[i * k..(i + 1) * k].to_vec()).collect();
    let rows_b: Vec<Vec<f64>> = (0..n)
        .map(|j| (0..k).map(|p| b[p * n + j]).collect())
        .collect();
    let (bits_a, bits_b) = scaling_bits(count, k);
    let nb = norm_bound(count, k);
    let scale = (1.0 + 2f64.powi(-18)) / (GUARD * unit_roundoff(dtype));
    let key = |r: &[f64], bits: i32| -> (f32, f32, Vec<i64>) {
        let kg = guard_sample(dtype, k);
        match GuardRow::of(r.iter().copied()) {
            Some(g) => {
                let p = ldexp(
                    1.0,
                    g.sigma - RowSize::of(r.iter().copied()).shift(bits, nb),
                );
                let w = (0.5 * g.l1 + 0.125 * k as f64 * p) * scale;
                let mut wf = w as f32;
                if (wf as f64) < w {
                    wf = f32::from_bits(wf.to_bits() + 1);
                }
                let mags = r[..kg].iter().map(|&x| g.magnitude(x)).collect();
                (wf, p as f32, mags)
            }
            None => (0.0, 0.0, vec![0; kg]),
        }
    };
    let ka: Vec<_> = rows_a.iter().map(|r| key(r, bits_a)).collect();
    let kb: Vec<_> = rows_b.iter().map(|r| key(r, bits_b)).collect();
    let mut out = Vec::with_capacity(m * n);
    for (wa, pa, ma) in &ka {
        for (wb, pb, mb) in &kb {
            let s: i64 = ma.iter().zip(mb).map(|(x, y)| x * y).sum();
            out.push(s as f32 >= wa.mul_add(*pb, pa * wb));
        }
    }
    out
}

/// How many elements the early refusal tests (kernels/ozaki.cu, `refuse`: a block each).
pub(crate) const REFUSAL_ELEMENTS: usize = 8;

/// An element's guard ratio at one count: its error bound `E` over `GUARD · u` times its
/// magnitudes' product (scaled as [`passes`] compares them; 2⁻⁵⁰ more for the rounding of the
/// bound). The element passes at that count where it is at most 1. `None` for an element
/// that passes whatever its sums (a row with Inf or NaN, or a zero row).
fn ratio(
    (s, ga): (i32, Option<GuardRow>),
    (t, gb): (i32, Option<GuardRow>),
    mags: i64,
    k: usize,
    dtype: Dtype,
) -> Option<f64> {
    if s == FLAG || t == FLAG {
        return None;
    }
    let (ga, gb) = (ga?, gb?);
    let (da, db) = (ga.sigma - s, gb.sigma - t);
    let bound =
        0.5 * ldexp(ga.l1, db) + 0.5 * ldexp(gb.l1, da) + 0.25 * k as f64 * ldexp(1.0, da + db);
    Some(bound * (1.0 + 2f64.powi(-50)) / (GUARD * unit_roundoff(dtype) * mags as f64))
}

/// The early refusal of `a · b` before the guard's GEMM and its lead (kernels/ozaki.cu,
/// `refuse`, `record_sample` and `settle_lead`): for each `e < REFUSAL_ELEMENTS`, the element
/// of the first row of X with guard data at or after `e·m / REFUSAL_ELEMENTS` and of the
/// first such row of Y at or after `e·n / REFUSAL_ELEMENTS`, with its magnitudes' exact sum
/// over the first `guard_sample(dtype, k)` inner indices. `None` (refused) where one of those
/// elements passes at no count of `counts`; else the lead, the index of the count the
/// guard's passes split early for: the latest count the elements first pass at, or the
/// next where their ratios there (rounded to `f32`), with `hi` and `lo` the largest and
/// smallest, have `hi · (hi / lo)² > 1`, their spread extrapolated to a product of millions
/// of elements. The model of the early refusal.
pub fn refusal_lead(
    a: &[f64],
    b: &[f64],
    (m, k, n): (usize, usize, usize),
    dtype: Dtype,
    counts: &[usize],
) -> Option<usize> {
    let rows_a: Vec<Vec<f64>> = (0..m).map(|i| a[i * k..(i + 1) * k].to_vec()).collect();
    let rows_b: Vec<Vec<f64>> = (0..n)
        .map(|j| (0..k).map(|p| b[p * n + j]).collect())
        .collect();
    let kg = guard_sample(dtype, k);
    let guarded = |rows: &[Vec<f64>], from: usize| {
        (from..rows.len()).find(|&i| GuardRow::of(rows[i].iter().copied()).is_some())
    };
    // Each count's largest and smallest ratio over the elements.
    let mut spread: Vec<Option<(f32, f32)>> = vec![None; counts.len()];
    let mut least = 0;
    for e in 0..REFUSAL_ELEMENTS {
        let (Some(i), Some(j)) = (
            guarded(&rows_a, e * m / REFUSAL_ELEMENTS),
            guarded(&rows_b, e * n / REFUSAL_ELEMENTS),
        ) else {
            continue;
        };
        let (ga, gb) = (
            GuardRow::of(rows_a[i].iter().copied()),
            GuardRow::of(rows_b[j].iter().copied()),
        );
        let (ra, rb) = (ga.expect("guard data"), gb.expect("guard data"));
        let sum: i64 = rows_a[i][..kg]
            .iter()
            .zip(&rows_b[j][..kg])
            .map(|(&x, &y)| ra.magnitude(x) * rb.magnitude(y))
            .sum();
        // Whether it passes at each count, and its ratio there.
        let at: Vec<(bool, Option<f64>)> = counts
            .iter()
            .map(|&count| {
                let (bits_a, bits_b) = scaling_bits(count, k);
                let nb = norm_bound(count, k);
                let s = RowSize::of(rows_a[i].iter().copied()).shift(bits_a, nb);
                let t = RowSize::of(rows_b[j].iter().copied()).shift(bits_b, nb);
                (
                    passes((s, ga), (t, gb), sum, k, dtype),
                    ratio((s, ga), (t, gb), sum, k, dtype),
                )
            })
            .collect();
        let first = at.iter().position(|&(pass, _)| pass)?;
        least = least.max(first);
        for (s, &(_, r)) in spread.iter_mut().zip(&at) {
            // Rows computed natively (Inf or NaN) have no ratio.
            let Some(r) = r else { continue };
            let r = r as f32;
            *s = Some(s.map_or((r, r), |(hi, lo)| (hi.max(r), lo.min(r))));
        }
    }
    let next = spread[least].is_some_and(|(hi, lo)| {
        let (top, width) = (hi as f64, hi as f64 / lo as f64);
        top * width * width > 1.0
    });
    Some(if next && least + 1 < counts.len() {
        least + 1
    } else {
        least
    })
}

//! The guard's model against native's bound: on the accuracy suite's families, on ordinary
//! inputs and on hostile operands drawn at random; the early refusal and the sure test against
//! it.

use super::*;

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

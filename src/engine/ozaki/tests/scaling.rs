//! The count of moduli a request runs on, the rows' scaling and its bounds, and the CPU
//! model's products.

use super::*;

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

//! Helpers shared by the integration tests: fresh random inputs and an f64 reference.
#![allow(dead_code)]

use ndarray::{Array2, ArrayBase, Data, Ix2};
use rand::{Rng, SeedableRng};

/// A fresh seed per call (time and a counter), printed so that a failure can be replayed
/// with `GPU_DOT_TEST_SEED`.
pub fn fresh_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base = match std::env::var("GPU_DOT_TEST_SEED") {
        Ok(s) => s.parse().expect("GPU_DOT_TEST_SEED is an integer"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    };
    base.wrapping_add(
        COUNTER
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9),
    )
}

/// A `rows × cols` matrix of uniform values in [-1, 1) from a fresh seed (never all zeros).
pub fn random(rows: usize, cols: usize) -> Array2<f32> {
    let seed = fresh_seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let a = Array2::from_shape_simple_fn((rows, cols), || rng.random_range(-1.0f32..1.0));
    assert!(
        rows * cols == 0 || a.iter().any(|&x| x != 0.0),
        "random input is all zeros (seed {seed})"
    );
    a
}

/// `a · b` in f64, the reference every product is checked against: a Kahan-compensated sum
/// for small products, ndarray's f64 `dot` (threaded) for large ones, where f64's own rounding
/// is already far below f32's.
pub fn reference<S1, S2>(a: &ArrayBase<S1, Ix2>, b: &ArrayBase<S2, Ix2>) -> Array2<f64>
where
    S1: Data<Elem = f32>,
    S2: Data<Elem = f32>,
{
    let (m, k) = a.dim();
    let n = b.ncols();
    let a64 = a.mapv(f64::from);
    if m * k * n > 1 << 26 {
        return a64.dot(&b.mapv(f64::from));
    }
    let b64 = b.t().mapv(f64::from); // n × k, so each dot product walks two rows
    let mut c = Array2::zeros((m, n));
    for i in 0..m {
        let ai = a64.row(i);
        for j in 0..n {
            let bj = b64.row(j);
            let (mut sum, mut comp) = (0.0f64, 0.0f64);
            for p in 0..k {
                let y = ai[p] * bj[p] - comp;
                let t = sum + y;
                comp = (t - sum) - y;
                sum = t;
            }
            c[[i, j]] = sum;
        }
    }
    c
}

/// ‖c − r‖_F / ‖r‖_F (NaN if `c` holds a NaN, so that a comparison with a tolerance fails).
pub fn rel_err<S: Data<Elem = f32>>(c: &ArrayBase<S, Ix2>, r: &Array2<f64>) -> f64 {
    assert_eq!(c.dim(), r.dim(), "result has the wrong shape");
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (&x, &y) in c.iter().zip(r.iter()) {
        diff += (x as f64 - y).powi(2);
        norm += y * y;
    }
    if norm == 0.0 {
        diff.sqrt()
    } else {
        (diff / norm).sqrt()
    }
}

/// Checks `c` against the f64 reference `r` of `a · b`: ‖c − r‖_F must stay within
/// 4·ε·√k·‖|a|·|b|‖_F, the probabilistic rounding bound of an f32 sum of `k` products (it
/// scales with |a|·|b|, not with the result, so cancellation in a single dot product does not
/// make it fail, while a wrong index, a skipped step or an unwritten (NaN) element does).
/// Returns the relative error ‖c − r‖_F / ‖r‖_F.
#[track_caller]
pub fn check<S, S1, S2>(
    c: &ArrayBase<S, Ix2>,
    a: &ArrayBase<S1, Ix2>,
    b: &ArrayBase<S2, Ix2>,
    r: &Array2<f64>,
    what: &str,
) -> f64
where
    S: Data<Elem = f32>,
    S1: Data<Elem = f32>,
    S2: Data<Elem = f32>,
{
    assert_eq!(c.dim(), r.dim(), "{what}: result has the wrong shape");
    let abs = a
        .mapv(|x| f64::from(x).abs())
        .dot(&b.mapv(|x| f64::from(x).abs()));
    let (mut diff, mut scale) = (0.0f64, 0.0f64);
    for ((&x, &y), &s) in c.iter().zip(r.iter()).zip(abs.iter()) {
        diff += (x as f64 - y).powi(2);
        scale += s * s;
    }
    let bound = 4.0 * f32::EPSILON as f64 * (a.ncols().max(1) as f64).sqrt() * scale.sqrt();
    assert!(
        diff.sqrt() <= bound,
        "{what}: ‖C − ref‖ = {:.3e} above the bound {bound:.3e} (relative error {:.3e})",
        diff.sqrt(),
        rel_err(c, r)
    );
    rel_err(c, r)
}

/// Asserts `c` matches the f64 reference of `a · b` (see [`check`]).
#[track_caller]
pub fn assert_close<S, S1, S2>(
    c: &ArrayBase<S, Ix2>,
    a: &ArrayBase<S1, Ix2>,
    b: &ArrayBase<S2, Ix2>,
    what: &str,
) where
    S: Data<Elem = f32>,
    S1: Data<Elem = f32>,
    S2: Data<Elem = f32>,
{
    check(c, a, b, &reference(a, b), what);
}

/// A `rows × cols` f64 matrix of uniform values in [-1, 1) from a fresh seed.
pub fn random64(rows: usize, cols: usize) -> Array2<f64> {
    let seed = fresh_seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    Array2::from_shape_simple_fn((rows, cols), || rng.random_range(-1.0f64..1.0))
}

/// `a · b` for f64 operands to about twice f64 precision (compensated dot products with FMA:
/// Ogita, Rump and Oishi's Dot2), rounded to f64: the reference of the f64 products.
pub fn reference64<S1, S2>(a: &ArrayBase<S1, Ix2>, b: &ArrayBase<S2, Ix2>) -> Array2<f64>
where
    S1: Data<Elem = f64>,
    S2: Data<Elem = f64>,
{
    let (m, k) = a.dim();
    let n = b.ncols();
    let bt = b.t().to_owned();
    Array2::from_shape_fn((m, n), |(i, j)| {
        let (ai, bj) = (a.row(i), bt.row(j));
        let (mut s, mut c) = (0.0f64, 0.0f64);
        for q in 0..k {
            let p = ai[q] * bj[q];
            let pe = ai[q].mul_add(bj[q], -p);
            let t = s + p;
            let z = t - s;
            c += pe + ((s - (t - z)) + (p - z));
            s = t;
        }
        s + c
    })
}

/// [`check`] for f64 products against [`reference64`]: ‖c − r‖_F within 4·ε₆₄·√k·‖|a|·|b|‖_F.
/// Returns the relative error.
#[track_caller]
pub fn check64<S, S1, S2>(
    c: &ArrayBase<S, Ix2>,
    a: &ArrayBase<S1, Ix2>,
    b: &ArrayBase<S2, Ix2>,
    r: &Array2<f64>,
    what: &str,
) -> f64
where
    S: Data<Elem = f64>,
    S1: Data<Elem = f64>,
    S2: Data<Elem = f64>,
{
    assert_eq!(c.dim(), r.dim(), "{what}: result has the wrong shape");
    let abs = a.mapv(f64::abs).dot(&b.mapv(f64::abs));
    let (mut diff, mut scale, mut norm) = (0.0f64, 0.0f64, 0.0f64);
    for ((&x, &y), &s) in c.iter().zip(r.iter()).zip(abs.iter()) {
        diff += (x - y).powi(2);
        scale += s * s;
        norm += y * y;
    }
    let bound = 4.0 * f64::EPSILON * (a.ncols().max(1) as f64).sqrt() * scale.sqrt();
    let rel = if norm == 0.0 {
        diff.sqrt()
    } else {
        (diff / norm).sqrt()
    };
    assert!(
        diff.sqrt() <= bound,
        "{what}: ‖C − ref‖ = {:.3e} above the bound {bound:.3e} (relative error {rel:.3e})",
        diff.sqrt(),
    );
    rel
}

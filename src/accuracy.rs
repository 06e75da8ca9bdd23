//! The componentwise accuracy of a product, as the reference BLAS test programs measure it,
//! and the adversarial operands that break weaker schemes: for the accuracy suite
//! (tests/accuracy.rs), the precision example and BENCHMARKS.md. Hidden from the
//! documentation; not part of the API.
//!
//! An element's error is measured against native's bound: `|ĉ − c| / (u · Σₖ|aᵢₖ||bₖⱼ| +
//! (k + 1) · η)`, `u` the unit roundoff of the element type (2⁻⁵³, 2⁻²⁴) and `η` its smallest
//! subnormal (so that results in the subnormal range are judged by the absolute error that
//! native products make there too). `c` is computed to about twice `f64` precision.
//! Infinite and NaN results must match the reference's pattern exactly.

/// The complex measure and families: `Complex<f32>` and `Complex<f64>` products.
pub mod complex;

use ndarray::{Array2, ArrayView2};

use crate::element::{Dtype, Element};
use crate::error::GpuDotError;
use crate::options::{Backend, DotOptions, Precision};
use crate::route::Route;
use crate::GpuDot;

/// A family of operands, each with the parameter that sets how hostile it is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Family {
    /// Uniform in [−1, 1].
    Uniform,
    /// Every element `x · 2^e`, `x` uniform in [−1, 1] and `e` uniform in `±spread`.
    Spread(i32),
    /// Scales that pair along k: `aᵢₖ = x · 2^tₖ`, `bₖⱼ = y · 2^−tₖ`, `tₖ` uniform in
    /// `±spread`. Every product is O(1), but a row's largest element says nothing of its
    /// small ones.
    PairedK(i32),
    /// Rows of A and columns of B at scales far apart: row `i` times `2^rᵢ`, column `j` times
    /// `2^cⱼ`, uniform in `±spread`.
    FarRowsCols(i32),
    /// One entry per row of A (and per column of B) `2^big` above the rest.
    OneHuge(i32),
    /// Heavy cancellation: `c = Σ x·y − Σ x·y·(1 + 2^−bits)`, so that `|c|` is `2^−bits`
    /// of `Σ|a||b|`.
    Cancel(i32),
    /// Sparse: one element in `1/every` nonzero, nonzeros `x · 2^e` with `e` in `±spread`.
    Sparse { every: u32, spread: i32 },
    /// Uniform, scaled by `2^shift` (both operands): near overflow for a large `shift`,
    /// results in the subnormal range for a small one.
    Scaled(i32),
    /// Uniform, with an Inf, a −Inf and a NaN planted in A and in B.
    NonFinite,
    /// Not hostile, and not in the suite: uniform in [0, 1).
    Positive,
    /// Not hostile, and not in the suite: standard normal.
    Normal,
    /// Not hostile, and not in the suite: standard normal through a ReLU (half of it zero).
    Relu,
    /// Not hostile, and not in the suite: `±e^z`, z standard normal (signed log-normal).
    LogNormal,
}

impl Family {
    /// A short name, e.g. "paired-k ±20".
    pub fn name(&self) -> String {
        match self {
            Family::Uniform => "uniform".into(),
            Family::Spread(s) => format!("spread ±{s}"),
            Family::PairedK(s) => format!("paired-k ±{s}"),
            Family::FarRowsCols(s) => format!("far rows/cols ±{s}"),
            Family::OneHuge(b) => format!("one huge 2^{b}"),
            Family::Cancel(b) => format!("cancel 2^-{b}"),
            Family::Sparse { every, spread } => format!("sparse 1/{every} ±{spread}"),
            Family::Scaled(s) => format!("scaled 2^{s}"),
            Family::NonFinite => "inf/nan".into(),
            Family::Positive => "uniform [0, 1)".into(),
            Family::Normal => "normal".into(),
            Family::Relu => "relu(normal)".into(),
            Family::LogNormal => "signed log-normal".into(),
        }
    }

    /// Ordinary inputs, the kinds of data products see most (for the guard's counts and the
    /// default's speed beyond uniform inputs), each with the name [`Family::ordinary`] takes:
    /// `uniform` ([-1, 1)), `positive`, `normal`, `relu`, `lognormal`.
    pub const ORDINARY: [(&'static str, Family); 5] = [
        ("uniform", Family::Uniform),
        ("positive", Family::Positive),
        ("normal", Family::Normal),
        ("relu", Family::Relu),
        ("lognormal", Family::LogNormal),
    ];

    /// The ordinary family of that name (see [`Family::ORDINARY`]).
    pub fn ordinary(name: &str) -> Option<Family> {
        Family::ORDINARY
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, family)| family)
    }

    /// The suite's families for `dtype`: every element spanning 2^±10/30/60, scales paired
    /// along k, rows and columns far apart, one huge entry per row, cancellation, sparse with
    /// a spread, near overflow and underflow, Inf and NaN.
    pub fn suite(dtype: Dtype) -> Vec<Family> {
        // f32 spans 2^±126 (normal): the spreads and scales are held within it.
        let (wide, over, under) = match dtype {
            Dtype::F64 => (60, 1016, -1050),
            Dtype::F32 => (40, 122, -135),
        };
        vec![
            Family::Uniform,
            Family::Spread(10),
            Family::Spread(30),
            Family::Spread(wide),
            Family::PairedK(20),
            Family::PairedK(40),
            Family::FarRowsCols(30),
            Family::OneHuge(40),
            Family::Cancel(20),
            Family::Sparse {
                every: 20,
                spread: 30,
            },
            Family::Scaled(over),
            Family::Scaled(under),
            Family::NonFinite,
        ]
    }

    /// Operands `a` (m × k) and `b` (k × n) of this family, from `seed`.
    pub fn operands<A: Element>(
        &self,
        (m, k, n): (usize, usize, usize),
        seed: u64,
    ) -> (Array2<A>, Array2<A>) {
        let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03);
        let (a, b) = self.values((m, k, n), &mut r);
        let (mut a, mut b) = match *self {
            // Each operand carries half the shift, so that their product carries all of it.
            Family::Scaled(s) => (a * pow2(s / 2), b * pow2(s - s / 2)),
            _ => (a, b),
        };
        if *self == Family::NonFinite {
            let mut plant = |x: &mut Array2<f64>, v: f64| {
                let (rows, cols) = x.dim();
                let at = (
                    r.int(0, rows as i32 - 1) as usize,
                    r.int(0, cols as i32 - 1) as usize,
                );
                x[at] = v;
            };
            for v in [f64::INFINITY, f64::NEG_INFINITY, f64::NAN] {
                plant(&mut a, v);
                plant(&mut b, v);
            }
        }
        (a.mapv(A::from_f64), b.mapv(A::from_f64))
    }

    /// The family's values in `f64`, before its scaling and its planted infinities.
    fn values(&self, (m, k, n): (usize, usize, usize), r: &mut Rng) -> (Array2<f64>, Array2<f64>) {
        match *self {
            Family::Uniform | Family::NonFinite | Family::Scaled(_) => {
                elementwise((m, k, n), r, uniform)
            }
            Family::Positive | Family::Normal | Family::Relu | Family::LogNormal => {
                let family = *self;
                elementwise((m, k, n), r, move |r| match family {
                    Family::Positive => r.unit(),
                    Family::Normal => r.normal(),
                    Family::Relu => r.normal().max(0.0),
                    _ => {
                        let sign = if r.next() & 1 == 0 { 1.0 } else { -1.0 };
                        sign * r.normal().exp()
                    }
                })
            }
            Family::Spread(s) => elementwise((m, k, n), r, |r| uniform(r) * pow2(r.int(-s, s))),
            Family::PairedK(s) => {
                let t: Vec<i32> = (0..k).map(|_| r.int(-s, s)).collect();
                let a = Array2::from_shape_fn((m, k), |(_, q)| {
                    uniform(&mut Rng(r.next())) * pow2(t[q])
                });
                let b = Array2::from_shape_fn((k, n), |(q, _)| {
                    uniform(&mut Rng(r.next())) * pow2(-t[q])
                });
                (a, b)
            }
            Family::FarRowsCols(s) => {
                let rows: Vec<i32> = (0..m).map(|_| r.int(-s, s)).collect();
                let cols: Vec<i32> = (0..n).map(|_| r.int(-s, s)).collect();
                let a = Array2::from_shape_fn((m, k), |(i, _)| {
                    uniform(&mut Rng(r.next())) * pow2(rows[i])
                });
                let b = Array2::from_shape_fn((k, n), |(_, j)| {
                    uniform(&mut Rng(r.next())) * pow2(cols[j])
                });
                (a, b)
            }
            Family::OneHuge(big) => one_huge((m, k, n), r, big),
            Family::Cancel(bits) => cancelling((m, k, n), r, bits),
            Family::Sparse { every, spread } => elementwise((m, k, n), r, |r| {
                if r.next().is_multiple_of(every as u64) {
                    uniform(r) * pow2(r.int(-spread, spread))
                } else {
                    0.0
                }
            }),
        }
    }
}

/// A uniform value in [−1, 1).
fn uniform(r: &mut Rng) -> f64 {
    r.unit() * 2.0 - 1.0
}

/// `a` (m × k), then `b` (k × n), each element drawn by `e` in row-major order.
fn elementwise(
    (m, k, n): (usize, usize, usize),
    r: &mut Rng,
    e: impl Fn(&mut Rng) -> f64,
) -> (Array2<f64>, Array2<f64>) {
    let a = Array2::from_shape_simple_fn((m, k), || e(r));
    let b = Array2::from_shape_simple_fn((k, n), || e(r));
    (a, b)
}

/// Uniform operands with one element of each row of `a` and each column of `b` near `2^big`.
fn one_huge((m, k, n): (usize, usize, usize), r: &mut Rng, big: i32) -> (Array2<f64>, Array2<f64>) {
    let (mut a, mut b) = elementwise((m, k, n), r, uniform);
    for i in 0..m {
        let q = r.int(0, k as i32 - 1) as usize;
        a[[i, q]] = pow2(big) * (1.0 + r.unit());
    }
    for j in 0..n {
        let q = r.int(0, k as i32 - 1) as usize;
        b[[q, j]] = pow2(big) * (1.0 + r.unit());
    }
    (a, b)
}

/// A = [X X], B = [Y; −Y·(1 + 2^−bits)]: each term of the second half nearly undoes one of the
/// first.
fn cancelling(
    (m, k, n): (usize, usize, usize),
    r: &mut Rng,
    bits: i32,
) -> (Array2<f64>, Array2<f64>) {
    let h = k / 2;
    let x = Array2::from_shape_simple_fn((m, h.max(1)), || uniform(r));
    let y = Array2::from_shape_simple_fn((h.max(1), n), || uniform(r));
    let eps = pow2(-bits);
    let a = Array2::from_shape_fn((m, k), |(i, q)| if q < 2 * h { x[[i, q % h]] } else { 0.0 });
    let b = Array2::from_shape_fn((k, n), |(q, j)| match q {
        q if q < h => y[[q, j]],
        q if q < 2 * h => -y[[q - h, j]] * (1.0 + eps),
        _ => 0.0,
    });
    (a, b)
}

/// `2^e` for `e` in the range of `f64`'s normal numbers and a bit below.
fn pow2(e: i32) -> f64 {
    if e < -1000 {
        2f64.powi(-1000) * 2f64.powi(e + 1000)
    } else {
        2f64.powi(e)
    }
}

/// SplitMix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `lo..=hi`.
    fn int(&mut self, lo: i32, hi: i32) -> i32 {
        lo + (self.next() % (hi - lo + 1) as u64) as i32
    }

    /// Standard normal (Box–Muller).
    fn normal(&mut self) -> f64 {
        let u = 1.0 - self.unit(); // in (0, 1]
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * self.unit()).cos()
    }
}

/// The exact product's reference, element by element: `c` to about twice `f64` precision
/// (compensated dot products with FMA: Ogita, Rump and Oishi's Dot2) and `Σₖ|aᵢₖ||bₖⱼ|`.
pub struct Reference {
    /// The product, rounded to `f64` from its double-length value.
    pub c: Array2<f64>,
    /// `Σₖ|aᵢₖ||bₖⱼ|` (rounded upwards by at most a few units in its last place).
    pub abs: Array2<f64>,
    /// The inner dimension.
    pub k: usize,
}

impl Reference {
    /// The reference of `a · b`, computed on up to `threads` threads.
    pub fn new<A: Element>(a: ArrayView2<A>, b: ArrayView2<A>) -> Reference {
        let ((m, k), n) = (a.dim(), b.ncols());
        let a: Array2<f64> = a.mapv(|x| x.into_f64());
        let bt: Array2<f64> = b.t().mapv(|x| x.into_f64());
        let mut c = Array2::zeros((m, n));
        let mut abs = Array2::zeros((m, n));
        let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
        let rows_per = m.div_ceil(threads.max(1)).max(1);
        std::thread::scope(|s| {
            let chunks = c
                .axis_chunks_iter_mut(ndarray::Axis(0), rows_per)
                .zip(abs.axis_chunks_iter_mut(ndarray::Axis(0), rows_per))
                .enumerate();
            for (t, (mut cc, mut aa)) in chunks {
                let (a, bt) = (&a, &bt);
                s.spawn(move || {
                    for (r, (mut crow, mut arow)) in
                        cc.rows_mut().into_iter().zip(aa.rows_mut()).enumerate()
                    {
                        let x = a.row(t * rows_per + r);
                        for j in 0..n {
                            let y = bt.row(j);
                            let (v, s) = dot2(x, y);
                            crow[j] = v;
                            arow[j] = s;
                        }
                    }
                });
            }
        });
        Reference { c, abs, k }
    }
}

/// `(Σ xᵢyᵢ, Σ |xᵢyᵢ|)`: the first the exact sum rounded once ([`rounded_sum`]), the second
/// with a relative error below `k · 2⁻⁵³`. Infinite and NaN terms give IEEE's sum.
fn dot2(x: ndarray::ArrayView1<f64>, y: ndarray::ArrayView1<f64>) -> (f64, f64) {
    let (mut naive, mut abs) = (0.0f64, 0.0f64);
    for (x, y) in x.iter().zip(y) {
        let p = x * y;
        naive += p;
        abs += p.abs();
    }
    let terms = |s: f64, sum: &mut Dot2| {
        for (x, y) in x.iter().zip(y) {
            sum.add(x * s, y * s);
        }
    };
    (rounded_sum(terms, naive), abs)
}

/// A reference sum `Σ xᵢyᵢ`, which `terms` adds to the [`Dot2`] it is given with every factor
/// multiplied by the scale it is given: the exact sum, rounded once to `f64` from about twice
/// its precision. A plain sum in one order can overflow on the way to a finite exact sum, and
/// the second pass makes the result the exact sum's rounding there, not that order's
/// infinity: where the first pass overflows, it adds the terms again with every factor scaled
/// by 2⁻²⁵⁶ (every product by 2⁻⁵¹²) and scales the sum back. Where that overflows too, or a
/// factor is infinite or NaN, the result is `ieee`, the plain sum's.
pub(crate) fn rounded_sum(terms: impl Fn(f64, &mut Dot2), ieee: f64) -> f64 {
    for (scale, back) in [(1.0, 1.0), (pow2(-256), pow2(512))] {
        let mut sum = Dot2::default();
        terms(scale, &mut sum);
        if sum.s.is_finite() && sum.c.is_finite() {
            // Scaling back by a power of two is exact (an exact sum beyond f64's range rounds
            // to its infinity). The second pass takes products below 2⁻⁵¹⁰ below the normal
            // range, where their low bits are lost; that matters only to a sum cancelled from
            // beyond f64's range to some 2⁻¹⁰⁰⁰ of it.
            return sum.value().0 * back;
        }
    }
    ieee
}

/// A dot product accumulated as if in twice f64's precision (Ogita, Rump and Oishi's Dot2):
/// each product's rounding error by a fused multiply-add, each sum's by TwoSum, both summed
/// apart.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Dot2 {
    s: f64,
    c: f64,
}

impl Dot2 {
    /// Adds `x · y`.
    pub(crate) fn add(&mut self, x: f64, y: f64) {
        let p = x * y;
        let pe = x.mul_add(y, -p);
        let t = self.s + p;
        let z = t - self.s;
        let se = (self.s - (t - z)) + (p - z);
        self.s = t;
        self.c += pe + se;
    }

    /// The sum as a double-double `(hi, lo)`: `hi` the rounded sum, `lo` what it left out.
    pub(crate) fn value(self) -> (f64, f64) {
        let hi = self.s + self.c;
        (hi, self.c - (hi - self.s))
    }
}

/// How a product's result compares with its [`Reference`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Componentwise {
    /// The largest ratio `|ĉ − c| / (u · Σ|a||b| + (k + 1) · η)` over the finite elements.
    pub worst: f64,
    /// The median of those ratios.
    pub median: f64,
    /// Elements whose Inf or NaN pattern differs from the reference's (a finite result where
    /// the reference is not, or the other way round, or Inf of the other sign).
    pub pattern_mismatches: usize,
}

/// The componentwise ratios of `c` (an `f32` or `f64` result) against `reference`.
pub fn componentwise<A: Element>(c: ArrayView2<A>, reference: &Reference) -> Componentwise {
    let (u, eta) = match A::DTYPE {
        Dtype::F64 => (2f64.powi(-53), f64::from_bits(1)),
        Dtype::F32 => (2f64.powi(-24), f64::from(f32::from_bits(1))),
    };
    let floor = (reference.k as f64 + 1.0) * eta;
    let mut ratios = Vec::with_capacity(c.len());
    let mut mismatches = 0;
    for ((got, want), abs) in c.iter().zip(&reference.c).zip(&reference.abs) {
        let got = got.into_f64();
        // The reference rounded to the element type: Inf where the type overflows.
        let want_t = A::from_f64(*want).into_f64();
        if !want_t.is_finite() || !abs.is_finite() {
            // A finite reference whose Σ|a||b| overflows bounds nothing but the pattern.
            let same = if want_t.is_finite() {
                got.is_finite()
            } else {
                (want_t.is_nan() && got.is_nan()) || want_t == got
            };
            if !same {
                mismatches += 1;
            }
            continue;
        }
        if !got.is_finite() {
            mismatches += 1;
            continue;
        }
        ratios.push((got - want).abs() / (u * abs + floor));
    }
    ratios.sort_by(f64::total_cmp);
    Componentwise {
        worst: ratios.last().copied().unwrap_or(0.0),
        median: ratios.get(ratios.len() / 2).copied().unwrap_or(0.0),
        pattern_mismatches: mismatches,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ndarray_dot_meets_native_bound_on_every_family() {
        for dtype in [Dtype::F64, Dtype::F32] {
            for family in Family::suite(dtype) {
                let dims = (24, 256, 20);
                let worst = if dtype == Dtype::F64 {
                    let (a, b) = family.operands::<f64>(dims, 7);
                    let r = Reference::new(a.view(), b.view());
                    componentwise(a.dot(&b).view(), &r)
                } else {
                    let (a, b) = family.operands::<f32>(dims, 7);
                    let r = Reference::new(a.view(), b.view());
                    componentwise(a.dot(&b).view(), &r)
                };
                assert_eq!(worst.pattern_mismatches, 0, "{} {dtype}", family.name());
                // ndarray's product is a plain sum: within k·u·Σ|a||b| by the textbook bound.
                assert!(worst.worst <= 256.0, "{} {dtype}: {worst:?}", family.name());
            }
        }
    }

    /// A plain sum in one order overflows on the way to a finite exact sum: the reference is
    /// the exact sum's rounding, so that a product that overflows there (ndarray's, in that
    /// order) is a pattern mismatch, while one beyond f64's range is infinite and a NaN factor
    /// gives NaN.
    #[test]
    fn a_sum_that_overflows_on_the_way_is_exact_in_the_reference() {
        let h = pow2(1023);
        let ones = Array2::from_elem((3, 1), 1.0);
        let exact = |row: [f64; 3]| {
            let a = Array2::from_shape_vec((1, 3), row.to_vec()).unwrap();
            (Reference::new(a.view(), ones.view()), a.dot(&ones))
        };
        let (r, plain) = exact([h, h, -h]);
        assert_eq!(r.c[[0, 0]], h);
        assert_eq!(plain[[0, 0]], f64::INFINITY);
        assert_eq!(componentwise(plain.view(), &r).pattern_mismatches, 1);
        let (r, _) = exact([h, h, 0.0]);
        assert_eq!(r.c[[0, 0]], f64::INFINITY);
        let (r, _) = exact([h, -h, f64::NAN]);
        assert!(r.c[[0, 0]].is_nan());
        // Just below the overflow threshold, after the same detour: f64::MAX.
        let (r, _) = exact([h, h, -(h - f64::MAX + h)]);
        assert_eq!(r.c[[0, 0]], f64::MAX);
    }

    #[test]
    fn a_wrong_element_is_seen() {
        let (a, b) = Family::Uniform.operands::<f64>((8, 64, 8), 1);
        let r = Reference::new(a.view(), b.view());
        let mut c = a.dot(&b);
        assert!(componentwise(c.view(), &r).worst < 64.0);
        c[[3, 4]] *= 1.0 + 1e-12;
        assert!(componentwise(c.view(), &r).worst > 1e3);
        c[[3, 4]] = f64::NAN;
        assert_eq!(componentwise(c.view(), &r).pattern_mismatches, 1);
    }

    #[test]
    fn the_families_are_what_they_say() {
        let (a, b) = Family::PairedK(20).operands::<f64>((4, 64, 4), 3);
        // Every product aᵢₖbₖⱼ is O(1) though the elements span 2^±20.
        let big = a.iter().fold(0f64, |m, x| m.max(x.abs()));
        assert!(big > 2f64.powi(10));
        for q in 0..64 {
            assert!((a[[0, q]] * b[[q, 0]]).abs() <= 1.0);
        }
        let (a, b) = Family::Cancel(20).operands::<f64>((4, 64, 4), 3);
        let r = Reference::new(a.view(), b.view());
        assert!(r.c[[1, 1]].abs() < r.abs[[1, 1]] * 2f64.powi(-18));
        let (a, _) = Family::NonFinite.operands::<f32>((4, 16, 4), 3);
        assert!(a.iter().any(|x| x.is_nan()) && a.iter().any(|x| x.is_infinite()));
    }

    /// The ordinary families, by their moments over 40 000 elements, and by name; none is in
    /// the suite.
    #[test]
    fn the_ordinary_families_are_what_they_say() {
        let moments = |family: Family| {
            let (a, b) = family.operands::<f64>((100, 200, 100), 5);
            let all: Vec<f64> = a.iter().chain(b.iter()).copied().collect();
            let len = all.len() as f64;
            let mean = all.iter().sum::<f64>() / len;
            let var = all.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / len;
            let zeros = all.iter().filter(|x| **x == 0.0).count() as f64 / len;
            let negative = all.iter().filter(|x| **x < 0.0).count() as f64 / len;
            (mean, var, zeros, negative)
        };
        let near = |x: f64, want: f64, tol: f64| (x - want).abs() <= tol;
        let (mean, var, _, negative) = moments(Family::Positive);
        assert!(near(mean, 0.5, 0.01) && near(var, 1.0 / 12.0, 0.005) && negative == 0.0);
        let (mean, var, zeros, _) = moments(Family::Normal);
        assert!(near(mean, 0.0, 0.02) && near(var, 1.0, 0.03) && zeros == 0.0);
        // max(z, 0): half zero, mean 1/√(2π), variance ½ − 1/(2π).
        let pi = std::f64::consts::PI;
        let (mean, var, zeros, negative) = moments(Family::Relu);
        assert!(near(zeros, 0.5, 0.01) && negative == 0.0);
        assert!(near(mean, (2.0 * pi).sqrt().recip(), 0.01));
        assert!(near(var, 0.5 - 0.5 / pi, 0.01));
        // ±e^z: mean 0; E[x²] = e².
        let (mean, var, _, negative) = moments(Family::LogNormal);
        assert!(near(negative, 0.5, 0.01) && near(mean, 0.0, 0.05));
        assert!(near(var, std::f64::consts::E.powi(2), 1.0));
        for (name, family) in Family::ORDINARY {
            assert_eq!(Family::ordinary(name), Some(family));
            for dtype in [Dtype::F64, Dtype::F32] {
                assert!(family == Family::Uniform || !Family::suite(dtype).contains(&family));
            }
        }
        assert_eq!(Family::ordinary("gaussian"), None);
    }
}

/// Whether a product of the default precision emulated: its guard passed every element.
pub fn emulated(route: &Route) -> bool {
    matches!(
        route,
        Route::Gpu {
            guard: Some(g),
            precision: Precision::Ozaki { .. },
            ..
        } if g.failed == 0
    )
}

/// A suite case's three products, in the native precision, the default and unguarded Ozaki
/// at the automatic count, on the GPU with the output poisoned first: what `product` measures
/// of each, with its route; the first error, if any.
///
/// The autotuner is off, so each product runs the heuristic's kernel plan for its shape. With
/// it on, each precision's products of a shape are tuned apart, each handing out its
/// candidate plans in turn until it settles, so the native product and a default that the
/// guard refuses (which then runs natively) could sum in different orders (another split of
/// K): two draws of native's rounding, which may differ by more than the suite's factor of 2
/// where native's error is near its bound. Off, a refused default runs native's own plan.
pub(crate) fn three_precisions<M>(
    product: impl Fn(&DotOptions) -> Result<(M, Route), GpuDotError>,
) -> Result<[(M, Route); 3], GpuDotError> {
    let run = |precision: Precision| {
        let opts = DotOptions::builtin()
            .backend(Backend::Gpu)
            .precision(precision)
            .autotune(false)
            .poison_output(true);
        product(&opts)
    };
    Ok([
        run(Precision::Native)?,
        run(Precision::Auto)?,
        run(Precision::OZAKI)?,
    ])
}

/// The inner dimensions the suite runs each family at.
pub const SUITE_KS: [usize; 4] = [256, 1024, 4096, 16384];
/// The suite's rows of A and columns of B (the product is `48 × k · k × 40`).
pub const SUITE_MN: (usize, usize) = (48, 40);

/// One case of the adversarial suite on the GPU: a family's operands at `48 × k · k × 40`,
/// multiplied in the native precision, in the default one (`Precision::Auto`, whose guard
/// weighs emulation at every size where `__testing::emulate_every_size` is on) and by unguarded
/// Ozaki at the automatic count, each against a Dot2 reference.
#[derive(Debug, Clone)]
pub struct SuiteCase {
    pub dtype: Dtype,
    pub family: Family,
    pub k: usize,
    pub native: Componentwise,
    pub default: Componentwise,
    pub unguarded: Componentwise,
    /// The default's route: what ran, and the guard's report.
    pub route: Route,
    /// The native product's route (its kernel plan among it).
    pub native_route: Route,
}

impl SuiteCase {
    /// Runs `family` at `k` with operands drawn from `seed`, on the GPU (outputs poisoned
    /// first); the first error of the three products, if any.
    pub fn run<A: Element>(family: Family, k: usize, seed: u64) -> Result<SuiteCase, GpuDotError> {
        let dims = (SUITE_MN.0, k, SUITE_MN.1);
        let (a, b) = family.operands::<A>(dims, seed);
        let reference = Reference::new(a.view(), b.view());
        let [(native, native_route), (default, route), (unguarded, _)] =
            three_precisions(|opts| {
                a.try_gpu_dot_with(&b, opts)
                    .map(|p| (componentwise(p.c.view(), &reference), p.route))
            })?;
        Ok(SuiteCase {
            dtype: A::DTYPE,
            family,
            k,
            native,
            default,
            unguarded,
            route,
            native_route,
        })
    }

    /// Whether the default emulated (its guard passed every element).
    pub fn emulated(&self) -> bool {
        emulated(&self.route)
    }

    /// What the default ran: `ozaki-N`, or `native (F of T tiles refused)`.
    pub fn ran(&self) -> String {
        match &self.route {
            Route::Gpu {
                precision, guard, ..
            } => match guard {
                Some(g) if g.skipped => {
                    format!(
                        "native (guard skipped: last refused {} of {} tiles)",
                        g.failed, g.tiles
                    )
                }
                Some(g) if g.failed > 0 => {
                    format!("native ({} of {} tiles refused)", g.failed, g.tiles)
                }
                _ => precision.to_string(),
            },
            other => other.to_string(),
        }
    }

    /// The suite's rule: the default within `max(2 × native's, 8)` and with native's Inf and
    /// NaN pattern.
    pub fn meets_rule(&self) -> bool {
        self.default.worst <= (2.0 * self.native.worst).max(8.0)
            && self.default.pattern_mismatches <= self.native.pattern_mismatches
    }
}

//! The complex accuracy measure and the adversarial complex operands (`tests/complex_accuracy.rs`
//! and the precision example): the contract is `|ĉ − c| ≤ small multiple of u·Σₖ|aᵢₖ||bₖⱼ|`
//! with complex magnitudes, for every element.

use ndarray::{Array2, ArrayView2, Zip};
use num_complex::Complex;

use crate::accuracy::{rounded_sum, Componentwise, Dot2, Family};
use crate::element::{Dtype, Element};
use crate::error::GpuDotError;
use crate::route::Route;
use crate::GpuDot;

/// A family of complex operands, each with the parameter that sets how hostile it is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ComplexFamily {
    /// Both parts drawn from a real family, independently.
    Parts(Family),
    /// Uniform parts, the imaginary ones `2^s` times the real ones (in A and in B).
    PartsApart(i32),
    /// Uniform, with every other row of A purely imaginary and every third column of B purely
    /// real.
    PureImaginaryRows,
    /// Cancellation between `Aᵣ·Bᵣ` and `Aᵢ·Bᵢ`: `aᵢ = aᵣ`, `bᵢ = bᵣ·(1 + 2^−bits·z)`, so that
    /// the real part is `2^−bits` of its `Σ|a||b|`.
    CancelParts(i32),
    /// Scales paired along k, shared by both parts: `aₖ = (x + iy)·2^tₖ`, `bₖ = (x' + iy')·2^−tₖ`.
    PairedK(i32),
    /// Uniform, with an Inf, a −Inf and a NaN planted in one part only of A and of B.
    NonFiniteOnePart,
}

impl ComplexFamily {
    /// A short name, e.g. "parts 2^30 apart".
    pub fn name(&self) -> String {
        match self {
            ComplexFamily::Parts(f) => format!("both parts {}", f.name()),
            ComplexFamily::PartsApart(s) => format!("parts 2^{s} apart"),
            ComplexFamily::PureImaginaryRows => "pure imaginary rows".into(),
            ComplexFamily::CancelParts(b) => format!("re cancels 2^-{b}"),
            ComplexFamily::PairedK(s) => format!("paired-k ±{s}, both parts"),
            ComplexFamily::NonFiniteOnePart => "inf/nan in one part".into(),
        }
    }

    /// The complex suite for parts of `dtype`: every real family of the real suite in both
    /// parts (but its Inf and NaN, planted in one part here), parts far apart, purely
    /// imaginary rows, cancellation between the parts' products, scales paired along k.
    pub fn suite(dtype: Dtype) -> Vec<ComplexFamily> {
        let wide = match dtype {
            Dtype::F64 => 60,
            _ => 30,
        };
        let mut suite: Vec<ComplexFamily> = Family::suite(dtype)
            .into_iter()
            .filter(|f| *f != Family::NonFinite)
            .map(ComplexFamily::Parts)
            .collect();
        suite.extend([
            ComplexFamily::PartsApart(20),
            ComplexFamily::PartsApart(wide),
            ComplexFamily::PartsApart(-wide),
            ComplexFamily::PureImaginaryRows,
            ComplexFamily::CancelParts(20),
            ComplexFamily::CancelParts(40),
            ComplexFamily::PairedK(20),
            ComplexFamily::NonFiniteOnePart,
        ]);
        suite
    }

    /// Operands `a` (m × k) and `b` (k × n) of this family, from `seed`.
    pub fn operands<T: Element>(
        &self,
        (m, k, n): (usize, usize, usize),
        seed: u64,
    ) -> (Array2<Complex<T>>, Array2<Complex<T>>) {
        let dims = (m, k, n);
        let uniform = |s| Family::Uniform.operands::<f64>(dims, s);
        let other = seed ^ 0xA076_1D64_78BD_642F;
        let ((ar, br), (ai, bi)) = match *self {
            ComplexFamily::Parts(f) => (f.operands::<f64>(dims, seed), f.operands(dims, other)),
            ComplexFamily::PartsApart(s) => {
                let (ai, bi) = uniform(other);
                let scale = 2f64.powi(s);
                (uniform(seed), (ai * scale, bi * scale))
            }
            ComplexFamily::PureImaginaryRows => {
                let ((mut ar, br), (ai, mut bi)) = (uniform(seed), uniform(other));
                ar.rows_mut()
                    .into_iter()
                    .step_by(2)
                    .for_each(|mut r| r.fill(0.0));
                bi.columns_mut()
                    .into_iter()
                    .step_by(3)
                    .for_each(|mut c| c.fill(0.0));
                ((ar, br), (ai, bi))
            }
            ComplexFamily::CancelParts(bits) => {
                let (ar, br) = uniform(seed);
                let (z, _) = Family::Uniform.operands::<f64>((k, n, 1), other);
                let eps = 2f64.powi(-bits);
                let bi = Zip::from(&br)
                    .and(&z)
                    .map_collect(|&b, &z| b * (1.0 + eps * z));
                ((ar.clone(), br), (ar, bi))
            }
            ComplexFamily::PairedK(s) => {
                let (ar, br) = Family::PairedK(s).operands::<f64>(dims, seed);
                let (ua, ub) = uniform(other);
                // The imaginary parts share the real parts' scale along k.
                ((ar.clone(), br.clone()), (ar * ua, br * ub))
            }
            ComplexFamily::NonFiniteOnePart => {
                let ((mut ar, br), (ai, mut bi)) = (uniform(seed), uniform(other));
                ar[[0, k / 3]] = f64::INFINITY;
                ar[[m - 1, k / 2]] = f64::NEG_INFINITY;
                ar[[m / 2, k - 1]] = f64::NAN;
                bi[[k / 3, n - 1]] = f64::INFINITY;
                bi[[0, n / 2]] = f64::NEG_INFINITY;
                bi[[k - 1, 0]] = f64::NAN;
                ((ar, br), (ai, bi))
            }
        };
        let join = |re: Array2<f64>, im: Array2<f64>| {
            Zip::from(&re)
                .and(&im)
                .map_collect(|&re, &im| Complex::new(T::from_f64(re), T::from_f64(im)))
        };
        (join(ar, ai), join(br, bi))
    }
}

/// The exact complex product's reference, element by element: each part to about twice `f64`
/// precision (Dot2 over the `2k` real terms) and `Σₖ|aᵢₖ||bₖⱼ|` with complex magnitudes.
pub struct ComplexReference {
    /// The product, each part rounded to `f64` from its double-length value.
    pub c: Array2<Complex<f64>>,
    /// `Σₖ|aᵢₖ||bₖⱼ|`.
    pub abs: Array2<f64>,
    /// The inner dimension.
    pub k: usize,
}

impl ComplexReference {
    /// The reference of `a · b`, computed on every core in tiles of rows and columns (a few
    /// sampled rows of a large product still use them all), each reading rows of `a` and of
    /// `bᵀ` laid out contiguously.
    pub fn new<T: Element>(
        a: ArrayView2<Complex<T>>,
        b: ArrayView2<Complex<T>>,
    ) -> ComplexReference {
        let ((m, k), n) = (a.dim(), b.ncols());
        let wide = |z: &Complex<T>| Complex::new(z.re.into_f64(), z.im.into_f64());
        let a = Array2::from_shape_fn((m, k), |ij| wide(&a[ij]));
        let bt = Array2::from_shape_fn((n, k), |(j, q)| wide(&b[[q, j]]));
        let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
        let row_tiles = m.clamp(1, threads);
        let (rows_per, cols_per) = (
            m.div_ceil(row_tiles).max(1),
            n.div_ceil((threads / row_tiles).max(1)).max(1),
        );
        let tiles: Vec<_> = std::thread::scope(|s| {
            let (a, bt) = (&a, &bt);
            let spawned: Vec<_> = (0..m)
                .step_by(rows_per)
                .flat_map(|i0| (0..n).step_by(cols_per).map(move |j0| (i0, j0)))
                .map(|(i0, j0)| {
                    let (rows, cols) = (i0..(i0 + rows_per).min(m), j0..(j0 + cols_per).min(n));
                    s.spawn(move || {
                        let tile: Vec<_> = rows
                            .clone()
                            .flat_map(|i| cols.clone().map(move |j| (i, j)))
                            .map(|(i, j)| ((i, j), element(a.row(i), bt.row(j))))
                            .collect();
                        tile
                    })
                })
                .collect();
            spawned
                .into_iter()
                .map(|h| h.join().expect("a reference thread"))
                .collect()
        });
        let mut c = Array2::zeros((m, n));
        let mut abs = Array2::zeros((m, n));
        for (ij, (z, s)) in tiles.into_iter().flatten() {
            (c[ij], abs[ij]) = (z, s);
        }
        ComplexReference { c, abs, k }
    }
}

/// One element of the reference: `Σ xₖyₖ`, each part the exact sum of its `2k` real terms
/// rounded once ([`rounded_sum`]; IEEE's plain sum where a term is infinite or NaN), and
/// `Σ|xₖ||yₖ|`.
fn element(
    x: ndarray::ArrayView1<Complex<f64>>,
    y: ndarray::ArrayView1<Complex<f64>>,
) -> (Complex<f64>, f64) {
    let (mut naive_re, mut naive_im, mut s) = (0.0f64, 0.0f64, 0.0f64);
    for (x, y) in x.iter().zip(y) {
        naive_re += x.re * y.re - x.im * y.im;
        naive_im += x.re * y.im + x.im * y.re;
        s += x.norm() * y.norm();
    }
    let re = |t: f64, sum: &mut Dot2| {
        for (x, y) in x.iter().zip(y) {
            sum.add(x.re * t, y.re * t);
            sum.add(-x.im * t, y.im * t);
        }
    };
    let im = |t: f64, sum: &mut Dot2| {
        for (x, y) in x.iter().zip(y) {
            sum.add(x.re * t, y.im * t);
            sum.add(x.im * t, y.re * t);
        }
    };
    (
        Complex::new(rounded_sum(re, naive_re), rounded_sum(im, naive_im)),
        s,
    )
}

/// The componentwise ratios of a complex result `c` against `reference`: the largest
/// `|ĉ − c| / (u·Σ|a||b| + (2k + 2)·η)` over the elements whose parts are both finite, and the
/// elements whose Inf or NaN pattern differs from the reference's in either part.
pub fn componentwise<T: Element>(
    c: ArrayView2<Complex<T>>,
    reference: &ComplexReference,
) -> Componentwise {
    let (u, eta) = match T::DTYPE {
        Dtype::F64 => (2f64.powi(-53), f64::from_bits(1)),
        _ => (2f64.powi(-24), f64::from(f32::from_bits(1))),
    };
    let floor = (2.0 * reference.k as f64 + 2.0) * eta;
    let mut ratios = Vec::with_capacity(c.len());
    let mut mismatches = 0;
    for ((got, want), abs) in c.iter().zip(&reference.c).zip(&reference.abs) {
        let got = Complex::new(got.re.into_f64(), got.im.into_f64());
        // The reference rounded to the part type: Inf where the type overflows.
        let want_t = Complex::new(
            T::from_f64(want.re).into_f64(),
            T::from_f64(want.im).into_f64(),
        );
        let finite = |z: Complex<f64>| z.re.is_finite() && z.im.is_finite();
        if !finite(want_t) || !abs.is_finite() {
            let same = |got: f64, want: f64| {
                if want.is_finite() {
                    got.is_finite()
                } else {
                    (want.is_nan() && got.is_nan()) || want == got
                }
            };
            if !same(got.re, want_t.re) || !same(got.im, want_t.im) {
                mismatches += 1;
            }
            continue;
        }
        if !finite(got) {
            mismatches += 1;
            continue;
        }
        ratios.push((got - want).norm() / (u * abs + floor));
    }
    ratios.sort_by(f64::total_cmp);
    Componentwise {
        worst: ratios.last().copied().unwrap_or(0.0),
        median: ratios.get(ratios.len() / 2).copied().unwrap_or(0.0),
        pattern_mismatches: mismatches,
    }
}

/// One case of the complex suite on the GPU: a family's operands at `48 × k · k × 40`,
/// multiplied in the native precision, in the default one and by unguarded Ozaki at the
/// automatic count, each against a Dot2 reference.
#[derive(Debug, Clone)]
pub struct ComplexSuiteCase {
    /// The type of the parts.
    pub dtype: Dtype,
    /// The operands' family.
    pub family: ComplexFamily,
    /// The inner dimension.
    pub k: usize,
    /// The native precision's ratios.
    pub native: Componentwise,
    /// The default precision's ratios.
    pub default: Componentwise,
    /// Unguarded Ozaki's ratios, at the automatic count.
    pub unguarded: Componentwise,
    /// The default's route.
    pub route: Route,
    /// The native product's route (its kernel plan among it).
    pub native_route: Route,
}

impl ComplexSuiteCase {
    /// Runs `family` at `k` with operands drawn from `seed`, on the GPU (outputs poisoned
    /// first); the first error of the three products, if any.
    pub fn run<T: Element>(
        family: ComplexFamily,
        k: usize,
        seed: u64,
    ) -> Result<ComplexSuiteCase, GpuDotError> {
        let dims = (crate::accuracy::SUITE_MN.0, k, crate::accuracy::SUITE_MN.1);
        let (a, b) = family.operands::<T>(dims, seed);
        let reference = ComplexReference::new(a.view(), b.view());
        let [(native, native_route), (default, route), (unguarded, _)] =
            crate::accuracy::three_precisions(|opts| {
                a.try_gpu_dot_with(&b, opts)
                    .map(|p| (componentwise(p.c.view(), &reference), p.route))
            })?;
        Ok(ComplexSuiteCase {
            dtype: T::DTYPE,
            family,
            k,
            native,
            default,
            unguarded,
            route,
            native_route,
        })
    }

    /// Whether the default emulated every one of its real products.
    pub fn emulated(&self) -> bool {
        crate::accuracy::emulated(&self.route)
    }

    /// The suite's rule: the default within `max(2 × native's, 8)` and with native's Inf and
    /// NaN pattern.
    pub fn meets_rule(&self) -> bool {
        self.default.worst <= (2.0 * self.native.worst).max(8.0)
            && self.default.pattern_mismatches <= self.native.pattern_mismatches
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ndarray_dot_meets_the_native_bound_on_every_complex_family() {
        fn check<T: Element>(dtype: Dtype) {
            for family in ComplexFamily::suite(dtype) {
                let (a, b) = family.operands::<T>((24, 256, 20), 7);
                let reference = ComplexReference::new(a.view(), b.view());
                let worst = componentwise(a.dot(&b).view(), &reference);
                let name = family.name();
                // ndarray scales its complex sums by alpha = 1 + 0i, which turns an infinite
                // part into NaN (∞·0) in both: its pattern differs from the exact one there.
                if family != ComplexFamily::NonFiniteOnePart {
                    assert_eq!(worst.pattern_mismatches, 0, "{name} {dtype}: {worst:?}");
                }
                // A plain complex sum: within (k + 2)·u·Σ|a||b|.
                assert!(worst.worst <= 258.0, "{name} {dtype}: {worst:?}");
            }
        }
        check::<f64>(Dtype::F64);
        check::<f32>(Dtype::F32);
    }

    /// However the rows and columns fall into the threads' tiles (one row, a few, more rows
    /// than cores), every element of the reference is its own: ndarray's product meets the
    /// native bound at each, and its Inf and NaN pattern.
    #[test]
    fn every_element_of_the_reference_is_computed_whatever_the_tiles() {
        for (m, n) in [(1, 37), (3, 101), (40, 7), (1, 1)] {
            let (a, b) = ComplexFamily::Parts(Family::Uniform).operands::<f64>((m, 64, n), 5);
            let reference = ComplexReference::new(a.view(), b.view());
            assert_eq!(reference.c.dim(), (m, n));
            let worst = componentwise(a.dot(&b).view(), &reference);
            assert!(worst.worst <= 66.0, "{m} × {n}: {worst:?}");
            assert!(reference.abs.iter().all(|&s| s > 0.0), "{m} × {n}");
        }
    }

    /// Each part of the reference is its exact sum's rounding where a plain sum overflows on
    /// the way to a finite one: here the imaginary part's.
    #[test]
    fn a_part_that_overflows_on_the_way_is_exact_in_the_reference() {
        let h = 2f64.powi(1023);
        let a = ndarray::arr2(&[[
            Complex::new(0.0, h),
            Complex::new(0.0, h),
            Complex::new(1.0, -h),
        ]]);
        let b = Array2::from_elem((3, 1), Complex::new(1.0, 0.0));
        let reference = ComplexReference::new(a.view(), b.view());
        assert_eq!(reference.c[[0, 0]], Complex::new(1.0, h));
        let plain = a.dot(&b);
        assert_eq!(plain[[0, 0]].im, f64::INFINITY);
        assert_eq!(
            componentwise(plain.view(), &reference).pattern_mismatches,
            1
        );
    }

    /// The element whose reference failed `tests/complex_accuracy` on an H100 at ebc828a (c64,
    /// both parts scaled 2^1016, k = 16384, drawn from this seed): its imaginary part is
    /// finite, and ndarray's sum overflows on the way to it.
    #[test]
    fn the_drawn_element_that_overflowed_on_the_way_is_finite() {
        let (a, b) = ComplexFamily::Parts(Family::Scaled(1016))
            .operands::<f64>((48, 16384, 40), 1796656231071391099);
        let (x, y) = (
            a.slice(ndarray::s![44..45, ..]),
            b.slice(ndarray::s![.., 22..23]),
        );
        let reference = ComplexReference::new(x, y);
        assert_eq!(reference.c[[0, 0]].im, -1.7310202776427832e308);
        // ndarray's order overflows both ways on the way: NaN.
        assert!(!x.dot(&y)[[0, 0]].im.is_finite());
    }

    #[test]
    fn a_wrong_part_fails_the_measure() {
        let (a, b) = ComplexFamily::Parts(Family::Uniform).operands::<f64>((8, 64, 8), 3);
        let reference = ComplexReference::new(a.view(), b.view());
        let mut c = a.dot(&b);
        assert!(componentwise(c.view(), &reference).worst <= 66.0);
        // The conjugated product (a sign on the imaginary parts' product) is far off.
        let conj = a.dot(&b.mapv(|z| z.conj()));
        assert!(componentwise(conj.view(), &reference).worst > 1e10);
        c[[2, 3]].im = f64::NAN;
        assert_eq!(componentwise(c.view(), &reference).pattern_mismatches, 1);
    }
}

//! Scaling and the choice of count: how many moduli a product uses, and the shift of each
//! row (the CPU twin of kernels/ozaki.cu's `oz::RowSize`).

use crate::element::Dtype;
use crate::options::{MAX_MODULI, MIN_MODULI};

use super::scheme::{scaling_bits, FLAG, MAX_BITS};

/// Scaling bits the automatic choice of moduli asks for per `f64` operand element: 52 up to
/// k = 2048, 50 beyond (the native product's own error grows with k; the accuracy study in
/// BENCHMARKS.md measured both against it).
const AUTO_BITS_F64: (i32, i32) = (52, 50);
/// … and per `f32` one.
const AUTO_BITS_F32: i32 = 24;
/// A row's size as `ozaki_scale_*` gathers it (`oz::RowSize`, step for step, but for the order
/// of the sum of squares: the kernel's threads each take every 32nd element and their sums
/// are merged): its largest magnitude, whether it holds Inf or NaN, and its squared norm
/// `s · 4^anchor`. The order can move `s` by a few units in the last place, and so, for a row
/// whose `s · 4^t` lies that close to the bound (about one row in 2^40), the shift by one
/// between the kernel and this model, or between the two paths of the kernel (rows along the
/// contiguous index or not): both results are then within the bound, but their bits differ.
pub(super) struct RowSize {
    mx: f64,
    s: f64,
    anchor: i32,
    bad: bool,
}

impl RowSize {
    pub(super) fn of(row: impl Iterator<Item = f64>) -> RowSize {
        let mut z = RowSize {
            mx: 0.0,
            s: 0.0,
            anchor: -1000,
            bad: false,
        };
        let (mut inv, mut cap) = (2f64.powi(1000), 2f64.powi(-999));
        for v in row {
            let x = v.abs();
            z.bad |= !v.is_finite();
            z.mx = z.mx.max(x);
            if x >= cap && v.is_finite() {
                let e = ilogb(x);
                z.s = ldexp(z.s, 2 * (z.anchor - e));
                z.anchor = e;
                inv = ldexp(1.0, -e);
                cap = ldexp(1.0, e + 1);
            }
            let r = x * inv;
            z.s = r.mul_add(r, z.s);
        }
        z
    }

    /// The row's shift (`oz::RowSize::shift`): the larger of the one by its largest
    /// magnitude (`bits`) and the one by its norm (`bound`, where above 0), capped so that
    /// the scaled elements stay below 2^61.
    pub(super) fn shift(&self, bits: i32, bound: f64) -> i32 {
        if self.bad {
            return FLAG;
        }
        if self.mx == 0.0 {
            return 0;
        }
        let e = ilogb(self.mx);
        let by_max = bits - 1 - e;
        if bound <= 0.0 {
            return by_max;
        }
        let mut t = ((ilogb(bound) - ilogb(self.s)) >> 1) - self.anchor;
        while ldexp(self.s, 2 * (self.anchor + t + 1)) <= bound {
            t += 1;
        }
        while ldexp(self.s, 2 * (self.anchor + t)) > bound {
            t -= 1;
        }
        by_max.max(t.min(MAX_BITS - 1 - e))
    }
}

/// The moduli an `auto` Ozaki product (`Precision::Ozaki { moduli: 0 }`) of `dtype` with
/// inner dimension `k` uses: the fewest that keep 52 bits of each `f64` element (50 beyond
/// k = 2048; 24 of each `f32` one) below the largest magnitude of its row, at most
/// 18 (`MAX_MODULI`).
pub fn auto_moduli(dtype: Dtype, k: usize) -> usize {
    let want = match dtype {
        Dtype::F64 if k <= 2048 => AUTO_BITS_F64.0,
        Dtype::F64 => AUTO_BITS_F64.1,
        Dtype::F32 => AUTO_BITS_F32,
    };
    (MIN_MODULI..=MAX_MODULI)
        .find(|&n| {
            let (a, b) = scaling_bits(n, k);
            a.min(b) >= want
        })
        .unwrap_or(MAX_MODULI)
}

/// The moduli a product asked for with `moduli` (0: automatic) uses.
pub(crate) fn moduli_for(dtype: Dtype, moduli: u8, k: usize) -> usize {
    match moduli as usize {
        0 => auto_moduli(dtype, k),
        n => n.clamp(MIN_MODULI, MAX_MODULI),
    }
}

/// `x · 2^e`, exactly where the result is a normal number.
pub(super) fn ldexp(x: f64, e: i32) -> f64 {
    let mut x = x;
    let mut e = e;
    while e > 1000 {
        x *= 2f64.powi(1000);
        e -= 1000;
    }
    while e < -1000 {
        x *= 2f64.powi(-1000);
        e += 1000;
    }
    x * 2f64.powi(e)
}

/// The exponent of |x| (x finite and nonzero): x = 1.f · 2^e.
pub(super) fn ilogb(x: f64) -> i32 {
    let bits = x.abs().to_bits();
    let exp = (bits >> 52) as i32;
    if exp == 0 {
        // Subnormal: the leading one's position.
        -1074 + 63 - bits.leading_zeros() as i32
    } else {
        exp - 1023
    }
}

//! Products on the INT8 tensor cores by Ozaki scheme II (kernels/ozaki.cu): the moduli, the
//! constants of the reconstruction, the choice of scaling bits and moduli, the launcher, and
//! an exact CPU model of what the kernels compute (the tests' oracle).
//!
//! `C = op(A) · op(B)` becomes, with X = op(A) (m × k) and Y = op(B)ᵀ (n × k):
//! X' = rint(diag(2^s) X) and Y' = rint(diag(2^t) Y), integers of at most `bits` bits chosen
//! so that `k · 2^(bits_a + bits_b) ≤ M / 4` (M the product of the moduli); C' = X' Y'ᵀ is
//! then recovered exactly from its residues modulo each modulus (one exact INT8 GEMM per
//! modulus) by the Chinese remainder theorem, and C = diag(2^-s) C' diag(2^-t), rounded once.
//!
//! The files: [`scheme`] (moduli, reconstruction constants, exactness bounds), [`scaling`]
//! (the count of moduli and each row's shift), [`guard`] (whether an element is within
//! native's bound), [`passes`] (what the device's passes share: the INT8 GEMM, the workspace,
//! the operands as rows), [`scale_passes`] (the rows' scaling on the device), [`verdict`] (the
//! guard's passes on the device), [`launch`](mod@launch) (one product's passes in order, as
//! its steps), [`model`] (the exact CPU model the tests compare the kernels with), [`cost`]
//! (where the default precision's guarded product pays on a Hopper) and [`recent`] (the
//! shapes the guard refused lately, which skip it).

pub(crate) mod cost;
pub(crate) mod guard;
pub(crate) mod launch;
pub(crate) mod model;
pub(crate) mod passes;
pub(crate) mod recent;
mod room;
pub(crate) mod scale_passes;
pub(crate) mod scaling;
pub(crate) mod scheme;
#[cfg(test)]
mod tests;
pub(crate) mod verdict;

pub use guard::{guard_counts, refusal_lead};
pub(crate) use launch::launch;
pub use model::reference;
pub use passes::GuardReport;
pub(crate) use passes::{OzError, Recalled, SharedB};
pub use scaling::auto_moduli;

/// The complex products, by their `m·k·n` complex multiply-adds, that emulate in the Karatsuba
/// form by default; smaller ones emulate in the real form of their stacked parts. On an H100
/// the Karatsuba form lost to it by 18% at 2048³ and 4% at 3072³ (c32), and won by 5–6% at
/// 4096³ and 15–19% at 8192³–16384³ (BENCHMARKS.md, "Complex matrices").
const KARATSUBA_FROM: f64 = 3584.0 * 3584.0 * 3584.0;

/// The form an emulated complex product read as reals runs in, `(paired, karatsuba)`, from
/// the whole product's `m × k × n` reals (`k` and `n` even; row panels take their product's
/// form): by default the Karatsuba form (the paired shifts, three INT8 products a modulus)
/// from [`KARATSUBA_FROM`] up, or at every size where the tests emulate every size, and below
/// it the real form of the stacked parts, each column's parts scaled on their own. The
/// crate's `complex_paired` switch off gives that real form at every size, and its
/// `complex_karatsuba` switch off the real form with the paired shifts.
pub(crate) fn complex_form((m, k, n): (usize, usize, usize)) -> (bool, bool) {
    use crate::device::overrides as o;
    let paired = o::complex_paired_on();
    let karatsuba = paired && o::complex_karatsuba_on();
    let volume = m as f64 * (k / 2) as f64 * (n / 2) as f64;
    if karatsuba && volume < KARATSUBA_FROM && !o::emulating_every_size() {
        return (false, false);
    }
    (paired, karatsuba)
}

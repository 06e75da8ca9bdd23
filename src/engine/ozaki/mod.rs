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

/// Whether a complex product read as reals, emulated, runs in the Karatsuba form (the
/// default: the crate's `complex_paired` and `complex_karatsuba` switches are on); the
/// launcher and the route report read it alike.
pub(crate) fn karatsuba_form() -> bool {
    crate::device::overrides::complex_paired_on()
        && crate::device::overrides::complex_karatsuba_on()
}

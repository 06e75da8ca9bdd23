//! The scheme's arithmetic, scaling and the CPU model against models of the kernels.
//!
//! By topic: [`scheme`] (the moduli, the split, the reconstruction), [`scaling`] (the count
//! and the rows' scaling, the CPU model), [`passes`] (the GEMM's tiles, the workspace, the
//! gate), [`guard_model`] (the guard against native's bound) and [`karatsuba`] (complex
//! products as three INT8 products a modulus, in residues); the generator they share is here.

use super::model::*;
use super::passes::*;
use super::scaling::*;
use super::scheme::*;
use crate::element::Dtype;
use crate::options::{Precision, MAX_MODULI, MIN_MODULI};
// The modules the topics' tests name by path (`super::guard`, `super::model`).
use super::{guard, model};

mod guard_model;
mod karatsuba;
mod passes;
mod scaling;
mod scheme;

/// A small deterministic generator (xorshift), so the tests need no crate.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
    /// True with probability `1/n`.
    fn one_in(&mut self, n: u64) -> bool {
        self.next().is_multiple_of(n)
    }
}

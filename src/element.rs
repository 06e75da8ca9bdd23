//! The element types the crate multiplies: [`Element`] is the one place an element type is
//! named, and [`Dtype`] is its value at run time (kernel names, tuned-plan keys, reports).

use std::fmt;

use ndarray::LinalgScalar;
use num_traits::Float;

/// An element type at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Dtype {
    /// `f32`: FP32 FFMA kernels.
    F32,
    /// `f64`: FP64 tensor-core kernels (FP64 FMA on devices without them).
    F64,
}

impl Dtype {
    /// Every element type, in the order of the kernel table.
    pub const ALL: [Dtype; 2] = [Dtype::F32, Dtype::F64];

    /// The type's name, as Rust spells it (`f32`, `f64`); the ladder's `dtype` field.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F64 => "f64",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F64 => 8,
        }
    }

    /// The BLAS letter that starts the type's kernel names (`s`, `d`).
    pub(crate) fn letter(self) -> char {
        match self {
            Dtype::F32 => 's',
            Dtype::F64 => 'd',
        }
    }

    /// Elements per 16-byte vector: the aligned kernels' leading dimensions are multiples.
    pub(crate) fn per_16_bytes(self) -> usize {
        16 / self.size()
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    use cudarc::driver::{DeviceRepr, ValidAsZeroBits};

    /// Seals [`Element`](super::Element), and carries what the CUDA bindings need of an
    /// element type, so that they stay out of the public trait's bounds.
    pub trait Sealed: DeviceRepr + ValidAsZeroBits {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// A floating-point type the crate multiplies on the GPU: `f32` and `f64`.
///
/// Sealed: a new element type is one impl here plus its kernels (see "Where a new thing goes"
/// in the repository's ARCHITECTURE.md).
pub trait Element:
    sealed::Sealed + LinalgScalar + Float + Send + Sync + fmt::Debug + fmt::Display + 'static
{
    /// The type at run time.
    const DTYPE: Dtype;

    /// `x` rounded to this type.
    fn from_f64(x: f64) -> Self;

    /// The value as an `f64` (exact for both types). Named apart from num-traits'
    /// `ToPrimitive::to_f64` (which `Float` brings along, and which returns an `Option`), so
    /// that `x.into_f64()` means this on a value and on a reference alike.
    fn into_f64(self) -> f64;
}

impl Element for f32 {
    const DTYPE: Dtype = Dtype::F32;

    fn from_f64(x: f64) -> f32 {
        x as f32
    }

    fn into_f64(self) -> f64 {
        f64::from(self)
    }
}

impl Element for f64 {
    const DTYPE: Dtype = Dtype::F64;

    fn from_f64(x: f64) -> f64 {
        x
    }

    fn into_f64(self) -> f64 {
        self
    }
}

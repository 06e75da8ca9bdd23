//! The element types `gpu_dot` takes: [`GpuScalar`], the real [`Element`] types and their
//! complex forms, and the trait that gives each form of a product its route for them
//! (implemented for the real types in `real.rs`, for the complex ones in `complex/`).

use std::fmt;

use ndarray::LinalgScalar;
use ndarray::{
    Array2, Array3, ArrayBase, ArrayView2, ArrayView3, ArrayViewMut2, CowArray, Data, DataMut, Ix2,
};
use num_complex::Complex;

use crate::element::Element;
use crate::error::GpuDotError;
use crate::options::DotOptions;
use crate::pipeline::{Dst, Src};
use crate::route::{Product, Route};

/// An element type `gpu_dot` multiplies: `f32` and `f64` (the [`Element`] types, which the
/// kernels take), and `Complex<f32>` and `Complex<f64>` (num-complex 0.4's, the complex types
/// ndarray's `dot` takes).
///
/// A complex matrix product runs on the GPU as one real product of its stacked parts, a
/// batch as four real batches of its parts (`re = Aᵣ·Bᵣ − Aᵢ·Bᵢ`, `im = Aᵣ·Bᵢ + Aᵢ·Bᵣ`), each
/// the real type's product with its precision, guard and fallback; its flops are counted as
/// real flops (`8·m·k·n`) against the complex threshold (docs/precision.md, "Complex
/// matrices").
///
/// Sealed: implemented for those four types only.
pub trait GpuScalar:
    dispatch::Dispatch + LinalgScalar + Send + Sync + fmt::Debug + 'static
{
    /// The type of the real and the imaginary part (the type itself for a real type).
    type Real: Element;

    /// Whether the type is complex.
    const COMPLEX: bool;
}

impl<T: Element> GpuScalar for T {
    type Real = T;
    const COMPLEX: bool = false;
}

impl<T: Element> GpuScalar for Complex<T> {
    type Real = T;
    const COMPLEX: bool = true;
}

/// An operand of the general product: a host array or view of any layout, or a device matrix
/// or view. Made by [`AsOperand::as_operand`](crate::AsOperand::as_operand).
pub struct Operand<'a, A: GpuScalar = f32>(pub(crate) Src<'a, A, A::Reals>);

/// The output of the general product: a host array or mutable view, or a device matrix. Made
/// by [`AsOutput::as_output`](crate::AsOutput::as_output).
pub struct Output<'a, A: GpuScalar = f32>(pub(crate) Dst<'a, A, A::Reals>);

/// The right operand of a batch: one matrix per item, or one for all. Public only because
/// [`Dispatch`](dispatch::Dispatch) names it; its module is not.
#[derive(Clone)]
pub enum Rhs<'a, T> {
    Each(ArrayView3<'a, T>),
    Shared(ArrayView2<'a, T>),
}

impl<T> Rhs<'_, T> {
    /// Items (None: shared), rows and columns.
    pub(crate) fn dim(&self) -> (Option<usize>, usize, usize) {
        match self {
            Rhs::Each(v) => {
                let (b, k, n) = v.dim();
                (Some(b), k, n)
            }
            Rhs::Shared(v) => (None, v.nrows(), v.ncols()),
        }
    }
}

/// The route of each form of a product, by element type. The trait is public because
/// [`GpuScalar`] names it; its module is not, so no one outside the crate can name, implement
/// or call it.
pub(crate) mod dispatch {
    use super::*;

    /// The forms of a product for one element type: the real types take the router's forms,
    /// the complex types those of `complex.rs`.
    pub trait Dispatch: Sized {
        /// Whether a `gpu_dot` call with default options goes to the CPU before any GPU is
        /// tried (see `route::cpu_first`).
        fn cpu_first(batch: usize, mkn: (usize, usize, usize)) -> bool;

        /// `a · b` as `opts` asks (see `route::dot_as`).
        fn dot_as<S1, S2, C>(
            a: &ArrayBase<S1, Ix2>,
            b: &ArrayBase<S2, Ix2>,
            opts: &DotOptions,
            fall_back: bool,
            finish: impl FnOnce(Array2<Self>) -> C,
            cpu: impl FnOnce() -> C,
        ) -> Result<Product<C>, GpuDotError>
        where
            S1: Data<Elem = Self>,
            S2: Data<Elem = Self>;

        /// `c = alpha·a·b + beta·c` over host arrays, shapes already checked.
        fn general(
            alpha: Self,
            a: ArrayView2<'_, Self>,
            b: ArrayView2<'_, Self>,
            beta: Self,
            c: &mut ArrayBase<impl DataMut<Elem = Self>, Ix2>,
            opts: &DotOptions,
            fall_back: bool,
        ) -> Result<Route, GpuDotError>;

        /// The batch `a · b` as `opts` asks (see `batch::batch_dot`).
        fn batch_dot(
            a: ArrayView3<'_, Self>,
            b: Rhs<'_, Self>,
            opts: &DotOptions,
            fall_back: bool,
        ) -> Result<Product<Array3<Self>>, GpuDotError>;

        /// The batch `a · b` on the CPU, by ndarray.
        fn batch_cpu(a: &ArrayView3<'_, Self>, b: &Rhs<'_, Self>) -> Array3<Self>;

        /// The type of the parts ([`GpuScalar::Real`]), which a device matrix of this type
        /// holds.
        type Reals: Element;

        /// `a` as the reals a device matrix of it holds: itself, or a complex matrix as
        /// `rows × 2·cols` reals, each row's parts interleaved (in place where `a` is in C
        /// order).
        fn device_reals(a: ArrayView2<'_, Self>) -> CowArray<'_, Self::Reals, Ix2>;

        /// `a`'s elements as those reals, in place, where its layout allows it (always for a
        /// real type, for a complex one where its columns are contiguous); else `a` back.
        #[allow(clippy::type_complexity)]
        fn device_reals_mut(
            a: ArrayViewMut2<'_, Self>,
        ) -> Result<ArrayViewMut2<'_, Self::Reals>, ArrayViewMut2<'_, Self>>;

        /// A C-order array of those reals (`rows × 2·cols` for a complex matrix) as the
        /// matrix they hold.
        fn from_device_reals(reals: Array2<Self::Reals>) -> Array2<Self>;

        /// `c = alpha·a·b + beta·c` over host or device operands (see `matrix::general`).
        #[allow(clippy::too_many_arguments)]
        fn general_operands(
            alpha: Self,
            a: &Operand<'_, Self>,
            b: &Operand<'_, Self>,
            beta: Self,
            c: &mut Output<'_, Self>,
            opts: &DotOptions,
            fall_back: bool,
        ) -> Result<Route, GpuDotError>
        where
            Self: GpuScalar;
    }
}

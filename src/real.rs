//! The real element types' route for each form of a product: the router's (`route.rs`),
//! the general product's (`matrix.rs`) and the batches' (`batch.rs`).

use ndarray::{
    Array2, Array3, ArrayBase, ArrayView2, ArrayView3, ArrayViewMut2, CowArray, Data, DataMut, Ix2,
};

use crate::batch;
use crate::element::Element;
use crate::error::GpuDotError;
use crate::matrix::{self, AsOperand, AsOutput};
use crate::options::DotOptions;
use crate::route::{self, Product, Route};
use crate::scalar::dispatch::Dispatch;
use crate::scalar::Rhs;
use crate::scalar::{Operand, Output};

impl<T: Element> Dispatch for T {
    #[inline(always)]
    fn cpu_first(batch: usize, mkn: (usize, usize, usize)) -> bool {
        route::cpu_first(batch, mkn, T::DTYPE)
    }

    fn dot_as<S1, S2, C>(
        a: &ArrayBase<S1, Ix2>,
        b: &ArrayBase<S2, Ix2>,
        opts: &DotOptions,
        fall_back: bool,
        finish: impl FnOnce(Array2<T>) -> C,
        cpu: impl FnOnce() -> C,
    ) -> Result<Product<C>, GpuDotError>
    where
        S1: Data<Elem = T>,
        S2: Data<Elem = T>,
    {
        route::dot_as(a, b, opts, fall_back, finish, cpu)
    }

    fn general(
        alpha: T,
        a: ArrayView2<'_, T>,
        b: ArrayView2<'_, T>,
        beta: T,
        c: &mut ArrayBase<impl DataMut<Elem = T>, Ix2>,
        opts: &DotOptions,
        fall_back: bool,
    ) -> Result<Route, GpuDotError> {
        let (a, b) = (a.as_operand(), b.as_operand());
        matrix::general(alpha, &a, &b, beta, &mut c.as_output(), opts, fall_back)
    }

    fn batch_dot(
        a: ArrayView3<'_, T>,
        b: Rhs<'_, T>,
        opts: &DotOptions,
        fall_back: bool,
    ) -> Result<Product<Array3<T>>, GpuDotError> {
        batch::batch_dot(a, b, opts, fall_back)
    }

    fn batch_cpu(a: &ArrayView3<'_, T>, b: &Rhs<'_, T>) -> Array3<T> {
        batch::cpu(a, b)
    }

    type Reals = T;

    fn device_reals(a: ArrayView2<'_, T>) -> CowArray<'_, T, Ix2> {
        CowArray::from(a)
    }

    fn device_reals_mut(
        a: ArrayViewMut2<'_, T>,
    ) -> Result<ArrayViewMut2<'_, T>, ArrayViewMut2<'_, T>> {
        Ok(a)
    }

    fn from_device_reals(reals: Array2<T>) -> Array2<T> {
        reals
    }

    fn general_operands(
        alpha: T,
        a: &Operand<'_, T>,
        b: &Operand<'_, T>,
        beta: T,
        c: &mut Output<'_, T>,
        opts: &DotOptions,
        fall_back: bool,
    ) -> Result<Route, GpuDotError> {
        matrix::general_real(alpha, a, b, beta, c, opts, fall_back)
    }
}

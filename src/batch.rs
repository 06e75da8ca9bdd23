//! Batched products: a stack of products `C[z] = A[z] · B[z]` (3-D · 3-D), or one right
//! operand shared by every item (3-D · 2-D), as `torch.bmm` and `numpy.matmul` compute them.
//!
//! On the GPU a batch is one upload per operand (the items of an operand are packed as one
//! matrix when its strides allow, else after one host copy into standard layout), one launch
//! for every item and one download. A shared right operand whose left items stack down the
//! rows of one matrix (a C-order stack, for one) is a single `batch·m × k` by `k × n` product,
//! with the overlapped pipeline of a 2-D product. On the CPU each item is ndarray's
//! `general_mat_mul`.

use std::mem::MaybeUninit;

use ndarray::linalg::general_mat_mul;
use ndarray::{
    Array3, ArrayBase, ArrayView2, ArrayView3, ArrayViewMut2, Axis, Data, Ix2, Ix3, LinalgScalar,
};

use crate::device::context;
use crate::element::Element;
use crate::error::GpuDotError;
use crate::host::staging::HostMat;
use crate::options::{Backend, DotOptions};
use crate::pipeline::{self, BatchOperand, Dst, Gemm, Src, Stack};
use crate::route::{self, CpuReason, Decision, Product, Route};
use crate::scalar::{GpuScalar, Rhs};
use crate::GpuDot;

/// Checks that the batch `a · b` is defined: as many items on each side, equal inner
/// dimensions, and a result that fits in memory's address range.
pub(crate) fn check_batch_shapes(
    (batch, m, k): (usize, usize, usize),
    (batch2, k2, n): (Option<usize>, usize, usize),
) -> Result<(), GpuDotError> {
    if let Some(batch2) = batch2.filter(|&b2| b2 != batch) {
        return Err(GpuDotError::BatchMismatch { batch, batch2 });
    }
    if k != k2 {
        return Err(GpuDotError::ShapeMismatch { m, k, k2, n });
    }
    let len = batch.checked_mul(m).and_then(|x| x.checked_mul(n));
    if len.is_none_or(|len| len > isize::MAX as usize) {
        return Err(GpuDotError::TooLarge {
            dims: (batch.saturating_mul(m), k, n),
        });
    }
    Ok(())
}

/// A stack of matrices as one matrix, when its strides allow: the items one below the other
/// (`Stack::Rows`, a `batch·r × c` matrix) or side by side (`Stack::Cols`, `r × batch·c`).
pub(crate) fn flatten<T>(v: ArrayView3<'_, T>) -> Option<(ArrayView2<'_, T>, Stack)> {
    let mut rows = v;
    if rows.merge_axes(Axis(0), Axis(1)) {
        return Some((rows.index_axis_move(Axis(0), 0), Stack::Rows));
    }
    let mut cols = v;
    if cols.merge_axes(Axis(0), Axis(2)) {
        return Some((cols.index_axis_move(Axis(0), 0), Stack::Cols));
    }
    None
}

/// A stack as the device reads it: `v` itself flattened, or a standard-layout copy of it
/// (kept in `copy`) when its strides interleave the items.
fn operand<'a, T: Element>(
    v: ArrayView3<'a, T>,
    copy: &'a mut Option<Array3<T>>,
) -> BatchOperand<'a, T> {
    let (_, r, c) = v.dim();
    let (view, stack) = match flatten(v) {
        Some(flat) => flat,
        None => {
            let standard = copy.insert(v.as_standard_layout().into_owned());
            flatten(standard.view()).expect("a standard-layout stack flattens")
        }
    };
    BatchOperand {
        view,
        stack,
        item: (r, c),
    }
}

/// Computes the batch `a · b` as `opts` asks; the result is in standard (C) order on every
/// route. `fall_back`: a failing GPU computes on the CPU whatever the backend.
pub(crate) fn batch_dot<T: Element>(
    a: ArrayView3<'_, T>,
    b: Rhs<'_, T>,
    opts: &DotOptions,
    fall_back: bool,
) -> Result<Product<Array3<T>>, GpuDotError> {
    let (batch, m, k) = a.dim();
    let (batch2, k2, n) = b.dim();
    check_batch_shapes((batch, m, k), (batch2, k2, n))?;
    if batch == 0 || m == 0 || n == 0 || k == 0 {
        route::log_route(
            batch,
            (m, k, n),
            T::DTYPE,
            &Ok(Decision::Done(Route::Empty)),
        );
        return Ok(Product {
            c: Array3::zeros((batch, m, n)),
            route: Route::Empty,
        });
    }
    let mut c = None;
    let decision = decide(&a, &b, opts, fall_back, &mut c);
    route::log_route(batch, (m, k, n), T::DTYPE, &decision);
    Ok(match decision? {
        Decision::Done(route) => {
            let c = c.expect("the GPU wrote the result");
            crate::host::fresh::result_filled::<T>(c.len());
            Product {
                // SAFETY: a GPU batch that returned Ok wrote every element of C (its download
                // covers all batch·m·n elements and returns once they are unpacked).
                c: unsafe { c.assume_init() },
                route,
            }
        }
        Decision::Cpu(why) => Product {
            c: cpu(&a, &b),
            route: Route::Cpu(why),
        },
    })
}

fn decide<T: Element>(
    a: &ArrayView3<'_, T>,
    b: &Rhs<'_, T>,
    opts: &DotOptions,
    fall_back: bool,
    out: &mut Option<Array3<MaybeUninit<T>>>,
) -> Result<Decision, GpuDotError> {
    let (batch, m, k) = a.dim();
    let n = b.dim().2;
    let flops = route::flops(batch.saturating_mul(m), k, n);
    if let Some(why) = route::cpu_by_options(opts, flops, T::DTYPE) {
        return Ok(Decision::Cpu(why));
    }
    let fall_back = fall_back || opts.backend == Backend::Auto;
    if opts.backend == Backend::Auto {
        let gpu = route::device_for(opts, []).and_then(context::gpu_on);
        if let Some(why) = gpu
            .ok()
            .and_then(|gpu| route::compiling(&gpu, T::DTYPE, opts, true))
        {
            return Ok(Decision::Cpu(why));
        }
    }
    let mut on_gpu = || -> Result<Route, GpuDotError> {
        crate::engine::args::check_dims(m, k, n)?;
        let gpu = context::gpu_on(route::device_for(opts, [])?)?;
        let ordinal = gpu.info.ordinal;
        let c = out.insert(fresh3::<T>((batch, m, n))?);
        let dims = (batch * m, n);
        let flat_a = flatten(a.view());
        let done = match (b, flat_a) {
            // One product: the items of A one below the other, times the shared B.
            (Rhs::Shared(bv), Some((a2, Stack::Rows))) => {
                let slice = c.as_slice_mut().expect("a fresh stack is contiguous");
                let c2 = ArrayViewMut2::from_shape(dims, slice).expect("batch·m·n elements");
                let (sa, sb) = (Src::Host(a2), Src::Host(bv.view()));
                let g = Gemm {
                    alpha: T::one(),
                    a: &sa,
                    b: &sb,
                    beta: T::zero(),
                    c: &mut Dst::Fresh(c2),
                };
                pipeline::gemm(&gpu, opts, g)
            }
            _ => {
                let (mut copy_a, mut copy_b) = (None, None);
                let a_op = operand(a.view(), &mut copy_a);
                let b_op = match b {
                    Rhs::Each(v) => operand(v.view(), &mut copy_b),
                    Rhs::Shared(v) => BatchOperand {
                        view: v.view(),
                        stack: Stack::Shared,
                        item: (k, n),
                    },
                };
                let config = pipeline::batch_config(&gpu, opts.kernel, T::DTYPE, (batch, m, n));
                let host = HostMat::row_major(c.as_mut_ptr().cast::<T>(), dims.0, dims.1);
                pipeline::batched(&gpu, opts, config, (batch, m, k, n), &a_op, &b_op, host)
            }
        };
        done.map(|done| route::gpu_route::<T>(opts, done, batch, vec![ordinal]))
            .map_err(|f| f.error)
    };
    let result = on_gpu();
    match result {
        Ok(route) => Ok(Decision::Done(route)),
        // The output is fresh: nothing of the caller's was written.
        Err(e) if fall_back && !matches!(e, GpuDotError::HostOutOfMemory { .. }) => {
            *out = None;
            Ok(Decision::Cpu(CpuReason::GpuUnavailable(e)))
        }
        Err(e) => Err(e),
    }
}

/// A new standard-layout `batch × m × n` host stack, not initialised (see [`fresh`](crate::host::fresh::fresh)).
fn fresh3<T: Element>(
    (batch, m, n): (usize, usize, usize),
) -> Result<Array3<MaybeUninit<T>>, GpuDotError> {
    let data = crate::host::fresh::fresh_vec::<T>((batch * m, n))?;
    Ok(Array3::from_shape_vec((batch, m, n), data).expect("batch·m·n elements"))
}

/// The batch on the CPU, by ndarray: one product when the items of A stack down the rows of
/// one matrix and B is shared, else one product per item.
pub(crate) fn cpu<T: LinalgScalar>(a: &ArrayView3<'_, T>, b: &Rhs<'_, T>) -> Array3<T> {
    let (batch, m, _) = a.dim();
    let n = b.dim().2;
    let mut c = Array3::zeros((batch, m, n));
    if let (Rhs::Shared(bv), Some((a2, Stack::Rows))) = (b, flatten(a.view())) {
        let slice = c.as_slice_mut().expect("a new stack is contiguous");
        let mut c2 = ArrayViewMut2::from_shape((batch * m, n), slice).expect("batch·m·n");
        general_mat_mul(T::one(), &a2, bv, T::zero(), &mut c2);
        return c;
    }
    for (z, mut cz) in c.outer_iter_mut().enumerate() {
        let az = a.index_axis(Axis(0), z);
        match b {
            Rhs::Each(v) => {
                general_mat_mul(T::one(), &az, &v.index_axis(Axis(0), z), T::zero(), &mut cz)
            }
            Rhs::Shared(v) => general_mat_mul(T::one(), &az, v, T::zero(), &mut cz),
        }
    }
    c
}

/// Panics for a batch whose shapes disagree, in the words of ndarray's `dot`.
#[cold]
#[inline(never)]
#[track_caller]
fn batch_shape_error(
    (batch, m, k): (usize, usize, usize),
    (batch2, k2, n): (Option<usize>, usize, usize),
) -> ! {
    match batch2 {
        Some(b2) => panic!(
            "gpu-dot: inputs {batch} × {m} × {k} and {b2} × {k2} × {n} are not compatible for \
             a batched matrix multiplication"
        ),
        None => panic!(
            "gpu-dot: inputs {batch} × {m} × {k} and {k2} × {n} are not compatible for a \
             batched matrix multiplication"
        ),
    }
}

/// The batched forms: a 3-D left operand is a stack of matrices, multiplied item by item by a
/// 3-D right operand of as many items, or each by one shared 2-D right operand.
macro_rules! batch_forms {
    ($rhs:ty, |$b:ident| $wrap:expr) => {
        impl<A, S, S2> GpuDot<ArrayBase<S2, $rhs>> for ArrayBase<S, Ix3>
        where
            A: GpuScalar,
            S: Data<Elem = A>,
            S2: Data<Elem = A>,
        {
            type Output = Array3<A>;

            #[track_caller]
            fn gpu_dot(&self, rhs: &ArrayBase<S2, $rhs>) -> Array3<A> {
                let make = || {
                    let $b = rhs.view();
                    $wrap
                };
                let dims = make().dim();
                if check_batch_shapes(self.dim(), dims).is_err() {
                    batch_shape_error(self.dim(), dims);
                }
                let (batch, m, k) = self.dim();
                let empty = batch == 0 || m == 0 || k == 0 || dims.2 == 0;
                if !empty && A::cpu_first(batch, (m, k, dims.2)) {
                    return A::batch_cpu(&self.view(), &make());
                }
                match A::batch_dot(self.view(), make(), DotOptions::env_ref(), true) {
                    Ok(product) => product.c,
                    // Only a host allocation failure for the result gets here.
                    Err(_) => A::batch_cpu(&self.view(), &make()),
                }
            }

            fn try_gpu_dot(&self, rhs: &ArrayBase<S2, $rhs>) -> Result<Array3<A>, GpuDotError> {
                Ok(self.try_gpu_dot_with(rhs, &DotOptions::from_env()?)?.c)
            }

            fn try_gpu_dot_with(
                &self,
                rhs: &ArrayBase<S2, $rhs>,
                opts: &DotOptions,
            ) -> Result<Product<Array3<A>>, GpuDotError> {
                let $b = rhs.view();
                A::batch_dot(self.view(), $wrap, opts, false)
            }
        }
    };
}

batch_forms!(Ix3, |b| Rhs::Each(b));
batch_forms!(Ix2, |b| Rhs::Shared(b));

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{s, Array};

    /// Every item of `v` read back from its flattened form as the device reads it.
    fn items_of_flat(v: ArrayView3<'_, f32>) {
        let (batch, r, c) = v.dim();
        let mut copy = None;
        let op = operand(v, &mut copy);
        for z in 0..batch {
            let item = match op.stack {
                Stack::Rows => op.view.slice(s![z * r..(z + 1) * r, ..]),
                Stack::Cols => op.view.slice(s![.., z * c..(z + 1) * c]),
                Stack::Shared => unreachable!(),
            };
            assert_eq!(item, v.index_axis(Axis(0), z), "item {z}");
        }
    }

    #[test]
    fn stacks_flatten_whatever_their_layout() {
        let base = Array::from_shape_fn((4, 5, 6), |(i, j, l)| (i * 100 + j * 10 + l) as f32);
        let f = base.t().as_standard_layout().into_owned().reversed_axes();
        assert_eq!(f, base);
        // C order: items one below the other.
        assert_eq!(flatten(base.view()).unwrap().1, Stack::Rows);
        // Each item transposed, items still apart: side by side.
        let t = base.view().permuted_axes([0, 2, 1]);
        assert_eq!(flatten(t).unwrap().1, Stack::Cols);
        // F order interleaves the items: copied.
        assert!(flatten(f.view()).is_none());
        for v in [
            base.view(),
            t,
            f.view(),
            base.slice(s![..;2, .., ..]),
            base.slice(s![.., 1..4, 2..5]),
            base.slice(s![..;-1, ..;-1, ..]),
            base.slice(s![1..2, .., ..]),
            base.slice(s![.., 2..3, ..]),
            base.slice(s![.., .., 3..4]),
        ] {
            items_of_flat(v);
        }
    }

    #[test]
    fn batch_shapes_are_checked_like_dot() {
        assert!(check_batch_shapes((2, 3, 4), (Some(2), 4, 5)).is_ok());
        assert!(check_batch_shapes((2, 3, 4), (None, 4, 5)).is_ok());
        assert!(matches!(
            check_batch_shapes((2, 3, 4), (Some(3), 4, 5)),
            Err(GpuDotError::BatchMismatch {
                batch: 2,
                batch2: 3
            })
        ));
        assert!(matches!(
            check_batch_shapes((2, 3, 4), (None, 5, 5)),
            Err(GpuDotError::ShapeMismatch {
                m: 3,
                k: 4,
                k2: 5,
                n: 5
            })
        ));
        assert!(matches!(
            check_batch_shapes((usize::MAX / 2, 3, 4), (None, 4, 5)),
            Err(GpuDotError::TooLarge { .. })
        ));
    }
}

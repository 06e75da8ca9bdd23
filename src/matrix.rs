//! Device-resident matrices and the general product `C = alpha·A·B + beta·C` over host and
//! device operands.
//!
//! A [`GpuMatrix`] is uploaded once and multiplied many times; products between device
//! matrices stay on the device, so chains such as `x·W1·W2` make no round trips:
//!
//! ```no_run
//! use gpu_dot::GpuMatrix;
//! use ndarray::Array2;
//!
//! # fn main() -> Result<(), gpu_dot::GpuDotError> {
//! let x = Array2::<f32>::ones((512, 784));
//! let w1 = GpuMatrix::from_array(&Array2::<f32>::ones((784, 256)))?;
//! let w2 = GpuMatrix::from_array(&Array2::<f32>::ones((256, 10)))?;
//! let y = GpuMatrix::product(&x, &w1)?.dot(&w2)?; // x is uploaded once; y stays on the device
//! let y = y.to_array()?; // one download
//! assert_eq!(y.dim(), (512, 10));
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use cudarc::driver::CudaSlice;
use ndarray::{Array2, ArrayBase, Data, DataMut, Ix2};

use crate::device::api::Device;
use crate::device::context::{self, Gpu, Home};
use crate::element::Element;
use crate::engine::aux::{self, Elementwise};
use crate::error::GpuDotError;
use crate::options::DotOptions;
use crate::pinned::PinnedArray;
use crate::pipeline::{self, DevMat, Dst, Gemm, Src};
use crate::route::{self, Decision, Route};
use crate::scalar::{GpuScalar, Operand, Output};

/// A matrix of `f32` (or of any [`GpuScalar`]: `GpuMatrix<f64>`, `GpuMatrix<Complex<f32>>`,
/// `GpuMatrix<Complex<f64>>`) in device memory, row-major.
///
/// Made by [`GpuMatrix::from_array`] (upload), [`GpuMatrix::zeros`] or a product; read back
/// with [`GpuMatrix::to_array`]. Every operation has completed on the device when it returns.
/// A complex matrix holds each element's parts side by side (num-complex's layout), and its
/// products run as the host arrays' do (docs/precision.md, "Complex matrices"): its right
/// operand is expanded on the device, a transposed left operand gathered there, and a
/// complex `alpha` or `beta` applied there.
pub struct GpuMatrix<A: GpuScalar = f32> {
    /// Freed on drop, unless the context it belongs to was reset since (then its memory is
    /// gone with the context, and freeing its address could free another allocation). Its
    /// elements' parts, for a complex matrix.
    buf: ManuallyDrop<CudaSlice<A::Reals>>,
    rows: usize,
    cols: usize,
    /// The device and context it was made on.
    home: Home,
}

impl<A: GpuScalar> Drop for GpuMatrix<A> {
    fn drop(&mut self) {
        let current = context::generation(self.home.ordinal);
        if *current == self.home.generation {
            // SAFETY: `buf` is not used again (this is the drop), and the context it belongs
            // to is the one in use: the read guard keeps a reset from coming in between.
            unsafe { ManuallyDrop::drop(&mut self.buf) };
        }
    }
}

/// A borrowed view of a [`GpuMatrix`], possibly transposed ([`GpuMatrix::t`]).
pub struct GpuView<'a, A: GpuScalar = f32> {
    mat: &'a GpuMatrix<A>,
    trans: bool,
}

impl<A: GpuScalar> Clone for GpuView<'_, A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A: GpuScalar> Copy for GpuView<'_, A> {}

/// The element type's name: `f32`, or `Complex<f32>`.
struct TypeName<A>(std::marker::PhantomData<A>);

impl<A: GpuScalar> fmt::Display for TypeName<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let real = <A::Real as Element>::DTYPE;
        if A::COMPLEX {
            write!(f, "Complex<{real}>")
        } else {
            write!(f, "{real}")
        }
    }
}

fn type_name<A: GpuScalar>() -> TypeName<A> {
    TypeName(std::marker::PhantomData)
}

impl<A: GpuScalar> fmt::Debug for GpuMatrix<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = type_name::<A>();
        write!(f, "GpuMatrix<{name}>({} × {})", self.rows, self.cols)
    }
}

impl<A: GpuScalar> fmt::Debug for GpuView<'_, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (r, c) = self.dim();
        write!(
            f,
            "GpuView<{}>({r} × {c}{})",
            type_name::<A>(),
            if self.trans { ", transposed" } else { "" }
        )
    }
}

/// The reals in each element: 1, or 2 for a complex type.
fn parts<A: GpuScalar>() -> usize {
    std::mem::size_of::<A>() / std::mem::size_of::<A::Reals>()
}

impl<A: GpuScalar> GpuMatrix<A> {
    /// Uploads `a` (any layout) to the default device ([`Device::default`]).
    pub fn from_array<S: Data<Elem = A>>(a: &ArrayBase<S, Ix2>) -> Result<Self, GpuDotError> {
        Self::from_array_on(a, Device::default())
    }

    /// Uploads `a` (any layout) to `device`.
    pub fn from_array_on<S: Data<Elem = A>>(
        a: &ArrayBase<S, Ix2>,
        device: impl Into<Device>,
    ) -> Result<Self, GpuDotError> {
        let gpu = context::gpu_on(device.into().ordinal())?;
        let (rows, cols) = a.dim();
        let buf = pipeline::upload(&gpu, A::device_reals(a.view()).view())?;
        Ok(GpuMatrix::new(&gpu, buf, (rows, cols)))
    }

    fn new(gpu: &Gpu, buf: CudaSlice<A::Reals>, (rows, cols): (usize, usize)) -> GpuMatrix<A> {
        GpuMatrix {
            buf: ManuallyDrop::new(buf),
            rows,
            cols,
            home: gpu.home(),
        }
    }

    /// The context of the matrix's device, if the matrix still belongs to it.
    fn gpu(&self) -> Result<Arc<Gpu>, GpuDotError> {
        let gpu = context::gpu_on(self.home.ordinal)?;
        gpu.check_home(self.home, self.dim())?;
        Ok(gpu)
    }

    /// The device the matrix lives on.
    pub fn device(&self) -> Device {
        Device::new(self.home.ordinal)
    }

    /// A copy of the matrix on `device` (through host memory when the devices differ).
    pub fn to_device(&self, device: impl Into<Device>) -> Result<GpuMatrix<A>, GpuDotError> {
        let device = device.into();
        if device == self.device() {
            let gpu = self.gpu()?;
            let buf = pipeline::duplicate(&gpu, &self.buf)?;
            return Ok(GpuMatrix::new(&gpu, buf, self.dim()));
        }
        GpuMatrix::from_array_on(&self.to_array()?, device)
    }

    /// A `rows × cols` matrix of zeros on the default device ([`Device::default`]).
    pub fn zeros(dim: (usize, usize)) -> Result<Self, GpuDotError> {
        Self::zeros_on(dim, Device::default())
    }

    /// A `rows × cols` matrix of zeros on `device`.
    pub fn zeros_on(
        (rows, cols): (usize, usize),
        device: impl Into<Device>,
    ) -> Result<Self, GpuDotError> {
        let gpu = context::gpu_on(device.into().ordinal())?;
        let buf = pipeline::zeros(&gpu, checked_len::<A>(rows, cols)? * parts::<A>())?;
        Ok(GpuMatrix::new(&gpu, buf, (rows, cols)))
    }

    /// The product `a · b` of any two operands (host arrays, device matrices or views), left
    /// on the device. Shapes must agree (`a` is m × k, `b` is k × n), else
    /// [`GpuDotError::ShapeMismatch`].
    pub fn product(
        a: &impl AsOperand<A>,
        b: &impl AsOperand<A>,
    ) -> Result<GpuMatrix<A>, GpuDotError> {
        Self::product_with(a, b, &DotOptions::from_env()?)
    }

    /// [`GpuMatrix::product`] with explicit options (kernel, autotuning, panel height; the
    /// backend must not be [`Backend::Cpu`](crate::Backend::Cpu)). The result lives on the device the options
    /// name ([`DotOptions::device`]), else on the device of the first device operand, else on
    /// the default device; a device operand elsewhere is [`GpuDotError::WrongDevice`].
    pub fn product_with(
        a: &impl AsOperand<A>,
        b: &impl AsOperand<A>,
        opts: &DotOptions,
    ) -> Result<GpuMatrix<A>, GpuDotError> {
        let (a, b) = (a.as_operand(), b.as_operand());
        let ((m, k), (k2, n)) = (a.0.dim(), b.0.dim());
        route::check_shapes((m, k), (k2, n))?;
        let homes = [a.0.home(), b.0.home()].map(|h| h.map(|(home, _)| home));
        let device = Device::new(route::device_for(opts, homes)?);
        let mut c = GpuMatrix::zeros_on((m, n), device)?;
        general(A::one(), &a, &b, A::zero(), &mut c.as_output(), opts, false)?;
        Ok(c)
    }

    /// `self · rhs`, left on the device. Never panics: incompatible shapes are
    /// [`GpuDotError::ShapeMismatch`].
    pub fn try_dot(&self, rhs: &impl AsOperand<A>) -> Result<GpuMatrix<A>, GpuDotError> {
        GpuMatrix::product(self, rhs)
    }

    /// The former name of [`try_dot`](GpuMatrix::try_dot).
    #[deprecated(note = "renamed `try_dot`: it returns a `Result`, where ndarray's `dot` panics")]
    pub fn dot(&self, rhs: &impl AsOperand<A>) -> Result<GpuMatrix<A>, GpuDotError> {
        self.try_dot(rhs)
    }

    /// Downloads the matrix into a new host array (C order).
    pub fn to_array(&self) -> Result<Array2<A>, GpuDotError> {
        let gpu = self.gpu()?;
        let reals = (self.rows, self.cols * parts::<A>());
        pipeline::download_fresh(&gpu, &self.buf, reals).map(A::from_device_reals)
    }

    /// Replaces the contents with `a`, which must have the same shape, else
    /// [`GpuDotError::OperandShapes`] (it returns a `Result`, so it never panics).
    pub fn assign<S: Data<Elem = A>>(&mut self, a: &ArrayBase<S, Ix2>) -> Result<(), GpuDotError> {
        self.same_shape(a.dim())?;
        let gpu = self.gpu()?;
        pipeline::upload_into(&gpu, A::device_reals(a.view()).view(), &mut self.buf)
    }

    /// Downloads the matrix into `out` (any layout), which must have the same shape, else
    /// [`GpuDotError::OperandShapes`]. Allocates nothing once the crate's staging buffers are
    /// warm (except for a complex `out` whose elements' parts are not side by side along its
    /// rows, which a new array fills first): the form for a training loop that reads a small
    /// result every step.
    pub fn copy_to<S: DataMut<Elem = A>>(
        &self,
        out: &mut ArrayBase<S, Ix2>,
    ) -> Result<(), GpuDotError> {
        self.same_shape(out.dim())?;
        let gpu = self.gpu()?;
        match A::device_reals_mut(out.view_mut()) {
            Ok(mut reals) => pipeline::download_into(&gpu, &self.buf, &mut reals),
            // A complex array whose parts are not side by side along its rows.
            Err(mut out) => {
                out.assign(&self.to_array()?);
                Ok(())
            }
        }
    }

    fn same_shape(&self, other: (usize, usize)) -> Result<(), GpuDotError> {
        if other == self.dim() {
            Ok(())
        } else {
            Err(GpuDotError::OperandShapes {
                left: self.dim(),
                right: other,
            })
        }
    }

    /// `(rows, cols)`.
    pub fn dim(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// Rows.
    pub fn nrows(&self) -> usize {
        self.rows
    }

    /// Columns.
    pub fn ncols(&self) -> usize {
        self.cols
    }

    /// The matrix as a view.
    pub fn view(&self) -> GpuView<'_, A> {
        GpuView {
            mat: self,
            trans: false,
        }
    }

    /// The transpose, as a view (no copy: kernels read it transposed).
    pub fn t(&self) -> GpuView<'_, A> {
        GpuView {
            mat: self,
            trans: true,
        }
    }
}

impl<A: Element> GpuMatrix<A> {
    /// The ReLU, in place on the device: every entry below zero (and every NaN) becomes zero,
    /// as `x.max(0.0)` does on the host.
    pub fn relu(&mut self) -> Result<(), GpuDotError> {
        let gpu = self.gpu()?;
        let len = self.rows * self.cols;
        aux::elementwise(&gpu, Elementwise::Relu(&mut self.buf), len)
    }

    /// The gradient through a ReLU, in place on the device: with `self` the gradient of the
    /// loss with respect to a layer's output and `activation` that output (after its
    /// [`relu`](GpuMatrix::relu)), zeroes every entry of `self` where `activation` is not
    /// positive. The shapes must be equal, else [`GpuDotError::OperandShapes`].
    pub fn relu_backward(&mut self, activation: &GpuMatrix<A>) -> Result<(), GpuDotError> {
        self.same_shape(activation.dim())?;
        let gpu = self.gpu()?;
        gpu.check_home(activation.home, activation.dim())?;
        let len = self.rows * self.cols;
        let op = Elementwise::ReluBackward {
            g: &mut self.buf,
            h: &activation.buf,
        };
        aux::elementwise(&gpu, op, len)
    }
}

impl<'a, A: GpuScalar> GpuView<'a, A> {
    /// `(rows, cols)` of the view.
    pub fn dim(&self) -> (usize, usize) {
        let (r, c) = self.mat.dim();
        if self.trans {
            (c, r)
        } else {
            (r, c)
        }
    }

    /// The transpose of the view.
    pub fn t(&self) -> GpuView<'a, A> {
        GpuView {
            mat: self.mat,
            trans: !self.trans,
        }
    }

    /// `self · rhs`, left on the device. Never panics: incompatible shapes are
    /// [`GpuDotError::ShapeMismatch`].
    pub fn try_dot(&self, rhs: &impl AsOperand<A>) -> Result<GpuMatrix<A>, GpuDotError> {
        GpuMatrix::product(self, rhs)
    }

    /// The former name of [`try_dot`](GpuView::try_dot).
    #[deprecated(note = "renamed `try_dot`: it returns a `Result`, where ndarray's `dot` panics")]
    pub fn dot(&self, rhs: &impl AsOperand<A>) -> Result<GpuMatrix<A>, GpuDotError> {
        self.try_dot(rhs)
    }
}

fn checked_len<A: GpuScalar>(rows: usize, cols: usize) -> Result<usize, GpuDotError> {
    rows.checked_mul(cols)
        .filter(|&l| l <= isize::MAX as usize / std::mem::size_of::<A>())
        .ok_or(GpuDotError::TooLarge {
            dims: (rows, 0, cols),
        })
}

mod sealed {
    /// Keeps [`AsOperand`](super::AsOperand) and [`AsOutput`](super::AsOutput) to the types
    /// this crate implements them for, so that they can grow without breaking anyone.
    pub trait Sealed {}
    impl<S: ndarray::RawData, D> Sealed for ndarray::ArrayBase<S, D> {}
    impl<A: crate::GpuScalar> Sealed for super::GpuMatrix<A> {}
    impl<A: crate::GpuScalar> Sealed for super::GpuView<'_, A> {}
    impl<A, D: ndarray::Dimension> Sealed for crate::PinnedArray<A, D> {}
}

/// What the general product reads: every 2-D ndarray array or view of a [`GpuScalar`] type,
/// [`PinnedArray`], [`GpuMatrix`] and [`GpuView`]. Sealed: implemented for those types only.
pub trait AsOperand<A: GpuScalar>: sealed::Sealed {
    /// The operand, borrowed.
    fn as_operand(&self) -> Operand<'_, A>;
}

/// What the general product writes: every mutable 2-D ndarray array or view of a
/// [`GpuScalar`] type, [`PinnedArray`], and [`GpuMatrix`]. Sealed: implemented for those types only.
pub trait AsOutput<A: GpuScalar>: sealed::Sealed {
    /// The output, borrowed mutably.
    fn as_output(&mut self) -> Output<'_, A>;
}

impl<A: GpuScalar, S: Data<Elem = A>> AsOperand<A> for ArrayBase<S, Ix2> {
    fn as_operand(&self) -> Operand<'_, A> {
        Operand(Src::Host(self.view()))
    }
}

impl<A: Element> AsOperand<A> for PinnedArray<A, Ix2> {
    fn as_operand(&self) -> Operand<'_, A> {
        Operand(Src::Host(self.view()))
    }
}

impl<A: Element> AsOutput<A> for PinnedArray<A, Ix2> {
    fn as_output(&mut self) -> Output<'_, A> {
        Output(Dst::Host(self.view_mut()))
    }
}

impl<A: GpuScalar> AsOperand<A> for GpuView<'_, A> {
    fn as_operand(&self) -> Operand<'_, A> {
        let (rows, cols) = self.dim();
        Operand(Src::Device {
            mat: DevMat {
                buf: &self.mat.buf,
                trans: self.trans,
                ld: self.mat.cols.max(1),
            },
            rows,
            cols,
            home: self.mat.home,
        })
    }
}

impl<A: GpuScalar> AsOperand<A> for GpuMatrix<A> {
    fn as_operand(&self) -> Operand<'_, A> {
        let (rows, cols) = self.dim();
        Operand(Src::Device {
            mat: DevMat {
                buf: &self.buf,
                trans: false,
                ld: cols.max(1),
            },
            rows,
            cols,
            home: self.home,
        })
    }
}

impl<A: GpuScalar, S: DataMut<Elem = A>> AsOutput<A> for ArrayBase<S, Ix2> {
    fn as_output(&mut self) -> Output<'_, A> {
        Output(Dst::Host(self.view_mut()))
    }
}

impl<A: GpuScalar> AsOutput<A> for GpuMatrix<A> {
    fn as_output(&mut self) -> Output<'_, A> {
        Output(Dst::Device {
            buf: &mut self.buf,
            rows: self.rows,
            cols: self.cols,
            ld: self.cols.max(1),
            home: self.home,
        })
    }
}

/// `C = alpha·A·B + beta·C` for host arrays, like ndarray's
/// [`general_mat_mul`](ndarray::linalg::general_mat_mul): `a` is m × k, `b` is k × n, `c` is
/// m × n, any layouts. On the GPU when the product is large enough and a GPU is usable, else
/// on the CPU (options from the environment). `beta == 0` never reads `c`.
///
/// **Panics** if the shapes are incompatible, with ndarray's message; and, with `beta != 0`,
/// if the device faults after the GPU wrote part of `c` (docs/faults.md): those rows' old
/// values are gone, so the product cannot be redone on the CPU. Any other GPU failure, and a
/// fault with `beta == 0`, is answered on the CPU. [`try_general_mat_mul`] returns the fault
/// instead.
///
/// ```
/// use ndarray::arr2;
///
/// let a = arr2(&[[1.0f32, 2.0], [3.0, 4.0]]);
/// let mut c = arr2(&[[1.0f32, 1.0], [1.0, 1.0]]);
/// gpu_dot::general_mat_mul(2.0, &a, &a, 1.0, &mut c);
/// assert_eq!(c, arr2(&[[15.0, 21.0], [31.0, 45.0]]));
///
/// let a = arr2(&[[1.0f64, 2.0], [3.0, 4.0]]);
/// let mut c = arr2(&[[1.0f64, 1.0], [1.0, 1.0]]);
/// gpu_dot::general_mat_mul(2.0, &a, &a, 1.0, &mut c);
/// assert_eq!(c, arr2(&[[15.0, 21.0], [31.0, 45.0]]));
/// ```
#[track_caller]
pub fn general_mat_mul<A, S1, S2, S3>(
    alpha: A,
    a: &ArrayBase<S1, Ix2>,
    b: &ArrayBase<S2, Ix2>,
    beta: A,
    c: &mut ArrayBase<S3, Ix2>,
) where
    A: GpuScalar,
    S1: Data<Elem = A>,
    S2: Data<Elem = A>,
    S3: DataMut<Elem = A>,
{
    let ((m, k), (k2, n)) = (a.dim(), b.dim());
    if k != k2 || c.dim() != (m, n) {
        crate::general_shape_error(a.dim(), b.dim(), c.dim());
    }
    let opts = DotOptions::default();
    if let Err(e) = A::general(alpha, a.view(), b.view(), beta, c, &opts, true) {
        // Only a device fault after part of C was written, with beta != 0, gets here.
        panic!(
            "gpu-dot: the GPU failed after writing part of the output, whose old values \
             beta multiplies: {e:#}"
        );
    }
}

/// `C = alpha·A·B + beta·C` over any operands ([`AsOperand`]: host arrays or views, device
/// matrices or views) into a host array or a [`GpuMatrix`], with options from the environment.
/// Returns the route taken. Never panics: incompatible shapes are
/// [`GpuDotError::ShapeMismatch`]. Under [`Backend::Auto`](crate::Backend::Auto), a GPU
/// failure is answered on the CPU, except a device fault after the GPU wrote part of a host C
/// with `beta != 0`: that is returned, and C then holds new values in some rows and old ones
/// in the rest.
pub fn try_general_mat_mul<A: GpuScalar>(
    alpha: A,
    a: &impl AsOperand<A>,
    b: &impl AsOperand<A>,
    beta: A,
    c: &mut impl AsOutput<A>,
) -> Result<Route, GpuDotError> {
    try_general_mat_mul_with(alpha, a, b, beta, c, &DotOptions::from_env()?)
}

/// The former name of [`try_general_mat_mul_with`], from before the `try_` forms were the
/// ones that return a `Result`.
#[deprecated(note = "renamed `try_general_mat_mul_with`: it returns a `Result`")]
pub fn general_mat_mul_with<A: GpuScalar>(
    alpha: A,
    a: &impl AsOperand<A>,
    b: &impl AsOperand<A>,
    beta: A,
    c: &mut impl AsOutput<A>,
    opts: &DotOptions,
) -> Result<Route, GpuDotError> {
    try_general_mat_mul_with(alpha, a, b, beta, c, opts)
}

/// [`try_general_mat_mul`] with explicit options.
pub fn try_general_mat_mul_with<A: GpuScalar>(
    alpha: A,
    a: &impl AsOperand<A>,
    b: &impl AsOperand<A>,
    beta: A,
    c: &mut impl AsOutput<A>,
    opts: &DotOptions,
) -> Result<Route, GpuDotError> {
    general(
        alpha,
        &a.as_operand(),
        &b.as_operand(),
        beta,
        &mut c.as_output(),
        opts,
        false,
    )
}

/// The general product of the element type: a real one through the router
/// ([`general_real`]), a complex one through the complex route (`complex/device.rs`).
pub(crate) fn general<A: GpuScalar>(
    alpha: A,
    a: &Operand<A>,
    b: &Operand<A>,
    beta: A,
    c: &mut Output<A>,
    opts: &DotOptions,
    fall_back: bool,
) -> Result<Route, GpuDotError> {
    A::general_operands(alpha, a, b, beta, c, opts, fall_back)
}

/// The general product through the router; the CPU product, when routed there, is ndarray's
/// `general_mat_mul` into the host output.
pub(crate) fn general_real<A: Element>(
    alpha: A,
    a: &Operand<A>,
    b: &Operand<A>,
    beta: A,
    c: &mut Output<A>,
    opts: &DotOptions,
    fall_back: bool,
) -> Result<Route, GpuDotError> {
    let g = Gemm {
        alpha,
        a: &a.0,
        b: &b.0,
        beta,
        c: &mut c.0,
    };
    match route::route(g, opts, fall_back)? {
        Decision::Done(route) => Ok(route),
        Decision::Cpu(why) => {
            let (Src::Host(av), Src::Host(bv), Dst::Host(cv)) = (&a.0, &b.0, &mut c.0) else {
                unreachable!("the router sends only host products to the CPU")
            };
            ndarray::linalg::general_mat_mul(alpha, av, bv, beta, cv);
            Ok(Route::Cpu(why))
        }
    }
}

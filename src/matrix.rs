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

use crate::context::{self, Gpu};
use crate::dispatch::{self, CpuReason, Route};
use crate::error::GpuDotError;
use crate::options::{Backend, DotOptions};
use crate::pipeline::{self, DevMat, Dst, Elementwise, Gemm, Src};

/// An `f32` matrix in device memory, row-major.
///
/// Made by [`GpuMatrix::from_array`] (upload), [`GpuMatrix::zeros`] or a product; read back
/// with [`GpuMatrix::to_array`]. Every operation has completed on the device when it returns.
pub struct GpuMatrix {
    /// Freed on drop, unless the context it belongs to was reset since (then its memory is
    /// gone with the context, and freeing its address could free another allocation).
    buf: ManuallyDrop<CudaSlice<f32>>,
    rows: usize,
    cols: usize,
    /// The context generation it was made in.
    generation: u64,
}

impl Drop for GpuMatrix {
    fn drop(&mut self) {
        let current = context::generation();
        if *current == self.generation {
            // SAFETY: `buf` is not used again (this is the drop), and the context it belongs
            // to is the one in use: the read guard keeps a reset from coming in between.
            unsafe { ManuallyDrop::drop(&mut self.buf) };
        }
    }
}

/// A borrowed view of a [`GpuMatrix`], possibly transposed ([`GpuMatrix::t`]).
#[derive(Clone, Copy)]
pub struct GpuView<'a> {
    mat: &'a GpuMatrix,
    trans: bool,
}

impl fmt::Debug for GpuMatrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GpuMatrix({} × {})", self.rows, self.cols)
    }
}

impl fmt::Debug for GpuView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (r, c) = self.dim();
        write!(
            f,
            "GpuView({r} × {c}{})",
            if self.trans { ", transposed" } else { "" }
        )
    }
}

impl GpuMatrix {
    /// Uploads `a` (any layout) to the device.
    pub fn from_array<S: Data<Elem = f32>>(a: &ArrayBase<S, Ix2>) -> Result<Self, GpuDotError> {
        let gpu = context::gpu()?;
        let (rows, cols) = a.dim();
        let buf = pipeline::upload(&gpu, a.view())?;
        Ok(GpuMatrix::new(&gpu, buf, (rows, cols)))
    }

    fn new(gpu: &Gpu, buf: CudaSlice<f32>, (rows, cols): (usize, usize)) -> GpuMatrix {
        GpuMatrix {
            buf: ManuallyDrop::new(buf),
            rows,
            cols,
            generation: gpu.generation,
        }
    }

    /// The context, if this matrix belongs to it.
    fn gpu(&self) -> Result<Arc<Gpu>, GpuDotError> {
        let gpu = context::gpu()?;
        if gpu.generation == self.generation {
            Ok(gpu)
        } else {
            Err(GpuDotError::MatrixLost { dim: self.dim() })
        }
    }

    /// A `rows × cols` matrix of zeros on the device.
    pub fn zeros((rows, cols): (usize, usize)) -> Result<Self, GpuDotError> {
        let gpu = context::gpu()?;
        let buf = pipeline::zeros(&gpu, checked_len(rows, cols)?)?;
        Ok(GpuMatrix::new(&gpu, buf, (rows, cols)))
    }

    /// The product `a · b` of any two operands (host arrays, device matrices or views), left
    /// on the device. Shapes must agree (`a` is m × k, `b` is k × n), else
    /// [`GpuDotError::ShapeMismatch`].
    pub fn product(a: &impl AsOperand, b: &impl AsOperand) -> Result<GpuMatrix, GpuDotError> {
        Self::product_with(a, b, &DotOptions::from_env()?)
    }

    /// [`GpuMatrix::product`] with explicit options (kernel, autotuning, panel height; the
    /// backend must not be [`Backend::Cpu`]).
    pub fn product_with(
        a: &impl AsOperand,
        b: &impl AsOperand,
        opts: &DotOptions,
    ) -> Result<GpuMatrix, GpuDotError> {
        let (a, b) = (a.as_operand(), b.as_operand());
        let ((m, k), (k2, n)) = (a.0.dim(), b.0.dim());
        dispatch::check_shapes((m, k), (k2, n))?;
        let mut c = GpuMatrix::zeros((m, n))?;
        general(1.0, &a, &b, 0.0, &mut c.as_output(), opts, false)?;
        Ok(c)
    }

    /// `self · rhs`, left on the device.
    pub fn dot(&self, rhs: &impl AsOperand) -> Result<GpuMatrix, GpuDotError> {
        GpuMatrix::product(self, rhs)
    }

    /// Downloads the matrix into a new host array (C order).
    pub fn to_array(&self) -> Result<Array2<f32>, GpuDotError> {
        let gpu = self.gpu()?;
        pipeline::download_fresh(&gpu, &self.buf, (self.rows, self.cols))
    }

    /// Replaces the contents with `a`, which must have the same shape.
    pub fn assign<S: Data<Elem = f32>>(
        &mut self,
        a: &ArrayBase<S, Ix2>,
    ) -> Result<(), GpuDotError> {
        assert_eq!(a.dim(), self.dim(), "assign: shapes differ");
        let gpu = self.gpu()?;
        pipeline::upload_into(&gpu, a.view(), &mut self.buf)
    }

    /// Downloads the matrix into `out` (any layout), which must have the same shape, else
    /// [`GpuDotError::OutputShape`]. Allocates nothing once the crate's staging buffers are
    /// warm: the form for a training loop that reads a small result every step.
    pub fn copy_to<S: DataMut<Elem = f32>>(
        &self,
        out: &mut ArrayBase<S, Ix2>,
    ) -> Result<(), GpuDotError> {
        self.same_shape(out.dim())?;
        let gpu = self.gpu()?;
        pipeline::download_into(&gpu, &self.buf, &mut out.view_mut())
    }

    /// The ReLU, in place on the device: every entry below zero (and every NaN) becomes zero,
    /// as `x.max(0.0)` does on the host.
    pub fn relu(&mut self) -> Result<(), GpuDotError> {
        let gpu = self.gpu()?;
        let len = self.rows * self.cols;
        pipeline::elementwise(&gpu, Elementwise::Relu(&mut self.buf), len)
    }

    /// The gradient through a ReLU, in place on the device: with `self` the gradient of the
    /// loss with respect to a layer's output and `activation` that output (after its
    /// [`relu`](GpuMatrix::relu)), zeroes every entry of `self` where `activation` is not
    /// positive. The shapes must be equal, else [`GpuDotError::OutputShape`].
    pub fn relu_backward(&mut self, activation: &GpuMatrix) -> Result<(), GpuDotError> {
        self.same_shape(activation.dim())?;
        let gpu = self.gpu()?;
        if activation.generation != gpu.generation {
            return Err(GpuDotError::MatrixLost {
                dim: activation.dim(),
            });
        }
        let len = self.rows * self.cols;
        let op = Elementwise::ReluBackward {
            g: &mut self.buf,
            h: &activation.buf,
        };
        pipeline::elementwise(&gpu, op, len)
    }

    fn same_shape(&self, found: (usize, usize)) -> Result<(), GpuDotError> {
        if found == self.dim() {
            Ok(())
        } else {
            Err(GpuDotError::OutputShape {
                expected: self.dim(),
                found,
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
    pub fn view(&self) -> GpuView<'_> {
        GpuView {
            mat: self,
            trans: false,
        }
    }

    /// The transpose, as a view (no copy: kernels read it transposed).
    pub fn t(&self) -> GpuView<'_> {
        GpuView {
            mat: self,
            trans: true,
        }
    }
}

impl<'a> GpuView<'a> {
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
    pub fn t(&self) -> GpuView<'a> {
        GpuView {
            mat: self.mat,
            trans: !self.trans,
        }
    }

    /// `self · rhs`, left on the device.
    pub fn dot(&self, rhs: &impl AsOperand) -> Result<GpuMatrix, GpuDotError> {
        GpuMatrix::product(self, rhs)
    }
}

fn checked_len(rows: usize, cols: usize) -> Result<usize, GpuDotError> {
    rows.checked_mul(cols)
        .filter(|&l| l <= isize::MAX as usize / 4)
        .ok_or(GpuDotError::TooLarge {
            dims: (rows, 0, cols),
        })
}

/// An operand of the general product: a host array or view of any layout, or a device matrix
/// or view. Made by [`AsOperand::as_operand`].
pub struct Operand<'a>(pub(crate) Src<'a>);

/// The output of the general product: a host array or mutable view, or a device matrix. Made
/// by [`AsOutput::as_output`].
pub struct Output<'a>(pub(crate) Dst<'a>);

/// What the general product reads: every 2-D `f32` ndarray array or view, [`GpuMatrix`] and
/// [`GpuView`].
pub trait AsOperand {
    /// The operand, borrowed.
    fn as_operand(&self) -> Operand<'_>;
}

/// What the general product writes: every mutable 2-D `f32` ndarray array or view, and
/// [`GpuMatrix`].
pub trait AsOutput {
    /// The output, borrowed mutably.
    fn as_output(&mut self) -> Output<'_>;
}

impl<S: Data<Elem = f32>> AsOperand for ArrayBase<S, Ix2> {
    fn as_operand(&self) -> Operand<'_> {
        Operand(Src::Host(self.view()))
    }
}

impl AsOperand for GpuView<'_> {
    fn as_operand(&self) -> Operand<'_> {
        let (rows, cols) = self.dim();
        Operand(Src::Device {
            mat: DevMat {
                buf: &self.mat.buf,
                trans: self.trans,
                ld: self.mat.cols.max(1),
            },
            rows,
            cols,
            generation: self.mat.generation,
        })
    }
}

impl AsOperand for GpuMatrix {
    fn as_operand(&self) -> Operand<'_> {
        let (rows, cols) = self.dim();
        Operand(Src::Device {
            mat: DevMat {
                buf: &self.buf,
                trans: false,
                ld: cols.max(1),
            },
            rows,
            cols,
            generation: self.generation,
        })
    }
}

impl<S: DataMut<Elem = f32>> AsOutput for ArrayBase<S, Ix2> {
    fn as_output(&mut self) -> Output<'_> {
        Output(Dst::Host(self.view_mut()))
    }
}

impl AsOutput for GpuMatrix {
    fn as_output(&mut self) -> Output<'_> {
        Output(Dst::Device {
            buf: &mut self.buf,
            rows: self.rows,
            cols: self.cols,
            ld: self.cols.max(1),
            generation: self.generation,
        })
    }
}

/// `C = alpha·A·B + beta·C` for host arrays, like ndarray's
/// [`general_mat_mul`](ndarray::linalg::general_mat_mul): `a` is m × k, `b` is k × n, `c` is
/// m × n, any layouts. On the GPU when the product is large enough and a GPU is usable, else
/// on the CPU (options from the environment). `beta == 0` never reads `c`.
///
/// **Panics** if the shapes are incompatible, with ndarray's message.
///
/// ```
/// use ndarray::arr2;
///
/// let a = arr2(&[[1.0f32, 2.0], [3.0, 4.0]]);
/// let mut c = arr2(&[[1.0f32, 1.0], [1.0, 1.0]]);
/// gpu_dot::general_mat_mul(2.0, &a, &a, 1.0, &mut c);
/// assert_eq!(c, arr2(&[[15.0, 21.0], [31.0, 45.0]]));
/// ```
#[track_caller]
pub fn general_mat_mul<S1, S2, S3>(
    alpha: f32,
    a: &ArrayBase<S1, Ix2>,
    b: &ArrayBase<S2, Ix2>,
    beta: f32,
    c: &mut ArrayBase<S3, Ix2>,
) where
    S1: Data<Elem = f32>,
    S2: Data<Elem = f32>,
    S3: DataMut<Elem = f32>,
{
    let ((m, k), (k2, n)) = (a.dim(), b.dim());
    if k != k2 || c.dim() != (m, n) {
        crate::general_shape_error(a.dim(), b.dim(), c.dim());
    }
    let opts = DotOptions::default();
    let (a, b) = (a.as_operand(), b.as_operand());
    if let Err(e) = general(alpha, &a, &b, beta, &mut c.as_output(), &opts, true) {
        // Only a device fault after part of C was written gets here.
        panic!("gpu-dot: the GPU failed after writing part of the output: {e}");
    }
}

/// `C = alpha·A·B + beta·C` over any operands ([`AsOperand`]: host arrays or views, device
/// matrices or views) into a host array or a [`GpuMatrix`], with options from the environment.
/// Returns the route taken. Never panics: incompatible shapes are
/// [`GpuDotError::ShapeMismatch`].
pub fn try_general_mat_mul(
    alpha: f32,
    a: &impl AsOperand,
    b: &impl AsOperand,
    beta: f32,
    c: &mut impl AsOutput,
) -> Result<Route, GpuDotError> {
    general_mat_mul_with(alpha, a, b, beta, c, &DotOptions::from_env()?)
}

/// [`try_general_mat_mul`] with explicit options.
pub fn general_mat_mul_with(
    alpha: f32,
    a: &impl AsOperand,
    b: &impl AsOperand,
    beta: f32,
    c: &mut impl AsOutput,
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

/// The pipeline's description of `C = alpha·A·B + beta·C`.
fn product<'g, 'a, 'b, 'c>(
    alpha: f32,
    a: &'g Operand<'a>,
    b: &'g Operand<'b>,
    beta: f32,
    c: &'g mut Output<'c>,
) -> Gemm<'g, 'a, 'b, 'c> {
    Gemm {
        alpha,
        a: &a.0,
        b: &b.0,
        beta,
        c: &mut c.0,
    }
}

/// The general product with routing: all-host products go to the CPU when the options say so,
/// below the threshold, and when the GPU fails under [`Backend::Auto`] (or under any backend
/// with `always_fall_back`) before writing any of C; any device operand means the GPU.
fn general(
    alpha: f32,
    a: &Operand,
    b: &Operand,
    beta: f32,
    c: &mut Output,
    opts: &DotOptions,
    always_fall_back: bool,
) -> Result<Route, GpuDotError> {
    let ((m, k), (k2, n)) = (a.0.dim(), b.0.dim());
    dispatch::check_shapes((m, k), (k2, n))?;
    if c.0.dim() != (m, n) {
        return Err(GpuDotError::OutputShape {
            expected: (m, n),
            found: c.0.dim(),
        });
    }
    if m == 0 || n == 0 {
        return Ok(Route::Empty);
    }
    let (Src::Host(av), Src::Host(bv), Dst::Host(_)) = (&a.0, &b.0, &c.0) else {
        if opts.backend == Backend::Cpu {
            return Err(GpuDotError::NoDevice {
                reason: "the CPU backend cannot take device operands".into(),
            });
        }
        let gpu = context::gpu()?;
        return pipeline::gemm(&gpu, opts, product(alpha, a, b, beta, c))
            .map(|done| dispatch::gpu_route(opts, done))
            .map_err(|f| f.error);
    };
    let cpu = |why, c: &mut Output| {
        let Dst::Host(cv) = &mut c.0 else {
            unreachable!("checked above")
        };
        ndarray::linalg::general_mat_mul(alpha, av, bv, beta, cv);
        Ok(Route::Cpu(why))
    };
    let flops = dispatch::flops(m, k, n);
    match opts.backend {
        Backend::Cpu => return cpu(CpuReason::Requested, c),
        Backend::Auto if flops < opts.min_gpu_flops => {
            return cpu(
                CpuReason::BelowThreshold {
                    flops,
                    threshold: opts.min_gpu_flops,
                },
                c,
            )
        }
        _ => {}
    }
    let fall_back = always_fall_back || opts.backend == Backend::Auto;
    let gpu = match context::gpu() {
        Ok(gpu) => gpu,
        Err(e) if fall_back => return cpu(CpuReason::GpuUnavailable(e), c),
        Err(e) => return Err(e),
    };
    match pipeline::gemm(&gpu, opts, product(alpha, a, b, beta, c)) {
        Ok(done) => Ok(dispatch::gpu_route(opts, done)),
        Err(f) if fall_back && !f.touched => cpu(CpuReason::GpuUnavailable(f.error), c),
        Err(f) => Err(f.error),
    }
}

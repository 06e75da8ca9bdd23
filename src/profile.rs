//! Device-side measurements of single kernels, for benches and the ladder example.
//!
//! [`DeviceProblem`] keeps random operands on the device so that a kernel can be timed alone,
//! without host↔device copies, with CUDA events.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};
use ndarray::{Array2, ArrayView2};

use crate::accuracy::Dot2;
use crate::device::context::{self, Gpu};
use crate::device::stopwatch::Stopwatch;
use crate::element::{Dtype, Element};
use crate::engine::args::{self, DeviceOperand, GemmArgs, Scratch};
use crate::error::GpuDotError;
use crate::options::{Kernel, Precision};

/// Complex products resident on the device, for the complex ladder.
pub mod complex;

/// A `rows × cols` matrix of uniform random values in [-1, 1), never all zero, from `seed`
/// (SplitMix64; the same seed gives the same matrix on every machine).
pub fn random_matrix(rows: usize, cols: usize, seed: u64) -> Array2<f32> {
    random_matrix_of(rows, cols, seed)
}

/// [`random_matrix`] for any element type: the `f32` values have 24 random bits, the `f64`
/// values 53.
pub fn random_matrix_of<A: Element>(rows: usize, cols: usize, seed: u64) -> Array2<A> {
    let mut state = seed;
    Array2::from_shape_simple_fn((rows, cols), || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        match A::DTYPE {
            Dtype::F32 => A::from_f64(f64::from(
                ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0,
            )),
            _ => A::from_f64(((z >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0),
        }
    })
}

/// Row `i` of `a · b` to about twice `f64` precision, as unevaluated sums `hi + lo`
/// (compensated dot products: Ogita, Rump and Oishi's Dot2, with FMA).
fn row_dot2<A: Element>(a: ArrayView2<A>, b: ArrayView2<A>, i: usize) -> Vec<(f64, f64)> {
    let (k, n) = b.dim();
    (0..n)
        .map(|j| {
            let mut sum = Dot2::default();
            for q in 0..k {
                sum.add(a[[i, q]].into_f64(), b[[q, j]].into_f64());
            }
            sum.value()
        })
        .collect()
}

/// Rows of `a · b` to about twice `f64` precision, for the error of `f64` products, whose
/// own error is far below an `f64` reference's: up to `samples` rows spread evenly over the
/// product (all rows when there are no more), computed on several threads.
pub struct SampledReference {
    rows: Vec<usize>,
    values: Vec<Vec<(f64, f64)>>,
}

impl SampledReference {
    /// The reference rows of `a · b`.
    pub fn new<A: Element>(a: ArrayView2<A>, b: ArrayView2<A>, samples: usize) -> Self {
        let m = a.nrows();
        let rows: Vec<usize> = if m <= samples.max(1) {
            (0..m).collect()
        } else {
            (0..samples).map(|s| s * m / samples).collect()
        };
        let values = std::thread::scope(|scope| {
            let handles: Vec<_> = rows
                .iter()
                .map(|&i| scope.spawn(move || row_dot2(a, b, i)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a reference row"))
                .collect()
        });
        SampledReference { rows, values }
    }

    /// ‖c − a·b‖_F / ‖a·b‖_F over the sampled rows.
    pub fn relative_error<A: Element>(&self, c: ArrayView2<A>) -> f64 {
        let (mut diff, mut norm) = (0.0f64, 0.0f64);
        for (&i, row) in self.rows.iter().zip(&self.values) {
            for (j, &(hi, lo)) in row.iter().enumerate() {
                let d = (c[[i, j]].into_f64() - hi) - lo;
                diff += d * d;
                norm += hi * hi;
            }
        }
        if norm == 0.0 {
            diff.sqrt()
        } else {
            (diff / norm).sqrt()
        }
    }
}

/// ‖c − a·b‖_F / ‖a·b‖_F over up to `samples` rows of `c` ([`SampledReference`]).
pub fn relative_error_sampled<A: Element>(
    c: ArrayView2<A>,
    a: ArrayView2<A>,
    b: ArrayView2<A>,
    samples: usize,
) -> f64 {
    SampledReference::new(a, b, samples).relative_error(c)
}

/// ‖c − a·b‖_F / ‖a·b‖_F with the reference product computed in f64 on the CPU (for `f32`
/// products; see [`relative_error_sampled`] for `f64`).
pub fn relative_error(c: ArrayView2<f32>, a: ArrayView2<f32>, b: ArrayView2<f32>) -> f64 {
    relative_error_to(c, &reference_f64(a, b))
}

/// `a · b` computed in f64 on the CPU.
pub fn reference_f64<A: Element>(a: ArrayView2<A>, b: ArrayView2<A>) -> Array2<f64> {
    a.mapv(Element::into_f64).dot(&b.mapv(Element::into_f64))
}

/// ‖c − reference‖_F / ‖reference‖_F (NaN when `c` holds a NaN).
pub fn relative_error_to<A: Element>(c: ArrayView2<A>, reference: &Array2<f64>) -> f64 {
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (&x, &r) in c.iter().zip(reference.iter()) {
        diff += (x.into_f64() - r).powi(2);
        norm += r * r;
    }
    if norm == 0.0 {
        diff.sqrt()
    } else {
        (diff / norm).sqrt()
    }
}

/// Event timings of repeated launches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// Median milliseconds per launch.
    pub median_ms: f64,
    /// Fastest launch, in milliseconds.
    pub min_ms: f64,
    /// `2·m·k·n` over the median time, in GFLOP/s.
    pub gflops: f64,
}

impl Timing {
    /// The timing of runs that took `times` milliseconds (at least one) doing `flops` each.
    pub(crate) fn of(mut times: Vec<f64>, flops: f64) -> Timing {
        times.sort_by(f64::total_cmp);
        let median_ms = times[times.len() / 2];
        Timing {
            median_ms,
            min_ms: times[0],
            gflops: flops / (median_ms * 1e6),
        }
    }
}

/// Random row-major operands of an `m × k × n` product of `f32` (or `f64`:
/// `DeviceProblem<f64>`), resident on the device.
pub struct DeviceProblem<A: Element = f32> {
    gpu: Arc<Gpu>,
    stream: Arc<CudaStream>,
    dims: (usize, usize, usize),
    host_a: Array2<A>,
    host_b: Array2<A>,
    a: CudaSlice<A>,
    b: CudaSlice<A>,
    c: CudaSlice<A>,
    /// The split-K and Ozaki workspace, kept across launches.
    scratch: Scratch,
    /// The precision the crate's kernels run in.
    precision: Precision,
    /// What the last launch ran in, and what its guard found.
    last: Option<(Precision, Option<crate::GuardReport>)>,
    #[cfg(feature = "cublas")]
    blas: Option<cudarc::cublas::CudaBlas>,
    /// Whether cuBLAS SGEMM may use TF32: asked for, and as last set on the handle.
    #[cfg(feature = "cublas")]
    cublas_tf32: (bool, bool),
}

impl<A: Element> DeviceProblem<A> {
    /// Uploads random `m × k` and `k × n` operands (drawn from `seed`) and allocates `C`.
    pub fn new(m: usize, k: usize, n: usize, seed: u64) -> Result<Self, GpuDotError> {
        Self::from_arrays(
            random_matrix_of::<A>(m, k, seed),
            random_matrix_of::<A>(k, n, seed ^ 0x5EED),
        )
    }

    /// Uploads the given operands (standard layout after a copy if needed) and allocates `C`.
    ///
    /// # Panics
    /// If a dimension is zero or the inner dimensions differ.
    pub fn from_arrays(host_a: Array2<A>, host_b: Array2<A>) -> Result<Self, GpuDotError> {
        let ((m, k), (k2, n)) = (host_a.dim(), host_b.dim());
        assert_eq!(k, k2, "inner dimensions differ");
        assert!(
            m > 0 && k > 0 && n > 0,
            "a device problem needs non-zero dimensions"
        );
        let (host_a, host_b) = (
            host_a.as_standard_layout().into_owned(),
            host_b.as_standard_layout().into_owned(),
        );
        let gpu = context::gpu()?;
        let stream = gpu
            .ctx
            .new_stream()
            .map_err(GpuDotError::at("creating a stream"))?;
        let a = args::upload(&stream, host_a.as_slice().expect("fresh array"))?;
        let b = args::upload(&stream, host_b.as_slice().expect("fresh array"))?;
        let c = args::alloc::<A>(&stream, m * n)?;
        Ok(DeviceProblem {
            gpu,
            stream,
            dims: (m, k, n),
            host_a,
            host_b,
            a,
            b,
            c,
            scratch: Scratch::default(),
            precision: Precision::Native,
            last: None,
            #[cfg(feature = "cublas")]
            blas: None,
            #[cfg(feature = "cublas")]
            cublas_tf32: (false, false),
        })
    }

    /// Runs and times this problem's kernels in `precision` from now on (`f32`; default
    /// [`Precision::Native`]).
    pub fn set_precision(&mut self, precision: Precision) {
        self.precision = precision;
    }

    /// The left operand, as uploaded.
    pub fn a(&self) -> ArrayView2<'_, A> {
        self.host_a.view()
    }

    /// The right operand, as uploaded.
    pub fn b(&self) -> ArrayView2<'_, A> {
        self.host_b.view()
    }

    fn launch(&mut self, kernel: Kernel) -> Result<(), GpuDotError> {
        let (_, k, n) = self.dims;
        let a = DeviceOperand {
            buf: self.a.as_view(),
            trans: false,
            ld: k,
        };
        let b = DeviceOperand {
            buf: self.b.as_view(),
            trans: false,
            ld: n,
        };
        let mut c = self.c.as_view_mut();
        let args = GemmArgs::new(self.dims, &a, &b, &c, n)?.with_precision(self.precision);
        crate::engine::tuner::launch_isolated(
            &self.gpu,
            &self.stream,
            kernel,
            self.dims,
            args,
            &mut c,
            &mut self.scratch,
        )
        .map(|ran| self.last = Some((ran.precision, ran.guard)))
    }

    /// The precision the last launch ran in (the native one before any launch).
    pub fn ran_in(&self) -> Precision {
        self.last.map_or(Precision::Native, |l| l.0)
    }

    /// What the last launch's guard found, where it was guarded.
    pub fn guard(&self) -> Option<crate::GuardReport> {
        self.last.and_then(|l| l.1)
    }

    /// Runs `kernel` once on a NaN-poisoned output and returns the product.
    pub fn run(&mut self, kernel: Kernel) -> Result<Array2<A>, GpuDotError> {
        self.run_by(|p| p.launch(kernel))
    }

    fn run_by(
        &mut self,
        launch: impl FnOnce(&mut Self) -> Result<(), GpuDotError>,
    ) -> Result<Array2<A>, GpuDotError> {
        args::poison(&self.stream, &mut self.c)?;
        launch(self)?;
        let data = self
            .stream
            .clone_dtoh(&self.c)
            .map_err(GpuDotError::at("copying the product to the host"))?;
        self.stream
            .synchronize()
            .map_err(GpuDotError::at("waiting for the product"))?;
        Ok(Array2::from_shape_vec((self.dims.0, self.dims.2), data).expect("m·n elements"))
    }

    /// Device time of `iters` back-to-back launches of `kernel`, between two events.
    pub fn elapsed(
        &mut self,
        kernel: Kernel,
        iters: u64,
    ) -> Result<std::time::Duration, GpuDotError> {
        let watch = Stopwatch::new(&self.gpu)?;
        let stream = self.stream.clone();
        let ms = watch.time(&stream, || (0..iters).try_for_each(|_| self.launch(kernel)))?;
        Ok(std::time::Duration::from_secs_f64(ms as f64 / 1e3))
    }

    /// Times `kernel`: `warmup` untimed launches, then `reps` launches each between two events.
    pub fn time(
        &mut self,
        kernel: Kernel,
        warmup: usize,
        reps: usize,
    ) -> Result<Timing, GpuDotError> {
        self.time_by(warmup, reps, |p| p.launch(kernel))
    }

    fn time_by(
        &mut self,
        warmup: usize,
        reps: usize,
        mut launch: impl FnMut(&mut Self) -> Result<(), GpuDotError>,
    ) -> Result<Timing, GpuDotError> {
        for _ in 0..warmup {
            launch(self)?;
        }
        let watch = Stopwatch::new(&self.gpu)?;
        let stream = self.stream.clone();
        let mut times = Vec::with_capacity(reps.max(1));
        for _ in 0..reps.max(1) {
            times.push(watch.time(&stream, || launch(self))? as f64);
        }
        let (m, k, n) = self.dims;
        Ok(Timing::of(times, crate::flops(m, k, n) as f64))
    }
}

/// cuBLAS as a reference (feature `cublas`): same operands, same output buffer. The crate's
/// products never come from cuBLAS.
#[cfg(feature = "cublas")]
impl<A: Element> DeviceProblem<A>
where
    cudarc::cublas::CudaBlas: cudarc::cublas::Gemm<A>,
{
    /// Lets cuBLAS SGEMM use the TF32 tensor cores (`CUBLAS_TF32_TENSOR_OP_MATH`) from now on,
    /// or not (the default: `CUBLAS_PEDANTIC_MATH`, FP32 arithmetic).
    pub fn set_cublas_tf32(&mut self, on: bool) {
        self.cublas_tf32.0 = on;
    }

    /// Runs cuBLAS SGEMM (FP32 math unless [`set_cublas_tf32`](Self::set_cublas_tf32)) or
    /// DGEMM once on a NaN-poisoned output.
    pub fn run_cublas(&mut self) -> Result<Array2<A>, GpuDotError> {
        self.run_by(|p| p.launch_cublas())
    }

    /// Times cuBLAS SGEMM or DGEMM as [`time`](Self::time) times a kernel.
    pub fn time_cublas(&mut self, warmup: usize, reps: usize) -> Result<Timing, GpuDotError> {
        self.time_by(warmup, reps, |p| p.launch_cublas())
    }

    fn launch_cublas(&mut self) -> Result<(), GpuDotError> {
        use cudarc::cublas::{sys, CudaBlas, Gemm, GemmConfig};
        let failed = |e: cudarc::cublas::result::CublasError| GpuDotError::Cublas {
            status: format!("{e:?}"),
        };
        if self.blas.is_none() {
            // SAFETY: only tries to open the shared library.
            if !unsafe { sys::is_culib_present() } {
                return Err(GpuDotError::Cublas {
                    status: "libcublas not found".into(),
                });
            }
            let blas = CudaBlas::new(self.stream.clone()).map_err(failed)?;
            self.blas = Some(blas);
            self.cublas_tf32.1 = !self.cublas_tf32.0;
        }
        let blas = self.blas.as_ref().expect("set above");
        if A::DTYPE == Dtype::F32 && self.cublas_tf32.1 != self.cublas_tf32.0 {
            let mode = if self.cublas_tf32.0 {
                sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH
            } else {
                sys::cublasMath_t::CUBLAS_PEDANTIC_MATH
            };
            // SAFETY: the handle is valid; CUBLAS_PEDANTIC_MATH keeps FP32 arithmetic (no
            // TF32), CUBLAS_TF32_TENSOR_OP_MATH allows TF32. DGEMM keeps the default mode: its
            // FP64 tensor cores are exact FP64.
            unsafe { sys::cublasSetMathMode(*blas.handle(), mode) }
                .result()
                .map_err(failed)?;
            self.cublas_tf32.1 = self.cublas_tf32.0;
        }
        let (m, k, n) = self.dims;
        // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: cuBLAS's (m, n, k) are our (n, m, k).
        let cfg = GemmConfig {
            transa: sys::cublasOperation_t::CUBLAS_OP_N,
            transb: sys::cublasOperation_t::CUBLAS_OP_N,
            m: n as i32,
            n: m as i32,
            k: k as i32,
            alpha: A::one(),
            lda: n as i32,
            ldb: k as i32,
            beta: A::zero(),
            ldc: n as i32,
        };
        // SAFETY: B is k × n with ld n, A is m × k with ld k, C is m × n with ld n, all
        // row-major and fully allocated (DeviceProblem::new); the dimensions fit in i32
        // (checked when the problem's kernels launch, and by `check_dims` here).
        args::check_dims(m, k, n)?;
        unsafe { blas.gemm(cfg, &self.b, &self.a, &mut self.c) }.map_err(failed)
    }
}

//! Device-side measurements of single kernels, for benches and the ladder example.
//!
//! [`DeviceProblem`] keeps random operands on the device so that a kernel can be timed alone,
//! without host↔device copies, with CUDA events.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};
use ndarray::{Array2, ArrayView2};

use crate::context::{self, Gpu, Stopwatch};
use crate::error::GpuDotError;
use crate::options::Kernel;
use crate::sgemm::{self, DeviceOperand};

/// A `rows × cols` matrix of uniform random values in [-1, 1), never all zero, from `seed`
/// (SplitMix64; the same seed gives the same matrix on every machine).
pub fn random_matrix(rows: usize, cols: usize, seed: u64) -> Array2<f32> {
    let mut state = seed;
    Array2::from_shape_simple_fn((rows, cols), || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    })
}

/// ‖c − a·b‖_F / ‖a·b‖_F with the reference product computed in f64 on the CPU.
pub fn relative_error(c: ArrayView2<f32>, a: ArrayView2<f32>, b: ArrayView2<f32>) -> f64 {
    relative_error_to(c, &reference_f64(a, b))
}

/// `a · b` computed in f64 on the CPU.
pub fn reference_f64(a: ArrayView2<f32>, b: ArrayView2<f32>) -> Array2<f64> {
    a.mapv(f64::from).dot(&b.mapv(f64::from))
}

/// ‖c − reference‖_F / ‖reference‖_F (NaN when `c` holds a NaN).
pub fn relative_error_to(c: ArrayView2<f32>, reference: &Array2<f64>) -> f64 {
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (&x, &r) in c.iter().zip(reference.iter()) {
        diff += (x as f64 - r).powi(2);
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

/// Random row-major operands of an `m × k × n` product, resident on the device.
pub struct DeviceProblem {
    gpu: Arc<Gpu>,
    stream: Arc<CudaStream>,
    dims: (usize, usize, usize),
    host_a: Array2<f32>,
    host_b: Array2<f32>,
    a: CudaSlice<f32>,
    b: CudaSlice<f32>,
    c: CudaSlice<f32>,
    /// The split-K workspace, kept across launches.
    scratch: Option<CudaSlice<f32>>,
    #[cfg(feature = "cublas")]
    blas: Option<cudarc::cublas::CudaBlas>,
}

impl DeviceProblem {
    /// Uploads random `m × k` and `k × n` operands (drawn from `seed`) and allocates `C`.
    pub fn new(m: usize, k: usize, n: usize, seed: u64) -> Result<Self, GpuDotError> {
        assert!(
            m > 0 && k > 0 && n > 0,
            "a device problem needs non-zero dimensions"
        );
        let gpu = context::gpu()?;
        let stream = gpu
            .ctx
            .new_stream()
            .map_err(GpuDotError::at("creating a stream"))?;
        let host_a = random_matrix(m, k, seed);
        let host_b = random_matrix(k, n, seed ^ 0x5EED);
        let a = sgemm::upload(&stream, host_a.as_slice().expect("fresh array"))?;
        let b = sgemm::upload(&stream, host_b.as_slice().expect("fresh array"))?;
        let c = sgemm::alloc(&stream, m * n)?;
        Ok(DeviceProblem {
            gpu,
            stream,
            dims: (m, k, n),
            host_a,
            host_b,
            a,
            b,
            c,
            scratch: None,
            #[cfg(feature = "cublas")]
            blas: None,
        })
    }

    /// The left operand, as uploaded.
    pub fn a(&self) -> ArrayView2<'_, f32> {
        self.host_a.view()
    }

    /// The right operand, as uploaded.
    pub fn b(&self) -> ArrayView2<'_, f32> {
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
        crate::tuner::launch_isolated(
            &self.gpu,
            &self.stream,
            kernel,
            self.dims,
            &a,
            &b,
            &mut self.c.as_view_mut(),
            n,
            &mut self.scratch,
        )
        .map(|_| ())
    }

    /// Runs `kernel` once on a NaN-poisoned output and returns the product.
    pub fn run(&mut self, kernel: Kernel) -> Result<Array2<f32>, GpuDotError> {
        self.run_by(|p| p.launch(kernel))
    }

    fn run_by(
        &mut self,
        launch: impl FnOnce(&mut Self) -> Result<(), GpuDotError>,
    ) -> Result<Array2<f32>, GpuDotError> {
        sgemm::poison(&self.stream, &mut self.c)?;
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
        times.sort_by(f64::total_cmp);
        let median_ms = times[times.len() / 2];
        let (m, k, n) = self.dims;
        Ok(Timing {
            median_ms,
            min_ms: times[0],
            gflops: crate::flops(m, k, n) as f64 / (median_ms * 1e6),
        })
    }
}

/// cuBLAS as a reference (feature `cublas`): same operands, same output buffer. The crate's
/// products never come from cuBLAS.
#[cfg(feature = "cublas")]
impl DeviceProblem {
    /// Runs cuBLAS SGEMM (FP32 math, no TF32) once on a NaN-poisoned output.
    pub fn run_cublas(&mut self) -> Result<Array2<f32>, GpuDotError> {
        self.run_by(|p| p.launch_cublas())
    }

    /// Times cuBLAS SGEMM as [`time`](Self::time) times a kernel.
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
            // SAFETY: the handle is valid; CUBLAS_PEDANTIC_MATH keeps FP32 arithmetic (no TF32).
            unsafe {
                sys::cublasSetMathMode(*blas.handle(), sys::cublasMath_t::CUBLAS_PEDANTIC_MATH)
            }
            .result()
            .map_err(failed)?;
            self.blas = Some(blas);
        }
        let blas = self.blas.as_ref().expect("set above");
        let (m, k, n) = self.dims;
        // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: cuBLAS's (m, n, k) are our (n, m, k).
        let cfg = GemmConfig {
            transa: sys::cublasOperation_t::CUBLAS_OP_N,
            transb: sys::cublasOperation_t::CUBLAS_OP_N,
            m: n as i32,
            n: m as i32,
            k: k as i32,
            alpha: 1.0f32,
            lda: n as i32,
            ldb: k as i32,
            beta: 0.0f32,
            ldc: n as i32,
        };
        // SAFETY: B is k × n with ld n, A is m × k with ld k, C is m × n with ld n, all
        // row-major and fully allocated (DeviceProblem::new); the dimensions fit in i32
        // (checked when the problem's kernels launch, and by `check_dims` here).
        sgemm::check_dims(m, k, n)?;
        unsafe { blas.gemm(cfg, &self.b, &self.a, &mut self.c) }.map_err(failed)
    }
}

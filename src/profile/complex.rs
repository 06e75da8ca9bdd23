//! Complex products resident on the device, timed for the complex ladder: the one real
//! product of the stacked parts a complex `gpu_dot` runs, and the four real products of the
//! parts beside it, against cuBLAS CGEMM and ZGEMM (feature `cublas`) on the same operands.

use std::time::Instant;

use ndarray::Array2;
use num_complex::Complex;

use crate::device::api::Device;
use crate::element::Element;
use crate::error::GpuDotError;
use crate::matrix::GpuMatrix;
use crate::options::{Backend, DotOptions, Precision};
use crate::profile::{random_matrix_of, Timing};
use crate::route::Route;

/// Random row-major complex operands of an `m × k × n` product, resident on the device in
/// the forms the products measured read: the stacked form's operands, and the four parts'
/// ones, each made on its first use (so that a run of one form holds only its own operands
/// besides the workspace: at 16384³ `c64`, the stacked form's are 16 GiB, the parts' 12).
pub struct ComplexProblem<T: Element> {
    dims: (usize, usize, usize),
    host_a: Array2<Complex<T>>,
    host_b: Array2<Complex<T>>,
    /// The four parts' operands and product, made on their first use.
    four: Option<Four<T>>,
    device: usize,
    /// The route of the last product of the crate's.
    last: Option<Route>,
    /// The stacked form's operands and product, made on its first use.
    stacked: Option<Stacked<T>>,
    #[cfg(feature = "cublas")]
    blas: Option<cublas::Interleaved<T>>,
}

/// The four real products' device operands, `Aᵣ`, `Aᵢ`, `Bᵣ`, `Bᵢ`, and the product's parts.
struct Four<T: Element> {
    parts: [GpuMatrix<T>; 4],
    re: GpuMatrix<T>,
    im: GpuMatrix<T>,
}

/// The stacked form's device operands: `A` as `m × 2k` reals, `B` expanded to `2k × 2n`, and
/// the product as `m × 2n` reals.
struct Stacked<T: Element> {
    a: GpuMatrix<T>,
    b: GpuMatrix<T>,
    c: GpuMatrix<T>,
}

impl<T: Element> ComplexProblem<T> {
    /// Random `m × k` and `k × n` complex operands (parts uniform in [-1, 1), from `seed`),
    /// uploaded to the default device.
    pub fn new(m: usize, k: usize, n: usize, seed: u64) -> Result<Self, GpuDotError> {
        let parts = |r, c, s| {
            let (re, im) = (
                random_matrix_of::<T>(r, c, s),
                random_matrix_of::<T>(r, c, !s),
            );
            ndarray::Zip::from(&re)
                .and(&im)
                .map_collect(|&re, &im| Complex::new(re, im))
        };
        Self::from_arrays(parts(m, k, seed), parts(k, n, seed ^ 0x5EED))
    }

    /// The given operands, for the default device (uploaded in each form on its first use).
    ///
    /// # Panics
    /// If the inner dimensions differ.
    pub fn from_arrays(
        host_a: Array2<Complex<T>>,
        host_b: Array2<Complex<T>>,
    ) -> Result<Self, GpuDotError> {
        let ((m, k), (k2, n)) = (host_a.dim(), host_b.dim());
        assert_eq!(k, k2, "inner dimensions differ");
        Ok(ComplexProblem {
            dims: (m, k, n),
            four: None,
            host_a,
            host_b,
            device: Device::default().ordinal(),
            last: None,
            stacked: None,
            #[cfg(feature = "cublas")]
            blas: None,
        })
    }

    /// The left operand.
    pub fn a(&self) -> ndarray::ArrayView2<'_, Complex<T>> {
        self.host_a.view()
    }

    /// The right operand.
    pub fn b(&self) -> ndarray::ArrayView2<'_, Complex<T>> {
        self.host_b.view()
    }

    /// The route of the last product of the crate's (what its real products ran).
    pub fn route(&self) -> Option<&Route> {
        self.last.as_ref()
    }

    /// The four real products of the parts in `precision`, into the product's parts on the
    /// device (each has completed on the device when it returns).
    fn launch_four(&mut self, precision: Precision) -> Result<(), GpuDotError> {
        if self.four.is_none() {
            let device = Device::new(self.device);
            let (m, _, n) = self.dims;
            let up = |v: ndarray::ArrayView2<'_, T>| GpuMatrix::from_array_on(&v, device);
            let Complex { re: ar, im: ai } = self.host_a.view().split_complex();
            let Complex { re: br, im: bi } = self.host_b.view().split_complex();
            self.four = Some(Four {
                parts: [up(ar)?, up(ai)?, up(br)?, up(bi)?],
                re: GpuMatrix::zeros_on((m, n), device)?,
                im: GpuMatrix::zeros_on((m, n), device)?,
            });
        }
        let opts = DotOptions::builtin()
            .backend(Backend::Gpu)
            .precision(precision)
            .device(self.device);
        let f = self.four.as_mut().expect("made above");
        let route = crate::complex::products(&f.parts, &mut f.re, &mut f.im, &opts)?;
        self.last = Some(route);
        Ok(())
    }

    /// Runs the product in `precision` once as four real products of the parts and returns
    /// it.
    pub fn run_four(&mut self, precision: Precision) -> Result<Array2<Complex<T>>, GpuDotError> {
        self.launch_four(precision)?;
        let (m, _, n) = self.dims;
        let mut c = Array2::<Complex<T>>::zeros((m, n));
        let f = self.four.as_ref().expect("made by the launch");
        crate::complex::download(&f.re, &f.im, c.view_mut())?;
        Ok(c)
    }

    /// Times the four real products in `precision` as [`time`](Self::time) times the crate's
    /// product.
    pub fn time_four(
        &mut self,
        precision: Precision,
        warmup: usize,
        reps: usize,
    ) -> Result<Timing, GpuDotError> {
        self.time_by(warmup, reps, |p| p.launch_four(precision))
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
        let mut times = Vec::with_capacity(reps.max(1));
        for _ in 0..reps.max(1) {
            let t = Instant::now();
            launch(self)?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let (m, k, n) = self.dims;
        // Real flops: a complex multiply-add is four real ones.
        Ok(Timing::of(times, 4.0 * crate::flops(m, k, n) as f64))
    }

    /// Runs the product in `precision` once as a complex `gpu_dot` runs it, one real product
    /// of the stacked parts (`A` as `m × 2k` reals times `B` expanded to `2k × 2n`), and
    /// returns it.
    pub fn run(&mut self, precision: Precision) -> Result<Array2<Complex<T>>, GpuDotError> {
        self.launch_stacked(precision)?;
        let (m, _, n) = self.dims;
        let mut c = Array2::<Complex<T>>::zeros((m, n));
        let stacked = self.stacked.as_ref().expect("made by the launch");
        stacked.c.copy_to(&mut crate::complex::reals_mut(&mut c))?;
        Ok(c)
    }

    /// Times the product in `precision`: `warmup` untimed runs, then `reps` timed ones (wall
    /// clock around the product, which returns once the device is done).
    pub fn time(
        &mut self,
        precision: Precision,
        warmup: usize,
        reps: usize,
    ) -> Result<Timing, GpuDotError> {
        self.time_by(warmup, reps, |p| p.launch_stacked(precision))
    }

    fn launch_stacked(&mut self, precision: Precision) -> Result<(), GpuDotError> {
        let device = Device::new(self.device);
        if self.stacked.is_none() {
            let (m, _, n) = self.dims;
            let a = crate::complex::as_reals(self.host_a.view());
            let b = crate::complex::expanded(self.host_b.view());
            self.stacked = Some(Stacked {
                a: GpuMatrix::from_array_on(&a, device)?,
                b: GpuMatrix::from_array_on(&b, device)?,
                c: GpuMatrix::zeros_on((m, 2 * n), device)?,
            });
        }
        let opts = DotOptions::builtin()
            .backend(Backend::Gpu)
            .precision(precision)
            .device(self.device)
            .complex_pairs();
        let s = self.stacked.as_mut().expect("made above");
        let route = crate::matrix::try_general_mat_mul_with(
            T::one(),
            &s.a,
            &s.b,
            T::zero(),
            &mut s.c,
            &opts,
        )?;
        self.last = Some(crate::complex::stacked_route(route));
        Ok(())
    }
}

#[cfg(feature = "cublas")]
impl<T: Element> ComplexProblem<T> {
    /// Runs cuBLAS CGEMM (`f32` parts) or ZGEMM (`f64`) once on interleaved copies of the
    /// same operands and returns its product.
    pub fn run_cublas(&mut self) -> Result<Array2<Complex<T>>, GpuDotError> {
        self.launch_cublas()?;
        let (m, _, n) = self.dims;
        self.blas.as_ref().expect("launched above").product((m, n))
    }

    /// Times cuBLAS CGEMM or ZGEMM as [`time`](Self::time) times the crate's product.
    pub fn time_cublas(&mut self, warmup: usize, reps: usize) -> Result<Timing, GpuDotError> {
        self.time_by(warmup, reps, |p| p.launch_cublas())
    }

    /// Frees cuBLAS's device operands and product; the next cuBLAS run makes them again. With
    /// it the crate's product can run with only its own operands on the device, as a program
    /// that holds only its own matrices runs it.
    pub fn release_cublas(&mut self) {
        self.blas = None;
    }

    fn launch_cublas(&mut self) -> Result<(), GpuDotError> {
        if self.blas.is_none() {
            self.blas = Some(cublas::Interleaved::new(&self.host_a, &self.host_b)?);
        }
        self.blas.as_mut().expect("set above").gemm(self.dims)
    }
}

/// cuBLAS's complex GEMM on interleaved operands: the reference the complex ladder measures
/// against. The crate's products never come from cuBLAS.
#[cfg(feature = "cublas")]
mod cublas {
    use std::sync::Arc;

    use cudarc::cublas::{sys, CudaBlas};
    use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
    use ndarray::Array2;
    use num_complex::Complex;

    use crate::device::context;
    use crate::element::{Dtype, Element};
    use crate::engine::args;
    use crate::error::GpuDotError;

    /// Interleaved complex operands (as `2·len` reals) and cuBLAS's handle.
    pub(super) struct Interleaved<T: Element> {
        stream: Arc<CudaStream>,
        blas: CudaBlas,
        a: CudaSlice<T>,
        b: CudaSlice<T>,
        c: CudaSlice<T>,
    }

    fn failed(e: cudarc::cublas::result::CublasError) -> GpuDotError {
        GpuDotError::Cublas {
            status: format!("{e:?}"),
        }
    }

    /// The interleaved reals of a standard-layout copy of `x`.
    fn reals<T: Element>(x: &Array2<Complex<T>>) -> Vec<T> {
        x.iter().flat_map(|z| [z.re, z.im]).collect()
    }

    impl<T: Element> Interleaved<T> {
        pub(super) fn new(
            a: &Array2<Complex<T>>,
            b: &Array2<Complex<T>>,
        ) -> Result<Self, GpuDotError> {
            // SAFETY: only tries to open the shared library.
            if !unsafe { sys::is_culib_present() } {
                return Err(GpuDotError::Cublas {
                    status: "libcublas not found".into(),
                });
            }
            let gpu = context::gpu()?;
            let stream = gpu
                .ctx
                .new_stream()
                .map_err(GpuDotError::at("creating a stream"))?;
            let blas = CudaBlas::new(stream.clone()).map_err(failed)?;
            let (m, n) = (a.nrows(), b.ncols());
            Ok(Interleaved {
                a: args::upload(&stream, &reals(a))?,
                b: args::upload(&stream, &reals(b))?,
                c: args::alloc::<T>(&stream, 2 * m * n)?,
                stream,
                blas,
            })
        }

        /// `C = A·B` by CGEMM or ZGEMM, waited for.
        pub(super) fn gemm(&mut self, (m, k, n): (usize, usize, usize)) -> Result<(), GpuDotError> {
            args::check_dims(m, k, n)?;
            let (op, handle) = (sys::cublasOperation_t::CUBLAS_OP_N, *self.blas.handle());
            // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: cuBLAS's (m, n, k) are our (n, m, k).
            let (cm, cn, ck) = (n as i32, m as i32, k as i32);
            let (pa, _ga) = self.a.device_ptr(&self.stream);
            let (pb, _gb) = self.b.device_ptr(&self.stream);
            let (pc, _gc) = self.c.device_ptr_mut(&self.stream);
            let status = match T::DTYPE {
                Dtype::F32 => {
                    let (one, zero) = (
                        sys::cuComplex { x: 1.0, y: 0.0 },
                        sys::cuComplex { x: 0.0, y: 0.0 },
                    );
                    // SAFETY: B is k × n (ld n), A is m × k (ld k) and C is m × n (ld n)
                    // complex, row-major, interleaved `f32` pairs, fully allocated above; the
                    // dimensions fit in i32 (checked above); alpha and beta live through the
                    // call, which only enqueues work on the handle's stream.
                    unsafe {
                        sys::cublasCgemm_v2(
                            handle, op, op, cm, cn, ck, &one, pb as _, cm, pa as _, ck, &zero,
                            pc as _, cm,
                        )
                    }
                }
                _ => {
                    let (one, zero) = (
                        sys::cuDoubleComplex { x: 1.0, y: 0.0 },
                        sys::cuDoubleComplex { x: 0.0, y: 0.0 },
                    );
                    // SAFETY: as for CGEMM, with interleaved `f64` pairs.
                    unsafe {
                        sys::cublasZgemm_v2(
                            handle, op, op, cm, cn, ck, &one, pb as _, cm, pa as _, ck, &zero,
                            pc as _, cm,
                        )
                    }
                }
            };
            status.result().map_err(failed)?;
            self.stream
                .synchronize()
                .map_err(GpuDotError::at("waiting for cuBLAS"))
        }

        /// The last product, downloaded.
        pub(super) fn product(
            &self,
            (m, n): (usize, usize),
        ) -> Result<Array2<Complex<T>>, GpuDotError> {
            let data = self
                .stream
                .clone_dtoh(&self.c)
                .map_err(GpuDotError::at("copying the product to the host"))?;
            self.stream
                .synchronize()
                .map_err(GpuDotError::at("waiting for the product"))?;
            let c: Vec<Complex<T>> = data
                .chunks_exact(2)
                .map(|p| Complex::new(p[0], p[1]))
                .collect();
            Ok(Array2::from_shape_vec((m, n), c).expect("m·n elements"))
        }
    }
}

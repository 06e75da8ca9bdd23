//! Choosing where a product runs: the CPU (ndarray's `dot`) or a GPU kernel.

use std::fmt;

use ndarray::{Array2, ArrayBase, Data, Ix2};

use crate::context;
use crate::error::GpuDotError;
use crate::fast::Plan;
use crate::layout::{self, Layout};
use crate::options::{Backend, DotOptions, Kernel};
use crate::sgemm;

/// A product and how it was computed.
#[derive(Debug, Clone)]
pub struct Product {
    /// The `m × n` result.
    pub c: Array2<f32>,
    /// Where it was computed, and why there.
    pub route: Route,
}

/// Where a product was computed.
#[derive(Debug, Clone)]
pub enum Route {
    /// On the GPU.
    Gpu {
        /// The kernel asked for (`Auto` when the crate chose).
        kernel: Kernel,
        /// The register-blocked family's plan, for `Reg64`, `Reg128` and `Auto`.
        plan: Option<Plan>,
        /// How the left operand was read.
        a_layout: Layout,
        /// How the right operand was read.
        b_layout: Layout,
    },
    /// On the CPU, by ndarray's `dot`.
    Cpu(CpuReason),
    /// Nothing to compute: `m`, `n` or `k` is zero (the result is `m × n` zeros).
    Empty,
}

/// Why a product ran on the CPU.
#[derive(Debug, Clone)]
pub enum CpuReason {
    /// The options asked for the CPU.
    Requested,
    /// The product is below the flop threshold.
    BelowThreshold {
        /// The product's flops, `2·m·k·n`.
        flops: u64,
        /// The threshold in force.
        threshold: u64,
    },
    /// The GPU path failed (no device, NVRTC, a driver error or full device memory).
    GpuUnavailable(GpuDotError),
}

impl Route {
    /// Whether the product ran on the GPU.
    pub fn is_gpu(&self) -> bool {
        matches!(self, Route::Gpu { .. })
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Route::Gpu {
                kernel,
                plan,
                a_layout,
                b_layout,
            } => {
                match plan {
                    Some(plan) if *kernel == Kernel::Auto => write!(f, "GPU, kernel auto: {plan}")?,
                    Some(plan) => write!(f, "GPU, kernel {kernel}: {plan}")?,
                    None => write!(f, "GPU, kernel {kernel}")?,
                }
                write!(f, " (operands read as {a_layout:?} and {b_layout:?} order)")
            }
            Route::Cpu(CpuReason::Requested) => write!(f, "CPU, as requested"),
            Route::Cpu(CpuReason::BelowThreshold { flops, threshold }) => write!(
                f,
                "CPU: {flops} flops is below the GPU threshold of {threshold}"
            ),
            Route::Cpu(CpuReason::GpuUnavailable(e)) => write!(f, "CPU, because {e}"),
            Route::Empty => write!(f, "no computation: the product has a zero dimension"),
        }
    }
}

/// `2·m·k·n`, saturating.
pub fn flops(m: usize, k: usize, n: usize) -> u64 {
    let f = 2u128 * m as u128 * k as u128 * n as u128;
    f.min(u64::MAX as u128) as u64
}

/// Checks that `a · b` is defined, as ndarray's `dot` does.
pub(crate) fn check_shapes(
    (m, k): (usize, usize),
    (k2, n): (usize, usize),
) -> Result<(), GpuDotError> {
    if k != k2 {
        return Err(GpuDotError::ShapeMismatch { m, k, k2, n });
    }
    if m.checked_mul(n).is_none_or(|len| len > isize::MAX as usize) {
        return Err(GpuDotError::TooLarge { dims: (m, k, n) });
    }
    Ok(())
}

/// Computes `a · b` as `opts` asks.
pub(crate) fn dot<S1, S2>(
    a: &ArrayBase<S1, Ix2>,
    b: &ArrayBase<S2, Ix2>,
    opts: &DotOptions,
) -> Result<Product, GpuDotError>
where
    S1: Data<Elem = f32>,
    S2: Data<Elem = f32>,
{
    check_shapes(a.dim(), b.dim())?;
    let ((m, k), n) = (a.dim(), b.ncols());
    if m == 0 || n == 0 || k == 0 {
        return Ok(Product {
            c: Array2::zeros((m, n)),
            route: Route::Empty,
        });
    }
    let cpu = |why| Product {
        c: a.dot(b),
        route: Route::Cpu(why),
    };
    match opts.backend {
        Backend::Cpu => Ok(cpu(CpuReason::Requested)),
        Backend::Gpu => gpu_dot(a, b, opts),
        Backend::Auto => {
            let flops = flops(m, k, n);
            if flops < opts.min_gpu_flops {
                return Ok(cpu(CpuReason::BelowThreshold {
                    flops,
                    threshold: opts.min_gpu_flops,
                }));
            }
            match gpu_dot(a, b, opts) {
                Ok(p) => Ok(p),
                Err(e) => Ok(cpu(CpuReason::GpuUnavailable(e))),
            }
        }
    }
}

fn gpu_dot<S1, S2>(
    a: &ArrayBase<S1, Ix2>,
    b: &ArrayBase<S2, Ix2>,
    opts: &DotOptions,
) -> Result<Product, GpuDotError>
where
    S1: Data<Elem = f32>,
    S2: Data<Elem = f32>,
{
    let ((m, k), n) = (a.dim(), b.ncols());
    sgemm::check_dims(m, k, n)?;
    let gpu = context::gpu()?;
    let (oa, ob) = (layout::operand(a), layout::operand(b));
    let (data, ran) = sgemm::gemm_host(
        gpu,
        opts.kernel,
        opts.autotune,
        (m, k, n),
        &oa,
        &ob,
        opts.poison_output,
    )?;
    let c = Array2::from_shape_vec((m, n), data).expect("the kernel returns m·n elements");
    Ok(Product {
        c,
        route: Route::Gpu {
            kernel: ran.kernel,
            plan: ran.plan,
            a_layout: oa.layout,
            b_layout: ob.layout,
        },
    })
}

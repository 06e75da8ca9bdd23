//! Choosing where a product runs: the CPU (ndarray's `dot`) or a GPU kernel.

use std::fmt;
use std::mem::MaybeUninit;

use ndarray::{Array2, ArrayBase, Data, Ix2};

use crate::context;
use crate::error::GpuDotError;
use crate::fast::Plan;
use crate::layout::Layout;
use crate::options::{Backend, DotOptions, Kernel};
use crate::pipeline::{self, Done, Dst, Gemm, Src};
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
        /// Row panels the product ran in (more than one: copies overlapped the kernels).
        panels: usize,
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
                panels,
            } => {
                match plan {
                    Some(plan) if *kernel == Kernel::Auto => write!(f, "GPU, kernel auto: {plan}")?,
                    Some(plan) => write!(f, "GPU, kernel {kernel}: {plan}")?,
                    None => write!(f, "GPU, kernel {kernel}")?,
                }
                write!(f, " (operands read as {a_layout:?} and {b_layout:?} order")?;
                match panels {
                    1 => write!(f, ")"),
                    p => write!(f, "; {p} row panels)"),
                }
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
    let mut c = fresh((m, n))?;
    let (a, b) = (Src::Host(a.view()), Src::Host(b.view()));
    let product = Gemm {
        alpha: 1.0,
        a: &a,
        b: &b,
        beta: 0.0,
        c: &mut Dst::Fresh(&mut c),
    };
    let done = pipeline::gemm(&gpu, opts, product).map_err(|f| f.error)?;
    // SAFETY: a GPU product with m, n ≥ 1 that returned Ok has written every element of C
    // (its download pieces cover all m·n elements, and it returns only once all of them are
    // unpacked).
    let c = unsafe { c.assume_init() };
    Ok(Product {
        c,
        route: gpu_route(opts, done),
    })
}

/// The route report of a finished GPU product.
pub(crate) fn gpu_route(opts: &DotOptions, done: Done) -> Route {
    Route::Gpu {
        kernel: done.ran.map_or(opts.kernel, |r| r.kernel),
        plan: done.ran.and_then(|r| r.plan),
        a_layout: done.a_layout,
        b_layout: done.b_layout,
        panels: done.panels,
    }
}

/// A new `rows × cols` C-order host array, not initialised, or
/// [`GpuDotError::HostOutOfMemory`] when the allocation fails (instead of aborting the
/// process). Its pages are not touched here: the product that fills it touches them on several
/// threads while the device works.
pub(crate) fn fresh((rows, cols): (usize, usize)) -> Result<Array2<MaybeUninit<f32>>, GpuDotError> {
    let too_large = GpuDotError::TooLarge {
        dims: (rows, 0, cols),
    };
    let len = rows.checked_mul(cols).ok_or(too_large.clone())?;
    let bytes = len
        .checked_mul(std::mem::size_of::<f32>())
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or(too_large)?;
    let mut data: Vec<MaybeUninit<f32>> = Vec::new();
    data.try_reserve_exact(len)
        .map_err(|_| GpuDotError::HostOutOfMemory { bytes })?;
    advise_huge_pages(data.as_mut_ptr().cast(), bytes);
    // SAFETY: the capacity is at least `len` (reserved above), and MaybeUninit needs no
    // initialisation.
    unsafe { data.set_len(len) };
    Ok(Array2::from_shape_vec((rows, cols), data).expect("rows · cols elements"))
}

/// Asks the kernel to back a large fresh allocation with transparent huge pages: the result
/// of a big product is written once, as a whole, and 2 MiB pages take 512 times fewer page
/// faults than 4 KiB ones. Only a hint; ignored where unsupported.
#[cfg(target_os = "linux")]
fn advise_huge_pages(ptr: *mut u8, bytes: usize) {
    const HUGE: usize = 2 << 20;
    if bytes < 2 * HUGE {
        return;
    }
    let start = (ptr as usize).next_multiple_of(HUGE);
    let end = (ptr as usize + bytes) / HUGE * HUGE;
    if end > start {
        // SAFETY: [start, end) lies inside the allocation of `bytes` bytes at `ptr`, owned by
        // the caller and not yet shared; MADV_HUGEPAGE changes how pages are backed, never
        // their contents, and a failure (EINVAL where unsupported) is ignored.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_ptr: *mut u8, _bytes: usize) {}

//! The router: where a product runs (the CPU through ndarray, or the GPU), the one place
//! that decides it for `gpu_dot`, the general form and device matrices alike, and the route
//! report.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use ndarray::{Array2, ArrayBase, Data, Ix2, ShapeBuilder};

use crate::device::context::{self, Gpu, Home};
use crate::device::modules::Readiness;
use crate::element::{Dtype, Element};
use crate::engine::family::Family;
use crate::engine::ozaki::GuardReport;
use crate::engine::plan::Plan;
use crate::error::GpuDotError;
use crate::layout::{classify, Layout};
use crate::options::{Backend, DotOptions, Kernel, Precision};
pub use crate::pipeline::HostCopies;
use crate::pipeline::{self, Done, Dst, Gemm, Src};

/// A product and how it was computed: `C` is the result's type, as ndarray's `dot` gives it
/// (a matrix, a vector, or a scalar for two vectors).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Product<C = Array2<f32>> {
    /// The result. A matrix comes in ndarray's memory order for the operands (F order when
    /// both operands are column-major, as `dot` gives; else C order).
    pub c: C,
    /// Where it was computed, and why there.
    pub route: Route,
}

/// Where a product was computed.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Route {
    /// On the GPU. More fields may come (match with `..`).
    #[non_exhaustive]
    Gpu {
        /// The element type.
        dtype: Dtype,
        /// The kernel asked for (`Auto` when the crate chose).
        kernel: Kernel,
        /// The register-blocked family's plan, for `Reg64`, `Reg128` and `Auto`.
        plan: Option<Plan>,
        /// How the left operand was read.
        a_layout: Layout,
        /// How the right operand was read.
        b_layout: Layout,
        /// Row panels the product ran in, or for a batch the parts (row panels of its items
        /// stacked, or groups of its items) it ran in; more than one: copies overlapped the
        /// kernels.
        panels: usize,
        /// Products in the batch (1 for a single product).
        batch: usize,
        /// The devices that computed it, by ordinal (several for a product split across
        /// devices, each computing a panel of rows).
        devices: Vec<usize>,
        /// The precision its multiplications ran in ([`Precision::Native`]: FP32 for `f32`,
        /// FP64 for `f64`).
        precision: Precision,
        /// The precision the options asked for, when it could not run (a device without
        /// TF32 tensor cores, or a kernel without tensor-core forms): then `precision` is
        /// `Native`. [`Precision::Auto`] where the default chose to emulate the product and
        /// the emulation could not run here (most often: no room on the device for its
        /// workspace), so it ran natively.
        precision_unavailable: Option<Precision>,
        /// Whether the product is complex (`Complex<f32>` or `Complex<f64>`, with `dtype` the
        /// type of its parts): a matrix product ran as one real product of the stacked
        /// parts, which the fields describe (emulated, in the Karatsuba form from 3584³ up
        /// and in the real form of the stacked parts below: see `karatsuba`); a batch (or a
        /// product under the crate's `complex_four_products` test switch) as four real
        /// products of its parts, and the fields describe the one of them that ran in the
        /// weakest precision (the first that the guard sent to native, else the first).
        complex: bool,
        /// Whether an emulated complex product ran in the Karatsuba form: three INT8
        /// products a modulus, of the parts' residues and of their sums, where the real
        /// product of the stacked parts would take four.
        karatsuba: bool,
        /// How the host arrays crossed the link: through the crate's staging, or straight
        /// from and into page-locked memory ([`PinnedArray`](crate::PinnedArray)).
        host: HostCopies,
        /// What the device's guard found where the default precision weighed emulation (the
        /// first panel's): `failed == 0` when it emulated (`precision` then names the count
        /// of moduli), else the tiles it found outside native's bound at every count it
        /// weighed, and the product ran natively; or, [`skipped`](GuardReport::skipped), the
        /// guard's last refusal of the shape, which this product ran natively without
        /// weighing. `None` where no guard ran.
        guard: Option<GuardReport>,
    },
    /// On the CPU, by ndarray's `dot`.
    Cpu(CpuReason),
    /// Nothing to compute: `m`, `n` or `k` is zero (the result is `m × n` zeros).
    Empty,
}

/// Why a product ran on the CPU.
#[derive(Debug, Clone)]
#[non_exhaustive]
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
    /// The kernels the product needs are not compiled yet: NVRTC is compiling them on a
    /// background thread (devices the crate ships no CUBINs for), and under
    /// [`Backend::Auto`] the product runs on the CPU instead of waiting
    /// ([`warm_up`](crate::warm_up) compiles them up front).
    Compiling {
        /// The kernel family being compiled, e.g. "sgemm_fast".
        kernels: &'static str,
    },
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
                dtype,
                kernel,
                plan,
                a_layout,
                b_layout,
                panels,
                batch,
                devices,
                precision,
                precision_unavailable,
                guard,
                complex,
                karatsuba,
                host,
            } => {
                let dtype = match (complex, karatsuba, dtype) {
                    (false, _, _) => dtype.name(),
                    (true, true, Dtype::F32) => "c32 (Karatsuba form: 3 INT8 products a modulus)",
                    (true, true, _) => "c64 (Karatsuba form: 3 INT8 products a modulus)",
                    (true, false, Dtype::F32) => "c32 (f32 products of its parts)",
                    (true, false, _) => "c64 (f64 products of its parts)",
                };
                match &devices[..] {
                    [_, _, ..] => {
                        let list: Vec<String> = devices.iter().map(|d| d.to_string()).collect();
                        write!(f, "GPU (devices {}), {dtype}, ", list.join(", "))?
                    }
                    _ => write!(f, "GPU, {dtype}, ")?,
                }
                if *precision != Precision::Native {
                    write!(f, "{precision}, ")?;
                }
                match guard {
                    Some(g) if g.skipped => write!(
                        f,
                        "native (the guard refused the last products of this shape, {} of {} \
                         tiles outside native's bound when emulated; this one skipped it), ",
                        g.failed, g.tiles
                    )?,
                    Some(g) if g.failed == 0 => {
                        write!(f, "guarded (every element within native's bound), ")?
                    }
                    Some(g) => write!(
                        f,
                        "native (the guard found {} of {} tiles outside native's bound when \
                         emulated), ",
                        g.failed, g.tiles
                    )?,
                    None => {}
                }
                match precision_unavailable {
                    Some(asked @ Precision::Ozaki { .. }) => write!(
                        f,
                        "native ({asked} needs compute capability 8.0, a register-blocked \
                         kernel, a matrix-matrix product with k ≤ 65 536, enough moduli for \
                         k and room for its workspace), "
                    )?,
                    Some(Precision::Auto) => write!(
                        f,
                        "native (the default chose emulation, which could not run here: it \
                         needs a register-blocked kernel, k ≤ 65 536, enough moduli for k and \
                         room for its workspace), "
                    )?,
                    Some(asked) => write!(
                        f,
                        "native ({asked} needs TF32 tensor cores, compute capability 8.0, and a \
                         register-blocked kernel), "
                    )?,
                    None => {}
                }
                if *batch != 1 {
                    write!(f, "a batch of {batch}, ")?;
                }
                match plan {
                    Some(plan) if *kernel == Kernel::Auto => write!(f, "kernel auto: {plan}")?,
                    Some(plan) => write!(f, "kernel {kernel}: {plan}")?,
                    None => write!(f, "kernel {kernel}")?,
                }
                write!(f, " (operands read as {a_layout:?} and {b_layout:?} order")?;
                match (panels, batch) {
                    (1, _) => {}
                    (p, 1) => write!(f, "; {p} row panels")?,
                    (p, _) => write!(f, "; in {p} parts")?,
                }
                match host {
                    HostCopies::Staged | HostCopies::None => write!(f, ")"),
                    other => write!(f, "; {other})"),
                }
            }
            Route::Cpu(CpuReason::Requested) => write!(f, "CPU, as requested"),
            Route::Cpu(CpuReason::BelowThreshold { flops, threshold }) => write!(
                f,
                "CPU: {flops} flops is below the GPU threshold of {threshold}"
            ),
            Route::Cpu(CpuReason::GpuUnavailable(e)) => write!(f, "CPU, because {e:#}"),
            Route::Cpu(CpuReason::Compiling { kernels }) => write!(
                f,
                "CPU, while NVRTC compiles the {kernels} kernels on a background thread"
            ),
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

/// What the router decided for a product whose output it does not write itself.
pub(crate) enum Decision {
    /// The GPU computed it (or there was nothing to compute).
    Done(Route),
    /// The caller computes it on the CPU, for this reason.
    Cpu(CpuReason),
}

/// Routes `C = alpha·A·B + beta·C`: the one place that decides between the CPU and the GPU.
///
/// - Shapes must agree ([`GpuDotError::ShapeMismatch`], [`GpuDotError::OutputShape`]); a
///   zero `m` or `n` is [`Route::Empty`] (a zero `k` still scales C by `beta`).
/// - Any device operand or output means the GPU (the CPU backend is an error).
/// - All-host products go to the CPU when the options ask, and below the flop threshold under
///   [`Backend::Auto`].
/// - A failing GPU sends the product to the CPU when `fall_back` (and C was not partly
///   written), else the error is returned.
///
/// The CPU product is the caller's ([`Decision::Cpu`]), so that it is ndarray's own.
///
/// Each decision is logged at debug level (the `log` crate); the first product of the
/// process that a failing or missing GPU sends to the CPU is logged as a warning.
pub(crate) fn route<T: Element>(
    g: Gemm<'_, '_, '_, '_, T>,
    opts: &DotOptions,
    fall_back: bool,
) -> Result<Decision, GpuDotError> {
    let ((m, k), n) = (g.a.dim(), g.b.dim().1);
    let decision = decide(g, opts, fall_back);
    log_route(1, (m, k, n), T::DTYPE, &decision);
    decision
}

/// Whether the warning of the process's first product that a failing or missing GPU sent to
/// the CPU was logged ([`log_route`]).
static WARNED: std::sync::Once = std::sync::Once::new();

/// Logs a product's route at debug level (`batch` products of `m × k` by `k × n`), and the
/// first product of the process that a failing or missing GPU sends to the CPU as a warning.
pub(crate) fn log_route(
    batch: usize,
    (m, k, n): (usize, usize, usize),
    dtype: Dtype,
    decision: &Result<Decision, GpuDotError>,
) {
    if let Ok(Decision::Cpu(CpuReason::GpuUnavailable(e))) = decision {
        WARNED.call_once(|| {
            log::warn!(
                "a product ran on the CPU because {e:#} (warned once; each later product's \
                 route is logged at debug level)"
            )
        });
    }
    // Nothing is formatted unless a logger takes debug records.
    if !log::log_enabled!(log::Level::Debug) {
        return;
    }
    let shape = if batch == 1 {
        format!("{m}×{k}×{n} {dtype}")
    } else {
        format!("{batch} × {m}×{k}×{n} {dtype}")
    };
    match decision {
        Ok(Decision::Done(route)) => log::debug!("{shape}: {route}"),
        Ok(Decision::Cpu(why)) => log::debug!("{shape}: {}", Route::Cpu(why.clone())),
        Err(e) => log::debug!("{shape}: failed: {e:#}"),
    }
}

/// Whether a `gpu_dot` call (default options) goes to the CPU before any GPU is tried: below
/// the threshold, or the CPU backend. The caller then runs ndarray's own product with nothing
/// before it but this comparison, so that such a call costs what `dot` costs: no allocation,
/// no clone, no lock, no formatting unless debug logging is on.
#[inline(always)]
pub(crate) fn cpu_first(batch: usize, (m, k, n): (usize, usize, usize), dtype: Dtype) -> bool {
    cpu_first_of(batch, (m, k, n), dtype, false)
}

/// [`cpu_first`] for a complex product whose parts are `dtype`, against the complex threshold
/// ([`DotOptions`]' `complex_threshold`), in real flops (`8·m·k·n`).
#[inline(always)]
pub(crate) fn cpu_first_complex(
    batch: usize,
    (m, k, n): (usize, usize, usize),
    dtype: Dtype,
) -> bool {
    cpu_first_of(batch.saturating_mul(4), (m, k, n), dtype, true)
}

#[inline(always)]
fn cpu_first_of(
    batch: usize,
    (m, k, n): (usize, usize, usize),
    dtype: Dtype,
    complex: bool,
) -> bool {
    // The environment's options as one number per element type (real f32, f64, complex f32,
    // complex f64), read with one relaxed load: 0 before the first call; `u64::MAX` for the
    // CPU backend; else the threshold plus one (`Auto`), or 1 (the GPU backend: nothing is
    // below).
    static CPU_BELOW: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];
    let slot = &CPU_BELOW[dtype as usize + 2 * usize::from(complex)];
    let mut below = slot.load(Ordering::Relaxed);
    if below == 0 {
        below = cpu_below(dtype, complex, slot);
    }
    // `flops` without 128-bit arithmetic: 2·m·k·n, saturating at `u64::MAX` as it does.
    let flops = 2u64
        .saturating_mul(batch.saturating_mul(m) as u64)
        .saturating_mul(k as u64)
        .saturating_mul(n as u64);
    let to_cpu = below == u64::MAX || flops < below - 1;
    if to_cpu && log::log_enabled!(log::Level::Debug) {
        log_cpu_first(batch, (m, k, n), dtype, complex, flops);
    }
    to_cpu
}

/// Whether a `gpu_dot` call past [`cpu_first`] (the environment's options, a failing GPU
/// falling back to the CPU) of an all-host `m × k × n` product of `dtype` goes to the CPU
/// because the device it would run on is known to be unusable
/// ([`context::known_unusable`]). Told without allocating, so that on a machine without a
/// GPU such a product costs what `dot` costs, in a loop too: [`dot_as`] would tell the same
/// with its route, whose reason is a clone of the device's error, which `gpu_dot` drops.
///
/// `false` wherever the router decides or logs: a device not tried yet, a split across
/// devices, a shape beyond the kernels, and while the route's records are wanted (the
/// process's first fallback, which warns, and every product while debug records are on), so
/// that those records are the router's own.
pub(crate) fn cpu_for_want_of_gpu((m, k, n): (usize, usize, usize), dtype: Dtype) -> bool {
    let opts = DotOptions::env_ref();
    if m == 0
        || k == 0
        || n == 0
        || opts.devices.is_some()
        || cpu_by_options(opts, flops(m, k, n), dtype).is_some()
        || check_dims(m, k, n).is_err()
        || !WARNED.is_completed()
        || log::log_enabled!(log::Level::Debug)
    {
        return false;
    }
    // An invalid `GPU_DOT_DEVICE` is left to the router (its error is a clone).
    device_for(opts, []).is_ok_and(context::known_unusable)
}

/// The first [`cpu_first`] of an element type: its threshold from the environment's
/// options, stored in `slot`.
#[cold]
#[inline(never)]
fn cpu_below(dtype: Dtype, complex: bool, slot: &AtomicU64) -> u64 {
    let opts = DotOptions::env_ref();
    let threshold = threshold_of(opts, dtype, complex);
    let below = match opts.backend {
        Backend::Cpu => u64::MAX,
        Backend::Auto => threshold.min(u64::MAX - 2) + 1,
        Backend::Gpu => 1,
    };
    slot.store(below, Ordering::Relaxed);
    below
}

/// The CPU/GPU threshold of `dtype`'s real products, or of complex ones whose parts are
/// `dtype`.
fn threshold_of(opts: &DotOptions, dtype: Dtype, complex: bool) -> u64 {
    if complex {
        opts.complex_threshold(dtype)
    } else {
        opts.threshold(dtype)
    }
}

/// The debug record of a product [`cpu_first`] sent to the CPU.
#[cold]
#[inline(never)]
fn log_cpu_first(
    batch: usize,
    mkn: (usize, usize, usize),
    dtype: Dtype,
    complex: bool,
    flops: u64,
) {
    let opts = DotOptions::env_ref();
    let why =
        cpu_under(opts, flops, threshold_of(opts, dtype, complex)).expect("decided by the caller");
    log_route(batch, mkn, dtype, &Ok(Decision::Cpu(why)));
}

fn decide<T: Element>(
    g: Gemm<'_, '_, '_, '_, T>,
    opts: &DotOptions,
    fall_back: bool,
) -> Result<Decision, GpuDotError> {
    let ((m, k), (k2, n)) = (g.a.dim(), g.b.dim());
    check_shapes((m, k), (k2, n))?;
    if g.c.dim() != (m, n) {
        return Err(GpuDotError::OutputShape {
            expected: (m, n),
            found: g.c.dim(),
        });
    }
    if m == 0 || n == 0 {
        return Ok(Decision::Done(Route::Empty));
    }
    let on_host = matches!((g.a, g.b), (Src::Host(_), Src::Host(_)))
        && matches!(g.c, Dst::Host(_) | Dst::Fresh(_));
    if !on_host {
        if opts.backend == Backend::Cpu {
            return Err(GpuDotError::CpuBackendWithDeviceOperands);
        }
        let homes = [g.a.home(), g.b.home(), g.c.home()].map(|h| h.map(|(home, _)| home));
        let gpu = context::gpu_on(device_for(opts, homes)?)?;
        let ordinal = gpu.info.ordinal;
        return pipeline::gemm(&gpu, opts, g)
            .map(|done| Decision::Done(gpu_route::<T>(opts, done, 1, vec![ordinal])))
            .map_err(|f| f.error);
    }
    let flops = flops(m, k, n);
    if let Some(why) = cpu_by_options(opts, flops, T::DTYPE) {
        return Ok(Decision::Cpu(why));
    }
    let fall_back = fall_back || opts.backend == Backend::Auto;
    if let Err(e) = check_dims(m, k, n) {
        return if fall_back {
            Ok(Decision::Cpu(CpuReason::GpuUnavailable(e)))
        } else {
            Err(e)
        };
    }
    // A fresh output holds nothing of the caller's, and with beta == 0 the product never
    // reads C: a failure after part of either was written is redone on the CPU whole.
    let redoable = matches!(g.c, Dst::Fresh(_)) || g.beta == T::zero();
    let split = match crate::split::split_devices(opts, flops, m) {
        Ok(split) => split,
        Err(e) if fall_back => return Ok(Decision::Cpu(CpuReason::GpuUnavailable(e))),
        Err(e) => return Err(e),
    };
    if let Some(ordinals) = split {
        return match crate::split::gemm_split(&ordinals, opts, g) {
            Ok((done, used)) => Ok(Decision::Done(gpu_route::<T>(opts, done, 1, used))),
            Err(f) if fall_back && (redoable || !f.touched) => {
                Ok(Decision::Cpu(CpuReason::GpuUnavailable(f.error)))
            }
            Err(f) => Err(f.error),
        };
    }
    let gpu = match device_for(opts, []).and_then(context::gpu_on) {
        Ok(gpu) => gpu,
        Err(e) if fall_back => return Ok(Decision::Cpu(CpuReason::GpuUnavailable(e))),
        Err(e) => return Err(e),
    };
    if opts.backend == Backend::Auto {
        if let Some(why) = compiling(&gpu, T::DTYPE, opts, false) {
            return Ok(Decision::Cpu(why));
        }
    }
    let ordinal = gpu.info.ordinal;
    match pipeline::gemm(&gpu, opts, g) {
        Ok(done) => Ok(Decision::Done(gpu_route::<T>(opts, done, 1, vec![ordinal]))),
        Err(f) if fall_back && (redoable || !f.touched) => {
            Ok(Decision::Cpu(CpuReason::GpuUnavailable(f.error)))
        }
        Err(f) => Err(f.error),
    }
}

/// Why an `Auto` host product of `dtype` (a batch when `batched`) goes to the CPU on `gpu`: a
/// kernel family it needs is still being compiled (its compilation, on a background thread,
/// starts here), or NVRTC failed on it. `None` when every family it needs is loaded.
pub(crate) fn compiling(
    gpu: &Gpu,
    dtype: Dtype,
    opts: &DotOptions,
    batched: bool,
) -> Option<CpuReason> {
    let sm = gpu.kernel_sm();
    let mut families = Family::serving(dtype, opts.precision, opts.kernel, sm, batched);
    let mut why = None;
    // Every family is prepared, so that all of them compile at once.
    let mut i = 0;
    while let Some(&family) = families.get(i) {
        i += 1;
        let reason = match gpu.prepare(family) {
            Ok(Readiness::Ready) => continue,
            Ok(Readiness::Compiling) => CpuReason::Compiling {
                kernels: family.name(),
            },
            // A family with a stand-in (the warpgroup kernels) only moves the product to it.
            Err(GpuDotError::Compile { .. }) if family.stand_in(opts.precision).is_some() => {
                families.extend(family.stand_in(opts.precision));
                continue;
            }
            // The Ozaki kernels' products run natively when they do not build (the native
            // family is served too, after them).
            Err(GpuDotError::Compile { .. }) if family == Family::Ozaki => continue,
            Err(e) => CpuReason::GpuUnavailable(e),
        };
        why.get_or_insert(reason);
    }
    why
}

/// Why an all-host `m × k × n` product of `dtype` goes to the CPU, where that can be told
/// before its result is allocated: the options ask for the CPU or it is below the threshold;
/// or, when a failing GPU sends products to the CPU (`fall_back`, or [`Backend::Auto`]), its
/// shape is beyond the kernels, the device is not usable, or its kernels are still compiling.
/// `None`: the GPU is tried ([`decide`] decides again, and these checks are cheap to repeat).
/// A product split across several devices is left to [`decide`].
fn cpu_before_allocating(
    opts: &DotOptions,
    (m, k, n): (usize, usize, usize),
    dtype: Dtype,
    fall_back: bool,
) -> Option<CpuReason> {
    if let Some(why) = cpu_by_options(opts, flops(m, k, n), dtype) {
        return Some(why);
    }
    if !(fall_back || opts.backend == Backend::Auto) || opts.devices.is_some() {
        return None;
    }
    if let Err(e) = check_dims(m, k, n) {
        return Some(CpuReason::GpuUnavailable(e));
    }
    match device_for(opts, []).and_then(context::gpu_on) {
        Err(e) => Some(CpuReason::GpuUnavailable(e)),
        Ok(gpu) if opts.backend == Backend::Auto => compiling(&gpu, dtype, opts, false),
        Ok(_) => None,
    }
}

/// Why a host product of `flops` flops goes to the CPU before any GPU is tried: the options
/// ask for the CPU, or, under [`Backend::Auto`], it is below the threshold for `dtype`.
pub(crate) fn cpu_by_options(opts: &DotOptions, flops: u64, dtype: Dtype) -> Option<CpuReason> {
    cpu_under(opts, flops, opts.threshold(dtype))
}

/// [`cpu_by_options`] against a given threshold.
pub(crate) fn cpu_under(opts: &DotOptions, flops: u64, threshold: u64) -> Option<CpuReason> {
    match opts.backend {
        Backend::Cpu => Some(CpuReason::Requested),
        Backend::Auto if flops < threshold => Some(CpuReason::BelowThreshold { flops, threshold }),
        _ => None,
    }
}

/// The device a product runs on: the one its options name, else the one its first device
/// operand lives on, else the default device.
pub(crate) fn device_for<const N: usize>(
    opts: &DotOptions,
    homes: [Option<Home>; N],
) -> Result<usize, GpuDotError> {
    match crate::split::single_device(opts)
        .or_else(|| homes.iter().flatten().next().map(|h| h.ordinal))
    {
        Some(ordinal) => Ok(ordinal),
        None => context::default_ordinal(),
    }
}

fn check_dims(m: usize, k: usize, n: usize) -> Result<(), GpuDotError> {
    crate::engine::args::check_dims(m, k, n)
}

/// Whether ndarray's `dot` returns `a · b` in F order: when both operands are column-major.
pub(crate) fn f_order_result<T, S1: Data<Elem = T>, S2: Data<Elem = T>>(
    a: &ArrayBase<S1, Ix2>,
    b: &ArrayBase<S2, Ix2>,
) -> bool {
    a.strides()[0] == 1 && b.strides()[0] == 1
}

/// Computes `a · b` as `opts` asks, in ndarray's memory order, for a caller that gives the
/// product its own shape: `finish` turns the `m × n` matrix into the caller's result, and the
/// CPU route runs `cpu` (the caller's own ndarray `dot`, so that it is ndarray's answer bit for
/// bit). `fall_back`: a failing GPU computes on the CPU whatever the backend (for `gpu_dot`,
/// which never fails because of the GPU).
pub(crate) fn dot_as<T, S1, S2, C>(
    a: &ArrayBase<S1, Ix2>,
    b: &ArrayBase<S2, Ix2>,
    opts: &DotOptions,
    fall_back: bool,
    finish: impl FnOnce(Array2<T>) -> C,
    cpu: impl FnOnce() -> C,
) -> Result<Product<C>, GpuDotError>
where
    T: Element,
    S1: Data<Elem = T>,
    S2: Data<Elem = T>,
{
    check_shapes(a.dim(), b.dim())?;
    let ((m, k), n) = (a.dim(), b.ncols());
    let f_order = f_order_result(a, b);
    // Both operands column-major: the GPU computes Cᵀ = Bᵀ·Aᵀ, whose operands are then
    // row-major, into a C-order n × m array, which is C in F order.
    let (av, bv, rows, cols) = if f_order {
        (b.t(), a.t(), n, m)
    } else {
        (a.view(), b.view(), m, n)
    };
    // A product the CPU takes allocates nothing but ndarray's own result: its route is told
    // before C is allocated.
    if m > 0 && n > 0 && k > 0 {
        if let Some(why) = cpu_before_allocating(opts, (m, k, n), T::DTYPE, fall_back) {
            // Logged, then taken back for the route: the reason is not cloned.
            let decision = Ok(Decision::Cpu(why));
            log_route(1, (m, k, n), T::DTYPE, &decision);
            let Ok(Decision::Cpu(why)) = decision else {
                unreachable!("made above")
            };
            return Ok(Product {
                c: cpu(),
                route: Route::Cpu(why),
            });
        }
    }
    // Nothing to multiply: zeros (a zero k included, where the general form would still scale
    // C by beta).
    let mut c = if m == 0 || n == 0 || k == 0 {
        None
    } else {
        Some(crate::host::fresh::fresh::<T>((rows, cols), false)?)
    };
    let decision = match c.as_mut() {
        None => Decision::Done(Route::Empty),
        Some(c) => {
            let (sa, sb) = (Src::Host(av), Src::Host(bv));
            let g = Gemm {
                alpha: T::one(),
                a: &sa,
                b: &sb,
                beta: T::zero(),
                c: &mut Dst::Fresh(c.view_mut()),
            };
            route(g, opts, fall_back)?
        }
    };
    Ok(match decision {
        Decision::Done(Route::Empty) => Product {
            c: finish(Array2::zeros((m, n).set_f(f_order))),
            route: Route::Empty,
        },
        Decision::Done(mut route) => {
            // SAFETY: a GPU product with m, n ≥ 1 that returned Ok has written every element
            // of C (its download pieces cover all of it, and it returns only once all of them
            // are unpacked).
            let c = unsafe { c.expect("allocated for a non-empty product").assume_init() };
            crate::host::fresh::result_filled::<T>(c.len());
            if let (
                true,
                Route::Gpu {
                    a_layout, b_layout, ..
                },
            ) = (f_order, &mut route)
            {
                // The report describes the caller's operands, not their swapped transposes.
                (*a_layout, *b_layout) = (classify(a).0, classify(b).0);
            }
            Product {
                c: finish(if f_order { c.reversed_axes() } else { c }),
                route,
            }
        }
        Decision::Cpu(why) => Product {
            c: cpu(),
            route: Route::Cpu(why),
        },
    })
}

/// The route report of a finished GPU product.
pub(crate) fn gpu_route<T: Element>(
    opts: &DotOptions,
    done: Done,
    batch: usize,
    devices: Vec<usize>,
) -> Route {
    let asked = opts.precision.for_dtype(T::DTYPE);
    let precision = done.ran.map_or(Precision::Native, |r| r.precision);
    Route::Gpu {
        batch,
        devices,
        precision,
        precision_unavailable: match done.ran {
            Some(_) if !asked.served_by(precision) => Some(asked),
            // The default chose to emulate, and the emulation could not run here.
            Some(r) if r.unavailable => Some(Precision::Auto),
            _ => None,
        },
        guard: done.ran.and_then(|r| r.guard),
        complex: false,
        karatsuba: done.ran.is_some_and(|r| r.karatsuba),
        dtype: T::DTYPE,
        kernel: done.ran.map_or(opts.kernel, |r| r.kernel),
        plan: done.ran.and_then(|r| r.plan),
        a_layout: done.a_layout,
        b_layout: done.b_layout,
        panels: done.panels,
        host: done.host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::tuner::Ran;

    /// The route of a product whose launch ran `ran`, with the options asking for `asked`.
    fn route_of(asked: Precision, ran: Ran) -> Route {
        let mut done = pipeline::Done::nothing();
        done.ran = Some(ran);
        gpu_route::<f64>(&DotOptions::builtin().precision(asked), done, 1, vec![0])
    }

    #[test]
    fn the_report_says_when_the_defaults_emulation_could_not_run() {
        let ran = |unavailable| Ran {
            kernel: Kernel::Auto,
            plan: None,
            precision: Precision::Native,
            guard: None,
            unavailable,
            karatsuba: false,
        };
        let route = route_of(Precision::Auto, ran(true));
        assert!(matches!(
            route,
            Route::Gpu {
                precision: Precision::Native,
                precision_unavailable: Some(Precision::Auto),
                ..
            }
        ));
        let text = route.to_string();
        assert!(text.contains("room for its workspace"), "{text}");
        // The default that chose the native product has nothing to report.
        let route = route_of(Precision::Auto, ran(false));
        assert!(matches!(
            route,
            Route::Gpu {
                precision_unavailable: None,
                ..
            }
        ));
        // A count asked for and not run is named as before.
        let asked = Precision::Ozaki { moduli: 14 };
        let route = route_of(asked, ran(true));
        assert!(matches!(
            route,
            Route::Gpu { precision_unavailable: Some(p), .. } if p == asked
        ));
    }
}

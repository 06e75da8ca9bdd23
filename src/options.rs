//! Per-call and per-process choices: which backend, which kernel, and the size threshold.

use std::fmt;
use std::str::FromStr;

use once_cell::sync::Lazy;

use crate::error::{GpuDotError, ParseOptionError};
use crate::settings;

/// Products of fewer floating-point operations (`2·m·k·n`) than this run on the CPU under
/// [`Backend::Auto`].
///
/// Measured host to host with the `sweep` example (BENCHMARKS.md). On H100 hosts with 16 cores
/// (2026-11-26, five runs), since small results are written straight into page-locked staging,
/// the GPU path took 0.035–0.041 ms at 96³ (1.8 Mflop) and 0.048–0.050 ms at 128³
/// (4.2 Mflop), where ndarray's multithreaded `dot` took 0.014–0.040 and 0.039–0.065 ms
/// (median 0.060): the CPU wins at 96³ and, in three runs of five, the GPU at 128³, so the
/// threshold sits at 4 Mflop (about 126³). Before that change the GPU path took
/// 0.050–0.076 ms at 128³ on an H100 and an H200 host, 128³ went either way, and the threshold
/// was 6 Mflop. With fewer host cores the crossover comes earlier. Override it per call with
/// [`DotOptions::min_gpu_flops`] or per process with `GPU_DOT_MIN_FLOPS`.
pub const DEFAULT_MIN_GPU_FLOPS: u64 = 4_000_000;

/// [`DEFAULT_MIN_GPU_FLOPS`] for `f64` products.
///
/// Measured on the same H200 host (`sweep --f64-crossover`, BENCHMARKS.md): host to host, the
/// GPU path took 0.059 ms at 96³ (1.8 Mflop) against ndarray's 0.032 ms, and 0.069 ms at 128³
/// (4.2 Mflop) against 0.085 ms: ndarray's f64 `dot` runs at half its f32 speed, so the GPU
/// pays from smaller products than in f32. On the H100 host (2026-11-25): 0.052 against 0.051 ms
/// at 96³, 0.073 against 0.115 ms at 128³; on that host again with small results written
/// straight into staging (2026-11-26), 0.044–0.047 against 0.032–0.033 ms at 96³ and 0.052
/// against 0.085–0.087 ms at 128³. The threshold sits between, at 3 Mflop (about 115³).
pub const DEFAULT_MIN_GPU_FLOPS_F64: u64 = 3_000_000;

/// [`DEFAULT_MIN_GPU_FLOPS`] for `Complex<f32>` products, in real flops (`8·m·k·n`).
///
/// Measured host to host on an H100 with 16 host cores (2026-12-07, `complex_sweep --dtype
/// c32`, one real product of the stacked parts whose first panel expands `B`'s parts on the
/// device): the GPU path took 0.041 ms at 64³ (2.1 Mflop) against ndarray's 0.046, and 0.046 ms
/// at 96³ (7.1 Mflop) against 0.137; the threshold sits between, at 5 Mflop (about 86³).
/// When a complex product ran as four real products of its uploaded parts (2026-12-06) the
/// GPU path took 0.181 ms at 96³ and the threshold was 32 Mflop. `Complex<f64>` products
/// keep [`DEFAULT_MIN_GPU_FLOPS_F64`]: there the GPU won from 96³ even then (0.191 against
/// 0.234 ms), and ndarray took 0.075 ms at 64³ (2.1 Mflop) against the GPU's 0.155 with the
/// product forced there.
pub const DEFAULT_MIN_GPU_FLOPS_C32: u64 = 5_000_000;

/// The most moduli an Ozaki product may use (`Precision::Ozaki { moduli }`): their product
/// M < 2^141, so that the reconstruction's sum `S < 9 · 2^25 · M` fits six 32-bit limbs.
pub const MAX_MODULI: usize = 18;
/// The fewest moduli an Ozaki product may use.
pub const MIN_MODULI: usize = 2;

pub use crate::settings::{
    ENV_AUTOTUNE, ENV_BACKEND, ENV_DEVICE, ENV_DEVICES, ENV_KERNEL, ENV_MIN_FLOPS, ENV_PEER_COPY,
    ENV_PRECISION,
};

/// Products of fewer flops than this run on one device even when [`DotOptions::devices`]
/// names several.
///
/// Measured host to host on two H200s with a peer link (the `multi_gpu` example,
/// BENCHMARKS.md): split in two, 4096³ took 6.0 ms against 5.8 ms on one device (a second
/// pipeline and the exchange of B cost what the second device saves), while 8192³ took 19.5 ms
/// against 33.1 ms and 16384³ 116 ms against 220 ms. The threshold is 8192³'s flops.
pub const DEFAULT_MIN_SPLIT_FLOPS: u64 = 2 * 8192 * 8192 * 8192;

/// Which devices may share one product.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Devices {
    /// Every usable device.
    All,
    /// These ordinals (one ordinal: that device alone).
    List(Vec<usize>),
}

/// `all`, or device ordinals separated by commas (`0,1`), as `GPU_DOT_DEVICES` takes them
/// (any case, spaces around each ignored).
impl FromStr for Devices {
    type Err = ParseOptionError;

    fn from_str(s: &str) -> Result<Self, ParseOptionError> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("all") {
            return Ok(Devices::All);
        }
        let list = t
            .split(',')
            .map(|o| {
                Some(o.trim())
                    .filter(|o| is_number(o))?
                    .parse::<usize>()
                    .ok()
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| parse_error("devices", s, &settings::DEVICES))?;
        Ok(Devices::List(list))
    }
}

/// Whether `s` is a number written in decimal digits alone (no sign).
fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// The error for `value`, which the setting's `FromStr` does not accept.
fn parse_error(what: &'static str, value: &str, setting: &settings::Setting) -> ParseOptionError {
    ParseOptionError {
        what,
        value: value.to_string(),
        expected: setting.expected(),
    }
}

/// Where a product is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Backend {
    /// The GPU for products at or above the threshold when a GPU is usable, else the CPU.
    #[default]
    Auto,
    /// Always the GPU; no usable GPU is an error, never a silent CPU run.
    Gpu,
    /// Always ndarray's `dot` on the CPU.
    Cpu,
}

/// Which CUDA kernel computes a GPU product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Kernel {
    /// The register-blocked family with the plan measured fastest for the shape class (tile
    /// configuration, split-K, or GEMV for one row or column); see [`DotOptions::autotune`].
    #[default]
    Auto,
    /// One thread per output element, operands read from global memory.
    Naive,
    /// Shared-memory tiles of 16 × 16.
    Tiled16,
    /// Shared-memory tiles of 32 × 32.
    Tiled32,
    /// The small register-blocked tiles: for f32, 64 × 64 tiles where each thread computes a
    /// block of outputs from vectorised shared-memory reads, with a cp.async pipeline over K;
    /// for f64, 64 × 64 tiles on the FP64 tensor cores (the SIMT DGEMM before sm_80).
    Reg64,
    /// The large register-blocked tiles: for f32 in FP32, 64 × 128 tiles, 128 threads, 8 × 8
    /// outputs per thread; for f64, 128 × 64 tiles on the FP64 tensor cores (the SIMT DGEMM
    /// before sm_80).
    Reg128,
}

impl Kernel {
    /// Every concrete kernel, slowest first.
    pub const ALL: [Kernel; 5] = [
        Kernel::Naive,
        Kernel::Tiled16,
        Kernel::Tiled32,
        Kernel::Reg64,
        Kernel::Reg128,
    ];

    /// The kernel's short name, as `GPU_DOT_KERNEL` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Auto => "auto",
            Kernel::Naive => "naive",
            Kernel::Tiled16 => "tiled16",
            Kernel::Tiled32 => "tiled32",
            Kernel::Reg64 => "reg64",
            Kernel::Reg128 => "reg128",
        }
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Auto => "auto",
            Backend::Gpu => "gpu",
            Backend::Cpu => "cpu",
        })
    }
}

/// `auto`, `gpu` or `cpu`, as `GPU_DOT_BACKEND` takes them (any case, spaces around ignored).
impl FromStr for Backend {
    type Err = ParseOptionError;
    fn from_str(s: &str) -> Result<Self, ParseOptionError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Backend::Auto),
            "gpu" => Ok(Backend::Gpu),
            "cpu" => Ok(Backend::Cpu),
            _ => Err(parse_error("backend", s, &settings::BACKEND)),
        }
    }
}

/// A kernel's [`name`](Kernel::name), as `GPU_DOT_KERNEL` takes it (any case, spaces around
/// ignored).
impl FromStr for Kernel {
    type Err = ParseOptionError;
    fn from_str(s: &str) -> Result<Self, ParseOptionError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Kernel::Auto),
            "naive" => Ok(Kernel::Naive),
            "tiled16" => Ok(Kernel::Tiled16),
            "tiled32" => Ok(Kernel::Tiled32),
            "reg64" => Ok(Kernel::Reg64),
            "reg128" => Ok(Kernel::Reg128),
            _ => Err(parse_error("kernel", s, &settings::KERNEL)),
        }
    }
}

/// How a product's multiplications run on the GPU. `f64` products run in FP64
/// ([`Precision::Native`]) or by [`Precision::Ozaki`], asked for or chosen by the default
/// ([`Precision::Auto`]); asked for in TF32 or 3xTF32, they run in FP64. `f32` products take
/// every precision.
///
/// Only the register-blocked kernels (`Kernel::Auto`, `Reg64`, `Reg128`) on devices with
/// TF32 tensor cores (compute capability 8.0 and newer) have tensor-core forms; elsewhere a
/// product asked for in TF32 or 3xTF32 runs in FP32, and the route report says so. On
/// compute capability 9.0 the tensor-core forms use the warpgroup instructions: `Reg128`
/// multiplies 128 × 128 (3xTF32) or 128 × 256 (TF32) tiles from packed panels, `Reg64` reads
/// the operands directly in 128 × 64 tiles (thin and small products).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Precision {
    /// The default: for each product, the fastest way the crate has whose result is within
    /// native's componentwise error bound on that product's own inputs. Where Ozaki scheme
    /// II is faster than native on the device and shape, a guard computed on the device
    /// bounds each element's error before the product runs, and the product is emulated
    /// only when every element passes (with the count of moduli the inputs need); else it
    /// runs natively. The route report says which ran, with how many moduli, and what the
    /// guard found. `GPU_DOT_PRECISION=native` turns the emulation off.
    #[default]
    Auto,
    /// The element type's own arithmetic: FP32 fused multiply-adds on the CUDA cores for
    /// `f32` (IEEE single precision throughout), FP64 (on the FP64 tensor cores where the
    /// device has them) for `f64`.
    Native,
    /// Each factor split into a TF32 "big" part and the TF32 rounding of the remainder, and
    /// three tensor-core products (big·big + big·small + small·big) summed in FP32: about
    /// FP32's accuracy (BENCHMARKS.md) at tensor-core speed. Infinite and NaN inputs give
    /// what FP32 gives.
    Tf32x3,
    /// One tensor-core product of the factors rounded to TF32 (10 mantissa bits, a relative
    /// error near 2⁻¹¹ per factor): fastest, least accurate. Never chosen unless asked for.
    Tf32,
    /// Ozaki scheme II on the INT8 tensor cores (compute capability 8.0 on, Hopper's
    /// warpgroup instructions on 9.0; `f64` and `f32`):
    /// each row of op(A) and column of op(B) scaled by a power of two and rounded to
    /// integers, the integer product recovered exactly from its residues modulo `moduli`
    /// small coprime moduli (one exact INT8 GEMM each) by the Chinese remainder theorem, and
    /// scaled back with one rounding. The accuracy knob is `moduli`: with `n` of them and
    /// inner dimension `k`, each element keeps at least about `(8n − 3 − log₂k) / 2` bits
    /// below the largest magnitude of its row (or column), and about `(8n − 3) / 2` bits below
    /// the row's 2-norm where that is finer (a row whose elements span many binades, whose
    /// norm is close to its largest element: every row is scaled by whichever of the two
    /// keeps more bits, and Cauchy–Schwarz keeps the integer products within range either
    /// way). `moduli: 0` chooses the fewest that keep 52 bits below the largest magnitude
    /// (`f64`, 50 beyond k = 2048: 15 moduli for k from 17 to 32 768) or 24 (`f32`: 8 moduli
    /// up to k = 8192), at most 18; 1 or more than 18 run as 2 or 18; 2 to 18 asks for that
    /// many. BENCHMARKS.md has the accuracy study (uniform, 2^±30, cancelling and integer
    /// inputs against cuBLAS DGEMM). The route report names the count that ran. Inf and NaN
    /// give the native product's pattern. Elsewhere (another device, `k` above 65 536, a
    /// workspace that does not fit, a matrix–vector product) the native kernels run and the
    /// report says so.
    Ozaki {
        /// How many moduli (0: automatic).
        moduli: u8,
    },
}

impl Precision {
    /// The precisions of the CUDA-core and TF32 kernels.
    pub const ALL: [Precision; 3] = [Precision::Native, Precision::Tf32x3, Precision::Tf32];

    /// Ozaki scheme II with the moduli chosen automatically.
    pub const OZAKI: Precision = Precision::Ozaki { moduli: 0 };

    /// The native precision's former name, from when it was named for `f32` products alone
    /// (`f64` products are FP64 in it).
    #[deprecated(note = "renamed `Precision::Native`: FP32 for `f32` products, FP64 for `f64`")]
    #[allow(non_upper_case_globals)]
    pub const Fp32: Precision = Precision::Native;

    /// What a product of `dtype` asked for in this precision computes in: `f64` is FP64
    /// (`Native`) unless Ozaki or the default is asked for.
    pub(crate) fn for_dtype(self, dtype: crate::element::Dtype) -> Precision {
        match (dtype, self) {
            (crate::element::Dtype::F32, p) => p,
            (crate::element::Dtype::F64, p @ (Precision::Ozaki { .. } | Precision::Auto)) => p,
            (crate::element::Dtype::F64, _) => Precision::Native,
        }
    }

    /// Whether a product asked for in this precision that ran in `ran` got what it asked
    /// for (an automatic Ozaki request is served by any count of moduli).
    pub(crate) fn served_by(self, ran: Precision) -> bool {
        match (self, ran) {
            // The default is served by whatever it chose.
            (Precision::Auto, _) => true,
            (Precision::Ozaki { moduli: 0 }, Precision::Ozaki { .. }) => true,
            // A count out of range runs clamped to it.
            (Precision::Ozaki { moduli: a }, Precision::Ozaki { moduli: r }) => a.clamp(2, 18) == r,
            (asked, ran) => asked == ran,
        }
    }

    /// Its name in options, reports and result files: `native`, `tf32x3`, `tf32`, `ozaki`
    /// (the count of moduli is in its `Display` form, `ozaki-15`). `fp32`, the native
    /// precision's former name, is still read as `native`.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Auto => "auto",
            Precision::Native => "native",
            Precision::Tf32x3 => "tf32x3",
            Precision::Tf32 => "tf32",
            Precision::Ozaki { .. } => "ozaki",
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Precision::Ozaki { moduli } if *moduli > 0 => write!(f, "ozaki-{moduli}"),
            p => f.write_str(p.name()),
        }
    }
}

/// `auto`, `native` (or `fp32`, its former name), `tf32x3`, `tf32`, `ozaki` or `ozaki-N` with
/// N from 2 to 18, as `GPU_DOT_PRECISION` takes them (any case, spaces around ignored): the
/// [`Display`](fmt::Display) form of every precision parses back to it.
impl FromStr for Precision {
    type Err = ParseOptionError;
    fn from_str(s: &str) -> Result<Self, ParseOptionError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Precision::Auto),
            "native" | "fp32" => Ok(Precision::Native),
            "tf32x3" => Ok(Precision::Tf32x3),
            "tf32" => Ok(Precision::Tf32),
            "ozaki" => Ok(Precision::OZAKI),
            other => match other
                .strip_prefix("ozaki-")
                .filter(|n| is_number(n))
                .map(str::parse::<u8>)
            {
                Some(Ok(n)) if (MIN_MODULI..=MAX_MODULI).contains(&(n as usize)) => {
                    Ok(Precision::Ozaki { moduli: n })
                }
                _ => Err(parse_error("precision", s, &settings::PRECISION)),
            },
        }
    }
}

/// Choices for one product. `DotOptions::default()` is what the environment says, or the
/// built-in defaults where it says nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DotOptions {
    /// Where to compute.
    pub backend: Backend,
    /// Which kernel, when on the GPU.
    pub kernel: Kernel,
    /// Under [`Backend::Auto`], products of fewer flops than this go to the CPU (`None`: the
    /// element type's default, [`DEFAULT_MIN_GPU_FLOPS`], [`DEFAULT_MIN_GPU_FLOPS_F64`] or, for
    /// `Complex<f32>`, [`DEFAULT_MIN_GPU_FLOPS_C32`]).
    pub min_gpu_flops: Option<u64>,
    /// Fill the device output with NaN before the kernel runs, so that an element the kernel
    /// fails to write shows up as NaN. For testing kernels; costs one memset (the crate's
    /// internals: [`DotOptions::poison_output`] with the `internals` feature).
    pub(crate) poison_output: bool,
    /// Under [`Kernel::Auto`], tune each *key* (the shape class, i.e. the powers of two
    /// bracketing m, k and n, with the operands' layouts and residency, alignment and whether
    /// an epilogue runs): its first products each run one candidate (panel count and kernel
    /// plan), three times each, and the one with the shortest wall time, copies included, is
    /// kept for the process. Every candidate computes the same product. Off, `Auto` runs a
    /// fixed choice made from the shape and the device's multiprocessor count.
    pub autotune: bool,
    /// Rows of A (and C) per panel when operands or the result cross the PCIe/NVLink link:
    /// each panel is copied, multiplied and copied back while the next one is on its way.
    /// `None` chooses from the shape (one panel for small products, panels of 128-row
    /// multiples of at most 32 MiB for large ones); `Some(rows)` forces that height (at least
    /// 1; `Some(m)` or more means one panel). The crate's internals, for its tests and
    /// measurements.
    pub(crate) panel_rows: Option<usize>,
    /// The CUDA device, by ordinal, that computes GPU products (`None`: the device of the
    /// first device operand, else `GPU_DOT_DEVICE`, else 0). Each device keeps its own
    /// context, modules, workspaces and tuned plans.
    pub device: Option<usize>,
    /// Devices that may share a large host-to-host product (`None`: one device, by the rule of
    /// [`device`](DotOptions::device)). With several, products of at least
    /// [`min_split_flops`](DotOptions::min_split_flops) flops are cut into row panels of A (and
    /// C), one per device in proportion to its multiprocessors; each device runs its share
    /// with its own pipeline, staging and host threads; B crosses the host once where the
    /// devices have peer links (see [`peer_copies`](DotOptions::peer_copies)). Smaller products,
    /// and products with a device operand, run on one device as usual.
    pub devices: Option<Devices>,
    /// The smallest product split across [`devices`](DotOptions::devices) (`None`:
    /// [`DEFAULT_MIN_SPLIT_FLOPS`]).
    pub min_split_flops: Option<u64>,
    /// Whether a split product shares B over peer links: when every pair of its devices has
    /// one, each device uploads one slab of B from the host and copies the others from its
    /// peers, so B crosses the host once. Off (or without peer links), every device uploads
    /// all of B from the host. On by default.
    pub peer_copies: bool,
    /// How products multiply on the GPU (default [`Precision::Auto`]: guarded Ozaki emulation
    /// where it is faster and within native's bound, else FP32 for `f32` and FP64 for `f64`).
    pub precision: Precision,
    /// The product is a complex one read as reals ([`crate::complex::stacked`]): op(A) is
    /// `m × 2k` with each row's parts interleaved, op(B) the `2k × 2n` expansion of a complex
    /// `k × n` (each element the block `[[bᵣ, bᵢ], [−bᵢ, bᵣ]]`), so that Ozaki emulation may
    /// run it in the Karatsuba form (three INT8 products a modulus where the real form runs
    /// the work of four). Set by the crate only.
    pub(crate) complex_pairs: bool,
}

impl DotOptions {
    /// The built-in defaults, ignoring the environment.
    pub const fn builtin() -> Self {
        DotOptions {
            backend: Backend::Auto,
            kernel: Kernel::Auto,
            min_gpu_flops: None,
            poison_output: false,
            autotune: true,
            panel_rows: None,
            device: None,
            devices: None,
            min_split_flops: None,
            peer_copies: true,
            precision: Precision::Auto,
            complex_pairs: false,
        }
    }

    /// The defaults with the process environment applied (`GPU_DOT_BACKEND`, `GPU_DOT_KERNEL`,
    /// `GPU_DOT_MIN_FLOPS`, `GPU_DOT_AUTOTUNE`, `GPU_DOT_DEVICE`, `GPU_DOT_DEVICES`,
    /// `GPU_DOT_PEER_COPY`, `GPU_DOT_PRECISION`), read once per process. An invalid value is
    /// an error here ([`GpuDotError::InvalidEnv`], the first one in that order); under
    /// [`DotOptions::default`] only that variable falls back to its built-in default, with a
    /// warning through the `log` crate, and every valid variable still applies.
    pub fn from_env() -> Result<Self, GpuDotError> {
        match &ENV_OPTIONS.1 {
            None => Ok(ENV_OPTIONS.0.clone()),
            Some(e) => Err(e.clone()),
        }
    }

    /// The defaults with variables looked up through `lookup` instead of the process
    /// environment (`lookup(name)` returns the variable's value, if set); the first invalid
    /// value is an error, as in [`DotOptions::from_env`].
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, GpuDotError> {
        let (opts, errors) = Self::lenient(lookup);
        match errors.into_iter().next() {
            None => Ok(opts),
            Some(e) => Err(e),
        }
    }

    /// The defaults with every valid variable of `lookup` applied, and the errors of the
    /// invalid ones, each of which leaves its option at the built-in default.
    pub(crate) fn lenient(lookup: impl Fn(&str) -> Option<String>) -> (Self, Vec<GpuDotError>) {
        let mut opts = Self::builtin();
        let mut errors = Vec::new();
        // Applies `apply` to the variable's value where it is set; an invalid value is kept
        // as an error and changes nothing.
        let mut read = |name: &str, apply: &mut dyn FnMut(&str) -> Result<(), GpuDotError>| {
            if let Some(v) = lookup(name) {
                if let Err(e) = apply(&v) {
                    errors.push(e);
                }
            }
        };
        read(ENV_BACKEND, &mut |v| {
            opts.backend = v.parse().map_err(|_| settings::BACKEND.invalid(v))?;
            Ok(())
        });
        read(ENV_KERNEL, &mut |v| {
            opts.kernel = v.parse().map_err(|_| settings::KERNEL.invalid(v))?;
            Ok(())
        });
        read(ENV_MIN_FLOPS, &mut |v| {
            let flops = v
                .trim()
                .parse()
                .map_err(|_| settings::MIN_FLOPS.invalid(v))?;
            opts.min_gpu_flops = Some(flops);
            Ok(())
        });
        read(ENV_DEVICE, &mut |v| {
            opts.device = Some(v.trim().parse().map_err(|_| settings::DEVICE.invalid(v))?);
            Ok(())
        });
        read(ENV_DEVICES, &mut |v| {
            opts.devices = Some(v.parse().map_err(|_| settings::DEVICES.invalid(v))?);
            Ok(())
        });
        read(ENV_PRECISION, &mut |v| {
            opts.precision = v.parse().map_err(|_| settings::PRECISION.invalid(v))?;
            Ok(())
        });
        read(ENV_PEER_COPY, &mut |v| {
            opts.peer_copies = settings::PEER_COPY.switch(v)?;
            Ok(())
        });
        read(ENV_AUTOTUNE, &mut |v| {
            opts.autotune = settings::AUTOTUNE.switch(v)?;
            Ok(())
        });
        (opts, errors)
    }

    /// These options with another backend.
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// These options with another kernel.
    pub fn kernel(mut self, kernel: Kernel) -> Self {
        self.kernel = kernel;
        self
    }

    /// The CPU/GPU threshold in force for products of `dtype`.
    pub fn threshold(&self, dtype: crate::Dtype) -> u64 {
        self.min_gpu_flops.unwrap_or(match dtype {
            crate::Dtype::F32 => DEFAULT_MIN_GPU_FLOPS,
            _ => DEFAULT_MIN_GPU_FLOPS_F64,
        })
    }

    /// The CPU/GPU threshold in force for complex products whose parts are `dtype`, in real
    /// flops (`8·m·k·n`).
    pub(crate) fn complex_threshold(&self, dtype: crate::Dtype) -> u64 {
        self.min_gpu_flops.unwrap_or(match dtype {
            crate::Dtype::F32 => DEFAULT_MIN_GPU_FLOPS_C32,
            _ => DEFAULT_MIN_GPU_FLOPS_F64,
        })
    }

    /// These options with another CPU/GPU threshold (for every element type).
    pub fn min_gpu_flops(mut self, flops: u64) -> Self {
        self.min_gpu_flops = Some(flops);
        self
    }

    /// These options with autotuning on or off.
    pub fn autotune(mut self, on: bool) -> Self {
        self.autotune = on;
        self
    }

    /// These options with a fixed panel height (`None`: chosen from the shape). Internals.
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn panel_rows(mut self, rows: Option<usize>) -> Self {
        self.panel_rows = rows;
        self
    }

    /// These options with GPU products on device `ordinal` (a [`Device`](crate::Device)'s
    /// ordinal; `usize::from(device)` gives it).
    pub fn device(mut self, ordinal: usize) -> Self {
        self.device = Some(ordinal);
        self
    }

    /// These options with large host-to-host products split across `devices` (see
    /// [`DotOptions::devices`]).
    pub fn devices(mut self, devices: Devices) -> Self {
        self.devices = Some(devices);
        self
    }

    /// These options with another smallest split product (see [`DotOptions::devices`]).
    pub fn min_split_flops(mut self, flops: u64) -> Self {
        self.min_split_flops = Some(flops);
        self
    }

    /// These options with B shared over peer links in split products, or not (see
    /// [`DotOptions::peer_copies`]).
    pub fn peer_copies(mut self, on: bool) -> Self {
        self.peer_copies = on;
        self
    }

    /// These options with another precision (see [`Precision`]; `f64` takes `Auto`, `Native`
    /// (FP64) or `Ozaki`, and runs the others as `Native`).
    pub fn precision(mut self, precision: Precision) -> Self {
        self.precision = precision;
        self
    }

    /// The same options for a complex product read as reals (see
    /// [`complex_pairs`](DotOptions::complex_pairs)).
    pub(crate) fn complex_pairs(mut self) -> Self {
        self.complex_pairs = true;
        self
    }

    /// These options with output poisoning on or off. Internals.
    #[cfg(feature = "internals")]
    #[doc(hidden)]
    pub fn poison_output(mut self, on: bool) -> Self {
        self.poison_output = on;
        self
    }
}

impl Default for DotOptions {
    fn default() -> Self {
        Self::env_ref().clone()
    }
}

impl DotOptions {
    /// [`DotOptions::default`] without the clone: the options of the environment, parsed once.
    pub(crate) fn env_ref() -> &'static DotOptions {
        &ENV_OPTIONS.0
    }
}

/// The options of the process environment, each invalid variable at its built-in default, and
/// the first invalid variable's error. Each invalid value is logged once, as a warning.
static ENV_OPTIONS: Lazy<(DotOptions, Option<GpuDotError>)> = Lazy::new(|| {
    let (opts, errors) = DotOptions::lenient(|name| std::env::var(name).ok());
    for e in &errors {
        log::warn!("gpu-dot: {e}; that variable takes its built-in default");
    }
    (opts, errors.into_iter().next())
});

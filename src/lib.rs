//! Matrix products of `f32`, `f64`, `Complex<f32>` and `Complex<f64>` [ndarray] matrices on an
//! NVIDIA GPU, as easy as `dot`.
//!
//! `a.gpu_dot(&b)` returns what ndarray's `a.dot(&b)` returns, within floating-point rounding,
//! with `dot`'s result types, memory order and panics, for every 2-D array kind (`Array2`,
//! `ArrayView2`, `ArrayViewMut2`, `ArcArray2`, `CowArray`) in any layout: C order, F order
//! (`a.t()`), sliced, stepped and negative-stride views. Products of fewer than
//! [`DEFAULT_MIN_GPU_FLOPS`] flops (`2·m·k·n`; [`DEFAULT_MIN_GPU_FLOPS_F64`] for `f64`, and
//! [`DEFAULT_MIN_GPU_FLOPS_C32`] real flops, `8·m·k·n`, for `Complex<f32>`), and
//! every product on a machine without a usable GPU, run on ndarray's own `dot` at its own cost.
//! Larger ones run on the GPU: by default ([`Precision::Auto`]) on the INT8 tensor cores (Ozaki
//! scheme II) where that is faster and a guard computed on the device shows every element
//! within native FP32/FP64's error bound, and natively otherwise. Building needs no CUDA
//! toolkit: the driver and NVRTC (CUDA 12 or 13) are found at run time, and the kernels ship
//! compiled for Ampere, Ada and Hopper GPUs; other GPUs compile them once with NVRTC.
//!
//! ```
//! use gpu_dot::GpuDot;
//! use gpu_dot::{Backend, DotOptions, Route};
//! use ndarray::arr2;
//! use ndarray::Array3;
//!
//! let a = arr2(&[[1.0f32, 2.0], [3.0, 4.0]]);
//! let b = arr2(&[[5.0f32, 6.0], [7.0, 8.0]]);
//! assert_eq!(a.gpu_dot(&b), a.dot(&b)); // a product this small runs on the CPU, as `dot`
//!
//! let x = arr2(&[[1.0f64, 2.0], [3.0, 4.0]]);
//! assert_eq!(x.gpu_dot(&x.t()), x.dot(&x.t())); // f64, any layout
//!
//! // Complex matrices (num-complex's, as `dot` takes them; re-exported as gpu_dot::num_complex).
//! use gpu_dot::num_complex::Complex;
//! let z = arr2(&[[Complex::new(1.0f64, 2.0), Complex::new(0.0, -1.0)]]);
//! assert_eq!(z.gpu_dot(&z.t()), z.dot(&z.t())); // no conjugation, as `dot`
//!
//! // A batch, item by item as torch.bmm computes it: 8 × (4 × 3) times 8 × (3 × 5).
//! let s = Array3::<f32>::ones((8, 4, 3)).gpu_dot(&Array3::<f32>::ones((8, 3, 5)));
//! assert_eq!(s, Array3::from_elem((8, 4, 5), 3.0));
//!
//! // Options per call, errors as values, and the route the product took.
//! let p = a.try_gpu_dot_with(&b, &DotOptions::default().backend(Backend::Cpu))?;
//! assert!(matches!(p.route, Route::Cpu(_)));
//! println!("{}", p.route); // "CPU, as requested"; a GPU product says "GPU, f32, …"
//! # Ok::<(), gpu_dot::GpuDotError>(())
//! ```
//!
//! # Entry points
//!
//! - [`GpuDot`], the trait that gives ndarray's arrays their methods (without
//!   `use gpu_dot::GpuDot`, a call fails with E0599, "no method named `gpu_dot` found"):
//!   - [`gpu_dot`](GpuDot::gpu_dot): ndarray's `dot` on the GPU, matrix · matrix,
//!     matrix · vector, vector · matrix and vector · vector;
//!   - [`try_gpu_dot`](GpuDot::try_gpu_dot): the same, with every failure returned as a
//!     [`GpuDotError`];
//!   - [`try_gpu_dot_with`](GpuDot::try_gpu_dot_with): with explicit [`DotOptions`],
//!     returning a [`Product`]: the result and the [`Route`] it took (the GPU with its
//!     precision and kernel, or the CPU and why, a [`CpuReason`]).
//! - Complex matrices: every form above, and [`general_mat_mul`] with complex `alpha` and
//!   `beta`, takes `Complex<f32>` and `Complex<f64>` ([`GpuScalar`] names the four element
//!   types). `dot` does not conjugate, and neither does `gpu_dot`. On the GPU a complex
//!   matrix product is one real product of its stacked parts (`A` read as `m × 2k` reals,
//!   times `B` expanded to `2k × 2n`), in the real type's precision and under its guard, so
//!   that every element keeps the complex form of the real bound (`docs/precision.md`,
//!   "Complex matrices"); a batch is four real batches of the parts. The threshold counts
//!   real flops, `8·m·k·n`, and the product runs on one device. A [`GpuMatrix`] of complex
//!   elements keeps each element's parts side by side in device memory, and the `try_`
//!   general forms take complex operands and outputs, on the host or the device.
//! - Batches: a 3-D array is a stack of matrices. `q.gpu_dot(&k)` multiplies a
//!   `batch × m × k` stack by a `batch × k × n` stack item by item (as `torch.bmm`), or each
//!   item by one 2-D `k × n` matrix; the `Array3` result is in C order. Stacks of different
//!   lengths panic ([`GpuDotError::BatchMismatch`] in the `try_` forms).
//! - [`general_mat_mul`]: ndarray's `general_mat_mul`, `C = alpha·A·B + beta·C`, for host
//!   arrays. [`try_general_mat_mul`] and [`try_general_mat_mul_with`] take host or device
//!   operands and write a host array or a [`GpuMatrix`] in place (an SGD step
//!   `W ← W − lr·Xᵀ·G` on device-resident weights, for one).
//! - [`GpuMatrix`]: a matrix kept in device memory. Upload once ([`GpuMatrix::from_array`]),
//!   multiply many times ([`GpuMatrix::product`], [`GpuMatrix::try_dot`], transposed views by
//!   [`GpuMatrix::t`], host arrays in any mix), download when asked
//!   ([`GpuMatrix::to_array`]): a chain of products makes no round trips.
//! - [`DotOptions`], per call: the [`Backend`] ([`Backend::Auto`] by size, [`Backend::Gpu`],
//!   [`Backend::Cpu`]), the [`Precision`] ([`Precision::Auto`], [`Precision::Native`],
//!   [`Precision::Tf32x3`], [`Precision::Tf32`], [`Precision::Ozaki`]), the [`Kernel`], the
//!   CPU/GPU threshold, the device ([`DotOptions::device`]) and the [`Devices`] a large
//!   host-to-host product may be split across ([`DotOptions::devices`]).
//!   [`DotOptions::default`] is the built-in defaults with the environment's variables (below)
//!   applied; [`DotOptions::builtin`] ignores the environment.
//! - Around them: [`warm_up`] loads (or compiles) the kernels up front; [`device_status`] and
//!   [`Device`] say which GPUs are usable, and why not; [`module_loads`] says where each
//!   kernel module came from; [`trim`] frees the staging and device buffers kept for later
//!   products, which [`retained_memory`] and [`retained_host_memory`] count.
//!
//! # Kernels
//!
//! | kernel | what it does |
//! |---|---|
//! | [`Kernel::Naive`] | one thread per output element, reading global memory |
//! | [`Kernel::Tiled16`] | 16 × 16 shared-memory tiles, boundary-checked |
//! | [`Kernel::Tiled32`] | 32 × 32 shared-memory tiles, boundary-checked |
//! | [`Kernel::Reg64`], [`Kernel::Reg128`] | register-blocked tiles with a cp.async pipeline |
//! | [`Kernel::Auto`] | per shape class, the register-blocked tiles, split-K or a matrix–vector kernel, and the panel count, measured fastest as the products run (`GPU_DOT_AUTOTUNE=0`: chosen from the shape) |
//!
//! Each kernel exists for both element types; `f64` products run the register-blocked tiles on
//! the FP64 tensor cores from `sm_80` on, and a SIMT FP64 kernel on older devices. The
//! precisions, what runs where and the kernels' measured speed are in `docs/precision.md`.
//!
//! # Features
//!
//! One ndarray feature and one CUDA feature, exactly; the defaults are `ndarray-0-17` and
//! `cuda-12080`. A project on ndarray 0.16 writes
//! `gpu-dot = { version = "0.1", default-features = false, features = ["ndarray-0-16", "cuda-12080"] }`.
//!
//! - `ndarray-0-17` (default): works on ndarray 0.17, its reference types (`&ArrayRef2`,
//!   `&ArrayRef1`) included.
//! - `ndarray-0-16`: works on ndarray 0.16.
//! - `ndarray-0-15`: works on ndarray 0.15 (0.15.6 or later).
//! - `cuda-12080` (default): cudarc's CUDA 12.8 bindings, which run on CUDA 12.x and 13.x
//!   drivers.
//! - `cuda-12090`: cudarc's CUDA 12.9 bindings.
//! - `cuda-13000`: cudarc's CUDA 13.0 bindings.
//! - `cuda-version-from-build-system`: cudarc takes the CUDA version from the build machine's
//!   toolkit (`nvcc --version`).
//! - `cuda-version-elsewhere`: names no version; another crate of the build names cudarc's
//!   (candle's `cuda-12080`, burn's `cuda-version-from-build-system`).
//! - `cublas`: cuBLAS SGEMM and DGEMM as references for the crate's `ladder` and `precision`
//!   examples; products never come from cuBLAS.
//! - `two-gpus`: builds the tests that need two CUDA GPUs.
//! - `internals`: unstable, and not for users: the crate's own measuring tools and test hooks,
//!   which its tests, examples and benches turn on. No item behind it keeps semver.
//!
//! # Environment variables
//!
//! [`DotOptions`] sets the backend, kernel, precision, threshold and devices per call. For a
//! whole program, environment variables set the defaults:
//!
//! | variable | values | default |
//! |---|---|---|
//! | `GPU_DOT_BACKEND` | `auto`, `gpu`, `cpu` | `auto` |
//! | `GPU_DOT_KERNEL` | `auto`, `naive`, `tiled16`, `tiled32`, `reg64`, `reg128` | `auto` |
//! | `GPU_DOT_AUTOTUNE` | `1`, `on`, `true`, `yes` or `0`, `off`, `false`, `no` | `1` |
//! | `GPU_DOT_PRECISION` | `auto`, `native` (or `fp32`), `tf32x3`, `tf32`, `ozaki`, `ozaki-N` (N from 2 to 18; see [`Precision`]) | `auto` |
//! | `GPU_DOT_MIN_FLOPS` | a non-negative integer (every element type) | [`DEFAULT_MIN_GPU_FLOPS`], [`DEFAULT_MIN_GPU_FLOPS_F64`] for f64 and `Complex<f64>`, [`DEFAULT_MIN_GPU_FLOPS_C32`] for `Complex<f32>` |
//! | `GPU_DOT_DEVICE` | a device ordinal: the default CUDA device | `0` |
//! | `GPU_DOT_DEVICES` | `all`, or device ordinals separated by commas (`0,1`), to split large products across | one device |
//! | `GPU_DOT_PEER_COPY` | `1`, `on`, `true`, `yes` or `0`, `off`, `false`, `no`: split products share B over peer links | `1` |
//! | `GPU_DOT_CACHE_DIR` | a folder for compiled kernels (see [Kernel cache](#kernel-cache)); `off`, `0`, `none` or empty: none | the platform's cache folder |
//! | `GPU_DOT_PREBUILT` | `0`, `off`, `false`, `no` or `none` compile every kernel with NVRTC instead of loading the shipped CUBINs; `1`, `on`, `true`, `yes` load them | on |
//! | `GPU_DOT_HOST_THREADS` | a number of helper threads for host copies (`0`: the calling thread alone) | cores − 1, at most 15 |
//! | `GPU_DOT_TRACE` | `1`, `on`, `true`, `yes` or `0`, `off`, `false`, `no`: phase times on stderr | `0` |
//! | `GPU_DOT_SPARE_RESULT` | `1`, `on`, `true`, `yes` or `0`, `off`, `false`, `no`: a loop's next large host result made ready between products | `1` |
//! | `GPU_DOT_GUARD_MEMORY` | `1`, `on`, `true`, `yes` or `0`, `off`, `false`, `no`: shapes the guard refused twice in a row run natively without it for a while | `1` |
//!
//! The first eight are [`DotOptions`]' own: [`DotOptions::default`] reads them once per
//! process. An invalid value of one of them is [`GpuDotError::InvalidEnv`] in the `try_`
//! forms (and from [`DotOptions::from_env`]), whose message lists the accepted values;
//! elsewhere that variable alone takes its built-in default, with a warning through the `log`
//! crate, and the others still apply. The other six are read by the parts of the crate that
//! use them: `GPU_DOT_CACHE_DIR` takes any value, and the last five ignore an invalid value
//! with a warning through `log`, keeping their defaults. In code, [`DotOptions`]' builders set
//! the first eight per call, and [`ProcessSettings`] sets the other six for the process,
//! before its first product.
//!
//! # Errors and the CPU fallback
//!
//! - [`GpuDot::gpu_dot`] behaves as ndarray's `dot`: it panics only on incompatible shapes,
//!   with ndarray's message, never because of the GPU. With no driver, no NVRTC, no device, a
//!   failing driver call, full device memory or a device fault, it computes on the CPU, even
//!   with `GPU_DOT_BACKEND=gpu`; the first such product logs a warning through the
//!   [`log`](https://docs.rs/log) crate, and [`device_status`] says why the GPU is unusable.
//! - The `try_` forms ([`GpuDot::try_gpu_dot`], [`GpuDot::try_gpu_dot_with`],
//!   [`try_general_mat_mul`]) never panic: every failure is a typed [`GpuDotError`] (the
//!   driver's code, NVRTC's log). Under [`Backend::Auto`] a failing GPU still sends a product
//!   of host arrays to the CPU, and its [`Route`] says why; with [`Backend::Gpu`], and for
//!   products of device matrices, the failure is returned, never a silent CPU run.
//! - One case cannot fall back: a device fault after the GPU wrote part of a caller's `C` in
//!   `C = alpha·A·B + beta·C` with `beta ≠ 0`, whose old values are then gone.
//!   [`try_general_mat_mul`] returns it; [`general_mat_mul`] panics with it.
//!
//! # Naming
//!
//! One rule for every name:
//!
//! - A function named after ndarray's ([`GpuDot::gpu_dot`] for `dot`, [`general_mat_mul`])
//!   returns its value and panics only where ndarray's does, on shapes.
//! - A `try_` form returns a `Result` and never panics. So do the constructors and transfers
//!   of [`GpuMatrix`] ([`GpuMatrix::from_array`], [`GpuMatrix::to_array`],
//!   [`GpuMatrix::assign`], [`GpuMatrix::copy_to`]), as ndarray's fallible constructors do.
//! - A `_with` form takes a [`DotOptions`]; the others read the environment's
//!   ([`DotOptions::default`]).
//! - A device is a [`Device`]; where a function takes one, its ordinal (`usize`) converts to
//!   it, and back with `usize::from`.
//!
//! Former names that broke the rule stay for a release, deprecated: `gpu_dot_with`
//! ([`GpuDot::try_gpu_dot_with`]), `general_mat_mul_with` ([`try_general_mat_mul_with`]) and
//! `GpuMatrix::dot` ([`GpuMatrix::try_dot`]).
//!
//! # Kernel cache
//!
//! The kernels ship compiled for `sm_80` (every Ampere and Ada GPU) and `sm_90` (H100, H200).
//! On other devices (or where the driver refuses a shipped kernel) NVRTC compiles each kernel
//! family once, on a background thread while [`Backend::Auto`] products run on the CPU
//! ([`CpuReason::Compiling`]), and an on-disk cache keeps the result for later processes
//! ([`ModuleLoad::cached`]). The folder is [`ENV_CACHE_DIR`] when set, else the platform's
//! cache folder; [`kernel_cache_dir`] says which is in force. What the cache loads runs on the
//! GPU with the process's context, so it trusts only a folder and files that the process's own
//! user alone can have written: a folder owned by another user, or writable by its group or
//! others, turns the cache off for the process, with one warning; products still run, on the
//! shipped kernels or compiled by NVRTC.
//!
//! # Further reading
//!
//! These documents come with the crate's source, in its package and repository:
//!
//! - `docs/precision.md`: the precisions, the bound the default keeps, what runs where, Ozaki
//!   scheme II and the kernels.
//! - `docs/first-use.md`: the first product's cost, the shipped kernels, NVRTC on other GPUs,
//!   [`warm_up`], the kernel cache and what it trusts, and CUDA versions.
//! - `docs/threads-and-devices.md`: the CPU/GPU threshold, how host arrays reach the device,
//!   the helper threads, `GPU_DOT_TRACE`, device-resident matrices and several GPUs.
//! - `docs/faults.md`: no GPU, NVRTC failures, device faults, and the errors that say so.
//! - `ARCHITECTURE.md`: the crate's layers and where new code goes; `BENCHMARKS.md`: the
//!   measured figures, each with its device and method.
//!
//! [ndarray]: https://docs.rs/ndarray

#![warn(missing_docs)]
// The crate's own tools and test hooks are compiled with the `internals` feature alone; the
// code only they reach is dead without it. Dead code is found in the build with `internals`,
// which the crate's tests, examples and lints use.
#![cfg_attr(not(feature = "internals"), allow(dead_code, unused_imports))]

#[cfg(any(test, feature = "internals"))]
#[doc(hidden)]
pub mod accuracy;
mod batch;
mod complex;
mod device;
mod element;
mod engine;
mod error;
mod host;
mod layout;
mod matrix;
mod options;
mod pinned;
mod pipeline;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod prebuild;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod profile;
mod real;
mod route;
mod scalar;
mod settings;
mod split;
mod warm;

/// The ndarray this build of gpu-dot works on (0.15, 0.16 or 0.17: the one the project uses,
/// chosen by the `ndarray-0-15`, `ndarray-0-16` or `ndarray-0-17` feature).
#[cfg(feature = "ndarray-0-17")]
pub use ndarray;
/// The ndarray this build of gpu-dot works on (0.15, 0.16 or 0.17: the one the project uses,
/// chosen by the `ndarray-0-15`, `ndarray-0-16` or `ndarray-0-17` feature).
#[cfg(all(
    feature = "ndarray-0-15",
    not(any(feature = "ndarray-0-16", feature = "ndarray-0-17"))
))]
pub extern crate ndarray015 as ndarray;
/// The ndarray this build of gpu-dot works on (0.15, 0.16 or 0.17: the one the project uses,
/// chosen by the `ndarray-0-15`, `ndarray-0-16` or `ndarray-0-17` feature).
#[cfg(all(feature = "ndarray-0-16", not(feature = "ndarray-0-17")))]
pub extern crate ndarray016 as ndarray;

#[cfg(not(any(
    feature = "ndarray-0-15",
    feature = "ndarray-0-16",
    feature = "ndarray-0-17"
)))]
compile_error!(
    "gpu-dot needs the feature of the project's ndarray version, for ndarray 0.16: \
     gpu-dot = { version = \"0.1\", default-features = false, features = [\"ndarray-0-16\", \
     \"cuda-12080\"] } (ndarray-0-15, ndarray-0-16 or ndarray-0-17; 0.17 is the default)"
);

#[cfg(any(
    all(feature = "ndarray-0-15", feature = "ndarray-0-16"),
    all(feature = "ndarray-0-15", feature = "ndarray-0-17"),
    all(feature = "ndarray-0-16", feature = "ndarray-0-17"),
))]
compile_error!(
    "gpu-dot works on one ndarray version at a time, and two ndarray features are on (the \
     default ndarray-0-17 among them?): a project on ndarray 0.16 turns the defaults off, \
     gpu-dot = { version = \"0.1\", default-features = false, features = [\"ndarray-0-16\", \
     \"cuda-12080\"] } (ndarray-0-15 for 0.15)"
);

#[cfg(not(any(
    feature = "cuda-12080",
    feature = "cuda-12090",
    feature = "cuda-13000",
    feature = "cuda-version-from-build-system",
    feature = "cuda-version-elsewhere"
)))]
compile_error!(
    "gpu-dot needs one CUDA version feature beside its ndarray feature, for ndarray 0.16: \
     gpu-dot = { version = \"0.1\", default-features = false, features = [\"ndarray-0-16\", \
     \"cuda-12080\"] } (cuda-12080, cuda-12090, cuda-13000, cuda-version-from-build-system, \
     or cuda-version-elsewhere where another crate of the build names cudarc's version)"
);

use ndarray::{Array1, Array2, ArrayBase, Axis, Data, Ix1, Ix2};

pub use device::api::{context_rebuilds, device_status, module_loads, Device, DeviceStatus};
#[cfg(feature = "internals")]
#[doc(hidden)]
pub use device::api::{nvrtc_compilations, nvrtc_compilations_in_flight};
pub use device::cache::{kernel_cache_dir, ENV_CACHE_DIR};
pub use device::context::DeviceInfo;
pub use device::modules::ModuleLoad;
pub use device::overrides::ENV_PREBUILT;
pub use element::{Dtype, Element};
pub use scalar::{GpuScalar, Operand, Output};

pub use engine::ozaki::GuardReport;
pub use engine::plan::Plan;
pub use engine::table::TileConfig;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub use engine::tuner::{tuned_plans, tuning_in_progress};
pub use error::{CudaError, GpuDotError, ParseOptionError};
pub use host::crew::ENV_HOST_THREADS;
#[cfg(feature = "internals")]
#[doc(hidden)]
pub use layout::layout_of;
pub use layout::Layout;
#[allow(deprecated)]
pub use matrix::general_mat_mul_with;
pub use matrix::{
    general_mat_mul, try_general_mat_mul, try_general_mat_mul_with, AsOperand, AsOutput, GpuMatrix,
    GpuView,
};
/// num-complex, whose `Complex<f32>` and `Complex<f64>` are the complex element types (the
/// version ndarray's `dot` takes).
pub use num_complex;
pub use options::{
    Backend, Devices, DotOptions, Kernel, Precision, DEFAULT_MIN_GPU_FLOPS,
    DEFAULT_MIN_GPU_FLOPS_C32, DEFAULT_MIN_GPU_FLOPS_F64, DEFAULT_MIN_SPLIT_FLOPS, ENV_AUTOTUNE,
    ENV_BACKEND, ENV_DEVICE, ENV_DEVICES, ENV_KERNEL, ENV_MIN_FLOPS, ENV_PEER_COPY, ENV_PRECISION,
};
#[cfg(feature = "internals")]
#[doc(hidden)]
pub use options::{MAX_MODULI, MIN_MODULI};
pub use pinned::{PinnedArray, PinnedArray1, PinnedArray2, PinnedArray3};
pub use pipeline::{retained_host_memory, retained_memory, trim};
#[cfg(feature = "internals")]
#[doc(hidden)]
pub use route::flops;
pub use route::{CpuReason, HostCopies, Product, Route};
pub use settings::{
    ProcessSettings, SettingAlreadyRead, ENV_GUARD_MEMORY, ENV_SPARE_RESULT, ENV_TRACE,
};
pub use warm::{warm_up, WarmUp};

#[cfg(feature = "internals")]
#[doc(hidden)]
pub use device::KERNELS_HASH;

/// ndarray's `dot` on the GPU, for `f32` and `f64` arrays, with ndarray's `dot` as fallback:
/// every form ndarray's [`Dot`](ndarray::linalg::Dot) has, with the same result types.
///
/// | `self` | `rhs` | result |
/// |---|---|---|
/// | matrix `m × k` | matrix `k × n` | `Array2`, `m × n` |
/// | matrix `m × k` | vector `k` | `Array1`, `m` |
/// | vector `k` | matrix `k × n` | `Array1`, `n` |
/// | vector `k` | vector `k` | the scalar |
///
/// Products with a vector run on the GPU's matrix–vector kernels when they are large enough
/// (the same threshold in flops as matrices: `2·m·k`, `2·k·n` or `2·k`).
pub trait GpuDot<Rhs: ?Sized> {
    /// The result's type: what ndarray's `dot` returns for these operands.
    type Output;

    /// The product `self · rhs`, equal to ndarray's `self.dot(rhs)` within floating-point
    /// tolerance and, for a matrix, in the same memory order (F order when both operands are
    /// column-major, else C order).
    ///
    /// Runs on the GPU when the product is large enough and a GPU is usable, else on the CPU
    /// (see the [crate docs](crate)); it never panics because of the GPU. Options come from
    /// the environment ([`DotOptions::default`]); even with `GPU_DOT_BACKEND=gpu`, a failing
    /// GPU makes this method compute on the CPU (use [`try_gpu_dot`](GpuDot::try_gpu_dot) to
    /// see the error).
    ///
    /// **Panics** if the shapes are incompatible, with ndarray's message.
    ///
    /// ```
    /// use gpu_dot::GpuDot;
    /// use ndarray::{arr1, arr2};
    ///
    /// let a = arr2(&[[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]]); // 2 × 3
    /// let b = arr2(&[[1.0f32], [0.0], [-1.0]]); // 3 × 1
    /// assert_eq!(a.gpu_dot(&b), arr2(&[[-2.0], [-2.0]]));
    /// assert_eq!(a.gpu_dot(&arr1(&[1.0f32, 0.0, -1.0])), arr1(&[-2.0, -2.0]));
    /// assert_eq!(arr1(&[1.0f32, 1.0]).gpu_dot(&a), arr1(&[5.0, 7.0, 9.0]));
    /// assert_eq!(arr1(&[1.0f32, 2.0]).gpu_dot(&arr1(&[3.0f32, 4.0])), 11.0);
    ///
    /// let a = arr2(&[[1.0f64, 2.0], [3.0, 4.0]]);
    /// assert_eq!(a.gpu_dot(&a.t()), a.dot(&a.t()));
    /// ```
    fn gpu_dot(&self, rhs: &Rhs) -> Self::Output;

    /// The product `self · rhs`, as [`gpu_dot`](GpuDot::gpu_dot), but with every failure
    /// returned as a [`GpuDotError`]: never panics.
    ///
    /// ```
    /// use gpu_dot::{GpuDot, GpuDotError};
    /// use ndarray::{Array1, Array2};
    ///
    /// let a = Array2::<f32>::ones((2, 3));
    /// let b = Array2::<f32>::ones((4, 5));
    /// assert!(matches!(
    ///     a.try_gpu_dot(&b),
    ///     Err(GpuDotError::ShapeMismatch { m: 2, k: 3, k2: 4, n: 5 })
    /// ));
    /// assert!(matches!(
    ///     a.try_gpu_dot(&Array1::<f32>::ones(4)),
    ///     Err(GpuDotError::ShapeMismatch { m: 2, k: 3, k2: 4, n: 1 })
    /// ));
    /// ```
    fn try_gpu_dot(&self, rhs: &Rhs) -> Result<Self::Output, GpuDotError>;

    /// The product `self · rhs` with explicit options, returning the product and the route
    /// it took (GPU and which kernel, or CPU and why). Never panics.
    ///
    /// With [`Backend::Gpu`], no usable GPU is an error, never a silent CPU run.
    ///
    /// ```
    /// use gpu_dot::{Backend, DotOptions, GpuDot, Route};
    /// use ndarray::arr2;
    ///
    /// let a = arr2(&[[1.0f32, 2.0], [3.0, 4.0]]);
    /// let p = a.try_gpu_dot_with(&a, &DotOptions::builtin().backend(Backend::Cpu)).unwrap();
    /// assert_eq!(p.c, a.dot(&a));
    /// assert!(matches!(p.route, Route::Cpu(_)));
    /// ```
    fn try_gpu_dot_with(
        &self,
        rhs: &Rhs,
        opts: &DotOptions,
    ) -> Result<Product<Self::Output>, GpuDotError>;

    /// The former name of [`try_gpu_dot_with`](GpuDot::try_gpu_dot_with), from before the
    /// `try_` forms were the ones that return a `Result`.
    #[deprecated(note = "renamed `try_gpu_dot_with`: it returns a `Result`")]
    fn gpu_dot_with(
        &self,
        rhs: &Rhs,
        opts: &DotOptions,
    ) -> Result<Product<Self::Output>, GpuDotError> {
        self.try_gpu_dot_with(rhs, opts)
    }
}

impl<A, S, S2> GpuDot<ArrayBase<S2, Ix2>> for ArrayBase<S, Ix2>
where
    A: GpuScalar,
    S: Data<Elem = A>,
    S2: Data<Elem = A>,
{
    type Output = Array2<A>;

    #[inline]
    #[track_caller]
    fn gpu_dot(&self, rhs: &ArrayBase<S2, Ix2>) -> Array2<A> {
        let ((m, k), (k2, n)) = (self.dim(), rhs.dim());
        if route::check_shapes((m, k), (k2, n)).is_err() {
            dot_shape_error(m, k, k2, n);
        }
        // Below the threshold: ndarray's own product, with nothing before it but a comparison.
        if A::cpu_first(1, (m, k, n)) {
            return self.dot(rhs);
        }
        gpu_dot_2d(self, rhs)
    }

    fn try_gpu_dot(&self, rhs: &ArrayBase<S2, Ix2>) -> Result<Array2<A>, GpuDotError> {
        Ok(self.try_gpu_dot_with(rhs, &DotOptions::from_env()?)?.c)
    }

    fn try_gpu_dot_with(
        &self,
        rhs: &ArrayBase<S2, Ix2>,
        opts: &DotOptions,
    ) -> Result<Product<Array2<A>>, GpuDotError> {
        A::dot_as(self, rhs, opts, false, |c| c, || self.dot(rhs))
    }
}

/// `gpu_dot` of two matrices past the threshold: out of line, so that the calls that stay on
/// the CPU run a small function.
#[inline(never)]
fn gpu_dot_2d<A, S, S2>(a: &ArrayBase<S, Ix2>, b: &ArrayBase<S2, Ix2>) -> Array2<A>
where
    A: GpuScalar,
    S: Data<Elem = A>,
    S2: Data<Elem = A>,
{
    if no_gpu::<A>((a.nrows(), a.ncols(), b.ncols())) {
        return a.dot(b);
    }
    match A::dot_as(a, b, DotOptions::env_ref(), true, |c| c, || a.dot(b)) {
        Ok(product) => product.c,
        // Only a host allocation failure for the result gets here.
        Err(_) => a.dot(b),
    }
}

/// Whether a `gpu_dot` call of an `m × k × n` product of `A` past the threshold goes to
/// ndarray's `dot` because the GPU it would use is known to be unusable
/// (`route::cpu_for_want_of_gpu`): told without allocating, where the router's route, which
/// `gpu_dot` drops, would hold a clone of the device's error. A complex product counts as
/// its four real products (`8·m·k·n` real flops) against its real type's threshold: it is
/// asked only past the complex threshold ([`GpuScalar`]'s `cpu_first`), which is never below
/// the real one, so the check only tells whether the device is usable.
#[inline]
fn no_gpu<A: GpuScalar>((m, k, n): (usize, usize, usize)) -> bool {
    let rows = if A::COMPLEX { m.saturating_mul(4) } else { m };
    route::cpu_for_want_of_gpu((rows, k, n), <A::Real as Element>::DTYPE)
}

/// The forms with a vector: the vector is a one-column (right) or one-row (left) matrix
/// view, and the result loses that axis again. Shapes that disagree panic inside ndarray's
/// own `dot`, so that the message is the one the project's ndarray gives, and the CPU route
/// is ndarray's own vector `dot`.
macro_rules! vector_forms {
    ($lhs:ty, $rhs:ty, $out:ty, |$a:ident, $b:ident| ($a2:expr, $b2:expr), |$c:ident| $finish:expr) => {
        impl<A, S, S2> GpuDot<ArrayBase<S2, $rhs>> for ArrayBase<S, $lhs>
        where
            A: GpuScalar,
            S: Data<Elem = A>,
            S2: Data<Elem = A>,
        {
            type Output = $out;

            #[inline]
            #[track_caller]
            fn gpu_dot(&self, rhs: &ArrayBase<S2, $rhs>) -> $out {
                // Below the threshold: ndarray's own product (and its own panic for bad
                // shapes); the flops are those of the product the shapes name.
                // m·k·n is the length of the matrix (of either vector for two vectors).
                let mkn = (self.len().max(rhs.len()), 1, 1);
                if A::cpu_first(1, mkn) {
                    return self.dot(rhs);
                }
                /// Past the threshold: out of line, so that the calls that stay on the CPU
                /// run a small function.
                #[inline(never)]
                #[track_caller]
                fn past<A: GpuScalar, S: Data<Elem = A>, S2: Data<Elem = A>>(
                    this: &ArrayBase<S, $lhs>,
                    rhs: &ArrayBase<S2, $rhs>,
                ) -> $out {
                    let ($a, $b) = (this.view(), rhs.view());
                    let (a2, b2) = ($a2, $b2);
                    if a2.ncols() != b2.nrows() {
                        let _ = this.dot(rhs);
                        unreachable!("ndarray's dot panics for these shapes");
                    }
                    if no_gpu::<A>((a2.nrows(), a2.ncols(), b2.ncols())) {
                        return this.dot(rhs);
                    }
                    let cpu = || this.dot(rhs);
                    match A::dot_as(&a2, &b2, DotOptions::env_ref(), true, |$c| $finish, cpu) {
                        Ok(product) => product.c,
                        // Only a host allocation failure for the result gets here.
                        Err(_) => this.dot(rhs),
                    }
                }
                past(self, rhs)
            }

            fn try_gpu_dot(&self, rhs: &ArrayBase<S2, $rhs>) -> Result<$out, GpuDotError> {
                Ok(self.try_gpu_dot_with(rhs, &DotOptions::from_env()?)?.c)
            }

            fn try_gpu_dot_with(
                &self,
                rhs: &ArrayBase<S2, $rhs>,
                opts: &DotOptions,
            ) -> Result<Product<$out>, GpuDotError> {
                let ($a, $b) = (self.view(), rhs.view());
                let cpu = || self.dot(rhs);
                A::dot_as(&$a2, &$b2, opts, false, |$c| $finish, cpu)
            }
        }
    };
}

vector_forms!(
    Ix2,
    Ix1,
    Array1<A>,
    |a, b| (a, b.insert_axis(Axis(1))),
    |c| c.remove_axis(Axis(1))
);
vector_forms!(
    Ix1,
    Ix2,
    Array1<A>,
    |a, b| (a.insert_axis(Axis(0)), b),
    |c| c.remove_axis(Axis(0))
);
vector_forms!(
    Ix1,
    Ix1,
    A,
    |a, b| (a.insert_axis(Axis(0)), b.insert_axis(Axis(1))),
    |c| c[[0, 0]]
);

/// ndarray 0.17's reference types (`&ArrayRef2<A>`, `&ArrayRef1<A>`) on either side, as
/// ndarray's own `dot` takes them: each form reads both operands as views.
#[cfg(feature = "ndarray-0-17")]
macro_rules! reference_forms {
    ($($lhs:ty, $rhs:ty, $out:ty, [$($gen:tt)*];)*) => {$(
        impl<A: GpuScalar, $($gen)*> GpuDot<$rhs> for $lhs {
            type Output = $out;

            #[track_caller]
            fn gpu_dot(&self, rhs: &$rhs) -> $out {
                self.view().gpu_dot(&rhs.view())
            }

            fn try_gpu_dot(&self, rhs: &$rhs) -> Result<$out, GpuDotError> {
                self.view().try_gpu_dot(&rhs.view())
            }

            fn try_gpu_dot_with(
                &self,
                rhs: &$rhs,
                opts: &DotOptions,
            ) -> Result<Product<$out>, GpuDotError> {
                self.view().try_gpu_dot_with(&rhs.view(), opts)
            }
        }
    )*};
}

#[cfg(feature = "ndarray-0-17")]
use ndarray::{Array3, ArrayRef, Ix3};

#[cfg(feature = "ndarray-0-17")]
reference_forms! {
    ArrayRef<A, Ix2>, ArrayRef<A, Ix2>, Array2<A>, [];
    ArrayRef<A, Ix2>, ArrayBase<S2, Ix2>, Array2<A>, [S2: Data<Elem = A>];
    ArrayBase<S, Ix2>, ArrayRef<A, Ix2>, Array2<A>, [S: Data<Elem = A>];
    ArrayRef<A, Ix2>, ArrayRef<A, Ix1>, Array1<A>, [];
    ArrayRef<A, Ix2>, ArrayBase<S2, Ix1>, Array1<A>, [S2: Data<Elem = A>];
    ArrayBase<S, Ix2>, ArrayRef<A, Ix1>, Array1<A>, [S: Data<Elem = A>];
    ArrayRef<A, Ix1>, ArrayRef<A, Ix2>, Array1<A>, [];
    ArrayRef<A, Ix1>, ArrayBase<S2, Ix2>, Array1<A>, [S2: Data<Elem = A>];
    ArrayBase<S, Ix1>, ArrayRef<A, Ix2>, Array1<A>, [S: Data<Elem = A>];
    ArrayRef<A, Ix1>, ArrayRef<A, Ix1>, A, [];
    ArrayRef<A, Ix1>, ArrayBase<S2, Ix1>, A, [S2: Data<Elem = A>];
    ArrayBase<S, Ix1>, ArrayRef<A, Ix1>, A, [S: Data<Elem = A>];
    ArrayRef<A, Ix3>, ArrayRef<A, Ix3>, Array3<A>, [];
    ArrayRef<A, Ix3>, ArrayBase<S2, Ix3>, Array3<A>, [S2: Data<Elem = A>];
    ArrayBase<S, Ix3>, ArrayRef<A, Ix3>, Array3<A>, [S: Data<Elem = A>];
    ArrayRef<A, Ix3>, ArrayRef<A, Ix2>, Array3<A>, [];
    ArrayRef<A, Ix3>, ArrayBase<S2, Ix2>, Array3<A>, [S2: Data<Elem = A>];
    ArrayBase<S, Ix3>, ArrayRef<A, Ix2>, Array3<A>, [S: Data<Elem = A>];
}

/// Panics as ndarray's `dot` does for incompatible shapes.
#[cold]
#[inline(never)]
#[track_caller]
fn dot_shape_error(m: usize, k: usize, k2: usize, n: usize) -> ! {
    match m.checked_mul(n) {
        Some(len) if len <= isize::MAX as usize => {}
        _ => panic!("ndarray: shape {m} × {n} overflows isize"),
    }
    panic!("ndarray: inputs {m} × {k} and {k2} × {n} are not compatible for matrix multiplication");
}

/// Panics as ndarray's `general_mat_mul` does for incompatible shapes.
#[cold]
#[inline(never)]
#[track_caller]
fn general_shape_error(a: (usize, usize), b: (usize, usize), c: (usize, usize)) -> ! {
    panic!(
        "ndarray: inputs {} × {}, {} × {}, and output {} × {} are not compatible for matrix multiplication",
        a.0, a.1, b.0, b.1, c.0, c.1
    );
}

/// Hooks for the crate's tests (a kernel that faults, kernel sources replaced before
/// compilation, kernels chosen for an older device); not part of the API.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod __testing {
    pub use crate::device::overrides::{
        complex_four_products, complex_karatsuba, complex_paired, early_splits_at_next,
        emulate_every_size, gemm_before_verdict, gemms_before_verdict_kept, mapped_input_products,
        mapped_inputs_up_to, ozaki_gemm_group, pretend_compute_capability, programmatic_launches,
        split_early, use_prebuilt_kernels,
    };
    pub use crate::device::pinned::live_registrations;
    pub use crate::device::testing::{raise_device_fault, raise_device_fault_on, Fault};
    pub use crate::engine::family::override_kernel_source;

    /// Ozaki scheme II on the CPU, exactly as the kernels compute it (the tests' oracle):
    /// `reference(a, b, (m, k, n), moduli)` with row-major `a` (m × k) and `b` (k × n).
    pub use crate::engine::ozaki::reference as ozaki_reference;

    /// The moduli an automatic Ozaki product of this element type and inner dimension uses.
    pub use crate::engine::ozaki::auto_moduli as ozaki_auto_moduli;

    /// The CPU model of the Ozaki guard: for each element, the first of the counts given whose
    /// product passes it.
    pub use crate::engine::ozaki::guard_counts as ozaki_guard_counts;

    /// The CPU model of the Ozaki guard's early refusal: `None` where it refuses, else the
    /// index (into the counts given) of the count the guard's passes split early for.
    pub use crate::engine::ozaki::refusal_lead as ozaki_refusal_lead;

    /// Forgets the shapes the guard refused lately (`GPU_DOT_GUARD_MEMORY`).
    pub use crate::engine::ozaki::recent::forget as forget_guard_refusals;
}

/// Helpers exposed for the fuzz targets; not part of the API.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod __fuzz {
    pub use crate::host::staging::{pack, unpack};
}

#[cfg(test)]
mod settings_tests;

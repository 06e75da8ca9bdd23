//! Matrix products of `f32` and `f64` [ndarray] matrices on an NVIDIA GPU, as easy as `dot`.
//!
//! ```
//! use gpu_dot::GpuDot;
//! use ndarray::arr2;
//!
//! let a = arr2(&[[1.0f32, 2.0], [3.0, 4.0]]);
//! let b = arr2(&[[5.0f32, 6.0], [7.0, 8.0]]);
//! assert_eq!(a.gpu_dot(&b), a.dot(&b));
//!
//! let x = arr2(&[[1.0f64, 2.0], [3.0, 4.0]]); // f64: DGEMM on the FP64 tensor cores
//! assert_eq!(x.gpu_dot(&x.t()), x.dot(&x.t()));
//! ```
//!
//! [`GpuDot`] is implemented for every 2-D array kind of an [`Element`] type (`f32`, `f64`):
//! `Array2`, `ArrayView2`, `ArrayViewMut2`, `ArcArray2`, `CowArray`, in any layout: C order,
//! F order (`a.t()`), sliced, stepped and negative-stride views. Results equal ndarray's `dot`
//! within floating-point tolerance, in ndarray's memory order (F order when both operands are
//! column-major, else C order) on every route.
//!
//! # Batches
//!
//! A 3-D array is a stack of matrices: `q.gpu_dot(&k)` multiplies a `batch × m × k` stack by a
//! `batch × k × n` stack item by item (as `torch.bmm`), and by a 2-D `k × n` matrix each item
//! by the same matrix. Any layout per operand; the `Array3` result is in C order on every
//! route. On the GPU each operand is uploaded once and one launch computes every item; a stack
//! that moves 8 MiB or more, whose items lie one after another in memory, runs in groups of
//! items instead, each group's copies overlapping another group's launch, with two groups on
//! the device at a time. On the CPU each item is ndarray's `general_mat_mul`. Stacks of
//! different lengths panic (typed [`GpuDotError::BatchMismatch`] in the `try_` forms).
//!
//! ```
//! use gpu_dot::GpuDot;
//! use ndarray::{Array2, Array3};
//!
//! let q = Array3::<f32>::ones((8, 4, 3));
//! let k = Array3::<f32>::ones((8, 3, 5));
//! assert_eq!(q.gpu_dot(&k), Array3::from_elem((8, 4, 5), 3.0));
//! assert_eq!(q.gpu_dot(&Array2::<f32>::ones((3, 2))).dim(), (8, 4, 2));
//! ```
//!
//! # How a product is computed
//!
//! - Products of fewer than [`DEFAULT_MIN_GPU_FLOPS`] flops (`2·m·k·n`; for `f64`,
//!   [`DEFAULT_MIN_GPU_FLOPS_F64`]) run on the CPU through ndarray's own `dot`: below that,
//!   copying to the GPU costs more than it saves.
//! - Larger products run on the GPU when one is usable. The first GPU product of the process
//!   creates a CUDA context (through the driver library, loaded at run time) and loads the
//!   kernels it needs: CUBINs the crate ships for `sm_80` (every Ampere and Ada device) and
//!   `sm_90` (H100, H200), in milliseconds; on other devices NVRTC compiles them once, on a
//!   background thread while `Auto` products run on the CPU ([`CpuReason::Compiling`]), and
//!   the on-disk cache keeps them for later processes (see [Kernel cache](#kernel-cache)).
//!   [`warm_up`] loads (or compiles) them up front.
//! - With no usable GPU (no driver, no NVRTC, no device), [`GpuDot::gpu_dot`] computes on the
//!   CPU; [`device_status`] says why, and [`GpuDot::gpu_dot_with`] reports the route each
//!   product took.
//! - Host operands of any layout are packed into page-locked staging rings (F-order views as
//!   their transpose, so every copy reads memory in order) by the calling thread and a crew of
//!   helper threads, in pieces of tens of KiB; each parcel (128 KiB growing to 4 MiB) is copied
//!   to the device as soon as its pieces are packed, and results come back in parcels that
//!   shrink toward the end, unpacked as they land. Products run in row panels (one stream for
//!   one panel, three for several), so packing, the copies in both directions, the kernels and
//!   the unpacking all overlap at every size. A fresh result's pages are faulted in by the crew
//!   while the device works. Staging and device buffers are kept and reused ([`trim`] frees
//!   them; [`retained_memory`] reports them), so a repeated product allocates nothing.
//! - A fresh result of 32 MiB or more is new memory whose pages the kernel zeroes on first
//!   write, which can cost as much as the copies. When products repeat one such size (up to
//!   256 MiB), a background thread allocates the next result and faults in its pages between
//!   products, and the next product of that size takes it: the *spare result*, one at most,
//!   freed by [`trim`] and counted by [`retained_host_memory`]; `GPU_DOT_SPARE_RESULT=0` turns it
//!   off.
//!
//! # Device-resident matrices and the general form
//!
//! [`GpuMatrix`] keeps a matrix in device memory: upload once ([`GpuMatrix::from_array`]),
//! multiply many times, download when asked ([`GpuMatrix::to_array`]). Products of device
//! matrices, their transposed views ([`GpuMatrix::t`]) and host arrays in any mix stay on the
//! device ([`GpuMatrix::product`], [`GpuMatrix::dot`]), so chains make no round trips.
//! [`general_mat_mul`] is ndarray's `general_mat_mul` (`C = alpha·A·B + beta·C`) for host
//! arrays, and [`try_general_mat_mul`] takes any operands and writes a host array or a
//! [`GpuMatrix`] in place, e.g. an SGD step `W ← W − lr·Xᵀ·G` on device-resident weights.
//!
//! # Devices
//!
//! Products run on the default device: `GPU_DOT_DEVICE`, else device 0. [`DotOptions::device`]
//! sends one product elsewhere, and [`GpuMatrix::from_array_on`] uploads to a chosen device
//! ([`Device`] lists them and reports each one's status). Every device the process uses has
//! its own context, compiled modules, streams, reusable buffers and tuned plans, and a fault
//! on one device rebuilds that device's context alone (where the driver contains the fault:
//! driver 580 lets it reach every device of the process, which then fail with typed errors
//! while `gpu_dot` answers on the CPU). Device matrices never cross devices
//! unasked: a product that mixes them is [`GpuDotError::WrongDevice`];
//! [`GpuMatrix::to_device`] copies one over.
//!
//! One large host-to-host product can use several devices at once: with
//! [`DotOptions::devices`] (or `GPU_DOT_DEVICES`) naming more than one, products of at least
//! [`DEFAULT_MIN_SPLIT_FLOPS`] flops are cut into row panels, one per device in proportion to
//! its multiprocessors, each computed by that device's own pipeline and host threads (B is
//! uploaded to each device once). A device that fails is [`GpuDotError::SplitFailed`] with its
//! ordinal.
//!
//! Building needs no CUDA toolkit; running on a GPU needs only the driver and NVRTC
//! (`libcuda.so`, `libnvrtc.so`, CUDA 12 or 13; with the `cuda-12080` bindings cudarc looks
//! for `libnvrtc.so` and `libnvrtc.so.12`, so a CUDA 13 install needs its unversioned
//! `libnvrtc.so`, which the toolkit's runtime packages ship).
//!
//! The crate logs through the [`log`](https://docs.rs/log) crate: each product's route at
//! debug level, a warning the first time a product that asked for the GPU runs on the CPU
//! because the GPU failed or is missing, and each GPU product's phase times at trace level.
//! `GPU_DOT_TRACE=1` also prints each GPU product's panels, plan, helper threads and phase times
//! (milliseconds from the call: schedule, buffers, first copy, last input copy, last kernel
//! enqueued, results landed, unpacked; the host time spent issuing copies, launching kernels
//! and polling events; and, timed on the device with events, when the last input landed, the
//! kernels began and ended, and the last result landed; who packed and unpacked each piece of
//! the first parcel up and the last parcel down, and when) to stderr.
//!
//! # Choosing
//!
//! [`DotOptions`] picks the backend ([`Backend::Auto`], [`Backend::Gpu`], [`Backend::Cpu`]),
//! the kernel ([`Kernel`]) and the threshold per call. For a whole program, environment
//! variables set the defaults:
//!
//! | variable | values | default |
//! |---|---|---|
//! | `GPU_DOT_BACKEND` | `auto`, `gpu`, `cpu` | `auto` |
//! | `GPU_DOT_KERNEL` | `auto`, `naive`, `tiled16`, `tiled32`, `reg64`, `reg128` | `auto` |
//! | `GPU_DOT_AUTOTUNE` | `1`, `on`, `true`, `yes` or `0`, `off`, `false`, `no` | `1` |
//! | `GPU_DOT_PRECISION` | `auto`, `native` (or `fp32`), `tf32x3`, `tf32`, `ozaki`, `ozaki-N` (N from 2 to 18; see [`Precision`]) | `auto` |
//! | `GPU_DOT_MIN_FLOPS` | a non-negative integer (both element types) | [`DEFAULT_MIN_GPU_FLOPS`], [`DEFAULT_MIN_GPU_FLOPS_F64`] for f64 |
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
//! An invalid value of the first eight is [`GpuDotError::InvalidEnv`] in the `try_` forms,
//! whose message lists the accepted values; elsewhere that variable alone takes its built-in
//! default, with a warning through the `log` crate. The last five ignore an invalid value the
//! same way.
//!
//! # Kernel cache
//!
//! The crate ships every kernel family compiled ahead of time (by NVRTC 12.9, from the same
//! sources) for `sm_80` and `sm_90` (`kernels/prebuilt/`, zstd-compressed, about 3 MB
//! embedded in the library), so that on those devices and their minor versions (`sm_86`,
//! `sm_89`) nothing is compiled at run time ([`ModuleLoad::prebuilt`]). Elsewhere, or where
//! the driver refuses a shipped CUBIN, NVRTC compiles each kernel family to a CUBIN for the
//! device's architecture, and the CUBIN is kept on disk, so that a later process loads it
//! without compiling (see [`ModuleLoad::cached`]). Entries are keyed by the kernel sources ([`KERNELS_HASH`]), the
//! family, the compile options, the architecture and the driver and NVRTC versions, and carry a
//! checksum: anything that does not match is compiled again and rewritten, and a folder that
//! cannot be written only costs the compilation. The folder is [`ENV_CACHE_DIR`] when set
//! (`off`, `0`, `none` or empty turn the cache off), else `$XDG_CACHE_HOME/gpu-dot` or
//! `~/.cache/gpu-dot` on Linux, `~/Library/Caches/gpu-dot` on macOS, `%LOCALAPPDATA%\gpu-dot`
//! on Windows; [`kernel_cache_dir`] says which is in force.
//!
//! What the cache loads runs on the GPU with the process's CUDA context, where it can read and
//! write every operand and result; the checksum guards against damage, not against intent.
//! So, as ssh and gpg refuse key folders that others can write to, the cache trusts only what
//! the process's own (effective) user alone can have written. On Unix:
//!
//! - The folder must be owned by the user and not writable by its group or others. The crate
//!   makes it, and any missing folders above it, with mode 0700, and checks the ones it made
//!   (a folder made by someone else in between is refused). A folder that fails turns the
//!   cache off for the process, with one warning through `log` naming the folder and the
//!   reason; products still run, on the shipped CUBINs or compiled by NVRTC.
//! - An entry is loaded only if it is a regular file (not a link, not a FIFO), owned by the
//!   user and not writable by group or others: it is opened without following links and
//!   checked on the opened file, so nothing can be swapped in between. Any other is ignored,
//!   with a warning, and replaced by the next write.
//! - Entries are written to a new temporary file (created exclusively, mode 0600, never through
//!   a link) and renamed within the folder: no write follows a link planted in the folder.
//!
//! Folders above the cache folder that existed already, and access control lists, are not
//! examined. On other platforms (Windows) there are no owners or modes to check: entries must
//! be regular files and temporary files are still created exclusively, but who may write to
//! the folder is up to its access control list (`%LOCALAPPDATA%`, the default, is the user's
//! own); keep [`ENV_CACHE_DIR`] off shared folders there.
//!
//! # Kernels
//!
//! | kernel | what it does |
//! |---|---|
//! | [`Kernel::Naive`] | one thread per output element, reading global memory |
//! | [`Kernel::Tiled16`] | 16 × 16 shared-memory tiles, boundary-checked |
//! | [`Kernel::Tiled32`] | 32 × 32 shared-memory tiles, boundary-checked |
//! | [`Kernel::Reg64`], [`Kernel::Reg128`] | register-blocked tiles with a cp.async pipeline |
//! | [`Kernel::Auto`] | the register-blocked [`Plan`] and panel count measured fastest, as the pipeline runs them, for the shape class |
//!
//! Each kernel exists for both element types. `f64` products run the register-blocked tiles
//! on the FP64 tensor cores (`mma.sync` f64 shapes of sm_80 and sm_90); devices older than
//! sm_80 run a SIMT FP64 kernel in their place.
//!
//! The `cublas` feature adds cuBLAS SGEMM and DGEMM to [`profile`] as references for benches
//! and the ladder example; products never come from cuBLAS.
//!
//! # Adding a kernel or an element type
//!
//! The kernel table (`src/engine/table.rs`) is the only place launch constants live: each
//! tiled kernel is one row (family, entry stem, tile, threads, dynamic shared memory, K tile,
//! oldest architecture), and entry names are derived from it as
//! `{stem}_{nn|nt|tn|tt}[_u][_splitk]`.
//!
//! - **A tile configuration**: write its entries in the family's `.cu` file with the
//!   `GEMM_PARAMS(T)` signature (kernels/common.cuh), add a `// @launch STEM tile=… block=…
//!   smem=… bk=… minsm=…` line with `static_assert`s tying it to the code, and add the table
//!   row. A unit test checks the table against every `@launch` line.
//! - **An element type**: one `Element` impl (`src/element.rs`: its [`Dtype`], with its BLAS
//!   letter and size), its kernels (the naive and tiled templates instantiate for it with one
//!   line each; a fast family gives the tiled, GEMV and element-wise entries), and its rows in
//!   the table. The transfer pipeline moves elements of any width and needs no change; the
//!   tuner keys plans by element type.
//!
//! [ndarray]: https://docs.rs/ndarray

#![warn(missing_docs)]

#[doc(hidden)]
pub mod accuracy;
mod batch;
mod device;
mod element;
mod engine;
mod error;
mod host;
mod layout;
mod matrix;
mod options;
mod pipeline;
#[doc(hidden)]
pub mod prebuild;
#[doc(hidden)]
pub mod profile;
mod route;
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

pub use device::api::{
    context_rebuilds, device_status, module_loads, nvrtc_compilations,
    nvrtc_compilations_in_flight, Device, DeviceStatus,
};
pub use device::cache::{kernel_cache_dir, ENV_CACHE_DIR};
pub use device::context::DeviceInfo;
pub use device::modules::ModuleLoad;
pub use device::overrides::ENV_PREBUILT;
pub use element::{Dtype, Element};
pub use engine::ozaki::GuardReport;
pub use engine::plan::Plan;
pub use engine::table::TileConfig;
#[doc(hidden)]
pub use engine::tuner::{tuned_plans, tuning_in_progress};
pub use error::{CudaError, GpuDotError};
pub use host::crew::ENV_HOST_THREADS;
pub use layout::{layout_of, Layout};
pub use matrix::{
    general_mat_mul, general_mat_mul_with, try_general_mat_mul, AsOperand, AsOutput, GpuMatrix,
    GpuView, Operand, Output,
};
pub use options::{
    Backend, Devices, DotOptions, Kernel, Precision, DEFAULT_MIN_GPU_FLOPS,
    DEFAULT_MIN_GPU_FLOPS_F64, DEFAULT_MIN_SPLIT_FLOPS, ENV_AUTOTUNE, ENV_BACKEND, ENV_DEVICE,
    ENV_DEVICES, ENV_KERNEL, ENV_MIN_FLOPS, ENV_PEER_COPY, ENV_PRECISION, MAX_MODULI, MIN_MODULI,
};
pub use pipeline::{retained_host_memory, retained_memory, trim};
pub use route::{flops, CpuReason, Product, Route};
pub use warm::{warm_up, WarmUp};

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
    /// let p = a.gpu_dot_with(&a, &DotOptions::builtin().backend(Backend::Cpu)).unwrap();
    /// assert_eq!(p.c, a.dot(&a));
    /// assert!(matches!(p.route, Route::Cpu(_)));
    /// ```
    fn gpu_dot_with(
        &self,
        rhs: &Rhs,
        opts: &DotOptions,
    ) -> Result<Product<Self::Output>, GpuDotError>;
}

impl<A, S, S2> GpuDot<ArrayBase<S2, Ix2>> for ArrayBase<S, Ix2>
where
    A: Element,
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
        if route::cpu_first(1, (m, k, n), A::DTYPE) {
            return self.dot(rhs);
        }
        gpu_dot_2d(self, rhs)
    }

    fn try_gpu_dot(&self, rhs: &ArrayBase<S2, Ix2>) -> Result<Array2<A>, GpuDotError> {
        Ok(route::dot(self, rhs, &DotOptions::from_env()?, false)?.c)
    }

    fn gpu_dot_with(
        &self,
        rhs: &ArrayBase<S2, Ix2>,
        opts: &DotOptions,
    ) -> Result<Product<Array2<A>>, GpuDotError> {
        route::dot(self, rhs, opts, false)
    }
}

/// `gpu_dot` of two matrices past the threshold: out of line, so that the calls that stay on
/// the CPU run a small function.
#[inline(never)]
fn gpu_dot_2d<A, S, S2>(a: &ArrayBase<S, Ix2>, b: &ArrayBase<S2, Ix2>) -> Array2<A>
where
    A: Element,
    S: Data<Elem = A>,
    S2: Data<Elem = A>,
{
    match route::dot(a, b, DotOptions::env_ref(), true) {
        Ok(product) => product.c,
        // Only a host allocation failure for the result gets here.
        Err(_) => a.dot(b),
    }
}

/// The forms with a vector: the vector is a one-column (right) or one-row (left) matrix
/// view, and the result loses that axis again. Shapes that disagree panic inside ndarray's
/// own `dot`, so that the message is the one the project's ndarray gives, and the CPU route
/// is ndarray's own vector `dot`.
macro_rules! vector_forms {
    ($lhs:ty, $rhs:ty, $out:ty, |$a:ident, $b:ident| ($a2:expr, $b2:expr), |$c:ident| $finish:expr) => {
        impl<A, S, S2> GpuDot<ArrayBase<S2, $rhs>> for ArrayBase<S, $lhs>
        where
            A: Element,
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
                if route::cpu_first(1, mkn, A::DTYPE) {
                    return self.dot(rhs);
                }
                /// Past the threshold: out of line, so that the calls that stay on the CPU
                /// run a small function.
                #[inline(never)]
                #[track_caller]
                fn past<A: Element, S: Data<Elem = A>, S2: Data<Elem = A>>(
                    this: &ArrayBase<S, $lhs>,
                    rhs: &ArrayBase<S2, $rhs>,
                ) -> $out {
                    let ($a, $b) = (this.view(), rhs.view());
                    let (a2, b2) = ($a2, $b2);
                    if a2.ncols() != b2.nrows() {
                        let _ = this.dot(rhs);
                        unreachable!("ndarray's dot panics for these shapes");
                    }
                    let cpu = || this.dot(rhs);
                    match route::dot_as(&a2, &b2, DotOptions::env_ref(), true, |$c| $finish, cpu) {
                        Ok(product) => product.c,
                        // Only a host allocation failure for the result gets here.
                        Err(_) => this.dot(rhs),
                    }
                }
                past(self, rhs)
            }

            fn try_gpu_dot(&self, rhs: &ArrayBase<S2, $rhs>) -> Result<$out, GpuDotError> {
                Ok(self.gpu_dot_with(rhs, &DotOptions::from_env()?)?.c)
            }

            fn gpu_dot_with(
                &self,
                rhs: &ArrayBase<S2, $rhs>,
                opts: &DotOptions,
            ) -> Result<Product<$out>, GpuDotError> {
                let ($a, $b) = (self.view(), rhs.view());
                let cpu = || self.dot(rhs);
                route::dot_as(&$a2, &$b2, opts, false, |$c| $finish, cpu)
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
        impl<A: Element, $($gen)*> GpuDot<$rhs> for $lhs {
            type Output = $out;

            #[track_caller]
            fn gpu_dot(&self, rhs: &$rhs) -> $out {
                self.view().gpu_dot(&rhs.view())
            }

            fn try_gpu_dot(&self, rhs: &$rhs) -> Result<$out, GpuDotError> {
                self.view().try_gpu_dot(&rhs.view())
            }

            fn gpu_dot_with(
                &self,
                rhs: &$rhs,
                opts: &DotOptions,
            ) -> Result<Product<$out>, GpuDotError> {
                self.view().gpu_dot_with(&rhs.view(), opts)
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
#[doc(hidden)]
pub mod __testing {
    pub use crate::device::overrides::{
        early_splits_at_next, emulate_every_size, gemm_before_verdict, gemms_before_verdict_kept,
        mapped_input_products, mapped_inputs_up_to, ozaki_gemm_group, pretend_compute_capability,
        programmatic_launches, split_early, use_prebuilt_kernels,
    };
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
#[doc(hidden)]
pub mod __fuzz {
    pub use crate::host::staging::{pack, unpack};
}

#[cfg(test)]
mod settings_tests;

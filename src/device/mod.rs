//! The device layer: the exported device API ([`api`]), the CUDA context of each device with
//! its streams and pools ([`context`]), its module table ([`modules`]), the driver and NVRTC
//! libraries ([`libraries`]), NVRTC ([`compiler`]), the on-disk kernel cache ([`cache`]) and what it trusts ([`trust`]), the
//! shipped CUBINs ([`prebuilt`]), device timing ([`stopwatch`]), host memory page-locked in
//! place ([`pinned`]), and the tests' switches
//! ([`overrides`]) and faulting kernel ([`testing`]).

pub(crate) mod api;
pub(crate) mod cache;
pub(crate) mod compiler;
pub(crate) mod context;
pub(crate) mod libraries;
pub(crate) mod modules;
pub(crate) mod overrides;
pub(crate) mod pinned;
pub(crate) mod prebuilt;
pub(crate) mod stopwatch;
pub(crate) mod testing;
pub(crate) mod trust;

/// A hash of the kernel sources under `kernels/` (FNV-1a, computed by the build script): it
/// changes whenever a kernel does, so compiled code can be identified across processes. For
/// the crate's own benches and tools; not part of the API.
pub const KERNELS_HASH: &str = env!("GPU_DOT_KERNELS_HASH");

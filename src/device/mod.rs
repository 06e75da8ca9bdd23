//! The device: its CUDA context, compiled modules and pools ([`context`]), the on-disk kernel
//! cache ([`cache`]) and the hooks of the fault tests ([`testing`]).

pub(crate) mod cache;
pub(crate) mod compiler;
pub(crate) mod context;
pub(crate) mod overrides;
pub(crate) mod prebuilt;
pub(crate) mod testing;

/// A hash of the kernel sources under `kernels/` (FNV-1a, computed by the build script): it
/// changes whenever a kernel does, so compiled code can be identified across processes. For
/// the crate's own benches and tools; not part of the API.
pub const KERNELS_HASH: &str = env!("GPU_DOT_KERNELS_HASH");

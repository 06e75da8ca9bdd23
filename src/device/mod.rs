//! The device: its CUDA context, compiled modules and pools ([`context`]), the on-disk kernel
//! cache ([`cache`]) and what it trusts ([`trust`]), and the hooks of the fault tests
//! ([`testing`]).

pub(crate) mod cache;
pub(crate) mod compiler;
pub(crate) mod context;
pub(crate) mod prebuilt;
pub(crate) mod testing;
pub(crate) mod trust;

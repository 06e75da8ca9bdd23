//! The general GPU product `C = alpha·A·B + beta·C`, each of A, B and C on the host or on the
//! device, with the transfers overlapped with the kernels; and the uploads and downloads of
//! device matrices.
//!
//! A product runs as named steps (`run` in [`gemm`](mod@gemm)):
//!
//! 1. **operands**: how the device reads each operand (host arrays in their storage order,
//!    F-order views as their transpose; device matrices as they are);
//! 2. **schedule**: the tuner's [`Choice`](crate::engine::tuner::Choice) (row panels, kernel plan) and the
//!    [`Schedule`](schedule::Schedule) of
//!    panels, parcels and pieces;
//! 3. **buffers**: a [`workspace`] from the pool, grown to the schedule (nothing is allocated
//!    in steady state);
//! 4. **endpoints**: each transfer bound to its host matrix and device address;
//! 5. **the panel loop**: the conductor ([`conduct`]) uploads B, then each panel's A (and C's
//!    old value), enqueues the panel's kernels and epilogue, and downloads its result, while
//!    the host crew packs and unpacks pieces in parallel. Emulated panels share op(B)'s
//!    passes (the first does them, the next ones find them in the workspace), and where the
//!    guard's verdicts make a panel's enqueueing wait for the device, it is enqueued once its
//!    inputs have landed and the panel before is done, so that the conductor is free for the
//!    copies meanwhile;
//! 6. **draining**: every stream synchronised, the workspace back in the pool, the time
//!    reported to the tuner.
//!
//! Every call returns only once its work is complete.
//!
//! The files: [`ends`] (sources, destinations and reports), [`gemm`](mod@gemm) (the steps above),
//! [`schedule`], [`workspace`], [`conduct`] and [`link`] (the panel loop), [`transfer`] (whole-matrix
//! moves) and [`batch`] (batched products).

mod batch;
mod board;
mod conduct;
pub(crate) mod ends;
mod gemm;
mod grouped;
mod link;
mod schedule;
#[cfg(test)]
mod sim;
mod stacks;
mod times;
mod transfer;
mod workspace;

pub(crate) use batch::batched;
pub use ends::HostCopies;
pub(crate) use ends::{DevMat, Done, Dst, Failure, Src, TRACE};
pub(crate) use gemm::{gemm, Gemm};
pub(crate) use stacks::{batch_config, BatchOperand, Stack};
pub(crate) use transfer::{
    download_fresh, download_into, duplicate, upload, upload_into, upload_to, zeros,
};
pub(crate) use workspace::Workspace;
pub(crate) use workspace::{give_back, take};
pub use workspace::{retained_host_memory, retained_memory, trim};

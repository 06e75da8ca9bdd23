//! The ends of a GPU product: where each operand comes from ([`Src`]), where the result goes
//! ([`Dst`]), and what the product reports ([`Done`], [`Failure`]).

use std::fmt;
use std::mem::MaybeUninit;

use cudarc::driver::CudaSlice;
use ndarray::{ArrayView2, ArrayViewMut2};
use once_cell::sync::Lazy;

use crate::device::context::Home;
use crate::element::Element;
use crate::engine::tuner::Ran;
use crate::error::GpuDotError;
use crate::layout::{classify, Layout};

/// `GPU_DOT_TRACE=1` prints each GPU product's host-side phase times to stderr (they are
/// logged at trace level in any case). Any value but an on/off switch's is ignored, with a
/// warning.
pub(crate) static TRACE: Lazy<bool> =
    Lazy::new(|| crate::settings::TRACE.switch_from_env("phase times are not printed"));

/// A matrix already on the device, as a kernel reads it.
pub(crate) struct DevMat<'a, T> {
    pub(crate) buf: &'a CudaSlice<T>,
    /// Column-major (element (r, c) at `c * ld + r`) instead of row-major.
    pub(crate) trans: bool,
    pub(crate) ld: usize,
}

/// An operand of the general product: elements of `T` on the host, and on the device in a
/// buffer of `D` (the same type, except for a complex matrix, whose buffer holds its parts:
/// then `rows`, `cols` and the leading dimension count complex elements).
pub(crate) enum Src<'a, T, D = T> {
    Host(ArrayView2<'a, T>),
    /// A host complex matrix's parts as B of a real product: a C-order `K × 2N` array of reals
    /// (each row's parts interleaved, `bᵣ bᵢ bᵣ bᵢ …`), which goes up as it is and which the
    /// product reads expanded on the device, as the `2K × 2N` real matrix whose element block
    /// for `bᵣ + i·bᵢ` is `[[bᵣ, bᵢ], [−bᵢ, bᵣ]]` (the stacked parts' B; `dim` is
    /// `(2K, 2N)`). Only B is read this way.
    HostParts(ArrayView2<'a, D>),
    Device {
        mat: DevMat<'a, D>,
        rows: usize,
        cols: usize,
        /// Where the matrix lives.
        home: Home,
    },
}

impl<T, D> Src<'_, T, D> {
    pub(crate) fn dim(&self) -> (usize, usize) {
        match self {
            Src::Host(v) => v.dim(),
            Src::HostParts(v) => (2 * v.nrows(), v.ncols()),
            Src::Device { rows, cols, .. } => (*rows, *cols),
        }
    }

    /// Where a device matrix lives, and its shape.
    pub(crate) fn home(&self) -> Option<(Home, (usize, usize))> {
        match self {
            Src::Host(_) | Src::HostParts(_) => None,
            Src::Device { home, .. } => Some((*home, self.dim())),
        }
    }
}

impl<T: Element> Src<'_, T> {
    /// How the operand is read, for the route report.
    pub(super) fn layout(&self) -> Layout {
        match self {
            Src::Host(v) | Src::HostParts(v) => classify(v).0,
            Src::Device { .. } => Layout::Device,
        }
    }
}

/// The output of the general product (`T` and `D` as [`Src`]'s).
pub(crate) enum Dst<'a, T, D = T> {
    Host(ArrayViewMut2<'a, T>),
    /// New C-order (standard layout) host memory, not yet initialised: the product writes
    /// every element (its pages are touched in parallel before the results land). Only with
    /// `beta == 0`.
    Fresh(ArrayViewMut2<'a, MaybeUninit<T>>),
    /// Row-major with leading dimension `ld`.
    Device {
        buf: &'a mut CudaSlice<D>,
        rows: usize,
        cols: usize,
        ld: usize,
        /// Where the matrix lives.
        home: Home,
    },
}

impl<T, D> Dst<'_, T, D> {
    pub(crate) fn dim(&self) -> (usize, usize) {
        match self {
            Dst::Host(v) => v.dim(),
            Dst::Fresh(a) => a.dim(),
            Dst::Device { rows, cols, .. } => (*rows, *cols),
        }
    }

    /// Where a device matrix lives, and its shape.
    pub(crate) fn home(&self) -> Option<(Home, (usize, usize))> {
        match self {
            Dst::Device { home, .. } => Some((*home, self.dim())),
            _ => None,
        }
    }
}

/// A failed GPU product, and whether C was already partly written (then C cannot be
/// recomputed from its old value).
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) error: GpuDotError,
    pub(crate) touched: bool,
}

/// What a GPU product did.
pub(crate) struct Done {
    /// The kernel and plan of the first panel (`None` when nothing was multiplied).
    pub(crate) ran: Option<Ran>,
    pub(crate) panels: usize,
    pub(crate) a_layout: Layout,
    pub(crate) b_layout: Layout,
    /// How its host arrays crossed the link.
    pub(crate) host: HostCopies,
}

impl Done {
    /// A product that multiplied nothing (its layouts are placeholders).
    pub(crate) fn nothing() -> Done {
        Done {
            ran: None,
            panels: 0,
            a_layout: Layout::C,
            b_layout: Layout::C,
            host: HostCopies::None,
        }
    }
}

/// How a GPU product's host arrays crossed the link.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostCopies {
    /// No host array was copied: device matrices in and out.
    None,
    /// Every host array went through the crate's page-locked staging: packed by the host's
    /// threads, then copied.
    Staged,
    /// Every host array was copied straight from or into its own page-locked memory (a
    /// [`PinnedArray`](crate::PinnedArray)'s, read or written in place), with no staging.
    Direct,
    /// Some straight, some staged: a pinned array's view that is not contiguous in row-major
    /// order (a transposed or stepped view, a column panel), or an ordinary array beside a
    /// pinned one, goes through staging. So do the smallest products (whose kernels read and
    /// write the staging in place).
    Mixed,
    /// A pinned array's registration failed, so it went through staging like any other
    /// memory (with the driver's reason).
    Unlocked {
        /// Why the array is not page-locked.
        reason: String,
    },
}

impl HostCopies {
    /// The copies of two parts of one product.
    pub(crate) fn and(self, other: HostCopies) -> HostCopies {
        use HostCopies::*;
        match (self, other) {
            (u @ Unlocked { .. }, _) | (_, u @ Unlocked { .. }) => u,
            (None, x) | (x, None) => x,
            (Staged, Staged) => Staged,
            (Direct, Direct) => Direct,
            _ => Mixed,
        }
    }
}

impl fmt::Display for HostCopies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostCopies::None => write!(f, "no host arrays"),
            HostCopies::Staged => write!(f, "host arrays staged"),
            HostCopies::Direct => write!(f, "host arrays copied straight from page-locked memory"),
            HostCopies::Mixed => write!(f, "host arrays partly copied straight, partly staged"),
            HostCopies::Unlocked { reason } => {
                write!(
                    f,
                    "host arrays staged (a pinned array is not page-locked: {reason})"
                )
            }
        }
    }
}

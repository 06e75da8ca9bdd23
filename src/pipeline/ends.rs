//! The ends of a GPU product: where each operand comes from ([`Src`]), where the result goes
//! ([`Dst`]), and what the product reports ([`Done`], [`Failure`]).

use std::mem::MaybeUninit;

use cudarc::driver::CudaSlice;
use ndarray::{ArrayView2, ArrayViewMut2};
use once_cell::sync::Lazy;

use crate::device::context::Home;
use crate::element::Element;
use crate::engine::tuner::Ran;
use crate::error::GpuDotError;
use crate::layout::{classify, Layout};
use crate::route::HostCopies;

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

/// An operand of the general product.
pub(crate) enum Src<'a, T> {
    Host(ArrayView2<'a, T>),
    Device {
        mat: DevMat<'a, T>,
        rows: usize,
        cols: usize,
        /// Where the matrix lives.
        home: Home,
    },
}

impl<T: Element> Src<'_, T> {
    pub(crate) fn dim(&self) -> (usize, usize) {
        match self {
            Src::Host(v) => v.dim(),
            Src::Device { rows, cols, .. } => (*rows, *cols),
        }
    }

    /// Where a device matrix lives, and its shape.
    pub(crate) fn home(&self) -> Option<(Home, (usize, usize))> {
        match self {
            Src::Host(_) => None,
            Src::Device { home, .. } => Some((*home, self.dim())),
        }
    }

    /// How the operand is read, for the route report.
    pub(super) fn layout(&self) -> Layout {
        match self {
            Src::Host(v) => classify(v).0,
            Src::Device { .. } => Layout::Device,
        }
    }
}

/// The output of the general product.
pub(crate) enum Dst<'a, T> {
    Host(ArrayViewMut2<'a, T>),
    /// New C-order (standard layout) host memory, not yet initialised: the product writes
    /// every element (its pages are touched in parallel before the results land). Only with
    /// `beta == 0`.
    Fresh(ArrayViewMut2<'a, MaybeUninit<T>>),
    /// Row-major with leading dimension `ld`.
    Device {
        buf: &'a mut CudaSlice<T>,
        rows: usize,
        cols: usize,
        ld: usize,
        /// Where the matrix lives.
        home: Home,
    },
}

impl<T> Dst<'_, T> {
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

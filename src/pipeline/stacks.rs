//! A batch's operands as the device reads them: each a stack of items in one host matrix
//! ([`BatchOperand`]), packed as one copy, and the tile a batch launches with.

use ndarray::ArrayView2;

use super::ends::HostCopies;
use crate::device::context::Gpu;
use crate::element::{Dtype, Element};
use crate::engine::plan::Plan;
use crate::engine::table::TileConfig;
use crate::engine::tuner::Ran;
use crate::host::staging::HostMat;
use crate::layout::classify;
use crate::options::{Kernel, Precision};

use super::ends::Done;

/// One operand of a batch, all of its items as one host matrix: the items lie at a fixed
/// distance from each other in the matrix's packed copy, so one upload moves them all.
pub(crate) struct BatchOperand<'a, T> {
    /// Every item, as one matrix (items stacked down its rows or along its columns, or the
    /// one shared matrix).
    pub(crate) view: ArrayView2<'a, T>,
    /// How the items are stacked in `view`.
    pub(crate) stack: Stack,
    /// Each item's rows and columns.
    pub(crate) item: (usize, usize),
}

/// How a batch operand's items sit in its matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stack {
    /// Item `i` is rows `i·r .. (i+1)·r`.
    Rows,
    /// Item `i` is columns `i·c .. (i+1)·c`.
    Cols,
    /// One matrix serves every item.
    Shared,
}

impl<T: Element> BatchOperand<'_, T> {
    /// Whether the operand is packed as its transpose (column by column), and then the
    /// distance between items and the leading dimension of each item in the packed copy.
    pub(crate) fn packing(&self) -> (bool, usize, usize) {
        let trans = classify(&self.view).1;
        let (rows, cols) = self.view.dim();
        let (r, c) = self.item;
        // Row-major copy: element (i, j) at i·cols + j; transposed: at j·rows + i.
        let (stride, ld) = match (self.stack, trans) {
            (Stack::Rows, false) => (r * cols, cols),
            (Stack::Rows, true) => (r, rows),
            (Stack::Cols, false) => (c, cols),
            (Stack::Cols, true) => (c * rows, rows),
            (Stack::Shared, false) => (0, cols),
            (Stack::Shared, true) => (0, rows),
        };
        (trans, stride, ld)
    }

    /// Whether each item's packed copy is one range of the operand's packed copy (items in
    /// the order of their index, none interleaved with another), so that a group of items
    /// moves as one transfer. A shared operand moves whole.
    pub(crate) fn items_contiguous(&self) -> bool {
        let (_, stride, _) = self.packing();
        self.stack == Stack::Shared || stride == self.item.0 * self.item.1
    }

    /// The packed copy's host matrix.
    pub(crate) fn host(&self, trans: bool) -> HostMat {
        let m = HostMat::of_view(&self.view);
        if trans {
            m.t()
        } else {
            m
        }
    }
}

/// What a batch that ran on the device reports: the kernel the options asked for, the plan
/// and precision its (first) launch ran, the parts it ran in, and how its operands were read.
pub(crate) fn batch_done<T: Element>(
    kernel: Kernel,
    (plan, precision): (Option<Plan>, Precision),
    parts: usize,
    (a, b): (&BatchOperand<'_, T>, &BatchOperand<'_, T>),
    host: HostCopies,
) -> Done {
    Done {
        ran: Some(Ran {
            kernel,
            plan,
            precision,
            guard: None,
            unavailable: false,
            karatsuba: false,
        }),
        panels: parts,
        a_layout: classify(&a.view).0,
        b_layout: classify(&b.view).0,
        host,
    }
}

/// The tile configuration for a batch under `kernel`: the one a register-blocked kernel
/// names, else (`Auto`) the big tile when the batch makes enough big tiles to fill the device
/// twice over.
pub(crate) fn batch_config(
    gpu: &Gpu,
    kernel: Kernel,
    dtype: Dtype,
    (batch, m, n): (usize, usize, usize),
) -> TileConfig {
    match kernel {
        Kernel::Reg64 => TileConfig::Small,
        Kernel::Reg128 => TileConfig::Big,
        _ => {
            let (tm, tn) = TileConfig::Big.tile(dtype);
            let big_tiles = m.div_ceil(tm) * n.div_ceil(tn) * batch;
            if big_tiles >= 2 * gpu.info.multiprocessors.max(1) as usize {
                TileConfig::Big
            } else {
                TileConfig::Small
            }
        }
    }
}

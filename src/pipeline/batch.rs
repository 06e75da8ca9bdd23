//! Batched products on the device: every item's A and B uploaded at once (each operand packed
//! as one matrix), one launch for the whole batch, and one download of every result.

use ndarray::ArrayView2;

use super::ends::{Done, Failure};
use super::transfer::transfer;
use super::workspace::{self, Needs, Workspace};
use crate::device::context::Gpu;
use crate::element::Element;
use crate::engine::args::{self, DeviceOperand};
use crate::engine::batched::{self, Batch};
use crate::engine::table::TileConfig;
use crate::engine::tuner::Ran;
use crate::error::GpuDotError;
use crate::host::staging::HostMat;
use crate::layout::classify;
use crate::options::{DotOptions, Kernel};

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
    fn packing(&self) -> (bool, usize, usize) {
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

    /// The packed copy's host matrix.
    fn host(&self, trans: bool) -> HostMat {
        let m = HostMat::of_view(&self.view);
        if trans {
            m.t()
        } else {
            m
        }
    }
}

/// Computes `C_z = A_z · B_z` for `batch` items of `m × k` by `k × n` into `c`, a row-major
/// `batch·m × n` host matrix not yet initialised (item `z` at rows `z·m ..`). Dimensions are at
/// least 1 and within the kernels' `int` (checked by the caller). `config` is the tile the
/// register-blocked kernels use. A batch that fails for lack of device memory is retried once
/// after the idle workspaces are freed.
#[allow(clippy::too_many_arguments)]
pub(crate) fn batched<T: Element>(
    gpu: &Gpu,
    opts: &DotOptions,
    config: TileConfig,
    (batch, m, k, n): (usize, usize, usize, usize),
    a: &BatchOperand<'_, T>,
    b: &BatchOperand<'_, T>,
    c: HostMat,
) -> Result<Done, Failure> {
    let mut first = true;
    loop {
        match run(gpu, opts, config, (batch, m, k, n), a, b, c) {
            Ok(done) => return Ok(done),
            Err(GpuDotError::OutOfMemory { .. }) if first && workspace::idle_count(gpu) > 0 => {
                workspace::trim_device(gpu);
                first = false;
            }
            // The output is fresh: a failure leaves nothing of the caller's half-written.
            Err(error) => {
                return Err(Failure {
                    error,
                    touched: false,
                })
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn run<T: Element>(
    gpu: &Gpu,
    opts: &DotOptions,
    config: TileConfig,
    (batch, m, k, n): (usize, usize, usize, usize),
    a: &BatchOperand<'_, T>,
    b: &BatchOperand<'_, T>,
    c: HostMat,
) -> Result<Done, GpuDotError> {
    let c_len = batch * m * n;
    assert_eq!(c.dim(), (batch * m, n), "output shape");
    let mut ws = workspace::take(gpu)?;
    let width = T::DTYPE.size();
    ws.provide(
        gpu,
        &Needs {
            width,
            a: a.view.len(),
            a_slots: 1,
            b: b.view.len(),
            c: c_len,
            c_slots: 1,
            ..Needs::default()
        },
    )?;
    let (a_trans, a_stride, lda) = a.packing();
    let (b_trans, b_stride, ldb) = b.packing();
    let stream = ws.lanes.compute.clone();
    let addr = |ws: &Workspace, which: char| {
        let buf = match which {
            'a' => &ws.dev.a[0],
            'b' => &ws.dev.b,
            _ => &ws.dev.c[0],
        };
        buf.as_ref().expect("provided above").addr(&stream)
    };
    let (a_addr, b_addr, c_addr) = (addr(&ws, 'a'), addr(&ws, 'b'), addr(&ws, 'c'));
    transfer::<T>(gpu, &mut ws, Some((a.host(a_trans), a_addr)), None)?;
    transfer::<T>(gpu, &mut ws, Some((b.host(b_trans), b_addr)), None)?;
    let (plan, precision) = {
        let Workspace { dev, .. } = &mut ws;
        let da = DeviceOperand {
            buf: dev.a[0].as_ref().expect("provided").view::<T>(a.view.len()),
            trans: a_trans,
            ld: lda,
        };
        let db = DeviceOperand {
            buf: dev.b.as_ref().expect("provided").view::<T>(b.view.len()),
            trans: b_trans,
            ld: ldb,
        };
        let mut dc = dev.c[0].as_mut().expect("provided").view_mut::<T>(c_len);
        if opts.poison_output {
            args::poison(&stream, &mut dc)?;
        }
        batched::launch_batched(
            gpu,
            &stream,
            opts.kernel,
            config,
            (m, k, n),
            &da,
            &db,
            &mut dc,
            n,
            Batch {
                items: batch,
                a: a_stride,
                b: b_stride,
                c: m * n,
            },
            opts.precision,
        )?
    };
    transfer::<T>(gpu, &mut ws, None, Some((c, c_addr, true)))?;
    workspace::give_back(gpu, ws);
    Ok(Done {
        ran: Some(Ran {
            kernel: opts.kernel,
            plan,
            precision,
            guard: None,
        }),
        panels: 1,
        a_layout: classify(&a.view).0,
        b_layout: classify(&b.view).0,
    })
}

/// The tile configuration for a batch under `kernel`: the one a register-blocked kernel
/// names, else (`Auto`) the big tile when the batch makes enough big tiles to fill the device
/// twice over.
pub(crate) fn batch_config(
    gpu: &Gpu,
    kernel: Kernel,
    dtype: crate::element::Dtype,
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

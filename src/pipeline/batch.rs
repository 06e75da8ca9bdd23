//! Batched products on the device. A small batch uploads every item's A and B at once (each
//! operand packed as one matrix), runs one launch for the whole batch, and downloads every
//! result at once. A large one runs its items in groups, each group's copies overlapping
//! another group's kernels (`grouped`).

use super::ends::{Done, Failure};
use super::grouped;
use super::stacks::{batch_done, BatchOperand};
use super::transfer::transfer;
use super::workspace::{self, Needs, Workspace};
use crate::device::context::Gpu;
use crate::element::Element;
use crate::engine::args::{self, DeviceOperand};
use crate::engine::batched::{self, Batch};
use crate::engine::table::TileConfig;
use crate::error::GpuDotError;
use crate::host::staging::HostMat;
use crate::options::DotOptions;

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
    let dims = (batch, m, k, n);
    let groups = grouped::groups(gpu, dims, T::DTYPE.size(), a, b);
    let mut first = true;
    loop {
        let attempt = if groups.len() > 1 {
            grouped::run(gpu, opts, dims, a, b, c, &groups)
        } else {
            run(gpu, opts, config, dims, a, b, c)
        };
        match attempt {
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
    let up_a = transfer::<T>(gpu, &mut ws, Some((a.host(a_trans), a_addr)), None)?;
    let up_b = transfer::<T>(gpu, &mut ws, Some((b.host(b_trans), b_addr)), None)?;
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
    let down = transfer::<T>(gpu, &mut ws, None, Some((c, c_addr, true)))?;
    workspace::give_back(gpu, ws);
    let host = up_a.and(up_b).and(down);
    Ok(batch_done(opts.kernel, (plan, precision), 1, (a, b), host))
}

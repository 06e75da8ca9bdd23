//! Batched launches: equal-shape products, one grid layer an item, in chunks of the grid's
//! z extent.

use std::sync::Arc;

use cudarc::driver::{CudaStream, CudaViewMut, LaunchConfig};

use crate::device::context::Gpu;
use crate::element::Element;
use crate::engine::args::{grid_x, DeviceOperand, GemmArgs, Scratch};
use crate::engine::enqueue::Launch;
use crate::engine::launch::{launch_plan, launch_simple};
use crate::engine::plan::Plan;
use crate::engine::table::{SimpleRow, TileConfig, TileRow};
use crate::error::GpuDotError;
use crate::options::{Kernel, Precision};

/// Largest grid extent along z: batches with more items launch in chunks of it.
const MAX_GRID_Z: usize = 65_535;

/// A batch of equal-shape products: item `z` reads A at element offset `z·a`, B at `z·b`
/// (0: one B shared by every item) and writes C at `z·c`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Batch {
    pub(crate) items: usize,
    pub(crate) a: usize,
    pub(crate) b: usize,
    pub(crate) c: usize,
}

impl<'a, T> DeviceOperand<'a, T> {
    /// The operand starting `offset` elements in (None past the buffer's end).
    fn offset_by(&self, offset: usize) -> Option<DeviceOperand<'a, T>> {
        Some(DeviceOperand {
            buf: self.buf.try_slice(offset..)?,
            trans: self.trans,
            ld: self.ld,
        })
    }
}

/// Enqueues a batch of products `C_z (m × n, row-major, leading dimension ldc) = op(A_z) ·
/// op(B_z)` on `stream`. The register-blocked kernels (`Auto`, `Reg64`, `Reg128`) run the
/// whole batch in one launch (one grid layer per item, in chunks of 65 535 items) with the
/// tile configuration `config`, and the plan is returned; the one-output-per-thread kernels
/// run one launch per item.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_batched<T: Element>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    kernel: Kernel,
    config: TileConfig,
    (m, k, n): (usize, usize, usize),
    a: &DeviceOperand<'_, T>,
    b: &DeviceOperand<'_, T>,
    c: &mut CudaViewMut<'_, T>,
    ldc: usize,
    batch: Batch,
    precision: Precision,
) -> Result<(Option<Plan>, Precision), GpuDotError> {
    assert!(m > 0 && k > 0 && n > 0, "empty products never launch");
    if batch.items == 0 {
        return Ok((None, Precision::Native));
    }
    // Every item lies inside the buffers: the last one starts furthest in.
    let last = batch.items - 1;
    let (last_a, last_b) = (a.offset_by(last * batch.a), b.offset_by(last * batch.b));
    assert!(
        last_a.is_some_and(|x| x.covers(m, k)) && last_b.is_some_and(|x| x.covers(k, n)),
        "operand buffers too small for the batch"
    );
    assert!(
        n <= ldc && last * batch.c + (m - 1) * ldc + n <= c.len(),
        "output buffer too small for the batch"
    );
    let item = |z: usize| {
        let a = a.offset_by(z * batch.a).expect("checked above");
        let b = b.offset_by(z * batch.b).expect("checked above");
        (a, b)
    };
    if SimpleRow::of(T::DTYPE, kernel).is_some() {
        for z in 0..batch.items {
            let (a, b) = item(z);
            let mut c = c.slice_mut(z * batch.c..);
            let args = GemmArgs::new((m, k, n), &a, &b, &c, ldc)?;
            launch_simple(gpu, stream, kernel, args, &mut c)?;
        }
        return Ok((None, Precision::Native));
    }
    let dtype = T::DTYPE;
    // Matrix-matrix items from sm_80 on only: a single product with one row or column runs
    // the native GEMV, and an item of a batch gives the same bits; elsewhere the whole batch
    // runs natively in one launch.
    let ozaki_here = m > 1 && n > 1 && gpu.kernel_sm() >= 80;
    if let (Precision::Ozaki { .. }, true) = (precision.for_dtype(dtype), ozaki_here) {
        // One product after another, sharing one workspace; an item the Ozaki kernels cannot
        // run (and so every item: they share shape and device) runs natively.
        let mut ws = Scratch::default();
        let mut ran = None;
        for z in 0..batch.items {
            let (a, b) = item(z);
            let mut c = c.slice_mut(z * batch.c..);
            let args = GemmArgs::new((m, k, n), &a, &b, &c, ldc)?.with_precision(precision);
            let plan = Plan::Tile { config, splits: 1 };
            ran = Some(launch_plan(gpu, stream, plan, args, &mut c, &mut ws, None)?.precision);
        }
        let ran = ran.expect("at least one item");
        return Ok((Some(Plan::Tile { config, splits: 1 }), ran));
    }
    let row = TileRow::of(dtype, precision.for_dtype(dtype), config, gpu.kernel_sm());
    let elems = 16 / std::mem::size_of::<T>();
    let aligned = a.aligned()
        && b.aligned()
        && batch.a.is_multiple_of(elems)
        && batch.b.is_multiple_of(elems);
    let func = gpu.function(row.family, &row.batched_entry((a.trans, b.trans), aligned))?;
    let grid_tiles = grid_x(row.tiles(m, n))?;
    let strides = [batch.a as i64, batch.b as i64, batch.c as i64];
    let mut z0 = 0;
    while z0 < batch.items {
        let items = (batch.items - z0).min(MAX_GRID_Z);
        let (a, b) = item(z0);
        let c = c.slice_mut(z0 * batch.c..);
        let args = GemmArgs::new((m, k, n), &a, &b, &c, ldc)?;
        let cfg = LaunchConfig {
            grid_dim: (grid_tiles, 1, items as u32),
            block_dim: (row.threads, 1, 1),
            shared_mem_bytes: row.smem,
        };
        let mut builder = Launch::on(gpu, stream, &func);
        args.push(&mut builder, &c);
        builder.arg(&strides[0]).arg(&strides[1]).arg(&strides[2]);
        // SAFETY: arguments of `GEMM_PARAMS(T)` then `GD_BATCH_PARAMS` (three 64-bit element
        // strides) in order and type; the entry's layout suffix matches the operands, and the
        // 16-byte-load entry is chosen only when both operands and every item's offset keep
        // 16-byte alignment; grid x has one block per output tile of an item, as for the
        // unbatched entry, and grid z one layer per item of this chunk, each reading and
        // writing its item at z·stride from the chunk's first; every item up to the batch's
        // last lies inside the buffers (asserted above), and edge tiles are guarded in the
        // kernel; block size and dynamic shared memory are the table's, and the function's
        // shared-memory limit was raised to it when the module was loaded.
        unsafe { builder.launch(cfg) }
            .map_err(GpuDotError::at("launching a batched GEMM kernel"))?;
        z0 += items;
    }
    Ok((Some(Plan::Tile { config, splits: 1 }), row.precision))
}

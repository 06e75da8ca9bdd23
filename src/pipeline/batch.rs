//! Batched products on the device. A small batch uploads every item's A and B at once (each
//! operand packed as one matrix), runs one launch for the whole batch, and downloads every
//! result at once. A large one runs its items in groups, each group's copies overlapping
//! another group's kernels (a [`Schedule::batch`] run by the conductor).

use ndarray::ArrayView2;

use super::conduct::{self, Endpoints, Run, Trace};
use super::ends::{Done, Failure};
use super::link::{CudaLink, Streams};
use super::schedule::{BatchB, Schedule, What};
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

    /// Whether each item's packed copy is one range of the operand's packed copy (items in
    /// the order of their index, none interleaved with another), so that a group of items
    /// moves as one transfer. A shared operand moves whole.
    fn items_contiguous(&self) -> bool {
        let (_, stride, _) = self.packing();
        self.stack == Stack::Shared || stride == self.item.0 * self.item.1
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
    let dims = (batch, m, k, n);
    let groups = groups(gpu, dims, T::DTYPE.size(), a, b);
    let mut first = true;
    loop {
        let attempt = if groups.len() > 1 {
            run_grouped(gpu, opts, dims, a, b, c, &groups)
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

/// Device slots of a batch that runs in groups: the groups each slot holds in turn.
const SLOTS: usize = 2;
/// Bytes a batch moves (its A, B and C) from which it runs in groups of items.
const GROUPED_BYTES: usize = 8 << 20;
/// Bytes a group moves at least.
const GROUP_BYTES: usize = 4 << 20;
/// Groups a batch runs in at most, unless its groups would move more than
/// [`MAX_GROUP_BYTES`] each.
const MAX_GROUPS: usize = 8;
/// Bytes a group moves at most: the device holds two groups at a time, so a batch of any size
/// runs in a bounded amount of device memory.
const MAX_GROUP_BYTES: usize = 256 << 20;

/// The item ranges a batch runs in, in order: the whole batch, or (when it moves at least
/// [`GROUPED_BYTES`] and each group's items are one range of every operand's packed copy)
/// up to [`MAX_GROUPS`] groups of at least [`GROUP_BYTES`] each, every group with tiles for
/// at least one wave of the device's multiprocessors; and as many more as keep each group
/// within [`MAX_GROUP_BYTES`]. Groups differ by at most one item.
fn groups<T: Element>(
    gpu: &Gpu,
    (batch, m, k, n): (usize, usize, usize, usize),
    width: usize,
    a: &BatchOperand<'_, T>,
    b: &BatchOperand<'_, T>,
) -> Vec<(usize, usize)> {
    let shared = if b.stack == Stack::Shared { k * n } else { 0 };
    let per_item = (m * k + if shared == 0 { k * n } else { 0 } + m * n) * width;
    let (tm, tn) = TileConfig::Small.tile(T::DTYPE);
    let tiles = m.div_ceil(tm) * n.div_ceil(tn);
    let wave = (gpu.info.multiprocessors.max(1) as usize).div_ceil(tiles);
    split_items(
        batch,
        per_item,
        shared * width,
        wave,
        a.items_contiguous() && b.items_contiguous(),
    )
}

/// [`groups`] from a batch's count of items, the bytes each item moves and those a shared B
/// moves, the items a group needs to fill the device once, and whether the operands' items
/// can move in groups.
fn split_items(
    batch: usize,
    per_item: usize,
    shared: usize,
    wave: usize,
    contiguous: bool,
) -> Vec<(usize, usize)> {
    let items = batch.saturating_mul(per_item);
    let total = items.saturating_add(shared);
    let count = if contiguous && total >= GROUPED_BYTES {
        (total / GROUP_BYTES)
            .min(MAX_GROUPS)
            .min(batch / wave.max(1))
            .max(items.div_ceil(MAX_GROUP_BYTES))
            .clamp(1, batch.max(1))
    } else {
        1
    };
    (0..count)
        .map(|g| (g * batch / count, (g + 1) * batch / count))
        .collect()
}

/// [`run`] in groups of items (`groups`, in order, covering the batch): group `g`'s A (and
/// B, when each item has its own) goes up while the groups before it multiply, and its
/// results come down while the groups after it do. The device holds two groups at a time:
/// group `g` uses slot `g % 2` of A's, B's and C's buffers (a shared B is uploaded whole,
/// once), and waits for group `g − 2`'s kernels before its uploads and for its results'
/// download before its kernels. `c` must be fresh (never written): its pages are touched
/// ahead of the results.
fn run_grouped<T: Element>(
    gpu: &Gpu,
    opts: &DotOptions,
    (batch, m, k, n): (usize, usize, usize, usize),
    a: &BatchOperand<'_, T>,
    b: &BatchOperand<'_, T>,
    c: HostMat,
    groups: &[(usize, usize)],
) -> Result<Done, GpuDotError> {
    assert_eq!(c.dim(), (batch * m, n), "output shape");
    let width = T::DTYPE.size();
    let (a_trans, a_stride, lda) = a.packing();
    let (b_trans, b_stride, ldb) = b.packing();
    let b_moves = if b.stack == Stack::Shared {
        BatchB::Shared(b.view.len())
    } else {
        BatchB::Each(k * n)
    };
    let sched = Schedule::batch(groups, m * k, b_moves, m * n);
    // Two slots, each of the largest group's items (the items of a group lie one after
    // another, `stride` apart: their own length, as their packing is contiguous).
    let slots = groups.len().min(SLOTS);
    let most = groups.iter().map(|(z0, z1)| z1 - z0).max().unwrap_or(0);
    let slot_len = |stride: usize| most * stride;
    let b_len = match b_moves {
        BatchB::Shared(len) => len,
        BatchB::Each(_) => slots * slot_len(b_stride),
    };
    let mut ws = workspace::take(gpu)?;
    ws.provide(
        gpu,
        &Needs {
            width,
            a: slots * slot_len(a_stride),
            a_slots: 1,
            b: b_len,
            c: slots * slot_len(m * n),
            c_slots: 1,
            up_ring: sched.up.ring_len(),
            down_ring: sched.down.ring_len(),
            ..Needs::default()
        },
    )?;
    let Workspace {
        lanes,
        dev,
        staging,
    } = &mut ws;
    let compute = lanes.compute.clone();
    let addr = |buf: &Option<args::DevBuf>| buf.as_ref().expect("provided above").addr(&compute);
    let (a_addr, b_addr, c_addr) = (addr(&dev.a[0]), addr(&dev.b), addr(&dev.c[0]));
    // The packed host matrices, each item `q` of their rows from the last one's.
    let (ha, hb) = (a.host(a_trans), b.host(b_trans));
    let (qa, qb) = (a_stride / ha.dim().1.max(1), b_stride / hb.dim().1.max(1));
    // Group `g`'s place in a buffer of slots `len` elements long, as an address or an offset.
    let slot_at = |g: usize, len: usize| (g % slots) * len;
    let at = |base: u64, elements: usize| base + (elements * width) as u64;
    let mut ends = Endpoints {
        up_host: Vec::with_capacity(sched.up.transfers.len()),
        up_dev: Vec::with_capacity(sched.up.transfers.len()),
        down_host: Vec::with_capacity(groups.len()),
        down_dev: Vec::with_capacity(groups.len()),
        fresh: Some(c),
        width,
    };
    for t in &sched.up.transfers {
        let (host, dst) = match t.what {
            What::B => (hb, b_addr),
            What::A(g) => {
                let (z0, z1) = groups[g];
                let dst = at(a_addr, slot_at(g, slot_len(a_stride)));
                (ha.rows(z0 * qa, z1 * qa), dst)
            }
            What::BItems(g) => {
                let (z0, z1) = groups[g];
                let dst = at(b_addr, slot_at(g, slot_len(b_stride)));
                (hb.rows(z0 * qb, z1 * qb), dst)
            }
            What::CIn(_) | What::COut(_) | What::Whole => unreachable!("not an input of a batch"),
        };
        assert_eq!(host.len(), t.len, "a transfer's host matrix has its length");
        ends.up_host.push(host);
        ends.up_dev.push(dst);
    }
    for (g, &(z0, z1)) in groups.iter().enumerate() {
        ends.down_host.push(c.rows(z0 * m, z1 * m));
        ends.down_dev.push(at(c_addr, slot_at(g, slot_len(m * n))));
    }
    let streams = Streams {
        up: lanes.up.clone(),
        compute: compute.clone(),
        down: lanes.down.clone(),
    };
    let events = lanes.events(gpu, CudaLink::events_needed(&sched, true))?;
    let run = Run {
        link: CudaLink::new(streams, events, &sched),
        up_ring: staging.up.as_ref().map(|r| r.ring(width)),
        down_ring: staging.down.as_ref().map(|r| r.ring(width)),
        // The uploads of A's and B's items, and the kernels writing C, wait for the group
        // that used the slot before.
        a_slots: slots,
        c_slots: slots,
        mapped_result: false,
        bytes_per_helper: conduct::BYTES_PER_HELPER,
        work_waits: false,
    };
    let mut ran = None;
    let mut group_work = |g: usize| -> Result<(), GpuDotError> {
        let (z0, z1) = groups[g];
        let items = z1 - z0;
        let da = DeviceOperand {
            buf: dev.a[0]
                .as_ref()
                .expect("provided")
                .view::<T>(slots * slot_len(a_stride))
                .slice(slot_at(g, slot_len(a_stride))..),
            trans: a_trans,
            ld: lda,
        };
        let b_at = match b_moves {
            BatchB::Shared(_) => 0,
            BatchB::Each(_) => slot_at(g, slot_len(b_stride)),
        };
        let db = DeviceOperand {
            buf: dev
                .b
                .as_ref()
                .expect("provided")
                .view::<T>(b_len)
                .slice(b_at..),
            trans: b_trans,
            ld: ldb,
        };
        let c_len = slot_len(m * n);
        let mut dc_slots = dev.c[0]
            .as_mut()
            .expect("provided")
            .view_mut::<T>(slots * c_len);
        let at = slot_at(g, c_len);
        let mut dc = dc_slots.slice_mut(at..at + items * m * n);
        if opts.poison_output {
            args::poison(&compute, &mut dc)?;
        }
        let config = batch_config(gpu, opts.kernel, T::DTYPE, (items, m, n));
        let launched = batched::launch_batched(
            gpu,
            &compute,
            opts.kernel,
            config,
            (m, k, n),
            &da,
            &db,
            &mut dc,
            n,
            Batch {
                items,
                a: a_stride,
                b: b_stride,
                c: m * n,
            },
            opts.precision,
        )?;
        ran.get_or_insert(launched);
        Ok(())
    };
    conduct::conduct(
        &sched,
        &ends,
        &run,
        &mut group_work,
        &mut false,
        &mut Trace::default(),
    )?;
    drop(run);
    workspace::give_back(gpu, ws);
    let (plan, precision) = ran.expect("a batch has a group");
    Ok(Done {
        ran: Some(Ran {
            kernel: opts.kernel,
            plan,
            precision,
            guard: None,
        }),
        panels: groups.len(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_of_a_few_mib_run_whole() {
        // 7 MiB in all, or items that interleave: one group.
        assert_eq!(split_items(7, 1 << 20, 0, 1, true), [(0, 7)]);
        assert_eq!(split_items(64, 1 << 20, 0, 1, false), [(0, 64)]);
    }

    #[test]
    fn large_batches_run_in_groups_of_a_few_mib() {
        // 8 MiB: two groups of 4; 3 MiB items, 30 MiB: seven groups of at least 4 MiB.
        assert_eq!(split_items(8, 1 << 20, 0, 1, true), [(0, 4), (4, 8)]);
        let g = split_items(10, 3 << 20, 0, 1, true);
        assert_eq!(g.len(), 7);
        // At most eight groups, in order, covering the batch, differing by one item at most.
        let g = split_items(1001, 1 << 20, 0, 1, true);
        assert_eq!(g.len(), MAX_GROUPS);
        assert_eq!((g[0].0, g[7].1), (0, 1001));
        for w in g.windows(2) {
            assert_eq!(w[0].1, w[1].0);
        }
        let sizes: Vec<usize> = g.iter().map(|(z0, z1)| z1 - z0).collect();
        assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1);
        // A shared B counts toward the batch's bytes once.
        assert_eq!(split_items(2, 1 << 20, 6 << 20, 1, true).len(), 2);
    }

    #[test]
    fn groups_of_a_huge_batch_stay_within_their_bytes() {
        // 10 000 MiB of items: 40 groups of 250 MiB, whatever a wave asks; at most one item
        // per group when the items themselves are larger.
        let g = split_items(1000, 10 << 20, 0, 132, true);
        assert_eq!(g.len(), 40);
        assert!(g
            .iter()
            .all(|(z0, z1)| (z1 - z0) * (10 << 20) <= MAX_GROUP_BYTES));
        assert_eq!(split_items(3, 1 << 30, 0, 1, true).len(), 3);
        // 1000 MiB: eight groups.
        assert_eq!(split_items(100, 10 << 20, 0, 1, true).len(), MAX_GROUPS);
    }

    #[test]
    fn every_group_fills_the_device_once() {
        // Items of one tile each on 132 multiprocessors: groups of at least 132 items.
        let g = split_items(300, 64 << 10, 0, 132, true);
        assert_eq!(g.len(), 2);
        assert!(g.iter().all(|(z0, z1)| z1 - z0 >= 132));
        assert_eq!(split_items(131, 1 << 20, 0, 132, true), [(0, 131)]);
    }
}

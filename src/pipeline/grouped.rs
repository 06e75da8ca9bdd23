//! Large batches in groups of items: a batch of host stacks that moves enough bytes runs its
//! items in groups of consecutive items, group `g`'s uploads and downloads overlapping the
//! other groups' launches (a [`Schedule::batch`] run by the conductor). The device holds two
//! groups at a time, so a batch of any size runs in bounded device memory.

use std::sync::Arc;

use cudarc::driver::CudaStream;

use super::board::Endpoints;
use super::conduct::{self, Run, Trace};
use super::ends::Done;
use super::ends::HostCopies;
use super::link::{CudaLink, Streams};
use super::schedule::{BatchB, Schedule, What};
use super::stacks::{batch_config, batch_done, BatchOperand, Stack};
use super::workspace::{self, Needs, Workspace};
use crate::device::context::Gpu;
use crate::element::Element;
use crate::engine::args::{self, DevBuf, DeviceOperand};
use crate::engine::batched::{self, Batch};
use crate::engine::plan::Plan;
use crate::engine::table::TileConfig;
use crate::error::GpuDotError;
use crate::host::staging::HostMat;
use crate::options::{DotOptions, Precision};

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
pub(super) fn groups<T: Element>(
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
    let contiguous = a.items_contiguous() && b.items_contiguous();
    split_items(batch, per_item, shared * width, wave, contiguous)
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

/// Where the groups of a batch lie on the device: each buffer holds [`SLOTS`] slots (fewer
/// when there are fewer groups) of the largest group's items, and group `g` uses slot
/// `g % count`.
#[derive(Clone, Copy)]
struct Slots {
    count: usize,
    most: usize,
}

impl Slots {
    fn of(groups: &[(usize, usize)]) -> Slots {
        Slots {
            count: groups.len().min(SLOTS),
            most: groups.iter().map(|(z0, z1)| z1 - z0).max().unwrap_or(0),
        }
    }

    /// Elements of one slot, for items `stride` elements apart.
    fn len(self, stride: usize) -> usize {
        self.most * stride
    }

    /// Elements of a buffer of every slot.
    fn total(self, stride: usize) -> usize {
        self.count * self.len(stride)
    }

    /// Where group `g`'s first item lies in a buffer of slots, in elements.
    fn at(self, g: usize, stride: usize) -> usize {
        (g % self.count) * self.len(stride)
    }
}

/// How a grouped batch's operands lie, packed: whether each is transposed, the distance
/// between its items and its leading dimension, and how B moves.
struct Packing {
    a: (bool, usize, usize),
    b: (bool, usize, usize),
    b_moves: BatchB,
}

impl Packing {
    fn of<T: Element>(a: &BatchOperand<'_, T>, b: &BatchOperand<'_, T>, kn: usize) -> Packing {
        Packing {
            a: a.packing(),
            b: b.packing(),
            b_moves: if b.stack == Stack::Shared {
                BatchB::Shared(b.view.len())
            } else {
                BatchB::Each(kn)
            },
        }
    }

    /// Elements of B's buffer: all of a shared B, else its slots.
    fn b_len(&self, slots: Slots) -> usize {
        match self.b_moves {
            BatchB::Shared(len) => len,
            BatchB::Each(_) => slots.total(self.b.1),
        }
    }

    /// Where group `g`'s B lies in B's buffer, in elements.
    fn b_at(&self, slots: Slots, g: usize) -> usize {
        match self.b_moves {
            BatchB::Shared(_) => 0,
            BatchB::Each(_) => slots.at(g, self.b.1),
        }
    }
}

/// The batched product of [`super::batch::batched`] in groups of items (`groups`, in order,
/// covering the batch, more than one): group `g`'s A (and B, when each item has its own) goes
/// up while the groups before it multiply, and its results come down while the groups after
/// it do. Group `g` waits for group `g − 2`'s kernels before its uploads, and for its results'
/// download before its kernels (a shared B is uploaded whole, once). `c` must be fresh (never
/// written): its pages are touched ahead of the results.
pub(super) fn run<T: Element>(
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
    // Step 1: the schedule, the slots, and a workspace with both.
    let packing = Packing::of(a, b, k * n);
    let sched = Schedule::batch(groups, m * k, packing.b_moves, m * n);
    let slots = Slots::of(groups);
    let mut ws = workspace::take(gpu)?;
    ws.provide(
        gpu,
        &Needs {
            width,
            a: slots.total(packing.a.1),
            a_slots: 1,
            b: packing.b_len(slots),
            c: slots.total(m * n),
            c_slots: 1,
            up_ring: sched.up.ring_len(),
            down_ring: sched.down.ring_len(),
            ..Needs::default()
        },
    )?;
    // Step 2: each transfer bound to its host matrix and its slot.
    let (ends, host) = endpoints(gpu, &ws, &sched, &packing, slots, (a, b, c), (m, n), groups);
    // Step 3: the conductor runs the schedule, enqueueing each group's launch.
    let Workspace {
        lanes,
        dev,
        staging,
    } = &mut ws;
    let compute = lanes.compute.clone();
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
        a_slots: slots.count,
        c_slots: slots.count,
        mapped_result: false,
        mapped_inputs: false,
        bytes_per_helper: conduct::BYTES_PER_HELPER,
        work_waits: false,
    };
    let mut ran = None;
    let mut group_work = |g: usize| -> Result<(), GpuDotError> {
        let (z0, z1) = groups[g];
        let bufs = (&dev.a[0], &dev.b, &mut dev.c[0]);
        let launched = enqueue_group::<T>(
            gpu,
            opts,
            &compute,
            &packing,
            slots,
            bufs,
            (m, k, n),
            g,
            z1 - z0,
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
    let ran = ran.expect("a batch has a group");
    Ok(batch_done(opts.kernel, ran, groups.len(), (a, b), host))
}

/// Step 2: every transfer of `sched` bound to its host matrix and to its group's slot of the
/// workspace's buffers (a shared B to the start of B's).
#[allow(clippy::too_many_arguments)]
fn endpoints<T: Element>(
    gpu: &Gpu,
    ws: &Workspace,
    sched: &Schedule,
    packing: &Packing,
    slots: Slots,
    (a, b, c): (&BatchOperand<'_, T>, &BatchOperand<'_, T>, HostMat),
    (m, n): (usize, usize),
    groups: &[(usize, usize)],
) -> (Endpoints, HostCopies) {
    let width = T::DTYPE.size();
    let stream = &ws.lanes.compute;
    let addr = |buf: &Option<DevBuf>| buf.as_ref().expect("provided").addr(stream);
    let at = |buf: &Option<DevBuf>, elements: usize| addr(buf) + (elements * width) as u64;
    // The packed host matrices: item z is rows z·q .. (z + 1)·q of each.
    let ((a_trans, a_stride, _), (b_trans, b_stride, _)) = (packing.a, packing.b);
    let (ha, hb) = (a.host(a_trans), b.host(b_trans));
    let (qa, qb) = (a_stride / ha.dim().1.max(1), b_stride / hb.dim().1.max(1));
    let mut ends = Endpoints::new(width, Some(c));
    for t in &sched.up.transfers {
        let (host, dst) = match t.what {
            What::B => (hb, addr(&ws.dev.b)),
            What::A(g) => {
                let (z0, z1) = groups[g];
                let dst = at(&ws.dev.a[0], slots.at(g, a_stride));
                (ha.rows(z0 * qa, z1 * qa), dst)
            }
            What::BItems(g) => {
                let (z0, z1) = groups[g];
                let dst = at(&ws.dev.b, packing.b_at(slots, g));
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
        ends.down_dev.push(at(&ws.dev.c[0], slots.at(g, m * n)));
    }
    let host = ends.copy_direct(true, true, (gpu.info.ordinal, gpu.generation));
    (ends, host)
}

/// An operand's buffer of `len` elements seen from element `at` (a group's place), packed as
/// `(trans, _, ld)` says.
fn slot_operand<T: Element>(
    buf: &Option<DevBuf>,
    len: usize,
    at: usize,
    (trans, _, ld): (bool, usize, usize),
) -> DeviceOperand<'_, T> {
    DeviceOperand {
        buf: buf.as_ref().expect("provided").view::<T>(len).slice(at..),
        trans,
        ld,
    }
}

/// Group `g`'s launch of `items` items on `stream`, its operands and results in its slots of
/// the buffers `(a, b, c)` (its results poisoned first where the options ask): what
/// [`batched::launch_batched`] returns.
#[allow(clippy::too_many_arguments)]
fn enqueue_group<T: Element>(
    gpu: &Gpu,
    opts: &DotOptions,
    stream: &Arc<CudaStream>,
    packing: &Packing,
    slots: Slots,
    (a, b, c): (&Option<DevBuf>, &Option<DevBuf>, &mut Option<DevBuf>),
    (m, k, n): (usize, usize, usize),
    g: usize,
    items: usize,
) -> Result<(Option<Plan>, Precision), GpuDotError> {
    let (a_stride, b_stride) = (packing.a.1, packing.b.1);
    let da = slot_operand::<T>(a, slots.total(a_stride), slots.at(g, a_stride), packing.a);
    let db = slot_operand::<T>(b, packing.b_len(slots), packing.b_at(slots, g), packing.b);
    let mut dc_slots = c
        .as_mut()
        .expect("provided")
        .view_mut::<T>(slots.total(m * n));
    let at = slots.at(g, m * n);
    let mut dc = dc_slots.slice_mut(at..at + items * m * n);
    if opts.poison_output {
        args::poison(stream, &mut dc)?;
    }
    batched::launch_batched(
        gpu,
        stream,
        opts.kernel,
        batch_config(gpu, opts.kernel, T::DTYPE, (items, m, n)),
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
    )
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

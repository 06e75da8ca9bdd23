//! The shared progress of one run of a [`Schedule`]: the pieces of host work (packing
//! up-parcels, unpacking down-parcels, touching the pages of a fresh result) that the crew and
//! the conductor ([`super::conduct`]) claim from three queues, and the ends of the transfers
//! they read and write.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::time::Instant;

use cudarc::driver::sys::CUdeviceptr;

use super::ends::HostCopies;
use super::schedule::{Direction, Schedule};
use crate::device::pinned::{self, Memory};
use crate::host::staging::{release_lines, HostMat, Ring, Stores};

/// Bytes of a run's up transfers for which its staging is packed with streaming stores
/// ([`Stores::Streaming`]), so that the copy engine reads it from memory rather than from the
/// cores' caches; other runs pack with plain stores.
///
/// Measured host to host on an H100 host (BENCHMARKS.md, the same sweep run with each kind of
/// store): with streaming stores, products moving 1 to 40 MiB up ran 8–27% faster (f32 384³
/// to 1536³ and 1000 × 3000 × 500; f64 256³ to 1536³), while smaller ones ran 5 to 30 µs
/// slower (f32 up to 256³) and larger ones 4–10% slower (f32 3072³, 8192³ and
/// 4096 × 4096 × 64; f64 2048³ and 8192 × 1024 × 1024). Releasing the lines of the large
/// uploads instead (plain stores, then `cldemote`) made them up to 15% slower.
pub(crate) const STREAMING_UP_BYTES: std::ops::RangeInclusive<usize> = (1 << 20)..=(40 << 20);

/// Bytes of a run's down transfers for which each line of its down staging is released
/// ([`release_lines`]) once unpacked, so that the next copy into it does not find it in a
/// core's cache. Measured as above: f32 512³ and 1024³ and f64 384³ to 1024³ (1 to 8 MiB down)
/// ran 5–23% faster into an existing array with it; f32 2048³ and 8192 × 1024 × 1024 and f64
/// 1536³ and 2048³ (16 to 32 MiB down) ran 6–10% slower.
pub(crate) const RELEASED_DOWN_BYTES: std::ops::RangeInclusive<usize> = (1 << 20)..=(8 << 20);

/// The bytes of a direction's transfers, with elements of `width` bytes.
fn direction_bytes(dir: &Direction, width: usize) -> usize {
    dir.transfers.iter().map(|t| t.len).sum::<usize>() * width
}

/// How a run of `sched` packs its staging, with elements of `width` bytes.
pub(crate) fn up_stores(sched: &Schedule, width: usize) -> Stores {
    if STREAMING_UP_BYTES.contains(&direction_bytes(&sched.up, width)) {
        Stores::Streaming
    } else {
        Stores::Cached
    }
}

/// Whether a run of `sched` releases the lines of its down staging once unpacked.
pub(crate) fn releases_down_lines(sched: &Schedule, width: usize) -> bool {
    RELEASED_DOWN_BYTES.contains(&direction_bytes(&sched.down, width))
}

/// The host and device ends of a schedule's transfers.
pub(crate) struct Endpoints {
    /// For each up transfer, the host matrix read (in row-major order).
    pub(crate) up_host: Vec<HostMat>,
    /// For each up transfer, the device address it is copied to.
    pub(crate) up_dev: Vec<CUdeviceptr>,
    /// For each down transfer, the host matrix written (in row-major order).
    pub(crate) down_host: Vec<HostMat>,
    /// For each down transfer, the device address it is copied from.
    pub(crate) down_dev: Vec<CUdeviceptr>,
    /// When the down transfers are the row panels of one fresh C-order result (memory never
    /// written yet), the whole result: its pages are touched, in parallel and ahead of the
    /// results, so that the page faults are off the critical path.
    pub(crate) fresh: Option<HostMat>,
    /// Bytes per element of every host matrix and device buffer of the run.
    pub(crate) width: usize,
    /// For each up and each down transfer, whether it is copied straight between its host
    /// matrix and the device (page-locked memory read or written in place, see
    /// [`Endpoints::copy_direct`]): it then has no staging and its pieces do nothing. Empty
    /// where every transfer is staged.
    pub(crate) direct_up: Vec<bool>,
    pub(crate) direct_down: Vec<bool>,
}

impl Endpoints {
    /// Endpoints with no transfers yet, every one to be staged.
    pub(crate) fn new(width: usize, fresh: Option<HostMat>) -> Endpoints {
        Endpoints {
            up_host: Vec::new(),
            up_dev: Vec::new(),
            down_host: Vec::new(),
            down_dev: Vec::new(),
            fresh,
            width,
            direct_up: Vec::new(),
            direct_down: Vec::new(),
        }
    }

    /// Marks each transfer whose host matrix is contiguous in its row-major order and lies
    /// in memory page-locked by the run's own context `on` (its device's ordinal and
    /// generation; [`pinned::memory`]) to be copied straight: the up ones where `up` allows
    /// and the down ones where `down` does (a run whose kernels read or write the staging
    /// itself keeps it), never a fresh result (whose pages the crew touches while the copies
    /// come down). Returns what the host's arrays got.
    pub(crate) fn copy_direct(&mut self, up: bool, down: bool, on: (usize, u64)) -> HostCopies {
        let mut seen = Seen::default();
        let mut mark = |mats: &[HostMat], allowed: bool| -> Vec<bool> {
            mats.iter()
                .map(|m| seen.direct(m.contiguous(), allowed, on))
                .collect()
        };
        self.direct_up = mark(&self.up_host, up);
        self.direct_down = mark(&self.down_host, down && self.fresh.is_none());
        seen.copies()
    }

    pub(crate) fn up_direct(&self, transfer: usize) -> bool {
        self.direct_up.get(transfer).copied().unwrap_or(false)
    }

    pub(crate) fn down_direct(&self, transfer: usize) -> bool {
        self.direct_down.get(transfer).copied().unwrap_or(false)
    }

    /// Elements of `sched`'s transfers that go through staging (packed or unpacked by the
    /// host's threads).
    pub(crate) fn staged_elements(&self, sched: &Schedule) -> usize {
        let staged = |dir: &Direction, direct: &dyn Fn(usize) -> bool| {
            dir.transfers
                .iter()
                .enumerate()
                .filter(|&(t, _)| !direct(t))
                .map(|(_, t)| t.len)
                .sum::<usize>()
        };
        staged(&sched.up, &|t| self.up_direct(t)) + staged(&sched.down, &|t| self.down_direct(t))
    }
}

/// What [`Endpoints::copy_direct`] found of a run's host transfers.
#[derive(Default)]
struct Seen {
    direct: bool,
    staged: bool,
    unlocked: Option<std::sync::Arc<str>>,
}

impl Seen {
    /// Whether a transfer of contiguous `range` (address, bytes; `None` where it is not
    /// contiguous) goes straight, where `allowed`; counted.
    fn direct(&mut self, range: Option<(usize, usize)>, allowed: bool, on: (usize, u64)) -> bool {
        let memory = range.map_or(Memory::Pageable, |(addr, bytes)| {
            pinned::memory(addr, bytes, on)
        });
        let direct = allowed && memory == Memory::Locked;
        if let Memory::Unlocked(why) = memory {
            self.unlocked.get_or_insert(why);
        }
        self.direct |= direct;
        self.staged |= !direct;
        direct
    }

    fn copies(self) -> HostCopies {
        match (self.direct, self.staged, self.unlocked) {
            (_, true, Some(why)) => HostCopies::Unlocked {
                reason: why.to_string(),
            },
            (false, false, _) => HostCopies::None,
            (true, false, _) => HostCopies::Direct,
            (false, true, _) => HostCopies::Staged,
            (true, true, _) => HostCopies::Mixed,
        }
    }
}

/// Pieces of a parcel whose times a trace keeps.
pub(crate) const LOGGED_PIECES: usize = 16;

/// Who did a piece of host work (a helper's index, or `CONDUCTOR`), when it was claimed and
/// when it was done, in seconds from the run's start (0 where it was not done).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct PieceTime {
    pub(crate) who: usize,
    pub(crate) claimed: f64,
    pub(crate) done: f64,
}

/// [`PieceTime::who`] of the conductor.
pub(crate) const CONDUCTOR: usize = usize::MAX;

/// The times of the first [`LOGGED_PIECES`] pieces of one parcel, as the threads record them.
pub(super) struct PieceLog([(AtomicUsize, AtomicU64, AtomicU64); LOGGED_PIECES]);

impl PieceLog {
    fn new() -> PieceLog {
        PieceLog(
            [const { (AtomicUsize::new(0), AtomicU64::new(0), AtomicU64::new(0)) }; LOGGED_PIECES],
        )
    }

    /// Runs `work`, piece `at` of the parcel, recording who did it and when (nanoseconds
    /// since `start`).
    fn time(&self, at: usize, who: usize, start: Instant, work: impl FnOnce()) {
        let ns = || start.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        let Some((by, claimed, done)) = self.0.get(at) else {
            return work();
        };
        by.store(who, SeqCst);
        claimed.store(ns(), SeqCst);
        work();
        done.store(ns(), SeqCst);
    }

    /// The times, in seconds from an origin `offset` seconds after the `start` they were
    /// recorded against (the conductor's start).
    pub(super) fn read(&self, offset: f64) -> [PieceTime; LOGGED_PIECES] {
        std::array::from_fn(|i| {
            let (by, claimed, done) = &self.0[i];
            let done = done.load(SeqCst);
            if done == 0 {
                return PieceTime::default();
            }
            PieceTime {
                who: by.load(SeqCst),
                claimed: claimed.load(SeqCst) as f64 * 1e-9 - offset,
                done: done as f64 * 1e-9 - offset,
            }
        })
    }
}

/// The shared progress of one run.
pub(super) struct Board<'r> {
    sched: &'r Schedule,
    ends: &'r Endpoints,
    up_ring: Option<Ring<'r>>,
    down_ring: Option<Ring<'r>>,
    /// How packing stores into the up ring.
    stores: Stores,
    /// Whether unpacking releases the down ring's lines.
    release_down: bool,
    /// Next up piece to claim.
    up_next: AtomicUsize,
    /// Up parcels `< up_free` have a free staging slot.
    pub(super) up_free: AtomicUsize,
    /// Pieces packed, per up parcel, and in all.
    up_packed: Vec<AtomicUsize>,
    packed: AtomicUsize,
    /// The fresh result's touch units (ranges of its row-major order, one huge page each, so
    /// that no two threads fault the same page), the next to claim, and which are done.
    touch_units: Vec<(usize, usize)>,
    touch_next: AtomicUsize,
    touched: Vec<AtomicBool>,
    touched_units: AtomicUsize,
    /// Nanoseconds from `start` to the last touch unit's end.
    pub(super) touched_ns: AtomicU64,
    pub(super) start: Instant,
    /// Per down piece, the touch units it lies in.
    piece_units: Vec<Range<usize>>,
    /// Next down piece to claim for unpacking.
    pub(super) down_next: AtomicUsize,
    /// Down parcels `< down_landed` are in their staging slots.
    pub(super) down_landed: AtomicUsize,
    /// Pieces unpacked, per down parcel, and in all.
    down_unpacked: Vec<AtomicUsize>,
    pub(super) unpacked: AtomicUsize,
    pub(super) abort: AtomicBool,
    /// A copy went straight into a host matrix of the caller's (a direct down transfer).
    pub(super) wrote_direct: AtomicBool,
    /// Helpers that have entered the run, and the times of the first up parcel's pieces and
    /// the last down parcel's: for the trace, so counted, timed and read only where
    /// `log_pieces`.
    pub(super) arrived: AtomicUsize,
    pub(super) log_pieces: bool,
    pub(super) first_parcel: PieceLog,
    pub(super) last_parcel: PieceLog,
}

pub(super) enum Step {
    Worked,
    Idle,
    Finished,
}

impl<'r> Board<'r> {
    pub(super) fn new(
        sched: &'r Schedule,
        ends: &'r Endpoints,
        up_ring: Option<Ring<'r>>,
        down_ring: Option<Ring<'r>>,
        log_pieces: bool,
    ) -> Board<'r> {
        let counters = |n: usize| (0..n).map(|_| AtomicUsize::new(0)).collect::<Vec<_>>();
        let (touch_units, piece_units) = match &ends.fresh {
            Some(c) => touch_plan(c, sched, ends),
            None => (Vec::new(), vec![0..0; sched.down.pieces.len()]),
        };
        Board {
            sched,
            ends,
            up_ring,
            down_ring,
            stores: up_stores(sched, ends.width),
            release_down: releases_down_lines(sched, ends.width),
            up_next: AtomicUsize::new(0),
            up_free: AtomicUsize::new(sched.up.slots),
            up_packed: counters(sched.up.parcels.len()),
            packed: AtomicUsize::new(0),
            touch_next: AtomicUsize::new(0),
            touched: (0..touch_units.len())
                .map(|_| AtomicBool::new(false))
                .collect(),
            touched_units: AtomicUsize::new(0),
            touched_ns: AtomicU64::new(0),
            start: Instant::now(),
            touch_units,
            piece_units,
            down_next: AtomicUsize::new(0),
            down_landed: AtomicUsize::new(0),
            down_unpacked: counters(sched.down.parcels.len()),
            unpacked: AtomicUsize::new(0),
            abort: AtomicBool::new(false),
            wrote_direct: AtomicBool::new(false),
            arrived: AtomicUsize::new(0),
            log_pieces,
            first_parcel: PieceLog::new(),
            last_parcel: PieceLog::new(),
        }
    }

    /// Claims the next piece of a queue if `ready(piece)` says it may start.
    fn claim(next: &AtomicUsize, count: usize, ready: impl Fn(usize) -> bool) -> Option<usize> {
        Self::claim_run(next, count, ready, |i| i + 1).map(|run| run.start)
    }

    /// Claims the next pieces of a queue, from the next one to `run_end(next)`, if
    /// `ready(next)` says they may start.
    fn claim_run(
        next: &AtomicUsize,
        count: usize,
        ready: impl Fn(usize) -> bool,
        run_end: impl Fn(usize) -> usize,
    ) -> Option<Range<usize>> {
        let mut i = next.load(SeqCst);
        loop {
            if i >= count || !ready(i) {
                return None;
            }
            let end = run_end(i);
            match next.compare_exchange_weak(i, end, SeqCst, SeqCst) {
                Ok(_) => return Some(i..end),
                Err(now) => i = now,
            }
        }
    }

    /// The end of the run of pieces claimed at once from piece `i` of `dir`: the rest of its
    /// parcel where the parcel is copied straight from or into the host array (its pieces
    /// stage nothing: claimed one by one, they would only cost the conductor a pass each), else
    /// the piece alone.
    fn run_end(dir: &Direction, i: usize, direct: impl Fn(usize) -> bool) -> usize {
        let parcel = &dir.parcels[dir.pieces[i].parcel];
        if direct(parcel.transfer) {
            parcel.pieces.end
        } else {
            i + 1
        }
    }

    /// Does one piece of work if one is ready: packing first, then unpacking, then touching
    /// a fresh result. (Touching first on half the helpers was measured: it slowed the
    /// packing three times over and finished the faults no sooner, on an H200 host.) `who`
    /// does it: a helper's index, or [`CONDUCTOR`].
    pub(super) fn step(&self, who: usize) -> Step {
        if self.abort.load(SeqCst) {
            return Step::Finished;
        }
        let (up, down) = (&self.sched.up, &self.sched.down);
        let free = self.up_free.load(SeqCst);
        let up_run = |i| Self::run_end(up, i, |t| self.ends.up_direct(t));
        let up_ready = |i: usize| up.pieces[i].parcel < free;
        if let Some(run) = Self::claim_run(&self.up_next, up.pieces.len(), up_ready, up_run) {
            let i = run.start;
            if self.log_pieces && up.pieces[i].parcel == 0 {
                // The first parcel's pieces are the direction's first, from index 0.
                self.first_parcel
                    .time(i, who, self.start, || self.pack(run));
            } else {
                self.pack(run);
            }
            return Step::Worked;
        }
        let landed = self.down_landed.load(SeqCst);
        let down_run = |i| Self::run_end(down, i, |t| self.ends.down_direct(t));
        // A run of several pieces is a parcel copied straight into the host array, which is
        // never a fresh result (`Endpoints::copy_direct`): its pieces lie in no touch unit, so
        // the first piece's units are the run's.
        let down_ready = |i: usize| {
            down.pieces[i].parcel < landed
                && self.piece_units[i]
                    .clone()
                    .all(|u| self.touched[u].load(SeqCst))
        };
        if let Some(run) = Self::claim_run(&self.down_next, down.pieces.len(), down_ready, down_run)
        {
            let i = run.start;
            let last = &down.parcels[down.parcels.len() - 1].pieces;
            if self.log_pieces && last.contains(&i) {
                self.last_parcel
                    .time(i - last.start, who, self.start, || self.unpack(run));
            } else {
                self.unpack(run);
            }
            return Step::Worked;
        }
        if self.touch() {
            return Step::Worked;
        }
        let all_claimed = self.up_next.load(SeqCst) >= up.pieces.len()
            && self.down_next.load(SeqCst) >= down.pieces.len()
            && self.touch_next.load(SeqCst) >= self.touch_units.len();
        if all_claimed {
            Step::Finished
        } else {
            Step::Idle
        }
    }

    /// Touches the next unit of a fresh result, if any is left; whether it did.
    fn touch(&self) -> bool {
        let Some(u) = Self::claim(&self.touch_next, self.touch_units.len(), |_| true) else {
            return false;
        };
        let (start, end) = self.touch_units[u];
        let c = self
            .ends
            .fresh
            .as_ref()
            .expect("touch units of a fresh result");
        // SAFETY: the result is fresh memory borrowed by the caller for the whole run; each
        // unit is touched by one thread, and before any piece in it is unpacked (those wait
        // for `touched`), so no other thread uses these elements meanwhile.
        unsafe { c.touch(start, end) };
        self.touched[u].store(true, SeqCst);
        if self.touched_units.fetch_add(1, SeqCst) + 1 == self.touch_units.len() {
            let ns = self.start.elapsed().as_nanos().min(u64::MAX as u128) as u64;
            self.touched_ns.store(ns, SeqCst);
        }
        true
    }

    /// The staging elements of `start..end` of `parcel` (a range of one of its pieces).
    fn staging(dir: &Direction, ring: Ring, parcel: usize, start: usize, end: usize) -> *mut u8 {
        let p = &dir.parcels[parcel];
        ring.at(p.offset + (start - p.start), end - start)
    }

    /// Packs the claimed pieces `run`: one piece, or the rest of a parcel copied straight from
    /// the host matrix ([`Board::run_end`]).
    fn pack(&self, run: Range<usize>) {
        let up = &self.sched.up;
        let (i, pieces) = (run.start, run.len());
        let piece = up.pieces[i];
        let parcel = &up.parcels[piece.parcel];
        if self.ends.up_direct(parcel.transfer) {
            // Copied straight from the host matrix: nothing to pack.
            self.up_packed[piece.parcel].fetch_add(pieces, SeqCst);
            self.packed.fetch_add(pieces, SeqCst);
            return;
        }
        debug_assert_eq!(pieces, 1, "a staged piece is claimed alone");
        let ring = self.up_ring.expect("a ring for the up transfers");
        let ptr = Self::staging(up, ring, piece.parcel, piece.start, piece.end);
        // SAFETY: `ptr` holds the piece's elements of the ring (`Ring::at` checks the
        // range). No other thread uses them: the pieces of a parcel are disjoint ranges of its
        // slot, claimed once each, and a parcel's pieces are claimed only once the slot's
        // previous parcel has been copied out of it (`up_free`), while the copy of this parcel
        // is issued only after all its pieces are packed. The operand views behind the
        // endpoints are borrowed by the caller for the whole run and only read.
        unsafe {
            self.ends.up_host[parcel.transfer].read_raw(piece.start, piece.end, ptr, self.stores);
        }
        self.up_packed[piece.parcel].fetch_add(1, SeqCst);
        self.packed.fetch_add(1, SeqCst);
    }

    /// Unpacks the claimed pieces `run`: one piece, or the rest of a parcel copied straight into
    /// the host matrix ([`Board::run_end`]).
    fn unpack(&self, run: Range<usize>) {
        let down = &self.sched.down;
        let (i, pieces) = (run.start, run.len());
        let piece = down.pieces[i];
        let parcel = &down.parcels[piece.parcel];
        if self.ends.down_direct(parcel.transfer) {
            // Copied straight into the host matrix: nothing to unpack.
            self.down_unpacked[piece.parcel].fetch_add(pieces, SeqCst);
            self.unpacked.fetch_add(pieces, SeqCst);
            return;
        }
        debug_assert_eq!(pieces, 1, "a staged piece is claimed alone");
        let ring = self.down_ring.expect("a ring for the down transfers");
        let ptr = Self::staging(down, ring, piece.parcel, piece.start, piece.end);
        // SAFETY: `ptr` holds the piece's elements of the ring (`Ring::at` checks the
        // range), which the parcel's copy has filled (its event completed before the piece
        // could be claimed, `down_landed`) and which nothing writes until every piece of the
        // parcel is unpacked. The output view behind the endpoint is borrowed mutably by the
        // caller for the whole run; each down piece is a distinct range of one transfer, and
        // the transfers are distinct panels, so no other thread reads or writes these elements.
        unsafe {
            self.ends.down_host[parcel.transfer].write_raw(piece.start, piece.end, ptr);
        }
        if self.release_down {
            // SAFETY: the same elements of the ring, read just above; releasing their lines
            // changes no memory.
            unsafe { release_lines(ptr, (piece.end - piece.start) * self.ends.width) };
        }
        self.down_unpacked[piece.parcel].fetch_add(1, SeqCst);
        self.unpacked.fetch_add(1, SeqCst);
    }

    /// Whether no piece is being worked on: every claimed piece is done.
    pub(super) fn quiet(&self) -> bool {
        self.packed.load(SeqCst) == self.up_next.load(SeqCst)
            && self.unpacked.load(SeqCst) == self.down_next.load(SeqCst)
            && self.touched_units.load(SeqCst) == self.touch_next.load(SeqCst)
    }

    pub(super) fn up_parcel_packed(&self, j: usize) -> bool {
        self.up_packed[j].load(SeqCst) == self.sched.up.parcels[j].pieces.len()
    }

    pub(super) fn down_parcel_unpacked(&self, d: usize) -> bool {
        self.down_unpacked[d].load(SeqCst) == self.sched.down.parcels[d].pieces.len()
    }
}

/// Bytes of a transparent huge page: the unit of touching a fresh result.
const HUGE_PAGE: usize = 2 << 20;

/// A fresh result's touch units (ranges of its row-major order, split at huge-page
/// boundaries of its memory), and for each down piece the units it lies in.
fn touch_plan(
    c: &HostMat,
    sched: &Schedule,
    ends: &Endpoints,
) -> (Vec<(usize, usize)>, Vec<Range<usize>>) {
    let (base, len) = (c.addr(), c.len());
    let width = c.width();
    let per_page = HUGE_PAGE / width;
    let first = (base.next_multiple_of(HUGE_PAGE) - base) / width;
    let mut units = Vec::new();
    let mut start = 0;
    let mut end = first.min(len);
    while start < len {
        if end > start {
            units.push((start, end));
        }
        start = end;
        end = (end + per_page).min(len);
    }
    let unit_of = |e: usize| units.partition_point(|&(_, u1)| u1 <= e);
    let pieces = sched
        .down
        .pieces
        .iter()
        .map(|p| {
            let t = sched.down.parcels[p.parcel].transfer;
            let offset = (ends.down_host[t].addr() - base) / width;
            unit_of(offset + p.start)..unit_of(offset + p.end - 1) + 1
        })
        .collect();
    (units, pieces)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::schedule::Residency;
    use std::time::Instant;

    #[test]
    fn a_piece_log_keeps_who_did_each_piece_and_when() {
        let log = PieceLog::new();
        let start = Instant::now();
        let mut ran = 0;
        log.time(3, 7, start, || ran += 1);
        log.time(0, CONDUCTOR, start, || ran += 1);
        // Pieces past the logged ones still run, unlogged.
        log.time(LOGGED_PIECES, 1, start, || ran += 1);
        assert_eq!(ran, 3);
        let times = log.read(0.0);
        assert_eq!((times[3].who, times[0].who), (7, CONDUCTOR));
        for t in [times[0], times[3]] {
            assert!(t.done > 0.0 && t.claimed <= t.done, "{t:?}");
        }
        assert!(times.iter().filter(|t| t.done > 0.0).count() == 2);
        // Read against an origin later than the log's: earlier by that much.
        let later = log.read(1e-3);
        assert!((times[3].done - later[3].done - 1e-3).abs() < 1e-12);
    }

    #[test]
    fn transfers_go_straight_only_where_contiguous_locked_and_allowed() {
        const ON: (usize, u64) = (0, 0);
        use crate::device::pinned::{simulate_locked, simulate_refused};
        let mut a = vec![0f32; 64 * 32];
        let mut b = vec![0f32; 64 * 32];
        let ma = HostMat::row_major(a.as_mut_ptr(), 64, 32);
        let mb = HostMat::row_major(b.as_mut_ptr(), 64, 32);
        let ends = |up: Vec<HostMat>, down: Vec<HostMat>| {
            let mut e = Endpoints::new(4, None);
            (e.up_host, e.down_host) = (up, down);
            e
        };
        // Ordinary memory: staged.
        let upload = Schedule::upload(64 * 32);
        let mut e = ends(vec![ma], vec![]);
        assert_eq!(e.copy_direct(true, true, ON), HostCopies::Staged);
        assert_eq!(e.staged_elements(&upload), 64 * 32);
        let _a = simulate_locked(a.as_ptr().cast(), a.len() * 4);
        assert_eq!(e.copy_direct(true, true, ON), HostCopies::Direct);
        assert_eq!(e.staged_elements(&upload), 0);
        // A locked band of rows and the whole matrix go straight; a column panel and the
        // transpose (stepped in memory) are staged; where the run keeps its staging, nothing
        // goes straight.
        let mut e = ends(vec![ma, ma.rows(3, 9), ma.cols(0, 5), ma.t()], vec![]);
        assert_eq!(e.copy_direct(true, true, ON), HostCopies::Mixed);
        assert_eq!(e.direct_up, [true, true, false, false]);
        assert_eq!(e.copy_direct(false, true, ON), HostCopies::Staged);
        assert!(!e.up_direct(0));
        let mut e = ends(vec![ma], vec![ma]);
        assert_eq!(e.copy_direct(true, true, ON), HostCopies::Direct);
        assert_eq!(e.copy_direct(true, false, ON), HostCopies::Mixed);
        // A pinned array whose registration failed says why.
        let _b = simulate_refused(b.as_ptr().cast(), b.len() * 4, "RLIMIT_MEMLOCK");
        let mut e = ends(vec![ma], vec![mb]);
        match e.copy_direct(true, true, ON) {
            HostCopies::Unlocked { reason } => assert_eq!(reason, "RLIMIT_MEMLOCK"),
            other => panic!("{other:?}"),
        }
        assert_eq!((e.up_direct(0), e.down_direct(0)), (true, false));
        // Empty endpoints copy nothing.
        assert_eq!(
            ends(vec![], vec![]).copy_direct(true, true, ON),
            HostCopies::None
        );
    }

    #[test]
    fn only_mid_sized_transfers_bypass_the_caches() {
        let res = Residency {
            a_host: true,
            b_host: true,
            b_parts: false,
            c_host: true,
            c_in: false,
        };
        let stores = |n: usize, width: usize| {
            let sched = Schedule::product((n, n, n), n.div_ceil(2), true, res);
            up_stores(&sched, width)
        };
        // 2·n²·width bytes up: 512 KiB, 8 MiB, 72 MiB (f32); 1 MiB, 128 MiB (f64).
        assert_eq!(stores(256, 4), Stores::Cached);
        assert_eq!(stores(1024, 4), Stores::Streaming);
        assert_eq!(stores(3072, 4), Stores::Cached);
        assert_eq!(stores(256, 8), Stores::Streaming);
        assert_eq!(stores(2048, 8), Stores::Cached);
        // Results of 4 MiB (f32 1024²), 256 KiB (f32 256²) and 16 MiB (f32 2048²) down.
        let down = |n: usize| Schedule::product((n, n, n), n, true, res);
        assert!(releases_down_lines(&down(1024), 4));
        assert!(!releases_down_lines(&down(256), 4));
        assert!(!releases_down_lines(&down(2048), 4));
        // Device operands move nothing up.
        let device = Residency {
            a_host: false,
            b_host: false,
            ..res
        };
        let sched = Schedule::product((1024, 1024, 1024), 512, true, device);
        assert_eq!(up_stores(&sched, 4), Stores::Cached);
    }
}

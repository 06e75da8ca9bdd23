//! Running a [`Schedule`]: the calling thread (the *conductor*) issues each copy and each
//! panel's kernels as soon as their inputs are ready, while the crew packs and unpacks pieces.
//!
//! The work is shared through a [`Board`] of counters. Pieces are claimed in order from three
//! queues: packing up-parcels (once their staging slot is free), unpacking down-parcels (once
//! their copy has landed), and touching the pages of a fresh result (any time before its
//! unpacking), in that priority. The conductor:
//!
//! 1. copies each up-parcel to the device as soon as all its pieces are packed (in order, on
//!    the up stream);
//! 2. enqueues a panel's kernels once its inputs are enqueued (on the compute stream, after an
//!    event of the up stream);
//! 3. copies each down-parcel into its staging slot once its panel's kernels are enqueued and
//!    the slot's previous parcel is unpacked (on the down stream, after the panel's event);
//! 4. polls the events of copies in flight and opens the slots and parcels they free;
//!
//! and between these, when nothing is ready, does pieces itself. A product of one panel puts
//! everything on one stream and needs no cross-stream events.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::time::Instant;

use cudarc::driver::sys::CUdeviceptr;

use super::ends::TRACE;
use super::link::{Lane, Link, Mark, Stamp};
use super::schedule::{Direction, Schedule, What};
use crate::error::GpuDotError;
use crate::host::crew::{self, Watch};
use crate::host::staging::{release_lines, HostMat, Ring, Stores};

/// Host bytes of copying worth one more helper thread: fewer bytes per thread and waking it
/// costs more than it saves (one thread copies about 5 GB/s on an H200 host, so 128 KiB is
/// about 25 µs of its time).
pub(crate) const BYTES_PER_HELPER: usize = 128 << 10;

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
}

/// Host-side times of one run, in seconds from its start, for `GPU_DOT_TRACE`.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Trace {
    /// When the first up parcel was seen packed, and how many pieces the conductor had packed
    /// by then.
    pub(crate) first_packed: f64,
    pub(crate) conductor_first: usize,
    pub(crate) first_copy: f64,
    pub(crate) inputs_issued: f64,
    pub(crate) kernels_enqueued: f64,
    pub(crate) results_landed: f64,
    pub(crate) unpacked: f64,
    /// When the last page of a fresh result was touched (0 without one).
    pub(crate) touched: f64,
    pub(crate) helpers: usize,
    /// Helpers that had entered the run when the first up parcel was seen packed.
    pub(crate) arrived_by_first_packed: usize,
    /// The pieces of the first up parcel and of the last down parcel (the first
    /// [`LOGGED_PIECES`] of each): who did each, when it was claimed and when done.
    pub(crate) first_parcel: [PieceTime; LOGGED_PIECES],
    pub(crate) last_parcel: [PieceTime; LOGGED_PIECES],
    pub(crate) pieces_by_conductor: usize,
    pub(crate) pieces: usize,
    /// Host seconds spent issuing copies (with their events), enqueueing panels' kernels, and
    /// polling events.
    pub(crate) issue: f64,
    pub(crate) launch: f64,
    pub(crate) poll: f64,
    /// Device times from the run's start stamp (seconds): the last input landed, the first
    /// panel's kernels began, the last panel's kernels ended, the last result landed; each
    /// where it was timed (traced runs on a device).
    pub(crate) device: [Option<f64>; Stamp::COUNT - 1],
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
struct PieceLog([(AtomicUsize, AtomicU64, AtomicU64); LOGGED_PIECES]);

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
    fn read(&self, offset: f64) -> [PieceTime; LOGGED_PIECES] {
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

/// Runs `f`, adding its duration to `acc` (seconds).
fn clocked<T>(acc: &mut f64, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    *acc += start.elapsed().as_secs_f64();
    out
}

/// The shared progress of one run.
struct Board<'r> {
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
    up_free: AtomicUsize,
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
    touched_ns: AtomicU64,
    start: Instant,
    /// Per down piece, the touch units it lies in.
    piece_units: Vec<Range<usize>>,
    /// Next down piece to claim for unpacking.
    down_next: AtomicUsize,
    /// Down parcels `< down_landed` are in their staging slots.
    down_landed: AtomicUsize,
    /// Pieces unpacked, per down parcel, and in all.
    down_unpacked: Vec<AtomicUsize>,
    unpacked: AtomicUsize,
    abort: AtomicBool,
    /// Helpers that have entered the run, and the times of the first up parcel's pieces and
    /// the last down parcel's: for the trace, so counted, timed and read only where
    /// `log_pieces`.
    arrived: AtomicUsize,
    log_pieces: bool,
    first_parcel: PieceLog,
    last_parcel: PieceLog,
}

enum Step {
    Worked,
    Idle,
    Finished,
}

impl<'r> Board<'r> {
    fn new(
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
            arrived: AtomicUsize::new(0),
            log_pieces,
            first_parcel: PieceLog::new(),
            last_parcel: PieceLog::new(),
        }
    }

    /// Claims the next piece of a queue if `ready(piece)` says it may start.
    fn claim(next: &AtomicUsize, count: usize, ready: impl Fn(usize) -> bool) -> Option<usize> {
        let mut i = next.load(SeqCst);
        loop {
            if i >= count || !ready(i) {
                return None;
            }
            match next.compare_exchange_weak(i, i + 1, SeqCst, SeqCst) {
                Ok(_) => return Some(i),
                Err(now) => i = now,
            }
        }
    }

    /// Does one piece of work if one is ready: packing first, then unpacking, then touching
    /// a fresh result. (Touching first on half the helpers was measured: it slowed the
    /// packing three times over and finished the faults no sooner, on an H200 host.) `who`
    /// does it: a helper's index, or [`CONDUCTOR`].
    fn step(&self, who: usize) -> Step {
        if self.abort.load(SeqCst) {
            return Step::Finished;
        }
        let (up, down) = (&self.sched.up, &self.sched.down);
        let free = self.up_free.load(SeqCst);
        if let Some(i) = Self::claim(&self.up_next, up.pieces.len(), |i| {
            up.pieces[i].parcel < free
        }) {
            if self.log_pieces && up.pieces[i].parcel == 0 {
                // The first parcel's pieces are the direction's first, from index 0.
                self.first_parcel.time(i, who, self.start, || self.pack(i));
            } else {
                self.pack(i);
            }
            return Step::Worked;
        }
        let landed = self.down_landed.load(SeqCst);
        if let Some(i) = Self::claim(&self.down_next, down.pieces.len(), |i| {
            down.pieces[i].parcel < landed
                && self.piece_units[i]
                    .clone()
                    .all(|u| self.touched[u].load(SeqCst))
        }) {
            let last = &down.parcels[down.parcels.len() - 1].pieces;
            if self.log_pieces && last.contains(&i) {
                self.last_parcel
                    .time(i - last.start, who, self.start, || self.unpack(i));
            } else {
                self.unpack(i);
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

    fn pack(&self, i: usize) {
        let up = &self.sched.up;
        let piece = up.pieces[i];
        let parcel = &up.parcels[piece.parcel];
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

    fn unpack(&self, i: usize) {
        let down = &self.sched.down;
        let piece = down.pieces[i];
        let parcel = &down.parcels[piece.parcel];
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
    fn quiet(&self) -> bool {
        self.packed.load(SeqCst) == self.up_next.load(SeqCst)
            && self.unpacked.load(SeqCst) == self.down_next.load(SeqCst)
            && self.touched_units.load(SeqCst) == self.touch_next.load(SeqCst)
    }

    fn up_parcel_packed(&self, j: usize) -> bool {
        self.up_packed[j].load(SeqCst) == self.sched.up.parcels[j].pieces.len()
    }

    fn down_parcel_unpacked(&self, d: usize) -> bool {
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

/// What the conductor enqueues for one panel, on the compute stream.
pub(crate) type PanelWork<'w> = dyn FnMut(usize) -> Result<(), GpuDotError> + 'w;

/// Everything a run needs besides its schedule.
pub(crate) struct Run<'r, L: Link> {
    pub(crate) link: L,
    pub(crate) up_ring: Option<Ring<'r>>,
    pub(crate) down_ring: Option<Ring<'r>>,
    /// Slots of the device buffers for A and C panels (a panel `i` uses slot `i % slots`; a
    /// batch's groups of items of B use A's).
    pub(crate) a_slots: usize,
    pub(crate) c_slots: usize,
    /// The panel's kernels write the result straight into the down ring (page-locked memory
    /// the device addresses directly; one panel, one down parcel at the ring's start): the
    /// down parcel then copies nothing, and its mark, recorded after the kernels, says the
    /// result is in staging.
    pub(crate) mapped_result: bool,
    /// The panel's kernels read A and B straight from the up ring (one panel, each up transfer
    /// one parcel in a slot of its own): the up parcels copy nothing, and the kernels are
    /// enqueued once every one of them is packed.
    pub(crate) mapped_inputs: bool,
    /// Host bytes per helper thread ([`BYTES_PER_HELPER`]).
    pub(crate) bytes_per_helper: usize,
    /// A panel's work waits on the host for the device (the guard of the default precision
    /// reads its verdicts back before it enqueues the rest): it is called only once the
    /// panel's inputs have landed and the panel before it is done, so that the conductor is
    /// not held up while copies are due.
    pub(crate) work_waits: bool,
}

/// Runs `sched`: returns once every copy and kernel it enqueued is complete (or, on an error,
/// once the helpers have stopped; the streams may then still hold work). `touched` is set as
/// soon as the caller's output may have been written.
pub(crate) fn conduct<L: Link>(
    sched: &Schedule,
    ends: &Endpoints,
    run: &Run<L>,
    panel_work: &mut PanelWork,
    touched: &mut bool,
    trace: &mut Trace,
) -> Result<(), GpuDotError> {
    let board = Board::new(sched, ends, run.up_ring, run.down_ring, *TRACE);
    let crew = crew::crew();
    let helpers =
        (sched.host_elements() * ends.width / run.bytes_per_helper.max(1)).min(crew.helpers());
    trace.helpers = helpers;
    trace.pieces = sched.up.pieces.len() + 2 * sched.down.pieces.len();
    let work = |index: usize| {
        if board.log_pieces {
            board.arrived.fetch_add(1, SeqCst);
        }
        let mut waited = 0;
        loop {
            match board.step(index) {
                Step::Worked => waited = 0,
                Step::Idle => crew::pause(&mut waited),
                Step::Finished => return,
            }
        }
    };
    let result = crew.run(helpers, &work, |watch| {
        let out = Conductor {
            sched,
            ends,
            run,
            board: &board,
            watch,
            start: Instant::now(),
        }
        .conduct(panel_work, touched, trace);
        if out.is_err() {
            board.abort.store(true, SeqCst);
        }
        out
    });
    if ends.fresh.is_none() && board.down_next.load(SeqCst) > 0 {
        *touched = true;
    }
    result?;
    run.link.drain()
}

struct Conductor<'c, 'r, L: Link> {
    sched: &'c Schedule,
    ends: &'c Endpoints,
    run: &'c Run<'r, L>,
    board: &'c Board<'c>,
    watch: &'c Watch,
    start: Instant,
}

impl<L: Link> Conductor<'_, '_, L> {
    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn conduct(
        &self,
        panel_work: &mut PanelWork,
        touched: &mut bool,
        trace: &mut Trace,
    ) -> Result<(), GpuDotError> {
        let (sched, board, link) = (self.sched, self.board, &self.run.link);
        let separate = link.separate();
        let (up, down) = (&sched.up, &sched.down);
        let panels = sched.panels.len();
        let mut issued_up = 0;
        let mut inputs_recorded = 0; // panels whose input event is recorded
        let mut enqueued = 0; // panels whose kernels are enqueued
        let mut issued_down = 0;
        let mut outputs_recorded = 0; // panels whose output event is recorded
        let mut up_waits: VecDeque<usize> = VecDeque::new();
        let mut down_waits: VecDeque<usize> = VecDeque::new();
        let mut idle = 0u32;
        let c_host = !down.transfers.is_empty();
        // Records the inputs mark of every panel whose up parcels are all among the first
        // `issued` (separate lanes only: on one stream the kernels follow the copies anyway).
        let record_inputs = |recorded: &mut usize, issued: usize| -> Result<(), GpuDotError> {
            if separate {
                while *recorded < panels && sched.panel_inputs[*recorded] <= issued {
                    link.record(Mark::Inputs(*recorded), Lane::Up)?;
                    *recorded += 1;
                }
            }
            Ok(())
        };
        link.stamp(Lane::Compute, Stamp::Start)?;
        loop {
            if self.watch.helper_panicked() {
                return Err(GpuDotError::HostThread {
                    what: "a host copy thread panicked".into(),
                });
            }
            let mut progressed = false;

            // 1. Copies up, in order, as their pieces are packed.
            while issued_up < up.parcels.len() && board.up_parcel_packed(issued_up) {
                let parcel = &up.parcels[issued_up];
                if parcel.start == 0 && separate {
                    // A panel's device slot is reused: wait for the panel that used it last
                    // (a batch's group of items of B shares its slot index with A's).
                    match up.transfers[parcel.transfer].what {
                        What::A(i) | What::BItems(i) if i >= self.run.a_slots => {
                            if enqueued <= i - self.run.a_slots {
                                break;
                            }
                            link.wait(Lane::Up, Mark::Kernels(i - self.run.a_slots))?;
                        }
                        What::CIn(i) if i >= self.run.c_slots => {
                            if outputs_recorded <= i - self.run.c_slots {
                                break;
                            }
                            link.wait(Lane::Up, Mark::Outputs(i - self.run.c_slots))?;
                        }
                        _ => {}
                    }
                }
                if issued_up == 0 {
                    trace.first_packed = self.now();
                    trace.conductor_first = trace.pieces_by_conductor;
                    trace.arrived_by_first_packed = board.arrived.load(SeqCst);
                }
                let len = parcel.len();
                let ring = self.run.up_ring.expect("a ring for the up transfers");
                let src = ring.at(parcel.offset, len);
                let width = self.ends.width;
                let dst = self.ends.up_dev[parcel.transfer] + (width * parcel.start) as u64;
                // Mapped inputs copy nothing: the kernels read the packed parcel where it is.
                // SAFETY: `src` holds `len` packed elements (every piece of the parcel is
                // packed), which no piece writes again until this copy's slot mark lands
                // (`up_free`); `dst` lies inside the device buffer the transfer targets, which
                // holds the transfer's elements from its base (sized by the caller from the same
                // schedule), and nothing else uses it until the copy completes (the kernels
                // that read it are ordered after it, and the panel that used the slot before
                // is waited for above).
                let reused = issued_up + up.slots < up.parcels.len();
                clocked(&mut trace.issue, || {
                    if !self.run.mapped_inputs {
                        unsafe { link.copy_up(dst, src, len * width)? };
                    }
                    if reused {
                        link.record(Mark::UpSlot(parcel.slot), Lane::Up)?;
                    }
                    Ok::<(), GpuDotError>(())
                })?;
                if reused {
                    up_waits.push_back(issued_up);
                }
                if issued_up == 0 {
                    trace.first_copy = self.now();
                }
                issued_up += 1;
                // A panel's inputs mark follows the copy that completes them, before any later
                // panel's copies: its kernels then wait for their own inputs only, however
                // many packed parcels this pass issues.
                record_inputs(&mut inputs_recorded, issued_up)?;
                if issued_up == up.parcels.len() {
                    trace.inputs_issued = self.now();
                    link.stamp(Lane::Up, Stamp::InputsLanded)?;
                }
                progressed = true;
            }
            // Panels whose inputs need no copy (or none that this pass issued).
            record_inputs(&mut inputs_recorded, issued_up)?;

            // 2. Each panel's kernels, once its inputs are on their way and its output slot is
            //    free.
            while enqueued < panels && sched.panel_inputs[enqueued] <= issued_up {
                let i = enqueued;
                if separate {
                    if i >= inputs_recorded {
                        break;
                    }
                    if self.run.work_waits
                        && !(link.landed(Mark::Inputs(i))?
                            && (i == 0 || link.landed(Mark::Kernels(i - 1))?))
                    {
                        break;
                    }
                    if c_host && i >= self.run.c_slots {
                        if outputs_recorded <= i - self.run.c_slots {
                            break;
                        }
                        link.wait(Lane::Compute, Mark::Outputs(i - self.run.c_slots))?;
                    }
                    link.wait(Lane::Compute, Mark::Inputs(i))?;
                }
                *touched |= !c_host;
                if i == 0 {
                    link.stamp(Lane::Compute, Stamp::KernelsBegan)?;
                }
                clocked(&mut trace.launch, || panel_work(i))?;
                if i + 1 == panels {
                    link.stamp(Lane::Compute, Stamp::KernelsEnded)?;
                }
                if separate {
                    link.record(Mark::Kernels(i), Lane::Compute)?;
                }
                enqueued += 1;
                if enqueued == panels {
                    trace.kernels_enqueued = self.now();
                }
                progressed = true;
            }

            // 3. Copies down, once the panel's kernels are enqueued and the slot is unpacked.
            while issued_down < down.parcels.len() {
                let parcel = &down.parcels[issued_down];
                let panel = match down.transfers[parcel.transfer].what {
                    What::COut(i) => Some(i),
                    _ => None,
                };
                if panel.is_some_and(|i| i >= enqueued) {
                    break;
                }
                if issued_down >= down.slots
                    && !board.down_parcel_unpacked(issued_down - down.slots)
                {
                    break;
                }
                if let (Some(i), true) = (panel, separate && parcel.start == 0) {
                    link.wait(Lane::Down, Mark::Kernels(i))?;
                }
                let len = parcel.len();
                let ring = self.run.down_ring.expect("a ring for the down transfers");
                let dst = ring.at(parcel.offset, len);
                let width = self.ends.width;
                let src = self.ends.down_dev[parcel.transfer] + (width * parcel.start) as u64;
                // SAFETY: `dst` is `len` elements of the ring's slot, which no thread uses until
                // this copy's mark lands (`down_landed`), and whose previous parcel is unpacked
                // (checked above); `src` lies inside the device buffer holding the transfer's
                // elements, written by work ordered before this copy (the panel's kernels: the
                // same stream, or the wait above). A mapped result copies nothing: the panel's
                // kernels wrote the parcel into `dst` themselves, before the mark recorded here.
                clocked(&mut trace.issue, || {
                    if !self.run.mapped_result {
                        unsafe { link.copy_down(dst, src, len * width)? };
                    }
                    link.record(Mark::DownSlot(parcel.slot), Lane::Down)
                })?;
                down_waits.push_back(issued_down);
                issued_down += 1;
                if issued_down == down.parcels.len() {
                    link.stamp(Lane::Down, Stamp::ResultsLanded)?;
                }
                if let (Some(i), true) = (panel, separate) {
                    if issued_down == sched.panel_outputs[i].end {
                        link.record(Mark::Outputs(i), Lane::Down)?;
                        outputs_recorded = i + 1;
                    }
                }
                progressed = true;
            }
            if separate && c_host {
                // Panels with no down parcels (none: every panel has rows) keep the count going.
                while outputs_recorded < enqueued
                    && sched.panel_outputs[outputs_recorded].is_empty()
                {
                    outputs_recorded += 1;
                }
            }

            // 4. Copies that have landed free their slots (up) or their parcels (down).
            let polling = Instant::now();
            while let Some(&j) = up_waits.front() {
                if !link.landed(Mark::UpSlot(up.parcels[j].slot))? {
                    break;
                }
                board.up_free.store(j + up.slots + 1, SeqCst);
                up_waits.pop_front();
                progressed = true;
            }
            while let Some(&d) = down_waits.front() {
                if !link.landed(Mark::DownSlot(down.parcels[d].slot))? {
                    break;
                }
                board.down_landed.store(d + 1, SeqCst);
                down_waits.pop_front();
                if d + 1 == down.parcels.len() {
                    trace.results_landed = self.now();
                }
                progressed = true;
            }
            trace.poll += polling.elapsed().as_secs_f64();

            let finished = issued_up == up.parcels.len()
                && enqueued == panels
                && issued_down == down.parcels.len()
                && board.unpacked.load(SeqCst) == down.pieces.len();
            if finished {
                trace.unpacked = self.now();
                trace.touched = board.touched_ns.load(SeqCst) as f64 * 1e-9;
                // The board's clock starts just before the conductor's.
                if board.log_pieces {
                    let offset = (self.start - board.start).as_secs_f64();
                    trace.first_parcel = board.first_parcel.read(offset);
                    trace.last_parcel = board.last_parcel.read(offset);
                }
                return Ok(());
            }
            if progressed {
                idle = 0;
            } else {
                match board.step(CONDUCTOR) {
                    Step::Worked => {
                        trace.pieces_by_conductor += 1;
                        idle = 0;
                    }
                    Step::Idle | Step::Finished => {
                        // Nothing to do on the host and nothing in progress there: only the
                        // device can move things on, so wait for the copy that will, in one
                        // blocking call rather than by polling (which, with many threads
                        // multiplying at once, keeps the driver busy for nothing).
                        let next = if issued_up < up.parcels.len() {
                            up_waits.front().map(|&j| Mark::UpSlot(up.parcels[j].slot))
                        } else {
                            down_waits
                                .front()
                                .map(|&d| Mark::DownSlot(down.parcels[d].slot))
                        };
                        match next {
                            Some(mark) if idle >= 64 && board.quiet() => {
                                clocked(&mut trace.poll, || link.block(mark))?;
                                idle = 0;
                            }
                            _ => crew::pause(&mut idle),
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::schedule::Residency;

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
    fn only_mid_sized_transfers_bypass_the_caches() {
        let res = Residency {
            a_host: true,
            b_host: true,
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

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
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Instant;

use super::board::{Board, Endpoints, PieceTime, Step, CONDUCTOR, LOGGED_PIECES};
use super::ends::TRACE;
use super::link::{Lane, Link, Mark, Stamp};
use super::schedule::{Schedule, What};
use crate::error::GpuDotError;
use crate::host::crew::{self, Watch};
use crate::host::staging::Ring;

/// Host bytes of copying worth one more helper thread: fewer bytes per thread and waking it
/// costs more than it saves (one thread copies about 5 GB/s on an H200 host, so 128 KiB is
/// about 25 µs of its time).
pub(crate) const BYTES_PER_HELPER: usize = 128 << 10;

/// Host-side times of one run, in seconds from its start, for `GPU_DOT_TRACE`.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Trace {
    /// When the first up parcel was seen packed, and how many steps of host work the
    /// conductor had done by then (see `pieces_by_conductor`).
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
    /// The conductor's steps of host work: a staged piece each, or the pieces of a parcel
    /// copied straight from or into a page-locked host array, all at once.
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

/// Runs `f`, adding its duration to `acc` (seconds).
fn clocked<T>(acc: &mut f64, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    *acc += start.elapsed().as_secs_f64();
    out
}

/// Sets the board's `abort` when dropped while its thread unwinds, so that the helpers leave.
struct AbortOnUnwind<'a>(&'a AtomicBool);

impl Drop for AbortOnUnwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, SeqCst);
        }
    }
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
    let helpers = (ends.staged_elements(sched) * ends.width / run.bytes_per_helper.max(1))
        .min(crew.helpers());
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
        // A panic below the conductor (a bug) ends the product too: the helpers must see it,
        // or the crew's close would wait for them forever while they wait for pieces.
        let _abort = AbortOnUnwind(&board.abort);
        trace.helpers = if watch.has_helpers() { helpers } else { 0 };
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
    if ends.fresh.is_none() && (board.down_next.load(SeqCst) > 0 || board.wrote_direct.load(SeqCst))
    {
        *touched = true;
    }
    result?;
    run.link.drain()
}

/// The calling thread's part of a run: it issues the copies and enqueues the panels' kernels
/// as their inputs are ready, in four steps a pass (the module's list), and does pieces itself
/// when nothing is ready.
struct Conductor<'c, 'r, L: Link> {
    sched: &'c Schedule,
    ends: &'c Endpoints,
    run: &'c Run<'r, L>,
    board: &'c Board<'c>,
    watch: &'c Watch,
    start: Instant,
}

/// How far the conductor has got: copies issued, marks recorded and panels enqueued, and the
/// copies in flight whose landing frees a slot or a parcel.
#[derive(Default)]
struct Progress {
    issued_up: usize,
    /// Panels whose input event is recorded.
    inputs_recorded: usize,
    /// Panels whose kernels are enqueued.
    enqueued: usize,
    issued_down: usize,
    /// Panels whose output event is recorded.
    outputs_recorded: usize,
    up_waits: VecDeque<usize>,
    down_waits: VecDeque<usize>,
    /// Passes in a row that found nothing to do.
    idle: u32,
}

impl<L: Link> Conductor<'_, '_, L> {
    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// The conductor's loop: each pass issues what is ready (steps 1 to 4) until every copy,
    /// kernel and piece is done.
    fn conduct(
        &self,
        panel_work: &mut PanelWork,
        touched: &mut bool,
        trace: &mut Trace,
    ) -> Result<(), GpuDotError> {
        let mut at = Progress::default();
        self.run.link.stamp(Lane::Compute, Stamp::Start)?;
        loop {
            if self.watch.helper_panicked() {
                return Err(GpuDotError::HostThread {
                    what: "a host copy thread panicked".into(),
                });
            }
            let mut progressed = self.copies_up(&mut at, trace)?;
            // Panels whose inputs need no copy (or none that this pass issued).
            self.record_inputs(&mut at)?;
            progressed |= self.panels(&mut at, panel_work, touched, trace)?;
            progressed |= self.copies_down(&mut at, trace)?;
            progressed |= self.landed(&mut at, trace)?;
            if self.finished(&at) {
                self.finish(trace);
                return Ok(());
            }
            if progressed {
                at.idle = 0;
            } else {
                self.when_idle(&mut at, trace)?;
            }
        }
    }

    /// Records the inputs mark of every panel whose up parcels are all among those issued
    /// (separate lanes only: on one stream the kernels follow the copies anyway).
    fn record_inputs(&self, at: &mut Progress) -> Result<(), GpuDotError> {
        let (sched, link) = (self.sched, &self.run.link);
        if link.separate() {
            while at.inputs_recorded < sched.panels.len()
                && sched.panel_inputs[at.inputs_recorded] <= at.issued_up
            {
                link.record(Mark::Inputs(at.inputs_recorded), Lane::Up)?;
                at.inputs_recorded += 1;
            }
        }
        Ok(())
    }

    /// Step 1: copies up, in order, as their pieces are packed; whether any was issued.
    fn copies_up(&self, at: &mut Progress, trace: &mut Trace) -> Result<bool, GpuDotError> {
        let (board, link) = (self.board, &self.run.link);
        let separate = link.separate();
        let up = &self.sched.up;
        let mut progressed = false;
        while at.issued_up < up.parcels.len() && board.up_parcel_packed(at.issued_up) {
            let parcel = &up.parcels[at.issued_up];
            if parcel.start == 0 && separate {
                // A panel's device slot is reused: wait for the panel that used it last
                // (a batch's group of items of B shares its slot index with A's).
                match up.transfers[parcel.transfer].what {
                    What::A(i) | What::BItems(i) if i >= self.run.a_slots => {
                        if at.enqueued <= i - self.run.a_slots {
                            break;
                        }
                        link.wait(Lane::Up, Mark::Kernels(i - self.run.a_slots))?;
                    }
                    What::CIn(i) if i >= self.run.c_slots => {
                        if at.outputs_recorded <= i - self.run.c_slots {
                            break;
                        }
                        link.wait(Lane::Up, Mark::Outputs(i - self.run.c_slots))?;
                    }
                    _ => {}
                }
            }
            if at.issued_up == 0 {
                trace.first_packed = self.now();
                trace.conductor_first = trace.pieces_by_conductor;
                trace.arrived_by_first_packed = board.arrived.load(SeqCst);
            }
            let len = parcel.len();
            let width = self.ends.width;
            let src = if self.ends.up_direct(parcel.transfer) {
                let host = self.ends.up_host[parcel.transfer].addr();
                (host + parcel.start * width) as *mut u8
            } else {
                let ring = self.run.up_ring.expect("a ring for the up transfers");
                ring.at(parcel.offset, len)
            };
            let dst = self.ends.up_dev[parcel.transfer] + (width * parcel.start) as u64;
            // Mapped inputs copy nothing: the kernels read the packed parcel where it is.
            // SAFETY: `src` holds `len` packed elements (every piece of the parcel is
            // packed), which no piece writes again until this copy's slot mark lands
            // (`up_free`); or, for a direct transfer, `len` elements of the host matrix, which
            // is contiguous from its address (`Endpoints::copy_direct`) and borrowed for the
            // whole run, and only read. `dst` lies inside the device buffer the transfer targets, which
            // holds the transfer's elements from its base (sized by the caller from the same
            // schedule), and nothing else uses it until the copy completes (the kernels
            // that read it are ordered after it, and the panel that used the slot before
            // is waited for above).
            let reused = at.issued_up + up.slots < up.parcels.len();
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
                at.up_waits.push_back(at.issued_up);
            }
            if at.issued_up == 0 {
                trace.first_copy = self.now();
            }
            at.issued_up += 1;
            // A panel's inputs mark follows the copy that completes them, before any later
            // panel's copies: its kernels then wait for their own inputs only, however
            // many packed parcels this pass issues.
            self.record_inputs(at)?;
            if at.issued_up == up.parcels.len() {
                trace.inputs_issued = self.now();
                link.stamp(Lane::Up, Stamp::InputsLanded)?;
            }
            progressed = true;
        }
        Ok(progressed)
    }

    /// Step 2: each panel's kernels, once its inputs are on their way and its output slot is
    /// free; whether any was enqueued.
    fn panels(
        &self,
        at: &mut Progress,
        panel_work: &mut PanelWork,
        touched: &mut bool,
        trace: &mut Trace,
    ) -> Result<bool, GpuDotError> {
        let (sched, link) = (self.sched, &self.run.link);
        let separate = link.separate();
        let panels = sched.panels.len();
        let c_host = !sched.down.transfers.is_empty();
        let mut progressed = false;
        while at.enqueued < panels && sched.panel_inputs[at.enqueued] <= at.issued_up {
            let i = at.enqueued;
            if separate {
                if i >= at.inputs_recorded {
                    break;
                }
                if self.run.work_waits
                    && !(link.landed(Mark::Inputs(i))?
                        && (i == 0 || link.landed(Mark::Kernels(i - 1))?))
                {
                    break;
                }
                if c_host && i >= self.run.c_slots {
                    if at.outputs_recorded <= i - self.run.c_slots {
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
            at.enqueued += 1;
            if at.enqueued == panels {
                trace.kernels_enqueued = self.now();
            }
            progressed = true;
        }
        Ok(progressed)
    }

    /// Step 3: copies down, once the panel's kernels are enqueued and the slot is unpacked;
    /// whether any was issued.
    fn copies_down(&self, at: &mut Progress, trace: &mut Trace) -> Result<bool, GpuDotError> {
        let (sched, board, link) = (self.sched, self.board, &self.run.link);
        let separate = link.separate();
        let down = &sched.down;
        let mut progressed = false;
        while at.issued_down < down.parcels.len() {
            let parcel = &down.parcels[at.issued_down];
            let panel = match down.transfers[parcel.transfer].what {
                What::COut(i) => Some(i),
                _ => None,
            };
            if panel.is_some_and(|i| i >= at.enqueued) {
                break;
            }
            if at.issued_down >= down.slots
                && !board.down_parcel_unpacked(at.issued_down - down.slots)
            {
                break;
            }
            if let (Some(i), true) = (panel, separate && parcel.start == 0) {
                link.wait(Lane::Down, Mark::Kernels(i))?;
            }
            let len = parcel.len();
            let width = self.ends.width;
            let direct = self.ends.down_direct(parcel.transfer);
            let dst = if direct {
                let host = self.ends.down_host[parcel.transfer].addr();
                (host + parcel.start * width) as *mut u8
            } else {
                let ring = self.run.down_ring.expect("a ring for the down transfers");
                ring.at(parcel.offset, len)
            };
            if direct {
                board.wrote_direct.store(true, SeqCst);
            }
            let src = self.ends.down_dev[parcel.transfer] + (width * parcel.start) as u64;
            // SAFETY: `dst` is `len` elements of the ring's slot, which no thread uses until
            // this copy's mark lands (`down_landed`), and whose previous parcel is unpacked
            // (checked above); or, for a direct transfer, `len` elements of the host matrix
            // (contiguous from its address, `Endpoints::copy_direct`), borrowed mutably for
            // the whole run, which no thread touches (its pieces do nothing), and which the run
            // waits for before it returns; `src` lies inside the device buffer holding the transfer's
            // elements, written by work ordered before this copy (the panel's kernels: the
            // same stream, or the wait above). A mapped result copies nothing: the panel's
            // kernels wrote the parcel into `dst` themselves, before the mark recorded here.
            clocked(&mut trace.issue, || {
                if !self.run.mapped_result {
                    unsafe { link.copy_down(dst, src, len * width)? };
                }
                link.record(Mark::DownSlot(parcel.slot), Lane::Down)
            })?;
            at.down_waits.push_back(at.issued_down);
            at.issued_down += 1;
            if at.issued_down == down.parcels.len() {
                link.stamp(Lane::Down, Stamp::ResultsLanded)?;
            }
            if let (Some(i), true) = (panel, separate) {
                if at.issued_down == sched.panel_outputs[i].end {
                    link.record(Mark::Outputs(i), Lane::Down)?;
                    at.outputs_recorded = i + 1;
                }
            }
            progressed = true;
        }
        if separate && !down.transfers.is_empty() {
            // Panels with no down parcels (none: every panel has rows) keep the count going.
            while at.outputs_recorded < at.enqueued
                && sched.panel_outputs[at.outputs_recorded].is_empty()
            {
                at.outputs_recorded += 1;
            }
        }
        Ok(progressed)
    }

    /// Step 4: copies that have landed free their slots (up) or their parcels (down); whether
    /// any had.
    fn landed(&self, at: &mut Progress, trace: &mut Trace) -> Result<bool, GpuDotError> {
        let (board, link) = (self.board, &self.run.link);
        let (up, down) = (&self.sched.up, &self.sched.down);
        let mut progressed = false;
        let polling = Instant::now();
        while let Some(&j) = at.up_waits.front() {
            if !link.landed(Mark::UpSlot(up.parcels[j].slot))? {
                break;
            }
            board.up_free.store(j + up.slots + 1, SeqCst);
            at.up_waits.pop_front();
            progressed = true;
        }
        while let Some(&d) = at.down_waits.front() {
            if !link.landed(Mark::DownSlot(down.parcels[d].slot))? {
                break;
            }
            board.down_landed.store(d + 1, SeqCst);
            at.down_waits.pop_front();
            if d + 1 == down.parcels.len() {
                trace.results_landed = self.now();
            }
            progressed = true;
        }
        trace.poll += polling.elapsed().as_secs_f64();
        Ok(progressed)
    }

    /// Whether every copy is issued, every panel enqueued and every down piece unpacked.
    fn finished(&self, at: &Progress) -> bool {
        let (up, down) = (&self.sched.up, &self.sched.down);
        at.issued_up == up.parcels.len()
            && at.enqueued == self.sched.panels.len()
            && at.issued_down == down.parcels.len()
            && self.board.unpacked.load(SeqCst) == down.pieces.len()
    }

    /// The trace's last host times and the logged pieces, once the run is finished.
    fn finish(&self, trace: &mut Trace) {
        let board = self.board;
        trace.unpacked = self.now();
        trace.touched = board.touched_ns.load(SeqCst) as f64 * 1e-9;
        // The board's clock starts just before the conductor's.
        if board.log_pieces {
            let offset = (self.start - board.start).as_secs_f64();
            trace.first_parcel = board.first_parcel.read(offset);
            trace.last_parcel = board.last_parcel.read(offset);
        }
    }

    /// A pass that found nothing to issue: a piece of host work if one is ready, else a pause,
    /// or, once the host has long been quiet, one blocking wait for the copy that will move
    /// things on.
    fn when_idle(&self, at: &mut Progress, trace: &mut Trace) -> Result<(), GpuDotError> {
        let (board, link) = (self.board, &self.run.link);
        let (up, down) = (&self.sched.up, &self.sched.down);
        match board.step(CONDUCTOR) {
            Step::Worked => {
                trace.pieces_by_conductor += 1;
                at.idle = 0;
            }
            Step::Idle | Step::Finished => {
                // Nothing to do on the host and nothing in progress there: only the
                // device can move things on, so wait for the copy that will, in one
                // blocking call rather than by polling (which, with many threads
                // multiplying at once, keeps the driver busy for nothing).
                let next = if at.issued_up < up.parcels.len() {
                    at.up_waits
                        .front()
                        .map(|&j| Mark::UpSlot(up.parcels[j].slot))
                } else {
                    at.down_waits
                        .front()
                        .map(|&d| Mark::DownSlot(down.parcels[d].slot))
                };
                match next {
                    Some(mark) if at.idle >= 64 && board.quiet() => {
                        clocked(&mut trace.poll, || link.block(mark))?;
                        at.idle = 0;
                    }
                    _ => crew::pause(&mut at.idle),
                }
            }
        }
        Ok(())
    }
}

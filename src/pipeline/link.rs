//! The device side of a run: its streams, the marks (events) the conductor records and waits
//! for, and the [`Link`] that issues them, with its CUDA implementation ([`CudaLink`]); the
//! tests' simulated device is another.

use std::cell::Cell;
use std::sync::Arc;

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{result, CudaEvent, CudaStream};

use super::schedule::Schedule;
use crate::error::GpuDotError;

/// The streams a run uses: three for several panels, one (in every role) otherwise.
pub(crate) struct Streams {
    pub(crate) up: Arc<CudaStream>,
    pub(crate) compute: Arc<CudaStream>,
    pub(crate) down: Arc<CudaStream>,
}

impl Streams {
    /// One stream in every role.
    pub(crate) fn one(stream: &Arc<CudaStream>) -> Streams {
        Streams {
            up: stream.clone(),
            compute: stream.clone(),
            down: stream.clone(),
        }
    }
}

/// A stream's role in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Lane {
    Up,
    Compute,
    Down,
}

/// A moment of a run that `GPU_DOT_TRACE` times on the device (timing events, recorded only
/// while tracing): the run's start, and when the last input landed, the first panel's kernels
/// began, the last panel's kernels ended and the last result left the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stamp {
    Start = 0,
    InputsLanded = 1,
    KernelsBegan = 2,
    KernelsEnded = 3,
    ResultsLanded = 4,
}

impl Stamp {
    /// How many stamps a run records.
    pub(crate) const COUNT: usize = 5;
}

/// An event of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Mark {
    /// The last copy through up staging slot `s`.
    UpSlot(usize),
    /// The last copy into down staging slot `s`.
    DownSlot(usize),
    /// Panel `i`'s inputs copied (several panels only).
    Inputs(usize),
    /// Panel `i`'s kernels done (several panels only).
    Kernels(usize),
    /// Panel `i`'s result copied out (several panels only).
    Outputs(usize),
}

/// The device operations the conductor issues: copies between staging and the device,
/// events, and waits between streams.
pub(crate) trait Link {
    /// Whether the lanes are separate streams; if not, one stream plays every role and the
    /// panel marks are never used.
    fn separate(&self) -> bool;

    /// Enqueues a copy of `bytes` bytes from staging at `src` to the device at `dst` on the up
    /// lane.
    ///
    /// # Safety
    /// `src` must hold `bytes` bytes that nothing writes until the copy has completed, and
    /// `dst` must be valid for `bytes` bytes that nothing else uses until then.
    unsafe fn copy_up(
        &self,
        dst: CUdeviceptr,
        src: *const u8,
        bytes: usize,
    ) -> Result<(), GpuDotError>;

    /// Enqueues a copy of `bytes` bytes from the device at `src` to staging at `dst` on the
    /// down lane.
    ///
    /// # Safety
    /// `dst` must be valid for `bytes` bytes that nothing reads or writes until the copy has
    /// completed, and `src` must hold `bytes` bytes written by work ordered before the copy.
    unsafe fn copy_down(
        &self,
        dst: *mut u8,
        src: CUdeviceptr,
        bytes: usize,
    ) -> Result<(), GpuDotError>;

    /// Records `mark` after the work enqueued so far on `lane`.
    fn record(&self, mark: Mark, lane: Lane) -> Result<(), GpuDotError>;

    /// Makes `lane` wait for the work `mark` last recorded.
    fn wait(&self, lane: Lane, mark: Mark) -> Result<(), GpuDotError>;

    /// Whether the work `mark` last recorded has completed.
    fn landed(&self, mark: Mark) -> Result<bool, GpuDotError>;

    /// Waits until the work `mark` last recorded has completed.
    fn block(&self, mark: Mark) -> Result<(), GpuDotError>;

    /// Waits until everything enqueued on every lane has completed.
    fn drain(&self) -> Result<(), GpuDotError>;

    /// Records `stamp` on `lane` when the run is traced on the device; nothing otherwise.
    fn stamp(&self, _lane: Lane, _stamp: Stamp) -> Result<(), GpuDotError> {
        Ok(())
    }
}

/// The CUDA streams and events of a run.
pub(crate) struct CudaLink<'e> {
    streams: Streams,
    up_slot: &'e [CudaEvent],
    down_slot: &'e [CudaEvent],
    inputs: &'e [CudaEvent],
    kernels: &'e [CudaEvent],
    outputs: &'e [CudaEvent],
    /// Timing events, one per [`Stamp`], while the run is traced; which of them are recorded
    /// (bit `stamp as usize`).
    stamps: Option<&'e [CudaEvent]>,
    stamped: Cell<u8>,
}

impl<'e> CudaLink<'e> {
    /// Events a run of `sched` needs (panel events only on separate streams).
    pub(crate) fn events_needed(sched: &Schedule, separate: bool) -> usize {
        sched.up.slots + sched.down.slots + if separate { 3 * sched.panels.len() } else { 0 }
    }

    /// The link of a run of `sched` on `streams`, with [`events_needed`](Self::events_needed)
    /// events.
    pub(crate) fn new(streams: Streams, events: &'e [CudaEvent], sched: &Schedule) -> Self {
        let separate = !Arc::ptr_eq(&streams.up, &streams.compute);
        let (up_slot, rest) = events.split_at(sched.up.slots);
        let (down_slot, rest) = rest.split_at(sched.down.slots);
        let p = if separate { sched.panels.len() } else { 0 };
        let (inputs, rest) = rest.split_at(p);
        let (kernels, rest) = rest.split_at(p);
        CudaLink {
            streams,
            up_slot,
            down_slot,
            inputs,
            kernels,
            outputs: &rest[..p],
            stamps: None,
            stamped: Cell::new(0),
        }
    }

    /// The link with timing events for its [`Stamp`]s (at least [`Stamp::COUNT`], made with
    /// timing on).
    pub(crate) fn with_stamps(mut self, stamps: &'e [CudaEvent]) -> Self {
        assert!(stamps.len() >= Stamp::COUNT, "one timing event per stamp");
        self.stamps = Some(stamps);
        self
    }

    /// After the run has drained: seconds from the start stamp to each later stamp that was
    /// recorded (input landed, kernels began, kernels ended, results landed), where timed.
    pub(crate) fn stamp_times(&self) -> Result<[Option<f64>; Stamp::COUNT - 1], GpuDotError> {
        let mut out = [None; Stamp::COUNT - 1];
        let Some(events) = self.stamps else {
            return Ok(out);
        };
        let stamped = self.stamped.get();
        if stamped & 1 == 0 {
            return Ok(out);
        }
        for (i, slot) in out.iter_mut().enumerate() {
            if stamped & (1 << (i + 1)) != 0 {
                let ms = events[0]
                    .elapsed_ms(&events[i + 1])
                    .map_err(GpuDotError::at("timing a traced product"))?;
                *slot = Some(f64::from(ms) * 1e-3);
            }
        }
        Ok(out)
    }

    fn stream(&self, lane: Lane) -> &CudaStream {
        match lane {
            Lane::Up => &self.streams.up,
            Lane::Compute => &self.streams.compute,
            Lane::Down => &self.streams.down,
        }
    }

    fn event(&self, mark: Mark) -> &CudaEvent {
        match mark {
            Mark::UpSlot(s) => &self.up_slot[s],
            Mark::DownSlot(s) => &self.down_slot[s],
            Mark::Inputs(i) => &self.inputs[i],
            Mark::Kernels(i) => &self.kernels[i],
            Mark::Outputs(i) => &self.outputs[i],
        }
    }
}

impl Link for CudaLink<'_> {
    fn separate(&self) -> bool {
        !Arc::ptr_eq(&self.streams.up, &self.streams.compute)
    }

    unsafe fn copy_up(
        &self,
        dst: CUdeviceptr,
        src: *const u8,
        bytes: usize,
    ) -> Result<(), GpuDotError> {
        // The raw copy runs in the thread's current context, which must be the stream's (with
        // several devices the thread may have worked on another one last).
        self.streams
            .up
            .context()
            .bind_to_thread()
            .map_err(GpuDotError::at("binding the context"))?;
        // SAFETY: the caller guarantees `src` and `dst` (see the trait).
        unsafe {
            result::memcpy_htod_async(
                dst,
                std::slice::from_raw_parts(src, bytes),
                self.streams.up.cu_stream(),
            )
        }
        .map_err(GpuDotError::at("copying to the device"))
    }

    unsafe fn copy_down(
        &self,
        dst: *mut u8,
        src: CUdeviceptr,
        bytes: usize,
    ) -> Result<(), GpuDotError> {
        self.streams
            .down
            .context()
            .bind_to_thread()
            .map_err(GpuDotError::at("binding the context"))?;
        // SAFETY: the caller guarantees `src` and `dst` (see the trait).
        unsafe {
            result::memcpy_dtoh_async(
                std::slice::from_raw_parts_mut(dst, bytes),
                src,
                self.streams.down.cu_stream(),
            )
        }
        .map_err(GpuDotError::at("copying to the host"))
    }

    fn record(&self, mark: Mark, lane: Lane) -> Result<(), GpuDotError> {
        self.event(mark)
            .record(self.stream(lane))
            .map_err(GpuDotError::at("recording an event"))
    }

    fn wait(&self, lane: Lane, mark: Mark) -> Result<(), GpuDotError> {
        self.stream(lane)
            .wait(self.event(mark))
            .map_err(GpuDotError::at("ordering two streams"))
    }

    fn landed(&self, mark: Mark) -> Result<bool, GpuDotError> {
        self.event(mark)
            .try_is_complete()
            .map_err(GpuDotError::at("waiting for a copy"))
    }

    fn block(&self, mark: Mark) -> Result<(), GpuDotError> {
        self.event(mark)
            .synchronize()
            .map_err(GpuDotError::at("waiting for a copy"))
    }

    fn stamp(&self, lane: Lane, stamp: Stamp) -> Result<(), GpuDotError> {
        let Some(events) = self.stamps else {
            return Ok(());
        };
        events[stamp as usize]
            .record(self.stream(lane))
            .map_err(GpuDotError::at("recording a timing event"))?;
        self.stamped.set(self.stamped.get() | 1 << stamp as usize);
        Ok(())
    }

    fn drain(&self) -> Result<(), GpuDotError> {
        let lanes = if self.separate() { 3 } else { 1 };
        for lane in [Lane::Compute, Lane::Up, Lane::Down]
            .into_iter()
            .take(lanes)
        {
            self.stream(lane)
                .synchronize()
                .map_err(GpuDotError::at("waiting for the product"))?;
        }
        Ok(())
    }
}

//! Device time of enqueued work, between two timing events.

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaStream};

use crate::device::context::Gpu;
use crate::error::GpuDotError;

/// A pair of timing events measuring device time of work enqueued on a stream.
pub(crate) struct Stopwatch {
    start: CudaEvent,
    end: CudaEvent,
}

impl Stopwatch {
    pub(crate) fn new(gpu: &Gpu) -> Result<Stopwatch, GpuDotError> {
        let event = || {
            gpu.ctx
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(GpuDotError::at("creating an event"))
        };
        Ok(Stopwatch {
            start: event()?,
            end: event()?,
        })
    }

    /// Milliseconds of device time taken by what `enqueue` puts on `stream`.
    pub(crate) fn time(
        &self,
        stream: &CudaStream,
        enqueue: impl FnOnce() -> Result<(), GpuDotError>,
    ) -> Result<f32, GpuDotError> {
        let record = GpuDotError::at("recording an event");
        self.start.record(stream).map_err(&record)?;
        enqueue()?;
        self.end.record(stream).map_err(&record)?;
        self.end
            .synchronize()
            .map_err(GpuDotError::at("waiting for an event"))?;
        self.start
            .elapsed_ms(&self.end)
            .map_err(GpuDotError::at("reading an event"))
    }
}

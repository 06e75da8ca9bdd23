//! Whole-matrix moves between host and device: uploads, downloads, zeroed and duplicated
//! device buffers.

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaSlice, DevicePtr};
use ndarray::{Array2, ArrayView2, ArrayViewMut2};

use super::board::Endpoints;
use super::conduct;
use super::conduct::{Run, Trace};
use super::ends::HostCopies;
use super::link::{CudaLink, Streams};
use super::schedule::Schedule;
use super::workspace::{self, Needs, Workspace};
use crate::device::context::Gpu;
use crate::element::Element;
use crate::engine::args::{self};
use crate::error::GpuDotError;
use crate::host::staging::HostMat;

/// Moves one whole matrix between host and device on a workspace's compute stream: `up` is
/// packed and copied to a device address, or a device address is copied and unpacked into
/// `down`.
pub(super) fn transfer<T: Element>(
    gpu: &Gpu,
    ws: &mut Workspace,
    up: Option<(HostMat, CUdeviceptr)>,
    down: Option<(HostMat, CUdeviceptr, bool)>,
) -> Result<HostCopies, GpuDotError> {
    let sched = match (&up, &down) {
        (Some((h, _)), None) => Schedule::upload(h.len()),
        (None, Some((h, _, _))) => Schedule::download(h.len()),
        _ => unreachable!("one direction at a time"),
    };
    if sched.up.parcels.is_empty() && sched.down.parcels.is_empty() {
        return Ok(HostCopies::None);
    }
    ws.provide(
        gpu,
        &Needs {
            width: T::DTYPE.size(),
            up_ring: sched.up.ring_len(),
            down_ring: sched.down.ring_len(),
            ..Needs::default()
        },
    )?;
    let streams = Streams::one(&ws.lanes.compute);
    let events = ws
        .lanes
        .events(gpu, CudaLink::events_needed(&sched, false))?;
    let mut ends = Endpoints::new(T::DTYPE.size(), down.filter(|d| d.2).map(|d| d.0));
    ends.up_host = up.iter().map(|u| u.0).collect();
    ends.up_dev = up.iter().map(|u| u.1).collect();
    ends.down_host = down.iter().map(|d| d.0).collect();
    ends.down_dev = down.iter().map(|d| d.1).collect();
    let copies = ends.copy_direct(true, true, (gpu.info.ordinal, gpu.generation));
    let run = Run {
        link: CudaLink::new(streams, events, &sched),
        up_ring: ws.staging.up.as_ref().map(|b| b.ring(T::DTYPE.size())),
        down_ring: ws.staging.down.as_ref().map(|b| b.ring(T::DTYPE.size())),
        a_slots: 1,
        c_slots: 1,
        mapped_result: false,
        mapped_inputs: false,
        bytes_per_helper: conduct::BYTES_PER_HELPER,
        work_waits: false,
    };
    let mut no_panels = |_: usize| -> Result<(), GpuDotError> { Ok(()) };
    conduct::conduct(
        &sched,
        &ends,
        &run,
        &mut no_panels,
        &mut false,
        &mut Trace::default(),
    )?;
    Ok(copies)
}

/// Uploads `v` (any layout) into a new row-major device buffer.
pub(crate) fn upload<T: Element>(
    gpu: &Gpu,
    v: ArrayView2<'_, T>,
) -> Result<CudaSlice<T>, GpuDotError> {
    args::with_room(gpu, || {
        let mut ws = workspace::take(gpu)?;
        // Allocated on the stream that copies into it, so no other ordering is needed. Where
        // the device is full, the workspace is freed with the error (it holds no work).
        let buf = args::alloc::<T>(&ws.lanes.compute, v.len().max(1))?;
        let ptr = buf.device_ptr(&ws.lanes.compute).0;
        transfer::<T>(gpu, &mut ws, Some((HostMat::of_view(&v), ptr)), None)?;
        workspace::give_back(gpu, ws);
        Ok(buf)
    })
}

/// Uploads `v` (any layout), row-major, to the device address `dst` through the staging of
/// `ws`, which must be the device's. The caller makes sure that `dst` holds `v.len()`
/// elements.
pub(crate) fn upload_to<T: Element>(
    gpu: &Gpu,
    ws: &mut Workspace,
    v: ArrayView2<'_, T>,
    dst: CUdeviceptr,
) -> Result<(), GpuDotError> {
    transfer::<T>(gpu, ws, Some((HostMat::of_view(&v), dst)), None).map(drop)
}

/// Uploads `v` (any layout) into `dst`, row-major.
pub(crate) fn upload_into<T: Element>(
    gpu: &Gpu,
    v: ArrayView2<'_, T>,
    dst: &mut CudaSlice<T>,
) -> Result<(), GpuDotError> {
    assert!(dst.len() >= v.len(), "device buffer too small");
    let mut ws = workspace::take(gpu)?;
    let ptr = dst.device_ptr(&ws.lanes.compute).0;
    upload_to(gpu, &mut ws, v, ptr)?;
    workspace::give_back(gpu, ws);
    Ok(())
}

/// Downloads the row-major device buffer `src` into a new C-order array.
pub(crate) fn download_fresh<T: Element>(
    gpu: &Gpu,
    src: &CudaSlice<T>,
    (rows, cols): (usize, usize),
) -> Result<Array2<T>, GpuDotError> {
    assert!(src.len() >= rows * cols, "device buffer too small");
    let mut out = crate::host::fresh::fresh::<T>((rows, cols), false)?;
    let mut ws = workspace::take(gpu)?;
    let ptr = src.device_ptr(&ws.lanes.compute).0;
    let host = HostMat::row_major(out.as_mut_ptr().cast::<T>(), rows, cols);
    transfer::<T>(gpu, &mut ws, None, Some((host, ptr, true)))?;
    workspace::give_back(gpu, ws);
    crate::host::fresh::result_filled::<T>(rows * cols);
    // SAFETY: the download's pieces cover every element of `out` (rows·cols floats in
    // row-major order), and `transfer` returned Ok only after all of them were unpacked.
    Ok(unsafe { out.assume_init() })
}

/// Downloads the row-major device buffer `src` into `out` (any layout, same shape).
pub(crate) fn download_into<T: Element>(
    gpu: &Gpu,
    src: &CudaSlice<T>,
    out: &mut ArrayViewMut2<'_, T>,
) -> Result<(), GpuDotError> {
    assert!(src.len() >= out.len(), "device buffer too small");
    let mut ws = workspace::take(gpu)?;
    let ptr = src.device_ptr(&ws.lanes.compute).0;
    let host = HostMat::of_view_mut(out);
    transfer::<T>(gpu, &mut ws, None, Some((host, ptr, false)))?;
    workspace::give_back(gpu, ws);
    Ok(())
}

/// A new device buffer of `len` zeros (at least one element).
pub(crate) fn zeros<T: Element>(gpu: &Gpu, len: usize) -> Result<CudaSlice<T>, GpuDotError> {
    let stream = gpu.stream()?;
    let bytes = len.max(1) * T::DTYPE.size();
    let buf = args::with_room(gpu, || {
        stream
            .alloc_zeros::<T>(len.max(1))
            .map_err(|e| GpuDotError::driver("allocating device memory", bytes, e))
    })?;
    stream
        .synchronize()
        .map_err(GpuDotError::at("waiting for a device allocation"))?;
    Ok(buf)
}

/// A copy of `src` in new memory of the same device.
pub(crate) fn duplicate<T: Element>(
    gpu: &Gpu,
    src: &CudaSlice<T>,
) -> Result<CudaSlice<T>, GpuDotError> {
    let stream = gpu.stream()?;
    let buf = args::with_room(gpu, || {
        stream
            .clone_dtod(src)
            .map_err(|e| GpuDotError::driver("copying device memory", src.num_bytes(), e))
    })?;
    stream
        .synchronize()
        .map_err(GpuDotError::at("waiting for a device copy"))?;
    Ok(buf)
}

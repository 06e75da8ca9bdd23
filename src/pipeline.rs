//! The general GPU product `C = alpha·A·B + beta·C`, each of A, B and C on the host or on the
//! device, with the transfers overlapped with the kernels.
//!
//! A product runs on a [`Workspace`]: two *lanes* (a stream each, with its own device panel
//! buffers and page-locked staging buffers) and a device buffer for B. Host operands are packed
//! by the rayon pool's threads into the staging buffers and copied asynchronously:
//!
//! 1. B first, in chunks through the staging buffers of both lanes (on lane 0's stream);
//! 2. then A and C in row panels, alternating lanes: panel `i` is packed, copied up, multiplied
//!    and its panel of C copied back on lane `i % 2` while the host packs panel `i + 1` and
//!    unpacks panel `i − 1`'s result, so copies in both directions, kernels and host copies all
//!    overlap.
//!
//! Workspaces are kept in a bounded pool and reused: in steady state a product allocates
//! neither device nor page-locked memory. Every call returns only once its work is complete.

use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaSlice, CudaStream, CudaView, DevicePtrMut, PushKernelArg};
use ndarray::{s, ArrayView2, ArrayViewMut2};
use once_cell::sync::Lazy;

use crate::context::Gpu;
use crate::error::GpuDotError;
use crate::layout::{layout_of, Layout};
use crate::options::DotOptions;
use crate::registry::Family;
use crate::sgemm::{self, DeviceOperand};
use crate::staging::{self, PinnedBuf};
use crate::tuner::{self, Ran};

/// `GPU_DOT_TRACE=1` prints each GPU product's host-side phase times to stderr.
static TRACE: Lazy<bool> =
    Lazy::new(|| std::env::var_os("GPU_DOT_TRACE").is_some_and(|v| v != "0"));

/// Host-side phase times of one product, in seconds.
#[derive(Default)]
struct Phases {
    b: f64,
    pack: f64,
    unpack: f64,
    sync: f64,
}

fn timed<T>(acc: &mut f64, f: impl FnOnce() -> T) -> T {
    let start = std::time::Instant::now();
    let out = f();
    *acc += start.elapsed().as_secs_f64();
    out
}

/// Panels are multiples of this many rows (the big kernel tile's height), so that device
/// panel offsets keep 16-byte alignment and panels tile evenly.
const PANEL_GRANULE: usize = 128;
/// Products whose host operands and result move fewer bytes than this run as one panel: below
/// it, the extra launches cost more than the overlap saves.
const MIN_CHUNKED_BYTES: usize = 16 << 20;
/// Panels aimed at per product when chunking: enough to overlap, few enough that each panel
/// fills the device (measured on an H200: 512-row panels of 4096³ ran their kernels at less
/// than half the speed of the whole product).
const TARGET_PANELS: usize = 4;
/// Largest A-panel-plus-C-panel a lane stages, in floats (32 MiB).
const MAX_PANEL_FLOATS: usize = 8 << 20;
/// Smallest staging buffer, in floats (1 MiB), so that B's chunks are not tiny.
const MIN_STAGE_FLOATS: usize = 256 << 10;

/// Idle workspaces kept for reuse.
const MAX_IDLE_WORKSPACES: usize = 64;
/// Page-locked bytes idle workspaces may hold together.
const MAX_IDLE_PINNED_BYTES: usize = 1 << 30;
/// Fraction (1/N) of device memory idle workspaces may hold together.
const IDLE_DEVICE_FRACTION: usize = 4;

/// A matrix already on the device, as a kernel reads it.
#[derive(Clone, Copy)]
pub(crate) struct DevMat<'a> {
    pub(crate) buf: &'a CudaSlice<f32>,
    /// Column-major (element (r, c) at `c * ld + r`) instead of row-major.
    pub(crate) trans: bool,
    pub(crate) ld: usize,
}

/// An operand of the general product.
pub(crate) enum Src<'a> {
    Host(ArrayView2<'a, f32>),
    Device {
        mat: DevMat<'a>,
        rows: usize,
        cols: usize,
    },
}

impl Src<'_> {
    pub(crate) fn dim(&self) -> (usize, usize) {
        match self {
            Src::Host(v) => v.dim(),
            Src::Device { rows, cols, .. } => (*rows, *cols),
        }
    }

    /// How the operand is read, for the route report.
    fn layout(&self) -> Layout {
        match self {
            Src::Host(v) => layout_of(v),
            Src::Device { .. } => Layout::Device,
        }
    }
}

/// The output of the general product.
pub(crate) enum Dst<'a> {
    Host(ArrayViewMut2<'a, f32>),
    /// Row-major with leading dimension `ld`.
    Device {
        buf: &'a mut CudaSlice<f32>,
        rows: usize,
        cols: usize,
        ld: usize,
    },
}

impl Dst<'_> {
    pub(crate) fn dim(&self) -> (usize, usize) {
        match self {
            Dst::Host(v) => v.dim(),
            Dst::Device { rows, cols, .. } => (*rows, *cols),
        }
    }
}

/// A failed GPU product, and whether C was already partly written (then C cannot be
/// recomputed from its old value).
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) error: GpuDotError,
    pub(crate) touched: bool,
}

/// What a GPU product did.
pub(crate) struct Done {
    /// The kernel and plan of the first panel (`None` when nothing was multiplied).
    pub(crate) ran: Option<Ran>,
    pub(crate) panels: usize,
    pub(crate) a_layout: Layout,
    pub(crate) b_layout: Layout,
}

/// Computes `C = alpha·A·B + beta·C` on the GPU. Shapes must agree (checked by the caller):
/// A is m × k, B is k × n, C is m × n.
///
/// `beta == 0` never reads C; `alpha == 0` or `k == 0` never reads A or B (as BLAS). A product
/// that fails for lack of device memory is retried once after the idle workspaces are freed.
pub(crate) fn gemm(
    gpu: &Gpu,
    opts: &DotOptions,
    alpha: f32,
    a: &Src,
    b: &Src,
    beta: f32,
    c: &mut Dst,
) -> Result<Done, Failure> {
    let (m, k) = a.dim();
    let n = b.dim().1;
    let untouched = |error| Failure {
        error,
        touched: false,
    };
    sgemm::check_dims(m, k, n).map_err(untouched)?;
    let mut first = true;
    loop {
        let mut ws = take_workspace(gpu).map_err(untouched)?;
        let mut touched = false;
        match run(gpu, &mut ws, opts, alpha, a, b, beta, c, &mut touched) {
            Ok(done) => {
                give_back(gpu, ws);
                return Ok(done);
            }
            Err(GpuDotError::OutOfMemory { .. }) if first && !touched && idle_workspaces() > 0 => {
                drop(ws);
                trim();
                first = false;
            }
            // A workspace that saw an error may hold work in an unknown state: it is dropped
            // (its staging buffers wait for their copies before being freed).
            Err(error) => return Err(Failure { error, touched }),
        }
    }
}

/// The row panel height for a product.
fn panel_rows(opts: &DotOptions, (m, k, n): (usize, usize, usize), crosses: bool) -> usize {
    if let Some(rows) = opts.panel_rows {
        return rows.clamp(1, m.max(1));
    }
    let bytes = 4 * (m * k + m * n);
    if !crosses || m < 2 * PANEL_GRANULE || bytes < MIN_CHUNKED_BYTES {
        return m;
    }
    let by_count = m.div_ceil(TARGET_PANELS).next_multiple_of(PANEL_GRANULE);
    let by_size = (MAX_PANEL_FLOATS / (k + n).max(1)) / PANEL_GRANULE * PANEL_GRANULE;
    by_count.min(by_size).max(PANEL_GRANULE).min(m)
}

/// Reads `v` as rows of the stored view: `v` itself, or its transpose when that walks memory
/// in order (F-order and column-strided views).
fn storage_view<'a>(v: &ArrayView2<'a, f32>) -> (ArrayView2<'a, f32>, bool) {
    let st = v.strides();
    let (r, c) = (st[0].unsigned_abs(), st[1].unsigned_abs());
    if v.nrows() > 1 && v.ncols() > 1 && r < c {
        (v.reversed_axes(), true)
    } else {
        (*v, false)
    }
}

#[allow(clippy::too_many_arguments)]
fn run(
    gpu: &Gpu,
    ws: &mut Workspace,
    opts: &DotOptions,
    alpha: f32,
    a: &Src,
    b: &Src,
    beta: f32,
    c: &mut Dst,
    touched: &mut bool,
) -> Result<Done, GpuDotError> {
    let (m, k) = a.dim();
    let n = b.dim().1;
    let mut done = Done {
        ran: None,
        panels: 0,
        a_layout: a.layout(),
        b_layout: b.layout(),
    };
    if m == 0 || n == 0 {
        return Ok(done);
    }
    let multiply = k > 0 && alpha != 0.0;
    let crosses = matches!(a, Src::Host(_)) || matches!(c, Dst::Host(_));
    let rows = panel_rows(opts, (m, k, n), crosses);
    let Workspace { lanes, b: b_slot } = ws;
    let started = std::time::Instant::now();
    let mut ph = Phases::default();

    // B on the device.
    let b_op = if !multiply {
        None
    } else {
        Some(match b {
            Src::Device { mat, .. } => DeviceOperand {
                buf: mat.buf.as_view(),
                trans: mat.trans,
                ld: mat.ld,
            },
            Src::Host(v) => {
                let (w, trans) = storage_view(v);
                let stage = (rows * k).max(w.ncols()).max(MIN_STAGE_FLOATS);
                let [l0, l1] = &mut *lanes;
                let buf = sgemm::scratch(&l0.stream, b_slot, k * n)?;
                let pins = [
                    pinned(gpu, &mut l0.pin_a, stage)?,
                    pinned(gpu, &mut l1.pin_a, stage)?,
                ];
                timed(&mut ph.b, || upload_rows(w, buf, &l0.stream, pins))?;
                l1.stream
                    .join(&l0.stream)
                    .map_err(GpuDotError::at("ordering two streams"))?;
                DeviceOperand {
                    buf: b_slot.as_ref().expect("filled above").slice(..k * n),
                    trans,
                    ld: w.ncols(),
                }
            }
        })
    };

    let a_host = match a {
        Src::Host(v) => Some(storage_view(v)),
        Src::Device { .. } => None,
    };
    let panels: Vec<(usize, usize)> = (0..m)
        .step_by(rows)
        .map(|r0| (r0, (r0 + rows).min(m)))
        .collect();
    done.panels = panels.len();
    let needs_t = multiply && !(alpha == 1.0 && beta == 0.0);
    let c_on_device = matches!(c, Dst::Device { .. });
    let c_in = beta != 0.0 && !c_on_device;

    for (i, &(r0, r1)) in panels.iter().enumerate() {
        let lane = &mut lanes[i % 2];
        let p = r1 - r0;
        // Panel i − 2's result leaves the lane's staging buffer before panel i's is copied
        // into it: after panel i's kernel is enqueued, so that the host unpacks while the GPU
        // works; before it when panel i's C input goes through the same buffer (beta ≠ 0).
        if i >= 2 && c_in {
            timed(&mut ph.unpack, || {
                finish(lane, c, panels[i - 2], n, touched)
            })?;
        }
        // Where this panel's C lives on the device, and its leading dimension.
        if let Dst::Host(cv) = c {
            let len = p * n;
            sgemm::scratch(&lane.stream, &mut lane.c, len)?;
            if beta != 0.0 {
                let pin = pinned(gpu, &mut lane.pin_c, len)?;
                staging::pack(cv.slice(s![r0..r1, ..]), pin.host_mut(len)?);
                let dst = lane.c.as_mut().expect("filled above");
                let (ptr, _written) = dst.device_ptr_mut(&lane.stream);
                // SAFETY: `ptr` holds at least `len` floats (`scratch`); the lane's stream
                // orders every use of its buffers, and `_written` records the write for
                // cudarc's cross-stream tracking after the copy is enqueued.
                unsafe { pin.copy_to_device(len, ptr, &lane.stream)? };
            }
        }
        if needs_t {
            sgemm::scratch(&lane.stream, &mut lane.t, p * n)?;
        }

        if let Some(b_op) = &b_op {
            // A's panel on the device.
            let a_op = match (a, &a_host) {
                (_, Some((w, trans))) => {
                    let block = if *trans {
                        w.slice(s![.., r0..r1])
                    } else {
                        w.slice(s![r0..r1, ..])
                    };
                    let len = p * k;
                    let stage = len.max(MIN_STAGE_FLOATS);
                    let pin = pinned(gpu, &mut lane.pin_a, stage)?;
                    timed(&mut ph.pack, || {
                        pin.host_mut(len).map(|h| staging::pack(block, h))
                    })?;
                    {
                        let dst = sgemm::scratch(&lane.stream, &mut lane.a, len)?;
                        let (ptr, _written) = dst.device_ptr_mut(&lane.stream);
                        // SAFETY: `ptr` holds at least `len` floats (`scratch`), used only on
                        // the lane's stream; `_written` records the write after the copy is
                        // enqueued.
                        unsafe { pin.copy_to_device(len, ptr, &lane.stream)? };
                    }
                    DeviceOperand {
                        buf: lane.a.as_ref().expect("filled above").slice(..len),
                        trans: *trans,
                        ld: block.ncols(),
                    }
                }
                (Src::Device { mat, .. }, None) => DeviceOperand {
                    buf: if mat.trans {
                        mat.buf.slice(r0..)
                    } else {
                        mat.buf.slice(r0 * mat.ld..)
                    },
                    trans: mat.trans,
                    ld: mat.ld,
                },
                (Src::Host(_), None) => unreachable!("host operands have a storage view"),
            };
            let (mut target, ldc) = match (needs_t, &mut *c) {
                (true, _) => (lane.t.as_mut().expect("filled above").slice_mut(..p * n), n),
                (false, Dst::Host(_)) => {
                    (lane.c.as_mut().expect("filled above").slice_mut(..p * n), n)
                }
                (false, Dst::Device { buf, ld, .. }) => (buf.slice_mut(r0 * *ld..), *ld),
            };
            *touched |= c_on_device;
            if opts.poison_output {
                sgemm::poison(&lane.stream, &mut target)?;
            }
            let ran = tuner::run(
                gpu,
                &lane.stream,
                opts.kernel,
                opts.autotune,
                (p, k, n),
                &a_op,
                b_op,
                &mut target,
                ldc,
                &mut lane.scratch,
            )?;
            done.ran.get_or_insert(ran);
        }

        // The epilogue, C = alpha·T + beta·C, when the product is not plain.
        if needs_t || !multiply {
            let tv = if needs_t {
                Some(lane.t.as_ref().expect("filled above").slice(..p * n))
            } else {
                None
            };
            let (mut cv, ldc) = match &mut *c {
                Dst::Host(_) => (lane.c.as_mut().expect("filled above").slice_mut(..p * n), n),
                Dst::Device { buf, ld, .. } => (buf.slice_mut(r0 * *ld..), *ld),
            };
            *touched |= c_on_device;
            axpby(
                gpu,
                &lane.stream,
                (p, n),
                alpha,
                tv.as_ref(),
                beta,
                &mut cv,
                ldc,
            )?;
        }

        if i >= 2 && !c_in {
            timed(&mut ph.unpack, || {
                finish(lane, c, panels[i - 2], n, touched)
            })?;
        }
        if let Dst::Host(_) = c {
            let len = p * n;
            let pin = pinned(gpu, &mut lane.pin_c, len)?;
            let src = lane.c.as_ref().expect("filled above");
            let (ptr, _read) = cudarc::driver::DevicePtr::device_ptr(src, &lane.stream);
            // SAFETY: `ptr` holds at least `len` floats, written by the work enqueued before on
            // this lane's stream; `_read` records the read for cudarc's tracking.
            unsafe { pin.copy_from_device(len, ptr, &lane.stream)? };
        }
    }
    let first_pending = panels.len().saturating_sub(2);
    for (i, &panel) in panels.iter().enumerate().skip(first_pending) {
        timed(&mut ph.unpack, || {
            finish(&mut lanes[i % 2], c, panel, n, touched)
        })?;
    }
    for lane in lanes.iter() {
        timed(&mut ph.sync, || lane.stream.synchronize())
            .map_err(GpuDotError::at("waiting for the product"))?;
    }
    if *TRACE {
        eprintln!(
            "gpu-dot trace: {m}x{k}x{n} panels={} total={:.3}ms b={:.3}ms pack_a={:.3}ms unpack_c={:.3}ms sync={:.3}ms",
            panels.len(),
            started.elapsed().as_secs_f64() * 1e3,
            ph.b * 1e3,
            ph.pack * 1e3,
            ph.unpack * 1e3,
            ph.sync * 1e3
        );
    }
    Ok(done)
}

/// Copies a finished panel of C from the lane's staging buffer into the host output.
fn finish(
    lane: &mut Lane,
    c: &mut Dst,
    (r0, r1): (usize, usize),
    n: usize,
    touched: &mut bool,
) -> Result<(), GpuDotError> {
    if let Dst::Host(cv) = c {
        let pin = lane.pin_c.as_mut().expect("a panel was copied back");
        *touched = true;
        staging::unpack(pin.host((r1 - r0) * n)?, cv.slice_mut(s![r0..r1, ..]));
    }
    Ok(())
}

/// Uploads the rows of `w` into `dst` (row-major, `w.ncols()` per row) in chunks, alternating
/// between two staging buffers so packing overlaps the copies.
fn upload_rows(
    w: ArrayView2<'_, f32>,
    dst: &mut CudaSlice<f32>,
    stream: &Arc<CudaStream>,
    pins: [&mut PinnedBuf; 2],
) -> Result<(), GpuDotError> {
    let (rows, cols) = w.dim();
    let per_chunk = (pins[0].len().min(pins[1].len()) / cols.max(1)).max(1);
    for (j, r0) in (0..rows).step_by(per_chunk).enumerate() {
        let r1 = (r0 + per_chunk).min(rows);
        let len = (r1 - r0) * cols;
        let pin = &mut *pins[j % 2];
        staging::pack(w.slice(s![r0..r1, ..]), pin.host_mut(len)?);
        let mut part = dst.slice_mut(r0 * cols..r1 * cols);
        let (ptr, _written) = part.device_ptr_mut(stream);
        // SAFETY: `part` holds exactly `len` floats and is written only on `stream`;
        // `_written` records the write after the copy is enqueued.
        unsafe { pin.copy_to_device(len, ptr, stream)? };
    }
    Ok(())
}

/// Uploads `v` (any layout) into a new row-major device buffer.
pub(crate) fn upload(gpu: &Gpu, v: ArrayView2<'_, f32>) -> Result<CudaSlice<f32>, GpuDotError> {
    let mut ws = take_workspace(gpu)?;
    let len = v.len().max(1);
    let mut buf = sgemm::alloc(&ws.lanes[0].stream, len)?;
    transfer_in(gpu, &mut ws, v, &mut buf)?;
    give_back(gpu, ws);
    Ok(buf)
}

/// Uploads `v` (any layout) into `dst`, row-major.
pub(crate) fn upload_into(
    gpu: &Gpu,
    v: ArrayView2<'_, f32>,
    dst: &mut CudaSlice<f32>,
) -> Result<(), GpuDotError> {
    let mut ws = take_workspace(gpu)?;
    transfer_in(gpu, &mut ws, v, dst)?;
    give_back(gpu, ws);
    Ok(())
}

fn transfer_in(
    gpu: &Gpu,
    ws: &mut Workspace,
    v: ArrayView2<'_, f32>,
    dst: &mut CudaSlice<f32>,
) -> Result<(), GpuDotError> {
    assert!(dst.len() >= v.len(), "device buffer too small");
    let stage = v
        .len()
        .clamp(MIN_STAGE_FLOATS, MAX_PANEL_FLOATS)
        .max(v.ncols());
    let [l0, l1] = &mut ws.lanes;
    let pins = [
        pinned(gpu, &mut l0.pin_a, stage)?,
        pinned(gpu, &mut l1.pin_a, stage)?,
    ];
    upload_rows(v, dst, &l0.stream, pins)?;
    l0.stream
        .synchronize()
        .map_err(GpuDotError::at("waiting for an upload"))
}

/// Downloads the row-major device buffer `src` into `dst` (any layout), in chunks through two
/// staging buffers so that unpacking one chunk overlaps copying the next.
pub(crate) fn download(
    gpu: &Gpu,
    src: &CudaSlice<f32>,
    mut dst: ArrayViewMut2<'_, f32>,
) -> Result<(), GpuDotError> {
    let (rows, cols) = dst.dim();
    assert!(src.len() >= rows * cols, "device buffer too small");
    if rows * cols == 0 {
        return Ok(());
    }
    let mut ws = take_workspace(gpu)?;
    let stage = (rows * cols)
        .clamp(MIN_STAGE_FLOATS, MAX_PANEL_FLOATS)
        .max(cols);
    let per_chunk = (stage / cols).max(1);
    let chunks: Vec<(usize, usize)> = (0..rows)
        .step_by(per_chunk)
        .map(|r0| (r0, (r0 + per_chunk).min(rows)))
        .collect();
    let [l0, l1] = &mut ws.lanes;
    let stream = &l0.stream;
    let pins = [
        pinned(gpu, &mut l0.pin_c, stage)?,
        pinned(gpu, &mut l1.pin_c, stage)?,
    ];
    let unpack = |pin: &mut PinnedBuf, (r0, r1): (usize, usize), dst: &mut ArrayViewMut2<f32>| {
        pin.host((r1 - r0) * cols)
            .map(|h| staging::unpack(h, dst.slice_mut(s![r0..r1, ..])))
    };
    for (j, &(r0, r1)) in chunks.iter().enumerate() {
        let part = src.slice(r0 * cols..r1 * cols);
        let (ptr, _read) = cudarc::driver::DevicePtr::device_ptr(&part, stream);
        // SAFETY: `part` holds exactly (r1 − r0)·cols floats; `_read` records the read for
        // cudarc's tracking after the copy is enqueued.
        unsafe { pins[j % 2].copy_from_device((r1 - r0) * cols, ptr, stream)? };
        if j > 0 {
            unpack(&mut *pins[(j - 1) % 2], chunks[j - 1], &mut dst)?;
        }
    }
    let last = chunks.len() - 1;
    unpack(&mut *pins[last % 2], chunks[last], &mut dst)?;
    give_back(gpu, ws);
    Ok(())
}

/// A new device buffer of `len` zeros (at least one float).
pub(crate) fn zeros(gpu: &Gpu, len: usize) -> Result<CudaSlice<f32>, GpuDotError> {
    let stream = gpu.stream()?;
    let bytes = len.max(1) * 4;
    let buf = stream
        .alloc_zeros::<f32>(len.max(1))
        .map_err(|e| GpuDotError::driver("allocating device memory", bytes, e))?;
    stream
        .synchronize()
        .map_err(GpuDotError::at("waiting for a device allocation"))?;
    Ok(buf)
}

/// Enqueues `C = alpha·T + beta·C` over a `rows × cols` block (T row-major with leading
/// dimension `cols`; `None` means T is zero).
#[allow(clippy::too_many_arguments)]
fn axpby(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    (rows, cols): (usize, usize),
    alpha: f32,
    t: Option<&CudaView<'_, f32>>,
    beta: f32,
    c: &mut cudarc::driver::CudaViewMut<'_, f32>,
    ldc: usize,
) -> Result<(), GpuDotError> {
    assert!(
        cols <= ldc && (rows - 1) * ldc + cols <= c.len(),
        "output too small"
    );
    assert!(t.is_none_or(|t| t.len() >= rows * cols), "T too small");
    let func = gpu.function(Family::Fast, "sgemm_axpby")?;
    let cfg = sgemm::grid_stride(rows * cols);
    let (m, n, ldt, ldc) = (rows as i32, cols as i32, cols as i64, ldc as i64);
    let null = 0u64;
    let mut builder = stream.launch_builder(&func);
    builder.arg(&m).arg(&n).arg(&alpha);
    match t {
        Some(t) => builder.arg(t),
        None => builder.arg(&null),
    };
    builder.arg(&ldt).arg(&beta).arg(c).arg(&ldc);
    // SAFETY: arguments match `sgemm_axpby(int M, int N, float alpha, const float* T, long
    // long ldt, float beta, float* C, long long ldc)` in order and type (a null T is a 64-bit
    // zero); T holds rows·cols floats at leading dimension cols and C covers rows × cols at
    // ldc (asserted above); the kernel loops over all M·N elements whatever the grid.
    unsafe { builder.launch(cfg) }
        .map(drop)
        .map_err(GpuDotError::at("launching the epilogue"))
}

/// One stream with its panel buffers.
struct Lane {
    stream: Arc<CudaStream>,
    a: Option<CudaSlice<f32>>,
    c: Option<CudaSlice<f32>>,
    t: Option<CudaSlice<f32>>,
    scratch: Option<CudaSlice<f32>>,
    pin_a: Option<PinnedBuf>,
    pin_c: Option<PinnedBuf>,
}

/// Two lanes and a buffer for B: everything one product needs, kept across products.
pub(crate) struct Workspace {
    lanes: [Lane; 2],
    b: Option<CudaSlice<f32>>,
}

impl Workspace {
    fn new(gpu: &Gpu) -> Result<Workspace, GpuDotError> {
        let lane = || -> Result<Lane, GpuDotError> {
            Ok(Lane {
                stream: gpu
                    .ctx
                    .new_stream()
                    .map_err(GpuDotError::at("creating a stream"))?,
                a: None,
                c: None,
                t: None,
                scratch: None,
                pin_a: None,
                pin_c: None,
            })
        };
        Ok(Workspace {
            lanes: [lane()?, lane()?],
            b: None,
        })
    }

    fn device_bytes(&self) -> usize {
        let len = |b: &Option<CudaSlice<f32>>| b.as_ref().map_or(0, |b| b.len() * 4);
        len(&self.b)
            + self
                .lanes
                .iter()
                .map(|l| len(&l.a) + len(&l.c) + len(&l.t) + len(&l.scratch))
                .sum::<usize>()
    }

    fn pinned_bytes(&self) -> usize {
        let len = |b: &Option<PinnedBuf>| b.as_ref().map_or(0, PinnedBuf::bytes);
        self.lanes
            .iter()
            .map(|l| len(&l.pin_a) + len(&l.pin_c))
            .sum()
    }
}

/// A staging buffer of at least `len` floats in `slot`, grown when too small.
fn pinned<'s>(
    gpu: &Gpu,
    slot: &'s mut Option<PinnedBuf>,
    len: usize,
) -> Result<&'s mut PinnedBuf, GpuDotError> {
    if slot.as_ref().is_none_or(|p| p.len() < len) {
        *slot = None;
        *slot = Some(PinnedBuf::new(
            &gpu.ctx,
            sgemm::grown(&PINNED_HIGH_WATER, len),
        )?);
    }
    Ok(slot.as_mut().expect("filled above"))
}

static PINNED_HIGH_WATER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

static IDLE: Lazy<Mutex<Vec<Workspace>>> = Lazy::new(|| Mutex::new(Vec::new()));

fn idle() -> std::sync::MutexGuard<'static, Vec<Workspace>> {
    IDLE.lock().unwrap_or_else(|p| p.into_inner())
}

fn take_workspace(gpu: &Gpu) -> Result<Workspace, GpuDotError> {
    match idle().pop() {
        Some(ws) => Ok(ws),
        None => Workspace::new(gpu),
    }
}

fn give_back(gpu: &Gpu, ws: Workspace) {
    let mut pool = idle();
    let pinned: usize = pool.iter().map(Workspace::pinned_bytes).sum();
    let device: usize = pool.iter().map(Workspace::device_bytes).sum();
    if pool.len() < MAX_IDLE_WORKSPACES
        && pinned + ws.pinned_bytes() <= MAX_IDLE_PINNED_BYTES
        && device + ws.device_bytes() <= gpu.info.total_memory / IDLE_DEVICE_FRACTION
    {
        pool.push(ws);
    } else {
        drop(pool);
        drop(ws);
    }
}

fn idle_workspaces() -> usize {
    idle().len()
}

/// Frees the device and page-locked memory that idle workspaces keep for reuse; the next
/// products allocate it again. Products running on other threads are not affected.
pub fn trim() {
    let drained: Vec<Workspace> = idle().drain(..).collect();
    drop(drained);
}

/// Bytes of device memory and of page-locked host memory that idle workspaces keep for reuse
/// (freed by [`trim`]).
pub fn retained_memory() -> (usize, usize) {
    let pool = idle();
    (
        pool.iter().map(Workspace::device_bytes).sum(),
        pool.iter().map(Workspace::pinned_bytes).sum(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_products_are_one_panel_and_large_ones_about_eight() {
        let o = DotOptions::builtin();
        assert_eq!(panel_rows(&o, (256, 256, 256), true), 256);
        assert_eq!(panel_rows(&o, (4096, 4096, 4096), true), 1024);
        assert_eq!(panel_rows(&o, (4096, 4096, 4096), false), 4096);
        // 32 MiB per lane at most.
        let rows = panel_rows(&o, (8192, 8192, 8192), true);
        assert!(rows % PANEL_GRANULE == 0 && rows * 16384 <= MAX_PANEL_FLOATS);
        assert_eq!(
            panel_rows(&o.clone().panel_rows(Some(7)), (100, 5, 5), true),
            7
        );
        assert_eq!(panel_rows(&o.panel_rows(Some(0)), (100, 5, 5), true), 1);
    }
}

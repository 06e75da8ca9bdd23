//! The general product `C = alpha·A·B + beta·C` in its named steps (see the module docs of
//! [`pipeline`](super)).

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaSlice, CudaStream};

use super::board::Endpoints;
use super::conduct::{Run, Trace};
use super::ends::HostCopies;
use super::ends::*;
use super::link::{CudaLink, Streams};
use super::schedule::{Schedule, What};
use super::times::Times;
use super::workspace::{self, Needs, Workspace};
use super::{conduct, schedule};
use crate::device::context::Gpu;
use crate::device::overrides;
use crate::element::Element;
use crate::engine::args::{self, DeviceOperand, GemmArgs};
use crate::engine::aux;
use crate::engine::launch;
use crate::engine::ozaki::SharedB;
use crate::engine::plan::Plan;
use crate::engine::tuner::{self, Choice, Ran};
use crate::error::GpuDotError;
use crate::options::{DotOptions, Precision};
use operands::{Input, Operands};

/// One general product, `C = alpha·A·B + beta·C`.
pub(crate) struct Gemm<'g, 'a, 'b, 'c, T> {
    pub(crate) alpha: T,
    pub(crate) a: &'g Src<'a, T>,
    pub(crate) b: &'g Src<'b, T>,
    pub(crate) beta: T,
    pub(crate) c: &'g mut Dst<'c, T>,
}

impl<T: Element> Gemm<'_, '_, '_, '_, T> {
    /// `(m, k, n)`.
    fn dims(&self) -> (usize, usize, usize) {
        let (m, k) = self.a.dim();
        (m, k, self.b.dim().1)
    }
}

/// Computes a general product on the GPU. Shapes must agree (checked by the caller): A is
/// m × k, B is k × n, C is m × n.
///
/// `beta == 0` never reads C; `alpha == 0` or `k == 0` never reads A or B (as BLAS). A product
/// that fails for lack of device memory is retried once after the idle workspaces are freed.
pub(crate) fn gemm<T: Element>(
    gpu: &Gpu,
    opts: &DotOptions,
    mut g: Gemm<T>,
) -> Result<Done, Failure> {
    let (m, k, n) = g.dims();
    args::check_dims(m, k, n).map_err(|error| Failure {
        error,
        touched: false,
    })?;
    // Device matrices of another device, or of an older context (the device was reset after
    // a fault), cannot be used here.
    let elsewhere = [g.a.home(), g.b.home(), g.c.home()]
        .into_iter()
        .flatten()
        .find_map(|(home, dim)| gpu.check_home(home, dim).err());
    if let Some(error) = elsewhere {
        return Err(Failure {
            error,
            touched: false,
        });
    }
    let mut first = true;
    loop {
        let mut touched = false;
        match run(gpu, opts, &mut g, &mut touched) {
            Ok(done) => return Ok(done),
            Err(GpuDotError::OutOfMemory { .. })
                if first && !touched && workspace::idle_count(gpu) > 0 =>
            {
                workspace::trim_device(gpu);
                first = false;
            }
            // The workspace that saw the error was dropped, not pooled: it may hold work in
            // an unknown state (its staging waits for its copies before being freed).
            Err(error) => return Err(Failure { error, touched }),
        }
    }
}

/// Runs one product as the steps of the module docs.
fn run<T: Element>(
    gpu: &Gpu,
    opts: &DotOptions,
    g: &mut Gemm<T>,
    touched: &mut bool,
) -> Result<Done, GpuDotError> {
    let started = Instant::now();
    let (m, _, n) = g.dims();
    let mut done = Done {
        ran: None,
        panels: 0,
        a_layout: g.a.layout(),
        b_layout: g.b.layout(),
        host: HostCopies::None,
    };
    if m == 0 || n == 0 {
        return Ok(done);
    }
    let mut times = Times::default();
    let mut ops = Operands::of(g);
    let planned = Planned::of(gpu, opts, &ops);
    times.schedule = started.elapsed();
    let mut ws = buffers(gpu, &ops, &planned)?;
    times.buffers = started.elapsed();
    let inputs_at = inputs_in_ring(&ws, &planned, T::DTYPE.size());
    let addrs = DevAddrs::of(&ws, inputs_at);
    let (ends, copies) = endpoints(&planned, &ops, &addrs, (gpu.info.ordinal, gpu.generation));
    done.host = copies;
    times.loop_start = started.elapsed();
    done.ran = panel_loop(
        gpu,
        opts,
        &mut ops,
        &planned,
        &mut ws,
        &ends,
        inputs_at,
        touched,
        &mut times.run,
    )?;
    done.panels = planned.sched.panels.len();
    workspace::give_back(gpu, ws);
    times.total = started.elapsed();
    if let Some(trial) = planned.trial {
        tuner::record(trial, times.total.as_secs_f64());
    }
    if *TRACE || log::log_enabled!(log::Level::Trace) {
        let line = times.line(ops.dims, planned.sched.panels.len(), &planned.choice);
        log::trace!("{line}");
        if *TRACE {
            eprintln!("gpu-dot trace: {line}");
        }
    }
    Ok(done)
}

/// Step 2, schedule: the tuner's choice and the schedule it gives.
struct Planned {
    choice: Choice,
    trial: Option<tuner::Trial>,
    sched: Arc<Schedule>,
    /// Rows per panel.
    rows: usize,
    /// Device slots for panels of A and C: two when panels overlap, else one.
    slots: usize,
    /// The kernels write the result straight into the down ring (see [`mapped_result`]).
    mapped_result: bool,
    /// The kernels read A and B straight from the up ring (see [`mapped_inputs`]).
    mapped_inputs: bool,
    /// Each panel's work waits for the guard's verdicts (see [`conduct::Run::work_waits`]).
    work_waits: bool,
    /// Under the default precision, the plan native products of this shape settled on, for
    /// panels that run natively ([`tuner::settled_native_plan`]).
    native_plan: Option<Plan>,
}

/// Results of at most this many bytes are written by the kernels straight into page-locked
/// staging, which the device addresses directly, instead of into device memory and then
/// copied down: one operation less on the device for a small product.
const MAPPED_RESULT_BYTES: usize = 256 << 10;

/// Whether a product's kernels write its result straight into the down ring: a plain product
/// (`C = A·B`, nothing read from C) of one panel whose host result is one down parcel of at
/// most [`MAPPED_RESULT_BYTES`], on a device that addresses page-locked host memory at its
/// host address (unified addressing).
fn mapped_result<T: Element>(gpu: &Gpu, ops: &Operands<T>, sched: &Schedule) -> bool {
    let (m, _, n) = ops.dims;
    gpu.maps_host()
        && ops.multiply
        && !ops.needs_t
        && ops.c_dev.is_none()
        && ops.residency.c_host
        && !ops.residency.c_in
        && sched.panels.len() == 1
        && sched.down.parcels.len() == 1
        && sched.down.parcels[0].offset == 0
        && m * n * T::DTYPE.size() <= MAPPED_RESULT_BYTES
}

/// Inputs of at most this many bytes in all (A and B) are read by the kernels straight from
/// page-locked staging, which the device addresses directly, instead of copied to device
/// memory first: one or two copies less on the device, and their issue on the host, for a
/// small product. The kernels then wait on the link for each step along k, so larger inputs
/// lose more than the copies cost. Measured host to host on H100 hosts (BENCHMARKS.md, eight
/// calls of each setting): `f32` 16³–64³ (2–32 KiB) took 1–6 µs less in place (16³
/// 0.017–0.022 ms against 0.021–0.027), `f64` 16³–32³ 0–5 µs less (16³ 0.021–0.024 against
/// 0.023–0.028); `f64` 64³ (64 KiB) took up to 5 µs more, `f32` 128³ (128 KiB) up to 4 µs
/// more, `f32` 160³ and 192³ 7–21 µs more.
pub(crate) const MAPPED_INPUT_BYTES: usize = 32 << 10;

/// Whether a product's kernels read A and B straight from the up ring: a product of one panel
/// whose up transfers are A and B alone (C's old value is not read from the host), each one
/// parcel in a slot of its own (the ring is never reused in the run), of at most
/// [`MAPPED_INPUT_BYTES`] in all, on a device that addresses page-locked host memory at its
/// host address.
fn mapped_inputs<T: Element>(gpu: &Gpu, ops: &Operands<T>, sched: &Schedule) -> bool {
    let up = &sched.up;
    let bytes = up.transfers.iter().map(|t| t.len).sum::<usize>() * T::DTYPE.size();
    gpu.maps_host()
        && ops.multiply
        && sched.panels.len() == 1
        && !up.transfers.is_empty()
        && up
            .transfers
            .iter()
            .all(|t| matches!(t.what, What::A(0) | What::B))
        && up.parcels.len() == up.transfers.len()
        && up.slots == up.parcels.len()
        && bytes <= overrides::mapped_input_bytes().unwrap_or(MAPPED_INPUT_BYTES)
}

/// Whether a product's panels run the guard of the default precision, whose verdicts the
/// host reads back: panels of a plan that emulates (the tile kernels' plans) where the
/// emulation pays.
fn guarded_panels<T: Element>(
    gpu: &Gpu,
    opts: &DotOptions,
    ops: &Operands<T>,
    choice: &Choice,
    rows: usize,
    panels: usize,
) -> bool {
    panels > 1
        && ops.multiply
        && opts.precision.for_dtype(T::DTYPE) == Precision::Auto
        && matches!(choice.plan, Some(Plan::Tile { .. }))
        && launch::emulation_pays_in_panels(T::DTYPE, gpu.kernel_sm(), ops.dims, rows)
}

impl Planned {
    fn of<T: Element>(gpu: &Gpu, opts: &DotOptions, ops: &Operands<T>) -> Planned {
        let product = ops.for_tuner((gpu.info.ordinal, gpu.generation));
        let (choice, trial) = tuner::choose(gpu, opts, &product);
        let native_plan = match opts.precision.for_dtype(T::DTYPE) {
            Precision::Auto => tuner::settled_native_plan(gpu, opts, &product),
            _ => None,
        };
        let rows = choice.rows(ops.dims.0);
        let sched = schedule::product_schedule(ops.dims, rows, ops.multiply, ops.residency);
        let slots = if sched.panels.len() > 1 { 2 } else { 1 };
        let mapped_result = mapped_result(gpu, ops, &sched);
        let mapped_inputs = mapped_inputs(gpu, ops, &sched);
        let work_waits = guarded_panels(gpu, opts, ops, &choice, rows, sched.panels.len());
        Planned {
            choice,
            trial,
            sched,
            rows,
            slots,
            mapped_result,
            mapped_inputs,
            work_waits,
            native_plan,
        }
    }

    /// The streams of a run: three when panels overlap, else one in every role.
    fn streams(&self, ws: &Workspace) -> Streams {
        if self.slots > 1 {
            Streams {
                up: ws.lanes.up.clone(),
                compute: ws.lanes.compute.clone(),
                down: ws.lanes.down.clone(),
            }
        } else {
            Streams::one(&ws.lanes.compute)
        }
    }
}

/// Step 3, buffers: a workspace grown to the schedule.
fn buffers<T: Element>(
    gpu: &Gpu,
    ops: &Operands<T>,
    planned: &Planned,
) -> Result<Workspace, GpuDotError> {
    let (_, k, n) = ops.dims;
    let (rows, r) = (planned.rows, ops.residency);
    let copied = ops.multiply && !planned.mapped_inputs;
    let needs = Needs {
        width: T::DTYPE.size(),
        b: if copied && r.b_host {
            ops.b_up_len()
        } else {
            0
        },
        b_wide: if ops.multiply && ops.b_parts {
            k * n
        } else {
            0
        },
        a: if copied && r.a_host { rows * k } else { 0 },
        a_slots: planned.slots,
        c: if r.c_host && !planned.mapped_result {
            rows * n
        } else {
            0
        },
        c_slots: planned.slots,
        t: if ops.needs_t { rows * n } else { 0 },
        up_ring: planned.sched.up.ring_len(),
        down_ring: planned.sched.down.ring_len(),
    };
    let mut ws = workspace::take(gpu)?;
    ws.provide(gpu, &needs)?;
    Ok(ws)
}

/// Device addresses of a workspace's buffers: B, and the slots for panels of A and C (0 where
/// absent).
struct DevAddrs {
    b: CUdeviceptr,
    a: [CUdeviceptr; 2],
    c: [CUdeviceptr; 2],
}

impl DevAddrs {
    /// The workspace's buffers, with A's first slot and B in the up ring where `inputs_at`
    /// has them (see [`inputs_in_ring`]).
    fn of(ws: &Workspace, inputs_at: Option<MappedInputs>) -> DevAddrs {
        let stream = &ws.lanes.compute;
        let addr = |b: &Option<args::DevBuf>| b.as_ref().map_or(0, |b| b.addr(stream));
        let addrs = DevAddrs {
            b: addr(&ws.dev.b),
            a: [addr(&ws.dev.a[0]), addr(&ws.dev.a[1])],
            c: [addr(&ws.dev.c[0]), addr(&ws.dev.c[1])],
        };
        match inputs_at {
            Some(at) => addrs.with_inputs(at),
            None => addrs,
        }
    }

    /// These addresses with A's first slot and B replaced where `at` has them.
    fn with_inputs(mut self, (a, b): MappedInputs) -> DevAddrs {
        self.a[0] = a.unwrap_or(self.a[0]);
        self.b = b.unwrap_or(self.b);
        self
    }
}

/// Where the kernels read host A and B in place (A's address, B's), each where it is a host
/// operand.
type MappedInputs = (Option<CUdeviceptr>, Option<CUdeviceptr>);

/// The addresses of a product's mapped inputs (see [`mapped_inputs`]) in the workspace's up
/// ring: each up transfer's one parcel, at its offset; `None` where its inputs are copied.
fn inputs_in_ring(ws: &Workspace, planned: &Planned, width: usize) -> Option<MappedInputs> {
    let ring = ws.staging.up.as_ref().filter(|_| planned.mapped_inputs)?;
    Some(ring_inputs(&planned.sched, ring.addr(), width))
}

/// [`inputs_in_ring`] for the up ring at `ring`.
fn ring_inputs(sched: &Schedule, ring: CUdeviceptr, width: usize) -> MappedInputs {
    let mut at = (None, None);
    for (t, parcel) in sched.up.transfers.iter().zip(&sched.up.parcels) {
        let addr = Some(ring + (parcel.offset * width) as u64);
        match t.what {
            What::A(0) => at.0 = addr,
            What::B => at.1 = addr,
            other => unreachable!("{other:?} is not a mapped input"),
        }
    }
    at
}

/// Step 4, endpoints: each transfer of the schedule bound to its host matrix and device
/// address (panel `i` uses slot `i % slots` of A and C).
fn endpoints<T: Element>(
    planned: &Planned,
    ops: &Operands<T>,
    dev: &DevAddrs,
    on: (usize, u64),
) -> (Endpoints, HostCopies) {
    let (sched, slots) = (&planned.sched, planned.slots);
    let fresh = ops
        .fresh
        .then(|| ops.c_host.expect("a fresh result is on the host"));
    let mut ends = Endpoints::new(T::DTYPE.size(), fresh);
    let c = || ops.c_host.expect("C is on the host");
    for t in &sched.up.transfers {
        let (host, addr) = match t.what {
            What::B => (ops.b.host().expect("B is on the host").mat, dev.b),
            What::A(i) => {
                let s = ops.a.host().expect("A is on the host");
                let (r0, r1) = sched.panels[i];
                let block = if s.trans {
                    s.mat.cols(r0, r1)
                } else {
                    s.mat.rows(r0, r1)
                };
                (block, dev.a[i % slots])
            }
            What::CIn(i) => {
                let (r0, r1) = sched.panels[i];
                (c().rows(r0, r1), dev.c[i % slots])
            }
            What::COut(_) | What::BItems(_) | What::Whole => {
                unreachable!("not an input of a 2-D product")
            }
        };
        assert_eq!(host.len(), t.len, "a transfer's host matrix has its length");
        assert_ne!(addr, 0, "a transfer's device buffer is provided");
        ends.up_host.push(host);
        ends.up_dev.push(addr);
    }
    for t in &sched.down.transfers {
        let What::COut(i) = t.what else {
            unreachable!("a product's only output is C")
        };
        let (r0, r1) = sched.panels[i];
        ends.down_host.push(c().rows(r0, r1));
        ends.down_dev.push(dev.c[i % slots]);
    }
    // Kernels that read or write the staging themselves keep it.
    let copies = ends.copy_direct(!planned.mapped_inputs, !planned.mapped_result, on);
    (ends, copies)
}

/// Step 5, the panel loop: the conductor runs the schedule, calling back for each panel's
/// kernels (on the compute stream); `inputs_at` is where they read host A and B in place, if
/// they do ([`inputs_in_ring`]). Returns what the first panel ran.
#[allow(clippy::too_many_arguments)]
fn panel_loop<T: Element>(
    gpu: &Gpu,
    opts: &DotOptions,
    ops: &mut Operands<T>,
    planned: &Planned,
    ws: &mut Workspace,
    ends: &Endpoints,
    inputs_at: Option<MappedInputs>,
    touched: &mut bool,
    trace: &mut Trace,
) -> Result<Option<Ran>, GpuDotError> {
    let streams = planned.streams(ws);
    let compute = streams.compute.clone();
    if inputs_at.is_some() {
        overrides::count_mapped_inputs();
    }
    let Workspace {
        lanes,
        dev,
        staging,
    } = ws;
    let mut ran = None;
    let result_at = planned
        .mapped_result
        .then(|| staging.down.as_ref().map(|b| b.addr()))
        .flatten();
    // op(B) is the same for every panel: an emulated panel leaves its scaling and residues
    // for the next.
    let mut shared = SharedB::new(ops.dims.0, planned.rows);
    shared.native_plan = planned.native_plan;
    let mut panel_work = |i: usize| -> Result<(), GpuDotError> {
        let r = enqueue_panel(
            gpu,
            opts,
            ops,
            planned,
            dev,
            result_at,
            inputs_at,
            &compute,
            &mut shared,
            i,
        )?;
        if ran.is_none() {
            ran = r;
        }
        Ok(())
    };
    let (events, stamps) = lanes.events_and_stamps(
        gpu,
        CudaLink::events_needed(&planned.sched, planned.slots > 1),
        *TRACE,
    )?;
    let link = CudaLink::new(streams, events, &planned.sched);
    let run = Run {
        link: match stamps {
            Some(stamps) => link.with_stamps(stamps),
            None => link,
        },
        up_ring: staging.up.as_ref().map(|b| b.ring(T::DTYPE.size())),
        down_ring: staging.down.as_ref().map(|b| b.ring(T::DTYPE.size())),
        a_slots: planned.slots,
        c_slots: planned.slots,
        mapped_result: result_at.is_some(),
        mapped_inputs: inputs_at.is_some(),
        bytes_per_helper: conduct::BYTES_PER_HELPER,
        work_waits: planned.work_waits,
    };
    conduct::conduct(&planned.sched, ends, &run, &mut panel_work, touched, trace)?;
    trace.device = run.link.stamp_times()?;
    Ok(ran)
}

/// Enqueues panel `i`'s kernel (the chosen plan) and, when the product is not plain, its
/// epilogue `C = alpha·T + beta·C`, on `stream`. With `result_at`, the kernel writes the
/// panel's result there (the down ring's page-locked memory, as the device addresses it)
/// instead of into a device buffer; with `inputs_at` (A's address, B's), it reads host A and
/// B there (their parcels in the up ring). `shared` carries what an emulated panel left of
/// op(B) to the next.
#[allow(clippy::too_many_arguments)]
fn enqueue_panel<T: Element>(
    gpu: &Gpu,
    opts: &DotOptions,
    ops: &mut Operands<T>,
    planned: &Planned,
    dev: &mut workspace::DevBufs,
    result_at: Option<CUdeviceptr>,
    inputs_at: Option<MappedInputs>,
    stream: &Arc<CudaStream>,
    shared: &mut SharedB,
    i: usize,
) -> Result<Option<Ran>, GpuDotError> {
    let (_, k, n) = ops.dims;
    let (r0, r1) = planned.sched.panels[i];
    let p = r1 - r0;
    let slot = i % planned.slots;
    let mut ran = None;
    if ops.multiply {
        // SAFETY: each address of `inputs_at` is the up ring's page-locked memory of the one
        // parcel of host A or B (`mapped_inputs`: one panel, each transfer one parcel in a slot
        // of its own), which the device addresses at the same address (unified addressing,
        // `Gpu::maps_host`): A's `p · k` elements and B's `k · n` from there, packed before
        // these kernels are enqueued (the conductor enqueues them once every up parcel is
        // packed) and not written again until the run has drained. The ring outlives the run,
        // and `Mapped` never frees it.
        let (a_at, b_at) = inputs_at.unwrap_or((None, None));
        let mapped_a = a_at.map(|at| unsafe { Mapped::<T>::new(stream, at, p * k) });
        // SAFETY: as for A just above (B's `b_up_len` elements).
        let mapped_b = b_at.map(|at| unsafe { Mapped::<T>::new(stream, at, ops.b_up_len()) });
        if ops.b_parts && i == 0 {
            expand_b(gpu, stream, ops, dev, mapped_b.as_ref())?;
        }
        let a = match ops.a {
            Input::Host(s) => DeviceOperand {
                buf: match &mapped_a {
                    Some(m) => m.view(),
                    None => dev.a[slot].as_ref().expect("provided").view(p * k),
                },
                trans: s.trans,
                ld: s.ld(p),
            },
            Input::Device(mat) => DeviceOperand {
                buf: if mat.trans {
                    mat.buf.slice(r0..)
                } else {
                    mat.buf.slice(r0 * mat.ld..)
                },
                trans: mat.trans,
                ld: mat.ld,
            },
        };
        let b = b_operand(ops, (&dev.b, &dev.b_wide), mapped_b.as_ref());
        // SAFETY: `result_at` is the down ring's page-locked memory, which holds the panel's
        // `p · n` elements from its start (one down parcel at offset 0, `mapped_result`) and
        // which the device addresses at the same address (unified addressing,
        // `Gpu::maps_host`); the ring outlives the run, nothing reads it before the parcel's
        // mark (recorded after these kernels) lands, and `Mapped` never frees it.
        let mut mapped = result_at.map(|at| unsafe { Mapped::new(stream, at, p * n) });
        let (mut target, ldc) = match (ops.needs_t, &mut ops.c_dev, &mut mapped) {
            (true, _, _) => (dev.t.as_mut().expect("provided").view_mut(p * n), n),
            (false, None, Some(mapped)) => (mapped.view_mut(), n),
            (false, None, None) => (dev.c[slot].as_mut().expect("provided").view_mut(p * n), n),
            (false, Some((buf, ld)), _) => (buf.slice_mut(r0 * *ld..), *ld),
        };
        if opts.poison_output {
            args::poison(stream, &mut target)?;
        }
        let args = GemmArgs::new((p, k, n), &a, &b, &target, ldc)?
            .with_precision(opts.precision)
            .with_pairs(opts.complex_pairs);
        ran = Some(tuner::launch(
            gpu,
            stream,
            opts.kernel,
            planned.choice.plan,
            args,
            &mut target,
            &mut dev.scratch,
            Some(shared),
        )?);
    }
    if ops.needs_t || !ops.multiply {
        let t = ops
            .needs_t
            .then(|| dev.t.as_ref().expect("provided").view(p * n));
        let (mut c, ldc) = match &mut ops.c_dev {
            None => (dev.c[slot].as_mut().expect("provided").view_mut(p * n), n),
            Some((buf, ld)) => (buf.slice_mut(r0 * *ld..), *ld),
        };
        let (alpha, beta) = (ops.alpha, ops.beta);
        aux::axpby(gpu, stream, (p, n), alpha, t.as_ref(), beta, &mut c, ldc)?;
    }
    Ok(ran)
}

/// Enqueues, on `stream`, the expansion of a host complex matrix's parts (B as it went up:
/// its copy on the device, or its parcel in the up ring where `mapped`) into the B the kernels
/// read ([`Src::HostParts`]). The first panel's kernels follow it on the same stream, once its
/// inputs have landed; every later panel's follow those.
fn expand_b<T: Element>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    ops: &Operands<T>,
    dev: &mut workspace::DevBufs,
    mapped: Option<&Mapped<T>>,
) -> Result<(), GpuDotError> {
    let (_, k, n) = ops.dims;
    let parts = uploaded_b(ops, &dev.b, mapped);
    let mut wide = dev.b_wide.as_mut().expect("provided").view_mut(k * n);
    aux::complex_expand(gpu, stream, (k / 2, n / 2), &parts, &mut wide)
}

/// B as a panel's kernels read it: a host B's copy on the device (or its parcel in the up ring
/// where `mapped`), its expansion where it holds a complex matrix's parts, or the device
/// matrix.
fn b_operand<'d, T: Element>(
    ops: &Operands<'d, T>,
    (b, b_wide): (&'d Option<args::DevBuf>, &'d Option<args::DevBuf>),
    mapped: Option<&'d Mapped<T>>,
) -> DeviceOperand<'d, T> {
    let (_, k, n) = ops.dims;
    match ops.b {
        Input::Host(_) if ops.b_parts => DeviceOperand {
            buf: b_wide.as_ref().expect("provided").view(k * n),
            trans: false,
            ld: n,
        },
        Input::Host(s) => DeviceOperand {
            buf: uploaded_b(ops, b, mapped),
            trans: s.trans,
            ld: s.ld(k),
        },
        Input::Device(mat) => DeviceOperand {
            buf: mat.buf.as_view(),
            trans: mat.trans,
            ld: mat.ld,
        },
    }
}

/// A host B as it went up: its copy on the device `b`, or its parcel in the up ring where
/// `mapped`.
fn uploaded_b<'d, T: Element>(
    ops: &Operands<'_, T>,
    b: &'d Option<args::DevBuf>,
    mapped: Option<&'d Mapped<T>>,
) -> cudarc::driver::CudaView<'d, T> {
    match mapped {
        Some(m) => m.view(),
        None => b.as_ref().expect("provided").view(ops.b_up_len()),
    }
}

/// Page-locked host memory seen as a device slice of `T` (the address the device uses for it
/// is its host address), never freed through the slice: the staging that owns it frees it.
/// A mapped result is written through it, mapped inputs read.
struct Mapped<T>(Option<CudaSlice<T>>);

impl<T> Mapped<T> {
    /// # Safety
    /// `at` is page-locked host memory that the device addresses at `at`, holding `len`
    /// elements of `T`, alive and used by nothing else while the slice's work runs.
    unsafe fn new(stream: &Arc<CudaStream>, at: CUdeviceptr, len: usize) -> Mapped<T> {
        Mapped(Some(unsafe { stream.upgrade_device_ptr::<T>(at, len) }))
    }

    fn view(&self) -> cudarc::driver::CudaView<'_, T> {
        self.0.as_ref().expect("mapped until dropped").as_view()
    }

    fn view_mut(&mut self) -> cudarc::driver::CudaViewMut<'_, T> {
        self.0.as_mut().expect("mapped until dropped").as_view_mut()
    }
}

impl<T> Drop for Mapped<T> {
    fn drop(&mut self) {
        if let Some(slice) = self.0.take() {
            // Forget the memory rather than free it: the staging ring owns it.
            slice.leak();
        }
    }
}

mod operands;
#[cfg(test)]
mod tests;

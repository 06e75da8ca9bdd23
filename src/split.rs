//! One host-to-host product split across several devices: A's rows (and C's) cut into one
//! panel per device, in proportion to each device's multiprocessors, and each panel computed
//! by that device's own pipeline, on its own thread with its own host crew; results land
//! straight in their rows of C.
//!
//! B, which every device reads whole, crosses the host once: when every pair of devices has a
//! peer link, each device uploads one slab of B's rows over its own link and copies the other
//! slabs from its peers, device to device. Without peer links (or with
//! [`DotOptions::peer_copies`] off), each device uploads all of B from the host.

use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{self, CUdeviceptr, CUresult};
use cudarc::driver::{result as driver, CudaSlice};
use ndarray::{s, ArrayView2, Axis};

use crate::device::context::{self, Gpu, Home};
use crate::element::Element;
use crate::error::GpuDotError;
use crate::host::crew;
use crate::layout::classify;
use crate::options::{Devices, DotOptions, DEFAULT_MIN_SPLIT_FLOPS};
use crate::pipeline::{self, DevMat, Done, Dst, Failure, Gemm, Src, Workspace};

/// Rows of a device's panel are a multiple of this (the kernels' largest tile height).
const ROW_GRANULE: usize = 128;

/// The ordinals a product of `flops` flops and `m` rows splits across, or `None` for one
/// device: the options must name more than one, and the product must be large enough.
pub(crate) fn split_devices(
    opts: &DotOptions,
    flops: u64,
    m: usize,
) -> Result<Option<Vec<usize>>, GpuDotError> {
    let Some(devices) = &opts.devices else {
        return Ok(None);
    };
    if flops < opts.min_split_flops.unwrap_or(DEFAULT_MIN_SPLIT_FLOPS) || m < 2 * ROW_GRANULE {
        return Ok(None);
    }
    let mut list = match devices {
        Devices::All => {
            let count = crate::device::libraries::device_count()
                .map_err(|reason| GpuDotError::NoDevice { reason })?;
            // Every usable device: one that cannot make a context is left out.
            (0..count).filter(|&o| context::gpu_on(o).is_ok()).collect()
        }
        Devices::List(list) => list.clone(),
    };
    let mut seen = std::collections::HashSet::new();
    list.retain(|o| seen.insert(*o));
    Ok((list.len() > 1).then_some(list))
}

/// The device a product runs on when it is not split: [`DotOptions::device`], else the one
/// [`DotOptions::devices`] names when it names one.
pub(crate) fn single_device(opts: &DotOptions) -> Option<usize> {
    opts.device.or(match &opts.devices {
        Some(Devices::List(list)) if list.len() == 1 => Some(list[0]),
        _ => None,
    })
}

/// Row bounds of each device's panel of an `m`-row product: shares in proportion to
/// `weights`, each a multiple of [`ROW_GRANULE`] rows but the last; a device whose share
/// rounds to nothing gets no panel (`(r, r)`).
pub(crate) fn row_bounds(m: usize, weights: &[usize]) -> Vec<(usize, usize)> {
    let total: usize = weights.iter().sum::<usize>().max(1);
    let mut bounds = Vec::with_capacity(weights.len());
    let (mut start, mut acc) = (0, 0);
    for (i, w) in weights.iter().enumerate() {
        acc += w;
        let end = if i + 1 == weights.len() {
            m
        } else {
            let ideal = (m as u128 * acc as u128 / total as u128) as usize;
            (ideal.div_ceil(ROW_GRANULE) * ROW_GRANULE).clamp(start, m)
        };
        bounds.push((start, end));
        start = end;
    }
    bounds
}

/// Computes `g` split across the devices `ordinals` (see the module docs). Every device's
/// context is made first, so that a device that cannot be used fails the product before any
/// work. A device's failure is [`GpuDotError::SplitFailed`] with its ordinal, and C counts as
/// touched when any device wrote its panel.
pub(crate) fn gemm_split<T: Element>(
    ordinals: &[usize],
    opts: &DotOptions,
    g: Gemm<'_, '_, '_, '_, T>,
) -> Result<(Done, Vec<usize>), Failure> {
    let gpus = contexts(ordinals)?;
    let (Src::Host(a), Src::Host(b)) = (g.a, g.b) else {
        unreachable!("only host operands are split")
    };
    let m = a.nrows();
    let weights: Vec<usize> = gpus
        .iter()
        .map(|g| g.info.multiprocessors.max(1) as usize)
        .collect();
    let bounds = row_bounds(m, &weights);
    let c_parts = cut_rows(g.c, &bounds);
    let (alpha, beta) = (g.alpha, g.beta);
    let shares = bounds.len();
    let fail = |i: usize, f: Failure| Failure {
        error: GpuDotError::SplitFailed {
            ordinal: ordinals[i],
            source: Box::new(f.error),
        },
        touched: f.touched,
    };
    // B on every device, through the peer links, when they are there.
    let shared_b = if opts.peer_copies && peer_links(&gpus) {
        Some(share_b(&gpus, ordinals, b)?)
    } else {
        None
    };
    let run = |i: usize, c: Dst<'_, T>| -> Result<Done, Failure> {
        let (r0, r1) = bounds[i];
        if r0 == r1 {
            return Ok(Done::nothing());
        }
        let mut c = c;
        let share_opts = DotOptions {
            device: Some(ordinals[i]),
            devices: None,
            ..opts.clone()
        };
        let a_i = Src::Host(a.slice_axis(Axis(0), (r0..r1).into()));
        let b_i = match &shared_b {
            Some(shared) => shared.src(i, &gpus[i]),
            None => Src::Host(b.view()),
        };
        crew::as_share(i, shares, || {
            pipeline::gemm(
                &gpus[i],
                &share_opts,
                Gemm {
                    alpha,
                    a: &a_i,
                    b: &b_i,
                    beta,
                    c: &mut c,
                },
            )
        })
        .map_err(|f| fail(i, f))
    };
    let results = each_device(ordinals, c_parts, run);
    // Every device's product has returned (and synchronised): B's workspaces go back to
    // their pools (a faulted device's is freed instead).
    if let Some(shared) = shared_b {
        shared.finish();
    }
    combine(ordinals, results)
}

/// Every device's context, made before any work, so that a device that cannot be used fails
/// the product with C untouched.
fn contexts(ordinals: &[usize]) -> Result<Vec<Arc<Gpu>>, Failure> {
    let untouched = |ordinal, error| Failure {
        error: GpuDotError::SplitFailed {
            ordinal,
            source: Box::new(error),
        },
        touched: false,
    };
    let mut gpus: Vec<Arc<Gpu>> = Vec::with_capacity(ordinals.len());
    for &o in ordinals {
        gpus.push(context::gpu_on(o).map_err(|e| untouched(o, e))?);
    }
    Ok(gpus)
}

/// C cut into the devices' rows (`bounds`), front to back.
fn cut_rows<'c, T>(c: &'c mut Dst<'_, T>, bounds: &[(usize, usize)]) -> Vec<Dst<'c, T>> {
    let mut c_parts: Vec<Dst<'_, T>> = Vec::with_capacity(bounds.len());
    let mut rest: Dst<'_, T> = match c {
        Dst::Host(v) => Dst::Host(v.view_mut()),
        Dst::Fresh(v) => Dst::Fresh(v.view_mut()),
        Dst::Device { .. } => unreachable!("only host outputs are split"),
    };
    for &(r0, r1) in bounds {
        let (head, tail) = match rest {
            Dst::Host(v) => {
                let (h, t) = v.split_at(Axis(0), r1 - r0);
                (Dst::Host(h), Dst::Host(t))
            }
            Dst::Fresh(v) => {
                let (h, t) = v.split_at(Axis(0), r1 - r0);
                (Dst::Fresh(h), Dst::Fresh(t))
            }
            Dst::Device { .. } => unreachable!("only host outputs are split"),
        };
        c_parts.push(head);
        rest = tail;
    }
    c_parts
}

/// The devices' results as one: the first failure (C counting as touched when any device
/// wrote its rows), else the panels of the devices that ran and their ordinals.
fn combine(
    ordinals: &[usize],
    results: Vec<Result<Done, Failure>>,
) -> Result<(Done, Vec<usize>), Failure> {
    let touched = results
        .iter()
        .any(|r| r.as_ref().map_or_else(|f| f.touched, |d| d.ran.is_some()));
    let mut done: Option<Done> = None;
    let mut used = Vec::new();
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(d) if d.ran.is_some() || d.panels > 0 => {
                used.push(ordinals[i]);
                done = Some(match done {
                    None => d,
                    Some(mut acc) => {
                        acc.panels += d.panels;
                        acc.host = acc.host.and(d.host);
                        acc
                    }
                });
            }
            Ok(_) => {}
            Err(mut f) => {
                f.touched = touched;
                return Err(f);
            }
        }
    }
    Ok((done.unwrap_or_else(Done::nothing), used))
}

/// Runs `f(i, input_i)` for every share at once: share 0 on the calling thread, the others
/// on threads of their own (named after their device). A thread that cannot start is that
/// device's failure.
fn each_device<I: Send, R: Send>(
    ordinals: &[usize],
    inputs: Vec<I>,
    f: impl Fn(usize, I) -> Result<R, Failure> + Sync,
) -> Vec<Result<R, Failure>> {
    std::thread::scope(|s| {
        let mut parts = inputs.into_iter().enumerate();
        let (_, first) = parts.next().expect("at least two shares");
        let f = &f;
        let handles: Vec<_> = parts
            .map(|(i, input)| {
                std::thread::Builder::new()
                    .name(format!("gpu-dot-device-{}", ordinals[i]))
                    .spawn_scoped(s, move || f(i, input))
            })
            .collect();
        let mut results = vec![f(0, first)];
        for (i, h) in handles.into_iter().enumerate() {
            results.push(match h {
                Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                Err(e) => Err(Failure {
                    error: GpuDotError::SplitFailed {
                        ordinal: ordinals[i + 1],
                        source: Box::new(GpuDotError::NoDevice {
                            reason: format!("could not start a host thread for the device: {e}"),
                        }),
                    },
                    touched: false,
                }),
            });
        }
        results
    })
}

/// Whether every device of `gpus` can reach every other over a peer link; peer access is
/// enabled both ways for each pair of contexts, once.
fn peer_links(gpus: &[Arc<Gpu>]) -> bool {
    static ENABLED: Mutex<Vec<(Home, Home)>> = Mutex::new(Vec::new());
    for from in gpus {
        for to in gpus {
            let pair = (from.home(), to.home());
            if pair.0.ordinal == pair.1.ordinal
                || ENABLED
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .contains(&pair)
            {
                continue;
            }
            let mut can = 0;
            // SAFETY: a query of two device handles from live contexts, into a local integer.
            let asked = unsafe {
                sys::cuDeviceCanAccessPeer(&mut can, from.ctx.cu_device(), to.ctx.cu_device())
            };
            if asked != CUresult::CUDA_SUCCESS || can == 0 || from.ctx.bind_to_thread().is_err() {
                return false;
            }
            // SAFETY: `from`'s context is current on this thread (bound above) and `to`'s
            // context is alive (the `Gpu` holds it); flags must be 0.
            let enabled = unsafe { sys::cuCtxEnablePeerAccess(to.ctx.cu_ctx(), 0) };
            match enabled {
                CUresult::CUDA_SUCCESS | CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {
                    ENABLED.lock().unwrap_or_else(|p| p.into_inner()).push(pair)
                }
                _ => return false,
            }
        }
    }
    true
}

/// One device's B of a split product: a typed view of its workspace's peer buffer
/// ([`Workspace::peer_bytes`]), and the workspace, given back when the product is done.
struct PeerB<T> {
    /// A slice over the workspace's memory that never frees it (its drop leaks it).
    slice: Option<CudaSlice<T>>,
    ws: Option<Workspace>,
    gpu: Arc<Gpu>,
}

impl<T> PeerB<T> {
    fn slice(&self) -> &CudaSlice<T> {
        self.slice.as_ref().expect("present until drop")
    }

    /// Gives the workspace back to its device's pool.
    fn finish(mut self) {
        if let Some(slice) = self.slice.take() {
            slice.leak();
        }
        if let Some(ws) = self.ws.take() {
            pipeline::give_back(&self.gpu, ws);
        }
    }
}

impl<T> Drop for PeerB<T> {
    fn drop(&mut self) {
        // The memory belongs to the workspace: the slice must not free it. The workspace
        // itself (after a failure) is dropped, not pooled.
        if let Some(slice) = self.slice.take() {
            slice.leak();
        }
    }
}

/// B on every device of a split product: `bufs[i]` on device `i`, B as packed (`trans`: its
/// transpose, row-major, the way the pipeline packs such a view).
struct SharedB<T> {
    bufs: Vec<PeerB<T>>,
    trans: bool,
    rows: usize,
    cols: usize,
}

impl<T: Element> SharedB<T> {
    /// Gives every device's workspace back.
    fn finish(self) {
        self.bufs.into_iter().for_each(PeerB::finish);
    }

    /// Share `i`'s B as an operand of its product.
    fn src<'s>(&'s self, i: usize, gpu: &Gpu) -> Src<'s, T> {
        Src::Device {
            mat: DevMat {
                buf: self.bufs[i].slice(),
                trans: self.trans,
                ld: if self.trans { self.rows } else { self.cols },
            },
            rows: self.rows,
            cols: self.cols,
            home: gpu.home(),
        }
    }
}

/// Puts B on every device: device `i` uploads slab `i` of B's packed rows into its own
/// buffer, then copies every other slab from the device that uploaded it. A failure is the
/// failing device's [`GpuDotError::SplitFailed`]; C is not touched.
fn share_b<T: Element>(
    gpus: &[Arc<Gpu>],
    ordinals: &[usize],
    b: &ArrayView2<'_, T>,
) -> Result<SharedB<T>, Failure> {
    let trans = classify(b).1;
    let packed: ArrayView2<'_, T> = if trans { b.t() } else { b.view() };
    let (rows, cols) = (b.nrows(), b.ncols());
    let (prows, pcols) = packed.dim();
    let n = gpus.len();
    let slabs: Vec<(usize, usize)> = (0..n)
        .map(|i| (i * prows / n, (i + 1) * prows / n))
        .collect();
    let failed = |i: usize, error: GpuDotError| Failure {
        error: GpuDotError::SplitFailed {
            ordinal: ordinals[i],
            source: Box::new(error),
        },
        touched: false,
    };
    let width = T::DTYPE.size();
    let start = std::time::Instant::now();
    let first = |results: Vec<Result<PeerB<T>, Failure>>| {
        results.into_iter().collect::<Result<Vec<_>, Failure>>()
    };
    // Each device's own slab, over its own link, with its share of the host helpers.
    let bufs = first(each_device(ordinals, vec![(); n], |i, ()| {
        crew::as_share(i, n, || {
            let (r0, r1) = slabs[i];
            let gpu = &gpus[i];
            let mut ws = pipeline::take(gpu)?;
            let base = ws.peer_bytes(gpu, prows * pcols * width)?;
            let slab = packed.slice(s![r0..r1, ..]);
            let at = base + (r0 * pcols * width) as CUdeviceptr;
            pipeline::upload_to(gpu, &mut ws, slab, at)?;
            // SAFETY: `base` holds `prows * pcols` elements of `T` (at least that many bytes,
            // provided above) in this device's context; they are written (this slab, then the
            // peers' slabs) before any kernel reads them. `PeerB` never frees the slice: the
            // workspace owns the memory and outlives the slice.
            let slice = unsafe {
                ws.lanes
                    .compute
                    .upgrade_device_ptr::<T>(base, prows * pcols)
            };
            Ok(PeerB {
                slice: Some(slice),
                ws: Some(ws),
                gpu: gpu.clone(),
            })
        })
        .map_err(|e| failed(i, e))
    }))?;
    let uploaded = start.elapsed();
    let ptrs: Vec<CUdeviceptr> = bufs
        .iter()
        .map(|b| {
            b.ws.as_ref()
                .and_then(|ws| ws.dev.peer.as_ref())
                .map_or(0, |p| p.ptr())
        })
        .collect();
    // Then the others' slabs, device to device; every buffer is complete (the uploads have
    // returned), and each device writes only its own.
    let copied = each_device(ordinals, vec![(); n], |i, ()| {
        let pull = || -> Result<(), GpuDotError> {
            gpus[i]
                .ctx
                .bind_to_thread()
                .map_err(GpuDotError::at("making a device current"))?;
            let stream = gpus[i].stream()?;
            for (j, &(r0, r1)) in slabs.iter().enumerate() {
                let (offset, bytes) = (r0 * pcols * width, (r1 - r0) * pcols * width);
                if j == i || bytes == 0 {
                    continue;
                }
                // SAFETY: both buffers hold `prows * pcols` elements and outlive the copy
                // (`bufs` is borrowed until after the synchronize below); the range lies
                // inside both; device `j`'s slab is complete and no one writes it, and only
                // this thread writes device `i`'s buffer. Both contexts are alive.
                unsafe {
                    driver::memcpy_peer_async(
                        gpus[i].ctx.cu_ctx(),
                        ptrs[i] + offset as CUdeviceptr,
                        gpus[j].ctx.cu_ctx(),
                        ptrs[j] + offset as CUdeviceptr,
                        bytes,
                        stream.cu_stream(),
                    )
                }
                .map_err(|e| GpuDotError::driver("copying B between devices", bytes, e))?;
            }
            stream
                .synchronize()
                .map_err(GpuDotError::at("waiting for B from the other devices"))
        };
        pull().map_err(|e| failed(i, e))
    });
    for r in copied {
        r?;
    }
    if *pipeline::TRACE {
        eprintln!(
            "gpu-dot split: B ({} MiB) on {n} devices: slabs uploaded by {:.2} ms, peer copies done by {:.2} ms",
            (prows * pcols * width) >> 20,
            uploaded.as_secs_f64() * 1e3,
            start.elapsed().as_secs_f64() * 1e3
        );
    }
    Ok(SharedB {
        bufs,
        trans,
        rows,
        cols,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_shared_by_weight_in_whole_tiles() {
        assert_eq!(row_bounds(1000, &[132, 132]), vec![(0, 512), (512, 1000)]);
        assert_eq!(
            row_bounds(16384, &[132, 132]),
            vec![(0, 8192), (8192, 16384)]
        );
        assert_eq!(
            row_bounds(4096, &[132, 132, 132, 132]),
            vec![(0, 1024), (1024, 2048), (2048, 3072), (3072, 4096)]
        );
        // A device with twice the multiprocessors takes about twice the rows.
        assert_eq!(row_bounds(3072, &[66, 132]), vec![(0, 1024), (1024, 3072)]);
        // Every row once, in order, whatever the weights.
        for m in [256, 257, 300, 1023, 5000] {
            for w in [vec![1, 1], vec![1, 1000], vec![1000, 1], vec![3, 5, 7]] {
                let b = row_bounds(m, &w);
                assert_eq!(b.first().unwrap().0, 0);
                assert_eq!(b.last().unwrap().1, m);
                assert!(b.windows(2).all(|p| p[0].1 == p[1].0 && p[0].0 <= p[0].1));
            }
        }
    }

    #[test]
    fn one_named_device_is_not_a_split() {
        let opts = DotOptions::builtin().devices(Devices::List(vec![1]));
        assert_eq!(single_device(&opts), Some(1));
        assert_eq!(split_devices(&opts, u64::MAX, 1 << 20).unwrap(), None);
        let two = DotOptions::builtin().devices(Devices::List(vec![0, 1, 0]));
        assert_eq!(
            split_devices(&two, u64::MAX, 1 << 20).unwrap(),
            Some(vec![0, 1])
        );
        // Too small, or too few rows: one device.
        assert_eq!(split_devices(&two, 1000, 1 << 20).unwrap(), None);
        assert_eq!(split_devices(&two, u64::MAX, 200).unwrap(), None);
        assert_eq!(single_device(&two), None);
    }
}

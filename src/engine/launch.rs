//! The GEMM launchers: the one-output-per-thread kernels, the tiled GEMMs (split-K
//! included), the warpgroup GEMM with its reduction, the GEMVs, and the Ozaki products, for
//! every element type.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, CudaView, CudaViewMut, LaunchConfig};

use crate::device::context::Gpu;
use crate::device::modules::Readiness;
use crate::element::{Dtype, Element};
use crate::engine::args::{
    check_dims, grid_stride, grid_x, scratch, DevBuf, GemmArgs, Scratch, MAX_GRID_Y,
};
use crate::engine::enqueue::Launch;
use crate::engine::family::Family;
use crate::engine::ozaki::{cost, recent, GuardReport, OzError, Recalled, SharedB};
use crate::engine::plan::{Plan, MAX_SPLITS};
use crate::engine::table::{Aux, Gemv, SimpleRow, TileRow, WgRow};
use crate::error::GpuDotError;
use crate::options::{Kernel, Precision};

/// Enqueues `C (m × n, row-major, leading dimension ldc) = op(A) · op(B)` on `stream` with a
/// one-output-per-thread kernel (`kernel` concrete and not register-blocked).
pub(crate) fn launch_simple<T: Element>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    kernel: Kernel,
    args: GemmArgs<'_, '_, T>,
    c: &mut CudaViewMut<'_, T>,
) -> Result<(), GpuDotError> {
    let row = SimpleRow::of(T::DTYPE, kernel).expect("a one-output-per-thread kernel");
    let func = gpu.function(row.family, &row.entry(args.trans()))?;
    let (m, _, n) = args.dims();
    let (bx, by) = row.block;
    let cfg = LaunchConfig {
        grid_dim: (
            n.div_ceil(bx as usize) as u32,
            m.div_ceil(by as usize).min(MAX_GRID_Y) as u32,
            1,
        ),
        block_dim: (bx, by, 1),
        shared_mem_bytes: 0,
    };
    let mut builder = Launch::on(gpu, stream, &func);
    args.push(&mut builder, c);
    // SAFETY: `GemmArgs` pushes the arguments of `GEMM_PARAMS(T)` in order and type, with T
    // the element type the row was looked up for; the entry's layout suffix matches the
    // operands' `trans`; the buffers hold every element the kernel indexes (checked when the
    // arguments were made), and the kernels guard every load and store by M, N and K; the
    // grid covers all N columns in x, and the kernels loop over the rows of tiles past
    // gridDim.y; the block shape is the table's (≤ 1024 threads, matching the kernel's
    // `__launch_bounds__`); static shared memory only.
    unsafe { builder.launch(cfg) }
        .map(drop)
        .map_err(GpuDotError::at("launching a kernel"))
}

/// What a launch ran in: its precision, and what the guard found where the product was
/// guarded (the default precision).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Launched {
    pub(crate) precision: Precision,
    pub(crate) guard: Option<GuardReport>,
    /// The default chose to emulate and the emulation could not run here (the device, k, the
    /// counts of moduli, room for its workspace or NVRTC): the native product ran instead.
    pub(crate) unavailable: bool,
    /// A complex product read as reals that was emulated in the Karatsuba form.
    pub(crate) karatsuba: bool,
    /// The plan that ran, where it is not the one asked for: native's, taken by a default
    /// product run natively ([`SharedB`]'s `native_plan`).
    pub(crate) instead: Option<Plan>,
}

/// Enqueues `C = op(A) · op(B)` by `plan` on `stream`, and returns what it ran in (the tile row's
/// precision: native where the device lacks the asked-for kernels, for the GEMVs, and where an
/// Ozaki product cannot run or its guard refuses it). `bufs` holds the split-K (and Ozaki)
/// workspace and the Karatsuba form's residues, grown as needed. `shared`, for a row panel of a
/// product whose panels share op(B), carries what an Ozaki panel left of op(B) in the workspace to
/// the next ([`SharedB`]); a native launch drops it.
///
/// The default precision ([`Precision::Auto`]) runs a tiled plan by guarded Ozaki where
/// [`emulation_pays`] for the device and shape, or for a panel where
/// [`emulation_pays_in_panels`], else natively; natively too, without the guard, where the
/// guard refused the shape's last products ([`recent`]).
pub(crate) fn launch_plan<T: Element>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    plan: Plan,
    args: GemmArgs<'_, '_, T>,
    c: &mut CudaViewMut<'_, T>,
    bufs: &mut Scratch,
    mut shared: Option<&mut SharedB>,
) -> Result<Launched, GpuDotError> {
    let (mut guard, mut unavailable) = (None, false);
    if let Plan::Tile { .. } = plan {
        let (m, k, n) = args.dims();
        // A row panel of a product whose panels share op(B) emulates where the whole product
        // would.
        let (whole, rows) = shared
            .as_ref()
            .map_or((m, m), |s| (s.rows.max(m), s.panel_rows.max(m)));
        let shape = recent::Shape {
            device: gpu.info.ordinal,
            dtype: T::DTYPE,
            dims: (whole, k, n),
        };
        // Whether this launch tells the memory of refusals what the guard found: a product's
        // only launch, or the first of its panels to weigh emulation (the others follow its
        // decision).
        let mut remembers = false;
        let emulate = match args.precision.for_dtype(T::DTYPE) {
            Precision::Ozaki { moduli } => Some((moduli, false)),
            Precision::Auto
                if emulation_pays_in_panels(T::DTYPE, gpu.kernel_sm(), (whole, k, n), rows)
                    && ozaki_ready(gpu) =>
            {
                let decided = shared.as_ref().and_then(|s| s.recalled);
                let recalled = decided.unwrap_or_else(|| {
                    remembers = true;
                    match recent::recent().and_then(|mut r| r.skip(shape)) {
                        Some(report) => Recalled::Skip(report),
                        None => Recalled::Weigh,
                    }
                });
                if let Some(s) = shared.as_deref_mut() {
                    s.recalled = Some(recalled);
                }
                // The guard refused this shape's last products: natively, without it.
                match recalled {
                    Recalled::Skip(report) => {
                        guard = Some(report);
                        None
                    }
                    Recalled::Weigh => Some((0, true)),
                }
            }
            _ => None,
        };
        if let Some((moduli, guarded)) = emulate {
            let shared = shared.as_deref_mut();
            match crate::engine::ozaki::launch(gpu, stream, moduli, guarded, args, c, bufs, shared)
            {
                // Not here (device, k, workspace or NVRTC): the native kernels below run it,
                // and the route report names the precision that could not run (the default's
                // included).
                Err(OzError::Unavailable) => unavailable = guarded,
                // The guard refused it: natively, and the report says what the guard found.
                Err(OzError::Guarded(report)) => {
                    if remembers {
                        if let Some(mut r) = recent::recent() {
                            r.refused(shape, report);
                        }
                    }
                    guard = Some(report)
                }
                Err(OzError::Gpu(e)) => return Err(e),
                Ok(ran) => {
                    if guarded && remembers {
                        if let Some(mut r) = recent::recent() {
                            r.passed(shape);
                        }
                    }
                    return Ok(Launched {
                        precision: ran.precision,
                        guard: ran.guard,
                        unavailable: false,
                        karatsuba: ran.karatsuba,
                        instead: None,
                    });
                }
            }
        }
    }
    // A default product run natively takes the plan native products of its shape settled on,
    // where there is one, so that it is native's product bit for bit (the tuner weighs the two
    // precisions' plans apart).
    let instead = match (args.precision.for_dtype(T::DTYPE), &shared) {
        (Precision::Auto, Some(s)) => match s.native_plan {
            Some(native @ Plan::Tile { .. }) if matches!(plan, Plan::Tile { .. }) => {
                Some(native).filter(|&native| native != plan)
            }
            _ => None,
        },
        _ => None,
    };
    // The native kernels may use the workspace too: nothing of op(B) stays kept in it.
    if let Some(s) = shared {
        s.forget();
    }
    let ran = instead.unwrap_or(plan);
    launch_native(gpu, stream, ran, args, c, &mut bufs.ws).map(|precision| Launched {
        precision,
        guard,
        unavailable,
        karatsuba: false,
        instead,
    })
}

/// Where the default precision emulates, on devices with INT8 tensor cores (compute
/// capability 8.0 on). On a Hopper (9.0, which runs the warpgroup INT8 GEMM the model was
/// fitted to), where the model of [`cost`] finds the guarded product (its guard counted in)
/// [`cost::MARGIN`] times faster than the native one. On the others, which run the mma.sync
/// INT8 GEMM and have no fitted model, from sides and volumes measured on an H100 before the
/// model ([`EMULATE_F32`], [`EMULATE_F64`]).
pub(crate) fn emulation_pays(dtype: Dtype, sm: u32, (m, k, n): (usize, usize, usize)) -> bool {
    if sm < 80 {
        return false;
    }
    if crate::device::overrides::emulating_every_size() {
        return true;
    }
    if sm == 90 {
        return cost::emulation_pays_on_hopper(dtype, (m, k, n));
    }
    // The smallest side of a product the emulation wins on, and its smallest volume.
    let (side, volume) = match dtype {
        Dtype::F64 => EMULATE_F64,
        Dtype::F32 => EMULATE_F32,
    };
    m.min(n).min(k) >= side && (m as f64) * (k as f64) * (n as f64) >= volume
}

/// Rows a panel needs for its product's emulation to pay as the whole product's does, op(B)'s
/// passes being done once for all panels ([`SharedB`]): what is left per panel is op(A)'s
/// share, a few launches and the guard's two waits for its verdicts. The sides from which a
/// product alone emulates: on an H100, host to host, `f64` panels of 1024 rows (15 moduli)
/// lost to native DGEMM at 4096³ (9.0–9.6 ms against 6.8–7.0), and `f32` ones, where the
/// tuner chose four panels of 1024 rows at 4096³, wrote into an existing array as fast as
/// two panels but took 6.7–8.1 ms against 5.6–6.1 for a fresh result.
pub(crate) fn min_emulated_panel_rows(dtype: Dtype) -> usize {
    match dtype {
        Dtype::F32 => EMULATE_F32.0,
        Dtype::F64 => EMULATE_F64.0,
    }
}

/// [`emulation_pays`] for a product of `m` rows run in panels of `rows` rows sharing op(B):
/// where the panels have [`min_emulated_panel_rows`] (any, when the tests weigh emulation at
/// every size) and the whole product's emulation pays, or a panel's alone does.
pub(crate) fn emulation_pays_in_panels(
    dtype: Dtype,
    sm: u32,
    (m, k, n): (usize, usize, usize),
    rows: usize,
) -> bool {
    let tall = rows >= min_emulated_panel_rows(dtype).min(m)
        || crate::device::overrides::emulating_every_size();
    tall && (emulation_pays(dtype, sm, (m, k, n)) || emulation_pays(dtype, sm, (rows, k, n)))
}

/// Whether the Ozaki kernels are loaded, loading them now where that needs no NVRTC (the
/// shipped CUBINs, the disk cache); else their compilation starts on a background thread
/// and the default precision runs natively meanwhile.
fn ozaki_ready(gpu: &Gpu) -> bool {
    matches!(gpu.prepare(Family::Ozaki), Ok(Readiness::Ready))
}

/// `f64` products emulate from sides of this many and a volume of `m·k·n` this large (4096³):
/// on an H100 (2026-11-26, ladder with `--emulate-every-size`) the guarded product ran at
/// 0.81× cuBLAS DGEMM at 3072³ against native's 0.98×; at 4096³ at 1.05–1.09× (medians of
/// rounds, over 22 runs) against native's 0.97–1.05× (1.116–1.125× since the guard reads
/// op(A) once, 2093910), and on inputs the guard refuses (scales paired along k) at 0.93–0.94×
/// native's speed since the guard refuses early; ahead from 6144³ (1.31× against 1.00×). At
/// 3072³ the unguarded product ran at 1.07× against native's 0.98×, which the guard's cost
/// (7–8% at 4096³) would take.
const EMULATE_F64: (usize, f64) = (4096, 4096.0 * 4096.0 * 4096.0);
/// `f32` products, from sides of this many and a volume this large (2560³): on the same H100
/// the guarded product ran at 0.79× cuBLAS SGEMM at 2048³ against native's 0.91×, and ahead
/// from 3072³ (1.54× against 1.05×).
const EMULATE_F32: (usize, f64) = (2048, 2560.0 * 2560.0 * 2560.0);

/// [`launch_plan`] in the native precision (or the TF32 ones asked for).
fn launch_native<T: Element>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    plan: Plan,
    args: GemmArgs<'_, '_, T>,
    c: &mut CudaViewMut<'_, T>,
    split_ws: &mut Option<DevBuf>,
) -> Result<Precision, GpuDotError> {
    match plan {
        Plan::GemvRow | Plan::GemvCol => launch_gemv(gpu, stream, plan, args, c),
        Plan::Tile { config, splits } => {
            let dtype = T::DTYPE;
            let precision = args.precision.for_dtype(dtype);
            if let Some(wg) = WgRow::of(dtype, precision, config, gpu.kernel_sm()) {
                match launch_wg(gpu, stream, wg, splits, args, c, split_ws) {
                    // Without room for the panels or the split partials (the mma.sync
                    // kernels below need no panels and try their own workspace), or where
                    // NVRTC cannot build sm_90a code, the mma.sync kernels run.
                    Err(WgError::Unavailable) => {}
                    Err(WgError::Gpu(e)) => return Err(e),
                    Ok(()) => return Ok(wg.precision),
                }
            }
            let row = TileRow::of(dtype, precision, config, gpu.kernel_sm());
            if splits <= 1 {
                launch_tiles(gpu, stream, row, args, c)
            } else {
                launch_split_k(gpu, stream, row, splits, args, c, split_ws)
            }
        }
    }
}

/// A GEMV plan: one row of A (`GemvRow`, m = 1) or one column of B (`GemvCol`, n = 1).
fn launch_gemv<T: Element>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    plan: Plan,
    args: GemmArgs<'_, '_, T>,
    c: &mut CudaViewMut<'_, T>,
) -> Result<Precision, GpuDotError> {
    let (m, _, n) = args.dims();
    let trans = args.trans();
    let dtype = T::DTYPE;
    let family = Family::fast(dtype);
    let (gemv, outputs) = match plan {
        Plan::GemvRow => (Gemv::Row, n),
        _ => (Gemv::Col, m),
    };
    assert!(
        (plan == Plan::GemvRow && m == 1) || (plan == Plan::GemvCol && n == 1),
        "a GEMV plan for a product with more than one row and column"
    );
    let func = gpu.function(family, &gemv.entry(dtype, table_ll(trans)))?;
    let cfg = LaunchConfig {
        grid_dim: (grid_x(gemv.blocks(outputs, trans))?, 1, 1),
        block_dim: (Gemv::THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut builder = Launch::on(gpu, stream, &func);
    args.push(&mut builder, c);
    // SAFETY: arguments of `GEMM_PARAMS(T)` in order and type; the entry's layout
    // suffix matches the operands; m == 1 (row GEMV) or n == 1 (column GEMV), asserted
    // above; the grid is the table's rule for the entry (one block per 16 or 8
    // outputs, 256 threads); the buffers cover op(A), op(B) and C (checked when the
    // arguments were made), and the kernels guard every access by M, N and K.
    unsafe { builder.launch(cfg) }
        .map(|_| Precision::Native)
        .map_err(GpuDotError::at("launching a GEMV kernel"))
}

/// An mma.sync tile row's product in one pass over K, straight into C (the split-K entry with
/// one split where K is shorter than the row's loop takes).
fn launch_tiles<T: Element>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    row: &TileRow,
    args: GemmArgs<'_, '_, T>,
    c: &mut CudaViewMut<'_, T>,
) -> Result<Precision, GpuDotError> {
    let (m, k, n) = args.dims();
    let trans = args.trans();
    let aligned = args.a.aligned() && args.b.aligned();
    let grid_tiles = grid_x(row.tiles(m, n))?;
    let block = (row.threads, 1, 1);
    if k < row.short_k {
        // The split-K entry keeps the loop for short K: one split, straight into C.
        let func = gpu.function(row.family, &row.entry(trans, aligned, true))?;
        let cfg = LaunchConfig {
            grid_dim: (grid_tiles, 1, 1),
            block_dim: block,
            shared_mem_bytes: row.smem,
        };
        let kps = k.max(1).next_multiple_of(row.bk) as i32;
        let mut builder = Launch::on(gpu, stream, &func);
        args.push(&mut builder, c);
        builder.arg(&kps);
        // SAFETY: as for the unsplit entry below, plus the trailing `int
        // k_per_split`, a positive multiple of the row's K tile not below K; with
        // gridDim.z = 1 the one split covers all of K and writes its product to C
        // itself (z = 0) at the arguments' ldc.
        unsafe { builder.launch(cfg) }
            .map(|_| row.precision)
            .map_err(GpuDotError::at("launching a GEMM kernel"))
    } else {
        let func = gpu.function(row.family, &row.entry(trans, aligned, false))?;
        let cfg = LaunchConfig {
            grid_dim: (grid_tiles, 1, 1),
            block_dim: block,
            shared_mem_bytes: row.smem,
        };
        let mut builder = Launch::on(gpu, stream, &func);
        args.push(&mut builder, c);
        // SAFETY: arguments of `GEMM_PARAMS(T)` in order and type; the entry's layout
        // suffix matches the operands, and the 16-byte-load entry is chosen only when
        // both operands are 16-byte aligned with leading dimensions that keep them so
        // (`aligned`); the grid has one block per output tile (the kernel maps
        // blockIdx.x to a tile); block size and dynamic shared memory are the table's
        // (checked against the source), and the function's shared-memory limit was
        // raised to it when the module was loaded; the buffers cover op(A), op(B) and
        // C, and edge tiles are guarded in the kernel.
        unsafe { builder.launch(cfg) }
            .map(|_| row.precision)
            .map_err(GpuDotError::at("launching a GEMM kernel"))
    }
}

/// An mma.sync tile row's product in `splits` parts of K: partial products into a workspace,
/// then their sum into C.
fn launch_split_k<T: Element>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    row: &TileRow,
    splits: u32,
    args: GemmArgs<'_, '_, T>,
    c: &mut CudaViewMut<'_, T>,
    split_ws: &mut Option<DevBuf>,
) -> Result<Precision, GpuDotError> {
    let (m, k, n) = args.dims();
    let trans = args.trans();
    let dtype = T::DTYPE;
    let family = Family::fast(dtype);
    let aligned = args.a.aligned() && args.b.aligned();
    let grid_tiles = grid_x(row.tiles(m, n))?;
    let block = (row.threads, 1, 1);
    let k_per_split = k.div_ceil(splits as usize).next_multiple_of(row.bk);
    let parts = k.div_ceil(k_per_split);
    assert!(parts <= MAX_SPLITS, "split count within bounds");
    let len = parts * m * n;
    let work = scratch(
        stream,
        split_ws,
        len * std::mem::size_of::<T>(),
        &gpu.high_water.device,
    )?;
    let work = work.view_mut::<T>(len);
    let func = gpu.function(row.family, &row.entry(trans, aligned, true))?;
    let cfg = LaunchConfig {
        grid_dim: (grid_tiles, 1, parts as u32),
        block_dim: block,
        shared_mem_bytes: row.smem,
    };
    // The partial products go to the workspace with leading dimension n.
    let partial = args.with_ldc(n);
    let kps = k_per_split as i32;
    let mut builder = Launch::on(gpu, stream, &func);
    partial.push(&mut builder, &work);
    builder.arg(&kps);
    // SAFETY: as for the unsplit entry, plus the trailing `int k_per_split`, a positive
    // multiple of the row's K tile; gridDim.z = ceil(K / k_per_split) ≤ MAX_SPLITS, so
    // every split has a K range and writes its whole m × n partial product to the
    // workspace at z·m·n with leading dimension n; `work` holds parts·m·n elements.
    unsafe { builder.launch(cfg) }.map_err(GpuDotError::at("launching a split-K kernel"))?;

    let reduce = gpu.function(family, Aux::SplitKReduce.entry(dtype))?;
    let cfg = grid_stride(m * n);
    let (mi, ni, parts_i, ldc) = (m as i32, n as i32, parts as i32, args.ldc);
    let work = work.as_view();
    let mut builder = Launch::on(gpu, stream, &reduce);
    builder
        .arg(&mi)
        .arg(&ni)
        .arg(&parts_i)
        .view(&work)
        .view(c)
        .arg(&ldc);
    // SAFETY: arguments match `{s,d}gemm_splitk_reduce(int M, int N, int splits, const
    // T* W, T* C, long long ldc)`; W holds splits·m·n elements written by the launch
    // before it on the same stream; C covers m × n at ldc (checked when the arguments
    // were made); the kernel loops over all m·n outputs whatever the grid.
    unsafe { builder.launch(cfg) }
        .map(|_| row.precision)
        .map_err(GpuDotError::at("launching the split-K reduction"))
}

/// Why [`launch_wg`] launched nothing.
enum WgError {
    /// The panels' workspace could not be allocated, or the family could not be compiled
    /// (nothing was enqueued).
    Unavailable,
    Gpu(GpuDotError),
}

/// Enqueues `C = op(A) · op(B)` (f32) on a warpgroup SGEMM in `splits` K ranges: op(A) and
/// op(B)ᵀ packed into K-major panels in the workspace `ws` (grown as needed), then the
/// product from the panels, then (split) the reduction of the partial products, which also
/// live in `ws`. A direct row goes to [`launch_direct`] instead.
fn launch_wg<T: Element>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    wg: &WgRow,
    splits: u32,
    args: GemmArgs<'_, '_, T>,
    c: &mut CudaViewMut<'_, T>,
    ws: &mut Option<DevBuf>,
) -> Result<(), WgError> {
    assert_eq!(T::DTYPE, Dtype::F32, "the warpgroup kernels multiply f32");
    if wg.direct {
        return launch_direct(gpu, stream, wg, splits, args, c, ws);
    }
    let (m, k, n) = args.dims();
    let (panels, (mp, np, kp)) = wg.panels(m, k, n);
    let k_tiles = kp / wg.bk;
    let per_split = k_tiles.div_ceil(splits.max(1) as usize);
    let parts = k_tiles.div_ceil(per_split);
    assert!(parts <= MAX_SPLITS, "split count within bounds");
    let partials = if parts > 1 { parts * m * n } else { 0 };
    check_dims(mp, kp, np).map_err(WgError::Gpu)?;
    let function = |entry: &str| wg_function(gpu, entry);
    // Both entries first, so that a family NVRTC cannot build falls back before any launch.
    let (pack, func) = (function(WgRow::PACK)?, function(wg.stem)?);
    let len = panels + partials;
    let work = scratch(
        stream,
        ws,
        len * std::mem::size_of::<T>(),
        &gpu.high_water.device,
    )
    .map_err(|_| WgError::Unavailable)?;
    let fail = |what: &'static str| move |e| WgError::Gpu(GpuDotError::at(what)(e));
    let mut work = work.view_mut::<T>(len);
    let (mut pa, mut rest) = work.split_at_mut(panels / (mp + np) * mp);
    let (mut pb, part) = rest.split_at_mut(panels / (mp + np) * np);

    // Panels: op(A) (m × k) and op(B)ᵀ (n × k); element (r, k) at X[r·sr + k·sk].
    let x3 = (wg.precision == Precision::Tf32x3) as i32;
    let (a_strides, b_strides) = args.row_strides();
    for (rows, rows_p, x, (sr, sk), p) in [
        (m, mp, &args.a.buf, a_strides, &mut pa),
        (n, np, &args.b.buf, b_strides, &mut pb),
    ] {
        let cfg = LaunchConfig {
            grid_dim: ((kp / 32) as u32, (rows_p / 32).min(MAX_GRID_Y) as u32, 1),
            block_dim: (32, 8, 1),
            shared_mem_bytes: 0,
        };
        let (r, kk, rp, kpi) = (rows as i32, k as i32, rows_p as i32, kp as i32);
        let mut builder = Launch::on(gpu, stream, &pack);
        builder
            .arg(&r)
            .arg(&kk)
            .view(x)
            .arg(&sr)
            .arg(&sk)
            .view(p)
            .arg(&rp)
            .arg(&kpi)
            .arg(&x3);
        // SAFETY: arguments match `sgemm_wg_pack(int R, int K, const float* X, i64 sr, i64 sk,
        // float* P, int Rp, int Kp, int x3)` in order and type (T is f32, asserted above);
        // element (r, k) of the R × K operand at X[r·sr + k·sk] lies inside the buffer (the
        // operand covers its matrix, checked when the arguments were made) and the kernel
        // reads only r < R, k < K; P holds (x3 ? 2 : 1)·Rp·Kp floats (the panels' share of
        // the workspace) and is written whole; grid x = Kp/32, grid y ≤ Rp/32 with the
        // kernel looping over the rest, block (32, 8), static shared memory only.
        unsafe { builder.launch(cfg) }.map_err(fail("launching the panel pack"))?;
    }

    let tiles = grid_x(wg.tiles(m, n)).map_err(WgError::Gpu)?;
    let cfg = LaunchConfig {
        grid_dim: (tiles, 1, parts as u32),
        block_dim: (wg.threads, 1, 1),
        shared_mem_bytes: wg.smem,
    };
    let (mi, ni, ki, kpi, kps) = (m as i32, n as i32, k as i32, kp as i32, per_split as i32);
    let (pa, pb) = (pa.as_view(), pb.as_view());
    let ldn = n as i64;
    let mut builder = Launch::on(gpu, stream, &func);
    builder
        .arg(&mi)
        .arg(&ni)
        .arg(&ki)
        .view(&pa)
        .view(&pb)
        .arg(&kpi);
    if parts > 1 {
        builder.view(&part).arg(&ldn);
    } else {
        builder.view(&*c).arg(&args.ldc);
    }
    builder.arg(&kps);
    // SAFETY: arguments match `sgemm_wg_*(int M, int N, int K, const float* PA, const float*
    // PB, int Kp, float* C, i64 ldc, int kt_per_split)` in order and type; PA and PB are the
    // panels the pack launches before it on this stream write (Mp × Kp and Np × Kp, each
    // twice for 3xTF32, at 16-byte-aligned offsets of the workspace: multiples of 128·32
    // floats); one block per output tile of the row's shape, gridDim.z = ceil(Kp/32 / kt_per_split)
    // layers, each writing its whole M × N (partial) product: into C (covering M × N at
    // ldc, checked when the arguments were made) when unsplit, else into the workspace's
    // parts·M·N partials at leading dimension N; 256 threads (the kernel's launch bound) and
    // the table's dynamic shared memory, to which the function's limit was raised when the
    // module was loaded; the kernel's instructions exist on sm_90 only, and the row serves
    // only such devices.
    unsafe { builder.launch(cfg) }.map_err(fail("launching a warpgroup GEMM kernel"))?;
    if parts == 1 {
        return Ok(());
    }
    reduce_wg(gpu, stream, args, parts, &part.as_view(), c)
}

/// The warpgroup family's entry `entry`; [`WgError::Unavailable`] where NVRTC cannot build
/// the family.
fn wg_function(gpu: &Gpu, entry: &str) -> Result<CudaFunction, WgError> {
    gpu.function(Family::SgemmWg, entry).map_err(|e| match e {
        GpuDotError::Compile { .. } => WgError::Unavailable,
        e => WgError::Gpu(e),
    })
}

/// Enqueues the sum of `parts` partial products (`parts·m·n` floats in `part`, each `m × n`
/// with leading dimension n) into C.
fn reduce_wg<T: Element>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    args: GemmArgs<'_, '_, T>,
    parts: usize,
    part: &CudaView<'_, T>,
    c: &mut CudaViewMut<'_, T>,
) -> Result<(), WgError> {
    let reduce = gpu
        .function(Family::Sgemm, Aux::SplitKReduce.entry(Dtype::F32))
        .map_err(WgError::Gpu)?;
    let (m, _, n) = args.dims();
    let cfg = grid_stride(m * n);
    let (mi, ni, parts_i, ldc) = (m as i32, n as i32, parts as i32, args.ldc);
    let mut builder = Launch::on(gpu, stream, &reduce);
    builder
        .arg(&mi)
        .arg(&ni)
        .arg(&parts_i)
        .view(part)
        .view(c)
        .arg(&ldc);
    // SAFETY: arguments match `sgemm_splitk_reduce(int M, int N, int splits, const float* W,
    // float* C, long long ldc)` (T is f32: the callers' assertion); W holds parts·m·n partials
    // written by the launch before it on the same stream; C covers m × n at ldc (checked when
    // the arguments were made); the kernel loops over all m·n outputs.
    unsafe { builder.launch(cfg) }
        .map(drop)
        .map_err(|e| WgError::Gpu(GpuDotError::at("launching the split-K reduction")(e)))
}

/// Enqueues `C = op(A) · op(B)` (f32) on a direct warpgroup SGEMM in `splits` K ranges: no
/// panels; the kernel reads the operands as they are, as `C` (X = op(A), Y = op(B)ᵀ) or,
/// when [`WgRow::transposed`], as `Cᵀ` (X = op(B)ᵀ, Y = op(A)). Split partials live in the
/// workspace `ws` and are reduced into C.
fn launch_direct<T: Element>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    wg: &WgRow,
    splits: u32,
    args: GemmArgs<'_, '_, T>,
    c: &mut CudaViewMut<'_, T>,
    ws: &mut Option<DevBuf>,
) -> Result<(), WgError> {
    let (m, k, n) = args.dims();
    let func = wg_function(gpu, wg.stem)?;
    let k_tiles = k.div_ceil(wg.bk);
    let per_split = k_tiles.div_ceil(splits.max(1) as usize);
    let parts = k_tiles.div_ceil(per_split);
    assert!(parts <= MAX_SPLITS, "split count within bounds");
    let mut work = None;
    if parts > 1 {
        let len = parts * m * n;
        let buf = scratch(
            stream,
            ws,
            len * std::mem::size_of::<T>(),
            &gpu.high_water.device,
        )
        .map_err(|_| WgError::Unavailable)?;
        work = Some(buf.view_mut::<T>(len));
    }
    let ((a_sr, a_sk), (b_sr, b_sk)) = args.row_strides();
    let transposed = wg.transposed(m, n);
    // Output (r, c) of the kernel's product at C[z·layer + r·crs + c·ccs].
    let (ldo, layer) = match work {
        Some(_) => (n as i64, (m * n) as i64),
        None => (args.ldc, 0),
    };
    let (rows, cols, x, (xr, xk), y, (yr, yk), (crs, ccs)) = if transposed {
        (
            n,
            m,
            &args.b.buf,
            (b_sr, b_sk),
            &args.a.buf,
            (a_sr, a_sk),
            (1, ldo),
        )
    } else {
        (
            m,
            n,
            &args.a.buf,
            (a_sr, a_sk),
            &args.b.buf,
            (b_sr, b_sk),
            (ldo, 1),
        )
    };
    let tiles = grid_x(wg.tiles(m, n)).map_err(WgError::Gpu)?;
    let cfg = LaunchConfig {
        grid_dim: (tiles, 1, parts as u32),
        block_dim: (wg.threads, 1, 1),
        shared_mem_bytes: wg.smem,
    };
    let (ri, ci, ki, kps) = (rows as i32, cols as i32, k as i32, per_split as i32);
    let mut builder = Launch::on(gpu, stream, &func);
    builder
        .arg(&ri)
        .arg(&ci)
        .arg(&ki)
        .view(x)
        .arg(&xr)
        .arg(&xk)
        .view(y)
        .arg(&yr)
        .arg(&yk);
    match work.as_mut() {
        Some(w) => builder.view(w),
        None => builder.view(&*c),
    };
    builder.arg(&crs).arg(&ccs).arg(&layer).arg(&kps);
    // SAFETY: arguments match `sgemm_wg_*_128x64(int M, int N, int K, const float* X, i64 xr,
    // i64 xk, const float* Y, i64 yr, i64 yk, float* C, i64 crs, i64 ccs, i64 layer, int
    // kt_per_split)` in order and type (T is f32, asserted by the caller); X and Y are op(A)
    // and op(B)ᵀ (or the reverse for Cᵀ) with element (r, k) at [r·sr + k·sk], inside their
    // buffers (checked when the arguments were made) for r < rows and k < K, the only
    // elements the kernel reads; output (r, c) for r < rows, c < cols lands in C (m × n at
    // ldc, unsplit) or in the workspace's parts·m·n partials (layer m·n, leading dimension n);
    // gridDim.z = ceil(ceil(K/32) / kt_per_split) layers, each writing its whole product;
    // one block per tile of the row's way round (the kernel maps blockIdx.x to a tile); 256
    // threads and the table's dynamic shared memory, to which the function's limit was raised
    // when the module was loaded; the row serves only sm_90 devices, where its code runs.
    unsafe { builder.launch(cfg) }
        .map_err(|e| WgError::Gpu(GpuDotError::at("launching a warpgroup GEMM kernel")(e)))?;
    match work {
        Some(w) => reduce_wg(gpu, stream, args, parts, &w.as_view(), c),
        None => Ok(()),
    }
}

/// The layout suffix of the table's entry names for `(op(A) transposed, op(B) transposed)`.
pub(crate) fn table_ll(trans: (bool, bool)) -> &'static str {
    crate::engine::table::layout_suffix(trans.0, trans.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model decides on a Hopper only; the devices that run the mma.sync INT8 GEMM keep
    /// the rule of sides and volumes, and devices without INT8 tensor cores never emulate.
    #[test]
    fn the_model_decides_on_hoppers_only() {
        let thin = (16384, 1024, 4096);
        assert!(emulation_pays(Dtype::F32, 90, thin));
        for sm in [80, 89, 100, 120] {
            assert!(!emulation_pays(Dtype::F32, sm, thin), "sm {sm}");
            assert!(
                emulation_pays(Dtype::F32, sm, (4096, 4096, 4096)),
                "sm {sm}"
            );
        }
        assert!(!emulation_pays(Dtype::F32, 75, (8192, 8192, 8192)));
    }
}

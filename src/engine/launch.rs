//! Launching kernels: the device operand and launch-argument types every GEMM entry takes,
//! device buffers, and the launchers of the one-output-per-thread kernels, the tiled GEMMs
//! (split-K included), the GEMVs and the element-wise kernels, for every element type.

use std::sync::Arc;

use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DeviceSlice, LaunchArgs,
    LaunchConfig, PushKernelArg,
};

use crate::device::context::Gpu;
use crate::element::{Dtype, Element};
use crate::engine::ozaki::OzError;
use crate::engine::plan::{Plan, MAX_SPLITS};
use crate::engine::table::{Aux, Family, Gemv, SimpleRow, TileConfig, TileRow, WgRow};
use crate::error::GpuDotError;
use crate::options::{Kernel, Precision};

/// Largest grid extent along y; rows of tiles past it are covered by the kernels' loop.
const MAX_GRID_Y: usize = 65_535;

/// A matrix on the device, as a kernel reads it.
pub(crate) struct DeviceOperand<'a, T> {
    pub(crate) buf: CudaView<'a, T>,
    /// Column-major (element (r, c) at `c * ld + r`) instead of row-major.
    pub(crate) trans: bool,
    pub(crate) ld: usize,
}

impl<T> DeviceOperand<'_, T> {
    /// Whether the buffer holds every element of a `rows × cols` matrix in this layout.
    fn covers(&self, rows: usize, cols: usize) -> bool {
        let (outer, inner) = if self.trans {
            (cols, rows)
        } else {
            (rows, cols)
        };
        inner <= self.ld
            && (outer - 1)
                .checked_mul(self.ld)
                .and_then(|x| x.checked_add(inner))
                .is_some_and(|need| need <= self.buf.len())
    }

    /// Whether the 16-byte-load entries may read it: 16-byte aligned, and a leading dimension
    /// that keeps every row (or column) so.
    pub(crate) fn aligned(&self) -> bool {
        let elems = 16 / std::mem::size_of::<T>();
        let ptr = self.buf.device_ptr(self.buf.stream()).0;
        ptr % 16 == 0 && self.ld.is_multiple_of(elems)
    }
}

/// A device buffer of raw bytes that the pipeline reuses for every element type, seen typed
/// through [`DevBuf::view`] and [`DevBuf::view_mut`].
pub(crate) struct DevBuf(CudaSlice<u8>);

impl DevBuf {
    pub(crate) fn bytes(&self) -> usize {
        self.0.len()
    }

    /// The first `len` elements as `T`.
    pub(crate) fn view<T: Element>(&self, len: usize) -> CudaView<'_, T> {
        // SAFETY: the memory is plain device memory of at least `len · size_of::<T>()` bytes
        // (checked by cudarc, which returns None otherwise) at a 256-byte-aligned address;
        // every bit pattern is a valid f32 or f64, so no typed view can see an invalid value.
        unsafe { self.0.transmute::<T>(len) }.expect("device buffer too small")
    }

    /// The first `len` elements as `T`, mutably.
    pub(crate) fn view_mut<T: Element>(&mut self, len: usize) -> CudaViewMut<'_, T> {
        // SAFETY: as for `view`; the exclusive borrow of `self` keeps the view unique.
        unsafe { self.0.transmute_mut::<T>(len) }.expect("device buffer too small")
    }

    pub(crate) fn addr(&self, stream: &Arc<CudaStream>) -> u64 {
        self.0.device_ptr(stream).0
    }
}

/// Allocates `len` uninitialised elements on `stream`.
pub(crate) fn alloc<T: Element>(
    stream: &Arc<CudaStream>,
    len: usize,
) -> Result<CudaSlice<T>, GpuDotError> {
    let bytes = len * std::mem::size_of::<T>();
    // SAFETY: the memory is uninitialised; every caller writes it (copy or kernel output
    // covering every element) before reading it back.
    unsafe { stream.alloc::<T>(len) }
        .map_err(|e| GpuDotError::driver("allocating device memory", bytes, e))
}

/// A device buffer of at least `bytes` bytes kept in `slot` across calls: grown (never
/// shrunk) when too small, so steady-state calls allocate nothing. `high_water` is the
/// device's record of the largest such buffer.
pub(crate) fn scratch<'s>(
    stream: &Arc<CudaStream>,
    slot: &'s mut Option<DevBuf>,
    bytes: usize,
    high_water: &std::sync::atomic::AtomicUsize,
) -> Result<&'s mut DevBuf, GpuDotError> {
    if slot.as_ref().is_none_or(|b| b.bytes() < bytes) {
        // Free the old buffer before allocating the larger one.
        *slot = None;
        let len = grown(high_water, bytes);
        // SAFETY: as for `alloc`: the bytes are written before they are read.
        let buf = unsafe { stream.alloc::<u8>(len) }
            .map_err(|e| GpuDotError::driver("allocating device memory", len, e))?;
        *slot = Some(DevBuf(buf));
    }
    Ok(slot.as_mut().expect("filled above"))
}

/// The size to grow a reusable buffer to for `len` bytes: [`grow_to`], or the largest such
/// buffer made so far (`high_water`) when that is at most 4× more. Reused buffers then settle
/// at one size after a warm-up, instead of creeping up as each meets a larger product.
pub(crate) fn grown(high_water: &std::sync::atomic::AtomicUsize, len: usize) -> usize {
    use std::sync::atomic::Ordering;
    let want = grow_to(len);
    let hw = high_water.fetch_max(want, Ordering::Relaxed).max(want);
    if hw <= want.saturating_mul(4) {
        hw
    } else {
        want
    }
}

/// The size a buffer asked to hold `len` bytes is grown to: the next power of two up to
/// 4 MiB, then the next multiple of 4 MiB (so repeated growth is geometric while small and
/// wastes at most 4 MiB when large).
pub(crate) fn grow_to(len: usize) -> usize {
    const STEP: usize = 4 << 20;
    if len <= STEP {
        len.next_power_of_two()
    } else {
        len.div_ceil(STEP) * STEP
    }
}

/// Copies `data` into a new device buffer.
pub(crate) fn upload<T: Element>(
    stream: &Arc<CudaStream>,
    data: &[T],
) -> Result<CudaSlice<T>, GpuDotError> {
    let mut buf = alloc(stream, data.len())?;
    stream
        .memcpy_htod(data, &mut buf)
        .map_err(GpuDotError::at("copying an operand to the device"))?;
    Ok(buf)
}

/// Fills `buf` with NaN (every byte 0xFF is a quiet NaN in both element types).
pub(crate) fn poison<T: Element, D: cudarc::driver::DevicePtrMut<T>>(
    stream: &Arc<CudaStream>,
    buf: &mut D,
) -> Result<(), GpuDotError> {
    let bytes = buf.len() * std::mem::size_of::<T>();
    stream
        .context()
        .bind_to_thread()
        .map_err(GpuDotError::at("binding the context"))?;
    let (ptr, _record) = buf.device_ptr_mut(stream);
    // SAFETY: `ptr` is valid for `bytes` bytes (the whole slice) on `stream`; `_record` keeps
    // cudarc's stream ordering for the slice until the memset is enqueued.
    unsafe { cudarc::driver::result::memset_d8_async(ptr, 0xFF, bytes, stream.cu_stream()) }
        .map_err(GpuDotError::at("poisoning the output"))
}

/// The launch shape of the grid-stride element-wise kernels ([`Aux`]): 256 threads a block,
/// at most 8192 blocks, which loop over the rest.
pub(crate) fn grid_stride(elements: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (elements.div_ceil(256).clamp(1, 8192) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Checks that each dimension fits the kernels' `int` arguments.
pub(crate) fn check_dims(m: usize, k: usize, n: usize) -> Result<(), GpuDotError> {
    let max = i32::MAX as usize;
    if m > max || k > max || n > max {
        return Err(GpuDotError::TooLarge { dims: (m, k, n) });
    }
    Ok(())
}

/// The arguments of every GEMM and GEMV entry, `(M, N, K, A, lda, B, ldb, C, ldc)`
/// (`GEMM_PARAMS` in kernels/common.cuh), checked on construction: dimensions at least 1 and
/// within `int`, and buffers that hold every element a kernel may index.
pub(crate) struct GemmArgs<'v, 'a, T> {
    m: i32,
    n: i32,
    k: i32,
    a: &'v DeviceOperand<'a, T>,
    lda: i64,
    b: &'v DeviceOperand<'a, T>,
    ldb: i64,
    ldc: i64,
    /// The precision asked for (f32 products; see [`TileRow::of`]).
    precision: Precision,
}

impl<'v, 'a, T> GemmArgs<'v, 'a, T> {
    /// Element strides `(sr, sk)` of op(A) (`m × k`) and of op(B)ᵀ (`n × k`): element (r, k)
    /// at `r·sr + k·sk`.
    pub(crate) fn row_strides(&self) -> ((i64, i64), (i64, i64)) {
        (
            if self.a.trans {
                (1, self.lda)
            } else {
                (self.lda, 1)
            },
            if self.b.trans {
                (self.ldb, 1)
            } else {
                (1, self.ldb)
            },
        )
    }

    pub(crate) fn new(
        (m, k, n): (usize, usize, usize),
        a: &'v DeviceOperand<'a, T>,
        b: &'v DeviceOperand<'a, T>,
        c: &CudaViewMut<'_, T>,
        ldc: usize,
    ) -> Result<Self, GpuDotError> {
        check_dims(m, k, n)?;
        assert!(m > 0 && k > 0 && n > 0, "empty products never launch");
        assert!(
            a.covers(m, k) && b.covers(k, n),
            "operand buffers too small"
        );
        assert!(
            n <= ldc && (m - 1) * ldc + n <= c.len(),
            "output buffer too small"
        );
        Ok(GemmArgs {
            m: m as i32,
            n: n as i32,
            k: k as i32,
            a,
            lda: a.ld as i64,
            b,
            ldb: b.ld as i64,
            ldc: ldc as i64,
            precision: Precision::Fp32,
        })
    }

    /// The same product in `precision` (f32 products; f64 ignores it).
    pub(crate) fn with_precision(self, precision: Precision) -> Self {
        GemmArgs { precision, ..self }
    }

    pub(crate) fn precision(&self) -> Precision {
        self.precision
    }

    pub(crate) fn dims(&self) -> (usize, usize, usize) {
        (self.m as usize, self.k as usize, self.n as usize)
    }

    /// The operands' buffers.
    pub(crate) fn bufs(&self) -> (&'v CudaView<'a, T>, &'v CudaView<'a, T>) {
        (&self.a.buf, &self.b.buf)
    }

    /// C's leading dimension.
    pub(crate) fn ldc(&self) -> i64 {
        self.ldc
    }

    pub(crate) fn trans(&self) -> (bool, bool) {
        (self.a.trans, self.b.trans)
    }

    /// The same product writing `c` with leading dimension `ldc` instead (split-K partials).
    fn with_ldc(&self, ldc: usize) -> Self {
        GemmArgs {
            ldc: ldc as i64,
            ..*self
        }
    }

    /// Pushes the nine arguments in order onto `builder`, with `c` as C.
    fn push<'b>(&'b self, builder: &mut LaunchArgs<'b>, c: &'b mut CudaViewMut<'_, T>)
    where
        T: Element,
    {
        builder
            .arg(&self.m)
            .arg(&self.n)
            .arg(&self.k)
            .arg(&self.a.buf)
            .arg(&self.lda)
            .arg(&self.b.buf)
            .arg(&self.ldb)
            .arg(c)
            .arg(&self.ldc);
    }
}

impl<T> Clone for GemmArgs<'_, '_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for GemmArgs<'_, '_, T> {}

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
    let mut builder = stream.launch_builder(&func);
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

/// Enqueues `C = op(A) · op(B)` by `plan` on `stream`, and returns the precision it ran in
/// (the tile row's: FP32 where the device lacks the asked-for kernels; FP32 for the GEMVs;
/// native where an Ozaki product cannot run). `scratch` is the split-K (and Ozaki)
/// workspace, grown as needed (`high_water`: the device's record for it).
pub(crate) fn launch_plan<T: Element>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    plan: Plan,
    args: GemmArgs<'_, '_, T>,
    c: &mut CudaViewMut<'_, T>,
    split_ws: &mut Option<DevBuf>,
) -> Result<Precision, GpuDotError> {
    let (m, k, n) = args.dims();
    let trans = args.trans();
    let dtype = T::DTYPE;
    let family = Family::fast(dtype);
    match plan {
        Plan::GemvRow | Plan::GemvCol => {
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
            let mut builder = stream.launch_builder(&func);
            args.push(&mut builder, c);
            // SAFETY: arguments of `GEMM_PARAMS(T)` in order and type; the entry's layout
            // suffix matches the operands; m == 1 (row GEMV) or n == 1 (column GEMV), asserted
            // above; the grid is the table's rule for the entry (one block per 16 or 8
            // outputs, 256 threads); the buffers cover op(A), op(B) and C (checked when the
            // arguments were made), and the kernels guard every access by M, N and K.
            unsafe { builder.launch(cfg) }
                .map(|_| Precision::Fp32)
                .map_err(GpuDotError::at("launching a GEMV kernel"))
        }
        Plan::Tile { config, splits } => {
            let precision = args.precision.for_dtype(dtype);
            if let Precision::Ozaki { moduli } = precision {
                match crate::engine::ozaki::launch(gpu, stream, moduli, args, c, split_ws) {
                    // Not here (device, k, workspace or NVRTC): the native kernels below run
                    // it, and the route report names the precision that could not run.
                    Err(OzError::Unavailable) => {}
                    Err(OzError::Gpu(e)) => return Err(e),
                    Ok(ran) => return Ok(ran),
                }
            }
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
            let row = TileRow::of(
                dtype,
                args.precision.for_dtype(dtype),
                config,
                gpu.kernel_sm(),
            );
            let aligned = args.a.aligned() && args.b.aligned();
            let grid_tiles = grid_x(row.tiles(m, n))?;
            let block = (row.threads, 1, 1);
            if splits <= 1 && k < row.short_k {
                // The split-K entry keeps the loop for short K: one split, straight into C.
                let func = gpu.function(row.family, &row.entry(trans, aligned, true))?;
                let cfg = LaunchConfig {
                    grid_dim: (grid_tiles, 1, 1),
                    block_dim: block,
                    shared_mem_bytes: row.smem,
                };
                let kps = k.max(1).next_multiple_of(row.bk) as i32;
                let mut builder = stream.launch_builder(&func);
                args.push(&mut builder, c);
                builder.arg(&kps);
                // SAFETY: as for the unsplit entry below, plus the trailing `int
                // k_per_split`, a positive multiple of the row's K tile not below K; with
                // gridDim.z = 1 the one split covers all of K and writes its product to C
                // itself (z = 0) at the arguments' ldc.
                return unsafe { builder.launch(cfg) }
                    .map(|_| row.precision)
                    .map_err(GpuDotError::at("launching a GEMM kernel"));
            }
            if splits <= 1 {
                let func = gpu.function(row.family, &row.entry(trans, aligned, false))?;
                let cfg = LaunchConfig {
                    grid_dim: (grid_tiles, 1, 1),
                    block_dim: block,
                    shared_mem_bytes: row.smem,
                };
                let mut builder = stream.launch_builder(&func);
                args.push(&mut builder, c);
                // SAFETY: arguments of `GEMM_PARAMS(T)` in order and type; the entry's layout
                // suffix matches the operands, and the 16-byte-load entry is chosen only when
                // both operands are 16-byte aligned with leading dimensions that keep them so
                // (`aligned`); the grid has one block per output tile (the kernel maps
                // blockIdx.x to a tile); block size and dynamic shared memory are the table's
                // (checked against the source), and the function's shared-memory limit was
                // raised to it when the module was loaded; the buffers cover op(A), op(B) and
                // C, and edge tiles are guarded in the kernel.
                return unsafe { builder.launch(cfg) }
                    .map(|_| row.precision)
                    .map_err(GpuDotError::at("launching a GEMM kernel"));
            }
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
            let mut work = work.view_mut::<T>(len);
            let func = gpu.function(row.family, &row.entry(trans, aligned, true))?;
            let cfg = LaunchConfig {
                grid_dim: (grid_tiles, 1, parts as u32),
                block_dim: block,
                shared_mem_bytes: row.smem,
            };
            // The partial products go to the workspace with leading dimension n.
            let partial = args.with_ldc(n);
            let kps = k_per_split as i32;
            let mut builder = stream.launch_builder(&func);
            partial.push(&mut builder, &mut work);
            builder.arg(&kps);
            // SAFETY: as for the unsplit entry, plus the trailing `int k_per_split`, a positive
            // multiple of the row's K tile; gridDim.z = ceil(K / k_per_split) ≤ MAX_SPLITS, so
            // every split has a K range and writes its whole m × n partial product to the
            // workspace at z·m·n with leading dimension n; `work` holds parts·m·n elements.
            unsafe { builder.launch(cfg) }
                .map_err(GpuDotError::at("launching a split-K kernel"))?;

            let reduce = gpu.function(family, Aux::SplitKReduce.entry(dtype))?;
            let cfg = grid_stride(m * n);
            let (mi, ni, parts_i, ldc) = (m as i32, n as i32, parts as i32, args.ldc);
            let work = work.as_view();
            let mut builder = stream.launch_builder(&reduce);
            builder
                .arg(&mi)
                .arg(&ni)
                .arg(&parts_i)
                .arg(&work)
                .arg(c)
                .arg(&ldc);
            // SAFETY: arguments match `{s,d}gemm_splitk_reduce(int M, int N, int splits, const
            // T* W, T* C, long long ldc)`; W holds splits·m·n elements written by the launch
            // before it on the same stream; C covers m × n at ldc (checked when the arguments
            // were made); the kernel loops over all m·n outputs whatever the grid.
            unsafe { builder.launch(cfg) }
                .map(|_| row.precision)
                .map_err(GpuDotError::at("launching the split-K reduction"))
        }
    }
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
    let (mut pb, mut part) = rest.split_at_mut(panels / (mp + np) * np);

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
        let mut builder = stream.launch_builder(&pack);
        builder
            .arg(&r)
            .arg(&kk)
            .arg(x)
            .arg(&sr)
            .arg(&sk)
            .arg(p)
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
    let mut builder = stream.launch_builder(&func);
    builder
        .arg(&mi)
        .arg(&ni)
        .arg(&ki)
        .arg(&pa)
        .arg(&pb)
        .arg(&kpi);
    if parts > 1 {
        builder.arg(&mut part).arg(&ldn);
    } else {
        builder.arg(&mut *c).arg(&args.ldc);
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
    let mut builder = stream.launch_builder(&reduce);
    builder
        .arg(&mi)
        .arg(&ni)
        .arg(&parts_i)
        .arg(part)
        .arg(c)
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
    let mut builder = stream.launch_builder(&func);
    builder
        .arg(&ri)
        .arg(&ci)
        .arg(&ki)
        .arg(x)
        .arg(&xr)
        .arg(&xk)
        .arg(y)
        .arg(&yr)
        .arg(&yk);
    match work.as_mut() {
        Some(w) => builder.arg(w),
        None => builder.arg(&mut *c),
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

/// Largest grid extent along z: batches with more items launch in chunks of it.
const MAX_GRID_Z: usize = 65_535;

/// A batch of equal-shape products: item `z` reads A at element offset `z·a`, B at `z·b`
/// (0: one B shared by every item) and writes C at `z·c`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Batch {
    pub(crate) items: usize,
    pub(crate) a: usize,
    pub(crate) b: usize,
    pub(crate) c: usize,
}

impl<'a, T> DeviceOperand<'a, T> {
    /// The operand starting `offset` elements in (None past the buffer's end).
    fn offset_by(&self, offset: usize) -> Option<DeviceOperand<'a, T>> {
        Some(DeviceOperand {
            buf: self.buf.try_slice(offset..)?,
            trans: self.trans,
            ld: self.ld,
        })
    }
}

/// Enqueues a batch of products `C_z (m × n, row-major, leading dimension ldc) = op(A_z) ·
/// op(B_z)` on `stream`. The register-blocked kernels (`Auto`, `Reg64`, `Reg128`) run the
/// whole batch in one launch (one grid layer per item, in chunks of 65 535 items) with the
/// tile configuration `config`, and the plan is returned; the one-output-per-thread kernels
/// run one launch per item.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_batched<T: Element>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    kernel: Kernel,
    config: TileConfig,
    (m, k, n): (usize, usize, usize),
    a: &DeviceOperand<'_, T>,
    b: &DeviceOperand<'_, T>,
    c: &mut CudaViewMut<'_, T>,
    ldc: usize,
    batch: Batch,
    precision: Precision,
) -> Result<(Option<Plan>, Precision), GpuDotError> {
    assert!(m > 0 && k > 0 && n > 0, "empty products never launch");
    if batch.items == 0 {
        return Ok((None, Precision::Fp32));
    }
    // Every item lies inside the buffers: the last one starts furthest in.
    let last = batch.items - 1;
    let (last_a, last_b) = (a.offset_by(last * batch.a), b.offset_by(last * batch.b));
    assert!(
        last_a.is_some_and(|x| x.covers(m, k)) && last_b.is_some_and(|x| x.covers(k, n)),
        "operand buffers too small for the batch"
    );
    assert!(
        n <= ldc && last * batch.c + (m - 1) * ldc + n <= c.len(),
        "output buffer too small for the batch"
    );
    let item = |z: usize| {
        let a = a.offset_by(z * batch.a).expect("checked above");
        let b = b.offset_by(z * batch.b).expect("checked above");
        (a, b)
    };
    if SimpleRow::of(T::DTYPE, kernel).is_some() {
        for z in 0..batch.items {
            let (a, b) = item(z);
            let mut c = c.slice_mut(z * batch.c..);
            let args = GemmArgs::new((m, k, n), &a, &b, &c, ldc)?;
            launch_simple(gpu, stream, kernel, args, &mut c)?;
        }
        return Ok((None, Precision::Fp32));
    }
    let dtype = T::DTYPE;
    // Matrix-matrix items from sm_80 on only: a single product with one row or column runs
    // the native GEMV, and an item of a batch gives the same bits; elsewhere the whole batch
    // runs natively in one launch.
    let ozaki_here = m > 1 && n > 1 && gpu.kernel_sm() >= 80;
    if let (Precision::Ozaki { .. }, true) = (precision.for_dtype(dtype), ozaki_here) {
        // One product after another, sharing one workspace; an item the Ozaki kernels cannot
        // run (and so every item: they share shape and device) runs natively.
        let mut ws = None;
        let mut ran = None;
        for z in 0..batch.items {
            let (a, b) = item(z);
            let mut c = c.slice_mut(z * batch.c..);
            let args = GemmArgs::new((m, k, n), &a, &b, &c, ldc)?.with_precision(precision);
            let plan = Plan::Tile { config, splits: 1 };
            ran = Some(launch_plan(gpu, stream, plan, args, &mut c, &mut ws)?);
        }
        let ran = ran.expect("at least one item");
        return Ok((Some(Plan::Tile { config, splits: 1 }), ran));
    }
    let row = TileRow::of(dtype, precision.for_dtype(dtype), config, gpu.kernel_sm());
    let elems = 16 / std::mem::size_of::<T>();
    let aligned = a.aligned()
        && b.aligned()
        && batch.a.is_multiple_of(elems)
        && batch.b.is_multiple_of(elems);
    let func = gpu.function(row.family, &row.batched_entry((a.trans, b.trans), aligned))?;
    let grid_tiles = grid_x(row.tiles(m, n))?;
    let strides = [batch.a as i64, batch.b as i64, batch.c as i64];
    let mut z0 = 0;
    while z0 < batch.items {
        let items = (batch.items - z0).min(MAX_GRID_Z);
        let (a, b) = item(z0);
        let mut c = c.slice_mut(z0 * batch.c..);
        let args = GemmArgs::new((m, k, n), &a, &b, &c, ldc)?;
        let cfg = LaunchConfig {
            grid_dim: (grid_tiles, 1, items as u32),
            block_dim: (row.threads, 1, 1),
            shared_mem_bytes: row.smem,
        };
        let mut builder = stream.launch_builder(&func);
        args.push(&mut builder, &mut c);
        builder.arg(&strides[0]).arg(&strides[1]).arg(&strides[2]);
        // SAFETY: arguments of `GEMM_PARAMS(T)` then `GD_BATCH_PARAMS` (three 64-bit element
        // strides) in order and type; the entry's layout suffix matches the operands, and the
        // 16-byte-load entry is chosen only when both operands and every item's offset keep
        // 16-byte alignment; grid x has one block per output tile of an item, as for the
        // unbatched entry, and grid z one layer per item of this chunk, each reading and
        // writing its item at z·stride from the chunk's first; every item up to the batch's
        // last lies inside the buffers (asserted above), and edge tiles are guarded in the
        // kernel; block size and dynamic shared memory are the table's, and the function's
        // shared-memory limit was raised to it when the module was loaded.
        unsafe { builder.launch(cfg) }
            .map_err(GpuDotError::at("launching a batched GEMM kernel"))?;
        z0 += items;
    }
    Ok((Some(Plan::Tile { config, splits: 1 }), row.precision))
}

fn table_ll(trans: (bool, bool)) -> &'static str {
    crate::engine::table::layout_suffix(trans.0, trans.1)
}

/// Enqueues `C = alpha·T + beta·C` over a `rows × cols` block (T row-major with leading
/// dimension `cols`; `None` means T is zero).
#[allow(clippy::too_many_arguments)]
pub(crate) fn axpby<T: Element>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    (rows, cols): (usize, usize),
    alpha: T,
    t: Option<&CudaView<'_, T>>,
    beta: T,
    c: &mut CudaViewMut<'_, T>,
    ldc: usize,
) -> Result<(), GpuDotError> {
    assert!(
        cols <= ldc && (rows - 1) * ldc + cols <= c.len(),
        "output too small"
    );
    assert!(t.is_none_or(|t| t.len() >= rows * cols), "T too small");
    let func = aux(gpu, Aux::Axpby, T::DTYPE)?;
    let cfg = grid_stride(rows * cols);
    let (m, n, ldt, ldc) = (rows as i32, cols as i32, cols as i64, ldc as i64);
    let null = 0u64;
    let mut builder = stream.launch_builder(&func);
    builder.arg(&m).arg(&n).arg(&alpha);
    match t {
        Some(t) => builder.arg(t),
        None => builder.arg(&null),
    };
    builder.arg(&ldt).arg(&beta).arg(c).arg(&ldc);
    // SAFETY: arguments match `{s,d}gemm_axpby(int M, int N, T alpha, const T* T, long long
    // ldt, T beta, T* C, long long ldc)` in order and type (a null T is a 64-bit zero); T
    // holds rows·cols elements at leading dimension cols and C covers rows × cols at ldc
    // (asserted above); the kernel loops over all M·N elements whatever the grid.
    unsafe { builder.launch(cfg) }
        .map(drop)
        .map_err(GpuDotError::at("launching the epilogue"))
}

/// An element-wise operation on device buffers of `len` elements ([`elementwise`]).
pub(crate) enum Elementwise<'a, T> {
    /// `x = max(x, 0)`.
    Relu(&'a mut CudaSlice<T>),
    /// `g = h > 0 ? g : 0`.
    ReluBackward {
        g: &'a mut CudaSlice<T>,
        h: &'a CudaSlice<T>,
    },
}

/// Runs `op` over the first `len` elements of its buffers and waits for it.
pub(crate) fn elementwise<T: Element>(
    gpu: &Gpu,
    op: Elementwise<'_, T>,
    len: usize,
) -> Result<(), GpuDotError> {
    if len == 0 {
        return Ok(());
    }
    let stream = gpu.stream()?;
    let n = len as i64;
    let cfg = grid_stride(len);
    match op {
        Elementwise::Relu(x) => {
            assert!(x.len() >= len, "buffer too small");
            let func = aux(gpu, Aux::Relu, T::DTYPE)?;
            let mut builder = stream.launch_builder(&func);
            builder.arg(&n).arg(x);
            // SAFETY: arguments match `{,d}elem_relu(long long N, T* X)` in order and type; X
            // holds at least N elements (asserted above); the kernel loops over all N
            // elements whatever the grid.
            unsafe { builder.launch(cfg) }
        }
        Elementwise::ReluBackward { g, h } => {
            assert!(g.len() >= len && h.len() >= len, "buffer too small");
            let func = aux(gpu, Aux::ReluBackward, T::DTYPE)?;
            let mut builder = stream.launch_builder(&func);
            builder.arg(&n).arg(g).arg(h);
            // SAFETY: arguments match `{,d}elem_relu_backward(long long N, T* G, const T* H)`
            // in order and type; G and H hold at least N elements each (asserted above) and
            // are different buffers (one borrowed mutably); the kernel loops over all N
            // elements whatever the grid.
            unsafe { builder.launch(cfg) }
        }
    }
    .map_err(GpuDotError::at("launching an element-wise kernel"))?;
    stream
        .synchronize()
        .map_err(GpuDotError::at("waiting for an element-wise kernel"))
}

fn aux(gpu: &Gpu, aux: Aux, dtype: crate::element::Dtype) -> Result<CudaFunction, GpuDotError> {
    gpu.function(Family::fast(dtype), aux.entry(dtype))
}

pub(crate) fn grid_x(blocks: usize) -> Result<u32, GpuDotError> {
    u32::try_from(blocks)
        .ok()
        .filter(|&b| b <= i32::MAX as u32)
        .ok_or(GpuDotError::TooLarge {
            dims: (blocks, 0, 0),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_grow_geometrically_then_by_steps() {
        assert_eq!(grow_to(1), 1);
        assert_eq!(grow_to(1000), 1024);
        assert_eq!(grow_to(4 << 20), 4 << 20);
        assert_eq!(grow_to((4 << 20) + 1), 8 << 20);
        let hw = std::sync::atomic::AtomicUsize::new(0);
        assert_eq!(grown(&hw, 16 << 20), 16 << 20);
        // Reuses the high-water size when at most 4× the need.
        assert_eq!(grown(&hw, 5 << 20), 16 << 20);
        assert_eq!(grown(&hw, 1 << 20), 1 << 20);
    }
}

//! Launchers for the SGEMM kernels of `kernels/naive.cu` and `kernels/tiled.cu`, and the
//! host-to-host GPU product built on them.

use std::sync::Arc;

use cudarc::driver::{
    CudaSlice, CudaStream, CudaView, CudaViewMut, LaunchArgs, LaunchConfig, PushKernelArg,
};

use crate::context::Gpu;
use crate::error::GpuDotError;
use crate::options::Kernel;
use crate::registry::LaunchRule;

/// Largest grid extent along y; rows of tiles past it are covered by the kernels' loop.
const MAX_GRID_Y: usize = 65_535;

/// A matrix on the device, as a kernel reads it.
pub(crate) struct DeviceOperand<'a> {
    pub(crate) buf: CudaView<'a, f32>,
    /// Column-major (element (r, c) at `c * ld + r`) instead of row-major.
    pub(crate) trans: bool,
    pub(crate) ld: usize,
}

impl DeviceOperand<'_> {
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
}

/// Allocates `len` uninitialised floats on `stream`.
pub(crate) fn alloc(stream: &Arc<CudaStream>, len: usize) -> Result<CudaSlice<f32>, GpuDotError> {
    let bytes = len * std::mem::size_of::<f32>();
    // SAFETY: the memory is uninitialised; every caller writes it (copy or kernel output
    // covering every element) before reading it back.
    unsafe { stream.alloc::<f32>(len) }
        .map_err(|e| GpuDotError::driver("allocating device memory", bytes, e))
}

/// A device buffer of at least `len` floats kept in `slot` across calls: grown (never
/// shrunk) when too small, so steady-state calls allocate nothing.
pub(crate) fn scratch<'s>(
    stream: &Arc<CudaStream>,
    slot: &'s mut Option<CudaSlice<f32>>,
    len: usize,
) -> Result<&'s mut CudaSlice<f32>, GpuDotError> {
    if slot.as_ref().is_none_or(|b| b.len() < len) {
        // Free the old buffer before allocating the larger one.
        *slot = None;
        *slot = Some(alloc(stream, grown(&DEVICE_HIGH_WATER, len))?);
    }
    Ok(slot.as_mut().expect("filled above"))
}

static DEVICE_HIGH_WATER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The size to grow a reusable buffer to for `len` floats: [`grow_to`], or the largest such
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

/// The size a buffer asked to hold `len` floats is grown to: the next power of two up to
/// 1 Mi floats, then the next multiple of 1 Mi floats (so repeated growth is geometric while
/// small and wastes at most 4 MiB when large).
pub(crate) fn grow_to(len: usize) -> usize {
    const MI: usize = 1 << 20;
    if len <= MI {
        len.next_power_of_two()
    } else {
        len.div_ceil(MI) * MI
    }
}

/// Copies `data` into a new device buffer.
pub(crate) fn upload(
    stream: &Arc<CudaStream>,
    data: &[f32],
) -> Result<CudaSlice<f32>, GpuDotError> {
    let mut buf = alloc(stream, data.len())?;
    stream
        .memcpy_htod(data, &mut buf)
        .map_err(GpuDotError::at("copying an operand to the device"))?;
    Ok(buf)
}

/// Fills `buf` with NaN (every byte 0xFF is a quiet NaN).
pub(crate) fn poison<D: cudarc::driver::DevicePtrMut<f32>>(
    stream: &Arc<CudaStream>,
    buf: &mut D,
) -> Result<(), GpuDotError> {
    let bytes = buf.len() * std::mem::size_of::<f32>();
    let (ptr, _record) = buf.device_ptr_mut(stream);
    // SAFETY: `ptr` is valid for `bytes` bytes (the whole slice) on `stream`; `_record` keeps
    // cudarc's stream ordering for the slice until the memset is enqueued.
    unsafe { cudarc::driver::result::memset_d8_async(ptr, 0xFF, bytes, stream.cu_stream()) }
        .map_err(GpuDotError::at("poisoning the output"))
}

/// The launch shape of the grid-stride element-wise kernels (`sgemm_splitk_reduce`,
/// `sgemm_axpby`): 256 threads a block, at most 8192 blocks, which loop over the rest.
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

/// The scalar arguments of the SGEMM signature, alive while a launch builder points at them.
pub(crate) struct Scalars {
    m: i32,
    n: i32,
    k: i32,
    lda: i64,
    ldb: i64,
    ldc: i64,
}

impl Scalars {
    /// `(m, k, n)` must have passed [`check_dims`].
    pub(crate) fn new(
        (m, k, n): (usize, usize, usize),
        a: &DeviceOperand,
        b: &DeviceOperand,
        ldc: usize,
    ) -> Scalars {
        Scalars {
            m: m as i32,
            n: n as i32,
            k: k as i32,
            lda: a.ld as i64,
            ldb: b.ld as i64,
            ldc: ldc as i64,
        }
    }
}

/// Pushes the nine SGEMM arguments `(M, N, K, A, lda, B, ldb, C, ldc)` in order
/// (`SGEMM_PARAMS` in kernels/common.cuh, `SGF_PARAMS` in kernels/sgemm_fast.cu).
pub(crate) fn push_args<'a, 'x: 'a, 'y: 'a, 'z: 'a>(
    builder: &mut LaunchArgs<'a>,
    s: &'a Scalars,
    a: &'a CudaView<'x, f32>,
    b: &'a CudaView<'y, f32>,
    c: &'a mut CudaViewMut<'z, f32>,
) {
    builder
        .arg(&s.m)
        .arg(&s.n)
        .arg(&s.k)
        .arg(a)
        .arg(&s.lda)
        .arg(b)
        .arg(&s.ldb)
        .arg(c)
        .arg(&s.ldc);
}

/// Checks what every launcher relies on: dimensions at least 1 and within `int`, and buffers
/// that hold every element the kernel may index.
pub(crate) fn check_launch(
    (m, k, n): (usize, usize, usize),
    a: &DeviceOperand,
    b: &DeviceOperand,
    c: &CudaViewMut<'_, f32>,
    ldc: usize,
) -> Result<(), GpuDotError> {
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
    Ok(())
}

/// Enqueues `C (m × n, row-major, leading dimension ldc) = op(A) · op(B)` on `stream`.
///
/// `kernel` must be concrete (not `Auto`); `m`, `k`, `n` at least 1.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    kernel: Kernel,
    (m, k, n): (usize, usize, usize),
    a: &DeviceOperand,
    b: &DeviceOperand,
    c: &mut CudaViewMut<'_, f32>,
    ldc: usize,
) -> Result<(), GpuDotError> {
    check_launch((m, k, n), a, b, c, ldc)?;
    let rule = LaunchRule::of(kernel).expect("a one-output-per-thread kernel");
    let func = gpu.function(rule.family, &rule.entry(a.trans, b.trans))?;
    let (bx, by) = rule.block;
    let cfg = LaunchConfig {
        grid_dim: (
            n.div_ceil(bx as usize) as u32,
            m.div_ceil(by as usize).min(MAX_GRID_Y) as u32,
            1,
        ),
        block_dim: (bx, by, 1),
        shared_mem_bytes: 0,
    };
    let scalars = Scalars::new((m, k, n), a, b, ldc);
    let mut builder = stream.launch_builder(&func);
    push_args(&mut builder, &scalars, &a.buf, &b.buf, c);
    // SAFETY: the arguments match the kernels' signature `(int M, int N, int K, const float*
    // A, long long lda, const float* B, long long ldb, float* C, long long ldc)` in order and
    // type (`SGEMM_PARAMS` in kernels/common.cuh); the entry's layout suffix matches
    // `a.trans`/`b.trans`; the buffers hold every element the kernel indexes (asserted above:
    // A covers m × k, B covers k × n, C covers m × n at `ldc`), and the kernels guard every
    // load and store by M, N and K; the grid covers all N columns in x, and the kernels loop
    // over the rows of tiles past gridDim.y; the block shape is the one each kernel's comment
    // names (≤ 1024 threads, matching its `__launch_bounds__`); static shared memory only.
    unsafe { builder.launch(cfg) }.map_err(GpuDotError::at("launching a kernel"))?;
    Ok(())
}

//! Helpers shared by the integration tests, generic over the element type ([`TestElem`]):
//! fresh random inputs, a reference product of higher precision, the rounding bound, and
//! [`both_types!`], which runs one generic test body for `f32` and for `f64`.
#![allow(dead_code)]

use gpu_dot::accuracy::complex::{componentwise, ComplexReference};
use gpu_dot::num_complex::Complex;
use gpu_dot::{device_status, Backend, DeviceStatus, DotOptions, Element, Kernel};

/// Panics, naming the reason, where no CUDA GPU can run the test: a test that needs one never
/// passes by returning early.
pub fn expect_device() {
    if let DeviceStatus::Unavailable(reason) = device_status() {
        panic!("this test needs a CUDA GPU: {reason}");
    }
}

/// The CPU backend and nothing else (the CPU route is ndarray's own `dot`).
pub fn cpu_options() -> DotOptions {
    DotOptions::builtin().backend(Backend::Cpu)
}

/// The GPU backend with `kernel`, the output poisoned with NaN before each launch.
pub fn gpu_options(kernel: Kernel) -> DotOptions {
    DotOptions::builtin()
        .backend(Backend::Gpu)
        .kernel(kernel)
        .poison_output(true)
}

/// Every concrete kernel, and `Auto` (the autotuned register-blocked plans).
pub const KERNELS: [Kernel; 6] = [
    Kernel::Naive,
    Kernel::Tiled16,
    Kernel::Tiled32,
    Kernel::Reg64,
    Kernel::Reg128,
    Kernel::Auto,
];
use ndarray::{Array2, ArrayBase, ArrayView2, Axis, Data, Ix2};
use rand::distr::uniform::SampleUniform;
use rand::{Rng, SeedableRng};

/// Two tests from one generic body `fn NAME<T: TestElem>()`: `NAME::f32` and `NAME::f64`,
/// each with the attributes given (`#[ignore = "needs a CUDA GPU"]` for a GPU test).
///
/// ```ignore
/// both_types!(#[ignore = "needs a CUDA GPU"] every_kernel_on_square_sizes);
/// fn every_kernel_on_square_sizes<T: TestElem>() { ... }
/// ```
#[allow(unused_macros)]
macro_rules! both_types {
    ($(#[$attr:meta])* $name:ident) => {
        mod $name {
            #[test]
            $(#[$attr])*
            fn f32() {
                super::$name::<f32>()
            }

            #[test]
            $(#[$attr])*
            fn f64() {
                super::$name::<f64>()
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use both_types;

/// Runs a generic test body for the complex types: `f32` parts (`c32`) and `f64` parts
/// (`c64`), as [`both_types!`] does for the real ones.
#[allow(unused_macros)]
macro_rules! both_parts {
    ($(#[$attr:meta])* $name:ident) => {
        mod $name {
            #[test]
            $(#[$attr])*
            fn c32() {
                super::$name::<f32>()
            }

            #[test]
            $(#[$attr])*
            fn c64() {
                super::$name::<f64>()
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use both_parts;

/// The worst componentwise ratio of complex `c` to `a · b` (in units of `u·Σ|a||b|`, complex
/// moduli), asserting the reference's Inf and NaN pattern.
pub fn complex_ratio<T: Element>(
    c: ArrayView2<Complex<T>>,
    a: ArrayView2<Complex<T>>,
    b: ArrayView2<Complex<T>>,
    what: &str,
) -> f64 {
    let measure = componentwise(c, &ComplexReference::new(a, b));
    assert_eq!(measure.pattern_mismatches, 0, "{what}: {measure:?}");
    measure.worst
}

/// Asserts that complex `c` is `a · b` within the native bound for inner dimension `k`,
/// `(k + 2)·u·Σ|a||b|` for every element, with the reference's Inf and NaN pattern: a wrong
/// sign, a swapped part, a transposed operand or a missed product is off by far more.
pub fn assert_complex_product<T: Element>(
    c: ArrayView2<Complex<T>>,
    a: ArrayView2<Complex<T>>,
    b: ArrayView2<Complex<T>>,
    what: &str,
) {
    assert_eq!(c.dim(), (a.nrows(), b.ncols()), "{what}: shape");
    let worst = complex_ratio(c, a, b, what);
    let bound = a.ncols() as f64 + 2.0;
    assert!(worst <= bound, "{what}: ratio {worst:.3} above {bound}");
}

/// A `rows × cols` complex matrix with parts uniform in [-1, 1), from a fresh seed.
pub fn random_complex<T: Element>(
    rows: usize,
    cols: usize,
) -> ndarray::Array2<gpu_dot::num_complex::Complex<T>> {
    let seed = fresh_seed();
    let re = gpu_dot::profile::random_matrix_of::<T>(rows, cols, seed);
    let im = gpu_dot::profile::random_matrix_of::<T>(rows, cols, !seed);
    ndarray::Zip::from(&re)
        .and(&im)
        .map_collect(|&re, &im| gpu_dot::num_complex::Complex::new(re, im))
}

/// The full name of a test made by [`both_types!`] for `T` (`NAME::f32`), for running it
/// again in a child process with `--exact`.
pub fn test_name<T: TestElem>(name: &str) -> String {
    format!("{name}::{}", T::DTYPE)
}

/// What the tests need of an element type besides [`Element`]: its epsilon, uniform draws and
/// a reference product well beyond its own precision.
pub trait TestElem: Element + SampleUniform + std::fmt::LowerExp {
    /// The machine epsilon (2⁻²³ or 2⁻⁵²).
    const EPS: f64;

    /// `a · b` in f64, far more precise than a product in this type (see [`reference`]).
    fn reference<S1, S2>(a: &ArrayBase<S1, Ix2>, b: &ArrayBase<S2, Ix2>) -> Array2<f64>
    where
        S1: Data<Elem = Self>,
        S2: Data<Elem = Self>;

    /// One dot product of `x` and `y` in f64, as precise as [`TestElem::reference`]'s.
    fn dot_reference(x: impl IntoIterator<Item = Self>, y: impl IntoIterator<Item = Self>) -> f64;

    /// The value's bits (NaN payloads and the sign of zero included).
    fn bits(self) -> u64;
}

impl TestElem for f32 {
    const EPS: f64 = f32::EPSILON as f64;

    /// A Kahan-compensated f64 sum for small products, ndarray's f64 `dot` (threaded) for
    /// large ones, where f64's own rounding is already far below f32's.
    fn reference<S1, S2>(a: &ArrayBase<S1, Ix2>, b: &ArrayBase<S2, Ix2>) -> Array2<f64>
    where
        S1: Data<Elem = f32>,
        S2: Data<Elem = f32>,
    {
        let (m, k) = a.dim();
        let n = b.ncols();
        let a64 = a.mapv(f64::from);
        if m * k * n > 1 << 26 {
            return a64.dot(&b.mapv(f64::from));
        }
        let b64 = b.t().mapv(f64::from); // n × k, so each dot product walks two rows
        let mut c = Array2::zeros((m, n));
        for i in 0..m {
            let ai = a64.row(i);
            for j in 0..n {
                let bj = b64.row(j);
                let (mut sum, mut comp) = (0.0f64, 0.0f64);
                for p in 0..k {
                    let y = ai[p] * bj[p] - comp;
                    let t = sum + y;
                    comp = (t - sum) - y;
                    sum = t;
                }
                c[[i, j]] = sum;
            }
        }
        c
    }

    /// A plain f64 sum: the products are exact, and the sum's rounding (k·2⁻⁵³ at most) is far
    /// below f32's.
    fn dot_reference(x: impl IntoIterator<Item = f32>, y: impl IntoIterator<Item = f32>) -> f64 {
        x.into_iter()
            .zip(y)
            .map(|(x, y)| f64::from(x) * f64::from(y))
            .sum()
    }

    fn bits(self) -> u64 {
        u64::from(self.to_bits())
    }
}

impl TestElem for f64 {
    const EPS: f64 = f64::EPSILON;

    /// About twice f64 precision, rounded to f64: compensated dot products with FMA (Ogita,
    /// Rump and Oishi's Dot2), on every core for large products.
    fn reference<S1, S2>(a: &ArrayBase<S1, Ix2>, b: &ArrayBase<S2, Ix2>) -> Array2<f64>
    where
        S1: Data<Elem = f64>,
        S2: Data<Elem = f64>,
    {
        dot2::product(a.view(), b.view())
    }

    fn dot_reference(x: impl IntoIterator<Item = f64>, y: impl IntoIterator<Item = f64>) -> f64 {
        let (mut s, mut c) = (0.0, 0.0);
        for (x, y) in x.into_iter().zip(y) {
            dot2::step(&mut s, &mut c, x, y);
        }
        s + c
    }

    fn bits(self) -> u64 {
        self.to_bits()
    }
}

/// A fresh seed per call (time and a counter). `GPU_DOT_TEST_SEED` fixes the time part, so that
/// a test run alone (one test thread) draws the same matrices again.
pub fn fresh_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base = match std::env::var("GPU_DOT_TEST_SEED") {
        Ok(s) => s.parse().expect("GPU_DOT_TEST_SEED is an integer"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    };
    base.wrapping_add(
        COUNTER
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9),
    )
}

/// The first position at which two sequences of elements differ in their bits (their values
/// as `f64`, which keeps every `f32`'s bits), or `None` where they agree bit for bit.
pub fn first_bit_difference<'a, T: Element + 'a>(
    x: impl IntoIterator<Item = &'a T>,
    y: impl IntoIterator<Item = &'a T>,
) -> Option<usize> {
    x.into_iter()
        .zip(y)
        .position(|(x, y)| x.into_f64().to_bits() != y.into_f64().to_bits())
}

/// A value drawn uniformly from `[lo, hi)` in `T`'s own precision.
pub fn uniform<T: TestElem>(rng: &mut impl Rng, lo: f64, hi: f64) -> T {
    rng.random_range(T::from_f64(lo)..T::from_f64(hi))
}

/// A `rows × cols` matrix of uniform values in [-1, 1) from a fresh seed (never all zeros),
/// with every bit of `T`'s precision random.
pub fn random<T: TestElem>(rows: usize, cols: usize) -> Array2<T> {
    let seed = fresh_seed();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let a = Array2::from_shape_simple_fn((rows, cols), || uniform::<T>(&mut rng, -1.0, 1.0));
    assert!(
        rows * cols == 0 || a.iter().any(|&x| x != T::zero()),
        "random input is all zeros (seed {seed})"
    );
    a
}

/// `a · b` in f64, the reference every product is checked against: for `f32` operands an f64
/// product (compensated for small products), for `f64` operands a compensated product of about
/// twice f64 precision. Either is far more precise than the product being checked.
pub fn reference<T, S1, S2>(a: &ArrayBase<S1, Ix2>, b: &ArrayBase<S2, Ix2>) -> Array2<f64>
where
    T: TestElem,
    S1: Data<Elem = T>,
    S2: Data<Elem = T>,
{
    T::reference(a, b)
}

/// ‖c − r‖_F / ‖r‖_F (NaN if `c` holds a NaN, so that a comparison with a tolerance fails).
pub fn rel_err<T: TestElem, S: Data<Elem = T>>(c: &ArrayBase<S, Ix2>, r: &Array2<f64>) -> f64 {
    assert_eq!(c.dim(), r.dim(), "result has the wrong shape");
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (&x, &y) in c.iter().zip(r.iter()) {
        diff += (x.into_f64() - y).powi(2);
        norm += y * y;
    }
    if norm == 0.0 {
        diff.sqrt()
    } else {
        (diff / norm).sqrt()
    }
}

/// `(|a|·|b|)` in f64.
pub fn abs_product<T, S1, S2>(a: &ArrayBase<S1, Ix2>, b: &ArrayBase<S2, Ix2>) -> Array2<f64>
where
    T: TestElem,
    S1: Data<Elem = T>,
    S2: Data<Elem = T>,
{
    a.mapv(|x| x.into_f64().abs())
        .dot(&b.mapv(|x| x.into_f64().abs()))
}

/// Checks `c` against the reference `r` of `a · b`: ‖c − r‖_F must stay within
/// 4·ε·√k·‖|a|·|b|‖_F with ε of `T`, the probabilistic rounding bound of a sum of `k` products
/// in `T` (it scales with |a|·|b|, not with the result, so cancellation in a single dot product
/// does not make it fail, while a wrong index, a skipped step or an unwritten (NaN) element
/// does). Returns the relative error ‖c − r‖_F / ‖r‖_F.
#[track_caller]
pub fn check<T, S, S1, S2>(
    c: &ArrayBase<S, Ix2>,
    a: &ArrayBase<S1, Ix2>,
    b: &ArrayBase<S2, Ix2>,
    r: &Array2<f64>,
    what: &str,
) -> f64
where
    T: TestElem,
    S: Data<Elem = T>,
    S1: Data<Elem = T>,
    S2: Data<Elem = T>,
{
    assert_eq!(c.dim(), r.dim(), "{what}: result has the wrong shape");
    let abs = abs_product(a, b);
    let (mut diff, mut scale) = (0.0f64, 0.0f64);
    for ((&x, &y), &s) in c.iter().zip(r.iter()).zip(abs.iter()) {
        diff += (x.into_f64() - y).powi(2);
        scale += s * s;
    }
    let bound = 4.0 * T::EPS * (a.ncols().max(1) as f64).sqrt() * scale.sqrt();
    assert!(
        diff.sqrt() <= bound,
        "{what} ({}): ‖C − ref‖ = {:.3e} above the bound {bound:.3e} (relative error {:.3e})",
        T::DTYPE,
        diff.sqrt(),
        rel_err(c, r)
    );
    rel_err(c, r)
}

/// Asserts `c` matches the reference of `a · b` (see [`check`]).
#[track_caller]
pub fn assert_close<T, S, S1, S2>(
    c: &ArrayBase<S, Ix2>,
    a: &ArrayBase<S1, Ix2>,
    b: &ArrayBase<S2, Ix2>,
    what: &str,
) where
    T: TestElem,
    S: Data<Elem = T>,
    S1: Data<Elem = T>,
    S2: Data<Elem = T>,
{
    check(c, a, b, &reference(a, b), what);
}

/// A tolerance set for `f32`, scaled to `T`'s precision by ε_T / ε_f32 (a power of two: the
/// tolerance is unchanged for `f32`).
pub fn scaled_tolerance<T: TestElem>(for_f32: f64) -> f64 {
    for_f32 * (T::EPS / f64::from(f32::EPSILON))
}

/// Dot2 (Ogita, Rump and Oishi, 2005): dot products accumulated with an error-free
/// transformation of each product (an FMA) and each addition, as if in twice f64 precision.
mod dot2 {
    use super::*;

    /// Rows of A per block: each row of B read from memory serves this many rows of C.
    const ROWS: usize = 4;
    /// Columns of C per block: the block's sums and compensations stay in the cache.
    const COLS: usize = 256;
    /// Products of fewer multiply-adds are computed on the calling thread alone.
    const THREADED_FROM: usize = 1 << 22;

    /// Adds `x·y` to the compensated sum `s + c`.
    #[inline(always)]
    pub(super) fn step(s: &mut f64, c: &mut f64, x: f64, y: f64) {
        let p = x * y;
        let pe = x.mul_add(y, -p); // exact: p + pe == x·y
        let t = *s + p;
        let z = t - *s;
        *c += pe + ((*s - (t - z)) + (p - z)); // the rounding error of s + p, exact
        *s = t;
    }

    /// `a · b` rounded to f64.
    pub(super) fn product(a: ArrayView2<f64>, b: ArrayView2<f64>) -> Array2<f64> {
        let (m, k) = a.dim();
        let n = b.ncols();
        let (a, b) = (a.as_standard_layout(), b.as_standard_layout());
        let mut c = Array2::zeros((m, n));
        if m == 0 || n == 0 {
            return c;
        }
        let blocks: Vec<_> = c.axis_chunks_iter_mut(Axis(0), ROWS).enumerate().collect();
        let threads = if m * k * n < THREADED_FROM {
            1
        } else {
            std::thread::available_parallelism()
                .map_or(1, |p| p.get())
                .min(blocks.len())
        };
        let queue = std::sync::Mutex::new(blocks);
        let work = || loop {
            let next = queue.lock().unwrap().pop();
            let Some((i, mut rows)) = next else { break };
            let a_rows = a.slice(ndarray::s![i * ROWS..i * ROWS + rows.nrows(), ..]);
            rows_of(a_rows, b.view(), &mut rows);
        };
        std::thread::scope(|s| {
            for _ in 1..threads {
                s.spawn(work);
            }
            work();
        });
        c
    }

    /// Rows of C from the same rows of A (C order) and B (C order).
    fn rows_of(a: ArrayView2<f64>, b: ArrayView2<f64>, c: &mut ndarray::ArrayViewMut2<f64>) {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has the features the function is compiled for (checked above).
            return unsafe { rows_fma(a, b, c) };
        }
        rows_any(a, b, c)
    }

    /// [`rows_any`] compiled for AVX2 and hardware FMA, where the inner loop runs four columns
    /// per instruction.
    ///
    /// # Safety
    ///
    /// The CPU must support AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn rows_fma(
        a: ArrayView2<f64>,
        b: ArrayView2<f64>,
        c: &mut ndarray::ArrayViewMut2<f64>,
    ) {
        rows_any(a, b, c)
    }

    #[inline(always)]
    fn rows_any(a: ArrayView2<f64>, b: ArrayView2<f64>, c: &mut ndarray::ArrayViewMut2<f64>) {
        let (rows, k) = a.dim();
        let n = b.ncols();
        let a = a.as_slice().expect("C order");
        let b = b.as_slice().expect("C order");
        let mut sums = vec![0.0f64; ROWS * COLS];
        let mut comps = vec![0.0f64; ROWS * COLS];
        for j0 in (0..n).step_by(COLS) {
            let width = COLS.min(n - j0);
            sums.fill(0.0);
            comps.fill(0.0);
            for q in 0..k {
                let b_row = &b[q * n + j0..q * n + j0 + width];
                for r in 0..rows {
                    let x = a[r * k + q];
                    let s = &mut sums[r * COLS..r * COLS + width];
                    let e = &mut comps[r * COLS..r * COLS + width];
                    for j in 0..width {
                        step(&mut s[j], &mut e[j], x, b_row[j]);
                    }
                }
            }
            for r in 0..rows {
                for j in 0..width {
                    c[[r, j0 + j]] = sums[r * COLS + j] + comps[r * COLS + j];
                }
            }
        }
    }
}

/// Device memory allocated with cudarc directly, outside the crate, and kept while products
/// run.
pub struct Hog {
    stream: std::sync::Arc<cudarc::driver::CudaStream>,
    chunks: Vec<cudarc::driver::CudaSlice<u8>>,
}

impl Hog {
    /// Allocates device memory in chunks until at most `leave` bytes (give or take one 2 MiB
    /// chunk) are free.
    pub fn fill(ctx: &std::sync::Arc<cudarc::driver::CudaContext>, leave: usize) -> Hog {
        const MIN_CHUNK: usize = 2 << 20;
        let stream = ctx.new_stream().unwrap();
        let mut chunks = Vec::new();
        let mut chunk = 1usize << 30;
        while chunk >= MIN_CHUNK {
            let (free, _) = ctx.mem_get_info().unwrap();
            if free <= leave + MIN_CHUNK {
                break;
            }
            let want = chunk.min(free - leave) / MIN_CHUNK * MIN_CHUNK;
            // SAFETY: the memory is never read or written; it is only held.
            match unsafe { stream.alloc::<u8>(want) } {
                Ok(buf) => {
                    chunks.push(buf);
                    stream.synchronize().unwrap();
                }
                Err(_) => chunk /= 2,
            }
        }
        Hog { stream, chunks }
    }

    pub fn bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.len()).sum()
    }

    /// Frees the memory, and waits until the driver has it back.
    pub fn release(self) {
        let Hog { stream, chunks } = self;
        drop(chunks);
        stream.synchronize().unwrap();
        stream.context().synchronize().unwrap();
    }
}

/// The message of the panic `f` raises (ndarray's shape panics, for comparing texts).
pub fn panic_message(f: impl FnOnce()) -> String {
    let err =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("expected a panic");
    err.downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
        .expect("a panic message")
}

/// A fresh folder under the system's temporary folder (`gpu-dot-{name}-…`, unique within and
/// across processes), removed on drop.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "gpu-dot-{name}-{}-{nanos}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A logger that keeps every record the crate logs (target `gpu_dot…`), for the tests of what
/// it says: install it with `log::set_logger(&common::CAPTURE)`, read [`RECORDS`].
pub struct Capture;

/// The records [`CAPTURE`] kept, with their levels.
pub static RECORDS: std::sync::Mutex<Vec<(log::Level, String)>> = std::sync::Mutex::new(Vec::new());

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, record: &log::Record) {
        if record.target().starts_with("gpu_dot") {
            let mut records = RECORDS.lock().unwrap_or_else(|p| p.into_inner());
            records.push((record.level(), record.args().to_string()));
        }
    }
    fn flush(&self) {}
}

pub static CAPTURE: Capture = Capture;

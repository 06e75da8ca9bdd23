//! What the CPU route allocates: nothing beyond what ndarray's `dot` allocates (issue 70, "No
//! GPU, no cost, in loops too"). A counting global allocator (this test binary is its own
//! process) counts every allocation and its bytes while one product runs, for `dot` and for
//! `gpu_dot`, each after a warm-up call.
//!
//! The products are those of a per-sample training loop over 2048-wide layers (`f32`: a
//! matrix · vector, the outer product of two one-column and one-row matrices, a vector ·
//! matrix) and a 256³ matrix · matrix in `f32` and `f64`, all above the CPU threshold, so
//! that `gpu_dot` goes past its inline threshold check into the router.
//!
//! Two checks, so that the file means something on every machine and fails spuriously on
//! none:
//! - on a machine without a usable GPU (CI, `device_status()` unavailable), `gpu_dot` falls
//!   back to ndarray's `dot` and must allocate exactly what `dot` allocates, in count and
//!   bytes; and `try_gpu_dot_with` with [`Backend::Auto`], whose route reports the device's
//!   error, may allocate one more time (that error's clone), no more. Where a GPU is usable,
//!   the check runs again in a child process from which every GPU is hidden
//!   (`CUDA_VISIBLE_DEVICES` empty);
//! - on every machine, `try_gpu_dot_with` with [`Backend::Cpu`] (whose route,
//!   [`CpuReason::Requested`], holds nothing on the heap) must allocate exactly what `dot`
//!   allocates.
//!
//! Allocations are counted in the whole process, so the tests measure one at a time (a lock)
//! and each product is measured several times, keeping the fewest: a thread of the test
//! harness that allocates during one measurement cannot fail the check.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use gpu_dot::{device_status, Backend, CpuReason, DeviceStatus, DotOptions, GpuDot, Route};
use ndarray::{Array1, Array2};

/// The system allocator, counting allocations (a `realloc` counts as one, of its new size).
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

fn count(bytes: usize) {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's own arguments, so `Counting`
// keeps `System`'s contract; the counting touches atomics only (it never allocates).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires it.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: `ptr` was allocated by this allocator (so by `System`) with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator (so by `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// One measurement at a time: the counters are the process's.
static MEASURING: Mutex<()> = Mutex::new(());

/// What one call allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Allocated {
    allocations: u64,
    bytes: u64,
}

/// What `f` allocates (its result dropped inside), after a warm-up call: the fewest of five
/// measurements.
fn allocated<R>(f: impl Fn() -> R) -> Allocated {
    drop(std::hint::black_box(f()));
    (0..5)
        .map(|_| {
            let (a0, b0) = (
                ALLOCATIONS.load(Ordering::SeqCst),
                BYTES.load(Ordering::SeqCst),
            );
            drop(std::hint::black_box(f()));
            Allocated {
                allocations: ALLOCATIONS.load(Ordering::SeqCst) - a0,
                bytes: BYTES.load(Ordering::SeqCst) - b0,
            }
        })
        .min()
        .expect("five measurements")
}

/// A product's name and its two forms to compare: ndarray's `dot`, and the other.
type Case = (
    &'static str,
    Box<dyn Fn() -> Allocated>,
    Box<dyn Fn() -> Allocated>,
);

/// The products, each as `dot` and as `other` computes it (`other` gets both operands).
fn cases(other: Other) -> Vec<Case> {
    let w = Array2::<f32>::from_shape_fn((2048, 2048), |(i, j)| ((i * 7 + j * 3) % 11) as f32);
    let x = Array1::<f32>::from_shape_fn(2048, |i| (i % 5) as f32 - 2.0);
    let col = x.clone().into_shape_with_order((2048, 1)).unwrap();
    let row = x.clone().into_shape_with_order((1, 2048)).unwrap();
    let a32 = Array2::<f32>::from_shape_fn((256, 256), |(i, j)| ((i + 2 * j) % 7) as f32);
    let a64 = a32.mapv(f64::from);
    let (w2, x2) = (w.clone(), x.clone());
    let (w3, x3) = (w.clone(), x.clone());
    let (a, b) = (a32.clone(), a32.t().to_owned());
    let (c, d) = (a64.clone(), a64.t().to_owned());
    vec![
        (
            "2048 × 2048 matrix · vector, f32",
            Box::new({
                let (w, x) = (w.clone(), x.clone());
                move || allocated(|| w.dot(&x))
            }),
            Box::new(move || allocated(|| other.matrix_vector(&w2, &x2))),
        ),
        (
            "2048 × 1 · 1 × 2048 outer product, f32",
            Box::new({
                let (col, row) = (col.clone(), row.clone());
                move || allocated(|| col.dot(&row))
            }),
            Box::new(move || allocated(|| other.matrix_matrix(&col, &row))),
        ),
        (
            "vector · 2048 × 2048 matrix, f32",
            Box::new({
                let (w, x) = (w.clone(), x.clone());
                move || allocated(|| x.dot(&w))
            }),
            Box::new(move || allocated(|| other.vector_matrix(&x3, &w3))),
        ),
        (
            "256 × 256 · 256 × 256, f32",
            Box::new({
                let (a, b) = (a.clone(), b.clone());
                move || allocated(|| a.dot(&b))
            }),
            Box::new(move || allocated(|| other.matrix_matrix(&a, &b))),
        ),
        (
            "256 × 256 · 256 × 256, f64",
            Box::new({
                let (c, d) = (c.clone(), d.clone());
                move || allocated(|| c.dot(&d))
            }),
            Box::new(move || allocated(|| other.matrix_matrix(&c, &d))),
        ),
    ]
}

/// The form compared with `dot`.
#[derive(Clone, Copy)]
enum Other {
    /// `gpu_dot`, the environment's options.
    GpuDot,
    /// `try_gpu_dot_with` and the CPU backend; the route must say it was asked for.
    CpuBackend,
    /// `try_gpu_dot_with` and the automatic backend without a usable GPU; the route must say
    /// why, so it holds the device's error (one allocation, the reason's clone).
    Unavailable,
}

impl Other {
    fn matrix_matrix<A: gpu_dot::GpuScalar>(self, a: &Array2<A>, b: &Array2<A>) -> Array2<A> {
        match self {
            Other::GpuDot => a.gpu_dot(b),
            Other::CpuBackend => requested(a.try_gpu_dot_with(b, &cpu())),
            Other::Unavailable => unavailable(a.try_gpu_dot_with(b, &auto())),
        }
    }

    fn matrix_vector(self, a: &Array2<f32>, x: &Array1<f32>) -> Array1<f32> {
        match self {
            Other::GpuDot => a.gpu_dot(x),
            Other::CpuBackend => requested(a.try_gpu_dot_with(x, &cpu())),
            Other::Unavailable => unavailable(a.try_gpu_dot_with(x, &auto())),
        }
    }

    fn vector_matrix(self, x: &Array1<f32>, a: &Array2<f32>) -> Array1<f32> {
        match self {
            Other::GpuDot => x.gpu_dot(a),
            Other::CpuBackend => requested(x.try_gpu_dot_with(a, &cpu())),
            Other::Unavailable => unavailable(x.try_gpu_dot_with(a, &auto())),
        }
    }
}

fn cpu() -> DotOptions {
    DotOptions::builtin().backend(Backend::Cpu)
}

fn auto() -> DotOptions {
    DotOptions::builtin().backend(Backend::Auto)
}

/// The result of a product without a usable GPU, whose route must say so.
fn unavailable<C>(p: Result<gpu_dot::Product<C>, gpu_dot::GpuDotError>) -> C {
    let p = p.expect("the automatic backend falls back");
    assert!(
        matches!(p.route, Route::Cpu(CpuReason::GpuUnavailable(_))),
        "{}",
        p.route
    );
    p.c
}

/// The result of a CPU-backend product, whose route must be the one asked for.
fn requested<C>(p: Result<gpu_dot::Product<C>, gpu_dot::GpuDotError>) -> C {
    let p = p.expect("the CPU backend does not fail");
    assert!(
        matches!(p.route, Route::Cpu(CpuReason::Requested)),
        "{}",
        p.route
    );
    p.c
}

/// Measures every case and checks that `other` allocates what `dot` does, but for `extra`
/// allocations more at most (of any size). The caller holds [`MEASURING`].
fn check(other: Other, what: &str, extra: u64) {
    let mut failures = Vec::new();
    for (name, dot, theirs) in cases(other) {
        let (d, o) = (dot(), theirs());
        println!(
            "{name}: dot {} allocations, {} bytes; {what} {} allocations, {} bytes",
            d.allocations, d.bytes, o.allocations, o.bytes
        );
        let within = match extra {
            0 => d == o,
            _ => o.allocations <= d.allocations + extra && o.bytes >= d.bytes,
        };
        if !within {
            failures.push(format!(
                "{name}: {what} allocated {} times, {} bytes; dot {} times, {} bytes",
                o.allocations, o.bytes, d.allocations, d.bytes
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{what} allocates beyond dot:\n{}",
        failures.join("\n")
    );
}

/// The marker a child process of [`without_a_gpu_gpu_dot_allocates_what_dot_allocates`] runs
/// under, with every GPU hidden from it.
const CHILD: &str = "GPU_DOT_TEST_NO_GPU_CHILD";

#[test]
fn without_a_gpu_gpu_dot_allocates_what_dot_allocates() {
    const NAME: &str = "without_a_gpu_gpu_dot_allocates_what_dot_allocates";
    if let DeviceStatus::Ready(d) = device_status() {
        // A GPU is usable here: the check runs again in a child process from which every GPU
        // is hidden (`CUDA_VISIBLE_DEVICES` empty: the driver loads and finds no device).
        assert!(
            std::env::var_os(CHILD).is_none(),
            "the child still sees a GPU ({}) with CUDA_VISIBLE_DEVICES empty",
            d.name
        );
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", NAME, "--nocapture", "--include-ignored"])
            .env(CHILD, "1")
            .env("CUDA_VISIBLE_DEVICES", "")
            .env_remove(gpu_dot::ENV_BACKEND)
            .env_remove(gpu_dot::ENV_MIN_FLOPS)
            .output()
            .expect("the test binary starts again");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        println!("child, GPUs hidden:\n{stdout}{stderr}");
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "the child without a GPU failed ({}):\n{stdout}\n{stderr}",
            out.status
        );
        return;
    }
    let _one_at_a_time = MEASURING.lock().unwrap_or_else(|p| p.into_inner());
    println!("no usable GPU: {}", device_status());
    check(Other::GpuDot, "gpu_dot", 0);
    // The route that reports the device's error holds a clone of it, and nothing more.
    check(
        Other::Unavailable,
        "try_gpu_dot_with (automatic backend)",
        1,
    );
}

#[test]
fn the_cpu_backend_allocates_what_dot_allocates() {
    let _one_at_a_time = MEASURING.lock().unwrap_or_else(|p| p.into_inner());
    check(Other::CpuBackend, "try_gpu_dot_with (CPU backend)", 0);
}

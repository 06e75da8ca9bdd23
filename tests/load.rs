//! Load: many threads multiplying mixed shapes with `gpu_dot` at once, for a bounded time, in
//! each element type (`load_many_threads_mixed_shapes_correct_and_flat_memory::f32` and
//! `::f64`, one after the other: each measures the memory of the whole process and device).
//!
//! On a machine with a CUDA GPU:
//! `cargo test --release --test load -- --include-ignored --nocapture`
//!
//! - `GPU_DOT_LOAD_THREADS` threads (default 32), each first multiplying every shape of
//!   [`SHAPES`] twice (the warm-up: modules compiled, shape classes tuned, workspaces made and
//!   grown), then random ones for `GPU_DOT_LOAD_SECS` seconds (default 20). The shapes are
//!   squares from 64 to 1024, rectangles, GEMV shapes and shapes below the GPU threshold; each
//!   operand is C order, F order (a transposed view) or a strided slice.
//! - Every result is checked: in full against the reference (`common::check`) when
//!   m·k·n ≤ [`FULL_CHECK_MAX`], else on both ends of each dimension, [`SAMPLES`] random
//!   entries, one whole row and one whole column, each against its reference dot product
//!   (`TestElem::dot_reference`) within the worst-case bound of a sum of k products in the
//!   element type, k·ε·Σ|a||b| (it never fails a correct result, whatever the summation order,
//!   and still catches a wrong index or a skipped step). Half the products go through
//!   `try_gpu_dot_with` with the built-in options, whose route must be the GPU above the element
//!   type's threshold and the CPU below it: a GPU failure under load shows up there, where
//!   `gpu_dot` would silently compute on the CPU.
//! - No deadlock: the test fails if it has not finished within the run time plus
//!   [`WATCHDOG_SLACK`].
//! - Memory is flat after the warm-up. At the end of the warm-up and at the end, with every
//!   thread idle and alive, the test reads device memory in use (`total − free` from
//!   `cuMemGetInfo` on the primary context, after a context synchronize so that the
//!   stream-ordered allocator has returned freed blocks) and what the crate's idle workspaces
//!   keep (`gpu_dot::retained_memory`); it then frees those (`gpu_dot::trim`: how much they
//!   keep depends on which shape met which workspace last, not on a leak) and reads device
//!   memory and the resident set (`VmRSS`) again. Between the two trimmed readings, device
//!   memory may grow by at most [`DEVICE_TOLERANCE_MIB`] and the resident set by at most
//!   [`HOST_TOLERANCE`] (or [`HOST_TOLERANCE_MIN_MIB`]). So that `VmRSS` counts memory in use
//!   rather than what glibc's allocator keeps after a free (over a hundred MiB with 64 threads,
//!   varying from run to run), the test fixes glibc's mmap threshold at 256 KiB (every matrix
//!   gets its own mapping, returned on free) and calls `malloc_trim` before reading it; the
//!   page faults this costs lower the products per second somewhat on host-bound shapes.
//! - Printed, one `key=value` record per line: `LOAD: threads=.. products=.. per_sec=..
//!   device_peak_mib=.. rss_peak_mib=..` (products and rate of the timed phase; peaks over the
//!   whole run), `LOAD: per_thread=..`, and `LOAD: at=warm|end device_mib=..
//!   device_retained_mib=.. pinned_retained_mib=.. device_trimmed_mib=.. rss_trimmed_mib=..`.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{both_types, uniform, TestElem};
use gpu_dot::{device_status, flops, CpuReason, DeviceStatus, DotOptions, GpuDot, Route};
use ndarray::{s, Array2, ArrayView2};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The shapes `(m, k, n)`: squares, rectangles, GEMV shapes (one row or one column), and
/// products below the GPU threshold (in `f32`, [`gpu_dot::DEFAULT_MIN_GPU_FLOPS`] = 4 M flops,
/// and in `f64`, [`gpu_dot::DEFAULT_MIN_GPU_FLOPS_F64`] = 3 M: five, up to `(1, 1024, 1024)` at
/// 2.1 M).
const SHAPES: &[(usize, usize, usize)] = &[
    (16, 16, 16),
    (100, 50, 30),
    (63, 65, 67),
    (64, 64, 64),
    (128, 128, 128),
    (255, 17, 513),
    (1, 1024, 1024),
    (160, 160, 160),
    (200, 200, 200),
    (256, 256, 256),
    (384, 384, 384),
    (512, 512, 512),
    (640, 640, 640),
    (768, 768, 768),
    (1000, 1000, 1000),
    (1024, 1024, 1024),
    (1024, 64, 512),
    (64, 256, 2048),
    (2048, 256, 64),
    (33, 1000, 700),
    (777, 129, 65),
    (96, 1024, 96),
    (130, 2000, 129),
    (1000, 8, 1000),
    (1, 4096, 2048),
    (2048, 4096, 1),
];

/// Products of at most this many multiply-adds are checked in full.
const FULL_CHECK_MAX: usize = 1 << 21;
/// Random entries checked in a larger product, besides the ends, a row and a column.
const SAMPLES: usize = 16;
/// How much device memory in use may grow from the end of the warm-up to the end.
const DEVICE_TOLERANCE_MIB: f64 = 64.0;
/// How much the resident set may grow, as a fraction, from the end of the warm-up to the end
/// (but at least [`HOST_TOLERANCE_MIN_MIB`]).
const HOST_TOLERANCE: f64 = 0.10;
/// The smallest growth of the resident set allowed, for small resident sets.
const HOST_TOLERANCE_MIN_MIB: f64 = 16.0;
/// How long past the run time the test may take before it counts as hung.
const WATCHDOG_SLACK: Duration = Duration::from_secs(60);

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not valid")),
        Err(_) => default,
    }
}

/// How an operand is stored and viewed.
#[derive(Debug, Clone, Copy)]
enum Lay {
    /// C order.
    C,
    /// The transposed view of a C-order array (F order).
    F,
    /// Every other column of a C-order array, from its second row (neither order: copied).
    Sliced,
}

struct Operand<T> {
    store: Array2<T>,
    lay: Lay,
}

impl<T: TestElem> Operand<T> {
    fn new(rng: &mut SmallRng, rows: usize, cols: usize) -> Operand<T> {
        let lay = match rng.random_range(0..10) {
            0..5 => Lay::C,
            5..8 => Lay::F,
            _ => Lay::Sliced,
        };
        let (r, c) = match lay {
            Lay::C => (rows, cols),
            Lay::F => (cols, rows),
            Lay::Sliced => (rows + 1, 2 * cols),
        };
        let store = Array2::from_shape_simple_fn((r, c), || uniform::<T>(rng, -1.0, 1.0));
        Operand { store, lay }
    }

    fn view(&self) -> ArrayView2<'_, T> {
        match self.lay {
            Lay::C => self.store.view(),
            Lay::F => self.store.t(),
            Lay::Sliced => self.store.slice(s![1.., ..;2]),
        }
    }
}

/// What a thread did.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    products: usize,
    /// Products through `try_gpu_dot_with` that reported the GPU route.
    gpu_routes: usize,
    /// Products through `try_gpu_dot_with` that reported the CPU, below the threshold.
    cpu_routes: usize,
}

enum Msg {
    Warm,
    Done(usize, Counts),
    Failed(usize, String),
}

/// One product of `shape` on fresh operands in random layouts, checked; half the time, at
/// random, through `try_gpu_dot_with` with the built-in options, whose route is checked too.
fn one_product<T: TestElem>(
    rng: &mut SmallRng,
    (m, k, n): (usize, usize, usize),
    counts: &mut Counts,
) {
    let (ao, bo) = (Operand::<T>::new(rng, m, k), Operand::<T>::new(rng, k, n));
    let (a, b) = (ao.view(), bo.view());
    let what = format!("{} {m}×{k}×{n} ({:?}, {:?})", T::DTYPE, ao.lay, bo.lay);
    let threshold = DotOptions::builtin().threshold(T::DTYPE);
    let c = if rng.random_bool(0.5) {
        let p = a
            .try_gpu_dot_with(&b, &DotOptions::builtin())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        match &p.route {
            Route::Gpu { .. } if flops(m, k, n) >= threshold => counts.gpu_routes += 1,
            Route::Cpu(CpuReason::BelowThreshold { .. }) => counts.cpu_routes += 1,
            other => panic!("{what}: took the route {other}"),
        }
        p.c
    } else {
        a.gpu_dot(&b)
    };
    assert_eq!(c.dim(), (m, n), "{what}: wrong shape");
    if m * k * n <= FULL_CHECK_MAX {
        common::assert_close(&c, &a, &b, &what);
    } else {
        check_entries(rng, &c, a, b, &what);
    }
    counts.products += 1;
}

/// Checks the ends, random entries, one row and one column of `c = a · b`.
fn check_entries<T: TestElem>(
    rng: &mut SmallRng,
    c: &Array2<T>,
    a: ArrayView2<T>,
    b: ArrayView2<T>,
    what: &str,
) {
    let ((m, k), n) = (a.dim(), b.ncols());
    let mut entries = vec![(0, 0), (0, n - 1), (m - 1, 0), (m - 1, n - 1)];
    entries.extend((0..SAMPLES).map(|_| (rng.random_range(0..m), rng.random_range(0..n))));
    let (row, col) = (rng.random_range(0..m), rng.random_range(0..n));
    entries.extend((0..n).map(|j| (row, j)));
    entries.extend((0..m).map(|i| (i, col)));
    for (i, j) in entries {
        let exact = T::dot_reference(a.row(i).iter().copied(), b.column(j).iter().copied());
        let scale: f64 = (a.row(i).iter().zip(b.column(j)))
            .map(|(&x, &y)| (x.into_f64() * y.into_f64()).abs())
            .sum();
        let got = c[[i, j]].into_f64();
        let bound = k as f64 * T::EPS * scale;
        assert!(
            (got - exact).abs() <= bound,
            "{what}: C[{i}, {j}] = {got}, f64 gives {exact} (bound {bound:.3e})"
        );
    }
}

/// Device memory in use on the device, in bytes, after a context synchronize.
fn device_used(ctx: &cudarc::driver::CudaContext) -> usize {
    ctx.synchronize().expect("context synchronize");
    let (free, total) = ctx.mem_get_info().expect("cuMemGetInfo");
    total - free
}

/// Memory at a point where every thread is idle.
struct Memory {
    /// Device memory in use, with the crate's idle workspaces.
    device_kept: usize,
    /// What [`gpu_dot::retained_memory`] reported: (device, page-locked) bytes of idle
    /// workspaces.
    retained: (usize, usize),
    /// Device memory in use after [`gpu_dot::trim`].
    device: usize,
    /// `VmRSS` after [`gpu_dot::trim`].
    rss: usize,
}

impl Memory {
    /// Measures, then frees the idle workspaces (their size depends on which shapes met which
    /// workspace last, not on a leak) and measures again.
    fn measure(ctx: &cudarc::driver::CudaContext) -> Memory {
        let device_kept = device_used(ctx);
        let retained = gpu_dot::retained_memory();
        gpu_dot::trim();
        Memory {
            device_kept,
            retained,
            device: device_used(ctx),
            rss: rss().0,
        }
    }
}

/// `VmRSS` and `VmHWM` of this process, in bytes. The allocator first returns the free memory
/// it caches to the system, so that `VmRSS` counts memory in use (and what fragmentation
/// holds), not what was freed.
fn rss() -> (usize, usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> std::ffi::c_int;
        }
        // SAFETY: glibc's malloc_trim takes any pad and only releases free heap memory.
        unsafe { malloc_trim(0) };
    }
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/self/status"))
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Makes glibc's allocator map each allocation of 256 KiB or more on its own and unmap it on
/// free, instead of keeping freed memory in its arenas (the default threshold adapts upwards
/// to 32 MiB as large blocks are freed).
fn map_large_allocations() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
        }
        const M_MMAP_THRESHOLD: std::ffi::c_int = -3;
        // SAFETY: mallopt only changes the allocator's tuning; 256 KiB is a valid threshold.
        let ok = unsafe { mallopt(M_MMAP_THRESHOLD, 256 << 10) };
        assert_eq!(ok, 1, "mallopt(M_MMAP_THRESHOLD) refused");
    }
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

both_types!(
    #[ignore = "needs a CUDA GPU"]
    load_many_threads_mixed_shapes_correct_and_flat_memory
);
fn load_many_threads_mixed_shapes_correct_and_flat_memory<T: TestElem>() {
    // The memory readings are of the whole process and device: one load test at a time.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let info = match device_status() {
        DeviceStatus::Ready(info) => info,
        DeviceStatus::Unavailable(reason) => panic!("this test needs a CUDA GPU: {reason}"),
    };
    map_large_allocations();
    let threads: usize = env_or("GPU_DOT_LOAD_THREADS", 32);
    let secs: f64 = env_or("GPU_DOT_LOAD_SECS", 20.0);
    assert!(threads >= 1 && secs > 0.0, "nothing to run");
    let run_time = Duration::from_secs_f64(secs);
    let deadline = Instant::now() + run_time + WATCHDOG_SLACK;
    let seed = common::fresh_seed();
    println!(
        "LOAD: device={:?} dtype={} threads={threads} secs={secs} seed={seed}",
        info.name,
        T::DTYPE
    );

    // Peak device memory in use, sampled every 10 ms for the whole run.
    let ctx = cudarc::driver::CudaContext::new(info.ordinal).expect("the primary context");
    let sampling = Arc::new(AtomicBool::new(true));
    let peak = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (ctx, sampling, peak) = (ctx.clone(), sampling.clone(), peak.clone());
        std::thread::spawn(move || {
            while sampling.load(Ordering::Relaxed) {
                let (free, total) = ctx.mem_get_info().expect("cuMemGetInfo");
                peak.fetch_max(total - free, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };

    let go = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let release = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (go, stop, release, tx) = (go.clone(), stop.clone(), release.clone(), tx.clone());
            let spawn = std::thread::Builder::new().name(format!("load-{t}"));
            spawn
                .spawn(move || {
                    let work = || {
                        let mut rng = SmallRng::seed_from_u64(seed.wrapping_add(t as u64));
                        let mut warm = Counts::default();
                        // Two passes: every thread meets every shape twice, so the crate's
                        // reusable buffers have grown to the mix's largest needs.
                        for i in 0..2 * SHAPES.len() {
                            let shape = SHAPES[(i + t) % SHAPES.len()];
                            one_product::<T>(&mut rng, shape, &mut warm);
                        }
                        tx.send(Msg::Warm).unwrap();
                        while !go.load(Ordering::Acquire) {
                            if stop.load(Ordering::Acquire) {
                                return Counts::default();
                            }
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        let mut counts = Counts::default();
                        while !stop.load(Ordering::Acquire) {
                            let shape = SHAPES[rng.random_range(0..SHAPES.len())];
                            one_product::<T>(&mut rng, shape, &mut counts);
                        }
                        counts
                    };
                    // Idle but alive until told, so that memory is measured at the end in the
                    // state it was after the warm-up.
                    let hold = || {
                        while !release.load(Ordering::Acquire) {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    };
                    let msg = match catch_unwind(AssertUnwindSafe(work)) {
                        Ok(counts) => Msg::Done(t, counts),
                        Err(p) => Msg::Failed(
                            t,
                            p.downcast_ref::<String>()
                                .cloned()
                                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                                .unwrap_or_default(),
                        ),
                    };
                    let failed = matches!(msg, Msg::Failed(..));
                    let _ = tx.send(msg);
                    if !failed {
                        hold();
                    }
                })
                .expect("a worker thread")
        })
        .collect();
    drop(tx);

    // Waits for `count` messages of the kind `keep` picks until `until`; fails on a worker's
    // failure, or when the time is up.
    let wait = |count: usize, until: Instant, phase: &str, keep: &mut dyn FnMut(Msg)| {
        for got in 0..count {
            let left = until.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(Msg::Failed(t, why)) => {
                    stop.store(true, Ordering::Release);
                    panic!("thread {t} failed: {why}");
                }
                Ok(msg) => keep(msg),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    stop.store(true, Ordering::Release);
                    panic!("hung: {got} of {count} threads finished the {phase} in time");
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    panic!("a thread ended without reporting during the {phase}")
                }
            }
        }
    };

    let warm_start = Instant::now();
    wait(threads, deadline, "warm-up", &mut |_| {});
    let warm_secs = warm_start.elapsed().as_secs_f64();
    let warm = Memory::measure(&ctx);

    go.store(true, Ordering::Release);
    let start = Instant::now();
    match rx.recv_timeout(run_time) {
        Ok(Msg::Failed(t, why)) => {
            stop.store(true, Ordering::Release);
            panic!("thread {t} failed: {why}");
        }
        Ok(_) => unreachable!("threads report only at the end"),
        Err(_) => {}
    }
    stop.store(true, Ordering::Release);
    let mut per_thread = vec![Counts::default(); threads];
    wait(threads, deadline, "timed run", &mut |msg| {
        if let Msg::Done(t, counts) = msg {
            per_thread[t] = counts;
        }
    });
    let elapsed = start.elapsed().as_secs_f64();
    let end = Memory::measure(&ctx);
    let (_, rss_peak) = rss();
    release.store(true, Ordering::Release);
    for w in workers {
        w.join().expect("a worker reported, then panicked");
    }
    sampling.store(false, Ordering::Relaxed);
    sampler.join().expect("the memory sampler");
    let device_peak = peak.load(Ordering::Relaxed).max(end.device_kept);

    let products: usize = per_thread.iter().map(|c| c.products).sum();
    let gpu_routes: usize = per_thread.iter().map(|c| c.gpu_routes).sum();
    let cpu_routes: usize = per_thread.iter().map(|c| c.cpu_routes).sum();
    println!(
        "LOAD: dtype={} threads={threads} products={products} per_sec={:.1} device_peak_mib={:.0} \
         rss_peak_mib={:.0} secs={elapsed:.2} warmup_secs={warm_secs:.2} gpu_routes={gpu_routes} \
         cpu_routes={cpu_routes}",
        T::DTYPE,
        products as f64 / elapsed,
        mib(device_peak),
        mib(rss_peak),
    );
    let counts: Vec<String> = per_thread.iter().map(|c| c.products.to_string()).collect();
    println!("LOAD: per_thread={}", counts.join(","));
    for (when, m) in [("warm", &warm), ("end", &end)] {
        println!(
            "LOAD: at={when} device_mib={:.1} device_retained_mib={:.1} pinned_retained_mib={:.1} \
             device_trimmed_mib={:.1} rss_trimmed_mib={:.1}",
            mib(m.device_kept),
            mib(m.retained.0),
            mib(m.retained.1),
            mib(m.device),
            mib(m.rss)
        );
    }

    let idle: Vec<_> = (0..threads)
        .filter(|&t| per_thread[t].products == 0)
        .collect();
    assert!(idle.is_empty(), "threads with no product: {idle:?}");
    assert!(gpu_routes > 0, "no product reported the GPU route");
    assert!(
        mib(end.device) <= mib(warm.device) + DEVICE_TOLERANCE_MIB,
        "device memory in use grew from {:.1} MiB after the warm-up to {:.1} MiB",
        mib(warm.device),
        mib(end.device)
    );
    let host_slack = (mib(warm.rss) * HOST_TOLERANCE).max(HOST_TOLERANCE_MIN_MIB);
    assert!(
        mib(end.rss) <= mib(warm.rss) + host_slack,
        "the resident set grew from {:.1} MiB after the warm-up to {:.1} MiB",
        mib(warm.rss),
        mib(end.rss)
    );
}

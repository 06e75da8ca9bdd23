//! The host crew: a few persistent threads that copy between user arrays and page-locked
//! staging memory while the calling thread drives the device.
//!
//! A product's host copies are many small pieces (tens of KiB each) that become ready one
//! after another as copies land. A general thread pool answers each job with a wake-up chain
//! and a blocking join; the crew instead runs one *job* at a time, a closure every helper calls
//! with its index, and the caller (the conductor) goes on driving the device while the helpers
//! work. The first few helpers poll for the next job for [`IDLE_SPIN`] after each one before
//! they park, so back-to-back products (a training loop) find them awake; parked helpers are
//! woken in a tree (each wakes two more), so the caller pays for one wake-up, not sixteen.
//!
//! The crew serves one job at a time: a product that finds it busy (another thread's product)
//! runs without helpers, its conductor doing the pieces itself.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Mutex, OnceLock};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

pub use crate::settings::ENV_HOST_THREADS;

/// Most helpers the crew starts: past about sixteen threads host copies are limited by memory
/// bandwidth, not by threads.
pub(crate) const MAX_HELPERS: usize = 15;

/// How long an idle helper polls for the next job before it parks.
const IDLE_SPIN: Duration = Duration::from_micros(200);
/// Helpers that poll after a job: the ones small products use. The others park at once, so
/// that between products the crew takes little CPU from the caller's own threads; waking them
/// costs microseconds, which only products large enough to want them pay.
const POLLING_HELPERS: usize = 8;

/// A job as the helpers see it: the closure, its lifetime erased (see [`Crew::run`]).
#[derive(Clone, Copy)]
struct JobRef(*const (dyn Fn(usize) + Sync + 'static));

// SAFETY: the pointee is `Sync` (a `dyn Fn + Sync`), and `Crew::run` keeps it alive until every
// helper has left it; the pointer itself is plain data.
unsafe impl Send for JobRef {}

struct Shared {
    /// Bumped when a job is published.
    epoch: AtomicU64,
    /// Whether the current job may still be entered.
    open: AtomicBool,
    /// Helpers the current job asks for (helpers with a smaller index take part).
    wanted: AtomicUsize,
    /// Helpers inside the current job.
    active: AtomicUsize,
    /// Set when a helper panicked inside the current job.
    panicked: AtomicBool,
    job: Mutex<Option<JobRef>>,
    /// Held by the thread whose job the crew is running.
    busy: AtomicBool,
    threads: OnceLock<Vec<Thread>>,
}

/// The process's crew.
pub(crate) struct Crew {
    shared: &'static Shared,
    helpers: usize,
}

static CREW: OnceLock<Crew> = OnceLock::new();

/// Most shares of one product split across devices that get a crew of their own.
const MAX_SHARES: usize = 8;

/// The crews of shares 1, 2, ... of a split product (share 0 uses the process's crew).
static SHARE_CREWS: [OnceLock<Crew>; MAX_SHARES - 1] = [const { OnceLock::new() }; MAX_SHARES - 1];

thread_local! {
    /// The share of a split product this thread drives, `(index, of)`; `(0, 1)` otherwise.
    static SHARE: std::cell::Cell<(usize, usize)> = const { std::cell::Cell::new((0, 1)) };
}

/// The crew of the calling thread: the process's crew, or, on a thread driving share
/// `i > 0` of a product split across devices, that share's own crew, so that every device's
/// pipeline has helpers at once.
pub(crate) fn crew() -> &'static Crew {
    let (index, of) = SHARE.with(|s| s.get());
    if of > 1 && (1..MAX_SHARES).contains(&index) {
        return SHARE_CREWS[index - 1].get_or_init(|| Crew::start(share_of_helpers(of)));
    }
    CREW.get_or_init(|| Crew::start(helper_count()))
}

/// The helpers each of `of` shares may use: the configured helpers ([`ENV_HOST_THREADS`]), or
/// else one fewer than the cores, divided among the shares, at most [`MAX_HELPERS`] each (a
/// machine with several GPUs usually has the cores for a full crew per device).
fn share_of_helpers(of: usize) -> usize {
    // Read once: this runs for every job of a split product.
    static POOL: OnceLock<usize> = OnceLock::new();
    let pool = *POOL.get_or_init(|| {
        configured_count().unwrap_or_else(|| {
            thread::available_parallelism()
                .map_or(1, |n| n.get())
                .saturating_sub(1)
        })
    });
    (pool / of.max(1)).clamp(1, MAX_HELPERS)
}

/// Runs `f` as share `index` of `of` of a product split across devices (see [`crew`]): its
/// host copies use that share's crew, with at most its part of the helpers.
pub(crate) fn as_share<R>(index: usize, of: usize, f: impl FnOnce() -> R) -> R {
    struct Restore((usize, usize));
    impl Drop for Restore {
        fn drop(&mut self) {
            SHARE.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(SHARE.with(|s| s.replace((index, of))));
    f()
}

fn helper_count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(configured_helpers)
}

/// The helper count [`ENV_HOST_THREADS`] sets, if it is set to an integer. Read once; another
/// value is ignored, with a warning.
fn configured_count() -> Option<usize> {
    static COUNT: OnceLock<Option<usize>> = OnceLock::new();
    *COUNT.get_or_init(|| {
        let value = crate::settings::var(ENV_HOST_THREADS)?;
        parse_count(&value)
            .map_err(|e| log::warn!("{e}; using the default helper count"))
            .ok()
    })
}

/// A value of [`ENV_HOST_THREADS`]: a number of helper threads.
pub(crate) fn parse_count(value: &str) -> Result<usize, crate::error::GpuDotError> {
    value
        .trim()
        .parse()
        .map_err(|_| crate::settings::HOST_THREADS.invalid(value))
}

fn configured_helpers() -> usize {
    configured_count()
        .unwrap_or_else(|| {
            thread::available_parallelism()
                .map_or(1, |n| n.get())
                .saturating_sub(1)
        })
        .min(MAX_HELPERS)
}

impl Crew {
    fn start(helpers: usize) -> Crew {
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            epoch: AtomicU64::new(0),
            open: AtomicBool::new(false),
            wanted: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            job: Mutex::new(None),
            busy: AtomicBool::new(false),
            threads: OnceLock::new(),
        }));
        let mut threads = Vec::with_capacity(helpers);
        for index in 0..helpers {
            let spawned = thread::Builder::new()
                .name(format!("gpu-dot-host-{index}"))
                .spawn(move || helper_loop(shared, index, 0));
            match spawned {
                Ok(handle) => threads.push(handle.thread().clone()),
                // Fewer helpers (or none) only make copies slower.
                Err(_) => break,
            }
        }
        let helpers = threads.len();
        let _ = shared.threads.set(threads);
        Crew { shared, helpers }
    }

    /// Helper threads the crew has.
    pub(crate) fn helpers(&self) -> usize {
        self.helpers
    }

    /// Runs `conduct` on the calling thread while up to `helpers` helpers each call
    /// `work(index)`; returns once `conduct` has returned and every helper has left `work`.
    ///
    /// `work` must return once there is nothing left for it to do (the caller's protocol says
    /// when: typically when every piece is claimed, or when `conduct` has given up). When the
    /// crew is busy with another thread's job, or `helpers` is 0, `conduct` runs alone and
    /// `work` is not called. `conduct` receives a [`Watch`] that reports whether a helper
    /// panicked inside `work`.
    pub(crate) fn run<R>(
        &self,
        helpers: usize,
        work: &(dyn Fn(usize) + Sync),
        conduct: impl FnOnce(&Watch) -> R,
    ) -> R {
        let (_, of) = SHARE.with(|s| s.get());
        let mut helpers = helpers.min(self.helpers);
        if of > 1 {
            helpers = helpers.min(share_of_helpers(of));
        }
        if helpers == 0
            || self
                .shared
                .busy
                .compare_exchange(false, true, SeqCst, SeqCst)
                .is_err()
        {
            return conduct(&Watch { shared: None });
        }
        let shared = self.shared;
        // SAFETY: the erased lifetime never outlives `work`: the guard below closes the job
        // and waits until no helper is inside it before this function returns or unwinds,
        // and helpers only call the pointer between incrementing `active` and checking that
        // the job is still open (see `helper_loop`).
        let erased: *const (dyn Fn(usize) + Sync + 'static) = unsafe {
            std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), _>(
                work as *const (dyn Fn(usize) + Sync),
            )
        };
        *shared.job.lock().unwrap_or_else(|p| p.into_inner()) = Some(JobRef(erased));
        shared.panicked.store(false, SeqCst);
        shared.wanted.store(helpers, SeqCst);
        shared.open.store(true, SeqCst);
        shared.epoch.fetch_add(1, SeqCst);
        if let Some(first) = shared.threads.get().and_then(|t| t.first()) {
            first.unpark();
        }

        struct Close(&'static Shared);
        impl Drop for Close {
            fn drop(&mut self) {
                let shared = self.0;
                shared.open.store(false, SeqCst);
                let mut waited = 0u32;
                while shared.active.load(SeqCst) != 0 {
                    pause(&mut waited);
                }
                *shared.job.lock().unwrap_or_else(|p| p.into_inner()) = None;
                shared.busy.store(false, SeqCst);
            }
        }
        let _close = Close(shared);
        conduct(&Watch {
            shared: Some(shared),
        })
    }
}

/// What the conductor can see of its helpers while a job runs.
pub(crate) struct Watch {
    shared: Option<&'static Shared>,
}

impl Watch {
    /// Whether a helper panicked inside the job (its piece of work is then unfinished).
    pub(crate) fn helper_panicked(&self) -> bool {
        self.shared.is_some_and(|s| s.panicked.load(SeqCst))
    }

    /// Whether helpers were called for the job (not when the crew was busy with another
    /// thread's job, or none were asked for).
    pub(crate) fn has_helpers(&self) -> bool {
        self.shared.is_some()
    }
}

/// Spins, then yields, then sleeps briefly: for waits of unknown length on other threads.
/// Uncontended, the spinning and yielding cover about the first 0.1 ms (a small product's
/// whole wait for the device); longer waits sleep, so that many threads waiting at once leave
/// the cores to threads with work.
pub(crate) fn pause(waited: &mut u32) {
    *waited = waited.saturating_add(1);
    match *waited {
        0..=64 => std::hint::spin_loop(),
        65..=512 => thread::yield_now(),
        _ => thread::sleep(Duration::from_micros(20)),
    }
}

/// A helper's life: wait for a job newer than `seen` (the epoch when it was spawned: a job
/// published before the thread first runs is still seen), take part, repeat.
fn helper_loop(shared: &'static Shared, index: usize, mut seen: u64) {
    loop {
        // Wait for the next job: poll for a while (the first few helpers), then park.
        let idle_since = Instant::now();
        let mut polling = index < POLLING_HELPERS;
        let mut polls = 0u32;
        loop {
            let epoch = shared.epoch.load(SeqCst);
            if epoch != seen {
                seen = epoch;
                break;
            }
            polls = polls.wrapping_add(1);
            if polling && polls.is_multiple_of(256) {
                polling = idle_since.elapsed() < IDLE_SPIN;
            }
            if polling {
                std::hint::spin_loop();
            } else {
                thread::park();
            }
        }
        let wanted = shared.wanted.load(SeqCst);
        if index >= wanted {
            continue;
        }
        if let Some(threads) = shared.threads.get() {
            for child in [2 * index + 1, 2 * index + 2] {
                if child < wanted {
                    if let Some(t) = threads.get(child) {
                        t.unpark();
                    }
                }
            }
        }
        shared.active.fetch_add(1, SeqCst);
        if shared.open.load(SeqCst) && shared.epoch.load(SeqCst) == seen {
            let job = *shared.job.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(JobRef(work)) = job {
                // SAFETY: the job is open and this helper is counted in `active`, so
                // `Crew::run` has not returned and the closure is alive (see there).
                let work = unsafe { &*work };
                if catch_unwind(AssertUnwindSafe(|| work(index))).is_err() {
                    shared.panicked.store(true, SeqCst);
                }
            }
        }
        shared.active.fetch_sub(1, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn helpers_share_a_job_and_the_conductor_outlives_it() {
        let crew = Crew::start(3);
        for round in 0..50 {
            let next = AtomicUsize::new(0);
            let done = AtomicUsize::new(0);
            let total = 1000 + round;
            let claim = || {
                let mut mine = 0;
                while next.fetch_add(1, SeqCst) < total {
                    done.fetch_add(1, SeqCst);
                    mine += 1;
                }
                mine
            };
            let work = |_: usize| {
                claim();
            };
            let by_conductor = crew.run(3, &work, |watch| {
                let mine = claim();
                let mut waited = 0;
                while done.load(SeqCst) < total {
                    pause(&mut waited);
                }
                assert!(!watch.helper_panicked());
                mine
            });
            assert_eq!(done.load(SeqCst), total);
            assert!(by_conductor <= total);
        }
    }

    #[test]
    fn a_busy_crew_lets_the_conductor_work_alone() {
        let crew = Crew::start(2);
        let calls = AtomicUsize::new(0);
        let work = |_: usize| {
            calls.fetch_add(1, SeqCst);
        };
        crew.run(2, &work, |_| {
            // A second job while the first runs: no helpers for it.
            let inner_calls = AtomicUsize::new(0);
            let inner = |_: usize| {
                inner_calls.fetch_add(1, SeqCst);
            };
            crew.run(2, &inner, |watch| assert!(!watch.helper_panicked()));
            assert_eq!(inner_calls.load(SeqCst), 0);
        });
    }

    #[test]
    fn a_panicking_helper_is_reported() {
        let crew = Crew::start(1);
        let work = |_: usize| panic!("a helper's piece failed");
        let seen = crew.run(1, &work, |watch| {
            let start = Instant::now();
            while !watch.helper_panicked() && start.elapsed() < Duration::from_secs(10) {
                thread::yield_now();
            }
            watch.helper_panicked()
        });
        assert!(seen);
    }
}

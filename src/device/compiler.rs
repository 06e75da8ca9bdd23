//! NVRTC compilations, each made once per process whoever asks: in the foreground for a caller
//! that waits, or on a background thread for one that computes elsewhere meanwhile (an `Auto`
//! product goes to the CPU while its kernels compile). A compilation is keyed by the exact
//! source, options and architecture, and needs no context, so it outlives a context rebuild;
//! its CUBIN is written to the on-disk cache (atomically: a process that exits mid-compile
//! leaves no entry behind) and kept for the contexts that load it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use once_cell::sync::{Lazy, OnceCell};

use crate::device::cache::{self, fnv1a};
use crate::error::GpuDotError;

/// A compiled CUBIN and the milliseconds NVRTC took, or NVRTC's error.
pub(crate) type Outcome = Result<(Arc<Vec<u8>>, f64), GpuDotError>;

/// One compilation, started or finished.
struct Job {
    outcome: OnceCell<Outcome>,
}

static JOBS: Lazy<Mutex<HashMap<String, Arc<Job>>>> = Lazy::new(|| Mutex::new(HashMap::new()));

static COMPILATIONS: AtomicUsize = AtomicUsize::new(0);
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// NVRTC compilations made by this process so far (each module is compiled at most once).
pub(crate) fn compilations() -> usize {
    COMPILATIONS.load(Ordering::SeqCst)
}

/// Compilations running now, in the foreground or the background.
pub(crate) fn in_flight() -> usize {
    IN_FLIGHT.load(Ordering::SeqCst)
}

/// What one module's compilation is.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub(crate) family: &'static str,
    pub(crate) source: String,
    pub(crate) options: Vec<String>,
    pub(crate) arch: String,
}

impl Request {
    fn key(&self) -> String {
        format!(
            "{} {} {:016x} {}",
            self.family,
            self.arch,
            fnv1a(self.source.as_bytes()),
            self.options.join(" ")
        )
    }

    fn job(&self) -> (Arc<Job>, bool) {
        let mut jobs = JOBS.lock().unwrap_or_else(|p| p.into_inner());
        let mut fresh = false;
        let job = jobs
            .entry(self.key())
            .or_insert_with(|| {
                fresh = true;
                Arc::new(Job {
                    outcome: OnceCell::new(),
                })
            })
            .clone();
        (job, fresh)
    }

    /// Runs NVRTC, counts it and writes the CUBIN to the disk cache. The caller counted it in
    /// flight.
    fn run(&self) -> Outcome {
        let start = Instant::now();
        let cubin = cache::compile(self.family, &self.source, &self.options);
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        let cubin = cubin?;
        COMPILATIONS.fetch_add(1, Ordering::SeqCst);
        let ms = start.elapsed().as_secs_f64() * 1e3;
        if let Some(entry) =
            cache::Entry::for_module(self.family, &self.source, &self.options, &self.arch)
        {
            // A cache that cannot be written only means compiling again next time.
            let _ = entry.write(&cubin);
        }
        Ok((Arc::new(cubin), ms))
    }

    /// The CUBIN, compiling it now unless another thread is (then waiting for that one).
    pub(crate) fn compile(&self) -> Outcome {
        let (job, _) = self.job();
        job.outcome
            .get_or_init(|| {
                IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
                self.run()
            })
            .clone()
    }

    /// The CUBIN if its compilation has finished, else `None`, having started it on a
    /// background thread if nothing compiles it yet.
    pub(crate) fn compile_in_background(&self) -> Option<Outcome> {
        let (job, fresh) = self.job();
        if let Some(done) = job.outcome.get() {
            return Some(done.clone());
        }
        if fresh {
            hold_exit_for_compilations();
            // Counted before the thread starts, so that a caller sees it at once.
            IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
            let request = self.clone();
            log::info!(
                "compiling the {} kernels for {} on a background thread",
                request.family,
                request.arch
            );
            let spawned = std::thread::Builder::new()
                .name(format!("gpu-dot nvrtc {}", self.family))
                .spawn(move || {
                    let mut ran = false;
                    let outcome = job.outcome.get_or_init(|| {
                        ran = true;
                        request.run()
                    });
                    if !ran {
                        // A waiting caller compiled it first (and counted its own run).
                        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
                    }
                    match outcome {
                        Ok((_, ms)) => log::info!(
                            "the {} kernels for {} compiled in {:.1} s",
                            request.family,
                            request.arch,
                            ms / 1e3
                        ),
                        Err(e) => log::warn!("{e}"),
                    }
                });
            if let Err(e) = spawned {
                // No thread: forget the job, so that the next caller starts it again (or, when
                // it waits, compiles in the foreground).
                IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
                log::debug!("no background compilation thread: {e}");
                JOBS.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&self.key());
            }
        }
        None
    }

    /// The finished compilation's outcome, if any, without starting one (for the tests: a
    /// context takes a finished one through [`Request::compile`] or
    /// [`Request::compile_in_background`]).
    #[cfg(test)]
    fn finished(&self) -> Option<Outcome> {
        let jobs = JOBS.lock().unwrap_or_else(|p| p.into_inner());
        jobs.get(&self.key()).and_then(|j| j.outcome.get().cloned())
    }
}

/// Makes the process, once it exits, first wait (up to five minutes) for the background
/// compilations in flight: a process that leaves while NVRTC compiles on another thread
/// would otherwise run NVRTC's exit-time teardown under that thread (a crash at exit).
/// Registered once, after NVRTC is loaded: exit handlers run in the reverse order of their
/// registration, so this one runs before any the library registered when it was loaded.
fn hold_exit_for_compilations() {
    #[cfg(target_os = "linux")]
    {
        static HOOK: std::sync::Once = std::sync::Once::new();
        HOOK.call_once(|| {
            // Loads NVRTC if nothing has yet (a context exists, so the library was found).
            let _ = nvrtc_version();
            extern "C" fn wait_for_compilations() {
                let deadline = Instant::now() + std::time::Duration::from_secs(300);
                while IN_FLIGHT.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            }
            // SAFETY: `wait_for_compilations` is a plain `extern "C" fn()` that cannot
            // unwind (it only reads an atomic and sleeps), valid for the life of the process.
            unsafe { libc::atexit(wait_for_compilations) };
        });
    }
}

/// The version of the NVRTC library loaded, as `major.minor`.
pub fn nvrtc_version() -> Option<String> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: nvrtcVersion only writes the two integers it is given.
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .ok()?;
    Some(format!("{major}.{minor}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::cache::nvrtc_options;

    /// Runs where NVRTC is on the library path (no GPU or driver needed):
    /// `cargo test --lib compiler -- --ignored`.
    #[test]
    #[ignore = "needs NVRTC (libnvrtc on the library path)"]
    fn one_compilation_serves_a_background_start_and_a_waiting_caller() {
        // No disk cache: its key asks the driver for its version.
        std::env::set_var(crate::device::cache::ENV_CACHE_DIR, "off");
        let request = Request {
            family: "compiler_test",
            source: r#"extern "C" __global__ void k(float* x) { x[threadIdx.x] = 1.0f; }"#
                .to_string(),
            options: nvrtc_options("sm_80"),
            arch: "sm_80".to_string(),
        };
        let before = compilations();
        assert!(request.finished().is_none());
        assert!(
            request.compile_in_background().is_none(),
            "started, not done"
        );
        // The waiting caller gets the background thread's compilation, not a second one.
        let (cubin, ms) = request.compile().expect("a CUBIN");
        assert_eq!(&cubin[..4], b"\x7fELF");
        assert!(ms > 0.0);
        assert!(request.finished().is_some());
        assert!(request.compile_in_background().is_some());
        let again = request.compile().expect("the same CUBIN");
        assert!(Arc::ptr_eq(&cubin, &again.0));
        assert_eq!(compilations(), before + 1);

        let broken = Request {
            family: "compiler_test_broken",
            source: "this is not CUDA".to_string(),
            ..request.clone()
        };
        assert!(broken.compile_in_background().is_none());
        match broken.compile() {
            Err(GpuDotError::Compile { kernel, log }) => {
                assert_eq!(kernel, "compiler_test_broken");
                assert!(!log.is_empty());
            }
            other => panic!("expected the Compile error, got {other:?}"),
        }
        // The background thread finishes (and uncounts itself) once the outcome is set.
        let start = std::time::Instant::now();
        while in_flight() > 0 && start.elapsed().as_secs() < 60 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(in_flight(), 0);
    }
}

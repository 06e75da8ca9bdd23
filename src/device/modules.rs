//! A context's module table: the kernel families it has loaded, each from the prebuilt
//! CUBINs, the disk cache or NVRTC (compiled at most once in the process), with what each
//! cost on first use, and the families NVRTC rejected.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::Ptx;
use once_cell::sync::OnceCell;

use crate::device::cache::{self, nvrtc_options};
use crate::device::compiler::Request;
use crate::device::prebuilt;
use crate::error::GpuDotError;

/// A module a context can load: one kernel family of the engine's table, described by what
/// the device layer needs to compile, cache and load it.
pub(crate) trait ModuleSpec: Copy {
    /// Its slot in a context's module table: distinct per module, below [`MODULE_SLOTS`].
    fn slot(self) -> usize;
    /// Its name, e.g. "sgemm_fast".
    fn name(self) -> &'static str;
    /// The source NVRTC compiles.
    fn source(self) -> String;
    /// The architecture it is compiled for on a device of architecture `arch` (`sm_XY`).
    fn arch(self, arch: &str) -> String;
    /// Its entry points on a device of compute capability `sm` (`major·10 + minor`).
    fn entries(self, sm: u32) -> Vec<String>;
    /// Dynamic shared memory `entry` needs raised above the default 48 KiB limit.
    fn shared_bytes(self, entry: &str) -> Option<u32>;
}

/// How many modules a context can hold.
pub(crate) const MODULE_SLOTS: usize = 8;

/// Whether a module is ready to run on a context, as [`Gpu::prepare`](crate::device::context::Gpu::prepare) finds it.
#[derive(Debug, Clone)]
pub(crate) enum Readiness {
    /// Loaded (now or before): its kernels can be launched.
    Ready,
    /// NVRTC is compiling it on a background thread.
    Compiling,
}

/// The first-use costs of one kernel family's module.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ModuleLoad {
    /// The family, e.g. "tiled".
    pub family: &'static str,
    /// Whether it came from the CUBINs the crate ships (`kernels/prebuilt/`), compiled ahead of
    /// time for the device's architecture.
    pub prebuilt: bool,
    /// Whether it was read from the on-disk kernel cache
    /// ([`kernel_cache_dir`](crate::kernel_cache_dir)) instead of compiled by NVRTC.
    pub cached: bool,
    /// Milliseconds NVRTC took to compile it (in the foreground or on a background thread);
    /// 0 when it was prebuilt or came from the cache.
    pub nvrtc_ms: f64,
    /// Milliseconds the driver took to load it and look up its entry points, plus the time to
    /// decompress a prebuilt CUBIN or to read and check a cache file.
    pub load_ms: f64,
}

struct LoadedModule {
    _module: Arc<CudaModule>,
    functions: HashMap<String, CudaFunction>,
    cost: ModuleLoad,
}

/// The modules of one context, by [`ModuleSpec::slot`].
pub(crate) struct Modules {
    ctx: Arc<CudaContext>,
    /// The device's architecture (`sm_XY`) and compute capability (`major·10 + minor`).
    arch: String,
    sm: u32,
    loaded: [OnceCell<LoadedModule>; MODULE_SLOTS],
    /// A family NVRTC rejected: kept, so that later products fall back at once instead of
    /// compiling again.
    rejected: [OnceCell<GpuDotError>; MODULE_SLOTS],
    /// A family whose prebuilt CUBIN the driver refused on this context.
    prebuilt_refused: [AtomicBool; MODULE_SLOTS],
}

impl Modules {
    /// An empty table for `ctx`, a device of compute capability `(major, minor)`.
    pub(crate) fn new(ctx: Arc<CudaContext>, (major, minor): (i32, i32)) -> Modules {
        Modules {
            ctx,
            arch: format!("sm_{major}{minor}"),
            sm: (major.max(0) * 10 + minor.max(0)) as u32,
            loaded: Default::default(),
            rejected: Default::default(),
            prebuilt_refused: Default::default(),
        }
    }

    /// What each module loaded so far cost on first use.
    pub(crate) fn loads(&self) -> Vec<ModuleLoad> {
        self.loaded
            .iter()
            .filter_map(|m| m.get().map(|m| m.cost.clone()))
            .collect()
    }

    /// The entry point `entry` of `family`, loading the family on first use: from the
    /// prebuilt CUBINs, the disk cache or a finished background compilation, else compiled by
    /// NVRTC now (or, when a background thread is compiling it, once that one finishes).
    pub(crate) fn function(
        &self,
        family: impl ModuleSpec,
        entry: &str,
    ) -> Result<CudaFunction, GpuDotError> {
        let loaded = self.module(family, true)?.expect("waited for");
        loaded
            .functions
            .get(entry)
            .cloned()
            .ok_or(GpuDotError::Compile {
                kernel: family.name(),
                log: format!("the module has no entry point {entry}"),
            })
    }

    /// Loads `family` (waiting for NVRTC if it must be compiled) and says what its first use
    /// cost.
    pub(crate) fn load(&self, family: impl ModuleSpec) -> Result<ModuleLoad, GpuDotError> {
        Ok(self.module(family, true)?.expect("waited for").cost.clone())
    }

    /// Makes `family` ready without waiting on NVRTC: loads it when it is prebuilt, cached or
    /// compiled already, else starts its compilation on a background thread (once) and says
    /// so. An NVRTC failure is the typed [`GpuDotError::Compile`] with NVRTC's log.
    pub(crate) fn prepare(&self, family: impl ModuleSpec) -> Result<Readiness, GpuDotError> {
        Ok(match self.module(family, false)? {
            Some(_) => Readiness::Ready,
            None => Readiness::Compiling,
        })
    }

    /// The loaded module of `family`, loading it if need be; `None` when it must be compiled
    /// and `wait` is false (its compilation then runs on a background thread).
    fn module(
        &self,
        family: impl ModuleSpec,
        wait: bool,
    ) -> Result<Option<&LoadedModule>, GpuDotError> {
        let i = family.slot();
        if let Some(e) = self.rejected[i].get() {
            return Err(e.clone());
        }
        if let Some(loaded) = self.loaded[i].get() {
            return Ok(Some(loaded));
        }
        let arch = family.arch(&self.arch);
        let request = Request {
            family: family.name(),
            source: family.source(),
            options: nvrtc_options(&arch),
            arch,
        };
        let quick = self.load_quick(family, &request);
        let compiled = match quick {
            Some(Ok(loaded)) => return Ok(Some(self.keep(i, loaded))),
            // A cached CUBIN the driver refused, or none: the compile queue's CUBIN, compiled
            // now, or already by another thread (finished, or waited for).
            Some(Err(_)) | None if wait => request.compile(),
            Some(Err(_)) | None => match request.compile_in_background() {
                Some(outcome) => outcome,
                None => return Ok(None),
            },
        };
        let outcome = compiled.and_then(|(cubin, nvrtc_ms)| {
            let start = Instant::now();
            let mut loaded = self.link(family, cubin.to_vec())?;
            loaded.cost.nvrtc_ms = nvrtc_ms;
            loaded.cost.load_ms = start.elapsed().as_secs_f64() * 1e3;
            Ok(loaded)
        });
        match outcome {
            Ok(loaded) => Ok(Some(self.keep(i, loaded))),
            Err(e) => {
                if matches!(e, GpuDotError::Compile { .. }) {
                    let _ = self.rejected[i].set(e.clone());
                }
                Err(e)
            }
        }
    }

    /// Stores a loaded module in slot `i` (or keeps the one another thread stored first).
    fn keep(&self, i: usize, loaded: LoadedModule) -> &LoadedModule {
        let _ = self.loaded[i].set(loaded);
        self.loaded[i].get().expect("set above")
    }

    /// Loads `family` without NVRTC: its prebuilt CUBIN, else its disk-cache entry. `None` when
    /// there is none (a finished compilation is the compile queue's to give); an error when the
    /// driver refused the cached one.
    fn load_quick(
        &self,
        family: impl ModuleSpec,
        request: &Request,
    ) -> Option<Result<LoadedModule, GpuDotError>> {
        let start = Instant::now();
        let ms = |since: Instant| since.elapsed().as_secs_f64() * 1e3;
        let refused = &self.prebuilt_refused[family.slot()];
        let image = prebuilt::find(request.family, &request.source, &request.arch)
            .filter(|_| crate::device::overrides::prebuilt_allowed())
            .filter(|_| !refused.load(Ordering::Relaxed))
            .and_then(|image| image.cubin());
        if let Some(cubin) = image {
            match self.link(family, cubin) {
                Ok(mut loaded) => {
                    log::debug!(
                        "the {} kernels for {}: prebuilt (NVRTC {})",
                        request.family,
                        request.arch,
                        prebuilt::NVRTC_VERSION
                    );
                    loaded.cost.prebuilt = true;
                    loaded.cost.load_ms = ms(start);
                    return Some(Ok(loaded));
                }
                // The driver refuses the shipped CUBIN (an older driver, say): never offered
                // again on this context; the disk cache or NVRTC serve instead.
                Err(e) => {
                    log::info!(
                        "the driver refused the prebuilt {} kernels ({e:#}); compiling them",
                        request.family
                    );
                    refused.store(true, Ordering::Relaxed);
                }
            }
        }
        let entry = cache::Entry::for_module(
            request.family,
            &request.source,
            &request.options,
            &request.arch,
        );
        if let Some(cubin) = entry.as_ref().and_then(|e| e.read()) {
            return Some(self.link(family, cubin).map(|mut loaded| {
                loaded.cost.cached = true;
                loaded.cost.load_ms = ms(start);
                loaded
            }));
        }
        None
    }

    /// Loads `cubin` as `family`'s module and looks up its entry points.
    fn link(&self, family: impl ModuleSpec, cubin: Vec<u8>) -> Result<LoadedModule, GpuDotError> {
        let module = self
            .ctx
            .load_module(Ptx::from_binary(cubin))
            .map_err(GpuDotError::at("loading a compiled module"))?;
        let mut functions = HashMap::new();
        for entry in family.entries(self.sm) {
            let f = module
                .load_function(&entry)
                .map_err(GpuDotError::at("looking up a kernel entry point"))?;
            if let Some(bytes) = family.shared_bytes(&entry) {
                f.set_attribute(
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    bytes as i32,
                )
                .map_err(GpuDotError::at("raising a kernel's shared-memory limit"))?;
            }
            functions.insert(entry, f);
        }
        Ok(LoadedModule {
            _module: module,
            functions,
            cost: ModuleLoad {
                family: family.name(),
                prebuilt: false,
                cached: false,
                nvrtc_ms: 0.0,
                load_ms: 0.0,
            },
        })
    }
}

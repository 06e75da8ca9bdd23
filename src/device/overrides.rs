//! Process-wide switches of the crate's own tests: kernel sources replaced before they are
//! compiled, the prebuilt images turned off, and a pretended compute capability. Each is read
//! by the layer that loads or chooses kernels; they import only the leaves.

use std::collections::HashMap;
use std::sync::Mutex;

use once_cell::sync::Lazy;

static OVERRIDES: Lazy<Mutex<HashMap<&'static str, String>>> =
    Lazy::new(|| Mutex::new(HashMap::new()));

/// Replaces the source of the module named `family` (a name the engine's table checked), or
/// restores its own with `None`.
pub(crate) fn set_source_override(family: &'static str, source: Option<String>) {
    OVERRIDES_USED.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut map = OVERRIDES.lock().unwrap_or_else(|p| p.into_inner());
    match source {
        Some(s) => map.insert(family, s),
        None => map.remove(family),
    };
}

/// The source that replaces the module `family`'s, if a test asked for one.
pub(crate) fn source_override(family: &str) -> Option<String> {
    if OVERRIDES_USED.load(std::sync::atomic::Ordering::Relaxed) {
        let map = OVERRIDES.lock().unwrap_or_else(|p| p.into_inner());
        map.get(family).cloned()
    } else {
        None
    }
}

/// Whether modules may come from the prebuilt CUBINs: `false` makes every module not yet
/// loaded come from the disk cache or NVRTC, as on a device the crate ships no CUBINs for
/// (the tests of background compilation). `true` restores them.
pub fn use_prebuilt_kernels(allowed: bool) {
    NO_PREBUILT.store(!allowed, std::sync::atomic::Ordering::SeqCst);
}

static NO_PREBUILT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether modules may come from the prebuilt CUBINs: unless [`ENV_PREBUILT`] turns them off
/// (read once) or a test did ([`use_prebuilt_kernels`]).
pub(crate) fn prebuilt_allowed() -> bool {
    static FROM_ENV: once_cell::sync::Lazy<bool> = once_cell::sync::Lazy::new(|| {
        let Ok(value) = std::env::var(ENV_PREBUILT) else {
            return true;
        };
        parse_prebuilt(&value).unwrap_or_else(|e| {
            log::warn!("{e}; the prebuilt CUBINs stay on");
            true
        })
    });
    *FROM_ENV && !NO_PREBUILT.load(std::sync::atomic::Ordering::SeqCst)
}

/// A value of [`ENV_PREBUILT`]: an on/off switch, `none` being off too.
pub(crate) fn parse_prebuilt(value: &str) -> Result<bool, crate::error::GpuDotError> {
    if value.trim().eq_ignore_ascii_case("none") {
        return Ok(false);
    }
    crate::settings::PREBUILT.switch(value)
}

pub use crate::settings::ENV_PREBUILT;

static OVERRIDES_USED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The compute capability (`major·10 + minor`) kernel choices are made for, in place of the
/// device's: `Some(75)` sends `f64` products to the SIMT kernel that devices without FP64
/// tensor cores run; `None` restores the device's own. The modules keep every entry of the
/// real device.
pub fn pretend_compute_capability(sm: Option<u32>) {
    PRETEND_SM.store(sm.unwrap_or(0), std::sync::atomic::Ordering::SeqCst);
}

static PRETEND_SM: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The compute capability set by [`pretend_compute_capability`], if any.
pub(crate) fn pretended_sm() -> Option<u32> {
    match PRETEND_SM.load(std::sync::atomic::Ordering::SeqCst) {
        0 => None,
        sm => Some(sm),
    }
}

/// Makes the default precision weigh emulation on every product the Ozaki kernels can run,
/// whatever its size (the accuracy suite's small products); `false` restores the measured
/// sizes from which it pays.
pub fn emulate_every_size(on: bool) {
    EMULATE_EVERY_SIZE.store(on, std::sync::atomic::Ordering::SeqCst);
}

static EMULATE_EVERY_SIZE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Whether a test asked for [`emulate_every_size`].
pub(crate) fn emulating_every_size() -> bool {
    EMULATE_EVERY_SIZE.load(std::sync::atomic::Ordering::SeqCst)
}

/// Whether a guarded Ozaki product's guard passes also split the operands for the first
/// count (`true`, the default), or leave every split until after the verdict (`false`): the
/// tests compare the two bit for bit.
pub fn split_early(on: bool) {
    NO_EARLY_SPLIT.store(!on, std::sync::atomic::Ordering::SeqCst);
}

static NO_EARLY_SPLIT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether the guard's passes split early ([`split_early`]).
pub(crate) fn early_split() -> bool {
    !NO_EARLY_SPLIT.load(std::sync::atomic::Ordering::SeqCst)
}

/// Whether a guarded Ozaki product whose guard split the operands early enqueues the INT8
/// GEMM of the first count's layers before the host reads the guard's verdict (`true`, the
/// default), under a gate that the device reads, or only after it (`false`): the tests
/// compare the two bit for bit, and the benchmarks time them.
pub fn gemm_before_verdict(on: bool) {
    NO_GEMM_BEFORE_VERDICT.store(!on, std::sync::atomic::Ordering::SeqCst);
}

static NO_GEMM_BEFORE_VERDICT: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Whether the INT8 GEMM may run before the verdict ([`gemm_before_verdict`]).
pub(crate) fn gemm_before_verdict_on() -> bool {
    !NO_GEMM_BEFORE_VERDICT.load(std::sync::atomic::Ordering::SeqCst)
}

/// Whether the kernels launch programmatically on sm_90 (`true`, the default), each let in
/// while the kernel before it on its stream finishes, or plainly, each after the one before
/// (`false`): the tests compare the two bit for bit, and the benchmarks time them (see
/// `engine::enqueue`).
pub fn programmatic_launches(on: bool) {
    NO_PROGRAMMATIC_LAUNCHES.store(!on, std::sync::atomic::Ordering::SeqCst);
}

static NO_PROGRAMMATIC_LAUNCHES: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Whether the kernels may launch programmatically ([`programmatic_launches`]).
pub(crate) fn programmatic_launches_on() -> bool {
    !NO_PROGRAMMATIC_LAUNCHES.load(std::sync::atomic::Ordering::SeqCst)
}

/// Products whose INT8 GEMM, enqueued before the guard's verdict, ran and was kept (its gate
/// held): the tests read it to see that path taken.
pub fn gemms_before_verdict_kept() -> usize {
    GEMMS_BEFORE_VERDICT_KEPT.load(std::sync::atomic::Ordering::SeqCst)
}

static GEMMS_BEFORE_VERDICT_KEPT: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// Counts one product for [`gemms_before_verdict_kept`].
pub(crate) fn count_gemm_before_verdict_kept() {
    GEMMS_BEFORE_VERDICT_KEPT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// Products whose guard split the operands early for the count after the first, because
/// the early refusal's elements needed it, and ran at that count (no split after the
/// verdict): the tests read it to see that path taken.
pub fn early_splits_at_next() -> usize {
    EARLY_SPLITS_AT_NEXT.load(std::sync::atomic::Ordering::SeqCst)
}

static EARLY_SPLITS_AT_NEXT: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// Counts one product for [`early_splits_at_next`].
pub(crate) fn count_early_split_at_next() {
    EARLY_SPLITS_AT_NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

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
        let Some(value) = crate::settings::var(ENV_PREBUILT) else {
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
    PRETEND_SM.set(sm.map(|sm| sm as usize));
}

static PRETEND_SM: Setting = Setting::new();

/// The compute capability set by [`pretend_compute_capability`], if any.
pub(crate) fn pretended_sm() -> Option<u32> {
    PRETEND_SM.get().map(|sm| sm as u32)
}

/// Makes the default precision weigh emulation on every product the Ozaki kernels can run,
/// whatever its size (the accuracy suite's small products), and emulated complex products run
/// in the Karatsuba form whatever theirs; `false` restores the measured sizes from which each
/// pays.
pub fn emulate_every_size(on: bool) {
    EMULATE_EVERY_SIZE.store(on, std::sync::atomic::Ordering::SeqCst);
}

static EMULATE_EVERY_SIZE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Whether a test asked for [`emulate_every_size`].
pub(crate) fn emulating_every_size() -> bool {
    EMULATE_EVERY_SIZE.load(std::sync::atomic::Ordering::SeqCst)
}

/// Makes complex products on the GPU run as four real products of their parts
/// (`crate::complex::products`) instead of one product of the stacked parts, for measuring
/// the two forms side by side; `false` restores the stacked form.
pub fn complex_four_products(on: bool) {
    COMPLEX_FOUR.store(on, std::sync::atomic::Ordering::SeqCst);
}

static COMPLEX_FOUR: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether [`complex_four_products`] is on.
pub(crate) fn complex_four_products_on() -> bool {
    COMPLEX_FOUR.load(std::sync::atomic::Ordering::SeqCst)
}

/// Lets complex products read as reals run in their paired forms: the shifts of a complex
/// column's two parts made one when the Ozaki scaling is taken, and the product in the
/// Karatsuba form (three INT8 products of `m × k` by `k × n` a modulus, see
/// [`complex_karatsuba`]). On by default, where the forms run from the Karatsuba form's size
/// up (3584³ complex multiply-adds; at every size under [`emulate_every_size`]); `false` makes
/// complex products run in the real form of their stacked parts at every size, each column's
/// parts scaled on their own, for measuring the two.
pub fn complex_paired(on: bool) {
    PAIRED.set(on);
}

static PAIRED: Switch = Switch::new();

/// Whether [`complex_paired`] is on (the default).
pub(crate) fn complex_paired_on() -> bool {
    PAIRED.on()
}

/// Where the paired forms are on ([`complex_paired`]), makes emulated complex products run in
/// the real form of their stacked parts with the paired shifts (the INT8 products of `m × 2k`
/// by `2k × 2n` integers) instead of the Karatsuba form, at every size, for measuring and
/// comparing the two; `true` restores the Karatsuba form from its size up. Both give the same
/// integers, and so the same bits.
pub fn complex_karatsuba(on: bool) {
    KARATSUBA.set(on);
}

static KARATSUBA: Switch = Switch::new();

/// Whether [`complex_karatsuba`] is on (the default, within the paired forms).
pub(crate) fn complex_karatsuba_on() -> bool {
    KARATSUBA.on()
}

/// A switch of the tests, on until one turns it off.
struct Switch(std::sync::atomic::AtomicBool);

impl Switch {
    const fn new() -> Self {
        Switch(std::sync::atomic::AtomicBool::new(true))
    }

    fn set(&self, on: bool) {
        self.0.store(on, std::sync::atomic::Ordering::SeqCst);
    }

    fn on(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A value the tests set in place of the crate's own, or none (the crate's own) until one is
/// set.
struct Setting(std::sync::atomic::AtomicUsize);

impl Setting {
    /// Stored for none: no setting takes it (a byte count or a count of rows that large
    /// is saturated one below).
    const NONE: usize = usize::MAX;

    const fn new() -> Self {
        Setting(std::sync::atomic::AtomicUsize::new(Self::NONE))
    }

    fn set(&self, value: Option<usize>) {
        let stored = value.map_or(Self::NONE, |v| v.min(Self::NONE - 1));
        self.0.store(stored, std::sync::atomic::Ordering::SeqCst);
    }

    fn get(&self) -> Option<usize> {
        match self.0.load(std::sync::atomic::Ordering::SeqCst) {
            Self::NONE => None,
            value => Some(value),
        }
    }
}

/// A count of products that took a path the tests look for.
struct Count(std::sync::atomic::AtomicUsize);

impl Count {
    const fn new() -> Self {
        Count(std::sync::atomic::AtomicUsize::new(0))
    }

    fn add(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    fn get(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

static EARLY_SPLIT: Switch = Switch::new();
static GEMM_BEFORE_VERDICT: Switch = Switch::new();
static PROGRAMMATIC_LAUNCHES: Switch = Switch::new();
static GEMMS_BEFORE_VERDICT_KEPT: Count = Count::new();
static EARLY_SPLITS_AT_NEXT: Count = Count::new();
static MAPPED_INPUT_PRODUCTS: Count = Count::new();

/// Whether a guarded Ozaki product's guard passes also split the operands for the first
/// count (`true`, the default), or leave every split until after the verdict (`false`): the
/// tests compare the two bit for bit.
pub fn split_early(on: bool) {
    EARLY_SPLIT.set(on);
}

/// Whether the guard's passes split early ([`split_early`]).
pub(crate) fn early_split() -> bool {
    EARLY_SPLIT.on()
}

/// Whether a guarded Ozaki product whose guard split the operands early enqueues the INT8
/// GEMM of the first count's layers before the host reads the guard's verdict (`true`, the
/// default), under a gate that the device reads, or only after it (`false`): the tests
/// compare the two bit for bit, and the benchmarks time them.
pub fn gemm_before_verdict(on: bool) {
    GEMM_BEFORE_VERDICT.set(on);
}

/// Whether the INT8 GEMM may run before the verdict ([`gemm_before_verdict`]).
pub(crate) fn gemm_before_verdict_on() -> bool {
    GEMM_BEFORE_VERDICT.on()
}

/// Whether the kernels launch programmatically on sm_90 (`true`, the default), each let in
/// while the kernel before it on its stream finishes, or plainly, each after the one before
/// (`false`): the tests compare the two bit for bit, and the benchmarks time them (see
/// `engine::enqueue`).
pub fn programmatic_launches(on: bool) {
    PROGRAMMATIC_LAUNCHES.set(on);
}

/// Whether the kernels may launch programmatically ([`programmatic_launches`]).
pub(crate) fn programmatic_launches_on() -> bool {
    PROGRAMMATIC_LAUNCHES.on()
}

/// The tile rows to a group of the warpgroup INT8 GEMM's grouped tile order, in place of the
/// engine's own count (`Some(n)`, n ≥ 1; rounded up to an even count where the GEMM's
/// clusters pair tile rows), for the benchmarks that measure the order; `None` restores the
/// engine's count.
pub fn ozaki_gemm_group(rows: Option<u32>) {
    GEMM_GROUP.set(rows.map(|rows| rows as usize));
}

static GEMM_GROUP: Setting = Setting::new();

/// The group set by [`ozaki_gemm_group`], if any.
pub(crate) fn ozaki_gemm_group_set() -> Option<u32> {
    GEMM_GROUP.get().map(|rows| rows as u32)
}

/// Bytes of host A and B up to which a product's kernels read them straight from page-locked
/// staging, in place of the pipeline's own limit (`Some(0)`: never), for the benchmarks that
/// measure the limit and the tests that compare the two paths; `None` restores the
/// pipeline's limit.
pub fn mapped_inputs_up_to(bytes: Option<usize>) {
    MAPPED_INPUTS.set(bytes);
}

static MAPPED_INPUTS: Setting = Setting::new();

/// The limit set by [`mapped_inputs_up_to`], if any.
pub(crate) fn mapped_input_bytes() -> Option<usize> {
    MAPPED_INPUTS.get()
}

/// Products whose kernels read host A and B straight from page-locked staging (see
/// [`mapped_inputs_up_to`]): the tests read it to see that path taken.
pub fn mapped_input_products() -> usize {
    MAPPED_INPUT_PRODUCTS.get()
}

/// Counts one product for [`mapped_input_products`].
pub(crate) fn count_mapped_inputs() {
    MAPPED_INPUT_PRODUCTS.add();
}

/// Products whose INT8 GEMM, enqueued before the guard's verdict, ran and was kept (its gate
/// held): the tests read it to see that path taken.
pub fn gemms_before_verdict_kept() -> usize {
    GEMMS_BEFORE_VERDICT_KEPT.get()
}

/// Counts one product for [`gemms_before_verdict_kept`].
pub(crate) fn count_gemm_before_verdict_kept() {
    GEMMS_BEFORE_VERDICT_KEPT.add();
}

/// Products whose guard split the operands early for the count after the first, because
/// the early refusal's elements needed it, and ran at that count (no split after the
/// verdict): the tests read it to see that path taken.
pub fn early_splits_at_next() -> usize {
    EARLY_SPLITS_AT_NEXT.get()
}

/// Counts one product for [`early_splits_at_next`].
pub(crate) fn count_early_split_at_next() {
    EARLY_SPLITS_AT_NEXT.add();
}

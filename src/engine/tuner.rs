//! Choosing how a product runs: the row panels it is cut into and the kernel plan of each
//! panel; and, behind [`Kernel::Auto`], the autotuner.
//!
//! The autotuner measures whole products as the pipeline runs them (copies, packing and
//! kernels overlapping): the first products of a new *key* (a shape class, the operands'
//! layouts, where each operand lives, alignment and whether an epilogue runs) each run one
//! candidate [`Choice`], round-robin, [`ROUNDS`] times each, and the one with the shortest
//! wall time is kept for the rest of the process. No product is run twice to tune: every
//! trial is a real product, and every candidate computes the same result.
//!
//! Device-only measurements (the `profile` module of the crate's internals) tune the kernel
//! alone instead, timing each
//! candidate plan with events ([`launch_isolated`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaStream, CudaViewMut};
use once_cell::sync::Lazy;

use crate::device::context::Gpu;
use crate::device::stopwatch::Stopwatch;
use crate::element::{Dtype, Element};
use crate::engine::args::{GemmArgs, Scratch};
use crate::engine::launch;
use crate::engine::ozaki::{GuardReport, SharedB};
use crate::engine::plan::{self, Plan, Target};
use crate::engine::table::TileConfig;
use crate::error::GpuDotError;
use crate::options::{DotOptions, Kernel, Precision};

/// Panels are multiples of this many rows (the big kernel tile's height), so that device
/// panel offsets keep 16-byte alignment and panels tile evenly.
pub(crate) const PANEL_GRANULE: usize = 128;
/// Largest A-panel-plus-C-panel, in elements (32 MiB of f32, 64 MiB of f64): bounds the device
/// panel buffers.
const MAX_PANEL_FLOATS: usize = 8 << 20;
/// Largest A-panel-plus-C-panel, in elements, of a product the default precision emulates
/// (512 MiB of f32, 1 GiB of f64).
const MAX_EMULATED_PANEL_FLOATS: usize = 128 << 20;
/// Products moving fewer host bytes than this run as one panel unless tuning finds more
/// panels faster: below it the kernels are short and panels mostly add launches.
const MIN_PANELLED_BYTES: usize = 16 << 20;
/// Panels a large product is cut into by default: enough to overlap, few enough that each
/// panel's kernel fills the device (measured on an H200: 512-row panels of 4096³ ran their
/// kernels at less than half the speed of the whole product).
const DEFAULT_PANELS: usize = 4;
/// Panel counts the tuner tries per product (the smallest that fit). Four reach eight panels
/// at 1024³–2048³, whose short last panel leaves the least work after the last input lands:
/// host to host into an existing array on H100 hosts, eight panels took 2–7% less than four
/// at f64 1024³–2048³ and f32 2048³, and the tuner chose six or eight at 1536³–2048³
/// (BENCHMARKS.md).
const PANEL_CHOICES: usize = 4;
/// Times each surviving candidate is measured before the tuner chooses.
pub(crate) const ROUNDS: u32 = 3;
/// After its first measurement, a candidate slower than this many times the fastest first
/// measurement is not tried again.
const KEEP_WITHIN: f64 = 1.25;

/// What ran: the kernel, and for the register-blocked family its plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ran {
    pub(crate) kernel: Kernel,
    pub(crate) plan: Option<Plan>,
    /// The precision its multiplications ran in (FP32 where the one asked for has no kernel
    /// on the device or for the plan).
    pub(crate) precision: Precision,
    /// What the guard found, where the product was guarded.
    pub(crate) guard: Option<GuardReport>,
    /// The default's emulation could not run here ([`launch::Launched::unavailable`]).
    pub(crate) unavailable: bool,
    /// Emulated in the Karatsuba form ([`launch::Launched::karatsuba`]).
    pub(crate) karatsuba: bool,
}

/// How one product runs: its panel count and each panel's kernel plan (`None`: the
/// one-output-per-thread kernel the options name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Choice {
    pub(crate) panels: usize,
    /// Rows per panel when the options force them ([`DotOptions::panel_rows`]).
    pub(crate) forced_rows: Option<usize>,
    pub(crate) plan: Option<Plan>,
}

impl Choice {
    /// Rows per panel for `m` rows (the last panel may be shorter).
    pub(crate) fn rows(&self, m: usize) -> usize {
        match self.forced_rows {
            Some(rows) => rows.clamp(1, m.max(1)),
            None => rows_for(m, self.panels),
        }
    }
}

fn rows_for(m: usize, panels: usize) -> usize {
    if panels <= 1 {
        return m.max(1);
    }
    m.div_ceil(panels)
        .next_multiple_of(PANEL_GRANULE)
        .clamp(1, m.max(1))
}

/// Everything a product's choice depends on besides its exact shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    /// The device's ordinal.
    device: usize,
    /// The element type.
    dtype: Dtype,
    /// The precision asked for.
    precision: Precision,
    /// The powers of two at or above m, k and n.
    log2: (u32, u32, u32),
    /// How A and B are read (transposed or not).
    trans: (bool, bool),
    /// Whether A, B and C are host arrays, and whether C's old value is read.
    residency: (bool, bool, bool, bool),
    /// Whether every host operand is page-locked memory copied straight (see
    /// [`Product::direct`]).
    direct: bool,
    /// Whether the 128-bit-load kernels can read A and B.
    aligned: bool,
    /// Whether the epilogue `C = alpha·T + beta·C` runs.
    epilogue: bool,
    /// The panel height the options force, if any.
    forced_rows: Option<usize>,
    /// Which of the panel counts 1, 2, 4 and 8 the default precision emulates (bit i for
    /// 2^i): shapes of one class can differ here (3072³ emulates whole, 4096³ also in halves),
    /// and their candidates with them.
    emulated: u8,
}

/// What the tuner needs to know about a product.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Product {
    pub(crate) dtype: Dtype,
    pub(crate) dims: (usize, usize, usize),
    pub(crate) trans: (bool, bool),
    pub(crate) residency: (bool, bool, bool, bool),
    /// Every host operand lies in memory page-locked for the product's context and is
    /// contiguous, so that its copies can go straight by DMA with no staging: such products
    /// are tuned apart from those of ordinary arrays, whose copies pay the host memory's pace
    /// and favour other panel counts. Some of their copies may still be staged: a transposed
    /// A cut into row panels (each panel's rows are then strided), or inputs and results the
    /// kernels read and write in mapped memory. Those choices are made per panel count by the
    /// plan the tuner weighs, so the class stays one.
    pub(crate) direct: bool,
    pub(crate) aligned: bool,
    pub(crate) epilogue: bool,
    /// Bytes the product moves between host and device.
    pub(crate) host_bytes: usize,
}

impl Product {
    fn key(&self, device: usize, forced_rows: Option<usize>, target: Target) -> Key {
        let precision = target.precision;
        let emulated = match emulating(target) {
            Some(sm) if forced_rows.is_none() && self.crosses() => emulated_panel_counts(self, sm)
                .into_iter()
                .fold(0u8, |bits, c| bits | c as u8),
            _ => 0,
        };
        let (m, k, n) = self.dims;
        Key {
            device,
            dtype: self.dtype,
            precision: precision.for_dtype(self.dtype),
            log2: (ceil_log2(m), ceil_log2(k), ceil_log2(n)),
            trans: self.trans,
            residency: self.residency,
            direct: self.direct,
            aligned: self.aligned,
            epilogue: self.epilogue,
            forced_rows,
            emulated,
        }
    }

    fn crosses(&self) -> bool {
        let (a, _, c, _) = self.residency;
        a || c
    }
}

fn ceil_log2(x: usize) -> u32 {
    usize::BITS - x.saturating_sub(1).leading_zeros()
}

/// Panel counts worth trying; the first is the default. `emulating`: the
/// compute capability the product runs on, where its precision may emulate.
fn panel_counts(p: &Product, forced_rows: Option<usize>, emulating: Option<u32>) -> Vec<usize> {
    let m = p.dims.0;
    if let Some(rows) = forced_rows {
        return vec![m.div_ceil(rows.clamp(1, m.max(1)))];
    }
    if !p.crosses() || m < 2 * PANEL_GRANULE {
        return vec![1];
    }
    let native = native_panel_counts(p);
    match emulating.map(|sm| emulated_panel_counts(p, sm)) {
        // Panels tall enough to emulate, most first (they overlap the copies best; op(B)'s
        // passes are done once for all of them), then the native default where it is not one
        // of them: the tuner keeps whichever runs faster, copies included.
        Some(emulated) if !emulated.is_empty() => {
            let mut counts: Vec<usize> =
                emulated.into_iter().rev().take(PANEL_CHOICES - 1).collect();
            if !counts.contains(&native[0]) {
                counts.push(native[0]);
            }
            counts
        }
        _ => native,
    }
}

/// Panel counts whose panels the default precision emulates (see
/// [`launch::emulation_pays_in_panels`]) and whose buffers stay within [`MAX_EMULATED_PANEL_FLOATS`],
/// fewest first.
fn emulated_panel_counts(p: &Product, sm: u32) -> Vec<usize> {
    let (m, k, n) = p.dims;
    let cap = MAX_EMULATED_PANEL_FLOATS / (k + n).max(1);
    [1usize, 2, 4, 8]
        .into_iter()
        .filter(|&c| {
            let rows = rows_for(m, c);
            m.div_ceil(rows) == c
                && rows <= cap
                && launch::emulation_pays_in_panels(p.dtype, sm, (m, k, n), rows)
        })
        .collect()
}

/// The compute capability products for `target` run on, where their precision may emulate.
fn emulating(target: Target) -> Option<u32> {
    matches!(target.precision, Precision::Auto | Precision::Ozaki { .. }).then_some(target.sm)
}

/// Panel counts for a product that runs natively: the default first.
fn native_panel_counts(p: &Product) -> Vec<usize> {
    let (m, k, n) = p.dims;
    let by_size =
        ((MAX_PANEL_FLOATS / (k + n).max(1)) / PANEL_GRANULE * PANEL_GRANULE).max(PANEL_GRANULE);
    let least = m.div_ceil(by_size);
    let mut counts: Vec<usize> = [1usize, 2, 4, 8, 16, 32, 64]
        .into_iter()
        .filter(|&c| c >= least && m.div_ceil(c) >= PANEL_GRANULE)
        .take(PANEL_CHOICES)
        .collect();
    if counts.is_empty() {
        counts.push(least);
    }
    let default = if p.host_bytes < MIN_PANELLED_BYTES {
        counts[0]
    } else {
        counts
            .iter()
            .copied()
            .find(|&c| c >= DEFAULT_PANELS)
            .unwrap_or(*counts.last().expect("not empty"))
    };
    counts.retain(|&c| c != default);
    counts.insert(0, default);
    counts
}

/// Kernel plans worth trying for one panel shape; the first is the default.
fn plans(
    kernel: Kernel,
    (m, k, n): (usize, usize, usize),
    target: Target,
    tune: bool,
) -> Vec<Option<Plan>> {
    let tile = |config| Some(Plan::Tile { config, splits: 1 });
    match kernel {
        Kernel::Naive | Kernel::Tiled16 | Kernel::Tiled32 => vec![None],
        Kernel::Reg64 => vec![tile(TileConfig::Small)],
        Kernel::Reg128 => vec![tile(TileConfig::Big)],
        Kernel::Auto => {
            let first = plan::heuristic(target, m, k, n);
            let full = first
                == Plan::Tile {
                    config: TileConfig::Big,
                    splits: 1,
                };
            if !tune || full {
                vec![Some(first)]
            } else {
                plan::candidates(target, m, k, n)
                    .into_iter()
                    .map(Some)
                    .collect()
            }
        }
    }
}

/// The candidate choices for a product, the default first.
fn candidates(p: &Product, opts: &DotOptions, target: Target) -> Vec<Choice> {
    let (m, k, n) = p.dims;
    let counts = panel_counts(p, opts.panel_rows, emulating(target));
    let counts = if opts.autotune {
        counts
    } else {
        counts[..1].to_vec()
    };
    let mut out = Vec::new();
    for panels in counts {
        let choice = Choice {
            panels,
            forced_rows: opts.panel_rows,
            plan: None,
        };
        for plan in plans(opts.kernel, (choice.rows(m), k, n), target, opts.autotune) {
            out.push(Choice { plan, ..choice });
        }
    }
    out
}

enum Entry {
    Tuning {
        candidates: Vec<Choice>,
        /// Per candidate: the shortest time measured (seconds), how many times, and whether it
        /// is still in the running.
        best: Vec<f64>,
        samples: Vec<u32>,
        alive: Vec<bool>,
        next: usize,
        /// Whether the key's first product, which pays its one-time costs (device buffers,
        /// staging, an emulation's workspace) and is not counted, has been reported.
        warmed: bool,
    },
    Chosen(Choice),
}

static TUNED: Lazy<Mutex<HashMap<Key, Entry>>> = Lazy::new(|| Mutex::new(HashMap::new()));

fn tuned() -> std::sync::MutexGuard<'static, HashMap<Key, Entry>> {
    TUNED.lock().unwrap_or_else(|p| p.into_inner())
}

/// A product run as a tuning trial: report its time with [`record`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Trial {
    key: Key,
    index: usize,
}

/// How to run `p`: the choice, and the trial to report when the autotuner is measuring.
pub(crate) fn choose(gpu: &Gpu, opts: &DotOptions, p: &Product) -> (Choice, Option<Trial>) {
    let target = gpu.target(p.dtype, opts.precision);
    if opts.kernel != Kernel::Auto || !opts.autotune {
        let first = candidates(p, opts, target)[0];
        return (first, None);
    }
    let key = p.key(gpu.info.ordinal, opts.panel_rows, target);
    let mut table = tuned();
    let entry = table.entry(key).or_insert_with(|| {
        let candidates = candidates(p, opts, target);
        let n = candidates.len();
        if n == 1 {
            Entry::Chosen(candidates[0])
        } else {
            Entry::Tuning {
                candidates,
                best: vec![f64::INFINITY; n],
                samples: vec![0; n],
                alive: vec![true; n],
                next: 0,
                warmed: false,
            }
        }
    });
    match next_trial(entry) {
        Err(chosen) => (chosen, None),
        Ok((choice, index)) => (choice, Some(Trial { key, index })),
    }
}

/// The choice an entry settled on (`Err`), or the candidate to measure next and its index:
/// the next one, round-robin, still in the running and short of [`ROUNDS`] measurements.
fn next_trial(entry: &mut Entry) -> Result<(Choice, usize), Choice> {
    match entry {
        Entry::Chosen(c) => Err(*c),
        Entry::Tuning {
            candidates,
            next,
            alive,
            samples,
            ..
        } => {
            let n = candidates.len();
            let index = (0..n)
                .map(|i| (*next + i) % n)
                .find(|&i| alive[i] && samples[i] < ROUNDS)
                .unwrap_or(*next % n);
            *next = index + 1;
            Ok((candidates[index], index))
        }
    }
}

/// Reports a trial's wall time; once every candidate has [`ROUNDS`] samples, the fastest is
/// kept.
pub(crate) fn record(trial: Trial, seconds: f64) {
    let mut table = tuned();
    let Some(entry) = table.get_mut(&trial.key) else {
        return;
    };
    let Entry::Tuning {
        candidates,
        best,
        samples,
        alive,
        next,
        warmed,
    } = entry
    else {
        return;
    };
    // The key's first product warms it up: not counted, and its candidate runs again.
    if !*warmed {
        *warmed = true;
        *next = trial.index;
        return;
    }
    best[trial.index] = best[trial.index].min(seconds);
    samples[trial.index] += 1;
    // Once every candidate in the running has run once, those far behind the fastest of them
    // drop out. (A trial of a candidate that already dropped out, handed out before it did and
    // reported late, changes nothing: only candidates in the running are compared, so the
    // fastest of them always stays.)
    let n = candidates.len();
    if (0..n).filter(|&i| alive[i]).all(|i| samples[i] >= 1) {
        let fastest = (0..n)
            .filter(|&i| alive[i])
            .map(|i| best[i])
            .fold(f64::INFINITY, f64::min);
        for i in 0..n {
            alive[i] &= best[i] <= KEEP_WITHIN * fastest;
        }
    }
    if (0..n).filter(|&i| alive[i]).all(|i| samples[i] >= ROUNDS) {
        let chosen = (0..n)
            .filter(|&i| alive[i])
            .min_by(|&i, &j| best[i].total_cmp(&best[j]))
            .unwrap_or(trial.index);
        *entry = Entry::Chosen(candidates[chosen]);
    }
}

/// The plans the autotuner has chosen so far, as the element type, `(m, k, n)` class bounds
/// (powers of two) and the kernel plan of each panel.
pub fn tuned_plans() -> Vec<(Dtype, (usize, usize, usize), Plan)> {
    let table = tuned();
    let mut v: Vec<_> = table
        .iter()
        .filter_map(|(key, entry)| match entry {
            Entry::Chosen(Choice {
                plan: Some(plan), ..
            }) => Some((
                key.dtype,
                (1 << key.log2.0, 1 << key.log2.1, 1 << key.log2.2),
                *plan,
            )),
            _ => None,
        })
        .collect();
    v.sort_by_key(|(dtype, dims, _)| (*dtype, *dims));
    v
}

/// Keys the autotuner is still measuring.
pub fn tuning_in_progress() -> usize {
    tuned()
        .values()
        .filter(|e| matches!(e, Entry::Tuning { .. }))
        .count()
}

/// The kernel plan that native products like `p` settled on, once the autotuner is done with
/// them: what a default product that runs natively (its emulation refused, recalled as
/// refused, or unavailable) takes, so that it gives native's product bit for bit. The tuner
/// weighs the two precisions' plans apart, and a plan's split of K decides the order of each
/// element's sum. `None` while native's products of that class are being tuned or before one
/// has run, and where the options name the kernel or turn the tuner off: then both take the
/// heuristic's plan, the same for both (`plan::tests::the_default_and_native_have_the_same_plans`).
pub(crate) fn settled_native_plan(gpu: &Gpu, opts: &DotOptions, p: &Product) -> Option<Plan> {
    if opts.kernel != Kernel::Auto || !opts.autotune {
        return None;
    }
    let target = gpu.target(p.dtype, Precision::Native);
    let key = p.key(gpu.info.ordinal, opts.panel_rows, target);
    match tuned().get(&key) {
        Some(Entry::Chosen(choice)) => choice.plan,
        _ => None,
    }
}

/// Enqueues `C = op(A) · op(B)` by `plan`, or with the one-output-per-thread `kernel` when
/// `plan` is `None` (`shared` as for [`launch::launch_plan`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch<T: Element>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    kernel: Kernel,
    plan: Option<Plan>,
    args: GemmArgs<'_, '_, T>,
    c: &mut CudaViewMut<'_, T>,
    scratch: &mut Scratch,
    shared: Option<&mut SharedB>,
) -> Result<Ran, GpuDotError> {
    let launched = match plan {
        Some(plan) => launch::launch_plan(gpu, stream, plan, args, c, scratch, shared)?,
        None => {
            if let Some(s) = shared {
                s.forget();
            }
            launch::launch_simple(gpu, stream, kernel, args, c)?;
            launch::Launched {
                precision: Precision::Native,
                guard: None,
                unavailable: false,
                karatsuba: false,
                instead: None,
            }
        }
    };
    Ok(Ran {
        kernel,
        // The plan that ran: the report names it.
        plan: launched.instead.or(plan),
        precision: launched.precision,
        guard: launched.guard,
        unavailable: launched.unavailable,
        karatsuba: launched.karatsuba,
    })
}

/// A device, element type, shape class and the operands' layouts, for plans tuned in
/// isolation.
type IsolatedClass = (usize, Dtype, Precision, (u32, u32, u32), (bool, bool));

/// Timed rounds of each candidate when tuning in isolation.
const ISOLATED_ROUNDS: usize = 4;

/// Kernel plans tuned in isolation, per shape class and layout: for device-only measurement.
static ISOLATED: Lazy<Mutex<HashMap<IsolatedClass, Plan>>> =
    Lazy::new(|| Mutex::new(HashMap::new()));

/// Enqueues `C = op(A) · op(B)` with `kernel` on operands already on the device; under
/// `Kernel::Auto` the first product of a shape class times each candidate plan with events
/// (the kernel alone; one warm-up, then [`ISOLATED_ROUNDS`] rounds) and keeps the fastest. For
/// the `profile` module of the crate's internals.
pub(crate) fn launch_isolated<T: Element>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    kernel: Kernel,
    dims: (usize, usize, usize),
    args: GemmArgs<'_, '_, T>,
    c: &mut CudaViewMut<'_, T>,
    scratch: &mut Scratch,
) -> Result<Ran, GpuDotError> {
    let (m, k, n) = dims;
    let target = gpu.target(T::DTYPE, args.precision());
    let plan = match kernel {
        Kernel::Auto => {
            let candidates = plan::candidates(target, m, k, n);
            let class = (
                gpu.info.ordinal,
                T::DTYPE,
                target.precision,
                (ceil_log2(m), ceil_log2(k), ceil_log2(n)),
                args.trans(),
            );
            let known = ISOLATED
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&class)
                .copied();
            match known {
                Some(plan) => Some(plan),
                None if candidates.len() == 1 => Some(candidates[0]),
                None => {
                    // One untimed launch each (clocks and caches settle), then rounds that
                    // time every candidate in turn, so that a drift in clocks touches all
                    // alike; each keeps its fastest round.
                    let watch = Stopwatch::new(gpu)?;
                    // What each candidate ran in (an Ozaki product may run natively where its
                    // workspace does not fit).
                    let mut ran_in = Vec::with_capacity(candidates.len());
                    for &plan in &candidates {
                        ran_in.push(launch::launch_plan(
                            gpu, stream, plan, args, &mut *c, scratch, None,
                        )?);
                    }
                    let mut fastest = vec![f32::INFINITY; candidates.len()];
                    for _ in 0..ISOLATED_ROUNDS {
                        for (t, &plan) in fastest.iter_mut().zip(&candidates) {
                            let ms = watch.time(stream, || {
                                launch::launch_plan(gpu, stream, plan, args, &mut *c, scratch, None)
                                    .map(drop)
                            })?;
                            *t = t.min(ms);
                        }
                    }
                    let best = fastest
                        .iter()
                        .zip(candidates.iter().zip(&ran_in))
                        .min_by(|x, y| x.0.total_cmp(y.0))
                        .map(|(&t, (&plan, &launched))| (t, plan, launched));
                    let (_, plan, launched) = best.expect("at least one candidate");
                    ISOLATED
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(class, plan);
                    // The candidates' runs already left a correct product in C.
                    return Ok(Ran {
                        kernel,
                        plan: Some(plan),
                        precision: launched.precision,
                        guard: launched.guard,
                        unavailable: launched.unavailable,
                        karatsuba: launched.karatsuba,
                    });
                }
            }
        }
        other => plans(other, dims, target, false)[0],
    };
    launch(gpu, stream, kernel, plan, args, c, scratch, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NATIVE: Target = Target {
        dtype: Dtype::F32,
        precision: Precision::Native,
        sm: 90,
        sms: 132,
    };

    fn product(dims: (usize, usize, usize), host_bytes: usize) -> Product {
        Product {
            dtype: Dtype::F32,
            dims,
            trans: (false, false),
            residency: (true, true, true, false),
            direct: false,
            aligned: true,
            epilogue: false,
            host_bytes,
        }
    }

    #[test]
    fn shape_classes_are_powers_of_two_at_or_above() {
        assert_eq!(ceil_log2(1), 0);
        assert_eq!(ceil_log2(2), 1);
        assert_eq!(ceil_log2(1000), 10);
        assert_eq!(ceil_log2(1024), 10);
        assert_eq!(ceil_log2(1025), 11);
    }

    #[test]
    fn panel_counts_start_with_the_default_and_respect_the_granule() {
        // Mid-size: one panel by default, more to try.
        let c = panel_counts(&product((1024, 1024, 1024), 12 << 20), None, None);
        assert_eq!(c, vec![1, 2, 4, 8]);
        // Large: four by default.
        let c = panel_counts(&product((4096, 4096, 4096), 192 << 20), None, None);
        assert_eq!(c[0], 4);
        assert!(c.iter().all(|&p| 4096usize.div_ceil(p) >= PANEL_GRANULE));
        // Panels bounded by size at 8192³ (32 MiB per A- plus C-panel).
        let c = panel_counts(&product((8192, 8192, 8192), 768 << 20), None, None);
        assert!(c
            .iter()
            .all(|&p| rows_for(8192, p) * 16384 <= MAX_PANEL_FLOATS));
        // Short or device-only products: one panel.
        assert_eq!(
            panel_counts(&product((200, 4096, 4096), 1 << 30), None, None),
            vec![1]
        );
        let mut dev = product((4096, 4096, 4096), 0);
        dev.residency = (false, false, false, false);
        assert_eq!(panel_counts(&dev, None, None), vec![1]);
        // Forced panel heights.
        assert_eq!(
            panel_counts(&product((100, 5, 5), 0), Some(7), None),
            vec![15]
        );
        let forced = Choice {
            panels: 15,
            forced_rows: Some(7),
            plan: None,
        };
        assert_eq!(forced.rows(100), 7);
        assert_eq!(
            Choice {
                forced_rows: Some(0),
                ..forced
            }
            .rows(100),
            1
        );
    }

    #[test]
    fn emulated_products_run_in_tall_panels_and_keep_the_native_default_to_compare() {
        // f32 4096³ from host arrays, on a Hopper: panels of 2048 rows, the whole product, then
        // the native default of four panels.
        let p = product((4096, 4096, 4096), 192 << 20);
        assert_eq!(panel_counts(&p, None, Some(90)), vec![2, 1, 4]);
        // 8192³: panels of 2048 and 4096 rows (eight would be too short to emulate).
        let c = panel_counts(&product((8192, 8192, 8192), 768 << 20), None, Some(90));
        assert_eq!(c[..2], [4, 2]);
        assert!(c[..2]
            .iter()
            .all(|&p| rows_for(8192, p) * 16384 <= MAX_EMULATED_PANEL_FLOATS));
        // f64 panels emulate from 4096 rows (and 4096³ of volume).
        let mut f64 = product((8192, 8192, 8192), 1536 << 20);
        f64.dtype = Dtype::F64;
        assert_eq!(panel_counts(&f64, None, Some(90))[..2], [2, 1]);
        f64.dims = (4096, 4096, 4096);
        assert_eq!(
            panel_counts(&f64, None, Some(90))[0],
            1,
            "4096³ f64 emulates whole"
        );
        f64.dims = (4096, 4095, 4096);
        assert_eq!(panel_counts(&f64, None, Some(90))[0], 1, "as 4096³");
        f64.dims = (4096, 2048, 4096);
        assert_eq!(
            panel_counts(&f64, None, Some(90)),
            panel_counts(&f64, None, None),
            "k = 2048 at 4096²: f64 does not emulate (engine::ozaki::cost)"
        );
        // No INT8 tensor cores, or a precision that never emulates: the native counts.
        assert_eq!(
            panel_counts(&p, None, Some(75)),
            panel_counts(&p, None, None)
        );
        // tests/ozaki.rs's two-panel shape for the guard's memory of refusals.
        let two = product((4096, 2560, 2560), 110 << 20);
        assert_eq!(panel_counts(&two, None, Some(90))[0], 2);
        // A product too small to emulate keeps its counts.
        let small = product((1024, 1024, 1024), 12 << 20);
        assert_eq!(panel_counts(&small, None, Some(90)), vec![1, 2, 4, 8]);
    }

    #[test]
    fn shapes_of_one_class_that_emulate_in_different_panels_are_tuned_apart() {
        let auto = Target {
            precision: Precision::Auto,
            ..NATIVE
        };
        let (p3, p4) = (
            product((3072, 3072, 3072), 108 << 20),
            product((4096, 4096, 4096), 192 << 20),
        );
        assert_ne!(p3.key(0, None, auto), p4.key(0, None, auto));
        assert_eq!(p3.key(0, None, NATIVE), p4.key(0, None, NATIVE));
    }

    #[test]
    fn slow_candidates_drop_out_and_the_fastest_is_kept() {
        let key = product((1000, 1000, 1000), 0).key(0, Some(999), NATIVE);
        let choice = |panels| Choice {
            panels,
            forced_rows: None,
            plan: None,
        };
        let candidates = vec![choice(1), choice(2), choice(3)];
        tuned().insert(
            key,
            Entry::Tuning {
                candidates,
                best: vec![f64::INFINITY; 3],
                samples: vec![0; 3],
                alive: vec![true; 3],
                next: 0,
                warmed: false,
            },
        );
        let times = [2.0, 1.0, 1.1]; // per panel count: the first is far behind
        let mut trials = 0;
        loop {
            let next = next_trial(tuned().get_mut(&key).expect("inserted above"));
            let index = match next {
                Ok((_, index)) => index,
                Err(chosen) => {
                    assert_eq!(chosen.panels, 2);
                    break;
                }
            };
            record(Trial { key, index }, times[index]);
            trials += 1;
            assert!(trials < 20, "tuning never ended");
        }
        // The warm-up, then the slow candidate once and the two others three times each.
        assert_eq!(trials, 1 + 1 + 2 * ROUNDS as usize);
        tuned().remove(&key);
    }

    #[test]
    fn a_late_report_of_a_dropped_candidate_keeps_the_fastest_running() {
        let key = product((1000, 1000, 1000), 0).key(0, Some(998), NATIVE);
        let choice = |panels| Choice {
            panels,
            forced_rows: None,
            plan: None,
        };
        tuned().insert(
            key,
            Entry::Tuning {
                candidates: vec![choice(1), choice(2)],
                best: vec![f64::INFINITY; 2],
                samples: vec![0; 2],
                alive: vec![true; 2],
                next: 0,
                warmed: true,
            },
        );
        // Two threads took candidate 0 before either reported; candidate 0 is slow.
        record(Trial { key, index: 0 }, 5.0);
        record(Trial { key, index: 1 }, 1.0); // candidate 0 drops out
        record(Trial { key, index: 0 }, 0.1); // its second, late report
        record(Trial { key, index: 1 }, 1.0);
        record(Trial { key, index: 1 }, 1.0);
        match tuned().remove(&key) {
            Some(Entry::Chosen(c)) => assert_eq!(c.panels, 2),
            _ => panic!("the tuner did not choose"),
        }
    }

    #[test]
    fn rows_cover_m_in_the_chosen_number_of_panels() {
        for m in [1, 127, 128, 1000, 4096, 8191] {
            for panels in [1, 2, 4, 8] {
                let rows = rows_for(m, panels);
                assert!(rows >= 1 && rows <= m);
                assert!(m.div_ceil(rows) <= panels.max(1));
            }
        }
    }
}

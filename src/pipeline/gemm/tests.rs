//! The general product's pipeline on a simulated device, and how operands are stored.

use super::operands::Stored;
use super::schedule::Limits;
use super::schedule::Residency;
use super::*;
use crate::host::staging::Ring;
use crate::pipeline::sim::SimLink;
use ndarray::{s, Array2, ArrayView2};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Duration;

fn random(rng: &mut StdRng, rows: usize, cols: usize) -> Array2<f32> {
    Array2::from_shape_simple_fn((rows, cols), || rng.random_range(-1.0f32..1.0))
}

/// One random product of the simulated-device test: its shape, operands (each stored in C
/// order or as a transpose), output, α, β and panel height.
struct Case {
    what: String,
    dims: (usize, usize, usize),
    a: Array2<f32>,
    a_t: Array2<f32>,
    a_trans: bool,
    b: Array2<f32>,
    b_t: Array2<f32>,
    b_trans: bool,
    /// 0: a fresh result; 1: C order; 2: F order.
    output: u32,
    alpha: f32,
    beta: f32,
    rows: usize,
    small: bool,
}

impl Case {
    /// Case number `case`: every eighth is small and of one panel, so that its result may be
    /// mapped.
    fn draw(rng: &mut StdRng, case: u64) -> Case {
        let small = case.is_multiple_of(8);
        let (m, k, n) = if small {
            (
                rng.random_range(1..8usize),
                rng.random_range(1..40usize),
                rng.random_range(1..8usize),
            )
        } else {
            (
                rng.random_range(1..90usize),
                rng.random_range(1..40usize),
                rng.random_range(1..50usize),
            )
        };
        let a = random(rng, m, k);
        let a_t = random(rng, k, m);
        let a_trans = !rng.random_bool(0.5);
        let b = random(rng, k, n);
        let b_t = random(rng, n, k);
        let b_trans = !rng.random_bool(0.5);
        let output = rng.random_range(0..3); // fresh, C order, F order
        let alpha = if rng.random_bool(0.5) { 1.0f32 } else { 0.75 };
        let beta = if output > 0 && rng.random_bool(0.5) {
            0.5f32
        } else {
            0.0
        };
        let rows = if small { m } else { rng.random_range(1..=m) };
        let what = format!(
            "case {case}: {m}×{k}×{n}, rows {rows}, output {output}, alpha {alpha}, beta {beta}"
        );
        Case {
            what,
            dims: (m, k, n),
            a,
            a_t,
            a_trans,
            b,
            b_t,
            b_trans,
            output,
            alpha,
            beta,
            rows,
            small,
        }
    }

    /// Counts the operands' memory, and C's at each of `c` (`len` elements), as page-locked
    /// while the guards live.
    fn lock(&self, c: [*const f32; 2], len: usize) -> Vec<crate::device::pinned::Simulated> {
        let arrays = [&self.a, &self.a_t, &self.b, &self.b_t];
        let ranges = arrays
            .iter()
            .map(|x| (x.as_ptr(), x.len()))
            .chain(c.map(|p| (p, len)));
        ranges
            .map(|(p, len)| crate::device::pinned::simulate_locked(p.cast(), len * 4))
            .collect()
    }

    fn av(&self) -> ArrayView2<'_, f32> {
        if self.a_trans {
            self.a_t.t()
        } else {
            self.a.view()
        }
    }

    fn bv(&self) -> ArrayView2<'_, f32> {
        if self.b_trans {
            self.b_t.t()
        } else {
            self.b.view()
        }
    }

    /// α·A·B + β·C in f64, rounded once, from C's old value `before`.
    fn reference(&self, before: &Array2<f32>) -> Array2<f32> {
        let ((m, k, n), av, bv) = (self.dims, self.av(), self.bv());
        Array2::from_shape_fn((m, n), |(r, j)| {
            let acc: f64 = (0..k)
                .map(|q| f64::from(av[[r, q]]) * f64::from(bv[[q, j]]))
                .sum();
            let old = if self.beta != 0.0 {
                f64::from(before[[r, j]])
            } else {
                0.0
            };
            (f64::from(self.alpha) * acc + f64::from(self.beta) * old) as f32
        })
    }
}

/// The simulated device's panel: `p` rows of α·A·B (+ β·C) at the device addresses `a`, `b`
/// and `c` (A stored transposed where `at`, B where `bt`), computed when the link runs it.
fn enqueue_panel_sim(
    link: &SimLink,
    (a, b, c): (u64, u64, u64),
    (p, k, n): (usize, usize, usize),
    (at, bt): (bool, bool),
    (alpha, beta): (f32, f32),
) {
    let c_in = beta != 0.0;
    link.enqueue(move || {
        let a = a as *const f32;
        let b = b as *const f32;
        let c = c as *mut f32;
        for r in 0..p {
            for j in 0..n {
                let mut acc = 0.0f64;
                for q in 0..k {
                    // SAFETY: the simulated device buffers hold p·k, k·n and
                    // p·n floats and outlive the run.
                    let (x, y) = unsafe {
                        (
                            *a.add(if at { q * p + r } else { r * k + q }),
                            *b.add(if bt { j * k + q } else { q * n + j }),
                        )
                    };
                    acc += f64::from(x) * f64::from(y);
                }
                // SAFETY: as above.
                let out = unsafe { &mut *c.add(r * n + j) };
                let old = if c_in { f64::from(*out) } else { 0.0 };
                *out = (f64::from(alpha) * acc + f64::from(beta) * old) as f32;
            }
        }
    });
}

/// What one case of the simulated-device test ran: whether its result was mapped, and
/// whether its inputs were.
struct Outcome {
    mapped: bool,
    mapped_in: bool,
    /// Transfers copied straight from or into (simulated) page-locked host memory.
    direct: usize,
    /// Every transfer went straight.
    all_direct: bool,
}

/// The plan of `case` with `tiny` staging: its schedule, panels and slots, and whether its
/// kernel reads its inputs where they are packed and writes its result into the down ring
/// (each drawn where `mapped_inputs` and `mapped_result` would allow it).
fn plan_case(case: &Case, residency: Residency, rng: &mut StdRng, tiny: &Limits) -> Planned {
    let (dims, rows) = (case.dims, case.rows);
    let sched = Arc::new(Schedule::product_with(dims, rows, true, residency, tiny));
    let panels = sched.panels.len();
    let slots = if panels > 1 { 2 } else { 1 };
    // As `mapped_inputs` allows: one panel, C's old value not read, each input one
    // parcel in a slot of its own.
    let up = &sched.up;
    let mapped_in = panels == 1
        && case.beta == 0.0
        && up.parcels.len() == up.transfers.len()
        && up.slots == up.parcels.len()
        && rng.random_bool(0.5);
    // As `mapped_result` allows: one panel, one down parcel, C not read.
    let mapped =
        panels == 1 && case.beta == 0.0 && sched.down.parcels.len() == 1 && rng.random_bool(0.5);
    Planned {
        choice: Choice {
            panels,
            forced_rows: Some(rows),
            plan: None,
        },
        trial: None,
        sched,
        rows,
        slots,
        mapped_result: mapped,
        mapped_inputs: mapped_in,
        work_waits: false,
        native_plan: None,
    }
}

/// The simulated device's buffers, poisoned: B, and two slots each of A's and C's panels.
struct SimDevice {
    b: Vec<f32>,
    a: [Vec<f32>; 2],
    c: [Vec<f32>; 2],
}

impl SimDevice {
    fn new(rows: usize, k: usize, n: usize) -> SimDevice {
        SimDevice {
            b: vec![f32::NAN; k * n],
            a: [vec![f32::NAN; rows * k], vec![f32::NAN; rows * k]],
            c: [vec![f32::NAN; rows * n], vec![f32::NAN; rows * n]],
        }
    }

    /// The buffers' addresses, as a kernel is given them.
    fn addrs(&mut self) -> DevAddrs {
        DevAddrs {
            b: self.b.as_mut_ptr() as u64,
            a: [self.a[0].as_mut_ptr() as u64, self.a[1].as_mut_ptr() as u64],
            c: [self.c[0].as_mut_ptr() as u64, self.c[1].as_mut_ptr() as u64],
        }
    }
}

/// Runs `case` through the conductor on a simulated device with `tiny` staging, checks it
/// against the reference and returns what it ran.
fn run_case(case: &Case, rng: &mut StdRng, tiny: &Limits, seed: u64, index: u64) -> Outcome {
    let ((m, k, n), what, rows) = (case.dims, &case.what, case.rows);
    let (alpha, beta) = (case.alpha, case.beta);
    let mut c_old = random(rng, m, n);
    let before = c_old.clone();
    let mut c_f = c_old.t().as_standard_layout().into_owned();
    let c_at = [c_old.as_ptr(), c_f.as_ptr()];
    let mut fresh_c = crate::host::fresh::fresh::<f32>((m, n), false).unwrap();
    let mut c = match case.output {
        0 => Dst::Fresh(fresh_c.view_mut()),
        1 => Dst::Host(c_old.view_mut()),
        _ => Dst::Host(c_f.view_mut().reversed_axes()),
    };
    let (a, b) = (Src::Host(case.av()), Src::Host(case.bv()));
    let mut g = Gemm {
        alpha,
        a: &a,
        b: &b,
        beta,
        c: &mut c,
    };
    let ops = Operands::of(&mut g);
    let planned = plan_case(case, ops.residency, rng, tiny);
    let (mapped_in, slots) = (planned.mapped_inputs, planned.slots);
    let sched = &planned.sched;
    let panels = sched.panels.len();
    let mut up_ring = vec![f32::NAN; sched.up.ring_len()];
    let mut down_ring = vec![f32::NAN; sched.down.ring_len()];
    let up_ring = Ring::of_slice(&mut up_ring);
    let mut device = SimDevice::new(rows, k, n);
    let mut addrs = device.addrs();
    if mapped_in {
        // The kernel reads A and B where they are packed.
        let ring = up_ring.at(0, 0) as u64;
        addrs = addrs.with_inputs(ring_inputs(sched, ring, 4));
    }
    let mapped = planned.mapped_result;
    // Half the cases hold every host array in (simulated) page-locked memory: the transfers
    // that are contiguous then go straight, with no staging.
    let locked = rng.random_bool(0.5).then(|| case.lock(c_at, m * n));
    let (ends, _) = endpoints(&planned, &ops, &addrs, (0, 0));
    let direct = (ends.direct_up.iter().chain(&ends.direct_down))
        .filter(|&&d| d)
        .count();
    let all_direct = direct == ends.direct_up.len() + ends.direct_down.len();
    let (a_s, b_s) = (ops.a.host().unwrap(), ops.b.host().unwrap());
    let fresh = ops.fresh;
    let run = Run {
        link: SimLink::new(panels > 1, seed ^ index),
        up_ring: Some(up_ring),
        down_ring: Some(Ring::of_slice(&mut down_ring)),
        a_slots: slots,
        c_slots: slots,
        mapped_result: mapped,
        mapped_inputs: mapped_in,
        bytes_per_helper: 64,
        work_waits: rng.random_bool(0.5),
    };
    // A mapped result is written by the kernel straight into the down ring.
    let mapped_at = run
        .down_ring
        .filter(|_| mapped)
        .map(|r| r.at(0, m * n) as u64);
    let mut panel_work = |i: usize| -> Result<(), GpuDotError> {
        let (r0, r1) = sched.panels[i];
        let c = mapped_at.unwrap_or(addrs.c[i % slots]);
        let (a, b) = (addrs.a[i % slots], addrs.b);
        enqueue_panel_sim(
            &run.link,
            (a, b, c),
            (r1 - r0, k, n),
            (a_s.trans, b_s.trans),
            (alpha, beta),
        );
        Ok(())
    };
    let (mut touched, mut trace) = (false, Trace::default());
    conduct::conduct(
        sched,
        &ends,
        &run,
        &mut panel_work,
        &mut touched,
        &mut trace,
    )
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_a_step_a_parcel(all_direct, sched, &trace, what);
    // Each panel's inputs mark follows the copy that completes its inputs, not a later
    // panel's copies (its kernels would wait for those too).
    for (i, copies) in run.link.inputs_marks() {
        assert_eq!(
            copies, sched.panel_inputs[i],
            "{what}: panel {i}'s inputs mark after {copies} copies up"
        );
    }
    // Forgotten before C's memory can be freed, so that no other test's allocation there
    // counts as page-locked.
    drop(locked);
    let got = match case.output {
        0 => unsafe { fresh_c.assume_init() },
        1 => c_old,
        _ => c_f.t().to_owned(),
    };
    assert_eq!(
        got,
        case.reference(&before),
        "{what}, mapped result {mapped}, inputs {mapped_in} (seed {seed})"
    );
    if mapped_in {
        assert_eq!(run.link.up_copies(), 0, "{what}: mapped inputs were copied");
    }
    assert!(touched || fresh, "{what}: the output was written");
    Outcome {
        mapped,
        mapped_in,
        direct,
        all_direct,
    }
}

/// Where every transfer goes straight (`all_direct`), no helper stages anything, and the
/// conductor takes each parcel's pieces at once: a step a parcel at most, not a step a piece.
fn assert_a_step_a_parcel(all_direct: bool, sched: &Schedule, trace: &Trace, what: &str) {
    if !all_direct {
        return;
    }
    let parcels = sched.up.parcels.len() + sched.down.parcels.len();
    assert!(
        trace.pieces_by_conductor <= parcels,
        "{what}: {} steps of the conductor for {parcels} parcels ({} pieces)",
        trace.pieces_by_conductor,
        trace.pieces
    );
}

/// Runs the conductor, the schedule's real parcels and pieces and the crew on a simulated
/// device (see `sim.rs`) with tiny staging slots and rings, over random shapes, panel
/// heights, layouts and outputs, and compares with the same arithmetic done directly.
#[test]
fn products_through_a_simulated_device_match_the_reference() {
    let tiny = Limits {
        min_parcel: 64,
        max_parcel: 256,
        max_ring: 768,
        piece: 48,
    };
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    println!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut mapped_runs, mut mapped_in_runs, mut small_runs, mut direct) = (0, 0, 0, 0);
    let mut all_direct = 0;
    for index in 0..400 {
        let case = Case::draw(&mut rng, index);
        small_runs += usize::from(case.small);
        let ran = run_case(&case, &mut rng, &tiny, seed, index);
        mapped_runs += usize::from(ran.mapped);
        mapped_in_runs += usize::from(ran.mapped_in);
        direct += ran.direct;
        all_direct += usize::from(ran.all_direct);
    }
    assert!(
        direct > 0,
        "no transfer went straight from page-locked memory"
    );
    assert!(all_direct > 0, "no case had every transfer go straight");
    assert_eq!(small_runs, 50, "every eighth case is small");
    assert!(
        mapped_runs > 0,
        "no case wrote its result straight into staging"
    );
    assert!(mapped_in_runs > 0, "no case read its inputs from staging");
}

/// A panel whose work panics (a bug below the conductor) ends its product with that panic:
/// the helpers staging its copies see the product end and leave, where they would otherwise
/// wait for pieces that never come while the crew's close waits for them. Each case runs on
/// a thread of its own and must unwind within 30 s; cases run until some had helpers (the
/// crew serves one job at a time, and other tests share it).
#[test]
fn a_panicking_panel_unwinds_past_the_helpers() {
    let tiny = Limits {
        min_parcel: 64,
        max_parcel: 256,
        max_ring: 768,
        piece: 48,
    };
    let mut rng = StdRng::seed_from_u64(0x5EED);
    let can_help = crate::host::crew::crew().helpers() > 0;
    let (mut ran, mut helped) = (0, 0);
    for index in 0..2000 {
        let mut case = Case::draw(&mut rng, index);
        (case.output, case.beta) = (1, 0.0);
        if case.small || case.rows >= case.dims.0 {
            continue; // one panel: nothing after the panic for helpers to wait on
        }
        let (done, report) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut trace = Trace::default();
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                panicking_panel(&case, &tiny, &mut trace)
            }));
            let message = outcome.err().map(|e| e.downcast_ref::<&str>().copied());
            done.send((trace.helpers, message)).expect("the test waits");
        });
        let (helpers, message) = match report.recv_timeout(Duration::from_secs(30)) {
            Ok((helpers, Some(message))) => (helpers, message),
            Ok((_, None)) => panic!("case {index}: the panel's panic did not reach the caller"),
            Err(_) => panic!("case {index}: the product did not end after its panel panicked"),
        };
        assert_eq!(message, Some("a panel's bug"), "case {index}");
        ran += 1;
        helped += usize::from(helpers > 0);
        if ran >= 8 && (helped >= 4 || !can_help) {
            break;
        }
    }
    assert!(ran >= 8, "only {ran} cases of several panels");
    // Where the crew has helpers (more than one core), some cases must have had them.
    assert!(!can_help || helped > 0, "no case had helpers, of {ran}");
}

/// [`a_panicking_panel_unwinds_past_the_helpers`]' product: `case` into C (C order, β = 0) on
/// the simulated device, its second panel's work panicking.
fn panicking_panel(case: &Case, tiny: &Limits, trace: &mut Trace) {
    let (m, k, n) = case.dims;
    let mut c_host = Array2::<f32>::zeros((m, n));
    let mut c = Dst::Host(c_host.view_mut());
    let (a, b) = (Src::Host(case.av()), Src::Host(case.bv()));
    let mut g = Gemm {
        alpha: case.alpha,
        a: &a,
        b: &b,
        beta: 0.0,
        c: &mut c,
    };
    let ops = Operands::of(&mut g);
    let mut rng = StdRng::seed_from_u64(1);
    let planned = plan_case(case, ops.residency, &mut rng, tiny);
    let sched = &planned.sched;
    let mut up_ring = vec![f32::NAN; sched.up.ring_len()];
    let mut down_ring = vec![f32::NAN; sched.down.ring_len()];
    let mut device = SimDevice::new(case.rows, k, n);
    let addrs = device.addrs();
    let (ends, _) = endpoints(&planned, &ops, &addrs, (0, 0));
    let (a_s, b_s) = (ops.a.host().unwrap(), ops.b.host().unwrap());
    let run = Run {
        link: SimLink::new(true, 3),
        up_ring: Some(Ring::of_slice(&mut up_ring)),
        down_ring: Some(Ring::of_slice(&mut down_ring)),
        a_slots: planned.slots,
        c_slots: planned.slots,
        mapped_result: false,
        mapped_inputs: false,
        bytes_per_helper: 64,
        work_waits: false,
    };
    let mut panel_work = |i: usize| -> Result<(), GpuDotError> {
        if i == 1 {
            panic!("a panel's bug");
        }
        let (r0, r1) = sched.panels[i];
        let slots = planned.slots;
        enqueue_panel_sim(
            &run.link,
            (addrs.a[i % slots], addrs.b, addrs.c[i % slots]),
            (r1 - r0, k, n),
            (a_s.trans, b_s.trans),
            (case.alpha, 0.0),
        );
        Ok(())
    };
    let _ = conduct::conduct(sched, &ends, &run, &mut panel_work, &mut false, trace);
}

#[test]
fn f_order_views_are_stored_as_their_transpose() {
    let a = Array2::<f32>::zeros((5, 7));
    assert!(!Stored::of(&a.view()).trans);
    assert!(Stored::of(&a.t()).trans);
    assert_eq!(Stored::of(&a.t()).mat.dim(), (5, 7));
    // A column-strided window of a C-order array is read row by row.
    assert!(!Stored::of(&a.slice(s![.., ..;2])).trans);
    // One row or one column: never transposed.
    assert!(!Stored::of(&a.slice(s![..1, ..]).t()).trans);
    assert_eq!(Stored::of(&a.t()).ld(3), 3);
    assert_eq!(Stored::of(&a.view()).ld(3), 7);
}

/// Whether the tuner sees `a · b` into `c` as a product of page-locked arrays.
fn direct(a: ArrayView2<'_, f32>, b: ArrayView2<'_, f32>, mut c: Dst<'_, f32>) -> bool {
    let (a, b) = (Src::Host(a), Src::Host(b));
    let mut g = Gemm {
        alpha: 1.0,
        a: &a,
        b: &b,
        beta: 0.0,
        c: &mut c,
    };
    Operands::of(&mut g).for_tuner((0, 0)).direct
}

/// A product whose host operands are all page-locked is tuned apart from one with ordinary
/// arrays (its copies pay no staging): `Product::direct` holds only where every host operand
/// is contiguous, locked memory, and never for a fresh result.
#[test]
fn products_of_page_locked_arrays_are_tuned_apart() {
    use crate::device::pinned::simulate_locked;
    let a = Array2::<f32>::ones((6, 5));
    let b = Array2::<f32>::ones((5, 4));
    let mut c = Array2::<f32>::zeros((6, 4));
    assert!(
        !direct(a.view(), b.view(), Dst::Host(c.view_mut())),
        "ordinary arrays"
    );
    let lock = |x: &Array2<f32>| simulate_locked(x.as_ptr().cast(), x.len() * 4);
    let (_a, _b) = (lock(&a), lock(&b));
    assert!(
        !direct(a.view(), b.view(), Dst::Host(c.view_mut())),
        "C is ordinary"
    );
    let _c = lock(&c);
    assert!(
        direct(a.view(), b.view(), Dst::Host(c.view_mut())),
        "all page-locked"
    );
    // A strided window of a locked array is not copied straight.
    let (a_cols, b_rows) = (a.slice(s![.., ..;2]), b.slice(s![..3, ..]));
    assert!(!direct(a_cols, b_rows, Dst::Host(c.view_mut())));
    // A fresh result is never direct: the host's threads touch its pages.
    let mut fresh = Array2::<f32>::uninit((6, 4));
    let _f = simulate_locked(fresh.as_ptr().cast(), 24 * 4);
    assert!(!direct(a.view(), b.view(), Dst::Fresh(fresh.view_mut())));
}

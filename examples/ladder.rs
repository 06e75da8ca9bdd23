//! The kernel ladder: every kernel's device-side throughput over a suite of shapes, against
//! cuBLAS SGEMM (FP32) and DGEMM measured in the same run when built with `--features cublas`,
//! with each result's error against a higher-precision reference (f64 for f32 products; rows
//! to about twice f64 precision for f64 products).
//!
//!     cargo run --release --features cublas --example ladder -- \
//!         [--quick | --sizes N,N,.. | --shapes MxKxN,..] [--auto-only] [--dtype f32|f64|both]
//!         [--json PATH]
//!         [--plot PATH.svg] [--pretend-sm NN] [--rounds R] [--emulate-every-size]
//!         [--paired-k S | --inputs uniform|positive|normal|relu|lognormal]
//!         [--split-after-verdict] [--gemm-after-verdict] [--plain-launches] [--gemm-group G]
//!
//! `--split-after-verdict` has the guard's passes write only the magnitudes, so that every
//! operand is split after the verdict, as on devices without fast FP64 (to check and time
//! that path on a Hopper). `--gemm-after-verdict` keeps the early split but enqueues the
//! INT8 GEMM only once the host has read the guard's verdict (to time the GEMM enqueued
//! before it). `--plain-launches` launches each kernel only after the one before on its
//! stream has finished (to time the programmatic launches of sm_90). `--gemm-group 16` has
//! the warpgroup INT8 GEMM take its tiles 16 tile rows to a group in place of the engine's
//! count (to measure the tile order's L2 reuse).
//!
//! `--paired-k 20` draws the operands with scales paired along k (within 2^±20), the
//! accuracy suite's hostile family: the default precision's guard sends them to the native
//! kernels, and its `--rounds` show what the guard costs there.
//!
//! `--inputs normal` (or `positive`, `relu`, `lognormal`; `uniform` is the default) draws
//! the operands from that ordinary kind of input (`gpu_dot::accuracy::Family::ORDINARY`),
//! where the guard may need more moduli than on uniform ones (`precision --guard-counts`).
//!
//! `--pretend-sm 80` chooses kernels as a device of compute capability 8.0 would (the
//! mma.sync kernels in place of Hopper's warpgroup ones), to measure them on a Hopper.
//!
//! Prints the table the crate's history is told in (GFLOP/s per kernel at 1024³ and 4096³,
//! speed-up over naive, fraction of cuBLAS), then the whole suite, and writes one JSON record
//! per element type, kernel and shape (field `dtype`) and an SVG plot of GFLOP/s against size
//! (one panel per element type). The f64 ladder times the register-blocked kernels and `auto`;
//! the naive and tiled f64 kernels are checked by the tests. The f32 ladder also times `auto`
//! in 3xTF32 and TF32 and cuBLAS with TF32: JSON records carry `precision` (`fp32`,
//! `tf32x3`, `tf32`), TF32 records `cublas_tf32_gflops` too.
//!
//! `--rounds R` (with cuBLAS) then times `auto` in the native precision and cuBLAS in turn R
//! more times per shape, the order swapped every round, and prints the median of the per-round
//! ratios; JSON: `alternating_rounds_ratio_to_cublas` and `alternating_rounds_median_ratio` on
//! the `auto` record. Single timings on a power-limited card move by several percent from one
//! minute to the next; the alternating median is the steadier ratio. Where the default
//! emulated, it also times the default and the unguarded Ozaki product of the same count in
//! turn (JSON: `guard_rounds_ratio_to_unguarded`, `guard_rounds_median_ratio` on the
//! `default` record): the guard's cost.

use gpu_dot::profile::{reference_f64, relative_error_to, DeviceProblem, SampledReference, Timing};
use gpu_dot::{device_status, DeviceStatus, Dtype, Element, Kernel, Precision};

const SUITE: [(usize, usize, usize); 14] = [
    (256, 256, 256),
    (512, 512, 512),
    (1000, 1000, 1000),
    (1024, 1024, 1024),
    (2048, 2048, 2048),
    (4096, 4096, 4096),
    (4097, 4097, 4097),
    (8192, 8192, 8192),
    (4096, 1024, 8192),
    (8192, 8192, 64),
    (64, 8192, 8192),
    (8192, 64, 8192),
    (1, 4096, 4096),
    (4096, 4096, 1),
];

const KERNELS: [Kernel; 6] = [
    Kernel::Naive,
    Kernel::Tiled16,
    Kernel::Tiled32,
    Kernel::Reg64,
    Kernel::Reg128,
    Kernel::Auto,
];

#[derive(Clone)]
struct Record {
    dtype: Dtype,
    /// The kernel's name, with the precision after it unless FP32 (`auto tf32x3`,
    /// `cublas tf32`).
    name: String,
    precision: Precision,
    dims: (usize, usize, usize),
    ms: f64,
    gflops: f64,
    rel_err: f64,
    /// `--rounds`: this kernel's speed over cuBLAS's in each round of alternating timings.
    rounds: Vec<f64>,
    /// `--rounds`, the default record where it emulated: its time over the unguarded Ozaki
    /// product's (the same count of moduli) in each round of alternating timings.
    guard_rounds: Vec<f64>,
}

/// `--paired-k S`: operands from the accuracy suite's family with scales paired along k
/// (`a[i][k] = x·2^t[k]`, `b[k][j] = y·2^-t[k]`, `t[k]` within ±S), on which the default
/// precision's guard refuses emulation; `--inputs NAME`: operands of an ordinary kind
/// (normal, ...); else uniform random operands.
static INPUTS: std::sync::OnceLock<gpu_dot::accuracy::Family> = std::sync::OnceLock::new();

/// The median, lowest and highest of rounds' ratios (at least one).
struct Spread {
    median: f64,
    lowest: f64,
    highest: f64,
}

impl Spread {
    fn of(ratios: &[f64]) -> Spread {
        let mut sorted = ratios.to_vec();
        sorted.sort_by(f64::total_cmp);
        Spread {
            median: sorted[sorted.len() / 2],
            lowest: sorted[0],
            highest: sorted[sorted.len() - 1],
        }
    }
}

impl std::fmt::Display for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "median {:.3}× (lowest {:.3}×, highest {:.3}×)",
            self.median, self.lowest, self.highest
        )
    }
}

fn reps_for(first_ms: f64) -> usize {
    ((300.0 / first_ms.max(1e-3)) as usize).clamp(5, 50)
}

/// The error measure of one problem's results.
enum Reference {
    Full(ndarray::Array2<f64>),
    Sampled(SampledReference),
}

impl Reference {
    fn of<A: Element>(p: &DeviceProblem<A>) -> Reference {
        match A::DTYPE {
            Dtype::F32 => Reference::Full(reference_f64(p.a(), p.b())),
            _ => Reference::Sampled(SampledReference::new(p.a(), p.b(), 32)),
        }
    }

    fn error<A: Element>(&self, c: &ndarray::Array2<A>) -> f64 {
        match self {
            Reference::Full(r) => relative_error_to(c.view(), r),
            Reference::Sampled(r) => r.relative_error(c.view()),
        }
    }
}

type Run<'f, A> = dyn FnMut(&mut DeviceProblem<A>) -> ndarray::Array2<A> + 'f;
type Time<'f, A> = dyn FnMut(&mut DeviceProblem<A>, usize) -> Timing + 'f;

fn measure<A: Element>(
    problem: &mut DeviceProblem<A>,
    reference: &Reference,
    name: &str,
    dims: (usize, usize, usize),
    run: &mut Run<'_, A>,
    time: &mut Time<'_, A>,
) -> Record {
    let c = run(problem);
    let rel_err = reference.error(&c);
    let probe = time(problem, 1);
    let t = time(problem, reps_for(probe.median_ms));
    Record {
        dtype: A::DTYPE,
        name: name.to_string(),
        precision: Precision::Native,
        dims,
        ms: t.median_ms,
        gflops: t.gflops,
        rel_err,
        rounds: Vec::new(),
        guard_rounds: Vec::new(),
    }
}

fn civil_date() -> String {
    let days = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400) as i64;
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Measures every kernel of `kernels` (and cuBLAS, with the feature) over `suite` in `A`.
fn run_suite<A: Element>(
    suite: &[(usize, usize, usize)],
    kernels: &[Kernel],
    rounds: usize,
) -> Vec<Record>
where
    DeviceProblem<A>: Cublas<A>,
{
    let mut records: Vec<Record> = Vec::new();
    for (i, &(m, k, n)) in suite.iter().enumerate() {
        let seed = 1000 + i as u64;
        let mut problem = match INPUTS.get() {
            Some(family) => {
                let (a, b) = family.operands::<A>((m, k, n), seed);
                DeviceProblem::from_arrays(a, b)
            }
            None => DeviceProblem::<A>::new(m, k, n, seed),
        }
        .expect("device problem");
        let reference = Reference::of(&problem);
        if let Some(r) = problem.measure_cublas(&reference, (m, k, n), false) {
            records.push(r);
        }
        for &kernel in kernels {
            let r = measure(
                &mut problem,
                &reference,
                kernel.name(),
                (m, k, n),
                &mut |p| p.run(kernel).expect("kernel runs"),
                &mut |p, reps| p.time(kernel, 1, reps).expect("kernel timing"),
            );
            records.push(r);
        }
        // The default precision: emulated where that pays and its guard passes, else native.
        if kernels.contains(&Kernel::Auto) {
            problem.set_precision(Precision::Auto);
            let mut r = measure(
                &mut problem,
                &reference,
                "default",
                (m, k, n),
                &mut |p| p.run(Kernel::Auto).expect("kernel runs"),
                &mut |p, reps| p.time(Kernel::Auto, 1, reps).expect("kernel timing"),
            );
            r.precision = problem.ran_in();
            records.push(r);
            problem.set_precision(Precision::Native);
        }
        // `--rounds`: `auto` in the native precision, and the default precision, each timed
        // in turn with cuBLAS, the order swapped every round, so that clock and power drift
        // fall on both alike.
        for (precision, name) in [(Precision::Native, "auto"), (Precision::Auto, "default")] {
            if rounds == 0 || !kernels.contains(&Kernel::Auto) {
                break;
            }
            problem.set_precision(precision);
            let reps = records
                .iter()
                .find(|r| r.dims == (m, k, n) && r.name == "cublas")
                .map(|c| reps_for(c.ms));
            if let Some(reps) = reps {
                let mut ratios = Vec::with_capacity(rounds);
                for round in 0..rounds {
                    let ours = |p: &mut DeviceProblem<A>| {
                        p.time(Kernel::Auto, 1, reps)
                            .expect("kernel timing")
                            .median_ms
                    };
                    let (ms, cublas_ms) = if round % 2 == 0 {
                        let ms = ours(&mut problem);
                        (ms, problem.cublas_ms(reps))
                    } else {
                        let c = problem.cublas_ms(reps);
                        (ours(&mut problem), c)
                    };
                    ratios.push(cublas_ms.unwrap_or(f64::NAN) / ms);
                }
                println!(
                    "{} {m:>5}×{k:>5}×{n:>5} {name} / cublas over {rounds} alternating rounds: {}",
                    A::DTYPE,
                    Spread::of(&ratios)
                );
                if let Some(r) = records
                    .iter_mut()
                    .find(|r| r.dims == (m, k, n) && r.name == name)
                {
                    r.rounds = ratios;
                }
            }
            problem.set_precision(Precision::Native);
        }
        // `--rounds`, where the default emulated: its time and the unguarded product's (the
        // same count of moduli) in turn, the order swapped every round: the guard's cost.
        let emulated = records
            .iter()
            .find(|r| r.dims == (m, k, n) && r.name == "default")
            .map(|r| r.precision)
            .filter(|p| matches!(p, Precision::Ozaki { .. }));
        if let (true, Some(unguarded)) = (rounds > 0 && kernels.contains(&Kernel::Auto), emulated) {
            let reps = records
                .iter()
                .find(|r| r.dims == (m, k, n) && r.name == "default")
                .map_or(5, |r| reps_for(r.ms));
            let time = |p: &mut DeviceProblem<A>, precision| {
                p.set_precision(precision);
                p.time(Kernel::Auto, 1, reps)
                    .expect("kernel timing")
                    .median_ms
            };
            let mut ratios = Vec::with_capacity(rounds);
            for round in 0..rounds {
                let (guarded, bare) = if round % 2 == 0 {
                    let g = time(&mut problem, Precision::Auto);
                    (g, time(&mut problem, unguarded))
                } else {
                    let b = time(&mut problem, unguarded);
                    (time(&mut problem, Precision::Auto), b)
                };
                ratios.push(guarded / bare);
            }
            problem.set_precision(Precision::Native);
            println!(
                "{} {m:>5}×{k:>5}×{n:>5} default / unguarded {unguarded} over {rounds} alternating rounds: {}",
                A::DTYPE,
                Spread::of(&ratios)
            );
            if let Some(r) = records
                .iter_mut()
                .find(|r| r.dims == (m, k, n) && r.name == "default")
            {
                r.guard_rounds = ratios;
            }
        }
        // Ozaki scheme II on the INT8 tensor cores (compute capability 8.0 on): the automatic
        // count of moduli, one fewer and (f64) one more.
        if device_sm().is_some_and(|sm| sm >= 80) {
            let auto = gpu_dot::__testing::ozaki_auto_moduli(A::DTYPE, k);
            let counts: Vec<usize> = match A::DTYPE {
                Dtype::F64 => vec![auto - 1, auto, auto + 1],
                _ => vec![auto - 1, auto],
            };
            for moduli in counts.into_iter().filter(|&n| (2..=18).contains(&n)) {
                let precision = Precision::Ozaki {
                    moduli: moduli as u8,
                };
                problem.set_precision(precision);
                let label = if moduli == auto {
                    format!("auto ozaki-{moduli}")
                } else {
                    format!("ozaki-{moduli}")
                };
                let mut r = measure(
                    &mut problem,
                    &reference,
                    &label,
                    (m, k, n),
                    &mut |p| p.run(Kernel::Auto).expect("kernel runs"),
                    &mut |p, reps| p.time(Kernel::Auto, 1, reps).expect("kernel timing"),
                );
                r.precision = precision;
                // The same products back to back between two events: the device's time
                // alone, with the host's enqueueing hidden behind the previous product.
                let reps = reps_for(r.ms) as u64;
                let b2b = problem
                    .elapsed(Kernel::Auto, reps)
                    .expect("kernel timing")
                    .as_secs_f64()
                    * 1e3
                    / reps as f64;
                println!(
                    "{} {m:>5}×{k:>5}×{n:>5} {label:<14} {b2b:10.3} ms back to back",
                    A::DTYPE
                );
                records.push(r);
            }
            problem.set_precision(Precision::Native);
        }
        if A::DTYPE == Dtype::F32 {
            // The tensor-core precisions under `auto`, and cuBLAS with TF32.
            for precision in [Precision::Tf32x3, Precision::Tf32] {
                problem.set_precision(precision);
                let mut r = measure(
                    &mut problem,
                    &reference,
                    &format!("auto {precision}"),
                    (m, k, n),
                    &mut |p| p.run(Kernel::Auto).expect("kernel runs"),
                    &mut |p, reps| p.time(Kernel::Auto, 1, reps).expect("kernel timing"),
                );
                r.precision = precision;
                records.push(r);
            }
            problem.set_precision(Precision::Native);
            if let Some(r) = problem.measure_cublas(&reference, (m, k, n), true) {
                records.push(r);
            }
        }
        for r in records.iter().filter(|r| r.dims == (m, k, n)) {
            println!(
                "{} {m:>5}×{k:>5}×{n:>5} {:<14} {:10.3} ms {:9.1} GFLOP/s  rel err {:.2e}",
                A::DTYPE,
                r.name,
                r.ms,
                r.gflops,
                r.rel_err
            );
        }
    }
    records
}

/// cuBLAS in the same run, when built with the feature.
trait Cublas<A: Element> {
    /// cuBLAS's record, in FP32 or (`tf32`, f32 only) with TF32.
    fn measure_cublas(
        &mut self,
        reference: &Reference,
        dims: (usize, usize, usize),
        tf32: bool,
    ) -> Option<Record>;
    /// cuBLAS's median time over `reps` products, in ms (FP32).
    fn cublas_ms(&mut self, reps: usize) -> Option<f64>;
}

impl<A: Element> Cublas<A> for DeviceProblem<A>
where
    DeviceProblem<A>: MaybeCublas<A>,
{
    fn measure_cublas(
        &mut self,
        reference: &Reference,
        dims: (usize, usize, usize),
        tf32: bool,
    ) -> Option<Record> {
        self.cublas_record(reference, dims, tf32)
    }
    fn cublas_ms(&mut self, reps: usize) -> Option<f64> {
        self.cublas_median_ms(reps)
    }
}

trait MaybeCublas<A: Element> {
    fn cublas_record(
        &mut self,
        reference: &Reference,
        dims: (usize, usize, usize),
        tf32: bool,
    ) -> Option<Record>;
    fn cublas_median_ms(&mut self, reps: usize) -> Option<f64>;
}

#[cfg(feature = "cublas")]
impl<A: Element> MaybeCublas<A> for DeviceProblem<A>
where
    cudarc::cublas::CudaBlas: cudarc::cublas::Gemm<A>,
{
    fn cublas_record(
        &mut self,
        reference: &Reference,
        dims: (usize, usize, usize),
        tf32: bool,
    ) -> Option<Record> {
        self.set_cublas_tf32(tf32);
        let mut r = measure(
            self,
            reference,
            if tf32 { "cublas tf32" } else { "cublas" },
            dims,
            &mut |p| p.run_cublas().expect("cuBLAS runs"),
            &mut |p, reps| p.time_cublas(1, reps).expect("cuBLAS timing"),
        );
        self.set_cublas_tf32(false);
        if tf32 {
            r.precision = Precision::Tf32;
        }
        Some(r)
    }
    fn cublas_median_ms(&mut self, reps: usize) -> Option<f64> {
        Some(self.time_cublas(1, reps).expect("cuBLAS timing").median_ms)
    }
}

#[cfg(not(feature = "cublas"))]
impl<A: Element> MaybeCublas<A> for DeviceProblem<A> {
    fn cublas_record(
        &mut self,
        _: &Reference,
        _: (usize, usize, usize),
        _: bool,
    ) -> Option<Record> {
        None
    }
    fn cublas_median_ms(&mut self, _: usize) -> Option<f64> {
        None
    }
}

/// The tables of one element type's records.
fn report(dtype: Dtype, kernels: &[Kernel], suite: &[(usize, usize, usize)], records: &[Record]) {
    let find = |name: &str, dims| {
        records
            .iter()
            .find(|r| r.dtype == dtype && r.name == name && r.dims == dims)
    };
    let cublas = |dims| find("cublas", dims);

    println!("\n{dtype}: | kernel | GFLOP/s 1024³ | GFLOP/s 4096³ | vs naive 4096³ | vs cuBLAS 1024³ | vs cuBLAS 4096³ |");
    println!("|---|---|---|---|---|---|");
    let (d1, d4) = ((1024, 1024, 1024), (4096, 4096, 4096));
    let naive4 = find("naive", d4).map_or(f64::NAN, |r| r.gflops);
    let ratio = |name: &str, d| match (find(name, d), cublas(d)) {
        (Some(r), Some(c)) => format!("{:.2}×", r.gflops / c.gflops),
        _ => "–".into(),
    };
    for name in kernels.iter().map(|k| k.name()).chain(["cublas"]) {
        let (Some(r1), Some(r4)) = (find(name, d1), find(name, d4)) else {
            continue;
        };
        println!(
            "| {name} | {:.0} | {:.0} | {:.2}× | {} | {} |",
            r1.gflops,
            r4.gflops,
            r4.gflops / naive4,
            ratio(name, d1),
            ratio(name, d4)
        );
    }

    println!("\n{dtype}: | m×k×n | auto GFLOP/s | cuBLAS GFLOP/s | auto / cuBLAS | auto rel err | cuBLAS rel err |");
    println!("|---|---|---|---|---|---|");
    let (mut log_sum, mut counted, mut lowest) = (0.0, 0, f64::INFINITY);
    for &dims in suite {
        let (m, k, n) = dims;
        let auto = find("auto", dims).expect("measured");
        match cublas(dims) {
            Some(c) => {
                let q = auto.gflops / c.gflops;
                log_sum += q.ln();
                counted += 1;
                lowest = lowest.min(q);
                println!(
                    "| {m}×{k}×{n} | {:.0} | {:.0} | {q:.2}× | {:.2e} | {:.2e} |",
                    auto.gflops, c.gflops, auto.rel_err, c.rel_err
                );
            }
            None => println!(
                "| {m}×{k}×{n} | {:.0} | – | – | {:.2e} | – |",
                auto.gflops, auto.rel_err
            ),
        }
    }
    if counted > 0 {
        println!(
            "\n{dtype}: geometric mean of auto / cuBLAS over {counted} shapes: {:.3}× (lowest {lowest:.2}×)",
            (log_sum / counted as f64).exp()
        );
    }
    if dtype == Dtype::F32 {
        precision_report(suite, &find);
    }
}

/// A record by name and shape.
type Find<'f, 'r> = dyn Fn(&str, (usize, usize, usize)) -> Option<&'r Record> + 'f;

/// The f32 precisions under `auto` against cuBLAS FP32 (3xTF32) and cuBLAS TF32 (TF32).
fn precision_report(suite: &[(usize, usize, usize)], find: &Find<'_, '_>) {
    println!("\n| m×k×n | fp32 | tf32x3 | tf32 | cuBLAS FP32 | cuBLAS TF32 | tf32x3 / cuBLAS FP32 | tf32 / cuBLAS TF32 | rel err fp32 / tf32x3 / tf32 / cuBLAS FP32 |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut logs = [(0.0, 0usize); 2];
    for &dims in suite {
        let (m, k, n) = dims;
        let get = |name| find(name, dims);
        let (Some(fp32), Some(x3), Some(tf32)) =
            (get("auto"), get("auto tf32x3"), get("auto tf32"))
        else {
            continue;
        };
        let (c, ct) = (get("cublas"), get("cublas tf32"));
        let gf = |r: Option<&Record>| r.map_or("–".into(), |r| format!("{:.0}", r.gflops));
        let mut ratio = |r: &Record, c: Option<&Record>, i: usize| match c {
            Some(c) => {
                let q = r.gflops / c.gflops;
                logs[i].0 += q.ln();
                logs[i].1 += 1;
                format!("{q:.2}×")
            }
            None => "–".into(),
        };
        let (q3, q1) = (ratio(x3, c, 0), ratio(tf32, ct, 1));
        println!(
            "| {m}×{k}×{n} | {:.0} | {:.0} | {:.0} | {} | {} | {q3} | {q1} | {:.1e} / {:.1e} / {:.1e} / {} |",
            fp32.gflops,
            x3.gflops,
            tf32.gflops,
            gf(c),
            gf(ct),
            fp32.rel_err,
            x3.rel_err,
            tf32.rel_err,
            c.map_or("–".into(), |c| format!("{:.1e}", c.rel_err)),
        );
    }
    for ((sum, count), what) in logs
        .iter()
        .zip(["tf32x3 / cuBLAS FP32", "tf32 / cuBLAS TF32"])
    {
        if *count > 0 {
            println!(
                "geometric mean of {what} over {count} shapes: {:.3}×",
                (sum / *count as f64).exp()
            );
        }
    }
}

/// `MxKxN` (m rows, k, n columns) as a shape.
fn parse_shape(text: &str) -> (usize, usize, usize) {
    let sides: Vec<usize> = text
        .trim()
        .split('x')
        .map(|x| x.parse().expect("--shapes: sides like 16384x1024x4096"))
        .collect();
    match sides[..] {
        [m, k, n] => (m, k, n),
        _ => panic!("--shapes: {text} is not MxKxN"),
    }
}

fn main() {
    let (mut json_path, mut plot_path, mut quick) = (None, None, false);
    let mut sizes: Option<Vec<(usize, usize, usize)>> = None;
    let mut auto_only = false;
    let mut rounds = 0;
    let mut dtypes = vec![Dtype::F32, Dtype::F64];
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--json" => json_path = Some(args.next().expect("--json takes a path")),
            "--plot" => plot_path = Some(args.next().expect("--plot takes a path")),
            "--quick" => quick = true,
            "--auto-only" => auto_only = true,
            // The default precision weighs emulation at every size (to find where it pays).
            "--emulate-every-size" => gpu_dot::__testing::emulate_every_size(true),
            "--split-after-verdict" => gpu_dot::__testing::split_early(false),
            "--gemm-after-verdict" => gpu_dot::__testing::gemm_before_verdict(false),
            "--plain-launches" => gpu_dot::__testing::programmatic_launches(false),
            "--gemm-group" => {
                let g = args.next().expect("--gemm-group takes a count of tile rows like 16");
                let g = g.parse().expect("--gemm-group: a whole number");
                gpu_dot::__testing::ozaki_gemm_group(Some(g));
                println!("the INT8 GEMM takes its tiles {g} tile rows to a group");
            }
            "--paired-k" => {
                let s = args.next().expect("--paired-k takes a spread like 20");
                let s = s.parse().expect("--paired-k: a whole number");
                INPUTS
                    .set(gpu_dot::accuracy::Family::PairedK(s))
                    .expect("one input family");
            }
            "--inputs" => {
                let name = args.next().expect("--inputs takes a kind like normal");
                let family = gpu_dot::accuracy::Family::ordinary(&name).unwrap_or_else(|| {
                    panic!("--inputs {name}: expected uniform, positive, normal, relu or lognormal")
                });
                INPUTS.set(family).expect("one input family");
            }
            "--rounds" => {
                let r = args.next().expect("--rounds takes a count like 9");
                rounds = r.parse().expect("--rounds: a whole number");
            }
            "--pretend-sm" => {
                let sm = args.next().expect("--pretend-sm takes a compute capability like 80");
                let sm = sm.parse().expect("--pretend-sm: a number like 80");
                gpu_dot::__testing::pretend_compute_capability(Some(sm));
                println!("choosing kernels as a device of compute capability {sm} would");
            }
            "--sizes" => {
                let list = args.next().expect("--sizes takes a list like 4096,8192");
                sizes = Some(
                    list.split(',')
                        .map(|x| {
                            let x = x.trim().parse().expect("--sizes: whole numbers");
                            (x, x, x)
                        })
                        .collect(),
                );
            }
            "--shapes" => {
                let list = args.next().expect("--shapes takes a list like 16384x1024x4096");
                sizes = Some(list.split(',').map(parse_shape).collect());
            }
            "--dtype" => {
                dtypes = match args.next().expect("--dtype takes f32, f64 or both").as_str() {
                    "f32" => vec![Dtype::F32],
                    "f64" => vec![Dtype::F64],
                    "both" => vec![Dtype::F32, Dtype::F64],
                    other => panic!("--dtype {other}: expected f32, f64 or both"),
                }
            }
            other => panic!(
                "unknown argument {other}; usage: ladder [--quick | --sizes N,N,.. | --shapes MxKxN,..] [--auto-only] [--dtype f32|f64|both] [--json PATH] [--plot PATH] [--pretend-sm NN] [--rounds R] [--emulate-every-size] [--paired-k S | --inputs KIND] [--split-after-verdict] [--gemm-after-verdict] [--plain-launches] [--gemm-group G]"
            ),
        }
    }
    let info = match device_status() {
        DeviceStatus::Ready(info) => info,
        other => {
            eprintln!("the ladder needs a CUDA GPU: {other}");
            std::process::exit(2);
        }
    };
    println!("device: {}", device_status());
    if !cfg!(feature = "cublas") {
        println!("built without --features cublas: no cuBLAS reference column");
    }
    let suite: Vec<_> = if let Some(sizes) = &sizes {
        sizes.clone()
    } else if quick {
        vec![(1024, 1024, 1024), (4096, 4096, 4096)]
    } else {
        SUITE.to_vec()
    };
    let f64_kernels = [Kernel::Reg64, Kernel::Reg128, Kernel::Auto];

    let mut records: Vec<Record> = Vec::new();
    for &dtype in &dtypes {
        let only_auto = [Kernel::Auto];
        let (kernels, got) = match dtype {
            _ if auto_only && dtype == Dtype::F32 => {
                (&only_auto[..], run_suite::<f32>(&suite, &only_auto, rounds))
            }
            _ if auto_only => (&only_auto[..], run_suite::<f64>(&suite, &only_auto, rounds)),
            Dtype::F32 => (&KERNELS[..], run_suite::<f32>(&suite, &KERNELS, rounds)),
            _ => (
                &f64_kernels[..],
                run_suite::<f64>(&suite, &f64_kernels, rounds),
            ),
        };
        report(dtype, kernels, &suite, &got);
        records.extend(got);
    }

    let date = civil_date();
    if let Some(path) = json_path {
        let reference = |r: &Record, name: &str| {
            records
                .iter()
                .find(|c| c.dtype == r.dtype && c.name == name && c.dims == r.dims)
        };
        let json: Vec<_> = records
            .iter()
            .filter(|r| !r.name.starts_with("cublas"))
            .map(|r| {
                let c = reference(r, "cublas");
                let mut record = serde_json::json!({
                    "dtype": r.dtype.name(),
                    "kernel": r.name.split(' ').next(),
                    // f64 in its native precision is FP64: "native" (Precision::Native inside).
                    "precision": if r.dtype == Dtype::F64 && r.precision == Precision::Native {
                        "native".to_string()
                    } else {
                        r.precision.to_string()
                    },
                    "m": r.dims.0, "k": r.dims.1, "n": r.dims.2,
                    "ms": r.ms,
                    "gflops": r.gflops,
                    "cublas_gflops": c.map(|c| c.gflops),
                    "ratio_to_cublas": c.map(|c| r.gflops / c.gflops),
                    "rel_err": r.rel_err,
                    "cublas_rel_err": c.map(|c| c.rel_err),
                });
                if !r.rounds.is_empty() {
                    record["alternating_rounds_ratio_to_cublas"] = serde_json::json!(r.rounds);
                    record["alternating_rounds_median_ratio"] =
                        serde_json::json!(Spread::of(&r.rounds).median);
                }
                if !r.guard_rounds.is_empty() {
                    record["guard_rounds_ratio_to_unguarded"] = serde_json::json!(r.guard_rounds);
                    record["guard_rounds_median_ratio"] =
                        serde_json::json!(Spread::of(&r.guard_rounds).median);
                }
                if r.precision == Precision::Tf32 {
                    let t = reference(r, "cublas tf32");
                    record["cublas_tf32_gflops"] = serde_json::json!(t.map(|t| t.gflops));
                    record["ratio_to_cublas_tf32"] =
                        serde_json::json!(t.map(|t| r.gflops / t.gflops));
                }
                record
            })
            .collect();
        // The operands' kind: uniform unless `--paired-k` or `--inputs` chose a family.
        let inputs = INPUTS
            .get()
            .map_or("uniform".into(), |family| family.name());
        let doc = serde_json::json!({
            "device": info.name, "date": date, "inputs": inputs, "records": json,
        });
        std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap()).expect("write the JSON");
        println!("wrote {path}");
    }
    if let Some(path) = plot_path {
        plot(&path, &records, &dtypes, &format!("{} · {date}", info.name)).expect("write the plot");
        println!("wrote {path}");
    }
}

/// GFLOP/s against size for the square shapes (log scales), one line per kernel and cuBLAS,
/// the f32 tensor-core precisions and cuBLAS with TF32 among them.
fn plot(
    path: &str,
    records: &[Record],
    dtypes: &[Dtype],
    title: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (900, 560 * dtypes.len() as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    for (&dtype, area) in dtypes.iter().zip(root.split_evenly((dtypes.len(), 1))) {
        plot_one(&area, records, dtype, title)?;
    }
    root.present()?;
    Ok(())
}

fn plot_one<DB: plotters::prelude::DrawingBackend>(
    root: &plotters::prelude::DrawingArea<DB, plotters::coord::Shift>,
    records: &[Record],
    dtype: Dtype,
    title: &str,
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    use plotters::prelude::*;
    let squares: Vec<&Record> = records
        .iter()
        .filter(|r| r.dtype == dtype && r.dims.0 == r.dims.1 && r.dims.1 == r.dims.2)
        .collect();
    let max = squares.iter().map(|r| r.gflops).fold(1.0, f64::max) * 1.1;
    let gemm = match dtype {
        Dtype::F32 => "SGEMM",
        _ => "DGEMM",
    };
    let mut chart = ChartBuilder::on(root)
        .caption(format!("{gemm} GFLOP/s, {title}"), ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((200f64..10000f64).log_scale(), (10f64..max).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("m = k = n")
        .y_desc("GFLOP/s")
        .draw()?;
    let names: Vec<&str> = KERNELS
        .iter()
        .map(|k| k.name())
        .chain(["cublas", "auto tf32x3", "auto tf32", "cublas tf32"])
        .collect();
    for (i, name) in names.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let pts: Vec<(f64, f64)> = squares
            .iter()
            .filter(|r| r.name == *name)
            .map(|r| (r.dims.0 as f64, r.gflops))
            .collect();
        if pts.is_empty() {
            continue;
        }
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(*name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    Ok(())
}

/// The compute capability (`major·10 + minor`) of device 0, if there is one.
fn device_sm() -> Option<u32> {
    match device_status() {
        DeviceStatus::Ready(d) => {
            Some((d.compute_capability.0 * 10 + d.compute_capability.1) as u32)
        }
        _ => None,
    }
}

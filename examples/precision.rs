//! The precisions of `f32` products on the device: for each shape, the kernel alone (device
//! time, operands resident) under `Kernel::Auto` in FP32, 3xTF32 and TF32, against cuBLAS
//! SGEMM in FP32 (`CUBLAS_PEDANTIC_MATH`) and with TF32 (`CUBLAS_TF32_TENSOR_OP_MATH`), all in
//! one run; each with its relative error against an f64 reference of sampled rows.
//!
//! Then the accuracy study: the error against an f64 reference (every element) of FP32,
//! 3xTF32, TF32 and cuBLAS FP32 over three kinds of input: uniform in [-1, 1), entries whose
//! magnitudes span 2^±20, and heavy cancellation (the second half of each dot product
//! nearly undoes the first), at several shapes; written into the JSON (`accuracy`) and, with
//! `--plot`, as an SVG.
//!
//! Then, from compute capability 8.0 on, the f64 study: native FP64 (`auto`), Ozaki scheme II with
//! the automatic count of moduli and one fewer and one more, and cuBLAS DGEMM, against rows
//! computed to about twice f64 precision, over uniform inputs, magnitudes spanning 2^±30,
//! heavy cancellation and integer-valued inputs (exact in every method); written into the JSON
//! (`accuracy_f64`) and, with `--plot-f64`, as an SVG.
//!
//!     cargo run --release --features cublas --example precision -- [--quick] [--json PATH] \
//!         [--plot PATH.svg] [--plot-f64 PATH.svg] [--f64-only]
//!
//! `--suite [--json PATH] [--plot PATH.svg]` runs instead the adversarial accuracy suite
//! (`gpu_dot::accuracy::Family::suite`, as `tests/accuracy.rs` does): every family, f64 and
//! f32, at `48 × k · k × 40` for k from 256 to 16384, in the native precision, the default
//! (its guard weighing emulation at every size) and unguarded Ozaki, each as its worst
//! componentwise ratio `|ĉ − c| / (u·Σ|a||b| + (k+1)·η)`. It prints the table, writes the
//! cases into the JSON and plots them, one panel per element type, with the suite's rule
//! `max(2 × native's, 8)` beside each case.
//!
//! `--guard-counts [--rows N] [--json PATH]` needs no GPU: it runs the CPU model of the Ozaki guard
//! (`gpu_dot::__testing::ozaki_guard_counts`, whose counts the device's guard matches element
//! for element in `tests/accuracy.rs`) over inputs of ordinary kinds (uniform in [-1, 1) and in
//! [0, 1), normal, normal through a ReLU, and signed log-normal) at `N × k · k × N` (N = 64,
//! or `--rows N`) for k from 1024 to 32768, f64 and f32. For each it prints the count an automatic product starts
//! from (the guard's first count, whose residues its passes write ahead), how many elements the
//! guard passes at each count, and the count the product runs at (the largest any element
//! needs), beside the early refusal's lead (`gpu_dot::__testing::ozaki_refusal_lead`): the
//! count the guard's passes split for ahead, from the eight elements the early refusal reads
//! (rows `e·m/8` with columns `e·n/8`), the latest those need or the next where their spread
//! says a large product's elements do. Where the product runs past the lead, the guarded
//! default runs the guard's whole test and splits the operands again; where the lead is past
//! the product's count, the product runs at the lead (one modulus more).

mod common;

use gpu_dot::profile::{
    random_matrix_of, reference_f64, relative_error_to, DeviceProblem, SampledReference,
};
use gpu_dot::{Device, Dtype, Element, Kernel, Precision};
use ndarray::{s, Array2};
use serde_json::json;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let value = |flag: &str| common::flag_value(&args, flag);
    let (json_path, plot_path) = (value("--json"), value("--plot"));
    let plot_f64 = value("--plot-f64");
    let f64_only = args.iter().any(|a| a == "--f64-only");
    if args.iter().any(|a| a == "--guard-counts") {
        let rows = value("--rows").map_or(64, |r| r.parse().expect("--rows takes a count"));
        guard_counts_study(json_path.as_deref(), rows);
        return;
    }
    if Device::count() == 0 {
        eprintln!(
            "the precision figures need a CUDA GPU: {}",
            gpu_dot::device_status()
        );
        std::process::exit(2);
    }
    if args.iter().any(|a| a == "--suite") {
        adversarial_suite(json_path.as_deref(), plot_path.as_deref());
        return;
    }
    let suite: &[(usize, usize, usize)] = if quick {
        &[(1024, 1024, 1024), (4096, 4096, 4096)]
    } else {
        &[
            (1024, 1024, 1024),
            (2048, 2048, 2048),
            (4096, 4096, 4096),
            (8192, 8192, 8192),
            (4096, 1024, 4096),
            (1024, 8192, 1024),
            (8192, 256, 8192),
            (3000, 2000, 1000),
        ]
    };
    println!("{}", Device::new(0).status());
    println!("\n| m×k×n | precision | TFLOP/s | cuBLAS FP32 | ratio | cuBLAS TF32 | rel err | cuBLAS FP32 err |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut records = Vec::new();
    for &(m, k, n) in suite.iter().filter(|_| !f64_only) {
        let mut p = DeviceProblem::<f32>::new(m, k, n, 7).expect("a device problem");
        let reference = SampledReference::new(p.a(), p.b(), 64);
        let reps = if m * k * n >= 4096 * 4096 * 4096 {
            10
        } else {
            30
        };
        let tflops = |ms: f64| 2.0 * (m * k * n) as f64 / ms / 1e9;
        #[cfg(feature = "cublas")]
        let cublas = |p: &mut DeviceProblem<f32>, tf32: bool| {
            p.set_cublas_tf32(tf32);
            let c = p.run_cublas().expect("cuBLAS runs");
            let t = p.time_cublas(2, reps).expect("cuBLAS timing");
            (tflops(t.median_ms), reference.relative_error(c.view()))
        };
        #[cfg(not(feature = "cublas"))]
        let cublas = |_: &mut DeviceProblem<f32>, _: bool| (f64::NAN, f64::NAN);
        let (fp32_blas, fp32_blas_err) = cublas(&mut p, false);
        let (tf32_blas, tf32_blas_err) = cublas(&mut p, true);
        for precision in Precision::ALL {
            p.set_precision(precision);
            // Settle the isolated autotuner, then measure.
            let c = p.run(Kernel::Auto).expect("a product");
            let err = reference.relative_error(c.view());
            let t = p.time(Kernel::Auto, 2, reps).expect("timing");
            let ours = tflops(t.median_ms);
            let versus = if precision == Precision::Tf32 {
                tf32_blas
            } else {
                fp32_blas
            };
            println!(
                "| {m}×{k}×{n} | {precision} | {ours:.1} | {fp32_blas:.1} | {:.2}× | {tf32_blas:.1} | {err:.2e} | {fp32_blas_err:.2e} |",
                ours / versus
            );
            records.push(json!({
                "m": m, "k": k, "n": n,
                "precision": precision.name(),
                "gflops": ours * 1e3,
                "rel_err": err,
                "cublas_gflops": fp32_blas * 1e3,
                "cublas_rel_err": fp32_blas_err,
                "cublas_tf32_gflops": tf32_blas * 1e3,
                "cublas_tf32_rel_err": tf32_blas_err,
                "ratio_to_cublas": ours / fp32_blas,
                "ratio_to_cublas_tf32": ours / tf32_blas,
            }));
        }
    }
    let accuracy = if f64_only {
        Vec::new()
    } else {
        accuracy_study(quick)
    };
    if let Some(path) = plot_path.filter(|_| !f64_only) {
        let series = ["fp32", "tf32x3", "tf32", "cuBLAS FP32"];
        let caption = "f32 products: relative error against f64 (uniform | 2^±20 | cancellation)";
        plot(&path, caption, &series, &accuracy).expect("writing the plot");
        println!("wrote {path}");
    }
    let int8 = matches!(
        Device::new(0).status(),
        gpu_dot::DeviceStatus::Ready(d) if d.compute_capability.0 >= 8
    );
    let study64 = if int8 { f64_study(quick) } else { Vec::new() };
    if let Some(path) = plot_f64.filter(|_| int8) {
        let series = [
            "native FP64",
            "ozaki (auto)",
            "ozaki auto−1",
            "ozaki auto+1",
            "cuBLAS DGEMM",
        ];
        let caption = "f64 products: relative error against double-f64 rows (uniform | 2^±30 | cancellation | integers)";
        plot(&path, caption, &series, &study64).expect("writing the plot");
        println!("wrote {path}");
    }
    if let Some(path) = json_path {
        let doc = json!({
            "device": Device::new(0).status().to_string(),
            "records": records,
            "accuracy": accuracy.iter().map(|c| json!({
                "inputs": c.inputs,
                "m": c.dims.0, "k": c.dims.1, "n": c.dims.2,
                "rel_err": {
                    "fp32": c.errors[0], "tf32x3": c.errors[1], "tf32": c.errors[2],
                    "cublas_fp32": c.errors[3],
                },
            })).collect::<Vec<_>>(),
            "accuracy_f64": study64.iter().map(|c| json!({
                "inputs": c.inputs,
                "m": c.dims.0, "k": c.dims.1, "n": c.dims.2,
                "moduli_auto": c.moduli,
                "rel_err": {
                    "native": c.errors[0],
                    "ozaki_auto": c.errors[1],
                    "ozaki_auto_minus_1": c.errors[2],
                    "ozaki_auto_plus_1": c.errors[3],
                    "cublas_dgemm": c.errors[4],
                },
                "ratio_ozaki_auto_to_cublas": c.errors[1] / c.errors[4],
            })).collect::<Vec<_>>(),
        });
        std::fs::write(&path, serde_json::to_string_pretty(&doc).expect("JSON")).expect("writing");
        println!("wrote {path}");
    }
}

/// One case of an accuracy study: relative errors of each series (f32: FP32, 3xTF32, TF32
/// and cuBLAS FP32; f64: native, Ozaki auto, auto − 1, auto + 1 and cuBLAS DGEMM).
struct Case {
    inputs: &'static str,
    dims: (usize, usize, usize),
    errors: Vec<f64>,
    /// The automatic count of moduli (f64 study).
    moduli: usize,
}

/// Operands of one kind of input for an `m × k × n` product, in either element type.
fn operands<A: Element>(
    inputs: &str,
    (m, k, n): (usize, usize, usize),
    seed: u64,
) -> (Array2<A>, Array2<A>) {
    let (a, b): (Array2<A>, Array2<A>) = (
        random_matrix_of(m, k, seed),
        random_matrix_of(k, n, seed ^ 0xB),
    );
    // Magnitudes 2^e, e uniform in [-span, span], times a uniform [-1, 1) value.
    let wide = |x: Array2<A>, s, span: f64| {
        let exps: Array2<A> = random_matrix_of(x.nrows(), x.ncols(), s);
        let scale = exps.mapv(|u| {
            let e = ((u.into_f64() + 1.0) * (span + 0.5)).floor() - span;
            A::from_f64(2f64.powi(e as i32))
        });
        x * scale
    };
    match inputs {
        "wide 2^±20" => (wide(a, seed ^ 0xE1, 20.0), wide(b, seed ^ 0xE2, 20.0)),
        "wide 2^±30" => (wide(a, seed ^ 0xE1, 30.0), wide(b, seed ^ 0xE2, 30.0)),
        // A's two halves equal; B's second half is minus its first plus 1e-3 of noise, so
        // each dot product is about 1e-3 of its terms' size.
        "cancellation" => {
            let h = k / 2;
            let mut a2 = a.clone();
            let left = a.slice(s![.., ..h]).to_owned();
            a2.slice_mut(s![.., h..2 * h]).assign(&left);
            let mut b2 = b.clone();
            let top = b.slice(s![..h, ..]).to_owned();
            let noise: Array2<A> = random_matrix_of(h, n, seed ^ 0xC);
            let noise = noise.mapv(|x| x * A::from_f64(1e-3));
            b2.slice_mut(s![h..2 * h, ..]).assign(&(noise - &top));
            (a2, b2)
        }
        // Integers of magnitude below 2^20: every product exact in FP64 up to k = 2^12.
        "integers" => {
            let int = |x: A| A::from_f64((x.into_f64() * 1048576.0).trunc());
            (a.mapv(int), b.mapv(int))
        }
        _ => (a, b),
    }
}

/// The accuracy studies' shapes: two with `quick`, else five from 256³ to 512×16384×512, and
/// with `odd` one more of no round size.
fn study_shapes(quick: bool, odd: bool) -> Vec<(usize, usize, usize)> {
    if quick {
        return vec![(512, 512, 512), (1024, 4096, 1024)];
    }
    let mut shapes = vec![
        (256, 256, 256),
        (1024, 1024, 1024),
        (2048, 2048, 2048),
        (1024, 4096, 1024),
        (512, 16384, 512),
    ];
    if odd {
        shapes.push((1000, 3000, 700));
    }
    shapes
}

fn accuracy_study(quick: bool) -> Vec<Case> {
    let shapes = study_shapes(quick, true);
    println!("\n| inputs | m×k×n | fp32 | tf32x3 | tf32 | cuBLAS FP32 | tf32x3 / cuBLAS FP32 |");
    println!("|---|---|---|---|---|---|---|");
    let mut cases = Vec::new();
    for inputs in ["uniform", "wide 2^±20", "cancellation"] {
        for (i, &dims) in shapes.iter().enumerate() {
            let (a, b) = operands::<f32>(inputs, dims, 91 + i as u64);
            let reference = reference_f64(a.view(), b.view());
            let mut p = DeviceProblem::from_arrays(a, b).expect("a device problem");
            let mut errors = vec![f64::NAN; 4];
            for (e, precision) in errors.iter_mut().zip(Precision::ALL) {
                p.set_precision(precision);
                let c = p.run(Kernel::Auto).expect("a product");
                *e = relative_error_to(c.view(), &reference);
            }
            #[cfg(feature = "cublas")]
            {
                p.set_cublas_tf32(false);
                let c = p.run_cublas().expect("cuBLAS runs");
                errors[3] = relative_error_to(c.view(), &reference);
            }
            let (m, k, n) = dims;
            println!(
                "| {inputs} | {m}×{k}×{n} | {:.2e} | {:.2e} | {:.2e} | {:.2e} | {:.2} |",
                errors[0],
                errors[1],
                errors[2],
                errors[3],
                errors[1] / errors[3]
            );
            cases.push(Case {
                inputs,
                dims,
                errors,
                moduli: 0,
            });
        }
    }
    cases
}

fn f64_study(quick: bool) -> Vec<Case> {
    let shapes = study_shapes(quick, false);
    println!("\n| inputs | m×k×n | native | ozaki auto (moduli) | auto−1 | auto+1 | cuBLAS DGEMM | ozaki auto / cuBLAS |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut cases = Vec::new();
    for inputs in ["uniform", "wide 2^±30", "cancellation", "integers"] {
        for (i, &dims) in shapes.iter().enumerate() {
            if inputs == "integers" && dims.1 > 4096 {
                continue;
            }
            let (a, b) = operands::<f64>(inputs, dims, 191 + i as u64);
            let reference = SampledReference::new(a.view(), b.view(), 64);
            let mut p = DeviceProblem::from_arrays(a, b).expect("a device problem");
            let auto = gpu_dot::__testing::ozaki_auto_moduli(gpu_dot::Dtype::F64, dims.1);
            let mut errors = vec![f64::NAN; 5];
            let precisions = [
                Precision::Native,
                Precision::Ozaki { moduli: auto as u8 },
                Precision::Ozaki {
                    moduli: (auto - 1) as u8,
                },
                Precision::Ozaki {
                    moduli: (auto + 1).min(18) as u8,
                },
            ];
            for (e, precision) in errors.iter_mut().zip(precisions) {
                p.set_precision(precision);
                let c = p.run(Kernel::Auto).expect("a product");
                *e = reference.relative_error(c.view());
            }
            p.set_precision(Precision::Native);
            #[cfg(feature = "cublas")]
            {
                let c = p.run_cublas().expect("cuBLAS runs");
                errors[4] = reference.relative_error(c.view());
            }
            let (m, k, n) = dims;
            println!(
                "| {inputs} | {m}×{k}×{n} | {:.2e} | {:.2e} ({auto}) | {:.2e} | {:.2e} | {:.2e} | {:.2} |",
                errors[0],
                errors[1],
                errors[2],
                errors[3],
                errors[4],
                errors[1] / errors[4]
            );
            cases.push(Case {
                inputs,
                dims,
                errors,
                moduli: auto,
            });
        }
    }
    cases
}

/// A study as a chart: relative error (log scale) of each case, one series per precision.
fn plot(
    path: &str,
    caption: &str,
    names: &[&str],
    cases: &[Case],
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    let root = SVGBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let (lo, hi) = cases
        .iter()
        .flat_map(|c| c.errors.iter().copied())
        .filter(|e| e.is_finite() && *e > 0.0)
        .fold((f64::INFINITY, 0f64), |(lo, hi), e| (lo.min(e), hi.max(e)));
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            -0.5f64..cases.len() as f64 - 0.5,
            (lo / 2.0..hi * 2.0).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("case (input kind, then shape)")
        .y_desc("‖C − ref‖ / ‖ref‖")
        .x_label_formatter(&|x| {
            cases.get(x.round() as usize).map_or(String::new(), |c| {
                format!("{}×{}×{}", c.dims.0, c.dims.1, c.dims.2)
            })
        })
        .draw()?;
    for (s, name) in names.iter().enumerate() {
        let color = Palette99::pick(s).to_rgba();
        let pts: Vec<(f64, f64)> = cases
            .iter()
            .enumerate()
            .map(|(i, c)| (i as f64, c.errors[s]))
            .filter(|p| p.1.is_finite() && p.1 > 0.0)
            .collect();
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))?
            .label(*name)
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    root.present()?;
    Ok(())
}

/// `--suite`: the adversarial accuracy suite as a table, JSON and a plot.
fn adversarial_suite(json_path: Option<&str>, plot_path: Option<&str>) {
    use gpu_dot::accuracy::{Family, SuiteCase, SUITE_KS, SUITE_MN};
    gpu_dot::__testing::emulate_every_size(true);
    println!("{}", Device::new(0).status());
    let mut cases: Vec<SuiteCase> = Vec::new();
    for dtype in [Dtype::F64, Dtype::F32] {
        println!("\n| {dtype} | k | native | default | ran | unguarded Ozaki | rule |");
        println!("|---|---|---|---|---|---|---|");
        for family in Family::suite(dtype) {
            for (i, k) in SUITE_KS.into_iter().enumerate() {
                let seed = 0x5EED + 97 * i as u64;
                let case = if dtype == Dtype::F64 {
                    SuiteCase::run::<f64>(family, k, seed)
                } else {
                    SuiteCase::run::<f32>(family, k, seed)
                }
                .unwrap_or_else(|e| panic!("{dtype} {} k = {k}: {e:#}", family.name()));
                println!(
                    "| {} | {k} | {:.3} | {:.3} | {} | {:.3e} | {} |",
                    family.name(),
                    case.native.worst,
                    case.default.worst,
                    case.ran(),
                    case.unguarded.worst,
                    if case.meets_rule() { "met" } else { "NOT MET" }
                );
                cases.push(case);
            }
        }
        let of_type: Vec<&SuiteCase> = cases.iter().filter(|c| c.dtype == dtype).collect();
        println!(
            "{dtype}: {} of {} cases emulated, {} meet the rule",
            of_type.iter().filter(|c| c.emulated()).count(),
            of_type.len(),
            of_type.iter().filter(|c| c.meets_rule()).count()
        );
    }
    gpu_dot::__testing::emulate_every_size(false);
    if let Some(path) = json_path {
        let doc = json!({
            "suite": "precision --suite (gpu_dot::accuracy::Family::suite)",
            "device": Device::new(0).status().to_string(),
            "shape": format!("{} x k x {}", SUITE_MN.0, SUITE_MN.1),
            "ratio": "max |c^ - c| / (u * sum|a||b| + (k+1) * eta)",
            "rule": "default <= max(2 * native, 8), native's Inf/NaN pattern",
            "cases": cases.iter().map(|c| json!({
                "dtype": c.dtype.to_string(),
                "family": c.family.name(),
                "k": c.k,
                "native": c.native.worst,
                "default": c.default.worst,
                "default_ran": c.ran(),
                "unguarded_ozaki": c.unguarded.worst,
                "meets_rule": c.meets_rule(),
            })).collect::<Vec<_>>(),
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc).expect("JSON")).expect("writing");
        println!("wrote {path}");
    }
    if let Some(path) = plot_path {
        plot_suite(path, &cases).expect("plotting the suite");
        println!("wrote {path}");
    }
}

/// One series' value of a suite case.
type Ratio = fn(&gpu_dot::accuracy::SuiteCase) -> f64;

/// The suite as a chart: each case's worst ratio (log scale; below 10⁻³ drawn at 10⁻³) in the
/// native precision, the default and unguarded Ozaki, with the rule's bound as a dash, one
/// panel per element type, cases by family and then k.
fn plot_suite(
    path: &str,
    cases: &[gpu_dot::accuracy::SuiteCase],
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    const FLOOR: f64 = 1e-3;
    let root = SVGBackend::new(path, (1200, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((2, 1));
    for (area, dtype) in panels.iter().zip([Dtype::F64, Dtype::F32]) {
        let of_type: Vec<_> = cases.iter().filter(|c| c.dtype == dtype).collect();
        let hi = of_type
            .iter()
            .flat_map(|c| [c.native.worst, c.default.worst, c.unguarded.worst])
            .filter(|v| v.is_finite())
            .fold(10.0f64, f64::max);
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!("{dtype}: worst componentwise ratio per case (48 × k · k × 40, k = 256, 1024, 4096, 16384)"),
                ("sans-serif", 16),
            )
            .margin(12)
            .x_label_area_size(70)
            .y_label_area_size(70)
            .build_cartesian_2d(
                -0.5f64..of_type.len() as f64 - 0.5,
                (FLOOR / 2.0..hi * 4.0).log_scale(),
            )?;
        chart
            .configure_mesh()
            .x_labels(of_type.len())
            .x_label_formatter(&|x| {
                let i = x.round() as usize;
                of_type
                    .get(i)
                    .filter(|c| c.k == gpu_dot::accuracy::SUITE_KS[0])
                    .map_or(String::new(), |c| c.family.name())
            })
            .x_label_style(
                ("sans-serif", 11)
                    .into_font()
                    .transform(FontTransform::Rotate90),
            )
            .y_desc("|ĉ − c| / (u·Σ|a||b|)")
            .y_label_formatter(&|v| format!("{v:.0e}"))
            .draw()?;
        let at = |v: f64| {
            if v.is_finite() {
                v.max(FLOOR)
            } else {
                hi * 2.0
            }
        };
        let series: [(&str, RGBAColor, Ratio); 3] = [
            ("native", BLUE.to_rgba(), |c| c.native.worst),
            ("default", GREEN.mix(0.9).to_rgba(), |c| c.default.worst),
            ("unguarded Ozaki", RED.to_rgba(), |c| c.unguarded.worst),
        ];
        for (s, (name, color, value)) in series.into_iter().enumerate() {
            let pts: Vec<(f64, f64)> = of_type
                .iter()
                .enumerate()
                .map(|(i, c)| (i as f64, at(value(c))))
                .collect();
            let style = if s == 1 {
                color.filled()
            } else {
                color.stroke_width(1)
            };
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3 + s as u32, style)))?
                .label(name)
                .legend(move |(x, y)| Circle::new((x + 10, y), 4, style));
        }
        chart
            .draw_series(of_type.iter().enumerate().map(|(i, c)| {
                let rule = (2.0 * c.native.worst).max(8.0);
                PathElement::new(vec![(i as f64 - 0.4, rule), (i as f64 + 0.4, rule)], BLACK)
            }))?
            .label("rule: max(2 × native, 8)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.8))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// `--guard-counts [--rows N]`: the Ozaki guard's CPU model over ordinary inputs, products of
/// `N × k · k × N` (see the module docs).
fn guard_counts_study(json_path: Option<&str>, rows: usize) {
    use gpu_dot::__testing::{ozaki_auto_moduli, ozaki_guard_counts, ozaki_refusal_lead};
    let (m, n) = (rows, rows);
    println!(
        "| dtype | inputs | k | first count | elements passing at each count | the product runs at | the lead |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut records = Vec::new();
    for dtype in [Dtype::F64, Dtype::F32] {
        for (_, family) in gpu_dot::accuracy::Family::ORDINARY {
            let name = family.name();
            for k in [1024, 2048, 4096, 8192, 16384, 32768] {
                let (a, b) = match dtype {
                    Dtype::F32 => {
                        let (a, b) = family.operands::<f32>((m, k, n), k as u64);
                        (a.mapv(f64::from), b.mapv(f64::from))
                    }
                    _ => family.operands::<f64>((m, k, n), k as u64),
                };
                let (a, b) = (
                    a.as_slice().expect("standard layout"),
                    b.as_slice().expect("standard layout"),
                );
                let first = ozaki_auto_moduli(dtype, k);
                let counts: Vec<usize> = (first..=(first + 3).min(gpu_dot::MAX_MODULI)).collect();
                let verdicts = ozaki_guard_counts(a, b, (m, k, n), dtype, &counts);
                let mut by_count: Vec<(String, usize)> = counts
                    .iter()
                    .map(|&c| {
                        (
                            c.to_string(),
                            verdicts.iter().filter(|v| **v == Some(c)).count(),
                        )
                    })
                    .collect();
                by_count.push((
                    "refused".into(),
                    verdicts.iter().filter(|v| v.is_none()).count(),
                ));
                by_count.retain(|(_, count)| *count > 0);
                let cells: Vec<String> =
                    by_count.iter().map(|(c, e)| format!("{c}: {e}")).collect();
                // One count for the whole product: the largest any element needs, or native
                // where an element passes at none.
                let runs_at = match verdicts.iter().copied().collect::<Option<Vec<usize>>>() {
                    Some(each) => each.into_iter().max().map_or("-".into(), |c| c.to_string()),
                    None => "native (refused)".into(),
                };
                // The early refusal's lead: the count the guard's passes split for early, from
                // the elements it reads exactly (row e·m/8 with column e·n/8).
                let sample = ozaki_refusal_lead(a, b, (m, k, n), dtype, &counts)
                    .map_or("refused".into(), |l| counts[l].to_string());
                println!(
                    "| {dtype} | {name} | {k} | {first} | {} | {runs_at} | {sample} |",
                    cells.join(", ")
                );
                records.push(json!({
                    "dtype": dtype.name(), "inputs": name, "m": m, "k": k, "n": n,
                    "first_count": first, "product_runs_at": runs_at, "lead": sample,
                    "elements_by_count": by_count.iter().map(|(c, e)| json!([c, e])).collect::<Vec<_>>(),
                }));
            }
        }
    }
    if let Some(path) = json_path {
        let doc = json!({ "study": "ozaki guard counts (CPU model)", "cases": records });
        std::fs::write(path, serde_json::to_string_pretty(&doc).expect("JSON"))
            .expect("writing the JSON");
        println!("wrote {path}");
    }
}

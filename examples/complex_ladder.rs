//! The complex ladder: `Complex<f32>` and `Complex<f64>` products resident on the device, the
//! native precision and the default, against cuBLAS CGEMM and ZGEMM measured in the same run
//! (`--features cublas`), in alternating rounds, with each result's normwise error against a
//! Dot2 reference on sampled rows.
//!
//!     cargo run --release --features cublas --example complex_ladder -- \
//!         [--sizes N,N,..] [--dtype c32|c64|both] [--rounds R] [--json PATH] [--four] \
//!         [--kernels K,K,..] [--plain-launches] [--emulate-every-size] [--cublas-apart]
//!
//! A complex product of the crate's is one real product of its stacked parts (`A` as
//! `m × 2k` reals, `B` expanded to `2k × 2n`); its time is the wall time of that product,
//! which returns once the device is done, and its GFLOP/s count real flops, `8·m·k·n`, as
//! cuBLAS's do. Each round
//! times the crate's product and cuBLAS's in turn (the order swapped every round) and the
//! median of the rounds' ratios is the figure; JSON records carry `dtype` (`c32`, `c64`),
//! `kernel` (`native`, `default`, `default-stacked`), `gflops`, `cublas_gflops`, the rounds
//! and the errors. Kernel `default` emulates where its guard takes the emulation: in the
//! Karatsuba form, three INT8 products a modulus, from 3584³ up, and in the real form of the
//! stacked parts below (`--emulate-every-size`: in the Karatsuba form at every size, with the
//! emulation weighed at every size); `default-stacked` is the default with the
//! crate's paired forms off (its `complex_paired` switch): the real form of the stacked parts,
//! each column's parts scaled on their own, four products' INT8 work. `--four` adds the paired
//! forms' real form of the stacked parts (kernel `default-paired-real`, the
//! `complex_karatsuba` switch off: the Karatsuba form's bits from the INT8 work of four
//! products), and four real products of the parts, two accumulating into the other two
//! (kernels `native-four`, `default-four`), the form a complex product takes under the crate's
//! `complex_four_products` switch and the form its batches take. `--kernels` runs only the
//! kernels named (any of the six). `--plain-launches` launches each kernel only after the one
//! before on its stream has finished (to time the programmatic launches of sm_90).
//!
//! cuBLAS's interleaved operands stay on the device beside the crate's by default (12 GiB at
//! 16384³ `c64`). With `--cublas-apart` they are made for each cuBLAS run and freed after it
//! (outside the timed runs), so that the crate's product runs with only its own operands on
//! the device, as in a program that holds only its own matrices. Each record gives the device
//! memory the crate's idle workspaces kept after each round's product (`retained_gib`): a
//! workspace freed when the product ended is allocated again by the next one.

use gpu_dot::accuracy::complex::ComplexReference;
use gpu_dot::num_complex::Complex;
use gpu_dot::profile::complex::ComplexProblem;
use gpu_dot::{device_status, DeviceStatus, Element, Precision, Route};
use ndarray::{Array2, ArrayView2};

struct Record {
    dtype: &'static str,
    kernel: &'static str,
    dims: (usize, usize, usize),
    ms: f64,
    gflops: f64,
    cublas_ms: Option<f64>,
    cublas_gflops: Option<f64>,
    rounds: Vec<f64>,
    rel_err: f64,
    cublas_rel_err: Option<f64>,
    route: String,
    /// Device GiB the crate's idle workspaces kept after each round's timed products.
    retained_gib: Vec<f64>,
}

/// `‖ĉ − c‖_F / ‖c‖_F` over up to 8 rows spread over the product, against a Dot2 reference.
fn rel_err<T: Element>(
    c: ArrayView2<Complex<T>>,
    a: ArrayView2<Complex<T>>,
    b: ArrayView2<Complex<T>>,
) -> f64 {
    let m = a.nrows();
    let rows: Vec<usize> = (0..m).step_by(m.div_ceil(8).max(1)).collect();
    // The sampled rows' reference in one call, one row per core.
    let sampled = a.select(ndarray::Axis(0), &rows);
    let reference = ComplexReference::new(sampled.view(), b);
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (r, &i) in rows.iter().enumerate() {
        for (got, want) in c.row(i).iter().zip(reference.c.row(r)) {
            let got = Complex::new(got.re.into_f64(), got.im.into_f64());
            num += (got - want).norm_sqr();
            den += want.norm_sqr();
        }
    }
    (num / den).sqrt()
}

/// The median: the middle value, or the mean of the middle two of an even count (the upper
/// one alone would be the better of two rounds).
fn median(x: &[f64]) -> f64 {
    let mut v = x.to_vec();
    v.sort_by(f64::total_cmp);
    let h = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[h - 1] + v[h]) / 2.0
    } else {
        v[h]
    }
}

/// Device GiB the crate's idle workspaces keep now.
fn retained_gib() -> f64 {
    gpu_dot::retained_memory().0 as f64 / f64::from(1u32 << 30)
}

fn reps_for(ms: f64) -> usize {
    ((400.0 / ms.max(1e-3)) as usize).clamp(3, 20)
}

fn run<T: Element>(
    dtype: &'static str,
    sizes: &[usize],
    rounds: usize,
    with_four: bool,
    kernels: Option<&[String]>,
    cublas_apart: bool,
) -> Vec<Record> {
    let mut records = Vec::new();
    for &size in sizes {
        let dims = (size, size, size);
        let mut problem = ComplexProblem::<T>::new(size, size, size, 0xC0FFEE ^ size as u64)
            .unwrap_or_else(|e| panic!("{dtype} {size}³: {e:#}"));
        let cublas = problem.run_cublas_if_built();
        if cublas_apart {
            problem.release_cublas_if_built();
        }
        let cublas_err = cublas
            .as_ref()
            .map(|c| rel_err(c.view(), problem.a(), problem.b()));
        // (kernel, precision, four products, the paired forms on, the Karatsuba form on).
        let forms = [
            ("native", Precision::Native, false, true, true),
            ("default", Precision::Auto, false, true, true),
            ("default-stacked", Precision::Auto, false, false, true),
            ("default-paired-real", Precision::Auto, false, true, false),
            ("native-four", Precision::Native, true, true, true),
            ("default-four", Precision::Auto, true, true, true),
        ];
        for (kernel, precision, four, paired, karatsuba) in
            forms.into_iter().filter(|f| match kernels {
                Some(ks) => ks.iter().any(|k| k == f.0),
                None => with_four || (!f.2 && f.4),
            })
        {
            gpu_dot::__testing::complex_paired(paired);
            gpu_dot::__testing::complex_karatsuba(karatsuba);
            let c = if four {
                problem.run_four(precision)
            } else {
                problem.run(precision)
            }
            .expect("the crate's product");
            let err = rel_err(c.view(), problem.a(), problem.b());
            let route = problem.route().map_or(String::new(), Route::to_string);
            let time = |p: &mut ComplexProblem<T>, warmup, reps| {
                if four {
                    p.time_four(precision, warmup, reps)
                } else {
                    p.time(precision, warmup, reps)
                }
                .expect("timing")
                .median_ms
            };
            let first = time(&mut problem, 1, 1);
            let reps = reps_for(first);
            let (mut ours, mut theirs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
            let mut retained = Vec::new();
            for round in 0..rounds.max(1) {
                let mut one = |p: &mut ComplexProblem<T>, crate_first: bool| {
                    let mut ms = [0.0, 0.0];
                    for which in [crate_first, !crate_first] {
                        if which {
                            ms[0] = time(p, 1, reps);
                            retained.push(retained_gib());
                        } else if let Some(t) = p.time_cublas_if_built(reps) {
                            ms[1] = t;
                            if cublas_apart {
                                p.release_cublas_if_built();
                            }
                        }
                    }
                    ms
                };
                let [o, t] = one(&mut problem, round % 2 == 0);
                ours.push(o);
                if t > 0.0 {
                    theirs.push(t);
                    ratios.push(t / o);
                }
            }
            // What the timed products ran (the guard may have refused, and remembered it).
            let route = problem.route().map_or(route, Route::to_string);
            let ms = median(&ours);
            let flops = 8.0 * (size as f64).powi(3);
            let cublas_ms = (!theirs.is_empty()).then(|| median(&theirs));
            let record = Record {
                dtype,
                kernel,
                dims,
                ms,
                gflops: flops / (ms * 1e6),
                cublas_ms,
                cublas_gflops: cublas_ms.map(|t| flops / (t * 1e6)),
                rounds: ratios,
                rel_err: err,
                cublas_rel_err: cublas_err,
                route,
                retained_gib: retained,
            };
            println!(
                "{dtype} {size}³ {kernel}: {:.3} ms, {:.0} GFLOP/s; cuBLAS {}; ratio (median of rounds) {}; error {:.2e} (cuBLAS {}); idle workspaces kept {:.1?} GiB; {}",
                record.ms,
                record.gflops,
                record.cublas_ms.map_or("-".into(), |t| format!("{t:.3} ms")),
                if record.rounds.is_empty() { "-".into() } else { format!("{:.3}×", median(&record.rounds)) },
                record.rel_err,
                record.cublas_rel_err.map_or("-".into(), |e| format!("{e:.2e}")),
                record.retained_gib,
                record.route
            );
            records.push(record);
        }
        gpu_dot::__testing::complex_paired(true);
        gpu_dot::__testing::complex_karatsuba(true);
    }
    records
}

/// cuBLAS where the build has it, else nothing: the example runs either way.
trait MaybeCublas<T: Element> {
    fn run_cublas_if_built(&mut self) -> Option<Array2<Complex<T>>>;
    fn time_cublas_if_built(&mut self, reps: usize) -> Option<f64>;
    fn release_cublas_if_built(&mut self);
}

impl<T: Element> MaybeCublas<T> for ComplexProblem<T> {
    #[cfg(feature = "cublas")]
    fn run_cublas_if_built(&mut self) -> Option<Array2<Complex<T>>> {
        Some(self.run_cublas().expect("cuBLAS"))
    }

    #[cfg(feature = "cublas")]
    fn time_cublas_if_built(&mut self, reps: usize) -> Option<f64> {
        Some(self.time_cublas(1, reps).expect("cuBLAS timing").median_ms)
    }

    #[cfg(feature = "cublas")]
    fn release_cublas_if_built(&mut self) {
        self.release_cublas();
    }

    #[cfg(not(feature = "cublas"))]
    fn release_cublas_if_built(&mut self) {}

    #[cfg(not(feature = "cublas"))]
    fn run_cublas_if_built(&mut self) -> Option<Array2<Complex<T>>> {
        None
    }

    #[cfg(not(feature = "cublas"))]
    fn time_cublas_if_built(&mut self, _reps: usize) -> Option<f64> {
        None
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut sizes, mut dtypes, mut rounds, mut json, mut with_four) =
        (vec![2048, 4096, 8192], vec!["c32", "c64"], 3, None, false);
    let mut kernels: Option<Vec<String>> = None;
    let mut cublas_apart = false;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--sizes" => {
                sizes = args
                    .next()
                    .expect("--sizes N,N,..")
                    .split(',')
                    .map(|s| s.parse().expect("a size"))
                    .collect()
            }
            "--dtype" => {
                dtypes = match args.next().as_deref() {
                    Some("c32") => vec!["c32"],
                    Some("c64") => vec!["c64"],
                    Some("both") => vec!["c32", "c64"],
                    other => panic!("--dtype {other:?}: expected c32, c64 or both"),
                }
            }
            "--rounds" => rounds = args.next().and_then(|r| r.parse().ok()).expect("--rounds R"),
            "--json" => json = Some(args.next().expect("--json PATH")),
            "--four" => with_four = true,
            "--plain-launches" => gpu_dot::__testing::programmatic_launches(false),
            "--emulate-every-size" => gpu_dot::__testing::emulate_every_size(true),
            "--cublas-apart" => cublas_apart = true,
            "--kernels" => {
                kernels = Some(
                    args.next()
                        .expect("--kernels K,K,..")
                        .split(',')
                        .map(String::from)
                        .collect(),
                )
            }
            other => panic!(
                "unknown argument {other}; usage: complex_ladder [--sizes N,N,..] [--dtype c32|c64|both] [--rounds R] [--json PATH] [--four] [--kernels K,K,..] [--plain-launches] [--emulate-every-size] [--cublas-apart]"
            ),
        }
    }
    let info = match device_status() {
        DeviceStatus::Ready(info) => info,
        other => {
            eprintln!("the complex ladder needs a CUDA GPU: {other}");
            std::process::exit(2);
        }
    };
    println!("device: {}", device_status());
    if !cfg!(feature = "cublas") {
        println!("built without --features cublas: no cuBLAS reference");
    }
    let mut records = Vec::new();
    for dtype in dtypes {
        records.extend(match dtype {
            "c32" => run::<f32>(
                "c32",
                &sizes,
                rounds,
                with_four,
                kernels.as_deref(),
                cublas_apart,
            ),
            _ => run::<f64>(
                "c64",
                &sizes,
                rounds,
                with_four,
                kernels.as_deref(),
                cublas_apart,
            ),
        });
    }
    if let Some(path) = json {
        let json: Vec<_> = records
            .iter()
            .map(|r| {
                serde_json::json!({
                    "dtype": r.dtype, "kernel": r.kernel,
                    "m": r.dims.0, "k": r.dims.1, "n": r.dims.2,
                    "ms": r.ms, "gflops": r.gflops,
                    "cublas_ms": r.cublas_ms, "cublas_gflops": r.cublas_gflops,
                    "ratio_to_cublas": r.cublas_gflops.map(|c| r.gflops / c),
                    "alternating_rounds_ratio_to_cublas": r.rounds,
                    "alternating_rounds_median_ratio": (!r.rounds.is_empty()).then(|| median(&r.rounds)),
                    "rel_err": r.rel_err, "cublas_rel_err": r.cublas_rel_err,
                    "route": r.route,
                    "retained_gib": r.retained_gib,
                })
            })
            .collect();
        let doc = serde_json::json!({
            "device": info.name,
            "cublas_apart": cublas_apart,
            "records": json,
        });
        std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap()).expect("write the JSON");
        println!("wrote {path}");
    }
}

//! What a first product costs in a new process, cold (as on a freshly started machine or
//! container: an empty kernel cache and the driver's JIT cache off, `CUDA_CACHE_DISABLE=1`)
//! and warm (the same process started again), beside PyTorch's first product measured the
//! same way. Each case runs in a child process of its own; the time counts from spawning the
//! child to the moment it has the result (process start, driver, context, kernels, copies,
//! product), then the child checks the result against an f64 reference.
//!
//!     cargo run --release --example first_use -- [--json PATH] [--no-prebuilt] [--reps N]
//!
//! Cases: `f32`, `f64`, `tf32x3` (f32 with `Precision::Tf32x3`), `batch` (8 products of
//! 512³ in one 3-D call), `matvec` (a 4096 × 4096 matrix times a vector), all at 1024³ for
//! the matrices, and `loop` (50 products at 2048³, f32: the time of the whole loop and of its
//! 50th product). `--no-prebuilt` makes the children ignore the CUBINs the crate ships, as
//! on a device it ships none for: products then run on the CPU while NVRTC compiles on a
//! background thread, and the record says when the GPU took over.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use gpu_dot::profile::{random_matrix, random_matrix_of, reference_f64, relative_error_to};
use gpu_dot::{module_loads, DotOptions, GpuDot, Precision, ENV_CACHE_DIR};
use ndarray::{Array1, Array3};
use serde_json::{json, Value};

const CHILD: &str = "GPU_DOT_FIRST_USE_CHILD";
const CASES: [&str; 6] = ["f32", "f64", "tf32x3", "batch", "matvec", "loop"];

fn main() {
    if let Ok(case) = std::env::var(CHILD) {
        return child(&case);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .map(|i| args[i + 1].clone())
    };
    let json_path = flag("--json");
    let reps: usize = flag("--reps").map_or(2, |r| r.parse().expect("--reps N"));
    let no_prebuilt = args.iter().any(|a| a == "--no-prebuilt");

    let mut records = Vec::new();
    println!("| case | cold ms to result | warm ms to result | cold ms to the fast kernel | route of the cold first product |");
    println!("|---|---|---|---|---|");
    for case in CASES {
        for rep in 0..reps {
            let dir = std::env::temp_dir().join(format!(
                "gpu-dot-first-use-{}-{case}-{rep}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            let cold = run_child(case, &dir, true, no_prebuilt);
            let warm = run_child(case, &dir, false, no_prebuilt);
            let _ = std::fs::remove_dir_all(&dir);
            println!(
                "| {case} | {:.0} | {:.0} | {} | {} |",
                cold["ms_to_result"].as_f64().unwrap_or(f64::NAN),
                warm["ms_to_result"].as_f64().unwrap_or(f64::NAN),
                cold["ms_to_fast_kernel"]
                    .as_f64()
                    .map_or("-".into(), |ms| format!("{ms:.0}")),
                cold["route"].as_str().unwrap_or("?"),
            );
            if case == "loop" {
                println!(
                    "|   loop of 50 at 2048³ | cold {:.1} ms total, 50th {:.2} ms | warm {:.1} ms total, 50th {:.2} ms | | |",
                    cold["loop_ms"].as_f64().unwrap_or(f64::NAN),
                    cold["last_ms"].as_f64().unwrap_or(f64::NAN),
                    warm["loop_ms"].as_f64().unwrap_or(f64::NAN),
                    warm["last_ms"].as_f64().unwrap_or(f64::NAN),
                );
            }
            records.push(json!({"case": case, "rep": rep, "cold": cold, "warm": warm}));
        }
    }
    let torch: Vec<Value> = ["float32", "float64"]
        .iter()
        .flat_map(|dtype| (0..reps).map(move |_| torch_first(dtype)))
        .collect();
    for t in &torch {
        println!("PyTorch cold first product: {t}");
    }
    let out = json!({
        "device": gpu_dot::device_status().to_string(),
        "commit": option_env!("GPU_DOT_COMMIT").unwrap_or("unknown"),
        "no_prebuilt": no_prebuilt,
        "records": records,
        "pytorch": torch,
    });
    if let Some(path) = json_path {
        std::fs::write(&path, serde_json::to_string_pretty(&out).unwrap()).expect("writing JSON");
        println!("wrote {path}");
    }
}

/// Runs `case` in a child process with the kernel cache in `dir`, cold or warm; the record the
/// child prints, with `ms_to_result` measured here from the spawn to the child's report.
fn run_child(case: &str, dir: &PathBuf, cold: bool, no_prebuilt: bool) -> Value {
    let mut cmd = Command::new(std::env::current_exe().expect("own path"));
    cmd.env(CHILD, case)
        .env(ENV_CACHE_DIR, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if cold {
        cmd.env("CUDA_CACHE_DISABLE", "1");
    }
    if no_prebuilt {
        cmd.env("GPU_DOT_FIRST_USE_NO_PREBUILT", "1");
    }
    let spawned = Instant::now();
    let mut child = cmd.spawn().expect("spawning a child");
    let stdout = BufReader::new(child.stdout.take().expect("piped"));
    let mut result_ms = None;
    let mut record = json!({"error": "the child printed no record"});
    for line in stdout.lines().map_while(Result::ok) {
        if line == "RESULT" {
            result_ms = Some(spawned.elapsed().as_secs_f64() * 1e3);
        } else if let Some(json) = line.strip_prefix("RECORD ") {
            record = serde_json::from_str(json).expect("the child's JSON");
        }
    }
    let status = child.wait().expect("the child ends");
    record["ms_to_result"] = json!(result_ms);
    record["process_ms"] = json!(spawned.elapsed().as_secs_f64() * 1e3);
    record["exit_ok"] = json!(status.success());
    record
}

/// In the child: the case's first product, `RESULT` printed the moment it returns, then its
/// check and costs as one `RECORD` line.
fn child(case: &str) {
    let start = Instant::now();
    if std::env::var_os("GPU_DOT_FIRST_USE_NO_PREBUILT").is_some() {
        gpu_dot::__testing::use_prebuilt_kernels(false);
    }
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    let mut record = match case {
        "f32" | "tf32x3" => {
            let (a, b) = (random_matrix(1024, 1024, 1), random_matrix(1024, 1024, 2));
            let precision = if case == "f32" {
                Precision::Native
            } else {
                Precision::Tf32x3
            };
            let opts = DotOptions::default().precision(precision);
            let p = a.try_gpu_dot_with(&b, &opts).expect("the first product");
            println!("RESULT");
            let error = relative_error_to(p.c.view(), &reference_f64(a.view(), b.view()));
            let fast = until_gpu(start, || a.try_gpu_dot_with(&b, &opts).unwrap().route);
            json!({"route": p.route.to_string(), "relative_error": error, "ms_to_fast_kernel": fast})
        }
        "f64" => {
            let a = random_matrix_of::<f64>(1024, 1024, 1);
            let b = random_matrix_of::<f64>(1024, 1024, 2);
            let p = a
                .try_gpu_dot_with(&b, &DotOptions::default())
                .expect("the first product");
            println!("RESULT");
            // The f64 reference: ndarray's own product, in the same precision.
            let expected = a.dot(&b);
            let error =
                ((&p.c - &expected).mapv(|x| x * x).sum() / expected.mapv(|x| x * x).sum()).sqrt();
            let fast = until_gpu(start, || {
                a.try_gpu_dot_with(&b, &DotOptions::default())
                    .unwrap()
                    .route
            });
            json!({"route": p.route.to_string(), "relative_error": error, "ms_to_fast_kernel": fast})
        }
        "batch" => {
            let a = Array3::from_shape_vec(
                (8, 512, 512),
                random_matrix(8 * 512, 512, 1).into_raw_vec_and_offset().0,
            )
            .unwrap();
            let b = Array3::from_shape_vec(
                (8, 512, 512),
                random_matrix(8 * 512, 512, 2).into_raw_vec_and_offset().0,
            )
            .unwrap();
            let opts = DotOptions::default();
            let p = a.try_gpu_dot_with(&b, &opts).expect("the first product");
            println!("RESULT");
            let error = (0..8)
                .map(|i| {
                    let (ai, bi) = (
                        a.index_axis(ndarray::Axis(0), i),
                        b.index_axis(ndarray::Axis(0), i),
                    );
                    relative_error_to(p.c.index_axis(ndarray::Axis(0), i), &reference_f64(ai, bi))
                })
                .fold(0.0, f64::max);
            let fast = until_gpu(start, || a.try_gpu_dot_with(&b, &opts).unwrap().route);
            json!({"route": p.route.to_string(), "relative_error": error, "ms_to_fast_kernel": fast})
        }
        "matvec" => {
            let a = random_matrix(4096, 4096, 1);
            let x: Array1<f32> = random_matrix(4096, 1, 2).column(0).to_owned();
            let opts = DotOptions::default();
            let p = a.try_gpu_dot_with(&x, &opts).expect("the first product");
            println!("RESULT");
            let reference = reference_f64(a.view(), x.view().insert_axis(ndarray::Axis(1)));
            let error = relative_error_to(p.c.view().insert_axis(ndarray::Axis(1)), &reference);
            let fast = until_gpu(start, || a.try_gpu_dot_with(&x, &opts).unwrap().route);
            json!({"route": p.route.to_string(), "relative_error": error, "ms_to_fast_kernel": fast})
        }
        "loop" => {
            let (a, b) = (random_matrix(2048, 2048, 1), random_matrix(2048, 2048, 2));
            let opts = DotOptions::default();
            let loop_start = Instant::now();
            let mut first = None;
            let mut last_ms = 0.0;
            let mut last = None;
            for i in 0..50 {
                let t = Instant::now();
                let p = a.try_gpu_dot_with(&b, &opts).expect("a product");
                last_ms = ms(t);
                if i == 0 {
                    println!("RESULT");
                    first = Some(p.route.to_string());
                }
                last = Some(p);
            }
            let loop_ms = ms(loop_start);
            let p = last.expect("50 products");
            let error = relative_error_to(p.c.view(), &reference_f64(a.view(), b.view()));
            json!({"route": first, "last_route": p.route.to_string(), "relative_error": error,
                   "loop_ms": loop_ms, "last_ms": last_ms})
        }
        other => panic!("no case {other}"),
    };
    let loads = module_loads();
    record["modules"] = json!(loads
        .iter()
        .map(
            |l| json!({"family": l.family, "prebuilt": l.prebuilt, "cached": l.cached,
                        "nvrtc_ms": l.nvrtc_ms, "load_ms": l.load_ms})
        )
        .collect::<Vec<_>>());
    record["context_ms"] = json!(match gpu_dot::device_status() {
        gpu_dot::DeviceStatus::Ready(info) => info.context_ms,
        _ => f64::NAN,
    });
    println!("RECORD {record}");
}

/// Milliseconds from `start` until `product` runs on the GPU (the first product's route
/// included), trying for at most ten minutes; `None` if it never does.
fn until_gpu(start: Instant, mut product: impl FnMut() -> gpu_dot::Route) -> Option<f64> {
    loop {
        if product().is_gpu() {
            return Some(start.elapsed().as_secs_f64() * 1e3);
        }
        if start.elapsed().as_secs() > 600 {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// PyTorch's first product at 1024³ in a fresh `python3` with `CUDA_CACHE_DISABLE=1`: from
/// the spawn to the moment `(a.cuda() @ b.cuda()).cpu()` returns.
fn torch_first(dtype: &str) -> Value {
    let script = format!(
        "import time\n\
         import torch\n\
         t = time.perf_counter()\n\
         a = torch.rand(1024, 1024, dtype=torch.{dtype}); b = torch.rand(1024, 1024, dtype=torch.{dtype})\n\
         c = (a.cuda() @ b.cuda()).cpu()\n\
         print('RESULT', (time.perf_counter() - t) * 1e3, flush=True)\n"
    );
    let spawned = Instant::now();
    let out = Command::new("python3")
        .args(["-c", &script])
        .env("CUDA_CACHE_DISABLE", "1")
        .stderr(Stdio::null())
        .output();
    let ms = spawned.elapsed().as_secs_f64() * 1e3;
    match out {
        Ok(o) if String::from_utf8_lossy(&o.stdout).contains("RESULT") => {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            let after_import: Option<f64> = text
                .lines()
                .find_map(|l| l.strip_prefix("RESULT "))
                .and_then(|t| t.trim().parse().ok());
            json!({"dtype": dtype, "ms_to_result": ms, "ms_after_import": after_import})
        }
        _ => json!({"dtype": dtype, "error": "python3 with torch did not run"}),
    }
}

//! The kernel ladder: every kernel's device-side throughput at a few sizes, its speed-up over
//! the naive kernel and its error against an f64 reference.
//!
//!     cargo run --release --example ladder -- [--sizes 1024,4096] [--json PATH]

use gpu_dot::profile::{relative_error, DeviceProblem};
use gpu_dot::{device_status, DeviceStatus, Kernel};

struct Row {
    kernel: Kernel,
    size: usize,
    ms: f64,
    gflops: f64,
    rel_err: f64,
}

fn main() {
    let mut sizes = vec![1024, 4096];
    let mut json_path = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--sizes" => {
                sizes = args
                    .next()
                    .expect("--sizes takes a list")
                    .split(',')
                    .map(|s| s.trim().parse().expect("sizes are integers"))
                    .collect()
            }
            "--json" => json_path = Some(args.next().expect("--json takes a path")),
            other => {
                panic!("unknown argument {other}; usage: ladder [--sizes 1024,4096] [--json PATH]")
            }
        }
    }
    let info = match device_status() {
        DeviceStatus::Ready(info) => info,
        DeviceStatus::Unavailable(reason) => {
            eprintln!("the ladder needs a CUDA GPU: {reason}");
            std::process::exit(2);
        }
    };
    println!("device: {}", device_status());

    let mut rows = Vec::new();
    for &size in &sizes {
        let mut problem =
            DeviceProblem::new(size, size, size, size as u64).expect("device problem");
        for kernel in Kernel::ALL {
            let c = problem.run(kernel).expect("kernel runs");
            let rel_err = relative_error(c.view(), problem.a(), problem.b());
            let reps = if size >= 4096 { 5 } else { 20 };
            let t = problem.time(kernel, 2, reps).expect("kernel timing");
            println!(
                "{size:>6}³ {:<8} {:9.3} ms {:9.1} GFLOP/s  rel err {rel_err:.2e}",
                kernel.name(),
                t.median_ms,
                t.gflops
            );
            rows.push(Row {
                kernel,
                size,
                ms: t.median_ms,
                gflops: t.gflops,
                rel_err,
            });
        }
    }

    let find = |kernel: Kernel, size: usize| {
        rows.iter()
            .find(|r| r.kernel == kernel && r.size == size)
            .expect("measured")
    };
    println!();
    print!("| kernel |");
    for s in &sizes {
        print!(" GFLOP/s {s}³ | vs naive |");
    }
    println!();
    print!("|---|");
    for _ in &sizes {
        print!("---|---|");
    }
    println!();
    for kernel in Kernel::ALL {
        print!("| {} |", kernel.name());
        for &s in &sizes {
            let r = find(kernel, s);
            print!(
                " {:.0} | {:.2}× |",
                r.gflops,
                r.gflops / find(Kernel::Naive, s).gflops
            );
        }
        println!();
    }

    if let Some(path) = json_path {
        let records: Vec<_> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "kernel": r.kernel.name(),
                    "m": r.size, "k": r.size, "n": r.size,
                    "ms": r.ms,
                    "gflops": r.gflops,
                    "speedup_over_naive": r.gflops / find(Kernel::Naive, r.size).gflops,
                    "rel_err": r.rel_err,
                })
            })
            .collect();
        let doc = serde_json::json!({
            "device": info.name,
            "compute_capability": format!("{}.{}", info.compute_capability.0, info.compute_capability.1),
            "records": records,
        });
        std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap()).expect("write the JSON");
        println!("\nwrote {path}");
    }
}

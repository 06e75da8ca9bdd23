//! Batched products host to host: `a.gpu_dot(&b)` on 3-D stacks against PyTorch's line
//! `torch.bmm(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()).cpu().numpy()` (TF32
//! off; `torch.matmul` for a shared right operand), run through `python3` in the same call,
//! against ndarray on the CPU, and against a loop of 2-D `gpu_dot` calls over the items.
//!
//!     cargo run --release --example batches -- [--quick] [--no-torch] [--gpu-only]
//!         [--cases f32:BxMxKxN[:shared],...] [--json PATH]
//!
//! `--cases` measures the batches it names instead of the usual ones; `--gpu-only` measures
//! `gpu_dot` alone (no loop of 2-D products, no ndarray).

mod common;

use gpu_dot::profile::random_matrix_of;
use gpu_dot::{device_status, Backend, DeviceStatus, DotOptions, Element, GpuDot};
use ndarray::{Array2, Array3, Axis};
use serde_json::{json, Value};

use common::median_ms;

/// One case: `batch` products of `m × k` by `k × n`, the right operand shared or not.
#[derive(Clone, Copy)]
struct Case {
    dtype: &'static str,
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    shared: bool,
}

/// The PyTorch line's median time for each case, or `None` when python3 or torch is missing.
fn torch_times(cases: &[Case]) -> Option<Vec<f64>> {
    const SCRIPT: &str = r#"
import json, sys, time
import numpy as np
import torch
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
out = []
for dtype, batch, m, k, n, shared in json.loads(sys.argv[1]):
    t = np.float32 if dtype == "f32" else np.float64
    a = np.random.rand(batch, m, k).astype(t)
    b = np.random.rand(k, n).astype(t) if shared else np.random.rand(batch, k, n).astype(t)
    if shared:
        f = lambda: torch.matmul(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()).cpu().numpy()
    else:
        f = lambda: torch.bmm(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()).cpu().numpy()
    f(); torch.cuda.synchronize()
    t0 = time.perf_counter(); f(); once = time.perf_counter() - t0
    reps = int(min(100, max(3, 0.6 / max(once, 1e-6))))
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); f(); ts.append((time.perf_counter() - t0) * 1e3)
    ts.sort()
    out.append(ts[len(ts) // 2])
print(json.dumps(out))
"#;
    let arg: Vec<Value> = cases
        .iter()
        .map(|c| json!([c.dtype, c.batch, c.m, c.k, c.n, c.shared]))
        .collect();
    common::python_times(SCRIPT, &serde_json::to_string(&arg).expect("JSON"))
}

fn stack<A: Element>(batch: usize, rows: usize, cols: usize, seed: u64) -> Array3<A> {
    let flat: Array2<A> = random_matrix_of(batch * rows, cols, seed);
    Array3::from_shape_fn((batch, rows, cols), |(z, i, j)| flat[[z * rows + i, j]])
}

/// The cases `--cases` names: `f32:BxMxKxN` or `f64:BxMxKxN:shared`, comma-separated.
fn parse_cases(spec: &str) -> Vec<Case> {
    spec.split(',')
        .map(|c| {
            let parts: Vec<&str> = c.split(':').collect();
            let dims: Vec<usize> = parts[1]
                .split('x')
                .map(|d| d.parse().expect("a dimension"))
                .collect();
            assert!(dims.len() == 4, "a case is dtype:BxMxKxN[:shared]");
            Case {
                dtype: if parts[0] == "f64" { "f64" } else { "f32" },
                batch: dims[0],
                m: dims[1],
                k: dims[2],
                n: dims[3],
                shared: parts.get(2) == Some(&"shared"),
            }
        })
        .collect()
}

fn measure<A: Element>(case: Case, seed: u64, cpu_too: bool, loop_too: bool) -> Value {
    let Case {
        batch,
        m,
        k,
        n,
        shared,
        ..
    } = case;
    let a = stack::<A>(batch, m, k, seed);
    let b3 = stack::<A>(if shared { 1 } else { batch }, k, n, seed + 1);
    let b2 = b3.index_axis(Axis(0), 0).to_owned();
    let run = |opts: &DotOptions| {
        if shared {
            a.try_gpu_dot_with(&b2, opts).expect("batch")
        } else {
            a.try_gpu_dot_with(&b3, opts).expect("batch")
        }
    };
    let gpu = DotOptions::builtin().backend(Backend::Gpu);
    let route = run(&gpu).route;
    let gpu_ms = median_ms(600.0, || drop(run(&gpu)));
    // One 2-D gpu_dot per item (the way to batch without a batched form).
    let loop_ms = loop_too.then(|| {
        median_ms(600.0, || {
            for z in 0..batch {
                let az = a.index_axis(Axis(0), z);
                let bz = if shared {
                    b2.view()
                } else {
                    b3.index_axis(Axis(0), z)
                };
                drop(az.try_gpu_dot_with(&bz, &gpu).expect("item"));
            }
        })
    });
    let cpu_ms = cpu_too.then(|| {
        median_ms(600.0, || {
            drop(run(&DotOptions::builtin().backend(Backend::Cpu)))
        })
    });
    json!({
        "dtype": case.dtype, "batch": batch, "m": m, "k": k, "n": n, "shared": shared,
        "gpu_dot_ms": gpu_ms,
        "item_loop_ms": loop_ms,
        "ndarray_ms": cpu_ms,
        "route": route.to_string(),
    })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let gpu_only = args.iter().any(|a| a == "--gpu-only");
    let no_torch = gpu_only || args.iter().any(|a| a == "--no-torch");
    let named = args
        .iter()
        .position(|a| a == "--cases")
        .and_then(|i| args.get(i + 1))
        .map(|spec| parse_cases(spec));
    let json_path = args
        .iter()
        .position(|a| a == "--json")
        .and_then(|i| args.get(i + 1).cloned());
    let DeviceStatus::Ready(info) = device_status() else {
        eprintln!("the batch figures need a CUDA GPU: {}", device_status());
        std::process::exit(2);
    };
    println!("device: {}", device_status());
    let case = |dtype, batch, m, k, n, shared| Case {
        dtype,
        batch,
        m,
        k,
        n,
        shared,
    };
    let mut cases = vec![
        // Attention-like: many small products.
        case("f32", 64, 128, 64, 128, false),
        case("f32", 256, 128, 64, 128, false),
        case("f32", 96, 256, 64, 256, false),
        case("f32", 32, 512, 64, 512, false),
        case("f32", 128, 64, 64, 64, false),
        case("f32", 16, 1024, 1024, 1024, false),
        // A shared right operand (a layer applied to a batch of sequences).
        case("f32", 32, 512, 1024, 1024, true),
        case("f64", 64, 128, 64, 128, false),
        case("f64", 16, 512, 512, 512, false),
    ];
    if let Some(named) = named {
        cases = named;
    } else if !quick {
        cases.push(case("f32", 8, 2048, 2048, 2048, false));
        cases.push(case("f64", 8, 1024, 1024, 1024, false));
        // Items of shapes that the default precision emulates as single products (a batch
        // of them still runs in one native launch).
        cases.push(case("f32", 4, 4096, 1024, 4096, false));
        cases.push(case("f64", 2, 4096, 4096, 4096, false));
    }
    let torch = if no_torch { None } else { torch_times(&cases) };
    println!("\n| dtype | batch | m | k | n | B | gpu_dot ms | torch ms | gpu_dot / torch | 2-D loop ms | ndarray ms | route |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut records = Vec::new();
    for (i, &c) in cases.iter().enumerate() {
        let cpu_too = !gpu_only && c.batch * c.m * c.k * c.n <= 1 << 31;
        let mut r = match c.dtype {
            "f32" => measure::<f32>(c, 10 + i as u64, cpu_too, !gpu_only),
            _ => measure::<f64>(c, 10 + i as u64, cpu_too, !gpu_only),
        };
        let torch_ms = torch.as_ref().map(|t| t[i]);
        r["torch_ms"] = json!(torch_ms);
        let g = r["gpu_dot_ms"].as_f64().unwrap();
        println!(
            "| {} | {} | {} | {} | {} | {} | {g:.3} | {} | {} | {} | {} | {} |",
            c.dtype,
            c.batch,
            c.m,
            c.k,
            c.n,
            if c.shared { "shared" } else { "per item" },
            torch_ms.map_or("-".into(), |t| format!("{t:.3}")),
            torch_ms.map_or("-".into(), |t| format!("{:.2}", g / t)),
            r["item_loop_ms"]
                .as_f64()
                .map_or("-".into(), |t| format!("{t:.3}")),
            r["ndarray_ms"]
                .as_f64()
                .map_or("-".into(), |t| format!("{t:.3}")),
            r["route"].as_str().unwrap(),
        );
        records.push(r);
    }
    let doc = json!({ "device": info.name, "cases": records });
    if let Some(path) = json_path {
        std::fs::write(&path, serde_json::to_string_pretty(&doc).expect("JSON"))
            .expect("writing the JSON");
        println!("wrote {path}");
    }
}

//! Complex products host to host: for squares from 32 to 4096 (and 8192 unless `--quick`),
//! `Complex<f32>` or `Complex<f64>`, the time of `gpu_dot` with default settings, of
//! ndarray's `dot` (up to 2048³), of the GPU path forced (`Backend::Gpu`), and of PyTorch's
//! `(torch.from_numpy(a).cuda() @ torch.from_numpy(b).cuda()).cpu().numpy()` on complex64 or
//! complex128 arrays, run through `python3` in the same call; beside each, the floor the link
//! allows (the longer direction's bytes at the page-locked speed measured at the start, plus
//! 25 µs). The small squares show where the GPU path starts to pay: the threshold for complex
//! products, in real flops (`8·m·k·n`).
//!
//!     cargo run --release --example complex_sweep -- [--dtype c32|c64] [--quick]
//!         [--sizes 256,1024] [--no-torch] [--json PATH] [--four]
//!
//! `--four` runs the GPU's products as four real products of the parts instead of the crate's
//! form, one real product of the stacked parts (`A` as `m × 2k` reals and `B` expanded to
//! `2k × 2n`).

mod common;

use std::time::Instant;

use common::median_ms;
use gpu_dot::num_complex::Complex;
use gpu_dot::profile::random_matrix_of;
use gpu_dot::{device_status, Backend, DeviceStatus, DotOptions, Element, GpuDot};
use ndarray::Array2;
use serde_json::json;

/// PyTorch's host line on complex arrays of `dtype` (`complex64`, `complex128`), median ms.
fn torch_times(shapes: &[usize], dtype: &str) -> Option<Vec<f64>> {
    const SCRIPT: &str = r#"
import json, sys, time
import numpy as np
import torch
torch.backends.cuda.matmul.allow_tf32 = False
out = []
sizes, dtype = json.loads(sys.argv[1])
for n in sizes:
    a = (np.random.rand(n, n) + 1j * np.random.rand(n, n)).astype(dtype)
    b = (np.random.rand(n, n) + 1j * np.random.rand(n, n)).astype(dtype)
    f = lambda: (torch.from_numpy(a).cuda() @ torch.from_numpy(b).cuda()).cpu().numpy()
    f(); torch.cuda.synchronize()
    t0 = time.perf_counter(); f(); once = time.perf_counter() - t0
    reps = int(min(100, max(3, 1.0 / max(once, 1e-6))))
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); f(); ts.append((time.perf_counter() - t0) * 1e3)
    ts.sort()
    out.append(ts[len(ts) // 2])
print(json.dumps(out))
"#;
    let arg = serde_json::to_string(&(shapes, dtype)).expect("sizes serialize");
    common::python_times(SCRIPT, &arg)
}

fn random<T: Element>(n: usize, seed: u64) -> Array2<Complex<T>> {
    let (re, im) = (
        random_matrix_of::<T>(n, n, seed),
        random_matrix_of::<T>(n, n, !seed),
    );
    ndarray::Zip::from(&re)
        .and(&im)
        .map_collect(|&re, &im| Complex::new(re, im))
}

fn sweep<T: Element>(
    name: &str,
    sizes: &[usize],
    torch: Option<Vec<f64>>,
    link: (f64, f64),
) -> Vec<serde_json::Value> {
    let gpu = DotOptions::builtin().backend(Backend::Gpu);
    let mut records = Vec::new();
    println!("\n{name}: | n³ | gpu_dot ms | ndarray ms | GPU path ms | torch ms | floor ms | gpu_dot / floor | torch / gpu_dot | GPU path / ndarray | route |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (i, &n) in sizes.iter().enumerate() {
        let (a, b) = (random::<T>(n, 1 + i as u64), random::<T>(n, 100 + i as u64));
        let route = common::warm_until_settled(|| {
            a.try_gpu_dot_with(&b, &DotOptions::default())
                .expect("gpu_dot")
                .route
        });
        a.try_gpu_dot_with(&b, &gpu).expect("the GPU path");
        let budget = if n >= 4096 { 2000.0 } else { 500.0 };
        let gpu_dot_ms = median_ms(budget, || drop(a.gpu_dot(&b)));
        let path_ms = median_ms(budget, || drop(a.try_gpu_dot_with(&b, &gpu).expect("GPU")));
        let ndarray_ms = (n <= 2048).then(|| {
            let once = Instant::now();
            drop(a.dot(&b));
            let once = once.elapsed().as_secs_f64() * 1e3;
            median_ms((once * 5.0).max(budget), || drop(a.dot(&b)))
        });
        let torch_ms = torch.as_ref().map(|t| t[i]);
        let bytes = std::mem::size_of::<Complex<T>>();
        let floor = common::link::floor_ms(link, 2 * n * n * bytes, n * n * bytes);
        let fmt = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.3}"));
        println!(
            "| {n} | {gpu_dot_ms:.3} | {} | {path_ms:.3} | {} | {floor:.3} | {:.2} | {} | {} | {route} |",
            fmt(ndarray_ms),
            fmt(torch_ms),
            gpu_dot_ms / floor,
            torch_ms.map_or("-".into(), |t| format!("{:.2}", t / gpu_dot_ms)),
            ndarray_ms.map_or("-".into(), |c| format!("{:.2}", path_ms / c)),
        );
        records.push(json!({
            "dtype": name, "m": n, "k": n, "n": n,
            "gpu_dot_ms": gpu_dot_ms, "ndarray_ms": ndarray_ms, "gpu_path_ms": path_ms,
            "torch_ms": torch_ms, "floor_ms": floor, "route": route.to_string(),
        }));
    }
    records
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| common::flag_value(&args, flag);
    let DeviceStatus::Ready(info) = device_status() else {
        eprintln!("the complex sweep needs a CUDA GPU: {}", device_status());
        std::process::exit(2);
    };
    println!("device: {}", device_status());
    let mut sizes = vec![32, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 2048, 4096];
    if !args.iter().any(|a| a == "--quick") {
        sizes.push(8192);
    }
    if let Some(v) = value("--sizes") {
        sizes = v
            .split(',')
            .map(|s| s.trim().parse().expect("--sizes N,N"))
            .collect();
    }
    // Four real products of the parts instead of one product of the stacked parts.
    let four = args.iter().any(|a| a == "--four");
    gpu_dot::__testing::complex_four_products(four);
    let dtype = value("--dtype").unwrap_or_else(|| "c32".into());
    let torch_dtype = if dtype == "c64" {
        "complex128"
    } else {
        "complex64"
    };
    let torch = (!args.iter().any(|a| a == "--no-torch"))
        .then(|| torch_times(&sizes, torch_dtype))
        .flatten();
    let link = common::link::pinned_gbs();
    println!(
        "link, page-locked: {:.1} GB/s up, {:.1} GB/s down",
        link.0, link.1
    );
    let records = match dtype.as_str() {
        "c32" => sweep::<f32>("c32", &sizes, torch, link),
        "c64" => sweep::<f64>("c64", &sizes, torch, link),
        other => panic!("--dtype {other}: expected c32 or c64"),
    };
    let doc = json!({
        "device": info.name, "dtype": dtype, "form": if four { "four" } else { "stacked" },
        "link_gbs": {"up": link.0, "down": link.1}, "shapes": records,
    });
    if let Some(path) = value("--json") {
        std::fs::write(&path, serde_json::to_string_pretty(&doc).expect("JSON")).expect("write");
        println!("wrote {path}");
    }
}

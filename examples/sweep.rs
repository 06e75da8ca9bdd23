//! Host-to-host figures in one run: for squares from 16 to 4096 (8192 unless `--quick`) and a
//! few rectangles, the time of `gpu_dot` with default settings, of ndarray's `dot`, of the GPU
//! path forced (`Backend::Gpu`), of the GPU path into an existing array (`general_mat_mul`:
//! taken in the same rotation as the others, so that its ratio to the GPU path is what a fresh
//! result costs, and back to back), and of PyTorch's
//! `(torch.from_numpy(a).cuda() @ torch.from_numpy(b).cuda()).cpu().numpy()` (TF32 off) run
//! through `python3` in the same call, and of PyTorch from and into page-locked tensors
//! (`pin_memory()`, copies with `non_blocking=True`, then a synchronize); then the first-call
//! costs of a fresh process (context creation, NVRTC, module load) and of a second one that
//! finds the compiled kernels in the on-disk cache.
//!
//!     cargo run --release --example sweep -- [--quick] [--no-torch] [--json PATH]
//!         [--sizes 256,1024] [--no-first-call] [--dtype f32|f64] [--plain-launches]
//!         [--mapped-inputs-up-to BYTES]
//!
//! Each point also shows its floor: the longer direction's bytes at the page-locked link
//! speed measured at the start of the run, plus a 25 µs round trip; and the host memory's
//! floor for staging: every byte in and out copied once at the best copy rate of the host
//! memory (measured by thread count at the start of the run), plus the round trip.
//!
//! `pinned ms` is the GPU path from and into [`gpu_dot::PinnedArray`]s (A, B and C page-locked
//! in place, copied straight by DMA), taken in the same rotation.
//!
//! `--mapped-inputs-up-to BYTES` lets the kernels read host A and B in place from page-locked
//! staging up to that many bytes of inputs (0: never) instead of the crate's own limit.
//!
//! `--sizes` measures only those squares; `--no-first-call` skips the child processes. Each
//! shape is warmed up until the autotuner has settled on its choice.
//!
//! `--f64-crossover` measures instead where `f64` products start to pay on the GPU: squares
//! from 64 to 512, the GPU path forced against ndarray's f64 `dot`, host to host.
//!
//! Prints a markdown table (the crossover and each point's ratio to the faster of ndarray and
//! the GPU path) and writes the JSON records to PATH.

mod common;

use std::process::Command;
use std::time::Instant;

use gpu_dot::profile::{random_matrix, random_matrix_of};
use gpu_dot::{
    device_status, module_loads, Backend, DeviceStatus, DotOptions, Dtype, Element, GpuDot,
    PinnedArray, ENV_CACHE_DIR,
};
use serde_json::{json, Value};

use common::median_ms;

const CHILD: &str = "GPU_DOT_SWEEP_FIRST_CALL";

fn median(mut t: Vec<f64>) -> f64 {
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

/// The PyTorch lines' median times for each shape in `dtype` (`float32` or `float64`): from
/// NumPy arrays, then from and into page-locked tensors (`pin_memory`, non-blocking copies), two
/// entries a shape; or `None` when python3 or torch is missing.
fn torch_times(shapes: &[(usize, usize, usize)], dtype: &str) -> Option<Vec<f64>> {
    const SCRIPT: &str = r#"
import json, sys, time
import numpy as np
import torch
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
def median_ms(f):
    f(); torch.cuda.synchronize()
    t0 = time.perf_counter(); f(); once = time.perf_counter() - t0
    reps = int(min(200, max(3, 1.0 / max(once, 1e-6))))
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); f(); ts.append((time.perf_counter() - t0) * 1e3)
    ts.sort()
    return ts[len(ts) // 2]
out = []
shapes, dtype = json.loads(sys.argv[1])
for m, k, n in shapes:
    a = np.random.rand(m, k).astype(dtype)
    b = np.random.rand(k, n).astype(dtype)
    out.append(median_ms(lambda: (torch.from_numpy(a).cuda() @ torch.from_numpy(b).cuda()).cpu().numpy()))
    pa, pb = torch.from_numpy(a).pin_memory(), torch.from_numpy(b).pin_memory()
    pc = torch.empty(m, n, dtype=pa.dtype).pin_memory()
    def pinned():
        pc.copy_(pa.cuda(non_blocking=True) @ pb.cuda(non_blocking=True), non_blocking=True)
        torch.cuda.synchronize()
    out.append(median_ms(pinned))
print(json.dumps(out))
"#;
    let arg = serde_json::to_string(&(shapes, dtype)).expect("shapes serialize");
    common::python_times(SCRIPT, &arg)
}

/// In a child process: the first product's costs, printed as one JSON line.
fn first_call_child() {
    let start = Instant::now();
    let status = device_status();
    let context_ms = start.elapsed().as_secs_f64() * 1e3;
    let DeviceStatus::Ready(_) = status else {
        panic!("no device in the child: {status}");
    };
    let (a, b) = (random_matrix(512, 512, 1), random_matrix(512, 512, 2));
    let start = Instant::now();
    let p = a
        .try_gpu_dot_with(&b, &DotOptions::builtin().backend(Backend::Gpu))
        .expect("the first product");
    let product_ms = start.elapsed().as_secs_f64() * 1e3;
    let loads = module_loads();
    let record = json!({
        "context_ms": context_ms,
        "first_product_ms": product_ms,
        "nvrtc_ms": loads.iter().map(|l| l.nvrtc_ms).sum::<f64>(),
        "load_ms": loads.iter().map(|l| l.load_ms).sum::<f64>(),
        "cached": loads.iter().all(|l| l.cached),
        "prebuilt": loads.iter().all(|l| l.prebuilt),
        "route": p.route.to_string(),
    });
    println!("FIRST_CALL {record}");
}

fn first_call_records() -> Value {
    let dir = std::env::temp_dir().join(format!("gpu-dot-sweep-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // The cold child as a fresh machine meets the crate: an empty kernel cache, and the
    // driver's JIT cache (which NVRTC's code generation also fills) off.
    let run = |cold: bool| -> Value {
        let mut child = Command::new(std::env::current_exe().expect("own path"));
        if cold {
            child.env("CUDA_CACHE_DISABLE", "1");
        }
        let out = child
            .env(CHILD, "1")
            .env(ENV_CACHE_DIR, &dir)
            .output()
            .expect("spawning the first-call child");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("FIRST_CALL "))
            .unwrap_or_else(|| panic!("child failed: {}", String::from_utf8_lossy(&out.stderr)));
        serde_json::from_str(line).expect("the child's JSON")
    };
    let (cold, warm) = (run(true), run(false));
    let _ = std::fs::remove_dir_all(&dir);
    json!({
        "context_ms": cold["context_ms"],
        "nvrtc_ms": cold["nvrtc_ms"],
        "load_ms": cold["load_ms"],
        "first_call_ms": cold["first_product_ms"],
        "cached_context_ms": warm["context_ms"],
        "cached_nvrtc_ms": warm["nvrtc_ms"],
        "cached_load_ms": warm["load_ms"],
        "cached_first_call_ms": warm["first_product_ms"],
        "cached": warm["cached"],
    })
}

/// Host-to-host `f64` products, GPU path against ndarray, over small squares: where the
/// threshold for f64 belongs.
fn f64_crossover(json_path: Option<String>) {
    let mut records = Vec::new();
    println!("| n³ (f64) | Mflop | GPU ms | ndarray ms | GPU / ndarray |");
    println!("|---|---|---|---|---|");
    let gpu = DotOptions::builtin().backend(Backend::Gpu);
    for n in [64, 96, 128, 160, 192, 224, 256, 320, 384, 512] {
        let a = gpu_dot::profile::random_matrix_of::<f64>(n, n, 1);
        let b = gpu_dot::profile::random_matrix_of::<f64>(n, n, 2);
        // Warm up until the autotuner has settled.
        for _ in 0..40 {
            std::hint::black_box(a.try_gpu_dot_with(&b, &gpu).expect("the GPU path"));
        }
        let g = median_ms(150.0, || {
            std::hint::black_box(a.try_gpu_dot_with(&b, &gpu).expect("the GPU path"));
        });
        let c = median_ms(150.0, || {
            std::hint::black_box(a.dot(&b));
        });
        let mflop = gpu_dot::flops(n, n, n) as f64 / 1e6;
        println!("| {n} | {mflop:.1} | {g:.3} | {c:.3} | {:.2} |", g / c);
        records.push(json!({"dtype": "f64", "m": n, "k": n, "n": n, "gpu_ms": g, "ndarray_ms": c}));
    }
    if let Some(path) = json_path {
        std::fs::write(&path, serde_json::to_string_pretty(&records).unwrap()).expect("write");
        println!("wrote {path}");
    }
}

/// Times every shape host to host in `A`: `gpu_dot` with default settings, ndarray's `dot`,
/// the GPU path forced, PyTorch's line, and `general_mat_mul` into an existing array, beside
/// the floor the link allows.
fn sweep<A: Element>(
    shapes: &[(usize, usize, usize)],
    no_torch: bool,
    link: (f64, f64),
    copy_gbs: f64,
) -> Vec<Value> {
    let torch = if no_torch {
        None
    } else {
        torch_times(
            shapes,
            if A::DTYPE == Dtype::F64 {
                "float64"
            } else {
                "float32"
            },
        )
    };

    let gpu = DotOptions::builtin().backend(Backend::Gpu);
    let mut records = Vec::new();
    println!("\n{}: | m | k | n | gpu_dot ms | ndarray ms | GPU path ms | torch ms | into ms | into, back to back ms | pinned ms | floor ms | memory floor ms | gpu_dot / floor | pinned / floor | GPU path / into | torch / gpu_dot | torch pinned ms | pinned / torch pinned | route | pinned |", A::DTYPE);
    println!(
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for (i, &(m, k, n)) in shapes.iter().enumerate() {
        let a = random_matrix_of::<A>(m, k, 1 + i as u64);
        let b = random_matrix_of::<A>(k, n, 100 + i as u64);
        let route = common::warm_until_settled(|| {
            a.try_gpu_dot_with(&b, &DotOptions::default())
                .expect("gpu_dot")
                .route
        });
        a.try_gpu_dot_with(&b, &gpu).expect("the GPU path");
        let budget = 600.0;
        // The four in a fresh random order each round, so that none always follows the same
        // one (a GPU product leaves the caches cold for whatever runs next, and ndarray's
        // threads leave the crate's helpers parked): `dot`, the GPU path and `gpu_dot` into
        // fresh results, and the GPU path into an existing array. A fresh result's own cost
        // is the GPU path's time against the last one's, both taken in the same rotation.
        let huge = gpu_dot::flops(m, k, n) > 300_000_000_000; // 8192³ on the CPU: seconds
        let mut c = ndarray::Array2::<A>::zeros((m, n));
        let (pa, pb) = (PinnedArray::new(a.clone()), PinnedArray::new(b.clone()));
        let mut pc = PinnedArray::<A, _>::zeros((m, n));
        let mut pinned = || {
            let mut out = pc.view_mut();
            gpu_dot::try_general_mat_mul_with(A::one(), &*pa, &*pb, A::zero(), &mut out, &gpu)
                .expect("pinned")
        };
        let pinned_route = pinned().to_string();
        let mut times: [Vec<f64>; 5] = Default::default();
        let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ (m * 31 + k * 7 + n) as u64;
        median_ms(5.0 * budget, || {
            let mut order = [0usize, 1, 2, 3, 4];
            for i in (1..order.len()).rev() {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                order.swap(i, (state >> 33) as usize % (i + 1));
            }
            for which in order {
                let start = Instant::now();
                match which {
                    0 if huge => continue,
                    0 => drop(a.dot(&b)),
                    1 => drop(a.try_gpu_dot_with(&b, &gpu).expect("GPU path")),
                    2 => drop(a.gpu_dot(&b)),
                    4 => drop(pinned()),
                    _ => drop(
                        gpu_dot::try_general_mat_mul_with(
                            A::one(),
                            &a,
                            &b,
                            A::zero(),
                            &mut c,
                            &gpu,
                        )
                        .expect("into"),
                    ),
                }
                times[which].push(start.elapsed().as_secs_f64() * 1e3);
            }
        });
        let [mut nd_t, path_t, dot_t, into_t, pinned_t] = times;
        if nd_t.is_empty() {
            nd_t.push(median_ms(1.0, || drop(a.dot(&b))));
        }
        let (ndarray_ms, gpu_path_ms, gpu_dot_ms, into_ms, pinned_ms) = (
            median(nd_t),
            median(path_t),
            median(dot_t),
            median(into_t),
            median(pinned_t),
        );
        // Into an existing array, back to back: the crate's helpers still awake from the
        // product before.
        let into_loop_ms = median_ms(budget, || {
            gpu_dot::try_general_mat_mul_with(A::one(), &a, &b, A::zero(), &mut c, &gpu)
                .expect("into");
        });
        let torch_ms = torch.as_ref().map(|t| t[2 * i]);
        let torch_pinned_ms = torch.as_ref().map(|t| t[2 * i + 1]);
        let width = std::mem::size_of::<A>();
        let (bytes_in, bytes_out) = ((m * k + k * n) * width, m * n * width);
        let floor = common::link::floor_ms(link, bytes_in, bytes_out);
        let memory_floor = common::memory::floor_ms(copy_gbs, bytes_in, bytes_out);
        println!(
            "| {m} | {k} | {n} | {gpu_dot_ms:.3} | {ndarray_ms:.3} | {gpu_path_ms:.3} | {} | {into_ms:.3} | {into_loop_ms:.3} | {pinned_ms:.3} | {floor:.3} | {memory_floor:.3} | {:.2} | {:.2} | {:.2} | {} | {} | {} | {route} | {pinned_route} |",
            torch_ms.map_or("-".into(), |t| format!("{t:.3}")),
            gpu_dot_ms / floor,
            pinned_ms / floor,
            gpu_path_ms / into_ms,
            torch_ms.map_or("-".into(), |t| format!("{:.2}", t / gpu_dot_ms)),
            torch_pinned_ms.map_or("-".into(), |t| format!("{t:.3}")),
            torch_pinned_ms.map_or("-".into(), |t| format!("{:.2}", pinned_ms / t)),
        );
        records.push(json!({
            "m": m, "k": k, "n": n,
            "gpu_dot_ms": gpu_dot_ms,
            "ndarray_ms": ndarray_ms,
            "gpu_path_ms": gpu_path_ms,
            "torch_ms": torch_ms,
            "torch_pinned_ms": torch_pinned_ms,
            "gpu_into_ms": into_ms,
            "gpu_into_loop_ms": into_loop_ms,
            "pinned_ms": pinned_ms,
            "floor_ms": floor,
            "memory_floor_ms": memory_floor,
            "route": route.to_string(),
            "pinned_route": pinned_route,
        }));
    }
    records
}

fn main() {
    if std::env::var_os(CHILD).is_some() {
        return first_call_child();
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--f64-crossover") {
        let path = args
            .iter()
            .position(|a| a == "--json")
            .and_then(|i| args.get(i + 1).cloned());
        return f64_crossover(path);
    }
    let quick = args.iter().any(|a| a == "--quick");
    let no_torch = args.iter().any(|a| a == "--no-torch");
    if args.iter().any(|a| a == "--plain-launches") {
        // Each kernel only after the one before on its stream has finished (to time the
        // programmatic launches of sm_90).
        gpu_dot::__testing::programmatic_launches(false);
    }
    let value = |flag: &str| common::flag_value(&args, flag);
    if let Some(bytes) = value("--mapped-inputs-up-to") {
        let bytes = bytes
            .parse()
            .expect("--mapped-inputs-up-to takes a byte count");
        gpu_dot::__testing::mapped_inputs_up_to(Some(bytes));
    }
    let json_path = value("--json");
    let sizes: Option<Vec<usize>> = value("--sizes").map(|v| {
        v.split(',')
            .map(|s| s.trim().parse().expect("--sizes takes integers"))
            .collect()
    });
    let DeviceStatus::Ready(info) = device_status() else {
        eprintln!("the sweep needs a CUDA GPU: {}", device_status());
        std::process::exit(2);
    };
    println!("device: {}", device_status());

    let first = if args.iter().any(|a| a == "--no-first-call") {
        Value::Null
    } else {
        first_call_records()
    };
    println!("first call: {first}");

    let mut shapes: Vec<(usize, usize, usize)> = [
        16, 32, 64, 96, 128, 160, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096,
    ]
    .iter()
    .map(|&s| (s, s, s))
    .collect();
    if !quick {
        shapes.push((8192, 8192, 8192));
    }
    shapes.extend([
        (1000, 3000, 500),
        (4096, 4096, 64),
        (64, 4096, 4096),
        (8192, 1024, 1024),
        (1, 4096, 4096),
    ]);
    if let Some(sizes) = &sizes {
        shapes = sizes.iter().map(|&s| (s, s, s)).collect();
    }
    let dtype = value("--dtype").unwrap_or_else(|| "f32".into());
    let link = common::link::pinned_gbs();
    println!(
        "link, page-locked: {:.1} GB/s up, {:.1} GB/s down",
        link.0, link.1
    );
    let memory = common::memory::rates();
    common::memory::print(&memory);
    let copy_gbs = common::memory::best_copy(&memory);
    let records = match dtype.as_str() {
        "f32" => sweep::<f32>(&shapes, no_torch, link, copy_gbs),
        "f64" => sweep::<f64>(&shapes, no_torch, link, copy_gbs),
        other => panic!("--dtype {other}: expected f32 or f64"),
    };

    let crossover = shapes
        .iter()
        .zip(&records)
        .filter(|((m, k, n), _)| m == k && k == n)
        .find(|(_, r)| r["gpu_path_ms"].as_f64() < r["ndarray_ms"].as_f64())
        .map(|((m, k, n), _)| gpu_dot::flops(*m, *k, *n));
    match crossover {
        Some(f) => println!("\nthe GPU path first wins at {f} flops"),
        None => println!("\nthe GPU path never wins in this sweep"),
    }
    let doc = json!({
        "device": info.name,
        "dtype": dtype,
        "link_gbs": {"up": link.0, "down": link.1},
        "host_memory": common::memory::json(&memory),
        "threshold_flops": gpu_dot::DEFAULT_MIN_GPU_FLOPS,
        "crossover_flops": crossover,
        "first_call": first,
        "shapes": records,
    });
    if let Some(path) = json_path {
        std::fs::write(&path, serde_json::to_string_pretty(&doc).expect("JSON"))
            .expect("writing the JSON");
        println!("wrote {path}");
    }
}

//! Host-to-host products on one device and split across several: for each size, the median
//! time of `try_gpu_dot_with` on device 0 alone, then on devices 0..g for every g up to the
//! device count (`DotOptions::devices`, the split threshold off), with the speed-up over one
//! device; splits run twice, B shared over peer links (`peer`, where the devices have them)
//! and B uploaded by every device from the host. Run with `GPU_DOT_TRACE=1` to see each
//! device's pipeline phases.
//!
//!     cargo run --release --example multi_gpu -- [--sizes 4096,8192,16384] [--json PATH]

mod common;

use std::time::Instant;

use gpu_dot::profile::random_matrix;
use gpu_dot::{Backend, Device, Devices, DotOptions, GpuDot};
use serde_json::json;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| common::flag_value(&args, flag);
    let sizes: Vec<usize> = value("--sizes")
        .unwrap_or_else(|| "2048,4096,8192,16384".into())
        .split(',')
        .map(|s| s.trim().parse().expect("--sizes takes integers"))
        .collect();
    let count = Device::count();
    if count == 0 {
        eprintln!(
            "the multi-GPU figures need a CUDA GPU: {}",
            gpu_dot::device_status()
        );
        std::process::exit(2);
    }
    for d in Device::all() {
        println!("{d}: {}", d.status());
    }
    let mut records = Vec::new();
    println!("\n| m = k = n | GPUs | B | ms | speed-up over one | route |");
    println!("|---|---|---|---|---|---|");
    for &s in &sizes {
        let (a, b) = (random_matrix(s, s, 1), random_matrix(s, s, 2));
        let mut one_ms = None;
        for gpus in 1..=count {
            for peer in [true, false] {
                if gpus == 1 && !peer {
                    continue;
                }
                let opts = DotOptions::builtin()
                    .backend(Backend::Gpu)
                    .devices(Devices::List((0..gpus).collect()))
                    .min_split_flops(0)
                    .peer_copies(peer);
                // Warm-up: contexts, kernels, buffers, and the autotuner settled on each device.
                let mut route = a.try_gpu_dot_with(&b, &opts).expect("warm-up").route;
                for _ in 0..24 {
                    if gpu_dot::tuning_in_progress() == 0 {
                        break;
                    }
                    route = a.try_gpu_dot_with(&b, &opts).expect("warm-up").route;
                }
                let reps = if s >= 16384 { 5 } else { 15 };
                let mut t: Vec<f64> = (0..reps)
                    .map(|_| {
                        let start = Instant::now();
                        drop(a.try_gpu_dot_with(&b, &opts).expect("product"));
                        start.elapsed().as_secs_f64() * 1e3
                    })
                    .collect();
                t.sort_by(f64::total_cmp);
                let ms = t[t.len() / 2];
                let base = *one_ms.get_or_insert(ms);
                let how = if gpus == 1 {
                    "host"
                } else if peer {
                    "peer"
                } else {
                    "host each"
                };
                println!(
                    "| {s} | {gpus} | {how} | {ms:.2} | {:.2}× | {route} |",
                    base / ms
                );
                records.push(json!({
                    "gpus": gpus, "m": s, "k": s, "n": s, "ms": ms,
                    "peer_copies": gpus > 1 && peer, "route": route.to_string(),
                }));
            }
        }
    }
    if let Some(path) = value("--json") {
        let doc = json!({
            "device": Device::new(0).status().to_string(),
            "devices": count,
            "records": records,
        });
        std::fs::write(&path, serde_json::to_string_pretty(&doc).expect("JSON"))
            .expect("writing the JSON");
        println!("wrote {path}");
    }
}

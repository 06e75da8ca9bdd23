//! Where the GPU path, copies included, starts beating ndarray's `dot`: times both over a
//! sweep of square sizes and prints the table and the crossover in flops (the basis of
//! `DEFAULT_MIN_GPU_FLOPS`).
//!
//!     cargo run --release --example crossover

use std::time::Instant;

use gpu_dot::profile::random_matrix;
use gpu_dot::{device_status, Backend, DeviceStatus, DotOptions, GpuDot};

fn median_ms(reps: usize, mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn main() {
    if let DeviceStatus::Unavailable(reason) = device_status() {
        eprintln!("the crossover needs a CUDA GPU: {reason}");
        std::process::exit(2);
    }
    println!("device: {}", device_status());
    let gpu = DotOptions::builtin().backend(Backend::Gpu);
    let mut crossover = None;
    println!("| size | flops | ndarray dot ms | GPU path ms | faster |");
    println!("|---|---|---|---|---|");
    for size in [
        16, 32, 48, 64, 96, 128, 160, 192, 224, 256, 320, 384, 512, 768, 1024,
    ] {
        let a = random_matrix(size, size, 1);
        let b = random_matrix(size, size, 2);
        a.gpu_dot_with(&b, &gpu).expect("gpu product"); // warm-up (context, NVRTC)
        let reps = if size <= 256 { 50 } else { 15 };
        let cpu = median_ms(reps, || drop(a.dot(&b)));
        let gpu_ms = median_ms(reps, || {
            drop(a.gpu_dot_with(&b, &gpu).expect("gpu product"))
        });
        let flops = gpu_dot::flops(size, size, size);
        let winner = if gpu_ms < cpu { "GPU" } else { "CPU" };
        if gpu_ms < cpu && crossover.is_none() {
            crossover = Some(flops);
        }
        if gpu_ms >= cpu {
            crossover = None;
        }
        println!("| {size} | {flops} | {cpu:.3} | {gpu_ms:.3} | {winner} |");
    }
    match crossover {
        Some(f) => println!("\nthe GPU path wins from {f} flops on"),
        None => println!("\nthe GPU path does not win consistently in this sweep"),
    }
}

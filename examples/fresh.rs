//! What a fresh host result costs: loops of `gpu_dot` on host arrays, each result new memory,
//! against the same products written into an existing array (`try_general_mat_mul_with`).
//!
//! For each shape it reports medians of: the product alone (the call, its result dropped
//! after the clock stops), the drop of the result, the same products with a pause of 20 ms
//! between them (time for the spare result to be made ready in the background), and the
//! products into an existing array, back to back and paused; and how many calls found a spare ready
//! (`retained_host_memory() > 0`). Run it with `GPU_DOT_SPARE_RESULT=0` for the spare's
//! absence.
//!
//!     cargo run --release --example fresh [-- --json PATH] [--reps N]

mod common;

use std::time::{Duration, Instant};

use gpu_dot::profile::random_matrix_of;
use gpu_dot::{retained_host_memory, try_general_mat_mul_with, DotOptions, Element, GpuDot};
use ndarray::Array2;
use serde_json::{json, Value};

fn median(mut t: Vec<f64>) -> f64 {
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn shape<A: Element>((m, k, n): (usize, usize, usize), reps: usize) -> Value {
    let a: Array2<A> = random_matrix_of::<A>(m, k, 1);
    let b: Array2<A> = random_matrix_of::<A>(k, n, 2);
    let opts = DotOptions::default();
    // Warm up: the tuner settles, buffers and the emulation's workspace are made.
    for _ in 0..8 {
        drop(a.gpu_dot(&b));
    }
    let run = |pause: Duration| {
        let (mut call, mut dropped, mut ready) = (Vec::new(), Vec::new(), 0);
        for _ in 0..reps {
            std::thread::sleep(pause);
            ready += usize::from(retained_host_memory() > 0);
            let t0 = Instant::now();
            let c = a.gpu_dot(&b);
            let t1 = Instant::now();
            drop(c);
            call.push((t1 - t0).as_secs_f64() * 1e3);
            dropped.push(t1.elapsed().as_secs_f64() * 1e3);
        }
        (median(call), median(dropped), ready)
    };
    let (back, back_drop, back_ready) = run(Duration::ZERO);
    let (paused, paused_drop, paused_ready) = run(Duration::from_millis(20));
    let mut c = Array2::<A>::zeros((m, n));
    let mut into = |pause: Duration| {
        median(
            (0..reps)
                .map(|_| {
                    std::thread::sleep(pause);
                    let t0 = Instant::now();
                    try_general_mat_mul_with(A::one(), &a, &b, A::zero(), &mut c, &opts)
                        .expect("into");
                    t0.elapsed().as_secs_f64() * 1e3
                })
                .collect(),
        )
    };
    let (into, into_paused) = (into(Duration::ZERO), into(Duration::from_millis(20)));
    let mib = (m * n * std::mem::size_of::<A>()) as f64 / (1 << 20) as f64;
    println!(
        "| {} | {m}×{k}×{n} | {mib:.0} | {back:.3} | {back_drop:.3} | {back_ready}/{reps} | {paused:.3} | {paused_drop:.3} | {paused_ready}/{reps} | {into:.3} | {into_paused:.3} | {:.2} | {:.2} |",
        A::DTYPE,
        back / into,
        paused / into_paused,
    );
    json!({
        "dtype": A::DTYPE.to_string(), "m": m, "k": k, "n": n, "result_mib": mib,
        "back_to_back_ms": back, "back_to_back_drop_ms": back_drop, "back_to_back_spare_ready": back_ready,
        "paused_ms": paused, "paused_drop_ms": paused_drop, "paused_spare_ready": paused_ready,
        "into_ms": into, "into_paused_ms": into_paused, "reps": reps,
    })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| common::flag_value(&args, flag);
    let reps: usize = value("--reps").map_or(31, |r| r.parse().expect("--reps N"));
    let spare = std::env::var("GPU_DOT_SPARE_RESULT").unwrap_or_else(|_| "1".into());
    println!("GPU_DOT_SPARE_RESULT={spare}");
    println!("| dtype | m×k×n | result MiB | back to back ms | drop ms | spare ready | paused ms | drop ms | spare ready | into ms | into paused ms | back / into | paused / into paused |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let records = vec![
        shape::<f32>((2048, 2048, 2048), reps),
        shape::<f64>((2048, 2048, 2048), reps),
        shape::<f32>((8192, 1024, 1024), reps),
        shape::<f32>((4096, 4096, 4096), reps),
        shape::<f64>((4096, 4096, 4096), reps),
    ];
    if let Some(path) = value("--json") {
        let doc = json!({ "spare_result": spare, "records": records });
        std::fs::write(&path, serde_json::to_string_pretty(&doc).unwrap()).expect("write JSON");
    }
}

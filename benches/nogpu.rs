//! `gpu_dot` against ndarray's `dot` on products above the GPU threshold, on a machine where
//! the GPU path is not usable (no driver, no device): such a product falls back to the CPU
//! and should cost what `dot` costs. On a machine with a usable GPU the bench says so and
//! measures nothing.
//!
//! Prints a table of milliseconds per call (median of 31 rounds, the two alternating round by
//! round, each round the median of several calls) and the ratio; `GPU_DOT_NOGPU_JSON=PATH`
//! also writes it as JSON.
//!
//!     cargo bench --bench nogpu

use std::hint::black_box;
use std::time::Instant;

use gpu_dot::num_complex::Complex;
use gpu_dot::profile::random_matrix_of;
use gpu_dot::{DeviceStatus, Element, GpuDot, GpuScalar};
use ndarray::Array2;

/// Milliseconds per call of `f`, the median of `calls` calls.
fn time(calls: usize, f: &dyn Fn() -> f64) -> f64 {
    let mut t: Vec<f64> = (0..calls)
        .map(|_| {
            let start = Instant::now();
            black_box(f());
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One shape of a real type: `(dot ms, gpu_dot ms, ratio of the per-round ratios' median)`.
fn case<A: Element>((m, k, n): (usize, usize, usize)) -> (f64, f64, f64) {
    let a: Array2<A> = random_matrix_of::<A>(m, k, 1);
    let b: Array2<A> = random_matrix_of::<A>(k, n, 2);
    pair(&a, &b, 2.0 * (m * k * n) as f64)
}

/// One shape of complex numbers with parts of `T` (8·m·k·n real flops).
fn complex_case<T: Element>((m, k, n): (usize, usize, usize)) -> (f64, f64, f64) {
    let join = |re: Array2<T>, im: Array2<T>| {
        ndarray::Zip::from(&re)
            .and(&im)
            .map_collect(|&re, &im| Complex::new(re, im))
    };
    let a = join(random_matrix_of(m, k, 1), random_matrix_of(m, k, 3));
    let b = join(random_matrix_of(k, n, 2), random_matrix_of(k, n, 4));
    pair(&a, &b, 8.0 * (m * k * n) as f64)
}

/// `dot` against `gpu_dot` on `a · b`, alternating rounds.
fn pair<A: GpuScalar + PartialEq>(a: &Array2<A>, b: &Array2<A>, flops: f64) -> (f64, f64, f64) {
    let first = |c: Array2<A>| c[[0, 0]];
    let dot = || first(a.dot(b));
    let gpu = || first(a.gpu_dot(b));
    assert!(dot() == gpu(), "the fallback is ndarray's own product");
    let calls = ((2e8 / flops) as usize).clamp(3, 25);
    let time = |f: &dyn Fn() -> A| {
        time(calls, &|| {
            black_box(f());
            0.0
        })
    };
    let (mut td, mut tg, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..31 {
        let (d, g) = if round % 2 == 0 {
            let d = time(&dot);
            (d, time(&gpu))
        } else {
            let g = time(&gpu);
            (time(&dot), g)
        };
        td.push(d);
        tg.push(g);
        ratios.push(g / d);
    }
    (median(td), median(tg), median(ratios))
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is taken.
    match gpu_dot::device_status() {
        DeviceStatus::Ready(d) => {
            println!(
                "nogpu: a GPU is usable here ({}): nothing to measure",
                d.name
            );
            return;
        }
        DeviceStatus::Unavailable(why) => println!("nogpu: no usable GPU ({why})"),
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("{cores} cores; ms per call, medians of 31 alternating rounds");
    println!("| shape | type | dot | gpu_dot | gpu_dot / dot |\n|---|---|---|---|---|");
    let mut rows = Vec::new();
    let shapes: [((usize, usize, usize), &str); 9] = [
        ((3000, 2, 1024), "f64"),
        ((64, 784, 1024), "f32"),
        ((64, 784, 1024), "f64"),
        ((256, 256, 256), "f32"),
        ((256, 256, 256), "f64"),
        ((64, 392, 512), "c32"),
        ((64, 392, 512), "c64"),
        // Both above their thresholds in real flops (c32's 5 Mflop, c64's the f64 one): 192³
        // is 57 Mflop, 128³ 17.
        ((192, 192, 192), "c32"),
        ((128, 128, 128), "c64"),
    ];
    for (shape, dtype) in shapes {
        let (d, g, r) = match dtype {
            "f32" => case::<f32>(shape),
            "f64" => case::<f64>(shape),
            "c32" => complex_case::<f32>(shape),
            _ => complex_case::<f64>(shape),
        };
        let (m, k, n) = shape;
        println!("| {m} × {k} · {k} × {n} | {dtype} | {d:.3} | {g:.3} | {r:.3} |");
        rows.push(format!(
            "{{\"m\": {m}, \"k\": {k}, \"n\": {n}, \"dtype\": \"{dtype}\", \"dot_ms\": {d:.5}, \
             \"gpu_dot_ms\": {g:.5}, \"ratio\": {r:.4}}}"
        ));
    }
    if let Ok(path) = std::env::var("GPU_DOT_NOGPU_JSON") {
        let json = format!(
            "{{\"bench\": \"nogpu\", \"cores\": {cores}, \"rounds\": 31, \"cases\": [\n  {}\n]}}\n",
            rows.join(",\n  ")
        );
        std::fs::write(&path, json).expect("writing the JSON");
        println!("wrote {path}");
    }
}

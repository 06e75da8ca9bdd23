//! Multiplies two random matrices with `gpu_dot`, says where it ran and why, checks the result
//! against ndarray's `dot` and prints the times; then a matrix times a vector, an f64 product
//! and a batch of products, each checked the same way.
//!
//!     cargo run --release --example quickstart [-- M K N]

use std::time::Instant;

use gpu_dot::profile::{random_matrix, random_matrix_of};
use gpu_dot::{device_status, DotOptions, GpuDot};

fn main() {
    let dims: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("dimensions are integers: M K N"))
        .collect();
    let (m, k, n) = match dims[..] {
        [] => (2048, 2048, 2048),
        [s] => (s, s, s),
        [m, k, n] => (m, k, n),
        _ => panic!("usage: quickstart [M K N]"),
    };
    println!("gpu-dot quickstart: {m} × {k} times {k} × {n}, f32");
    println!("device: {}", device_status());

    let a = random_matrix(m, k, 1);
    let b = random_matrix(k, n, 2);
    let opts = DotOptions::default();

    let start = Instant::now();
    let first = a.try_gpu_dot_with(&b, &opts).expect("shapes match");
    let first_ms = start.elapsed().as_secs_f64() * 1e3;
    println!("ran on: {}", first.route);

    // A second call shows the steady state (the first pays for the context and the kernels).
    let start = Instant::now();
    let c = a.gpu_dot(&b);
    let gpu_dot_ms = start.elapsed().as_secs_f64() * 1e3;

    let start = Instant::now();
    let expected = a.dot(&b);
    let dot_ms = start.elapsed().as_secs_f64() * 1e3;

    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (&x, &y) in c.iter().zip(expected.iter()) {
        diff += (x as f64 - y as f64).powi(2);
        norm += (y as f64).powi(2);
    }
    let rel = (diff / norm.max(f64::MIN_POSITIVE)).sqrt();
    let gflops = |ms: f64| gpu_dot::flops(m, k, n) as f64 / (ms * 1e6);
    println!(
        "first call:      {first_ms:9.2} ms (on a GPU: context creation and loading the kernels)"
    );
    println!(
        "gpu_dot:         {gpu_dot_ms:9.2} ms  {:8.1} GFLOP/s (second call)",
        gflops(gpu_dot_ms)
    );
    println!(
        "ndarray's dot:   {dot_ms:9.2} ms  {:8.1} GFLOP/s",
        gflops(dot_ms)
    );
    println!("relative difference from ndarray's dot: {rel:.2e}");
    if let gpu_dot::DeviceStatus::Ready(info) = device_status() {
        println!("CUDA context: {:.1} ms (once per process)", info.context_ms);
    }
    for load in gpu_dot::module_loads() {
        if load.prebuilt {
            println!(
                "kernel module {}: shipped compiled with the crate, load {:.1} ms (no NVRTC)",
                load.family, load.load_ms
            );
        } else if load.cached {
            println!(
                "kernel module {}: from the disk cache, read and load {:.1} ms (no NVRTC)",
                load.family, load.load_ms
            );
        } else {
            println!(
                "kernel module {}: NVRTC {:.1} ms, load {:.1} ms (once per process)",
                load.family, load.nvrtc_ms, load.load_ms
            );
        }
    }
    match gpu_dot::kernel_cache_dir() {
        Some(dir) => println!("kernel cache: {}", dir.display()),
        None => println!(
            "kernel cache: off ({} is off, no home folder was found, or the folder is not the \
             user's alone: see the warning)",
            gpu_dot::ENV_CACHE_DIR
        ),
    }
    let tolerance = 1e-5 * (k.max(1) as f64).sqrt();
    if rel > tolerance {
        eprintln!("MISMATCH: relative difference {rel:.2e} above {tolerance:.2e}");
        std::process::exit(1);
    }
    println!("result matches ndarray's dot");

    // The other forms of `dot`, and f64: each equal to ndarray's within rounding.
    let v = random_matrix(k, 1, 3).remove_axis(ndarray::Axis(1));
    let p = a.try_gpu_dot_with(&v, &opts).expect("shapes match");
    check("matrix · vector", &p.c, &a.dot(&v), k);
    println!("matrix · vector ({m} × {k} · {k}) ran on: {}", p.route);
    let (a64, b64) = (
        random_matrix_of::<f64>(m, k, 4),
        random_matrix_of::<f64>(k, n, 5),
    );
    let p = a64.try_gpu_dot_with(&b64, &opts).expect("shapes match");
    check("f64", &p.c, &a64.dot(&b64), k);
    println!("f64 ran on: {}", p.route);

    // A batch: 3-D stacks multiplied item by item (as torch.bmm), in one launch on a GPU.
    let (batch, bm, bk, bn) = (32, 128, 64, 128);
    let q = random_matrix(batch * bm, bk, 6)
        .into_shape_with_order((batch, bm, bk))
        .expect("batch · m · k values");
    let keys = random_matrix(batch * bk, bn, 7)
        .into_shape_with_order((batch, bk, bn))
        .expect("batch · k · n values");
    let p = q.try_gpu_dot_with(&keys, &opts).expect("shapes match");
    for z in 0..batch {
        let item = |s: &ndarray::Array3<f32>| s.index_axis(ndarray::Axis(0), z).to_owned();
        check("batch", &item(&p.c), &item(&q).dot(&item(&keys)), bk);
    }
    println!(
        "a batch of {batch} ({bm} × {bk} · {bk} × {bn}) ran on: {}",
        p.route
    );
}

/// Exits with an error when `got` is further from `want` than rounding explains.
fn check<T: gpu_dot::Element, D: ndarray::Dimension>(
    what: &str,
    got: &ndarray::Array<T, D>,
    want: &ndarray::Array<T, D>,
    k: usize,
) {
    let (mut diff, mut norm) = (0.0f64, 0.0f64);
    for (&x, &y) in got.iter().zip(want.iter()) {
        diff += (x.into_f64() - y.into_f64()).powi(2);
        norm += y.into_f64().powi(2);
    }
    let rel = (diff / norm.max(f64::MIN_POSITIVE)).sqrt();
    let eps = if T::DTYPE == gpu_dot::Dtype::F32 {
        1e-5
    } else {
        1e-13
    };
    if rel > eps * (k.max(1) as f64).sqrt() {
        eprintln!("MISMATCH ({what}): relative difference {rel:.2e}");
        std::process::exit(1);
    }
}

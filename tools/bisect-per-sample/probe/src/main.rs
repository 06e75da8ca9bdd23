// Per-sample training loop probe for bisecting gpu-dot's performance.
// Layer width 2048, f32; 64 samples, 3 timed epochs after one untimed warm-up epoch.
use gpu_dot::ndarray::{Array1, Array2, Axis};
use gpu_dot::{DotOptions, GpuDot};
use std::hint::black_box;
use std::time::Instant;

const N: usize = 2048;
const SAMPLES: usize = 64;
const EPOCHS: usize = 3;
const LR: f32 = 1e-4;

fn hash(mut z: u64) -> u64 {
    // splitmix64
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Deterministic value in [-1, 1).
fn unit(stream: u64, i: u64) -> f32 {
    let h = hash(stream.wrapping_mul(0x1_0000_0001).wrapping_add(i));
    ((h >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

fn epoch(w: &mut Array2<f32>, xs: &[Array1<f32>], ts: &[Array1<f32>], gpu: bool) {
    for (x, t) in xs.iter().zip(ts) {
        let x_row = x.view().insert_axis(Axis(0)); // 1 × N
        if gpu {
            let h: Array1<f32> = w.gpu_dot(x); // matrix · vector
            let g = &h - t;
            let g_col = g.view().insert_axis(Axis(1)); // N × 1
            let grad: Array2<f32> = g_col.gpu_dot(&x_row); // outer product
            let back: Array1<f32> = g.gpu_dot(&*w); // vector · matrix
            black_box(&back);
            w.scaled_add(-LR, &grad);
        } else {
            let h: Array1<f32> = w.dot(x);
            let g = &h - t;
            let g_col = g.view().insert_axis(Axis(1));
            let grad: Array2<f32> = g_col.dot(&x_row);
            let back: Array1<f32> = g.dot(&*w);
            black_box(&back);
            w.scaled_add(-LR, &grad);
        }
    }
}

fn trace(w: &Array2<f32>, xs: &[Array1<f32>], ts: &[Array1<f32>]) {
    let opts = match DotOptions::from_env() {
        Ok(o) => o,
        Err(e) => {
            println!("trace options error: {e}");
            return;
        }
    };
    for s in 0..2 {
        let (x, t) = (&xs[s], &ts[s]);
        let x_row = x.view().insert_axis(Axis(0));
        let t0 = Instant::now();
        let h = match w.gpu_dot_with(x, &opts) {
            Ok(p) => {
                println!("trace sample={s} mv    {:.3}ms route={}", t0.elapsed().as_secs_f64() * 1e3, p.route);
                p.c
            }
            Err(e) => {
                println!("trace sample={s} mv error={e}");
                return;
            }
        };
        let g = &h - t;
        let g_col = g.view().insert_axis(Axis(1));
        let t0 = Instant::now();
        match g_col.gpu_dot_with(&x_row, &opts) {
            Ok(p) => println!("trace sample={s} outer {:.3}ms route={}", t0.elapsed().as_secs_f64() * 1e3, p.route),
            Err(e) => println!("trace sample={s} outer error={e}"),
        }
        let t0 = Instant::now();
        match g.gpu_dot_with(w, &opts) {
            Ok(p) => println!("trace sample={s} vm    {:.3}ms route={}", t0.elapsed().as_secs_f64() * 1e3, p.route),
            Err(e) => println!("trace sample={s} vm error={e}"),
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let use_dot = args.iter().any(|a| a == "--dot");
    let do_trace = args.iter().any(|a| a == "--trace");
    let scale = 1.0 / (N as f32).sqrt();
    let mut w = Array2::from_shape_fn((N, N), |(i, j)| unit(1, (i * N + j) as u64) * scale);
    let xs: Vec<Array1<f32>> =
        (0..SAMPLES).map(|s| Array1::from_shape_fn(N, |i| unit(2 + s as u64, i as u64))).collect();
    let ts: Vec<Array1<f32>> =
        (0..SAMPLES).map(|s| Array1::from_shape_fn(N, |i| unit(1000 + s as u64, i as u64))).collect();

    let form = if use_dot { "dot" } else { "gpu_dot" };
    let t0 = Instant::now();
    epoch(&mut w, &xs, &ts, !use_dot); // untimed warm-up: context, kernels, autotuning
    let warm_s = t0.elapsed().as_secs_f64();

    let t0 = Instant::now();
    for _ in 0..EPOCHS {
        epoch(&mut w, &xs, &ts, !use_dot);
    }
    let wall = t0.elapsed().as_secs_f64();
    let checksum: f64 = w.iter().map(|&v| v as f64).sum();
    println!(
        "{form} wall_s={wall:.4} per_sample_ms={:.4} checksum={checksum:.6} warmup_s={warm_s:.3}",
        wall * 1e3 / (EPOCHS * SAMPLES) as f64
    );
    if do_trace && !use_dot {
        trace(&w, &xs, &ts);
    }
}

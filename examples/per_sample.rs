//! A per-sample training loop over a 2048-wide layer, with ndarray's `dot` and with
//! `gpu_dot`, for what the CPU route costs on a machine without a usable GPU (issue 70, "No
//! GPU, no cost, in loops too"). CPU-only for now: on a machine with a usable GPU, `gpu_dot`
//! runs there and this measures that instead (it says so).
//!
//! Each sample `x` (2048 `f32`) of the layer `W` (2048 × 2048) runs three products, all above
//! the CPU threshold, and an SGD step on the host:
//! - the forward `h = W · x` (matrix · vector),
//! - the gradient `G = g · xᵀ` of `g = h − t`, a 2-D product of a 2048 × 1 by a 1 × 2048
//!   matrix (16 MiB of result),
//! - the backward `g · W` (vector · matrix),
//! - `W ← W − lr·G` (`scaled_add`).
//!
//! Each run is its own process (this program run again with `--run dot` or `--run gpu_dot`),
//! so that page faults and the heap start the same; the rounds alternate between the two.
//! It prints each run's wall, user and system seconds and minor page faults (from
//! `/proc/self/stat`, Linux), then the medians and the ratios gpu_dot / dot. With `--hold`,
//! each sample's gradient is held until the next one is computed (as a loop that keeps it
//! for momentum would), which changes how the heap reuses the 16 MiB results.
//!
//! ```text
//! cargo run --release --example per_sample                      # 64 samples, 3 epochs, 5 rounds
//! cargo run --release --example per_sample -- --samples 128 --epochs 3 --rounds 7
//! ```

use std::hint::black_box;
use std::process::Command;
use std::time::Instant;

use gpu_dot::{DeviceStatus, GpuDot};
use ndarray::{Array1, Array2, Axis};

/// The layer's width.
const WIDTH: usize = 2048;

/// The learning rate (stable: lr·|x|² is about 0.07 for the inputs below).
const LR: f32 = 1e-4;

/// A row of the summary: its name and the figure it reads of a run.
type Column = (&'static str, fn(&Run) -> f64);

/// What one run measured.
#[derive(Clone, Copy)]
struct Run {
    wall: f64,
    user: f64,
    system: f64,
    minflt: u64,
}

/// Minor page faults and user and system seconds of this process so far, from
/// `/proc/self/stat` (fields 10, 14 and 15; times in the kernel's `USER_HZ`, 100 on Linux).
fn usage() -> (u64, f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let field = |n: usize| -> u64 {
        rest.split_whitespace()
            .nth(n - 3)
            .and_then(|f| f.parse().ok())
            .unwrap_or(0)
    };
    (
        field(10),
        field(14) as f64 / 100.0,
        field(15) as f64 / 100.0,
    )
}

/// A deterministic value in [-1, 1) from an index (a cheap hash).
fn noise(i: usize) -> f32 {
    let mut z = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z ^= z >> 31;
    z = z.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z ^= z >> 29;
    (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
}

/// The training loop, with `dot` or with `gpu_dot`; returns a checksum of the weights.
fn train(samples: usize, epochs: usize, use_gpu_dot: bool, hold: bool) -> f64 {
    let mut w = Array2::<f32>::from_shape_fn((WIDTH, WIDTH), |(i, j)| 0.01 * noise(i * WIDTH + j));
    let xs = Array2::<f32>::from_shape_fn((samples, WIDTH), |(s, i)| {
        noise((1 << 40) | (s * WIDTH + i))
    });
    let ts = Array2::<f32>::from_shape_fn((samples, WIDTH), |(s, i)| {
        0.1 * noise((1 << 41) | (s * WIDTH + i))
    });
    let mut back_sum = 0.0f64;
    // The previous sample's gradient, held until the next one is computed (`--hold`).
    let mut held: Option<Array2<f32>> = None;
    for _ in 0..epochs {
        for (x, t) in xs.outer_iter().zip(ts.outer_iter()) {
            let h: Array1<f32> = if use_gpu_dot {
                w.gpu_dot(&x)
            } else {
                w.dot(&x)
            };
            let g = h - t;
            let (g_col, x_row) = (g.view().insert_axis(Axis(1)), x.insert_axis(Axis(0)));
            let grad: Array2<f32> = if use_gpu_dot {
                g_col.gpu_dot(&x_row)
            } else {
                g_col.dot(&x_row)
            };
            let back: Array1<f32> = if use_gpu_dot {
                g.gpu_dot(&w)
            } else {
                g.dot(&w)
            };
            back_sum += f64::from(back[0]);
            w.scaled_add(-LR, &grad);
            black_box(&w);
            if hold {
                held = Some(grad);
            }
        }
    }
    black_box(held);
    back_sum + w.iter().map(|&v| f64::from(v)).sum::<f64>()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: usize| -> usize {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map_or(default, |v| v.parse().expect("a number"))
    };
    let (samples, epochs, rounds) = (arg("--samples", 64), arg("--epochs", 3), arg("--rounds", 5));

    // A child: one run, printed as one line for the parent.
    if let Some(i) = args.iter().position(|a| a == "--run") {
        let use_gpu_dot = args.get(i + 1).map(String::as_str) == Some("gpu_dot");
        let hold = args.iter().any(|a| a == "--hold");
        let (f0, u0, s0) = usage();
        let start = Instant::now();
        let check = train(samples, epochs, use_gpu_dot, hold);
        let wall = start.elapsed().as_secs_f64();
        let (f1, u1, s1) = usage();
        println!("{wall} {} {} {} {check}", u1 - u0, s1 - s0, f1 - f0);
        return;
    }

    match gpu_dot::device_status() {
        DeviceStatus::Ready(d) => println!(
            "a GPU is usable here ({}): gpu_dot runs on it, so this is not the CPU route",
            d.name
        ),
        DeviceStatus::Unavailable(why) => println!("no usable GPU: {why}"),
    }
    println!(
        "{samples} samples × {epochs} epochs, layer {WIDTH} × {WIDTH} f32; {rounds} rounds, \
         each run its own process"
    );
    let hold = args.iter().any(|a| a == "--hold");
    let exe = std::env::current_exe().expect("this program's path");
    let child = |which: &str| -> (Run, f64) {
        let out = Command::new(&exe)
            .args(["--run", which, "--samples", &samples.to_string()])
            .args(["--epochs", &epochs.to_string()])
            .args(hold.then_some("--hold"))
            .output()
            .expect("running a child");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let v: Vec<f64> = text
            .split_whitespace()
            .map(|f| f.parse().expect("a number"))
            .collect();
        let run = Run {
            wall: v[0],
            user: v[1],
            system: v[2],
            minflt: v[3] as u64,
        };
        (run, v[4])
    };
    let (mut dots, mut gpus) = (Vec::new(), Vec::new());
    println!(
        "| round | run | wall s | user s | system s | minor faults |\n|---|---|---|---|---|---|"
    );
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            ["dot", "gpu_dot"]
        } else {
            ["gpu_dot", "dot"]
        };
        let mut checks = Vec::new();
        for which in order {
            let (run, check) = child(which);
            println!(
                "| {round} | {which} | {:.3} | {:.2} | {:.2} | {} |",
                run.wall, run.user, run.system, run.minflt
            );
            checks.push(check);
            if which == "dot" {
                dots.push(run);
            } else {
                gpus.push(run);
            }
        }
        assert_eq!(
            checks[0], checks[1],
            "the CPU route is ndarray's own product"
        );
    }
    let med = |runs: &[Run], f: fn(&Run) -> f64| median(runs.iter().map(f).collect());
    println!("\n| median | dot | gpu_dot | gpu_dot / dot |\n|---|---|---|---|");
    let rows: [Column; 4] = [
        ("wall s", |r| r.wall),
        ("user s", |r| r.user),
        ("system s", |r| r.system),
        ("minor faults", |r| r.minflt as f64),
    ];
    for (name, f) in rows {
        let (d, g) = (med(&dots, f), med(&gpus, f));
        println!("| {name} | {d:.3} | {g:.3} | {:.3} |", g / d);
    }
    let ratios: Vec<f64> = dots
        .iter()
        .zip(&gpus)
        .map(|(d, g)| g.wall / d.wall)
        .collect();
    println!(
        "\nwall-time ratio gpu_dot / dot, median of the rounds' ratios: {:.3}",
        median(ratios)
    );
}

//! A per-sample training loop over a 2048-wide layer, with ndarray's `dot`, with `gpu_dot`
//! on ordinary arrays, and with `gpu_dot` on page-locked ones ([`PinnedArray`]): on a machine
//! with a usable GPU, what the GPU gains in such a loop; without one, what the CPU route costs
//! (the pinned form is then left out).
//!
//! Each sample `x` (2048 `f32`) of the layer `W` (2048 × 2048) runs three products, all above
//! the CPU threshold, and an SGD step on the host:
//! - the forward `h = W · x` (matrix · vector),
//! - the gradient `G = g · xᵀ` of `g = h − t`, a 2-D product of a 2048 × 1 by a 1 × 2048
//!   matrix (16 MiB of result),
//! - the backward `g · W` (vector · matrix),
//! - `W ← W − lr·G` (`scaled_add`), on the host.
//!
//! By default both the `dot` and the `gpu_dot` forms write `G` into a C-order array kept
//! across samples (ndarray's `general_mat_mul` and gpu_dot's), so that the update walks `W`
//! and `G` along their rows. With `--drop-in`, `G` is the product's own result
//! (`g_col.dot(&x_row)`, `gpu_dot` in its place): both operands have unit stride along their
//! first axis, so `dot` gives it in F order (and `gpu_dot` gives `dot`'s order), and
//! `scaled_add` of an F-order array into the C-order `W` walks one of them across its rows,
//! about ten times the C-order update's time, in both forms alike.
//!
//! The pinned form keeps `W` and `G` in page-locked arrays: `W` goes up straight from its
//! memory in the forward and backward products, and `G` comes down straight into its own
//! (`general_mat_mul` into it), with the same step on the host.
//!
//! Each run is its own process (this program run again with `--run dot|gpu_dot|pinned`), so
//! that page faults and the heap start the same; the rounds rotate the order of the forms.
//! A run prints on stderr the milliseconds per sample of each step (forward, gradient,
//! backward, update); `--run FORM` runs one form in this process and shows them.
//! It prints each run's wall, user and system seconds and minor page faults (from
//! `/proc/self/stat`, Linux), then the medians and the ratios to `dot`, and with `--json PATH`
//! writes them (`ndarray_s`, `gpu_dot_s`, `pinned_s`: median wall seconds). With `--hold`,
//! each sample's gradient is held until the next one is computed (as a loop that keeps it for
//! momentum would), which changes how the heap reuses the 16 MiB results.
//!
//! On a machine with a usable GPU it then times each of the three products alone in this
//! process, on ordinary and on page-locked arrays, beside its floor: the 16 MiB of `W` up (or
//! of `G` down) at the link's page-locked speed, measured in the same run, plus one round trip.
//! Each is timed twice: repeated back to back, and each time right after the host's update
//! has written `W` and read `G` (so that the product's data may still sit in the CPU's caches). They go into the JSON as `products`.
//!
//! ```text
//! cargo run --release --example per_sample                      # 64 samples, 3 epochs, 5 rounds
//! cargo run --release --example per_sample -- --samples 128 --epochs 3 --rounds 7 --json out.json
//! cargo run --release --example per_sample -- --drop-in --rounds 3   # the gradient as dot gives it
//! ```

mod common;

use std::hint::black_box;
use std::process::Command;
use std::time::Instant;

use gpu_dot::{DeviceStatus, GpuDot, PinnedArray};
use ndarray::{Array1, Array2, Axis};
use serde_json::{json, Value};

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

/// The forms of the loop.
const FORMS: [&str; 3] = ["dot", "gpu_dot", "pinned"];

/// Seconds spent in each step of the loop, summed over the samples: the forward, the
/// gradient, the backward and the host's update (printed by a child run on stderr).
#[derive(Default)]
struct Phases([f64; 4]);

impl Phases {
    /// Runs `f`, adding its time to step `i`.
    fn time<R>(&mut self, i: usize, f: impl FnOnce() -> R) -> R {
        let start = Instant::now();
        let r = f();
        self.0[i] += start.elapsed().as_secs_f64();
        r
    }

    fn print(&self, form: &str, samples: usize) {
        let per = |s: f64| 1e3 * s / samples.max(1) as f64;
        eprintln!(
            "{form} ms per sample: forward {:.3}, gradient {:.3}, backward {:.3}, update {:.3}",
            per(self.0[0]),
            per(self.0[1]),
            per(self.0[2]),
            per(self.0[3])
        );
    }
}

/// The training loop, with `dot` or with `gpu_dot`; returns a checksum of the weights.
/// `drop_in`: the gradient is the product's own result, in the memory order `dot` gives it
/// (F order); else it is written into a C-order array kept across samples, by ndarray's
/// `general_mat_mul` or by gpu_dot's, so that the host's update walks both arrays along their
/// rows.
fn train(samples: usize, epochs: usize, use_gpu_dot: bool, drop_in: bool, hold: bool) -> f64 {
    let (mut w, xs, ts) = data(samples);
    let mut kept = Array2::<f32>::zeros(if drop_in { (0, 0) } else { (WIDTH, WIDTH) });
    let mut back_sum = 0.0f64;
    let mut phases = Phases::default();
    // The previous sample's gradient, held until the next one is computed (`--hold`).
    let mut held: Option<Array2<f32>> = None;
    for _ in 0..epochs {
        for (x, t) in xs.outer_iter().zip(ts.outer_iter()) {
            let h: Array1<f32> = phases.time(0, || {
                if use_gpu_dot {
                    w.gpu_dot(&x)
                } else {
                    w.dot(&x)
                }
            });
            let g = h - t;
            let (g_col, x_row) = (g.view().insert_axis(Axis(1)), x.insert_axis(Axis(0)));
            // The product's own result (drop-in), or `None` with the gradient in `kept`.
            let own: Option<Array2<f32>> = phases.time(1, || match (drop_in, use_gpu_dot) {
                (true, true) => Some(g_col.gpu_dot(&x_row)),
                (true, false) => Some(g_col.dot(&x_row)),
                (false, true) => {
                    gpu_dot::general_mat_mul(1.0, &g_col, &x_row, 0.0, &mut kept.view_mut());
                    None
                }
                (false, false) => {
                    ndarray::linalg::general_mat_mul(1.0, &g_col, &x_row, 0.0, &mut kept);
                    None
                }
            });
            let back: Array1<f32> = phases.time(2, || {
                if use_gpu_dot {
                    g.gpu_dot(&w)
                } else {
                    g.dot(&w)
                }
            });
            back_sum += f64::from(back[0]);
            phases.time(3, || w.scaled_add(-LR, own.as_ref().unwrap_or(&kept)));
            black_box(&w);
            if hold {
                held = own;
            }
        }
    }
    black_box(held);
    let form = if use_gpu_dot { "gpu_dot" } else { "dot" };
    phases.print(form, samples * epochs);
    back_sum + w.iter().map(|&v| f64::from(v)).sum::<f64>()
}

/// The layer's starting weights, the samples and their targets.
fn data(samples: usize) -> (Array2<f32>, Array2<f32>, Array2<f32>) {
    let w = Array2::<f32>::from_shape_fn((WIDTH, WIDTH), |(i, j)| 0.01 * noise(i * WIDTH + j));
    let xs = Array2::<f32>::from_shape_fn((samples, WIDTH), |(s, i)| {
        noise((1 << 40) | (s * WIDTH + i))
    });
    let ts = Array2::<f32>::from_shape_fn((samples, WIDTH), |(s, i)| {
        0.1 * noise((1 << 41) | (s * WIDTH + i))
    });
    (w, xs, ts)
}

/// The loop with `W` and the gradient in page-locked arrays; the same checksum.
fn train_pinned(samples: usize, epochs: usize) -> f64 {
    let (w, xs, ts) = data(samples);
    let mut w = PinnedArray::new(w);
    let mut grad = PinnedArray::<f32, _>::zeros((WIDTH, WIDTH));
    assert!(w.is_page_locked(), "{:?}", w.registration_error());
    let mut back_sum = 0.0f64;
    let mut phases = Phases::default();
    for _ in 0..epochs {
        for (x, t) in xs.outer_iter().zip(ts.outer_iter()) {
            let h: Array1<f32> = phases.time(0, || w.gpu_dot(&x));
            let g = h - t;
            let (g_col, x_row) = (g.view().insert_axis(Axis(1)), x.insert_axis(Axis(0)));
            phases.time(1, || {
                gpu_dot::general_mat_mul(1.0, &g_col, &x_row, 0.0, &mut grad.view_mut())
            });
            let back: Array1<f32> = phases.time(2, || g.gpu_dot(&*w));
            back_sum += f64::from(back[0]);
            phases.time(3, || w.view_mut().scaled_add(-LR, &*grad));
            black_box(&*w);
        }
    }
    phases.print("pinned", samples * epochs);
    back_sum + w.iter().map(|&v| f64::from(v)).sum::<f64>()
}

/// Median milliseconds of a product over `reps` runs after one warm-up. `step(false)` runs the
/// product; `step(true)`, run before each timed product and not timed, prepares it.
fn product_ms(reps: usize, mut step: impl FnMut(bool)) -> f64 {
    step(false);
    let t = (0..reps)
        .map(|_| {
            step(true);
            let start = Instant::now();
            step(false);
            1e3 * start.elapsed().as_secs_f64()
        })
        .collect();
    median(t)
}

/// Each product of the loop alone, on ordinary and on page-locked arrays, beside its floor
/// (16 MiB up for the forward and backward, down for the gradient, at the link's speed);
/// printed as a table and returned as JSON records.
fn products(reps: usize) -> Vec<Value> {
    let link = common::link::pinned_gbs();
    let bytes = WIDTH * WIDTH * std::mem::size_of::<f32>();
    let up = common::link::floor_ms(link, bytes, 0);
    let down = common::link::floor_ms(link, 0, bytes);
    println!(
        "\nthe products alone ({reps} runs each, medians); link {:.1} GB/s up, {:.1} down; \
         floor {up:.3} ms up, {down:.3} ms down",
        link.0, link.1
    );
    println!("| product | arrays | timing | ms | floor ms | / floor |\n|---|---|---|---|---|---|");
    let (w0, xs, _) = data(1);
    let x = xs.row(0).to_owned();
    let g = x.mapv(|v| 0.5 * v);
    let (g_col, x_row) = (g.view().insert_axis(Axis(1)), x.view().insert_axis(Axis(0)));
    let mut w = w0.clone();
    let mut kept = Array2::<f32>::zeros((WIDTH, WIDTH));
    let mut pw = PinnedArray::new(w0);
    let mut pg = PinnedArray::<f32, _>::zeros((WIDTH, WIDTH));
    assert!(pw.is_page_locked(), "{:?}", pw.registration_error());
    let mut records = Vec::new();
    let mut record = |product: &str, arrays: &str, timing: &str, ms: f64, floor: f64| {
        println!(
            "| {product} | {arrays} | {timing} | {ms:.3} | {floor:.3} | {:.2} |",
            ms / floor
        );
        records.push(json!({
            "product": product, "arrays": arrays, "timing": timing,
            "ms": ms, "floor_ms": floor, "ratio": ms / floor,
        }));
    };
    let names = ["forward W · x", "gradient g · xᵀ into G", "backward g · W"];
    for timing in ["repeated", "after the update"] {
        let update = timing != "repeated";
        for (product, name) in names.into_iter().enumerate() {
            for arrays in ["ordinary", "pinned"] {
                // Views of `W` and `G`: a view of a pinned array goes straight by DMA.
                let (mut w, mut grad) = match arrays {
                    "pinned" => (pw.view_mut(), pg.view_mut()),
                    _ => (w.view_mut(), kept.view_mut()),
                };
                let ms = product_ms(reps, |prepare| match (prepare, update, product) {
                    // The host's step between products: `W ← W − lr·G`, all of `W` written.
                    (true, true, _) => w.scaled_add(-LR, &grad),
                    (true, false, _) => {}
                    (false, _, 0) => drop(black_box(w.gpu_dot(&x))),
                    (false, _, 1) => gpu_dot::general_mat_mul(1.0, &g_col, &x_row, 0.0, &mut grad),
                    (false, _, _) => drop(black_box(g.gpu_dot(&w))),
                });
                record(
                    name,
                    arrays,
                    timing,
                    ms,
                    if product == 1 { down } else { up },
                );
            }
        }
    }
    records
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
        let form = args.get(i + 1).map_or("dot", String::as_str);
        let hold = args.iter().any(|a| a == "--hold");
        let drop_in = args.iter().any(|a| a == "--drop-in");
        let (f0, u0, s0) = usage();
        let start = Instant::now();
        let check = match form {
            "pinned" => train_pinned(samples, epochs),
            other => train(samples, epochs, other == "gpu_dot", drop_in, hold),
        };
        let wall = start.elapsed().as_secs_f64();
        let (f1, u1, s1) = usage();
        println!("{wall} {} {} {} {check}", u1 - u0, s1 - s0, f1 - f0);
        return;
    }

    let device = match gpu_dot::device_status() {
        DeviceStatus::Ready(d) => {
            println!("a GPU is usable here ({}): gpu_dot runs on it", d.name);
            Some(d.name)
        }
        DeviceStatus::Unavailable(why) => {
            println!("no usable GPU: {why} (the CPU route; no pinned form)");
            None
        }
    };
    let forms = &FORMS[..if device.is_some() { 3 } else { 2 }];
    println!(
        "{samples} samples × {epochs} epochs, layer {WIDTH} × {WIDTH} f32; {rounds} rounds, \
         each run its own process"
    );
    let hold = args.iter().any(|a| a == "--hold");
    let drop_in = args.iter().any(|a| a == "--drop-in");
    println!(
        "the gradient: {}",
        if drop_in {
            "the product's own result, F order as dot gives it (--drop-in)"
        } else {
            "written into a C-order array by general_mat_mul (ndarray's or gpu_dot's)"
        }
    );
    let exe = std::env::current_exe().expect("this program's path");
    let child = |which: &str| -> (Run, f64) {
        let out = Command::new(&exe)
            .args(["--run", which, "--samples", &samples.to_string()])
            .args(["--epochs", &epochs.to_string()])
            .args(hold.then_some("--hold"))
            .args(drop_in.then_some("--drop-in"))
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
    let mut runs: Vec<Vec<Run>> = vec![Vec::new(); forms.len()];
    println!(
        "| round | run | wall s | user s | system s | minor faults |\n|---|---|---|---|---|---|"
    );
    for round in 0..rounds {
        let mut checks = vec![0.0; forms.len()];
        for j in 0..forms.len() {
            let f = (j + round) % forms.len();
            let (run, check) = child(forms[f]);
            println!(
                "| {round} | {} | {:.3} | {:.2} | {:.2} | {} |",
                forms[f], run.wall, run.user, run.system, run.minflt
            );
            checks[f] = check;
            runs[f].push(run);
        }
        for (f, &c) in checks.iter().enumerate().skip(1) {
            if device.is_some() {
                // The GPU's products round differently from ndarray's.
                let tol = 1e-3 * checks[0].abs().max(1.0);
                assert!(
                    (c - checks[0]).abs() <= tol,
                    "{}: checksum {c} against dot's {}",
                    forms[f],
                    checks[0]
                );
            } else {
                assert_eq!(c, checks[0], "the CPU route is ndarray's own product");
            }
        }
    }
    let med = |runs: &[Run], f: fn(&Run) -> f64| median(runs.iter().map(f).collect());
    let head: Vec<String> = forms.iter().map(|f| f.to_string()).collect();
    let ratios: Vec<String> = forms[1..].iter().map(|f| format!("{f} / dot")).collect();
    println!(
        "\n| median | {} | {} |\n|{}",
        head.join(" | "),
        ratios.join(" | "),
        "---|".repeat(2 * forms.len())
    );
    let rows: [Column; 4] = [
        ("wall s", |r| r.wall),
        ("user s", |r| r.user),
        ("system s", |r| r.system),
        ("minor faults", |r| r.minflt as f64),
    ];
    for (name, f) in rows {
        let m: Vec<f64> = runs.iter().map(|r| med(r, f)).collect();
        let cells: Vec<String> = m.iter().map(|v| format!("{v:.3}")).collect();
        let rel: Vec<String> = m[1..].iter().map(|v| format!("{:.3}", v / m[0])).collect();
        println!("| {name} | {} | {} |", cells.join(" | "), rel.join(" | "));
    }
    let walls: Vec<f64> = runs.iter().map(|r| med(r, |r| r.wall)).collect();
    println!(
        "\nndarray / gpu_dot: {:.2}{}",
        walls[0] / walls[1],
        walls.get(2).map_or(String::new(), |p| format!(
            "; ndarray / pinned: {:.2}",
            walls[0] / p
        ))
    );
    let products = if device.is_some() {
        products(arg("--reps", 50))
    } else {
        Vec::new()
    };
    if let Some(path) = common::flag_value(&args, "--json") {
        let doc = json!({
            "products": products,
            "device": device,
            "samples": samples,
            "epochs": epochs,
            "rounds": rounds,
            "width": WIDTH,
            "hold": hold,
            "gradient": if drop_in { "drop-in" } else { "c-order" },
            "ndarray_s": walls[0],
            "gpu_dot_s": walls[1],
            "pinned_s": walls.get(2),
            "runs": forms.iter().zip(&runs).map(|(f, r)| json!({
                "form": f,
                "wall_s": r.iter().map(|r| r.wall).collect::<Vec<_>>(),
                "system_s": r.iter().map(|r| r.system).collect::<Vec<_>>(),
                "minor_faults": r.iter().map(|r| r.minflt).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        });
        std::fs::write(&path, serde_json::to_string_pretty(&doc).expect("JSON")).expect("write");
        println!("wrote {path}");
    }
}

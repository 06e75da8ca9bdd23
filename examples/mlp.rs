//! Trains a small neural network three times, from the same initial weights on the same
//! batches: once with ndarray alone and three times with gpu-dot (the weights kept on the
//! GPU, and the activations on the GPU, on the host, or on the host page-locked). Then it checks that every run learned the same
//! thing.
//!
//! The network is `input → hidden (ReLU) → output`, trained with plain stochastic gradient
//! descent on a mean-squared-error loss. The data are synthetic: random inputs, and targets
//! made by a fixed random "teacher" network of the same shape, so there is something to learn.
//!
//! Three gpu-dot runs show how a training loop uses gpu-dot:
//! - **device** (the one to copy): everything but the batch lives on the device, as in
//!   PyTorch. The weights `W1` and `W2` and the activations `H`, `dY`, `dH` are
//!   [`GpuMatrix`]es; each step uploads its batch and targets ([`GpuMatrix::assign`]), runs
//!   five products, the ReLU ([`GpuMatrix::relu`]) and its gradient
//!   ([`GpuMatrix::relu_backward`]) on the device, and reads back only `dY` (64 floats a
//!   sample) for the loss;
//! - **host activations** (the drop-in): only the weights live on the device; the batch and
//!   the activations stay host arrays and the ReLU and the loss run on the CPU, so every
//!   product moves its activations across the link;
//! - **pinned**: the drop-in with the data and the activations in page-locked arrays
//!   ([`PinnedArray`]), which the products read and write straight by DMA.
//!
//! In both, every product is one [`try_general_mat_mul`] call, `C = alpha·A·B + beta·C`, where
//! each of A, B and C may be a host array or a device matrix:
//! - the SGD step `W ← W − lr·Aᵀ·G` is a single such call with `alpha = −lr` and `beta = 1`,
//!   written straight into the device matrix;
//! - the loss's gradient `dY = (2/len)·(H·W2 − T)` (device run) is one call with the targets
//!   uploaded into `dY` and `beta = −2/len`;
//! - `W2ᵀ` is [`GpuMatrix::t`], a transposed view (no copy).
//!
//! It prints the losses of the runs, their wall times and where the GPU runs ran. Without a
//! usable GPU the GPU runs are skipped (the reason is printed) and the CPU run still runs.
//!
//! Then, unless `--no-torch`, it times PyTorch's same loop (same sizes, FP32 with TF32 off,
//! weights on the GPU, its own random data of the same shape) through `python3` in the same
//! call: once copying each batch from host memory (`torch_host_batches_s`) and once with the
//! data on the device (`torch_device_s`); without python3 or PyTorch that part is skipped
//! with a note. `--json PATH` writes the run's record: the five times, the configuration and
//! whether the Rust runs agreed.
//!
//! ```text
//! cargo run --release --example mlp                # 8192 samples, 512 → 1024 → 64, 10 epochs
//! cargo run --release --example mlp -- --quick     # a small run, a second or less
//! cargo run --release --example mlp -- --samples 16384 --hidden 2048 --epochs 5 --batch 512
//! cargo run --release --example mlp -- --json mlp.json   # also write the record
//! ```
//!
//! The exit status is 0 when the gpu-dot runs agree with the ndarray run (or were skipped), 1
//! when they do not or the GPU failed, 2 for bad arguments.

use std::process::{Command, ExitCode};
use std::time::Instant;

use gpu_dot::{
    device_status, try_general_mat_mul, DeviceStatus, GpuDotError, GpuMatrix, PinnedArray,
};
use ndarray::linalg::general_mat_mul;
use ndarray::{s, Array2, ArrayBase, ArrayView2, ArrayViewMut2, Data, DataMut, Ix2, Zip};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

/// How far the losses of two runs may differ, relative to the ndarray run's loss, at every
/// epoch. Where the GPU adds up each product's terms in another order than ndarray does (a
/// split-K plan sums ranges of k apart; the device run forms `dY` from `H·W2` and `T` in one
/// fused step), products differ in the last bits of f32 (1e-7 to 1e-6 relative); where both
/// add them in the same order with fused multiply-adds, they agree bit for bit. SGD carries those
/// differences from step to step, and a ReLU near zero may switch on in one run and off in the
/// other, so the runs drift apart, slowly: computing every product of one run in f64 (rounded
/// to f32) instead moves the losses by less than 1e-6 in the default run and by less than 3e-5
/// over 4800 steps. A subtle bug, such as computing `dH` with `W2` after its update instead of
/// before, moves them by 3e-3 in the first epoch of `--quick`.
const LOSS_TOLERANCE: f64 = 1e-3;

/// How far the final weights may differ, relative to how far training moved them:
/// ‖W_gpu − W_cpu‖ / ‖W_cpu − W_initial‖ (Frobenius norms), for `W1` and for `W2`. The drift
/// shows more in the weights than in the loss (many changes of the weights barely change the
/// loss): the f64 experiment above gives 3e-5 in the default run and 2e-3 after 100 epochs
/// (3200 steps); the bug above gives 8e-2 in `--quick`.
const WEIGHT_TOLERANCE: f64 = 1e-2;

/// The sizes and the training settings, from the command line.
#[derive(Clone, Debug)]
struct Config {
    samples: usize,
    inputs: usize,
    hidden: usize,
    outputs: usize,
    batch: usize,
    epochs: usize,
    learning_rate: f32,
    seed: u64,
    /// Where to write the JSON record of the run (`--json PATH`).
    json: Option<String>,
    /// Whether to time PyTorch's same loop (`--no-torch` turns it off).
    torch: bool,
}

impl Config {
    /// The default run: 8192 samples of 512 inputs, 1024 hidden units, 64 outputs.
    fn full() -> Self {
        Config {
            samples: 8192,
            inputs: 512,
            hidden: 1024,
            outputs: 64,
            batch: 256,
            epochs: 10,
            learning_rate: 0.5,
            seed: 42,
            json: None,
            torch: true,
        }
    }

    /// `--quick`: a small network that trains in a fraction of a second, even on a laptop's CPU.
    fn quick() -> Self {
        Config {
            samples: 2048,
            inputs: 256,
            hidden: 512,
            outputs: 32,
            batch: 128,
            epochs: 5,
            ..Config::full()
        }
    }

    /// Mini-batches per epoch (a last, incomplete batch is left out).
    fn steps_per_epoch(&self) -> usize {
        self.samples / self.batch
    }

    /// Floating-point operations of one training step: five products,
    /// `X·W1`, `H·W2`, `dY·W2ᵀ`, `Hᵀ·dY` and `Xᵀ·dH`, each `2·m·k·n`.
    fn flops_per_step(&self) -> f64 {
        let (b, i, h, o) = (self.batch, self.inputs, self.hidden, self.outputs);
        2.0 * b as f64 * (2 * i * h + 3 * h * o) as f64
    }
}

const USAGE: &str = "usage: mlp [--quick] [--samples N] [--inputs N] [--hidden N] [--outputs N] \
                     [--batch N] [--epochs N] [--lr X] [--seed N] [--json PATH] [--no-torch] \
                     [--plain-launches]";

/// Reads the command line: `--quick` picks the small sizes, the other flags override sizes.
fn parse_args(args: &[String]) -> Result<Config, String> {
    let mut cfg = if args.iter().any(|a| a == "--quick") {
        Config::quick()
    } else {
        Config::full()
    };
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        if flag == "--quick" {
            continue;
        }
        if flag == "--no-torch" {
            cfg.torch = false;
            continue;
        }
        if flag == "--plain-launches" {
            // Each kernel only after the one before on its stream has finished (to time the
            // programmatic launches of sm_90).
            gpu_dot::__testing::programmatic_launches(false);
            continue;
        }
        if flag == "--help" || flag == "-h" {
            return Err(USAGE.to_string());
        }
        let value = args
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let count = || -> Result<usize, String> {
            match value.parse() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(format!("{flag} takes a positive integer, not {value:?}")),
            }
        };
        match flag.as_str() {
            "--samples" => cfg.samples = count()?,
            "--inputs" => cfg.inputs = count()?,
            "--hidden" => cfg.hidden = count()?,
            "--outputs" => cfg.outputs = count()?,
            "--batch" => cfg.batch = count()?,
            "--epochs" => cfg.epochs = count()?,
            "--seed" => cfg.seed = count()? as u64,
            "--json" => cfg.json = Some(value.clone()),
            "--lr" => {
                cfg.learning_rate = match value.parse() {
                    Ok(x) if x > 0.0 => x,
                    _ => return Err(format!("--lr takes a positive number, not {value:?}")),
                }
            }
            _ => return Err(format!("unknown argument {flag:?}\n{USAGE}")),
        }
    }
    if cfg.batch > cfg.samples {
        return Err(format!(
            "--batch ({}) must not exceed --samples ({})",
            cfg.batch, cfg.samples
        ));
    }
    Ok(cfg)
}

/// The two weight matrices of the network: `W1` is inputs × hidden, `W2` is hidden × outputs.
#[derive(Clone)]
struct Weights {
    w1: Array2<f32>,
    w2: Array2<f32>,
}

/// Random weights, uniform in ±√(6 / fan-in) ("He" initialisation, suited to ReLU), so that
/// activations keep about the same size from layer to layer.
fn random_weights(cfg: &Config, rng: &mut StdRng) -> Weights {
    let mut layer = |rows: usize, cols: usize| {
        let bound = (6.0 / rows as f32).sqrt();
        Array2::from_shape_simple_fn((rows, cols), || rng.random_range(-bound..bound))
    };
    Weights {
        w1: layer(cfg.inputs, cfg.hidden),
        w2: layer(cfg.hidden, cfg.outputs),
    }
}

/// The network's output for inputs `x`, computed with ndarray: `relu(x·W1)·W2`.
fn forward(x: &Array2<f32>, w: &Weights) -> Array2<f32> {
    let mut h = x.dot(&w.w1);
    relu(&mut h);
    h.dot(&w.w2)
}

/// Synthetic data: inputs uniform in [−1, 1), and targets computed by a random teacher network.
fn make_data(cfg: &Config, rng: &mut StdRng) -> (Array2<f32>, Array2<f32>) {
    let teacher = random_weights(cfg, rng);
    let x = Array2::from_shape_simple_fn((cfg.samples, cfg.inputs), || rng.random_range(-1.0..1.0));
    let targets = forward(&x, &teacher);
    (x, targets)
}

/// The mini-batches of one epoch: rows `0..batch`, `batch..2·batch`, … of the inputs and of
/// the targets, as views (no copies). The inputs are independent random draws, so taking them
/// in order is as good as shuffling.
fn batches<'a>(
    x: &'a Array2<f32>,
    targets: &'a Array2<f32>,
    cfg: &Config,
) -> impl Iterator<Item = (ArrayView2<'a, f32>, ArrayView2<'a, f32>)> {
    let batch = cfg.batch;
    (0..cfg.steps_per_epoch()).map(move |i| {
        let rows = i * batch..(i + 1) * batch;
        (x.slice(s![rows.clone(), ..]), targets.slice(s![rows, ..]))
    })
}

/// ReLU in place: negative entries become 0.
fn relu<S: DataMut<Elem = f32>>(h: &mut ArrayBase<S, Ix2>) {
    h.mapv_inplace(|v| v.max(0.0));
}

/// The gradient through the ReLU: it passes where the activation `h` is positive, else is 0.
/// Written as a select rather than a branch: which entries pass is random, so a branch would
/// be mispredicted on every other entry (ten times slower here than the select).
fn relu_backward<S1, S2>(dh: &mut ArrayBase<S1, Ix2>, h: &ArrayBase<S2, Ix2>)
where
    S1: DataMut<Elem = f32>,
    S2: Data<Elem = f32>,
{
    Zip::from(dh)
        .and(h)
        .for_each(|g, &a| *g = if a > 0.0 { *g } else { 0.0 });
}

/// The mean squared error of the outputs `y` against the targets, `L = mean((y − t)²)`; writes
/// its gradient `dL/dy = 2·(y − t) / len` into `dy`.
fn mse_loss<S1, S2>(
    y: &ArrayBase<S1, Ix2>,
    targets: ArrayView2<f32>,
    dy: &mut ArrayBase<S2, Ix2>,
) -> f64
where
    S1: Data<Elem = f32>,
    S2: DataMut<Elem = f32>,
{
    let scale = 2.0 / y.len() as f32;
    let mut sum = 0.0f64;
    Zip::from(dy).and(y).and(targets).for_each(|g, &y, &t| {
        let d = y - t;
        sum += f64::from(d) * f64::from(d);
        *g = scale * d;
    });
    sum / y.len() as f64
}

/// What a training run gives: each epoch's loss (the mean over its batches, each measured
/// before that batch's update), the final weights and the wall time.
struct Run {
    losses: Vec<f64>,
    weights: Weights,
    seconds: f64,
    /// Of `seconds`, the time spent inside the five products of each step.
    product_seconds: f64,
}

/// Runs `f`, adding its wall time to `total`.
fn timed<T>(total: &mut f64, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    *total += start.elapsed().as_secs_f64();
    out
}

/// Host buffers for one step's activations and gradients, allocated once per run.
struct Buffers {
    h: Array2<f32>,  // batch × hidden: relu(X·W1)
    y: Array2<f32>,  // batch × outputs: the network's output
    dy: Array2<f32>, // batch × outputs: dL/dY
    dh: Array2<f32>, // batch × hidden: dL/dH
}

impl Buffers {
    fn new(cfg: &Config) -> Self {
        Buffers {
            h: Array2::zeros((cfg.batch, cfg.hidden)),
            y: Array2::zeros((cfg.batch, cfg.outputs)),
            dy: Array2::zeros((cfg.batch, cfg.outputs)),
            dh: Array2::zeros((cfg.batch, cfg.hidden)),
        }
    }
}

/// Trains with ndarray alone: every product is `ndarray::linalg::general_mat_mul`,
/// `C = alpha·A·B + beta·C`, on host arrays.
fn train_cpu(x: &Array2<f32>, targets: &Array2<f32>, init: &Weights, cfg: &Config) -> Run {
    let start = Instant::now();
    let lr = cfg.learning_rate;
    let Weights { mut w1, mut w2 } = init.clone();
    let Buffers {
        mut h,
        mut y,
        mut dy,
        mut dh,
    } = Buffers::new(cfg);
    let mut losses = Vec::new();
    let mut p = 0.0; // seconds in products
    for _epoch in 0..cfg.epochs {
        let mut loss_sum = 0.0;
        for (xb, tb) in batches(x, targets, cfg) {
            // Forward: H = relu(X·W1), Y = H·W2.
            timed(&mut p, || general_mat_mul(1.0, &xb, &w1, 0.0, &mut h));
            relu(&mut h);
            timed(&mut p, || general_mat_mul(1.0, &h, &w2, 0.0, &mut y));
            loss_sum += mse_loss(&y, tb, &mut dy);
            // Backward: dH = dY·W2ᵀ (with W2 before its update), masked by the ReLU.
            timed(&mut p, || general_mat_mul(1.0, &dy, &w2.t(), 0.0, &mut dh));
            relu_backward(&mut dh, &h);
            // SGD: W2 ← W2 − lr·Hᵀ·dY and W1 ← W1 − lr·Xᵀ·dH, in place (beta = 1).
            timed(&mut p, || general_mat_mul(-lr, &h.t(), &dy, 1.0, &mut w2));
            timed(&mut p, || general_mat_mul(-lr, &xb.t(), &dh, 1.0, &mut w1));
        }
        losses.push(loss_sum / cfg.steps_per_epoch() as f64);
    }
    Run {
        losses,
        weights: Weights { w1, w2 },
        seconds: start.elapsed().as_secs_f64(),
        product_seconds: p,
    }
}

/// Trains with gpu-dot, everything but the data on the device: the same steps as
/// [`train_cpu`], each product one `try_general_mat_mul` call between device matrices. Each
/// step uploads its batch and targets and downloads `dY` for the loss; the weights are
/// uploaded once and downloaded once.
fn train_gpu(
    x: &Array2<f32>,
    targets: &Array2<f32>,
    init: &Weights,
    cfg: &Config,
) -> Result<Run, GpuDotError> {
    let start = Instant::now();
    let lr = cfg.learning_rate;
    let mut w1 = GpuMatrix::from_array(&init.w1)?; // upload, once
    let mut w2 = GpuMatrix::from_array(&init.w2)?;
    let b = cfg.batch;
    let mut xg = GpuMatrix::zeros((b, cfg.inputs))?; // the batch
    let mut h = GpuMatrix::zeros((b, cfg.hidden))?;
    let mut dy = GpuMatrix::zeros((b, cfg.outputs))?;
    let mut dh = GpuMatrix::zeros((b, cfg.hidden))?;
    let mut dy_host = Array2::zeros((b, cfg.outputs));
    // dL/dY = (2 / len)·(Y − T) for the mean over all `len` outputs of the batch.
    let scale = 2.0 / (b * cfg.outputs) as f32;
    let mut losses = Vec::new();
    let mut p = 0.0; // seconds in products
    for _epoch in 0..cfg.epochs {
        let mut loss_sum = 0.0;
        for (xb, tb) in batches(x, targets, cfg) {
            // The batch, and its targets into dY for the loss's gradient below.
            xg.assign(&xb)?;
            dy.assign(&tb)?;
            // Forward: H = relu(X·W1).
            timed(&mut p, || try_general_mat_mul(1.0, &xg, &w1, 0.0, &mut h))?;
            h.relu()?;
            // Y = H·W2 and the loss's gradient in one product:
            // dY = scale·(H·W2) − scale·T, T being in dY already.
            timed(&mut p, || {
                try_general_mat_mul(scale, &h, &w2, -scale, &mut dy)
            })?;
            dy.copy_to(&mut dy_host)?;
            loss_sum += dy_host
                .iter()
                .map(|&g| (f64::from(g) / f64::from(scale)).powi(2))
                .sum::<f64>()
                / dy_host.len() as f64;
            // Backward: dH = dY·W2ᵀ (with W2 before its update), masked by the ReLU.
            timed(&mut p, || {
                try_general_mat_mul(1.0, &dy, &w2.t(), 0.0, &mut dh)
            })?;
            dh.relu_backward(&h)?;
            // SGD: W2 ← W2 − lr·Hᵀ·dY and W1 ← W1 − lr·Xᵀ·dH.
            timed(&mut p, || {
                try_general_mat_mul(-lr, &h.t(), &dy, 1.0, &mut w2)
            })?;
            timed(&mut p, || {
                try_general_mat_mul(-lr, &xg.t(), &dh, 1.0, &mut w1)
            })?;
        }
        losses.push(loss_sum / cfg.steps_per_epoch() as f64);
    }
    let weights = Weights {
        w1: w1.to_array()?, // download, once
        w2: w2.to_array()?,
    };
    Ok(Run {
        losses,
        weights,
        seconds: start.elapsed().as_secs_f64(),
        product_seconds: p,
    })
}

/// Trains with gpu-dot, the weights on the device and the activations on the host: the same
/// steps as [`train_cpu`], each product one `try_general_mat_mul` call. The batch and the
/// activations stay host arrays (the ReLU and the loss run on the CPU); the weights are
/// uploaded once and downloaded once.
fn train_gpu_host_activations(
    x: &Array2<f32>,
    targets: &Array2<f32>,
    init: &Weights,
    cfg: &Config,
) -> Result<Run, GpuDotError> {
    let start = Instant::now();
    let Buffers {
        mut h,
        mut y,
        mut dy,
        mut dh,
    } = Buffers::new(cfg);
    let views = [h.view_mut(), y.view_mut(), dy.view_mut(), dh.view_mut()];
    host_activations_loop(x, targets, init, cfg, views, start)
}

/// [`train_gpu_host_activations`] with the activations in page-locked arrays
/// ([`PinnedArray`]): each product reads and writes them straight by DMA, with no staging
/// copy. With the data pinned too (`main` pins the inputs and targets once), so are the
/// batches.
fn train_gpu_pinned(
    x: &Array2<f32>,
    targets: &Array2<f32>,
    init: &Weights,
    cfg: &Config,
) -> Result<Run, GpuDotError> {
    let start = Instant::now();
    let pinned = |cols: usize| PinnedArray::<f32, _>::zeros((cfg.batch, cols));
    let [mut h, mut y, mut dy, mut dh] =
        [cfg.hidden, cfg.outputs, cfg.outputs, cfg.hidden].map(pinned);
    let views = [h.view_mut(), y.view_mut(), dy.view_mut(), dh.view_mut()];
    host_activations_loop(x, targets, init, cfg, views, start)
}

/// The loop of [`train_gpu_host_activations`] over the activations `[h, y, dy, dh]`.
fn host_activations_loop(
    x: &Array2<f32>,
    targets: &Array2<f32>,
    init: &Weights,
    cfg: &Config,
    [mut h, mut y, mut dy, mut dh]: [ArrayViewMut2<'_, f32>; 4],
    start: Instant,
) -> Result<Run, GpuDotError> {
    let lr = cfg.learning_rate;
    let mut w1 = GpuMatrix::from_array(&init.w1)?; // upload, once
    let mut w2 = GpuMatrix::from_array(&init.w2)?;
    let mut losses = Vec::new();
    let mut p = 0.0; // seconds in products
    for _epoch in 0..cfg.epochs {
        let mut loss_sum = 0.0;
        for (xb, tb) in batches(x, targets, cfg) {
            // Forward: host X times device W1 into host H, for the ReLU; then Y = H·W2.
            timed(&mut p, || try_general_mat_mul(1.0, &xb, &w1, 0.0, &mut h))?;
            relu(&mut h);
            timed(&mut p, || try_general_mat_mul(1.0, &h, &w2, 0.0, &mut y))?;
            loss_sum += mse_loss(&y, tb, &mut dy);
            // Backward: dH = dY·W2ᵀ, W2ᵀ a transposed view of the device matrix.
            timed(&mut p, || {
                try_general_mat_mul(1.0, &dy, &w2.t(), 0.0, &mut dh)
            })?;
            relu_backward(&mut dh, &h);
            // SGD, on the device: W ← W − lr·Aᵀ·G is alpha = −lr, beta = 1, output W.
            timed(&mut p, || {
                try_general_mat_mul(-lr, &h.t(), &dy, 1.0, &mut w2)
            })?;
            timed(&mut p, || {
                try_general_mat_mul(-lr, &xb.t(), &dh, 1.0, &mut w1)
            })?;
        }
        losses.push(loss_sum / cfg.steps_per_epoch() as f64);
    }
    let weights = Weights {
        w1: w1.to_array()?, // download, once
        w2: w2.to_array()?,
    };
    Ok(Run {
        losses,
        weights,
        seconds: start.elapsed().as_secs_f64(),
        product_seconds: p,
    })
}

/// ‖a − b‖ / ‖c‖, Frobenius norms, in f64.
fn relative_difference(a: &Array2<f32>, b: &Array2<f32>, c: &Array2<f32>) -> f64 {
    let diff = (a - b).mapv(|v| f64::from(v).powi(2)).sum();
    let norm = c.mapv(|v| f64::from(v).powi(2)).sum();
    (diff / norm.max(f64::MIN_POSITIVE)).sqrt()
}

/// Prints each epoch's loss, of the ndarray run and, when there is one, of the gpu-dot run
/// called `name`; returns whether the two agree within [`LOSS_TOLERANCE`] at every epoch.
fn compare_losses(cpu: &Run, gpu: Option<&Run>, name: &str) -> bool {
    println!("\ngpu-dot run: {name}");
    println!("epoch   loss (ndarray)   loss (gpu-dot)   relative difference");
    let mut agree = true;
    for (epoch, &c) in cpu.losses.iter().enumerate() {
        let Some(g) = gpu.map(|run| run.losses[epoch]) else {
            println!("{:5}   {c:14.6e}   {:>14}", epoch + 1, "skipped");
            continue;
        };
        let rel = (g - c).abs() / c.abs().max(f64::MIN_POSITIVE);
        let ok = rel <= LOSS_TOLERANCE;
        agree &= ok;
        let mark = if ok { "" } else { "  <- above tolerance" };
        println!(
            "{:5}   {c:14.6e}   {g:14.6e}   {rel:19.2e}{mark}",
            epoch + 1
        );
    }
    agree
}

/// Prints how far the final weights of the two runs differ, relative to how far training
/// moved them, and returns whether that is within [`WEIGHT_TOLERANCE`] for both matrices.
fn compare_weights(init: &Weights, cpu: &Run, gpu: &Run) -> bool {
    let mut agree = true;
    for (name, w0, c, g) in [
        ("W1", &init.w1, &cpu.weights.w1, &gpu.weights.w1),
        ("W2", &init.w2, &cpu.weights.w2, &gpu.weights.w2),
    ] {
        let rel = relative_difference(g, c, &(c - w0));
        let ok = rel <= WEIGHT_TOLERANCE;
        agree &= ok;
        println!(
            "final {name}: ‖gpu-dot − ndarray‖ / ‖ndarray − initial‖ = {rel:.2e} \
             (tolerance {WEIGHT_TOLERANCE:.0e}){}",
            if ok { "" } else { "  <- above tolerance" }
        );
    }
    agree
}

/// PyTorch's same training loop, timed in python3: `(host_batches_s, device_s)`, or why it
/// was skipped.
fn torch_times(cfg: &Config) -> Result<(f64, f64), String> {
    const SCRIPT: &str = r#"
import json, sys, time
import numpy as np
import torch
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
c = json.loads(sys.argv[1])
rng = np.random.default_rng(c["seed"])
def layer(rows, cols):
    bound = (6.0 / rows) ** 0.5
    return rng.uniform(-bound, bound, (rows, cols)).astype(np.float32)
t1, t2 = layer(c["inputs"], c["hidden"]), layer(c["hidden"], c["outputs"])
x = rng.uniform(-1, 1, (c["samples"], c["inputs"])).astype(np.float32)
targets = (np.maximum(x @ t1, 0) @ t2).astype(np.float32)
w1, w2 = layer(c["inputs"], c["hidden"]), layer(c["hidden"], c["outputs"])
dev, b, lr = "cuda", c["batch"], c["lr"]
steps = c["samples"] // b
def train(epochs, on_device):
    W1, W2 = torch.tensor(w1, device=dev), torch.tensor(w2, device=dev)
    X = torch.from_numpy(x).to(dev) if on_device else None
    T = torch.from_numpy(targets).to(dev) if on_device else None
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(epochs):
        loss = torch.zeros((), device=dev)
        for i in range(steps):
            rows = slice(i * b, (i + 1) * b)
            if on_device:
                xb, tb = X[rows], T[rows]
            else:
                xb = torch.from_numpy(x[rows]).to(dev)
                tb = torch.from_numpy(targets[rows]).to(dev)
            h = (xb @ W1).relu_()
            d = h @ W2 - tb
            loss += (d * d).mean()
            dy = d * (2.0 / d.numel())
            dh = (dy @ W2.T) * (h > 0)
            W2 -= lr * (h.T @ dy)
            W1 -= lr * (xb.T @ dh)
        loss.item()
    torch.cuda.synchronize()
    return time.perf_counter() - start
train(1, False); train(1, True)
print(json.dumps([train(c["epochs"], False), train(c["epochs"], True)]))
"#;
    let arg = json!({
        "samples": cfg.samples, "inputs": cfg.inputs, "hidden": cfg.hidden,
        "outputs": cfg.outputs, "batch": cfg.batch, "epochs": cfg.epochs,
        "lr": cfg.learning_rate, "seed": cfg.seed,
    })
    .to_string();
    let out = Command::new("python3")
        .args(["-c", SCRIPT, &arg])
        .output()
        .map_err(|e| format!("python3 could not be started: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "PyTorch's loop failed: {}",
            err.lines().last().unwrap_or("")
        ));
    }
    let times: Vec<f64> = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("PyTorch's loop printed no times: {e}"))?;
    match times[..] {
        [host, device] => Ok((host, device)),
        _ => Err("PyTorch's loop printed the wrong number of times".into()),
    }
}

/// The two gpu-dot runs.
struct GpuRuns {
    /// Everything but the data on the device ([`train_gpu`]).
    device: Run,
    /// The activations on the host ([`train_gpu_host_activations`]).
    host_activations: Run,
    /// The activations and the data on the host, page-locked ([`train_gpu_pinned`]).
    pinned: Run,
}

/// Times PyTorch's loop (unless `--no-torch`), prints the comparison and writes the JSON
/// record when `--json` asks for it.
fn record(cfg: &Config, cpu: &Run, gpu: Option<&GpuRuns>, agree: Option<bool>) {
    let torch = if cfg.torch {
        torch_times(cfg)
    } else {
        Err("skipped (--no-torch)".to_string())
    };
    let (host_s, device_s, note) = match &torch {
        Ok((h, d)) => {
            println!("PyTorch, batches copied from host memory: {h:8.3} s");
            println!("PyTorch, data on the device:              {d:8.3} s");
            if let Some(g) = gpu {
                for (name, run) in [
                    ("device", &g.device),
                    ("host activations", &g.host_activations),
                    ("pinned", &g.pinned),
                ] {
                    println!(
                        "gpu-dot ({name}) / PyTorch (host batches): {:.2}; \
                         ndarray / gpu-dot ({name}): {:.2}",
                        run.seconds / h,
                        cpu.seconds / run.seconds
                    );
                }
            }
            (Some(*h), Some(*d), None)
        }
        Err(why) => {
            println!("PyTorch's loop: {why}");
            (None, None, Some(why.clone()))
        }
    };
    let Some(path) = &cfg.json else {
        return;
    };
    let device = match device_status() {
        DeviceStatus::Ready(info) => Value::from(info.name),
        other => Value::from(other.to_string()),
    };
    let doc = json!({
        "device": device,
        "config": {
            "samples": cfg.samples, "inputs": cfg.inputs, "hidden": cfg.hidden,
            "outputs": cfg.outputs, "batch": cfg.batch, "epochs": cfg.epochs,
            "steps": cfg.steps_per_epoch() * cfg.epochs,
            "learning_rate": cfg.learning_rate, "seed": cfg.seed,
        },
        "gpu_dot_s": gpu.map(|g| g.device.seconds),
        "gpu_dot_products_s": gpu.map(|g| g.device.product_seconds),
        "gpu_dot_host_activations_s": gpu.map(|g| g.host_activations.seconds),
        "gpu_dot_host_activations_products_s": gpu.map(|g| g.host_activations.product_seconds),
        "gpu_dot_pinned_s": gpu.map(|g| g.pinned.seconds),
        "gpu_dot_pinned_products_s": gpu.map(|g| g.pinned.product_seconds),
        "ndarray_s": cpu.seconds,
        "ndarray_products_s": cpu.product_seconds,
        "torch_host_batches_s": host_s,
        "torch_device_s": device_s,
        "torch_note": note,
        "runs_agree": agree,
    });
    match std::fs::write(path, serde_json::to_string_pretty(&doc).expect("JSON")) {
        Ok(()) => println!("wrote {path}"),
        Err(e) => eprintln!("could not write {path}: {e}"),
    }
}

/// A training function: [`train_gpu`], [`train_gpu_host_activations`] or [`train_gpu_pinned`].
type Train = fn(&Array2<f32>, &Array2<f32>, &Weights, &Config) -> Result<Run, GpuDotError>;

/// Runs `train` on one batch until the autotuner has settled every shape the step multiplies
/// (at most 100 times; untimed: the first call also creates the context and loads the
/// kernels), then on the whole configuration.
fn warm_then_time(
    train: Train,
    (x, targets, init): (&Array2<f32>, &Array2<f32>, &Weights),
    cfg: &Config,
    one_step: &Config,
) -> Result<Run, GpuDotError> {
    for _ in 0..100 {
        train(x, targets, init, one_step)?;
        if gpu_dot::tuning_in_progress() == 0 {
            break;
        }
    }
    train(x, targets, init, cfg)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cfg = match parse_args(&args) {
        Ok(cfg) => cfg,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    println!(
        "two-layer network {} → {} (ReLU) → {}, mean-squared-error loss, SGD (learning rate {})",
        cfg.inputs, cfg.hidden, cfg.outputs, cfg.learning_rate
    );
    println!(
        "{} samples, batches of {}, {} steps per epoch, {} epochs, {:.1} GFLOP per epoch",
        cfg.samples,
        cfg.batch,
        cfg.steps_per_epoch(),
        cfg.epochs,
        cfg.flops_per_step() * cfg.steps_per_epoch() as f64 / 1e9
    );
    println!("device for the gpu-dot run: {}", device_status());

    // The same data and the same initial weights for both runs.
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let (x, targets) = make_data(&cfg, &mut rng);
    let init = random_weights(&cfg, &mut rng);
    let total_flops = cfg.flops_per_step() * (cfg.steps_per_epoch() * cfg.epochs) as f64;
    let report = |what: &str, run: &Run| {
        println!(
            "{what:<29} {:8.3} s  {:8.1} GFLOP/s  ({:.3} s in the products, {:.3} s elsewhere)",
            run.seconds,
            total_flops / run.seconds / 1e9,
            run.product_seconds,
            run.seconds - run.product_seconds
        );
    };

    // Each run starts with untimed steps (the first batch, on a copy of the weights), so
    // that one-time costs stay out of the timings: on the GPU, creating the CUDA context,
    // loading or compiling the kernels and autotuning each product's shape.
    let one_step = Config {
        samples: cfg.batch,
        epochs: 1,
        ..cfg.clone()
    };

    // Run 1: ndarray alone.
    train_cpu(&x, &targets, &init, &one_step);
    let cpu = train_cpu(&x, &targets, &init, &cfg);
    report("ndarray (CPU):", &cpu);
    if cpu.losses.iter().any(|loss| !loss.is_finite()) {
        compare_losses(&cpu, None, "not run");
        eprintln!("training diverged (the loss is not finite): try a smaller --lr");
        return ExitCode::FAILURE;
    }

    // Runs 2 and 3: gpu-dot, weights on the device; activations on the device, then on
    // the host.
    let data = (&x, &targets, &init);
    let gpu = match warm_then_time(train_gpu, data, &cfg, &one_step).and_then(|device| {
        let host_activations = warm_then_time(train_gpu_host_activations, data, &cfg, &one_step)?;
        // The data page-locked once, as a loader that fills pinned batches would hold them.
        let (px, pt) = (
            PinnedArray::new(x.clone()),
            PinnedArray::new(targets.clone()),
        );
        let pinned = warm_then_time(train_gpu_pinned, (&*px, &*pt, &init), &cfg, &one_step)?;
        Ok(GpuRuns {
            device,
            host_activations,
            pinned,
        })
    }) {
        Ok(runs) => runs,
        Err(GpuDotError::NoDevice { reason }) => {
            println!("gpu-dot: skipped, no GPU to run on: {reason}");
            compare_losses(&cpu, None, "skipped");
            record(&cfg, &cpu, None, None);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("gpu-dot run failed: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let mut agree = true;
    for (name, run) in [
        ("gpu-dot (device):", &gpu.device),
        ("gpu-dot (host activations):", &gpu.host_activations),
        ("gpu-dot (pinned):", &gpu.pinned),
    ] {
        report(name, run);
        println!(
            "  speed-up over ndarray: {:.2}× (wall time, transfers included)",
            cpu.seconds / run.seconds
        );
    }
    for (name, run) in [
        ("device", &gpu.device),
        ("host activations", &gpu.host_activations),
        ("pinned", &gpu.pinned),
    ] {
        agree &= compare_losses(&cpu, Some(run), name);
        agree &= compare_weights(&init, &cpu, run);
    }
    record(&cfg, &cpu, Some(&gpu), Some(agree));
    if !agree {
        eprintln!(
            "MISMATCH: a gpu-dot run differs from the ndarray run by more than the tolerance \
             (losses {LOSS_TOLERANCE:.0e} relative at each epoch, \
             weights {WEIGHT_TOLERANCE:.0e} of how far training moved them)"
        );
        return ExitCode::FAILURE;
    }
    println!(
        "every run agrees: losses within {LOSS_TOLERANCE:.0e} (relative) at every epoch, \
         final weights within {WEIGHT_TOLERANCE:.0e} of how far training moved them"
    );
    ExitCode::SUCCESS
}

//! Host-to-host products into an existing array with the panel height forced, against the
//! autotuner's own choice: where more, shorter panels pay.
//!
//!     cargo run --release --example panels -- [--sizes 1024,2048,4096] [--pinned]
//!
//! For each square and element type: the tuner's choice and panels of m/16, m/8, m/4, m/2 and
//! m rows (each setting tuned on its own first), measured in rounds that take the settings in
//! turn. Each round times one product after the host's caches were filled with other data
//! (512 MiB written: the inputs come from memory, as in a program that did other work since
//! it wrote them) and three back to back. Prints the medians and the route of each setting.
//!
//! `--pinned` takes A, B and C in [`gpu_dot::PinnedArray`]s instead (copied straight by DMA,
//! with no staging): where panels pay when the host's memory is not in the way.

mod common;

use std::time::Instant;

use gpu_dot::profile::random_matrix_of;
use gpu_dot::{Backend, DotOptions, Element, PinnedArray};

fn median(mut t: Vec<f64>) -> f64 {
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

/// Writes every cache line of `buf`.
fn scrub(buf: &mut [u64]) {
    for (i, x) in buf.iter_mut().enumerate().step_by(8) {
        *x = x.wrapping_add(i as u64);
    }
    std::hint::black_box(&*buf);
}

fn probe<A: Element>(n: usize, buf: &mut [u64], pinned: bool) {
    let a = random_matrix_of::<A>(n, n, 1);
    let b = random_matrix_of::<A>(n, n, 2);
    let mut c = ndarray::Array2::<A>::zeros((n, n));
    let mut locked = pinned.then(|| {
        (
            PinnedArray::new(a.clone()),
            PinnedArray::new(b.clone()),
            PinnedArray::<A, _>::zeros((n, n)),
        )
    });
    let (a, b, mut c) = match &mut locked {
        Some((pa, pb, pc)) => (pa.view(), pb.view(), pc.view_mut()),
        None => (a.view(), b.view(), c.view_mut()),
    };
    let settings = [
        None,
        Some(n / 16),
        Some(n / 8),
        Some(n / 4),
        Some(n / 2),
        Some(n),
    ];
    let opts: Vec<DotOptions> = settings
        .iter()
        .map(|&rows| DotOptions::builtin().backend(Backend::Gpu).panel_rows(rows))
        .collect();
    let into = |o: &DotOptions, c: &mut ndarray::ArrayViewMut2<A>| {
        gpu_dot::try_general_mat_mul_with(A::one(), &a, &b, A::zero(), c, o).expect("into")
    };
    let routes: Vec<String> = opts
        .iter()
        .map(|o| {
            for _ in 0..80 {
                into(o, &mut c);
                if gpu_dot::tuning_in_progress() == 0 {
                    break;
                }
            }
            into(o, &mut c).to_string()
        })
        .collect();
    let rounds = if n >= 4096 { 12 } else { 30 };
    let mut scrubbed = vec![Vec::new(); opts.len()];
    let mut back_to_back = vec![Vec::new(); opts.len()];
    for round in 0..rounds {
        for j in 0..opts.len() {
            let s = (j + round) % opts.len();
            scrub(buf);
            let t = Instant::now();
            into(&opts[s], &mut c);
            scrubbed[s].push(t.elapsed().as_secs_f64() * 1e3);
            for _ in 0..3 {
                let t = Instant::now();
                into(&opts[s], &mut c);
                back_to_back[s].push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    for (j, rows) in settings.iter().enumerate() {
        println!(
            "| {}{} | {n}³ | {} | {:.3} | {:.3} | {} |",
            A::DTYPE,
            if pinned { ", pinned" } else { "" },
            rows.map_or("tuner".to_string(), |r| r.to_string()),
            median(scrubbed[j].clone()),
            median(back_to_back[j].clone()),
            routes[j],
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sizes: Vec<usize> = common::flag_value(&args, "--sizes")
        .unwrap_or_else(|| "1024,2048,4096".into())
        .split(',')
        .map(|s| s.trim().parse().expect("--sizes takes integers"))
        .collect();
    let pinned = args.iter().any(|a| a == "--pinned");
    let mut buf = vec![1u64; 64 << 20];
    println!("| type | shape | panel rows | caches scrubbed ms | back to back ms | route |");
    println!("|---|---|---|---|---|---|");
    for &n in &sizes {
        probe::<f32>(n, &mut buf, pinned);
        probe::<f64>(n, &mut buf, pinned);
    }
}

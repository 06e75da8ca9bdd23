//! Timing and the PyTorch reference shared by the examples that report figures.
#![allow(dead_code)]

pub mod link;
pub mod memory;

use std::process::Command;
use std::time::Instant;

/// The argument after `flag` on the command line `args`, if the flag is there.
pub fn flag_value(args: &[String], flag: &str) -> Option<String> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1).cloned())
}

/// Median wall time in ms of `f`, over as many runs as fit in about `budget_ms` (3 to 200).
pub fn median_ms(budget_ms: f64, mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    f();
    let once = start.elapsed().as_secs_f64() * 1e3;
    let reps = ((budget_ms / once.max(1e-3)) as usize).clamp(3, 200);
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

/// Runs `product` (a `gpu_dot` with default settings, returning its route) until the
/// autotuner has settled on its choice for that shape (at most 64 more times): the warm-up
/// grows the staging buffers and lets each candidate plan, a real product, be measured. Returns
/// the route of the settled choice (the loop's last product may have been a tuning trial).
pub fn warm_until_settled(product: impl Fn() -> gpu_dot::Route) -> gpu_dot::Route {
    product();
    for _ in 0..64 {
        if gpu_dot::tuning_in_progress() == 0 {
            break;
        }
        product();
    }
    product()
}

/// Runs a Python `script` with `arg` as `sys.argv[1]` and parses the JSON list of times it
/// prints, or `None` (saying why on stderr) when python3 or torch is missing or fails.
pub fn python_times(script: &str, arg: &str) -> Option<Vec<f64>> {
    let out = Command::new("python3")
        .args(["-c", script, arg])
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "PyTorch line skipped: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

//! Running a product with the kernel the options name, and the autotuner behind
//! [`Kernel::Auto`]: the first time a shape class is seen, each candidate plan is timed on
//! the product's own operands and the fastest is kept for the rest of the process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaSlice, CudaStream, CudaViewMut};
use once_cell::sync::Lazy;

use crate::context::{Gpu, Stopwatch};
use crate::error::GpuDotError;
use crate::fast::{self, Plan};
use crate::options::Kernel;
use crate::registry::TileConfig;
use crate::sgemm::{self, DeviceOperand};

/// What ran: the kernel, and for the register-blocked family its plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ran {
    pub(crate) kernel: Kernel,
    pub(crate) plan: Option<Plan>,
}

/// A shape class: the powers of two at or above m, k and n, and the operand layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ShapeClass {
    log2: (u32, u32, u32),
    trans: (bool, bool),
}

fn ceil_log2(x: usize) -> u32 {
    usize::BITS - x.saturating_sub(1).leading_zeros()
}

static TUNED: Lazy<Mutex<HashMap<ShapeClass, Plan>>> = Lazy::new(|| Mutex::new(HashMap::new()));

/// The plans the autotuner has chosen so far, as `(m, k, n)` class bounds (powers of two)
/// and plan.
pub fn tuned_plans() -> Vec<((usize, usize, usize), Plan)> {
    let tuned = TUNED.lock().unwrap_or_else(|p| p.into_inner());
    let mut v: Vec<_> = tuned
        .iter()
        .map(|(c, p)| ((1 << c.log2.0, 1 << c.log2.1, 1 << c.log2.2), *p))
        .collect();
    v.sort_by_key(|(dims, _)| *dims);
    v
}

/// Enqueues `C = op(A) · op(B)` with `kernel` (tuning `Auto` when `autotune` is set).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    kernel: Kernel,
    autotune: bool,
    dims: (usize, usize, usize),
    a: &DeviceOperand,
    b: &DeviceOperand,
    c: &mut CudaViewMut<'_, f32>,
    ldc: usize,
    scratch: &mut Option<CudaSlice<f32>>,
) -> Result<Ran, GpuDotError> {
    let (m, k, n) = dims;
    let tile = |config| Plan::Tile { config, splits: 1 };
    let plan = match kernel {
        Kernel::Naive | Kernel::Tiled16 | Kernel::Tiled32 => {
            sgemm::launch(gpu, stream, kernel, dims, a, b, c, ldc)?;
            return Ok(Ran { kernel, plan: None });
        }
        Kernel::Reg64 => tile(TileConfig::Small),
        Kernel::Reg128 => tile(TileConfig::Big),
        Kernel::Auto => {
            let sms = gpu.info.multiprocessors.max(1) as usize;
            let candidates = fast::candidates(m, k, n, sms);
            if !autotune || candidates.len() == 1 {
                fast::heuristic(m, k, n, sms)
            } else {
                let class = ShapeClass {
                    log2: (ceil_log2(m), ceil_log2(k), ceil_log2(n)),
                    trans: (a.trans, b.trans),
                };
                let known = TUNED
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&class)
                    .copied();
                match known {
                    Some(plan) => plan,
                    None => {
                        let plan = tune(gpu, stream, &candidates, dims, a, b, c, ldc, scratch)?;
                        TUNED
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(class, plan);
                        // The candidates' runs already left a correct product in C.
                        return Ok(Ran {
                            kernel: Kernel::Auto,
                            plan: Some(plan),
                        });
                    }
                }
            }
        }
    };
    fast::launch(gpu, stream, plan, dims, a, b, c, ldc, scratch)?;
    Ok(Ran {
        kernel,
        plan: Some(plan),
    })
}

/// Times each candidate twice on the product's own buffers (each run writes all of C) and
/// returns the fastest by its better time.
#[allow(clippy::too_many_arguments)]
fn tune(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    candidates: &[Plan],
    dims: (usize, usize, usize),
    a: &DeviceOperand,
    b: &DeviceOperand,
    c: &mut CudaViewMut<'_, f32>,
    ldc: usize,
    scratch: &mut Option<CudaSlice<f32>>,
) -> Result<Plan, GpuDotError> {
    let watch = Stopwatch::new(gpu)?;
    let mut best: Option<(f32, Plan)> = None;
    for &plan in candidates {
        let mut fastest = f32::INFINITY;
        for _ in 0..2 {
            let ms = watch.time(stream, || {
                fast::launch(gpu, stream, plan, dims, a, b, &mut *c, ldc, &mut *scratch)
            })?;
            fastest = fastest.min(ms);
        }
        if best.is_none_or(|(t, _)| fastest < t) {
            best = Some((fastest, plan));
        }
    }
    Ok(best.expect("at least one candidate").1)
}

#[cfg(test)]
mod tests {
    use super::ceil_log2;

    #[test]
    fn shape_classes_are_powers_of_two_at_or_above() {
        assert_eq!(ceil_log2(1), 0);
        assert_eq!(ceil_log2(2), 1);
        assert_eq!(ceil_log2(1000), 10);
        assert_eq!(ceil_log2(1024), 10);
        assert_eq!(ceil_log2(1025), 11);
    }
}

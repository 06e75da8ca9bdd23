//! One host-to-host product split across several devices: A's rows (and C's) cut into one
//! panel per device, in proportion to each device's multiprocessors, and each panel computed
//! by that device's own pipeline, on its own thread with its own host crew; every device
//! uploads B once, and results land straight in their rows of C.

use std::sync::Arc;

use ndarray::Axis;

use crate::device::context::{self, Gpu};
use crate::element::Element;
use crate::error::GpuDotError;
use crate::host::crew;
use crate::options::{Devices, DotOptions, DEFAULT_MIN_SPLIT_FLOPS};
use crate::pipeline::{self, Done, Dst, Failure, Gemm, Src};

/// Rows of a device's panel are a multiple of this (the kernels' largest tile height).
const ROW_GRANULE: usize = 128;

/// The ordinals a product of `flops` flops and `m` rows splits across, or `None` for one
/// device: the options must name more than one, and the product must be large enough.
pub(crate) fn split_devices(
    opts: &DotOptions,
    flops: u64,
    m: usize,
) -> Result<Option<Vec<usize>>, GpuDotError> {
    let Some(devices) = &opts.devices else {
        return Ok(None);
    };
    if flops < opts.min_split_flops.unwrap_or(DEFAULT_MIN_SPLIT_FLOPS) || m < 2 * ROW_GRANULE {
        return Ok(None);
    }
    let mut list = match devices {
        Devices::All => {
            let count =
                context::device_count().map_err(|reason| GpuDotError::NoDevice { reason })?;
            // Every usable device: one that cannot make a context is left out.
            (0..count).filter(|&o| context::gpu_on(o).is_ok()).collect()
        }
        Devices::List(list) => list.clone(),
    };
    let mut seen = std::collections::HashSet::new();
    list.retain(|o| seen.insert(*o));
    Ok((list.len() > 1).then_some(list))
}

/// The device a product runs on when it is not split: [`DotOptions::device`], else the one
/// [`DotOptions::devices`] names when it names one.
pub(crate) fn single_device(opts: &DotOptions) -> Option<usize> {
    opts.device.or(match &opts.devices {
        Some(Devices::List(list)) if list.len() == 1 => Some(list[0]),
        _ => None,
    })
}

/// Row bounds of each device's panel of an `m`-row product: shares in proportion to
/// `weights`, each a multiple of [`ROW_GRANULE`] rows but the last; a device whose share
/// rounds to nothing gets no panel (`(r, r)`).
pub(crate) fn row_bounds(m: usize, weights: &[usize]) -> Vec<(usize, usize)> {
    let total: usize = weights.iter().sum::<usize>().max(1);
    let mut bounds = Vec::with_capacity(weights.len());
    let (mut start, mut acc) = (0, 0);
    for (i, w) in weights.iter().enumerate() {
        acc += w;
        let end = if i + 1 == weights.len() {
            m
        } else {
            let ideal = (m as u128 * acc as u128 / total as u128) as usize;
            (ideal.div_ceil(ROW_GRANULE) * ROW_GRANULE).clamp(start, m)
        };
        bounds.push((start, end));
        start = end;
    }
    bounds
}

/// Computes `g` split across the devices `ordinals` (see the module docs). Every device's
/// context is made first, so that a device that cannot be used fails the product before any
/// work. A device's failure is [`GpuDotError::SplitFailed`] with its ordinal, and C counts as
/// touched when any device wrote its panel.
pub(crate) fn gemm_split<T: Element>(
    ordinals: &[usize],
    opts: &DotOptions,
    g: Gemm<'_, '_, '_, '_, T>,
) -> Result<(Done, Vec<usize>), Failure> {
    let untouched = |ordinal, error| Failure {
        error: GpuDotError::SplitFailed {
            ordinal,
            source: Box::new(error),
        },
        touched: false,
    };
    let mut gpus: Vec<Arc<Gpu>> = Vec::with_capacity(ordinals.len());
    for &o in ordinals {
        gpus.push(context::gpu_on(o).map_err(|e| untouched(o, e))?);
    }
    let (Src::Host(a), Src::Host(b)) = (g.a, g.b) else {
        unreachable!("only host operands are split")
    };
    let m = a.nrows();
    let weights: Vec<usize> = gpus
        .iter()
        .map(|g| g.info.multiprocessors.max(1) as usize)
        .collect();
    let bounds = row_bounds(m, &weights);
    // C cut into the devices' rows, front to back.
    let mut c_parts: Vec<Dst<'_, T>> = Vec::with_capacity(bounds.len());
    let mut rest: Dst<'_, T> = match &mut *g.c {
        Dst::Host(v) => Dst::Host(v.view_mut()),
        Dst::Fresh(v) => Dst::Fresh(v.view_mut()),
        Dst::Device { .. } => unreachable!("only host outputs are split"),
    };
    for &(r0, r1) in &bounds {
        let (head, tail) = match rest {
            Dst::Host(v) => {
                let (h, t) = v.split_at(Axis(0), r1 - r0);
                (Dst::Host(h), Dst::Host(t))
            }
            Dst::Fresh(v) => {
                let (h, t) = v.split_at(Axis(0), r1 - r0);
                (Dst::Fresh(h), Dst::Fresh(t))
            }
            Dst::Device { .. } => unreachable!("only host outputs are split"),
        };
        c_parts.push(head);
        rest = tail;
    }
    let (alpha, beta) = (g.alpha, g.beta);
    let shares = bounds.len();
    let run = |i: usize, c: Dst<'_, T>| -> Result<Done, Failure> {
        let (r0, r1) = bounds[i];
        if r0 == r1 {
            return Ok(Done::nothing());
        }
        let mut c = c;
        let share_opts = DotOptions {
            device: Some(ordinals[i]),
            devices: None,
            ..opts.clone()
        };
        let a_i = Src::Host(a.slice_axis(Axis(0), (r0..r1).into()));
        let b_i = Src::Host(b.view());
        crew::as_share(i, shares, || {
            pipeline::gemm(
                &gpus[i],
                &share_opts,
                Gemm {
                    alpha,
                    a: &a_i,
                    b: &b_i,
                    beta,
                    c: &mut c,
                },
            )
        })
        .map_err(|f| Failure {
            error: GpuDotError::SplitFailed {
                ordinal: ordinals[i],
                source: Box::new(f.error),
            },
            touched: f.touched,
        })
    };
    let results: Vec<Result<Done, Failure>> = std::thread::scope(|s| {
        let mut parts = c_parts.into_iter().enumerate();
        let (_, first_c) = parts.next().expect("at least two shares");
        let run = &run;
        let handles: Vec<_> = parts
            .map(|(i, c)| {
                std::thread::Builder::new()
                    .name(format!("gpu-dot-device-{}", ordinals[i]))
                    .spawn_scoped(s, move || run(i, c))
            })
            .collect();
        let mut results = vec![run(0, first_c)];
        for (i, h) in handles.into_iter().enumerate() {
            results.push(match h {
                Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
                Err(e) => Err(Failure {
                    error: GpuDotError::SplitFailed {
                        ordinal: ordinals[i + 1],
                        source: Box::new(GpuDotError::NoDevice {
                            reason: format!("could not start a host thread for the device: {e}"),
                        }),
                    },
                    touched: false,
                }),
            });
        }
        results
    });
    let touched = results
        .iter()
        .any(|r| r.as_ref().map_or_else(|f| f.touched, |d| d.ran.is_some()));
    let mut done: Option<Done> = None;
    let mut used = Vec::new();
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(d) if d.ran.is_some() || d.panels > 0 => {
                used.push(ordinals[i]);
                done = Some(match done {
                    None => d,
                    Some(mut acc) => {
                        acc.panels += d.panels;
                        acc
                    }
                });
            }
            Ok(_) => {}
            Err(mut f) => {
                f.touched = touched;
                return Err(f);
            }
        }
    }
    Ok((done.unwrap_or_else(Done::nothing), used))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_shared_by_weight_in_whole_tiles() {
        assert_eq!(row_bounds(1000, &[132, 132]), vec![(0, 512), (512, 1000)]);
        assert_eq!(
            row_bounds(16384, &[132, 132]),
            vec![(0, 8192), (8192, 16384)]
        );
        assert_eq!(
            row_bounds(4096, &[132, 132, 132, 132]),
            vec![(0, 1024), (1024, 2048), (2048, 3072), (3072, 4096)]
        );
        // A device with twice the multiprocessors takes about twice the rows.
        assert_eq!(row_bounds(3072, &[66, 132]), vec![(0, 1024), (1024, 3072)]);
        // Every row once, in order, whatever the weights.
        for m in [256, 257, 300, 1023, 5000] {
            for w in [vec![1, 1], vec![1, 1000], vec![1000, 1], vec![3, 5, 7]] {
                let b = row_bounds(m, &w);
                assert_eq!(b.first().unwrap().0, 0);
                assert_eq!(b.last().unwrap().1, m);
                assert!(b.windows(2).all(|p| p[0].1 == p[1].0 && p[0].0 <= p[0].1));
            }
        }
    }

    #[test]
    fn one_named_device_is_not_a_split() {
        let opts = DotOptions::builtin().devices(Devices::List(vec![1]));
        assert_eq!(single_device(&opts), Some(1));
        assert_eq!(split_devices(&opts, u64::MAX, 1 << 20).unwrap(), None);
        let two = DotOptions::builtin().devices(Devices::List(vec![0, 1, 0]));
        assert_eq!(
            split_devices(&two, u64::MAX, 1 << 20).unwrap(),
            Some(vec![0, 1])
        );
        // Too small, or too few rows: one device.
        assert_eq!(split_devices(&two, 1000, 1 << 20).unwrap(), None);
        assert_eq!(split_devices(&two, u64::MAX, 200).unwrap(), None);
        assert_eq!(single_device(&two), None);
    }
}

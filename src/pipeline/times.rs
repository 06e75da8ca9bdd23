//! A GPU product's trace line (`GPU_DOT_TRACE`): when each of its steps ended, the run's host
//! times, its logged pieces and the device's stamps.

use super::board::{PieceTime, CONDUCTOR};
use super::conduct::Trace;
use crate::engine::tuner::Choice;

/// Step 6's report: when each step ended, for `GPU_DOT_TRACE`.
#[derive(Default)]
pub(super) struct Times {
    pub(super) schedule: std::time::Duration,
    pub(super) buffers: std::time::Duration,
    pub(super) loop_start: std::time::Duration,
    pub(super) total: std::time::Duration,
    pub(super) run: Trace,
}

impl Times {
    /// The trace line of a product of `panels` panels, as `choice` ran it.
    pub(super) fn line(
        &self,
        (m, k, n): (usize, usize, usize),
        panels: usize,
        choice: &Choice,
    ) -> String {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        let at = |s: f64| ms(self.loop_start) + s * 1e3;
        let t = &self.run;
        format!(
            "{m}x{k}x{n} panels={} plan={} helpers={} pieces={} (conductor steps {}, {} before \
             the first copy) total={:.3}ms schedule={:.3} buffers={:.3} loop_start={:.3} \
             first_packed={:.3} first_copy={:.3} \
             inputs_issued={:.3} kernels_enqueued={:.3} results_landed={:.3} unpacked={:.3} \
             touched={:.3} issue={:.3} launch={:.3} poll={:.3} arrived_by_first_packed={} \
             first_parcel={} last_parcel={}{}",
            panels,
            choice.plan.map_or("-".into(), |p| p.to_string()),
            t.helpers,
            t.pieces,
            t.pieces_by_conductor,
            t.conductor_first,
            ms(self.total),
            ms(self.schedule),
            ms(self.buffers),
            ms(self.loop_start),
            at(t.first_packed),
            at(t.first_copy),
            at(t.inputs_issued),
            at(t.kernels_enqueued),
            at(t.results_landed),
            at(t.unpacked),
            if t.touched > 0.0 { at(t.touched) } else { 0.0 },
            t.issue * 1e3,
            t.launch * 1e3,
            t.poll * 1e3,
            t.arrived_by_first_packed,
            piece_times(&t.first_parcel, &at),
            piece_times(&t.last_parcel, &at),
            device_times(&t.device, at),
        )
    }
}

/// A parcel's logged pieces for its trace line: `who:claimed-done` each, in µs on the line's
/// axis (`at` places seconds from the run's start in ms), `c` for the conductor; `-` where
/// none was logged.
fn piece_times(pieces: &[PieceTime], at: &impl Fn(f64) -> f64) -> String {
    let done: Vec<String> = pieces
        .iter()
        .filter(|p| p.done > 0.0)
        .map(|p| {
            let who = if p.who == CONDUCTOR {
                "c".to_string()
            } else {
                p.who.to_string()
            };
            format!("{who}:{:.1}-{:.1}", at(p.claimed) * 1e3, at(p.done) * 1e3)
        })
        .collect();
    if done.is_empty() {
        "-".into()
    } else {
        done.join(",")
    }
}

/// The device's stamps of a traced run for its trace line, in ms on the line's axis (`at`
/// places seconds from the run's start; the start stamp runs on an idle device, so device and
/// host times share an origin to within the start's enqueueing): empty when untimed.
fn device_times(device: &[Option<f64>], at: impl Fn(f64) -> f64) -> String {
    const NAMES: [&str; 4] = [
        "dev_inputs_landed",
        "dev_kernels_began",
        "dev_kernels_ended",
        "dev_results_landed",
    ];
    NAMES
        .iter()
        .zip(device)
        .filter_map(|(name, t)| t.map(|t| format!(" {name}={:.3}", at(t))))
        .collect()
}

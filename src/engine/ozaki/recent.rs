//! The default precision's memory of the guard's refusals, by shape. A refused product pays
//! for the guard's passes and then for the native product: 2–6% more than native where the
//! early refusal decides, 16–19% where the guard's judge does (`f64` log-normal inputs at
//! 8192³). A loop whose products the guard keeps refusing pays that every time. So after a
//! shape's second refusal in a row, the next product of that shape runs natively without
//! the guard, then the next 3 after a third refusal, 7 after a fourth, and so on up to 63;
//! then the guard weighs the shape again. A product the guard lets emulate clears the
//! shape's memory. Only ever native runs in place of the guard: no bound is loosened.
//!
//! A product of host arrays in row panels counts once: the first of its panels to weigh
//! emulation asks the memory and tells it what the guard found, and the other panels follow
//! its decision (all skip the guard, or all are weighed, each on its own rows).
//!
//! `GPU_DOT_GUARD_MEMORY=0` turns it off, and so does
//! [`emulate_every_size`](crate::device::overrides::emulate_every_size) (the tests that
//! weigh every product).

use std::collections::HashMap;
use std::sync::Mutex;

use once_cell::sync::Lazy;

use crate::element::Dtype;

use super::GuardReport;

/// A product as the memory tells products apart: its device, its element type and its
/// dimensions (the whole product's, for a row panel).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Shape {
    pub(crate) device: usize,
    pub(crate) dtype: Dtype,
    pub(crate) dims: (usize, usize, usize),
}

/// Refusals in a row after which the products of a shape skip the guard for the longest
/// stretch, [`skips_after`] of it (63).
const MOST_DOUBLINGS: u32 = 7;
/// Shapes remembered at most; past it, the memory starts again from nothing (a program
/// with this many shapes refused is not a loop the memory helps).
const MOST_SHAPES: usize = 256;

#[derive(Clone, Copy, Debug)]
struct Entry {
    /// Refusals of the shape in a row, at most [`MOST_DOUBLINGS`].
    refusals: u32,
    /// Products of the shape that run natively before the guard weighs it again.
    skips_left: u32,
    /// The last refusal's report.
    last: GuardReport,
}

/// Products a shape skips the guard for after `refusals` refusals in a row: none after the
/// first, then 1, 3, 7, … 63.
fn skips_after(refusals: u32) -> u32 {
    (1u32 << (refusals.clamp(1, MOST_DOUBLINGS) - 1)) - 1
}

/// The refusals of every shape refused lately.
#[derive(Debug, Default)]
pub(crate) struct Recent {
    shapes: HashMap<Shape, Entry>,
}

impl Recent {
    /// Whether a product of `shape` skips the guard, counting it: the last refusal's report,
    /// marked [`skipped`](GuardReport::skipped), where it does.
    pub(crate) fn skip(&mut self, shape: Shape) -> Option<GuardReport> {
        let e = self.shapes.get_mut(&shape)?;
        if e.skips_left == 0 {
            return None;
        }
        e.skips_left -= 1;
        Some(GuardReport {
            skipped: true,
            ..e.last
        })
    }

    /// The guard refused a product of `shape`.
    pub(crate) fn refused(&mut self, shape: Shape, report: GuardReport) {
        if self.shapes.len() >= MOST_SHAPES && !self.shapes.contains_key(&shape) {
            self.shapes.clear();
        }
        let e = self.shapes.entry(shape).or_insert(Entry {
            refusals: 0,
            skips_left: 0,
            last: report,
        });
        e.refusals = (e.refusals + 1).min(MOST_DOUBLINGS);
        e.skips_left = skips_after(e.refusals);
        e.last = report;
    }

    /// The guard let a product of `shape` emulate: its refusals are forgotten.
    pub(crate) fn passed(&mut self, shape: Shape) {
        self.shapes.remove(&shape);
    }
}

static RECENT: Lazy<Mutex<Recent>> = Lazy::new(|| Mutex::new(Recent::default()));

/// The process's memory, where it is on: `GPU_DOT_GUARD_MEMORY` unset or on, and no test
/// weighing every product.
pub(crate) fn recent() -> Option<std::sync::MutexGuard<'static, Recent>> {
    if !*MEMORY_ON || crate::device::overrides::emulating_every_size() {
        return None;
    }
    // Each method leaves the map whole, so a panic elsewhere leaves it valid.
    Some(RECENT.lock().unwrap_or_else(|p| p.into_inner()))
}

/// Forgets every shape's refusals: the next product of each is weighed by the guard.
pub fn forget() {
    *RECENT.lock().unwrap_or_else(|p| p.into_inner()) = Recent::default();
}

/// `GPU_DOT_GUARD_MEMORY`: on unless switched off; any other value is ignored, with a
/// warning.
static MEMORY_ON: Lazy<bool> = Lazy::new(|| {
    crate::settings::GUARD_MEMORY.switch_from_env("the guard's memory of refusals stays on")
});

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: GuardReport = GuardReport {
        tiles: 64,
        failed: 3,
        skipped: false,
    };

    fn shape(m: usize) -> Shape {
        Shape {
            device: 0,
            dtype: Dtype::F64,
            dims: (m, 8192, 8192),
        }
    }

    /// Runs `products` products of `s` whose guard refuses each one it weighs; returns, for
    /// each, whether it skipped the guard.
    fn refused_loop(r: &mut Recent, s: Shape, products: usize) -> Vec<bool> {
        (0..products)
            .map(|_| match r.skip(s) {
                Some(report) => {
                    assert!(report.skipped);
                    assert_eq!((report.tiles, report.failed), (64, 3));
                    true
                }
                None => {
                    r.refused(s, REPORT);
                    false
                }
            })
            .collect()
    }

    #[test]
    fn skips_double_with_each_refusal_in_a_row_up_to_63() {
        let got: Vec<u32> = (1..=9).map(skips_after).collect();
        assert_eq!(got, [0, 1, 3, 7, 15, 31, 63, 63, 63]);
    }

    #[test]
    fn a_shape_refused_again_and_again_is_weighed_ever_more_rarely() {
        let mut r = Recent::default();
        let skipped = refused_loop(&mut r, shape(8192), 200);
        // Weighed: products 0 and 1; after the second refusal one skips, after the third
        // three, and so on.
        let weighed: Vec<usize> = (0..200).filter(|&i| !skipped[i]).collect();
        assert_eq!(weighed, [0, 1, 3, 7, 15, 31, 63, 127, 191]);
    }

    #[test]
    fn one_refusal_alone_skips_nothing_and_a_pass_forgets_the_shape() {
        let mut r = Recent::default();
        let s = shape(4096);
        r.refused(s, REPORT);
        assert_eq!(r.skip(s), None, "one refusal: the next product is weighed");
        r.refused(s, REPORT);
        assert!(r.skip(s).is_some(), "two in a row: the next skips");
        assert_eq!(r.skip(s), None, "then the guard weighs it again");
        r.passed(s);
        r.refused(s, REPORT);
        assert_eq!(
            r.skip(s),
            None,
            "after a pass, refusals count from one again"
        );
    }

    #[test]
    fn shapes_devices_and_element_types_are_remembered_apart() {
        let mut r = Recent::default();
        let s = shape(8192);
        r.refused(s, REPORT);
        r.refused(s, REPORT);
        let others = [
            shape(8191),
            Shape { device: 1, ..s },
            Shape {
                dtype: Dtype::F32,
                ..s
            },
        ];
        for o in others {
            assert_eq!(r.skip(o), None, "{o:?}");
        }
        assert!(r.skip(s).is_some());
    }

    #[test]
    fn the_memory_is_bounded() {
        let mut r = Recent::default();
        for m in 0..(3 * MOST_SHAPES) {
            r.refused(shape(m), REPORT);
            assert!(r.shapes.len() <= MOST_SHAPES);
        }
    }
}

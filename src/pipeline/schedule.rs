//! What a product moves, and in what order: its row panels, the host↔device transfers, and
//! how the transfers are cut into *parcels* (one DMA copy each, through one slot of a
//! page-locked staging ring) and *pieces* (one thread's host copy each).
//!
//! The schedule is geometry only (counts, lengths, offsets); the conductor binds it to the
//! host arrays and device buffers of one product. Every transfer is a matrix read or written in
//! row-major order, so a parcel or a piece is a range of that order.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use once_cell::sync::Lazy;

/// The sizes a schedule cuts transfers into, in elements (the byte sizes in the comments are
/// f32's; f64 transfers move twice the bytes per element).
///
/// Parcels going up grow geometrically from the smallest to the largest size (the first copy
/// starts after little packing; later ones are large, where a copy's fixed cost is small);
/// parcels coming down shrink geometrically toward the end of each panel's result (early ones
/// large; the last one small, so that little unpacking is left once the last copy lands).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Smallest parcel.
    pub(crate) min_parcel: usize,
    /// Largest parcel (and staging slot).
    pub(crate) max_parcel: usize,
    /// Largest staging ring: larger transfers reuse its slots.
    pub(crate) max_ring: usize,
    /// Largest piece.
    pub(crate) piece: usize,
}

impl Limits {
    /// The sizes products use.
    pub(crate) const DEFAULT: Limits = Limits {
        // 256 KiB: back-to-back copies of 256 KiB run at about 36 GB/s, of 64 KiB at 18 (an
        // H200's link; BENCHMARKS.md): smaller parcels cost more in copies than they gain in
        // overlap.
        min_parcel: 64 << 10,
        // 4 MiB: about 75 µs at 55 GB/s; copies this large run at the link's full rate.
        max_parcel: 1 << 20,
        // 32 MiB, about 0.6 ms of transfer at 55 GB/s.
        max_ring: 8 << 20,
        // 64 KiB: a few microseconds of one thread's copying.
        piece: 16 << 10,
    };
}

/// The pieces a parcel is cut into, where each stays within a quarter of [`Limits::piece`]
/// and the whole of it: one per thread of a full crew (the conductor and fifteen helpers), so
/// that a small parcel is copied by all of them at once. Parcels of 16 largest pieces and more
/// are cut into largest pieces. A piece of 64 KiB takes one thread about 12 µs to pack (H100
/// host, medians of 600 f32 products at 512³: the first copy up left 13 µs after the run's
/// start where the conductor packed one piece of the first parcel, 23 µs where it packed two).
const PIECES_PER_PARCEL: usize = 16;

/// Elements to which the parcels of a ring without reuse are aligned (256 bytes of `f32`, 512
/// of `f64`): a parcel's staging then starts where a device buffer would, and the kernels'
/// 16-byte loads may read it in place.
pub(crate) const RING_ALIGN: usize = 64;

/// Which way parcel sizes change along a direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Growth {
    /// From the smallest, doubling with each parcel of the direction.
    Rising,
    /// Toward the smallest at the end of each transfer, halving with each parcel.
    Falling,
}

/// Cuts `len` floats into parcel ranges. `rising` counts the parcels cut so far in a
/// rising direction.
fn cut(len: usize, growth: Growth, limits: &Limits, rising: &mut u32) -> Vec<(usize, usize)> {
    let size = |j: u32| {
        limits
            .min_parcel
            .saturating_mul(1usize.checked_shl(j.min(40)).unwrap_or(usize::MAX))
            .min(limits.max_parcel)
    };
    let mut out = Vec::new();
    match growth {
        Growth::Rising => {
            let mut start = 0;
            while start < len {
                let end = (start + size(*rising)).min(len);
                out.push((start, end));
                start = end;
                *rising += 1;
            }
        }
        Growth::Falling => {
            // Sizes from the end; the first parcel takes what is left, merged into its
            // neighbour when it is the smaller and the two fit one parcel.
            let mut end = len;
            let mut j = 0;
            while end > 0 {
                let start = end.saturating_sub(size(j));
                out.push((start, end));
                end = start;
                j += 1;
            }
            let len_of = |p: (usize, usize)| p.1 - p.0;
            if let [.., next, first] = out[..] {
                if len_of(first) < len_of(next) && len_of(first) + len_of(next) <= limits.max_parcel
                {
                    out.pop();
                    out.last_mut().expect("one parcel").0 = first.0;
                }
            }
            out.reverse();
        }
    }
    out
}

/// What a transfer moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum What {
    /// All of B, up.
    B,
    /// Panel `i` of A, up.
    A(usize),
    /// Panel `i` of C's old value, up (beta ≠ 0 with a host output).
    CIn(usize),
    /// Panel `i` of the result, down.
    COut(usize),
    /// The items of B of a batch's group `i`, up (a batch with a B per item).
    BItems(usize),
    /// A whole matrix (an upload or a download of a device matrix).
    Whole,
}

/// One matrix moved between host and device, `len` floats in row-major order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Transfer {
    pub(crate) what: What,
    pub(crate) len: usize,
}

/// One DMA copy: floats `start..end` of a transfer, through staging slot `slot`, which is
/// the ring's floats from `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Parcel {
    pub(crate) transfer: usize,
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) slot: usize,
    pub(crate) offset: usize,
    /// The pieces (indices into the direction's piece list) that pack or unpack it.
    pub(crate) pieces: Range<usize>,
}

impl Parcel {
    pub(crate) fn len(&self) -> usize {
        self.end - self.start
    }
}

/// One thread's host copy: floats `start..end` of parcel `parcel`'s transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Piece {
    pub(crate) parcel: usize,
    pub(crate) start: usize,
    pub(crate) end: usize,
}

/// The transfers of one direction, cut into parcels and pieces, with the ring they use.
#[derive(Debug, Default)]
pub(crate) struct Direction {
    pub(crate) transfers: Vec<Transfer>,
    pub(crate) parcels: Vec<Parcel>,
    pub(crate) pieces: Vec<Piece>,
    /// Slots in the ring: parcel `j` uses slot `j % slots`, so it waits for parcel
    /// `j − slots` to be done with it. When every parcel has a slot of its own, the slots are
    /// packed at the parcels' own sizes; otherwise each holds the largest parcel.
    pub(crate) slots: usize,
    /// Floats of staging the ring needs.
    ring_len: usize,
}

impl Direction {
    fn new(transfers: Vec<Transfer>, growth: Growth, limits: &Limits) -> Direction {
        let mut parcels = Vec::new();
        let mut pieces = Vec::new();
        let mut rising = 0;
        for (transfer, t) in transfers.iter().enumerate() {
            for (start, end) in cut(t.len, growth, limits, &mut rising) {
                let first_piece = pieces.len();
                // Up to PIECES_PER_PARCEL pieces per parcel (down to a quarter of the largest
                // piece), so that a small first parcel up, or last one down, is copied by the
                // whole crew at once: the first copy up waits for its parcel's slowest piece,
                // and the product's end for the last one down's.
                let piece = ((end - start).div_ceil(PIECES_PER_PARCEL))
                    .clamp(limits.piece / 4, limits.piece);
                for p in (start..end).step_by(piece.max(1)) {
                    pieces.push(Piece {
                        parcel: parcels.len(),
                        start: p,
                        end: (p + piece).min(end),
                    });
                }
                parcels.push(Parcel {
                    transfer,
                    start,
                    end,
                    slot: 0,
                    offset: 0,
                    pieces: first_piece..pieces.len(),
                });
            }
        }
        let slot_len = parcels.iter().map(Parcel::len).max().unwrap_or(0);
        let total: usize = parcels.iter().map(Parcel::len).sum();
        let (slots, ring_len) = if total <= limits.max_ring {
            // Everything in flight at once: each parcel at its own offset, aligned as device
            // memory is, so that kernels may read a parcel in place (mapped inputs).
            let mut at = 0usize;
            for (j, parcel) in parcels.iter_mut().enumerate() {
                at = at.next_multiple_of(RING_ALIGN);
                parcel.slot = j;
                parcel.offset = at;
                at += parcel.len();
            }
            (parcels.len(), at)
        } else {
            let slots = (limits.max_ring / slot_len.max(1)).max(1);
            for (j, parcel) in parcels.iter_mut().enumerate() {
                parcel.slot = j % slots;
                parcel.offset = parcel.slot * slot_len;
            }
            (slots, slots * slot_len)
        };
        Direction {
            transfers,
            parcels,
            pieces,
            slots,
            ring_len,
        }
    }

    /// Floats of staging the ring needs.
    pub(crate) fn ring_len(&self) -> usize {
        self.ring_len
    }

    /// The parcels of transfer `transfer`.
    pub(crate) fn parcels_of(&self, transfer: usize) -> Range<usize> {
        let first = self.parcels.partition_point(|p| p.transfer < transfer);
        let end = self.parcels.partition_point(|p| p.transfer <= transfer);
        first..end
    }
}

/// Where each operand lives, as the schedule needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Residency {
    /// A is a host array (uploaded per panel).
    pub(crate) a_host: bool,
    /// B is a host array (uploaded whole, first).
    pub(crate) b_host: bool,
    /// B is a host complex matrix's parts, half the elements of the `k × n` operand the
    /// product reads (expanded on the device; [`Src::HostParts`](super::Src::HostParts)).
    pub(crate) b_parts: bool,
    /// C is a host array (downloaded per panel).
    pub(crate) c_host: bool,
    /// C's old value is read (beta ≠ 0) from the host (uploaded per panel).
    pub(crate) c_in: bool,
}

impl Residency {
    /// The elements of a `k × n` B that go up where B is a host operand: its parts where they
    /// go up ([`Residency::b_parts`]), half of them.
    pub(crate) fn b_up_len(&self, k: usize, n: usize) -> usize {
        if self.b_parts {
            k * n / 2
        } else {
            k * n
        }
    }
}

/// Schedules of recent products, by shape, panel height and residency: a repeated product
/// (a training loop's) reuses its schedule instead of cutting its transfers again.
static RECENT: Lazy<Mutex<HashMap<ScheduleKey, Arc<Schedule>>>> =
    Lazy::new(|| Mutex::new(HashMap::new()));
/// Schedules kept at most; the table is emptied when it is full.
const MAX_RECENT: usize = 64;

type ScheduleKey = ((usize, usize, usize), usize, bool, Residency);

/// The schedule of a product, from the table of recent ones when it is there (see
/// [`Schedule::product`]).
pub(crate) fn product_schedule(
    dims: (usize, usize, usize),
    rows: usize,
    multiply: bool,
    res: Residency,
) -> Arc<Schedule> {
    let key = (dims, rows, multiply, res);
    let mut recent = RECENT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = recent.get(&key) {
        return s.clone();
    }
    if recent.len() >= MAX_RECENT {
        recent.clear();
    }
    let s = Arc::new(Schedule::product(dims, rows, multiply, res));
    recent.insert(key, s.clone());
    s
}

/// A batch's B as its schedule moves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchB {
    /// One B per item, of this many elements, uploaded with its item's group.
    Each(usize),
    /// One B for every item, of this many elements, uploaded first.
    Shared(usize),
}

/// A product's schedule: panels, and the transfers of both directions.
#[derive(Debug)]
pub(crate) struct Schedule {
    /// Row ranges of A and C, one per panel (for a batch: item ranges).
    pub(crate) panels: Vec<(usize, usize)>,
    pub(crate) up: Direction,
    pub(crate) down: Direction,
    /// For each panel, how many up parcels must have been issued before its kernels.
    pub(crate) panel_inputs: Vec<usize>,
    /// For each panel, its down parcels.
    pub(crate) panel_outputs: Vec<Range<usize>>,
}

impl Schedule {
    /// The schedule of `C = alpha·A·B + beta·C` (A m × k, B k × n) in panels of `rows` rows;
    /// `multiply` is false when A and B are not read (k = 0 or alpha = 0).
    pub(crate) fn product(
        dims: (usize, usize, usize),
        rows: usize,
        multiply: bool,
        res: Residency,
    ) -> Schedule {
        Schedule::product_with(dims, rows, multiply, res, &Limits::DEFAULT)
    }

    /// [`Schedule::product`] with other limits.
    pub(crate) fn product_with(
        (m, k, n): (usize, usize, usize),
        rows: usize,
        multiply: bool,
        res: Residency,
        limits: &Limits,
    ) -> Schedule {
        let rows = rows.clamp(1, m.max(1));
        let panels: Vec<(usize, usize)> = (0..m)
            .step_by(rows)
            .map(|r0| (r0, (r0 + rows).min(m)))
            .collect();
        let mut up = Vec::new();
        if multiply && res.b_host && k * n > 0 {
            up.push(Transfer {
                what: What::B,
                len: res.b_up_len(k, n),
            });
        }
        let mut down = Vec::new();
        let mut inputs_through = Vec::new(); // per panel: up transfers through it
        for (i, &(r0, r1)) in panels.iter().enumerate() {
            let p = r1 - r0;
            if multiply && res.a_host && p * k > 0 {
                up.push(Transfer {
                    what: What::A(i),
                    len: p * k,
                });
            }
            if res.c_host && res.c_in && p * n > 0 {
                up.push(Transfer {
                    what: What::CIn(i),
                    len: p * n,
                });
            }
            inputs_through.push(up.len());
            if res.c_host && p * n > 0 {
                down.push(Transfer {
                    what: What::COut(i),
                    len: p * n,
                });
            }
        }
        Schedule::of_panels(panels, up, down, &inputs_through, limits)
    }

    /// The schedule of a batch of products whose items are uploaded and downloaded in groups
    /// (the panels: item ranges `z0..z1`), so that one group's copies overlap another's
    /// kernels. Each item of A takes `a_item` elements up and each of C `c_item` down; B takes
    /// `b_item` per item, or with [`BatchB::Shared`] one transfer of all of it before the
    /// first group.
    pub(crate) fn batch(
        groups: &[(usize, usize)],
        a_item: usize,
        b: BatchB,
        c_item: usize,
    ) -> Schedule {
        let limits = &Limits::DEFAULT;
        let mut up = Vec::new();
        // Every transfer has elements: items, and their dimensions, are at least 1.
        if let BatchB::Shared(len) = b {
            up.push(Transfer { what: What::B, len });
        }
        let mut down = Vec::new();
        let mut inputs_through = Vec::new();
        for (i, &(z0, z1)) in groups.iter().enumerate() {
            let items = z1 - z0;
            up.push(Transfer {
                what: What::A(i),
                len: items * a_item,
            });
            if let BatchB::Each(b_item) = b {
                up.push(Transfer {
                    what: What::BItems(i),
                    len: items * b_item,
                });
            }
            inputs_through.push(up.len());
            down.push(Transfer {
                what: What::COut(i),
                len: items * c_item,
            });
        }
        Schedule::of_panels(groups.to_vec(), up, down, &inputs_through, limits)
    }

    /// A schedule from its panels and transfers: `inputs_through[i]` up transfers are panel
    /// `i`'s inputs and those of the panels before it.
    fn of_panels(
        panels: Vec<(usize, usize)>,
        up: Vec<Transfer>,
        down: Vec<Transfer>,
        inputs_through: &[usize],
        limits: &Limits,
    ) -> Schedule {
        let up = Direction::new(up, Growth::Rising, limits);
        let down = Direction::new(down, Growth::Falling, limits);
        let panel_inputs = inputs_through
            .iter()
            .map(|&through| {
                if through == 0 {
                    0
                } else {
                    up.parcels_of(through - 1).end
                }
            })
            .collect();
        let panel_outputs = (0..panels.len())
            .map(
                |i| match down.transfers.iter().position(|t| t.what == What::COut(i)) {
                    Some(t) => down.parcels_of(t),
                    None => {
                        let at = down
                            .transfers
                            .iter()
                            .position(|t| matches!(t.what, What::COut(j) if j > i))
                            .map_or(down.parcels.len(), |t| down.parcels_of(t).start);
                        at..at
                    }
                },
            )
            .collect();
        Schedule {
            panels,
            up,
            down,
            panel_inputs,
            panel_outputs,
        }
    }

    /// The schedule of one upload of `len` floats.
    pub(crate) fn upload(len: usize) -> Schedule {
        let up = vec![Transfer {
            what: What::Whole,
            len,
        }];
        let up = Direction::new(up, Growth::Rising, &Limits::DEFAULT);
        Schedule::whole(up, Direction::default())
    }

    /// The schedule of one download of `len` floats.
    pub(crate) fn download(len: usize) -> Schedule {
        let down = vec![Transfer {
            what: What::Whole,
            len,
        }];
        let down = Direction::new(down, Growth::Falling, &Limits::DEFAULT);
        Schedule::whole(Direction::default(), down)
    }

    fn whole(up: Direction, down: Direction) -> Schedule {
        Schedule {
            panels: Vec::new(),
            up,
            down,
            panel_inputs: Vec::new(),
            panel_outputs: Vec::new(),
        }
    }

    /// Host elements the product copies (both directions).
    #[cfg(test)]
    pub(crate) fn host_elements(&self) -> usize {
        (self.up.pieces.iter().chain(&self.down.pieces))
            .map(|p| p.end - p.start)
            .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Limits = Limits::DEFAULT;

    const ALL_HOST: Residency = Residency {
        a_host: true,
        b_host: true,
        b_parts: false,
        c_host: true,
        c_in: false,
    };

    /// Every float of every transfer lies in exactly one parcel and one piece, in order.
    fn check_cover(d: &Direction) {
        let mut next_piece = 0;
        for (t, transfer) in d.transfers.iter().enumerate() {
            let mut at = 0;
            for j in d.parcels_of(t) {
                let p = &d.parcels[j];
                assert_eq!((p.transfer, p.start), (t, at));
                assert!(p.len() > 0 && p.len() <= L.max_parcel);
                assert_eq!(p.slot, j % d.slots);
                assert!(p.offset + p.len() <= d.ring_len());
                if d.slots == d.parcels.len() {
                    // No reuse: the parcels follow one another in the ring, each at the first
                    // aligned offset after the one before.
                    let before = match j {
                        0 => 0,
                        _ => d.parcels[j - 1].offset + d.parcels[j - 1].len(),
                    };
                    assert_eq!(p.offset, before.next_multiple_of(RING_ALIGN));
                }
                assert_eq!(p.pieces.start, next_piece);
                let mut q = p.start;
                for piece in &d.pieces[p.pieces.clone()] {
                    assert_eq!((piece.parcel, piece.start), (j, q));
                    assert!(piece.end > piece.start && piece.end - piece.start <= L.piece);
                    q = piece.end;
                }
                assert_eq!(q, p.end);
                next_piece = p.pieces.end;
                at = p.end;
            }
            assert_eq!(at, transfer.len);
        }
        assert_eq!(next_piece, d.pieces.len());
        let total: usize = d.transfers.iter().map(|t| t.len).sum();
        // The ring holds no more than the data with each parcel's alignment; a ring whose
        // slots are reused, no more than the largest ring.
        assert!(d.ring_len() <= total + d.parcels.len() * (RING_ALIGN - 1));
        if d.slots < d.parcels.len() {
            assert!(d.ring_len() <= L.max_ring.max(L.max_parcel));
        }
    }

    #[test]
    fn transfers_are_cut_into_parcels_and_pieces_that_cover_them() {
        for dims in [
            (1, 1, 1),
            (256, 256, 256),
            (1000, 3000, 500),
            (4096, 4096, 4096),
        ] {
            for rows in [1, 128, 1000, 4096] {
                let s = Schedule::product(dims, rows, true, ALL_HOST);
                check_cover(&s.up);
                check_cover(&s.down);
                let covered: usize = s.panels.iter().map(|(a, b)| b - a).sum();
                assert_eq!(covered, dims.0);
            }
        }
    }

    #[test]
    fn small_parcels_are_cut_for_a_full_crew_and_large_ones_into_largest_pieces() {
        let s = Schedule::product((2048, 2048, 2048), 512, true, ALL_HOST);
        for d in [&s.up, &s.down] {
            for p in &d.parcels {
                let pieces = &d.pieces[p.pieces.clone()];
                let len = p.len();
                if len >= PIECES_PER_PARCEL * L.piece {
                    assert!(pieces
                        .iter()
                        .all(|q| q.end - q.start == L.piece || q.end == p.end));
                } else {
                    assert_eq!(
                        pieces.len(),
                        len.div_ceil(len.div_ceil(PIECES_PER_PARCEL).max(L.piece / 4))
                    );
                    assert!(pieces
                        .iter()
                        .all(|q| q.end - q.start >= L.piece / 4 || q.end == p.end));
                }
            }
        }
        // The first parcel up (the smallest) goes in PIECES_PER_PARCEL pieces.
        let first = &s.up.parcels[0];
        assert_eq!(first.len(), L.min_parcel);
        assert_eq!(first.pieces.len(), PIECES_PER_PARCEL);
        // And the last parcel down.
        let last = s.down.parcels.last().expect("a parcel down");
        assert_eq!(last.pieces.len(), PIECES_PER_PARCEL);
    }

    #[test]
    fn b_goes_first_and_each_panel_waits_for_its_own_inputs() {
        let s = Schedule::product(
            (1024, 512, 256),
            256,
            true,
            Residency {
                c_in: true,
                ..ALL_HOST
            },
        );
        let whats: Vec<What> = s.up.transfers.iter().map(|t| t.what).collect();
        assert_eq!(whats[0], What::B);
        assert_eq!(&whats[1..3], &[What::A(0), What::CIn(0)]);
        assert_eq!(s.panels.len(), 4);
        for i in 0..4 {
            let last = s.up.parcels[s.panel_inputs[i] - 1].transfer;
            assert_eq!(s.up.transfers[last].what, What::CIn(i));
            let outs = &s.panel_outputs[i];
            assert!(!outs.is_empty());
            for d in outs.clone() {
                let t = s.down.parcels[d].transfer;
                assert_eq!(s.down.transfers[t].what, What::COut(i));
            }
        }
    }

    #[test]
    fn a_complex_bs_parts_move_half_the_operand() {
        // B read as 2K × 2N = 512 × 256 from K × 2N = 256 × 256 reals: 65536 go up, ahead of
        // every panel's A.
        let res = Residency {
            b_parts: true,
            ..ALL_HOST
        };
        let s = Schedule::product((1024, 512, 256), 256, true, res);
        assert_eq!(s.up.transfers[0].what, What::B);
        assert_eq!(s.up.transfers[0].len, 512 * 256 / 2);
        let a_len: usize = s.up.transfers[1..].iter().map(|t| t.len).sum();
        assert_eq!(a_len, 1024 * 512);
        check_cover(&s.up);
        let plain = Schedule::product((1024, 512, 256), 256, true, ALL_HOST);
        assert_eq!(plain.up.transfers[0].len, 512 * 256);
    }

    #[test]
    fn device_operands_move_nothing() {
        let res = Residency {
            a_host: false,
            b_host: false,
            b_parts: false,
            c_host: false,
            c_in: false,
        };
        let s = Schedule::product((512, 512, 512), 512, true, res);
        assert!(s.up.parcels.is_empty() && s.down.parcels.is_empty());
        assert_eq!(s.panel_inputs, vec![0]);
        assert_eq!(s.panel_outputs, vec![0..0]);
        // No multiplication: only C moves.
        let s = Schedule::product(
            (300, 0, 200),
            300,
            false,
            Residency {
                c_in: true,
                ..ALL_HOST
            },
        );
        let whats: Vec<What> = s.up.transfers.iter().map(|t| t.what).collect();
        assert_eq!(whats, vec![What::CIn(0)]);
    }

    #[test]
    fn large_transfers_reuse_a_bounded_ring() {
        let s = Schedule::product((8192, 8192, 8192), 1024, true, ALL_HOST);
        assert!(s.up.ring_len() <= L.max_ring);
        assert_eq!(s.up.ring_len(), s.up.slots * L.max_parcel);
        assert!(s.up.parcels.len() > s.up.slots);
        // Smaller products: every parcel in flight at once, the ring no larger than the data
        // (parcels of whole multiples of the alignment need no padding).
        let s = Schedule::product((1024, 1024, 1024), 1024, true, ALL_HOST);
        assert_eq!(s.up.slots, s.up.parcels.len());
        assert_eq!(s.up.ring_len(), 2 * 1024 * 1024);
        let s = Schedule::product((256, 256, 256), 256, true, ALL_HOST);
        assert_eq!(s.up.slots, s.up.parcels.len());
        assert_eq!(s.host_elements(), 3 * 256 * 256);
    }

    #[test]
    fn parcels_rise_going_up_and_fall_at_the_end_of_each_result() {
        let s = Schedule::product((1024, 1024, 1024), 1024, true, ALL_HOST);
        let lens: Vec<usize> = s.up.parcels.iter().map(Parcel::len).collect();
        assert_eq!(lens[0], L.min_parcel);
        assert_eq!(lens[1], 2 * L.min_parcel);
        assert!(lens.iter().all(|&l| l <= L.max_parcel));
        let lens: Vec<usize> = s.down.parcels.iter().map(Parcel::len).collect();
        assert_eq!(*lens.last().unwrap(), L.min_parcel);
        assert_eq!(lens[lens.len() - 2], 2 * L.min_parcel);
        assert!(lens[1..].windows(2).all(|w| w[0] >= w[1]));
        // A short result is one parcel, even below the smallest size.
        let mut rising = 0;
        assert_eq!(cut(10, Growth::Falling, &L, &mut rising), vec![(0, 10)]);
        // A remainder smaller than the smallest parcel joins its neighbour.
        let c = cut(L.min_parcel * 3 + 5, Growth::Falling, &L, &mut rising);
        assert_eq!(
            c,
            vec![
                (0, L.min_parcel * 2 + 5),
                (L.min_parcel * 2 + 5, L.min_parcel * 3 + 5)
            ]
        );
    }

    #[test]
    fn repeated_products_reuse_their_schedule() {
        let a = product_schedule((300, 200, 100), 300, true, ALL_HOST);
        let b = product_schedule((300, 200, 100), 300, true, ALL_HOST);
        assert!(Arc::ptr_eq(&a, &b));
        let c = product_schedule((300, 200, 100), 128, true, ALL_HOST);
        assert_eq!(c.panels.len(), 3);
    }

    #[test]
    fn uploads_and_downloads_are_one_transfer() {
        let s = Schedule::upload(1 << 20);
        check_cover(&s.up);
        assert!(s.down.parcels.is_empty() && s.panels.is_empty());
        let s = Schedule::download(77);
        check_cover(&s.down);
        assert_eq!(s.down.parcels.len(), 1);
    }

    #[test]
    fn a_batch_moves_each_group_before_its_kernels() {
        let groups = [(0, 3), (3, 5), (5, 8)];
        // B per item: each group's A, then its B, then its kernels; its results alone down.
        let s = Schedule::batch(&groups, 6, BatchB::Each(10), 4);
        let whats: Vec<What> = s.up.transfers.iter().map(|t| t.what).collect();
        assert_eq!(
            whats,
            [
                What::A(0),
                What::BItems(0),
                What::A(1),
                What::BItems(1),
                What::A(2),
                What::BItems(2)
            ]
        );
        assert_eq!(s.panels, groups);
        for (g, &(z0, z1)) in groups.iter().enumerate() {
            assert_eq!(s.up.transfers[2 * g].len, (z1 - z0) * 6);
            assert_eq!(s.up.transfers[2 * g + 1].len, (z1 - z0) * 10);
            let last = s.up.parcels[s.panel_inputs[g] - 1].transfer;
            assert_eq!(s.up.transfers[last].what, What::BItems(g));
            assert_eq!(s.down.transfers[g].len, (z1 - z0) * 4);
            for d in s.panel_outputs[g].clone() {
                assert_eq!(s.down.parcels[d].transfer, g);
            }
        }
        check_cover(&s.up);
        check_cover(&s.down);
        // A shared B goes up once, first.
        let s = Schedule::batch(&groups, 6, BatchB::Shared(10), 4);
        let whats: Vec<What> = s.up.transfers.iter().map(|t| t.what).collect();
        assert_eq!(whats, [What::B, What::A(0), What::A(1), What::A(2)]);
        assert_eq!(s.up.transfers[0].len, 10);
        assert_eq!(
            s.up.transfers[s.up.parcels[s.panel_inputs[0] - 1].transfer].what,
            What::A(0)
        );
    }
}

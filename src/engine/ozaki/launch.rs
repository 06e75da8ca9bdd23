//! The launcher: the passes of kernels/ozaki.cu enqueued in order for one product (scale,
//! the guard's verdict where guarded, split, the INT8 GEMMs, the reconstruction).

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, CudaViewMut, DevicePtr, LaunchConfig};

use crate::device::context::Gpu;
use crate::element::{Dtype, Element};
use crate::engine::args::{check_dims, DevBuf, GemmArgs, Scratch};
use crate::engine::family::Family;
use crate::engine::table::{OZAKI_GEMM, OZAKI_GEMM_MMA, OZAKI_GUARD_ROWS_SMEM};
use crate::error::GpuDotError;
use crate::options::{Precision, MAX_MODULI};

use super::guard::guard_sample;
use super::passes::{
    early_candidate, enqueue_gemm, fail, split_config, workspace, Early, Gate, Gemm, GemmTail,
    GuardReport, KeptB, KeyB, OzError, Pairs, Rows, Run, SharedB, EA, EB, FLAGS, LA, LB, MA,
    MAX_CANDIDATES, MB, PA, PB, R, RESIDUES_PA, RESIDUES_PB, RESIDUES_R, SA, SB, SECTIONS,
};
use super::room::{provide, room};
use super::scale_passes::{scale, Scaling};
use super::scaling::moduli_for;
use super::scheme::{norm_bound, scaling_bits, Consts, MAX_K};
use super::verdict::{clear_flags, refuse_first, verdict, Before, GuardScale, Verdict};
use crate::engine::enqueue::{programmatic_on, Launch};

/// How an Ozaki launch ended.
pub(crate) struct Emulated {
    /// The precision it ran in (`Ozaki` with its count).
    pub(crate) precision: Precision,
    /// The guard's verdict, when the product was guarded.
    pub(crate) guard: Option<GuardReport>,
    /// A complex product read as reals that ran in the Karatsuba form.
    pub(crate) karatsuba: bool,
}

/// Enqueues `C = op(A) · op(B)` by Ozaki scheme II, with the workspace (and the Karatsuba form's
/// residues) in `bufs`, grown as needed, and returns the precision it ran in. Unguarded, it runs on
/// the first `moduli_for(..)` moduli. `guarded` (the default precision), it first runs the guard
/// (kernels/ozaki.cu, `ozaki_guard_*`) for the automatic count and up to three more, waits for its
/// verdict, and runs on the fewest moduli that every element passes at; where some element passes
/// at none, nothing more is enqueued and [`OzError::Guarded`] says so (the native kernels then run
/// the product). Where the split runs in double arithmetic, the guard's passes that read an operand
/// for its magnitudes also split it for the count that the early refusal's elements need (the
/// automatic one or the next), so that a product run at that count reads each operand once or
/// twice, not three times. With `shared`, the row panel of a product whose panels share op(B):
/// op(B)'s scaling and magnitudes, and its residues where the count is the same, are taken from the
/// panel before instead of done again, and kept for the next.
///
/// The steps: the [`plan`], then the workspace and what the panel before kept of op(B), and
/// on the device 1. the scales ([`Product::scale`]), 2. the guard's verdict
/// ([`Product::weigh`]), 3. the split ([`Product::split`]), 4. the INT8 GEMMs
/// ([`Product::gemms`]; in the Karatsuba form both, [`Product::karatsuba`]) and 5. the
/// reconstruction ([`Product::rebuild`]).
///
/// A complex product read as reals ([`GemmArgs::pairs`]) runs as the real product it is
/// (each column's parts scaled on their own) below the Karatsuba form's size, or where the
/// crate's `complex_paired` switch is off ([`complex_form`](super::complex_form)). From that
/// size up it is scaled as the real product is, with the shifts of a complex column's two parts
/// made one before the guard weighs them, and runs in the Karatsuba form ([`Pairs`]): split into
/// the three parts' panels, three INT8 GEMMs a modulus, and the rebuild of the same integers
/// (the real form with the same shifts, under the `complex_karatsuba` switch at any size, gives
/// the same bits). A paired product splits nothing early and keeps nothing of op(B) for the
/// next panel.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch<T: Element>(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    moduli: u8,
    guarded: bool,
    args: GemmArgs<'_, '_, T>,
    c: &mut CudaViewMut<'_, T>,
    bufs: &mut Scratch,
    mut shared: Option<&mut SharedB>,
) -> Result<Emulated, OzError> {
    let (m, k, n) = args.dims();
    let sm = gpu.kernel_sm();
    // A complex product's form, from the whole product's rows where this is a row panel.
    let whole = shared.as_deref().map_or(m, |s| s.rows.max(m));
    let (paired, karatsuba) = match args.pairs() && k % 2 == 0 && n % 2 == 0 {
        true => super::complex_form((whole, k, n)),
        false => (false, false),
    };
    let plan = plan::<T>(sm, moduli, guarded, (m, k, n), (paired, karatsuba))?;
    let entry = |entry: &str| {
        gpu.function(Family::Ozaki, entry).map_err(|e| match e {
            GpuDotError::Compile { .. } => OzError::Unavailable,
            e => OzError::Gpu(e),
        })
    };
    // The Karatsuba form's residues' buffer holds, before the verdict, the guard's int32 sums,
    // and is made ready for the first count's residues (any count chosen is at least it).
    let early = plan.pairs.map_or(0, |p| {
        let sums = if guarded { Pairs::sums_bytes(m, n) } else { 0 };
        sums.max(p.residues(plan.first, m, n).0)
    });
    provide(gpu, stream, bufs, plan.total, early)?;
    let Scratch { ws, residues } = bufs;
    let work = ws.as_ref().expect("provided above");
    let (base, bytes) = (work.addr(stream), work.bytes());
    let key = key_b(&plan, args, stream, (base, bytes));
    let mut sec = plan.at.map(|o| base + o as u64);
    if let (Some(_), true) = (&plan.pairs, guarded) {
        sec[R] = residues.as_ref().expect("provided above").addr(stream);
    }
    let kept = match plan.paired {
        false => shared.as_deref_mut().and_then(|s| s.take(&key)),
        true => None,
    };
    // Guarded, the guard's passes that read an operand for its magnitudes also split it (in
    // double arithmetic, where the split uses it) for the count the early refusal's elements
    // need, the first or the next, read on the device: the product runs at that count at
    // least, and on most inputs at no more, so that no split follows the verdict.
    let candidates = &plan.candidates;
    let first_consts = Consts::cached(plan.first);
    let next_consts = Consts::cached(candidates[early_candidate(candidates.len() - 1)]);
    let early = (guarded
        && !plan.paired
        && gpu.fast_fp64_split()
        && crate::device::overrides::early_split())
    .then_some(Early {
        first: &first_consts,
        next: &next_consts,
    });
    let run = Run {
        stream,
        entry: &entry,
        suffix: match T::DTYPE {
            Dtype::F64 => "d",
            Dtype::F32 => "s",
        },
        gemm: plan.gemm,
        tile_rows: plan.tile_rows,
        padded: plan.padded,
        dims: (m as i32, n as i32, k as i32),
        sec,
        programmatic: programmatic_on(sm),
    };
    let ops = operands(&run, &plan, args, early, kept.is_some());
    let product = Product {
        gpu,
        run: &run,
        ops: &ops,
        plan: &plan,
        first: &first_consts,
        early: early.is_some(),
        kept,
    };
    // 1. Scales (a complex column's two parts made one in the Karatsuba form).
    let refused_first = product.scale()?;
    if plan.paired {
        product.pair_shifts()?;
    }
    // The INT8 GEMM's entry (step 2 may enqueue it before the verdict).
    let gemm = entry(match plan.pairs.map_or(plan.gemm, |p| p.gemm) {
        Gemm::Wg { .. } => OZAKI_GEMM.0,
        Gemm::Mma => OZAKI_GEMM_MMA.0,
    })?;
    // 2. The guard's verdict, where guarded.
    let weighed = product.weigh(&gemm, refused_first)?;
    let chosen = product.chosen(weighed.chosen);
    let r = match &plan.pairs {
        None => {
            // 3. The residue panels.
            product.split(&chosen, weighed.split_for)?;
            // 4. The INT8 GEMM of every modulus.
            product.gemms(&gemm, &chosen, weighed.gemm_ran)?;
            run.sec[R]
        }
        Some(pairs) => product.karatsuba(pairs, &gemm, &chosen, residues)?,
    };
    // 5. The reconstruction.
    product.rebuild(args, c, &chosen, r)?;
    let count = chosen.count;
    if let (Some(s), false) = (shared, plan.paired) {
        s.keep(KeptB { key, split: count });
    }
    Ok(Emulated {
        precision: Precision::Ozaki {
            moduli: count as u8,
        },
        guard: weighed.report,
        karatsuba: plan.pairs.is_some(),
    })
}

/// What a product runs on, decided before anything is enqueued ([`plan`]).
struct Plan {
    guarded: bool,
    /// `(m, k, n)`.
    dims: (usize, usize, usize),
    /// The automatic count, and the counts weighed: it alone unguarded, else it and up to
    /// three more.
    first: usize,
    candidates: Vec<usize>,
    /// The scaling bits of op(A)'s rows at the automatic count (the unguarded scaling's).
    bits_a: i32,
    /// The INT8 GEMM, the rows of its panels' tiles (X's, Y's) and the panels' padded extents
    /// `(Mp, Np)`.
    gemm: Gemm,
    tile_rows: (usize, usize),
    padded: (usize, usize),
    /// k padded to 128, and the guard's sample of k.
    kp: usize,
    kg: usize,
    /// The guard's one pass's dynamic shared memory: a row's K elements rounded up to 16
    /// bytes, then Kgp.
    row_bytes: usize,
    /// A complex product read as reals: its columns' shifts paired, and, in the Karatsuba
    /// form, that form's products.
    paired: bool,
    pairs: Option<Pairs>,
    /// The workspace's bytes and its sections' offsets ([`workspace`]).
    total: usize,
    at: [usize; SECTIONS],
}

/// Step 0, the plan of an `m × k × n` product of element type `T` on a device of compute
/// capability `sm`: the counts it weighs, its GEMM and panels, the guard's sample of k and the
/// workspace; for a complex product read as reals (`paired`), in the Karatsuba form where
/// `karatsuba`; [`OzError::Unavailable`] where it cannot run this way here.
fn plan<T: Element>(
    sm: u32,
    moduli: u8,
    guarded: bool,
    (m, k, n): (usize, usize, usize),
    (paired, karatsuba): (bool, bool),
) -> Result<Plan, OzError> {
    if sm < 80 || k == 0 || k > MAX_K {
        return Err(OzError::Unavailable);
    }
    let first = moduli_for(T::DTYPE, moduli, k);
    // The counts weighed: the automatic one alone unguarded, else it and up to three more.
    let candidates: Vec<usize> = if guarded {
        (first..=(first + MAX_CANDIDATES - 1).min(MAX_MODULI)).collect()
    } else {
        vec![first]
    };
    let (bits_a, bits_b) = scaling_bits(first, k);
    if bits_a < 1 || bits_b < 1 {
        return Err(OzError::Unavailable);
    }
    let most = *candidates.last().expect("at least one count");
    let gemm_kind = Gemm::of(sm, m, n);
    let (tile_rows, (mp, np)) = gemm_kind.panels(m, n);
    let kp = k.next_multiple_of(128);
    // Padded extents past `int`: the native kernels, which need no padding, may still run it.
    check_dims(mp, kp, np).map_err(|_| OzError::Unavailable)?;
    let pairs = karatsuba.then(|| Pairs::of(sm, (m, k, n)));
    if let Some(p) = &pairs {
        check_dims(p.padded.0, p.kp, p.padded.1).map_err(|_| OzError::Unavailable)?;
    }
    // The guard's sample of k; the guard's scaling and magnitudes run as one pass for rows
    // along k's contiguous index, short enough to sit in shared memory.
    let kg = guard_sample(T::DTYPE, k);
    let kgp = kg.next_multiple_of(128);
    let (total, at) = workspace(
        most,
        candidates.len(),
        guarded,
        kgp,
        (m, k, n),
        gemm_kind,
        pairs.as_ref(),
    );
    let row_bytes = (k * std::mem::size_of::<T>()).next_multiple_of(16) + kgp;
    Ok(Plan {
        guarded,
        dims: (m, k, n),
        first,
        candidates,
        bits_a,
        gemm: gemm_kind,
        tile_rows,
        padded: (mp, np),
        kp,
        kg,
        row_bytes,
        paired,
        pairs,
        total,
        at,
    })
}

/// What op(B)'s sections depend on ([`KeyB`]) in the workspace at `base` of `bytes` bytes,
/// for the row panels that share op(B) ([`SharedB`]).
fn key_b<T>(
    plan: &Plan,
    args: GemmArgs<'_, '_, T>,
    stream: &Arc<CudaStream>,
    (base, bytes): (u64, usize),
) -> KeyB {
    let (_, k, n) = plan.dims;
    let (_, b_strides) = args.row_strides();
    let (_, b_buf) = args.bufs();
    KeyB {
        base,
        bytes,
        y: b_buf.device_ptr(stream).0,
        strides: b_strides,
        dims: (n, k),
        padded: plan.padded.1,
        tile: plan.tile_rows.1,
        counts: (plan.first, plan.candidates.len()),
        guarded: plan.guarded,
    }
}

/// op(A) (m × k) and op(B)ᵀ (n × k), as rows, with their sections of the workspace; op(B)'s
/// scaling `kept` by the panel before (and then not split early).
fn operands<'v, 'a, T: Element>(
    run: &Run<'_>,
    plan: &Plan,
    args: GemmArgs<'v, 'a, T>,
    early: Option<Early<'v>>,
    kept: bool,
) -> [Rows<'v, 'a, T>; 2] {
    let (m, _, n) = plan.dims;
    let ((mp, np), tile_rows) = (plan.padded, plan.tile_rows);
    let sec = &run.sec;
    let (a_strides, b_strides) = args.row_strides();
    let (a_buf, b_buf) = args.bufs();
    let one_pass = |(_, sk): (i64, i64)| {
        plan.guarded && sk == 1 && plan.row_bytes <= OZAKI_GUARD_ROWS_SMEM as usize
    };
    [
        Rows {
            rows: m as i32,
            padded: mp,
            tile: tile_rows.0 as i32,
            x: a_buf,
            strides: a_strides,
            shifts: sec[EA],
            panels: sec[PA],
            sigmas: sec[SA],
            norms: sec[LA],
            magnitudes: sec[MA],
            one_pass: one_pass(a_strides),
            early,
            kept: false,
        },
        Rows {
            rows: n as i32,
            padded: np,
            tile: tile_rows.1 as i32,
            x: b_buf,
            strides: b_strides,
            shifts: sec[EB],
            panels: sec[PB],
            sigmas: sec[SB],
            norms: sec[LB],
            magnitudes: sec[MB],
            one_pass: one_pass(b_strides),
            early: early.filter(|_| !kept),
            kept,
        },
    ]
}

/// One product's passes after its plan, as the launcher's steps read them: the device, the
/// [`Run`], the operands as rows, the plan, the first count's constants, whether the guard's
/// passes split early, and what the panel before kept of op(B).
struct Product<'p, T> {
    gpu: &'p Gpu,
    run: &'p Run<'p>,
    ops: &'p [Rows<'p, 'p, T>; 2],
    plan: &'p Plan,
    first: &'p Consts,
    early: bool,
    kept: Option<KeptB>,
}

/// What step 2 decided: the index of the chosen count among the candidates, the candidate the
/// early split split for, the guard's report (where guarded), and whether the GEMM enqueued
/// before the verdict ran.
struct Weighed {
    chosen: usize,
    split_for: usize,
    report: Option<GuardReport>,
    gemm_ran: bool,
}

/// The count the product runs at: its index among the candidates, the count, its constants,
/// and its layer of the E sections (op(A)'s shifts, op(B)'s).
struct Chosen {
    at: usize,
    count: usize,
    consts: Consts,
    shifts: (u64, u64),
}

impl<T: Element> Product<'_, T> {
    /// Step 1, the scales: each row's shift (for each candidate count when guarded, with the
    /// guard's magnitude shift and scaled 1-norm), but op(B)'s where kept. Returns whether the
    /// early refusal ran before the one passes ([`refuse_first`]).
    fn scale(&self) -> Result<bool, OzError> {
        let (run, ops, plan) = (self.run, self.ops, self.plan);
        let sec = &run.sec;
        let (_, k, _) = plan.dims;
        let (candidates, kg, row_bytes) = (&plan.candidates, plan.kg, plan.row_bytes);
        let scaling = if plan.guarded {
            Scaling::Guard {
                weighed: GuardScale::of(candidates, k),
                kg,
                row_bytes,
            }
        } else {
            Scaling::Plain {
                bits: plan.bits_a,
                bound: norm_bound(plan.first, k),
            }
        };
        // Where a one pass also splits its operand, the early refusal runs before it (after the
        // other operand's scaling), and it leaves at once where the refusal refused: hostile
        // inputs pay for no split.
        let gathered = ops.each_ref().map(|op| op.one_pass && op.early.is_some());
        let refused_first = match &scaling {
            Scaling::Guard {
                weighed, row_bytes, ..
            } if gathered.contains(&true) => {
                clear_flags(run)?;
                for (op, _) in ops.iter().zip(gathered).filter(|(op, g)| !op.kept && !g) {
                    scale(run, op, &scaling, self.first, None)?;
                }
                let sizes = (candidates.len(), kg);
                refuse_first(run, ops, sizes, weighed, gathered, *row_bytes)?;
                for (op, _) in ops.iter().zip(gathered).filter(|(_, g)| *g) {
                    scale(run, op, &scaling, self.first, Some(sec[FLAGS]))?;
                }
                true
            }
            _ => {
                for op in ops.iter().filter(|op| !op.kept) {
                    scale(run, op, &scaling, self.first, None)?;
                }
                false
            }
        };
        Ok(refused_first)
    }

    /// The gate of the GEMM enqueued before the verdict, where there is one. Where the guard's
    /// passes split both operands early (or op(B)'s panels are kept from the panel before,
    /// split for the first count or the next), the GEMM of the first count's layers is
    /// enqueued before the host reads the verdict, under a gate the device reads: it runs where
    /// the sure test passes every element and the lead is one whose residues the panels hold,
    /// and else leaves at once. The layers are the same at every count: a count's moduli begin
    /// with the first count's.
    fn gate(&self) -> Option<Gate> {
        let (guarded, candidates) = (self.plan.guarded, &self.plan.candidates);
        let gate_leads = match self.kept {
            _ if !(guarded && self.early && crate::device::overrides::gemm_before_verdict_on()) => {
                None
            }
            None => Some((0, early_candidate(candidates.len() - 1) as i32)),
            Some(k) => candidates[..=early_candidate(candidates.len() - 1)]
                .iter()
                .position(|&c| c == k.split)
                .map(|at| (at as i32, at as i32)),
        };
        gate_leads.map(|(lo, hi)| Gate {
            flags: self.run.sec[FLAGS],
            lo,
            hi,
        })
    }

    /// Step 2, the guard's verdict where guarded ([`verdict`]): the count every element passes
    /// at, or a refusal; and the candidate the early split split for. The GEMM of the first
    /// count's layers goes before it where there is a [`gate`](Self::gate).
    fn weigh(&self, gemm: &CudaFunction, refused_first: bool) -> Result<Weighed, OzError> {
        let plan = self.plan;
        let gate = self.gate();
        let before_gemm = || -> Result<(), OzError> {
            let gate = gate.expect("enqueued only under a gate");
            self.residue_gemm(gemm, (0, plan.first), self.first, gate)
        };
        let (chosen, split_for, report, gemm_ran) = if plan.guarded {
            let before = gate.map(|_| Before {
                gpu: self.gpu,
                enqueue: &before_gemm,
            });
            let Verdict {
                chosen,
                lead,
                flags,
                report,
            } = verdict(
                self.run,
                self.ops,
                (plan.candidates.len(), self.first),
                plan.kg,
                refused_first,
                before,
            )?;
            let ran = gate.is_some_and(|g| g.held(&flags));
            (chosen, early_candidate(lead), Some(report), ran)
        } else {
            (0, 0, None, false)
        };
        Ok(Weighed {
            chosen,
            split_for,
            report,
            gemm_ran,
        })
    }

    /// The candidate at `chosen`: its count, constants and layer of the row shifts.
    fn chosen(&self, chosen: usize) -> Chosen {
        let sec = &self.run.sec;
        let (mp, np) = self.plan.padded;
        let count = self.plan.candidates[chosen];
        let consts = Consts::cached(count);
        // The chosen count's shifts: layer `chosen` of the E sections.
        let (ea, eb) = (
            sec[EA] + (4 * chosen * mp) as u64,
            sec[EB] + (4 * chosen * np) as u64,
        );
        Chosen {
            at: chosen,
            count,
            consts,
            shifts: (ea, eb),
        }
    }

    /// Step 3, the residue panels of op(A) and op(B)ᵀ, but for those the guard's passes split
    /// for the count it chose (for the candidate `split_for`), and op(B)'s kept where the
    /// panel before split it for as many moduli.
    fn split(&self, chosen: &Chosen, split_for: usize) -> Result<(), OzError> {
        let run = self.run;
        let (_, _, ki) = run.dims;
        let kpi = self.plan.kp as i32;
        let (count, consts) = (chosen.count, &chosen.consts);
        let (ea, eb) = chosen.shifts;
        let chosen = chosen.at;
        let split = run.typed(if self.gpu.fast_fp64_split() {
            "ozaki_split"
        } else {
            "ozaki_split_int"
        })?;
        let b_split = self.kept.is_some_and(|k| k.split == count);
        let split_early = |op: &Rows<'_, '_, T>| op.early.is_some() && chosen == split_for;
        if self.early && chosen == split_for && split_for > 0 {
            crate::device::overrides::count_early_split_at_next();
        }
        let to_split = self
            .ops
            .iter()
            .zip([ea, eb])
            .zip([false, b_split])
            .filter(|((op, _), done)| !done && !split_early(op))
            .map(|(op_e, _)| op_e);
        for (op, e) in to_split {
            let cfg = split_config(self.plan.kp, op.padded);
            let rp = op.padded as i32;
            let mut builder = Launch::new(run.stream, &split, run.programmatic);
            op.push_rows(&mut builder, &ki);
            builder
                .arg(&e)
                .arg(&op.panels)
                .arg(&rp)
                .arg(&kpi)
                .arg(&op.tile)
                .arg(consts);
            // SAFETY: arguments match `ozaki_split[_int]_{d,s}(int R, int K, const T* X, i64
            // sr, i64 sk, const int* E, signed char* P, int Rp, int Kp, int TM, Consts c)`; X
            // as for the scaling, whose E (R ints, of the chosen layer) a launch before it on
            // this stream wrote; P is the workspace's section of count·Rp·Kp bytes, written
            // whole (Rp a multiple of the GEMM's tile rows TM: 192 or 256, or 128 for the
            // mma.sync GEMM, all multiples of 32); grid x = Kp/64, grid y ≤ Rp/32 with the
            // kernel looping over the rest, block (32, 8); `Consts` matches the kernel's struct
            // by value.
            unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki split"))?;
        }
        Ok(())
    }

    /// Step 4, the INT8 GEMM of every modulus of the chosen count, but for those the GEMM
    /// before the verdict ran (where `gemm_ran`).
    fn gemms(&self, gemm: &CudaFunction, chosen: &Chosen, gemm_ran: bool) -> Result<(), OzError> {
        let count = chosen.count;
        let z0 = if gemm_ran {
            crate::device::overrides::count_gemm_before_verdict_kept();
            self.plan.first
        } else {
            0
        };
        if count > z0 {
            self.residue_gemm(gemm, (z0, count - z0), &chosen.consts, Gate::NONE)?;
        }
        Ok(())
    }

    /// Enqueues the INT8 GEMM `gemm` of the residue panels (PA, PB) into R: `layers` layers
    /// from `z0` on, with the constants `consts` of the count that runs, under `gate`.
    fn residue_gemm(
        &self,
        gemm: &CudaFunction,
        (z0, layers): (usize, usize),
        consts: &Consts,
        gate: Gate,
    ) -> Result<(), OzError> {
        let (run, sec) = (self.run, &self.run.sec);
        let (mi, ni, _) = run.dims;
        let (mp, np) = run.padded;
        let kpi = self.plan.kp as i32;
        enqueue_gemm(
            (run.stream, run.programmatic),
            gemm,
            run.gemm,
            (mi, ni, mp, np, kpi, layers),
            (sec[PA], sec[PB]),
            GemmTail::Residues {
                r: sec[R],
                consts,
                z0: z0 as i32,
                gate,
            },
        )
    }

    /// Step 1's end in the Karatsuba form: each complex column's two rows of op(B)ᵀ (its real
    /// and imaginary products' columns, whose elements are the same magnitudes) take the
    /// smaller of their shifts, at every candidate count, before the guard weighs them.
    fn pair_shifts(&self) -> Result<(), OzError> {
        let run = self.run;
        let (_, _, n) = self.plan.dims;
        let (nc, layers) = ((n / 2) as i32, self.plan.candidates.len() as i32);
        let ld = self.plan.padded.1 as i32;
        let pair = (run.entry)("ozaki_pair_shifts")?;
        let cfg = LaunchConfig {
            grid_dim: (
                (n / 2 * layers as usize).div_ceil(256).min(65_535) as u32,
                1,
                1,
            ),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let e = run.sec[EB];
        let mut builder = Launch::new(run.stream, &pair, run.programmatic);
        builder.arg(&nc).arg(&layers).arg(&e).arg(&ld);
        // SAFETY: arguments match `ozaki_pair_shifts(int Nc, int layers, int* E, int ldE)`;
        // E is the workspace's EB section, `layers` layers of Np ≥ n = 2·Nc ints (ldE = Np)
        // that the scaling before it on this stream wrote; the kernel loops over every pair
        // whatever the grid.
        unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki shift pairing"))?;
        Ok(())
    }

    /// Steps 3 and 4 in the Karatsuba form, in the residues' buffer `slot` grown for the
    /// chosen count; returns the address of its products.
    fn karatsuba(
        &self,
        pairs: &Pairs,
        gemm: &CudaFunction,
        chosen: &Chosen,
        slot: &mut Option<DevBuf>,
    ) -> Result<u64, OzError> {
        let (m, _, n) = self.plan.dims;
        let stream = self.run.stream;
        let (total, at) = pairs.residues(chosen.count, m, n);
        let high_water = &self.gpu.high_water.residues;
        let base = room(self.gpu, stream, slot, total, high_water)?.addr(stream);
        let at = at.map(|o| base + o as u64);
        self.split_pairs(pairs, chosen, at)?;
        self.gemms_pairs(pairs, gemm, chosen, at)?;
        Ok(at[RESIDUES_R])
    }

    /// Step 3 in the Karatsuba form: the panels of the real parts, the imaginary parts and
    /// their sums, of op(A) (`m × k/2` complex) and of op(B)ᵀ (`n/2 × k/2` complex), for the
    /// chosen count, into the residues' buffer (its sections at `at`).
    fn split_pairs(&self, pairs: &Pairs, chosen: &Chosen, at: [u64; 3]) -> Result<(), OzError> {
        let run = self.run;
        let (m, k, n) = self.plan.dims;
        let (kc, kpi) = ((k / 2) as i32, pairs.kp as i32);
        let split = run.typed("ozaki_ksplit")?;
        let (ea, eb) = chosen.shifts;
        let [a, b] = self.ops;
        let ((asr, ask), (bsr, bsk)) = (a.strides, b.strides);
        // Each operand: its complex rows, its element strides (row, complex element, real to
        // imaginary part), its shifts and their stride, its panels' padded rows and tile rows.
        let each = [
            (a, m, (asr, 2 * ask, ask), ea, 1i32, 0),
            (b, n / 2, (2 * bsr, 2 * bsk, bsr), eb, 2i32, 1),
        ];
        let panels = [at[RESIDUES_PA], at[RESIDUES_PB]];
        for ((op, rows, (sr, sq, sd), e, es, side), panels) in each.iter().zip(&panels) {
            let (rows, padded) = (*rows as i32, [pairs.padded.0, pairs.padded.1][*side]);
            let (rp, tm) = (
                padded as i32,
                [pairs.tile_rows.0, pairs.tile_rows.1][*side] as i32,
            );
            let cfg = LaunchConfig {
                grid_dim: ((pairs.kp / 32) as u32, (padded / 32).min(65_535) as u32, 1),
                block_dim: (32, 8, 1),
                shared_mem_bytes: 0,
            };
            let mut builder = Launch::new(run.stream, &split, run.programmatic);
            builder
                .arg(&rows)
                .arg(&kc)
                .view(op.x)
                .arg(sr)
                .arg(sq)
                .arg(sd)
                .arg(e)
                .arg(es)
                .arg(panels)
                .arg(&rp)
                .arg(&kpi)
                .arg(&tm)
                .arg(&chosen.consts);
            // SAFETY: arguments match `ozaki_ksplit_{d,s}(int R, int K, const T* X, i64 sr,
            // i64 sq, i64 sd, const int* E, int es, signed char* P, int Rp, int Kp, int TM,
            // Consts c)`; X is the operand read as op(A) (`m × k` reals) or op(B)ᵀ (`n × k`),
            // whose complex element (r, q) has its parts at r·sr + q·sq and sd further, all
            // within its `m × k` or `n × k` elements for r < R and q < K = k/2; E (the chosen
            // layer, R·es ints) was written before it on this stream; P is the residues'
            // section of 3·count·Rp·Kp bytes (`Pairs::residues`), written whole, Rp a
            // multiple of the tile rows TM (multiples of 32), Kp of 128; grid x = Kp/32, grid
            // y ≤ Rp/32 with the kernel looping over the rest, block (32, 8).
            unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki split"))?;
        }
        Ok(())
    }

    /// Step 4 in the Karatsuba form: the three INT8 GEMMs of every modulus of the chosen
    /// count, `T₁ = Aᵣ'·Bᵣ'`, `T₂ = Aᵢ'·Bᵢ'` and `T₃ = (Aᵣ' + Aᵢ')·(Bᵣ' + Bᵢ')`, into the
    /// residues' R section one after another.
    fn gemms_pairs(
        &self,
        pairs: &Pairs,
        gemm: &CudaFunction,
        chosen: &Chosen,
        at: [u64; 3],
    ) -> Result<(), OzError> {
        let run = self.run;
        let (m, _, n) = self.plan.dims;
        let (mi, nci) = (m as i32, (n / 2) as i32);
        let (mp, np) = pairs.padded;
        let count = chosen.count;
        let (pa, pb, r) = pairs.part_bytes(count, m, n);
        for t in 0..3 {
            enqueue_gemm(
                (run.stream, run.programmatic),
                gemm,
                pairs.gemm,
                (mi, nci, mp, np, pairs.kp as i32, count),
                (at[RESIDUES_PA] + t * pa, at[RESIDUES_PB] + t * pb),
                GemmTail::Residues {
                    r: at[RESIDUES_R] + t * r,
                    consts: &chosen.consts,
                    z0: 0,
                    gate: Gate::NONE,
                },
            )?;
        }
        Ok(())
    }

    /// Step 5, the reconstruction into `c` from the residue products at `r`, for the fewest
    /// moduli that covers the chosen count (its limbs fit them).
    fn rebuild(
        &self,
        args: GemmArgs<'_, '_, T>,
        c: &mut CudaViewMut<'_, T>,
        chosen: &Chosen,
        r: u64,
    ) -> Result<(), OzError> {
        let run = self.run;
        let (m, _, n) = self.plan.dims;
        let (mi, ni, ki) = run.dims;
        let (count, consts) = (chosen.count, &chosen.consts);
        let (ea, eb) = chosen.shifts;
        let upto = match count {
            0..=8 => 8,
            9..=16 => 16,
            _ => 18,
        };
        let form = if self.plan.pairs.is_some() { "k" } else { "" };
        let rebuild = run.typed(&format!("ozaki_{form}rebuild{upto}"))?;
        let cfg = LaunchConfig {
            grid_dim: (n.div_ceil(4 * 256) as u32, m.min(65_535) as u32, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let ldc = args.ldc();
        let (a_strides, b_strides) = args.row_strides();
        let (a_buf, b_buf) = args.bufs();
        let ((asr, ask), (bsr, bsk)) = (a_strides, b_strides);
        let mut builder = Launch::new(run.stream, &rebuild, run.programmatic);
        builder
            .arg(&mi)
            .arg(&ni)
            .arg(&ki)
            .arg(&r)
            .arg(&ea)
            .arg(&eb)
            .view(&*c)
            .arg(&ldc)
            .view(a_buf)
            .arg(&asr)
            .arg(&ask)
            .view(b_buf)
            .arg(&bsr)
            .arg(&bsk)
            .arg(consts);
        // SAFETY: arguments match `ozaki_[k]rebuild{8,16,18}_{d,s}(int M, int N, int K, const
        // unsigned char* R, const int* EA, const int* EB, T* C, i64 ldc, const T* A, i64 asr,
        // i64 ask, const T* B, i64 bsr, i64 bsk, Consts c)`; R (count layers of M × N, or in
        // the Karatsuba form three products of count layers of M × N/2, N even), EA and EB
        // (the chosen count's layer) were written by the launches before it on this stream; C covers M × N at ldc
        // (checked when the arguments were made); A and B are the operands with the strides
        // of op(A) and op(B)ᵀ, read only for k < K; the kernel loops over all rows (grid y)
        // and quads of columns (grid x) whatever the grid.
        unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki reconstruction"))?;
        Ok(())
    }
}

//! The guard on the device (kernels/ozaki.cu, `ozaki_guard_*`): after the guard's scaling, its
//! early refusal, the magnitudes, the keys and the sure test's GEMM, and where that does not
//! pass every element, the magnitudes' product judged tile by tile; then its verdict: the
//! count of moduli the product runs on, or a refusal.

use std::sync::Arc;

use cudarc::driver::{sys, CudaStream, LaunchConfig};

use crate::device::context::{Gpu, SMALL_PINNED};
use crate::element::Element;
use crate::engine::args::grid_x;
use crate::engine::table::{
    OZAKI_GUARD_GEMM, OZAKI_GUARD_GEMM_MMA, OZAKI_SURE_GEMM, OZAKI_SURE_GEMM_MMA,
};
use crate::error::GpuDotError;

use super::guard::{unit_roundoff, GUARD};
use super::passes::{
    enqueue_gemm, fail, push_pair, read_back, split_config, Gemm, GemmTail, GuardReport, OzError,
    Rows, Run, EA, EB, FLAGS, FLAG_INTS, JUDGE_STRIPS, KEYS, LA, LB, MAX_CANDIDATES, NEED, R, SA,
    SB,
};
use super::scheme::{norm_bound, scaling_bits, Consts};
use crate::engine::enqueue::Launch;

/// The guard's arguments to the scaling pass (`oz::GuardScale`): the candidate counts'
/// scaling bits and norm bounds, `n` of them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct GuardScale {
    n: i32,
    bits: [i32; MAX_CANDIDATES],
    unused: i32,
    bound: [f64; MAX_CANDIDATES],
}

const _: () = assert!(std::mem::size_of::<GuardScale>() == 56);

impl GuardScale {
    /// The scaling bits and norm bounds of each of `counts` (at most [`MAX_CANDIDATES`]) for an
    /// inner dimension `k`.
    pub(super) fn of(counts: &[usize], k: usize) -> GuardScale {
        let mut g = GuardScale {
            n: counts.len() as i32,
            ..GuardScale::default()
        };
        for (i, &count) in counts.iter().enumerate() {
            g.bits[i] = scaling_bits(count, k).0;
            g.bound[i] = norm_bound(count, k);
        }
        g
    }
}

// SAFETY: `GuardScale` is `#[repr(C)]` plain data (integers and doubles), laid out as the
// kernels' `oz::GuardScale` (56 bytes, asserted on both sides).
unsafe impl cudarc::driver::DeviceRepr for GuardScale {}

/// The guard GEMM's epilogue arguments (`oz::Guard`): the rows' shifts for each candidate
/// count (`ea[c·lde_a + i]`), magnitude shifts, scaled 1-norms, and one int per output tile
/// (`need[tile_row·tiles_n + tile_col]`) that receives the largest, over the tile's elements,
/// of the index of the first candidate each passes at (`n`: none).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct GuardArgs {
    ea: u64,
    eb: u64,
    sa: u64,
    sb: u64,
    la: u64,
    lb: u64,
    need: u64,
    lde_a: i32,
    lde_b: i32,
    tiles_n: i32,
    k: i32,
    n: i32,
    unused: i32,
    gu: f64,
}

const _: () = assert!(std::mem::size_of::<GuardArgs>() == 88);

// SAFETY: `GuardArgs` is `#[repr(C)]` plain data (device addresses as integers, integers and
// a double), laid out as the kernels' `oz::Guard` (88 bytes, asserted on both sides); the
// addresses point into the workspace the launches that read them are ordered after.
unsafe impl cudarc::driver::DeviceRepr for GuardArgs {}

/// Threads of a block of the guard's one-pass scaling (`ROWS_NT` in kernels/ozaki.cu).
pub(super) const GUARD_ROWS_THREADS: u32 = 256;

/// Elements the early refusal tests, a block each.
const REFUSAL_ELEMENTS: u32 = 8;

/// The guard's arguments of a product of element type `T` weighing `counts` candidate
/// counts: its sections of the workspace, its tiles and `GUARD · u`.
fn guard_args<T: Element>(run: &Run<'_>, counts: usize) -> GuardArgs {
    let sec = &run.sec;
    let (_, _, ki) = run.dims;
    let ((_, tn), (mp, np)) = (run.tile_rows, run.padded);
    GuardArgs {
        ea: sec[EA],
        eb: sec[EB],
        sa: sec[SA],
        sb: sec[SB],
        la: sec[LA],
        lb: sec[LB],
        need: sec[NEED],
        lde_a: mp as i32,
        lde_b: np as i32,
        tiles_n: (np / tn) as i32,
        k: ki,
        n: counts as i32,
        unused: 0,
        gu: GUARD * unit_roundoff(T::DTYPE),
    }
}

/// Clears the guard's ints (the FLAGS section: the early refusal's, the sure test's, the
/// early refusal's lead and what settles it) on the product's stream, before the launches
/// that read and set them.
pub(super) fn clear_flags(run: &Run<'_>) -> Result<(), OzError> {
    let bytes = 4 * FLAG_INTS;
    // SAFETY: the workspace's FLAGS section holds `FLAG_INTS` ints, cleared on this stream
    // before the launches after it read and set them.
    unsafe {
        cudarc::driver::result::memset_d8_async(run.sec[FLAGS], 0, bytes, run.stream.cu_stream())
    }
    .map_err(fail("clearing the Ozaki guard's flags"))
}

/// The early refusal before the one-pass scalings of the operands `gathered` (rows along k,
/// split by that pass for the first count: `ozaki_guard_refuse_rows_*`): for those, each of
/// its blocks gathers the guard's data of a row itself, as the one pass will; the other
/// operands are scaled already (here, or by the panel before). Where it refuses, the one
/// passes (and with them the early split) and every pass after them leave without work. The
/// flags must be cleared before ([`clear_flags`]); `weighed` is the scaling's
/// [`GuardScale`], and `row_bytes` the one pass's dynamic shared memory.
pub(super) fn refuse_first<T: Element>(
    run: &Run<'_>,
    ops: &[Rows<'_, '_, T>; 2],
    (counts, kg): (usize, usize),
    weighed: &GuardScale,
    gathered: [bool; 2],
    row_bytes: usize,
) -> Result<(), OzError> {
    let (mi, ni, ki) = run.dims;
    let kgi = kg as i32;
    let refused = run.sec[FLAGS];
    let guard = guard_args::<T>(run, counts);
    let refuse = run.typed("ozaki_guard_refuse_rows")?;
    let cfg = LaunchConfig {
        grid_dim: (REFUSAL_ELEMENTS, 1, 1),
        block_dim: (GUARD_ROWS_THREADS, 1, 1),
        shared_mem_bytes: row_bytes as u32,
    };
    let (x_rows, y_rows) = (gathered[0] as i32, gathered[1] as i32);
    let mut builder = Launch::new(run.stream, &refuse, run.programmatic);
    builder.arg(&mi).arg(&ni).arg(&ki).arg(&kgi);
    push_pair(&mut builder, ops);
    builder
        .arg(&x_rows)
        .arg(&y_rows)
        .arg(&guard)
        .arg(weighed)
        .arg(&refused);
    // SAFETY: arguments match `ozaki_guard_refuse_rows_{d,s}(int M, int N, int K, int Kg,
    // const T* X, i64 xsr, i64 xsk, const T* Y, i64 ysr, i64 ysk, int x_rows, int y_rows,
    // Guard g, GuardScale gs, int* refused)`; X and Y are op(A) and op(B)ᵀ with their
    // strides, read for rows below M and N and k < K (whole rows, contiguous, only of an
    // operand gathered, whose sk is 1) or k < Kg = kg ≤ K; `GuardArgs` as for the judge,
    // whose sigmas, norms and shifts of an operand not gathered the scaling before it on
    // this stream (or the panel before) wrote; `GuardScale` the scaling's, matching the
    // kernel's struct by value; `refused` the FLAGS section's first int, cleared before;
    // blocks of `GUARD_ROWS_THREADS` (the kernel's ROWS_NT) with `row_bytes` of dynamic
    // shared memory (K elements rounded up to 16 bytes, then Kgp ≥ Kg bytes), within the
    // limit the module raised for the entry (`OZAKI_GUARD_ROWS_SMEM`).
    unsafe { builder.launch(cfg) }
        .map_err(fail("launching the Ozaki guard's early refusal from rows"))?;
    Ok(())
}

/// The guard's verdict on a product whose guard scaling has run (`ozaki_guard_scale_*` or
/// `ozaki_guard_rows_*` for each of `ops`, with `counts` candidate counts): its early refusal
/// (unless `refused_first` ran it, [`refuse_first`]), the magnitudes of the operands the one
/// pass did not take (over the first `kg` inner indices), the keys and the sure test's GEMM;
/// where that does not pass every element, the guard's GEMM and its judge. Returns the
/// [`Verdict`]; [`OzError::Guarded`] where some element passes at none (nothing more is
/// enqueued then). With `before`, the host enqueues its work after the sure test's GEMM and
/// before it waits for the sure test's flags (which come back into page-locked memory).
pub(super) fn verdict<T: Element>(
    run: &Run<'_>,
    ops: &[Rows<'_, '_, T>; 2],
    (counts, first): (usize, &Consts),
    kg: usize,
    refused_first: bool,
    before: Option<Before<'_>>,
) -> Result<Verdict, OzError> {
    let (stream, sec) = (run.stream, &run.sec);
    let ((tm, tn), (mp, np)) = (run.tile_rows, run.padded);
    let kgp = kg.next_multiple_of(128);
    let (kgi, kgpi) = (kg as i32, kgp as i32);
    // The early refusal's int, then the sure test's, then the early refusal's lead and what
    // settles it.
    let refused = sec[FLAGS];
    let unsure = refused + 4;
    let tiles = (mp / tm) * (np / tn);
    let need = sec[NEED];
    // The magnitudes' int32 product lies in the residues' section until the product's GEMM
    // writes them (it holds at least 4·m·n bytes: the most moduli weighed are at least 4); in
    // the Karatsuba form, at the start of the residues' own buffer, grown after the verdict.
    let sums = sec[R];
    let guard = guard_args::<T>(run, counts);
    if !refused_first {
        clear_flags(run)?;
        refuse(run, ops, kgi, &guard, refused)?;
    }
    // The magnitudes of the first `kg` inner indices, in panels `kgp` wide, of the
    // operands the one-pass scaling did not take, with their residues for the first count
    // where `early`.
    for op in ops.iter().filter(|op| !op.one_pass && !op.kept) {
        magnitudes(run, op, (kgi, kgpi), first, refused)?;
    }
    // The sure test: each row's key, then the magnitudes' product with each element tested
    // in the GEMM's epilogue against a sufficient condition of passing at the early refusal's
    // lead (the count its elements need, or the next where their spread says the product's
    // do). Where every element meets it, the lead is the verdict, and the guard's GEMM and
    // judge below do not run.
    let (kx, ky) = (sec[KEYS], sec[KEYS] + (8 * mp) as u64);
    keys(run, &guard, (kx, ky), refused)?;
    magnitudes_product(
        run,
        ops,
        kgpi,
        (OZAKI_SURE_GEMM, OZAKI_SURE_GEMM_MMA),
        GemmTail::Sure {
            keys: (kx, ky),
            unsure,
            refused,
        },
    )?;
    // The FLAGS section: `refused`, `unsure`, the lead and what settled it.
    let what = "reading the Ozaki guard's sure test";
    let flags = match before {
        Some(before) => read_back_around(stream, refused, before, what)?,
        None => {
            let mut flags = [0i32; FLAG_INTS];
            read_back(stream, &mut flags, refused, what)?;
            flags
        }
    };
    let lead = settled_lead(&flags, counts, tiles)?;
    if flags[1] == 0 {
        return Ok(Verdict {
            chosen: lead,
            lead,
            flags,
            report: GuardReport {
                tiles,
                failed: 0,
                skipped: false,
            },
        });
    }
    // Some element is not surely within: the magnitudes' product S, judged exactly.
    magnitudes_product(
        run,
        ops,
        kgpi,
        (OZAKI_GUARD_GEMM, OZAKI_GUARD_GEMM_MMA),
        GemmTail::Sums(sums, refused),
    )?;
    judge(run, &guard, tiles, sums, refused)?;
    let (chosen, report) = tiles_verdict(stream, need, tiles, counts)?;
    Ok(Verdict {
        chosen,
        lead,
        flags,
        report,
    })
}

/// The early refusal (`ozaki_guard_refuse_*`): an early verdict from a few elements' exact
/// magnitudes' sums over the first `kgi` inner indices, into the FLAGS section's `refused`.
fn refuse<T: Element>(
    run: &Run<'_>,
    ops: &[Rows<'_, '_, T>; 2],
    kgi: i32,
    guard: &GuardArgs,
    refused: u64,
) -> Result<(), OzError> {
    let (mi, ni, _) = run.dims;
    // An early verdict from a few elements' exact magnitudes' sums: where one fails at
    // every count, the product is refused at once (the magnitudes, the keys and the sure
    // test's GEMM then leave without work, and the host launches nothing more).
    let refuse = run.typed("ozaki_guard_refuse")?;
    let cfg = LaunchConfig {
        grid_dim: (REFUSAL_ELEMENTS, 1, 1),
        block_dim: (1024, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut builder = Launch::new(run.stream, &refuse, run.programmatic);
    builder.arg(&mi).arg(&ni).arg(&kgi);
    push_pair(&mut builder, ops);
    builder.arg(guard).arg(&refused);
    // SAFETY: arguments match `ozaki_guard_refuse_{d,s}(int M, int N, int Kg, const T* X, i64 xsr,
    // i64 xsk, const T* Y, i64 ysr, i64 ysk, Guard g, int* refused)`; X and Y are the operands with
    // the strides of op(A) and op(B)ᵀ, read for rows below M and N and k < Kg = kg ≤ k; `GuardArgs`
    // as for the judge (`judge`), whose sigmas, norms and shifts the scalings before it on this
    // stream wrote; `refused` the FLAGS section's first int, cleared before it (`clear_flags`);
    // blocks of 1024 threads, static shared memory only.
    unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki guard's early refusal"))?;
    Ok(())
}

/// The sure test's keys (`ozaki_guard_keys`): one of 8 bytes a row of X and of Y, at `kx`
/// and `ky`.
fn keys(
    run: &Run<'_>,
    guard: &GuardArgs,
    (kx, ky): (u64, u64),
    refused: u64,
) -> Result<(), OzError> {
    let (mi, ni, _) = run.dims;
    let (mp, np) = run.padded;
    let keys = (run.entry)("ozaki_guard_keys")?;
    let (mpi, npi) = (mp as i32, np as i32);
    let cfg = LaunchConfig {
        grid_dim: (grid_x((mp + np).div_ceil(256)).map_err(OzError::Gpu)?, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut builder = Launch::new(run.stream, &keys, run.programmatic);
    builder
        .arg(guard)
        .arg(&mi)
        .arg(&mpi)
        .arg(&ni)
        .arg(&npi)
        .arg(&kx)
        .arg(&ky)
        .arg(&refused);
    // SAFETY: arguments match `ozaki_guard_keys(Guard g, int M, int Mp, int N, int Np, Key*
    // KX, Key* KY, const int* refused)`; `GuardArgs` as for the early refusal (the rows'
    // sigmas, norms and shifts, for M and N rows, that the scaling before it on this
    // stream wrote); KX and KY the KEYS section's Mp and Np keys of 8 bytes, one thread
    // writing each; `refused` the FLAGS section, whose first int and third (the lead, below
    // g.n) the early refusal settled; blocks of 256 threads covering Mp + Np rows.
    unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki guard's keys"))?;
    Ok(())
}

/// The magnitudes' product (one layer over the guard's K, `kgpi` padded) by this device's
/// GEMM, the warpgroup one's entry or the mma.sync one's, ending in `tail`.
fn magnitudes_product<T>(
    run: &Run<'_>,
    [a, b]: &[Rows<'_, '_, T>; 2],
    kgpi: i32,
    entries: (&str, &str),
    tail: GemmTail<'_>,
) -> Result<(), OzError> {
    let (mi, ni, _) = run.dims;
    let (mp, np) = run.padded;
    let f = (run.entry)(match run.gemm {
        Gemm::Wg { .. } => entries.0,
        Gemm::Mma => entries.1,
    })?;
    let dims = (mi, ni, mp, np, kgpi, 1);
    enqueue_gemm(
        (run.stream, run.programmatic),
        &f,
        run.gemm,
        dims,
        (a.magnitudes, b.magnitudes),
        tail,
    )
}

/// The early refusal's lead, from the FLAGS section read back after the sure test; the
/// refusal of all `tiles` where the early refusal refused (or the lead is not one of the
/// `counts` candidates).
fn settled_lead(flags: &[i32; FLAG_INTS], counts: usize, tiles: usize) -> Result<usize, OzError> {
    if flags[0] != 0 {
        return Err(OzError::Guarded(GuardReport {
            tiles,
            failed: tiles,
            skipped: false,
        }));
    }
    // The kernels write a lead below `counts` only; any other value (which they never write)
    // sends the product to the native kernels rather than trust it.
    match usize::try_from(flags[2]) {
        Ok(lead) if lead < counts => Ok(lead),
        _ => {
            debug_assert!(false, "the early refusal's lead {} of {counts}", flags[2]);
            Err(OzError::Guarded(GuardReport {
                tiles,
                failed: tiles,
                skipped: false,
            }))
        }
    }
}

/// The guard's judge (`ozaki_guard_judge`): each strip of each of the `tiles` output tiles
/// of the magnitudes' product at `sums`, judged exactly into the NEED section.
fn judge(
    run: &Run<'_>,
    guard: &GuardArgs,
    tiles: usize,
    sums: u64,
    refused: u64,
) -> Result<(), OzError> {
    let (mi, ni, _) = run.dims;
    let (tm, tn) = run.tile_rows;
    let judge = (run.entry)("ozaki_guard_judge")?;
    let cfg = LaunchConfig {
        grid_dim: (grid_x(tiles).map_err(OzError::Gpu)?, JUDGE_STRIPS as u32, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let (tmi, tni) = (tm as i32, tn as i32);
    let mut builder = Launch::new(run.stream, &judge, run.programmatic);
    builder
        .arg(&mi)
        .arg(&ni)
        .arg(&sums)
        .arg(&tmi)
        .arg(&tni)
        .arg(guard)
        .arg(&refused);
    // SAFETY: arguments match `ozaki_guard_judge(int M, int N, const int* S, int tm, int tn,
    // Guard g, const int* refused)`; S is the M × N int32 product the guard GEMM before it on
    // this stream wrote (or, where `refused` — written by the early refusal before both — is
    // set, neither writes nor reads anything); `GuardArgs` matches the kernel's struct by
    // value, its addresses the workspace's sections that the guard's scaling wrote (shifts
    // for g.n candidates at ld Mp and Np, sigmas, norms) and `need`,
    // (Mp/tm)·(Np/tn)·JUDGE_STRIPS ints, one block per strip of a tile writing its own; 256
    // threads and a static shared array of 32 ints.
    unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki guard's judge"))?;
    Ok(())
}

/// The judge's verdicts read back from `need`, a tile's the worst of its strips': the index
/// of the fewest candidate count every tile passes at and the report, or the refusal where
/// some tile passes at none of the `counts`.
fn tiles_verdict(
    stream: &Arc<CudaStream>,
    need: u64,
    tiles: usize,
    counts: usize,
) -> Result<(usize, GuardReport), OzError> {
    // The section's `tiles · JUDGE_STRIPS` ints.
    let mut strips = vec![0i32; tiles * JUDGE_STRIPS];
    read_back(
        stream,
        &mut strips,
        need,
        "reading the Ozaki guard's verdicts",
    )?;
    // A tile's verdict: the worst of its strips'.
    let verdict: Vec<i32> = strips
        .chunks(JUDGE_STRIPS)
        .map(|s| s.iter().copied().max().unwrap_or(0))
        .collect();
    let failed = verdict.iter().filter(|&&v| v >= counts as i32).count();
    let report = GuardReport {
        tiles,
        failed,
        skipped: false,
    };
    if failed > 0 {
        return Err(OzError::Guarded(report));
    }
    let chosen = verdict.iter().copied().max().unwrap_or(0).max(0) as usize;
    Ok((chosen, report))
}

/// What the host enqueues between the sure test's GEMM and reading its flags back: the INT8
/// GEMM of the first count's layers under its [`Gate`](super::passes::Gate), so that the
/// device goes on while the host waits for the verdict.
pub(super) struct Before<'a> {
    pub(super) gpu: &'a Gpu,
    pub(super) enqueue: &'a dyn Fn() -> Result<(), OzError>,
}

/// The FLAGS section read back as `read_back` reads it, but through page-locked memory and an
/// event, with `before`'s work enqueued between the copy and the wait.
fn read_back_around(
    stream: &Arc<CudaStream>,
    src: u64,
    before: Before<'_>,
    what: &'static str,
) -> Result<[i32; FLAG_INTS], OzError> {
    const _: () = assert!(4 * FLAG_INTS <= SMALL_PINNED);
    let fail = |e| OzError::Gpu(GpuDotError::at(what)(e));
    let host = before.gpu.take_small_pinned().map_err(OzError::Gpu)?;
    // SAFETY: `host` is page-locked memory of SMALL_PINNED ≥ 4·FLAG_INTS bytes, aligned for
    // ints (cuMemHostAlloc's pages), this call's alone until it is given back below; the
    // event below completes the copy into it before the ints are read, the buffer given back
    // or this slice dropped; where waiting fails, the buffer is leaked rather than reused.
    let dst = unsafe { std::slice::from_raw_parts_mut(host.addr() as *mut i32, FLAG_INTS) };
    // SAFETY: `src` holds FLAG_INTS ints of the workspace written by launches before it on
    // this stream, and the copy is ordered after them; `dst` as above.
    let copied = unsafe { cudarc::driver::result::memcpy_dtoh_async(dst, src, stream.cu_stream()) }
        .map_err(fail)
        .and_then(|()| {
            stream
                .record_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
                .map_err(fail)
        });
    let event = match copied {
        Ok(event) => event,
        Err(e) => {
            // Nothing may still be copying into it: synchronise before keeping it.
            if stream.synchronize().is_ok() {
                before.gpu.give_small_pinned(host);
            } else {
                host.leak();
            }
            return Err(e);
        }
    };
    let enqueued = (before.enqueue)();
    if let Err(e) = event.synchronize() {
        host.leak();
        return Err(fail(e));
    }
    let mut flags = [0i32; FLAG_INTS];
    flags.copy_from_slice(dst);
    before.gpu.give_small_pinned(host);
    enqueued.map(|()| flags)
}

/// The guard's verdict on a product it lets run emulated.
pub(super) struct Verdict {
    /// The index of the fewest candidate count that every element passes at.
    pub(super) chosen: usize,
    /// The early refusal's lead (kernels/ozaki.cu, `settle_lead`): the latest candidate its
    /// elements first pass at, or a later one where their spread says the product needs it
    /// (the passes that split early split for
    /// [`early_candidate`](super::passes::early_candidate) of it).
    pub(super) lead: usize,
    /// The FLAGS section as the host read it after the sure test.
    pub(super) flags: [i32; FLAG_INTS],
    pub(super) report: GuardReport,
}

/// The guard's magnitudes of one operand, and from the same read of it its residues for the
/// early refusal's lead where `op.early` (the constants of the counts it may be) is given
/// (`ozaki_magnitudes_*`); nothing where the early refusal set `refused`. Without residues
/// the kernel does not read its constants, and `first` (the first count's) fills their place.
fn magnitudes<T: Element>(
    run: &Run<'_>,
    op: &Rows<'_, '_, T>,
    (kgi, kgpi): (i32, i32),
    first: &Consts,
    refused: u64,
) -> Result<(), OzError> {
    let (_, _, ki) = run.dims;
    let rp = op.padded as i32;
    let kp = (ki as usize).next_multiple_of(128);
    let kpi = kp as i32;
    // Without residues, the grid spans the magnitudes' panel (Kgp) only.
    let (residues, (c0, c1), grid_k) = match op.early {
        Some(e) => (op.panels, (e.first, e.next), kp),
        None => (0u64, (first, first), kgpi as usize),
    };
    let cfg = split_config(grid_k, op.padded);
    let function = run.typed("ozaki_magnitudes")?;
    let mut builder = Launch::new(run.stream, &function, run.programmatic);
    op.push_rows(&mut builder, &ki);
    builder
        .arg(&op.sigmas)
        .arg(&op.magnitudes)
        .arg(&kgi)
        .arg(&kgpi)
        .arg(&op.shifts)
        .arg(&residues)
        .arg(&rp)
        .arg(&kpi)
        .arg(&op.tile)
        .arg(&refused)
        .arg(c0)
        .arg(c1);
    // SAFETY: arguments match `ozaki_magnitudes_{d,s}(int R, int K, const T* X, i64 sr, i64
    // sk, const int* S, signed char* PM, int Kg, int Kgp, const int* E, signed char* P, int
    // Rp, int Kp, int TM, const int* refused, Consts c, Consts c1)`; X as for the scaling,
    // whose S and E (R ints each; E's layers at ld Rp, the first and the next candidate's
    // shifts) a launch before it on this stream wrote, read for k < K (k < Kg where P is
    // null); PM is the operand's magnitudes' section (Rp·Kgp bytes, MA or MB); P is null, or
    // its residue panels (c1.count·Rp·Kp bytes at least, c1.count ≥ c.count, Kp = K rounded
    // up to 128); both written whole in the tiles of the GEMM's rows TM; `refused` the FLAGS
    // section, whose ints the early refusal wrote; grid and block as for the split over Kp
    // where P is given, over Kgp where not (one block per 64 k and 32 rows); each `Consts`
    // matches the kernel's struct by value.
    unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki guard's magnitudes"))?;
    Ok(())
}

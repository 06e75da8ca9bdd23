//! Step 1 of the launcher, on the device: each operand's rows scaled (`ozaki_scale_*`), or
//! for the guard, for each candidate count (`ozaki_guard_scale_*`), or scaled with the guard's
//! magnitudes in one pass that may also split them (`ozaki_guard_rows_*`).

use cudarc::driver::LaunchConfig;

use crate::element::Element;
use crate::engine::args::grid_x;

use super::passes::{fail, OzError, Rows, Run};
use super::scheme::Consts;
use super::verdict::{GuardScale, GUARD_ROWS_THREADS};
use crate::engine::enqueue::Launch;

/// Rows a block of the scaling (`ozaki_scale_*`, `ozaki_guard_scale_*`) takes where rows run
/// along the contiguous index: eight rows of 32 threads each give the card four times the
/// blocks that 32 rows a block would, while each 32-byte sector a warp reads stays whole (8
/// f32 rows, or two sectors of 8 f64 ones).
const ALONG_R_ROWS: u32 = 8;

/// How a product's rows are scaled: by the automatic count's bits and norm bound alone, or
/// for the guard, for each candidate count, with the guard's sample of k and the shared
/// memory of the one pass.
pub(super) enum Scaling {
    Plain {
        bits: i32,
        bound: f64,
    },
    Guard {
        weighed: GuardScale,
        kg: usize,
        row_bytes: usize,
    },
}

/// Step 1 for one operand: its rows' shifts (`ozaki_scale_*`), or the guard's scaling
/// (`ozaki_guard_scale_*`), or both the guard's scaling and its magnitudes in one pass
/// (`ozaki_guard_rows_*`, [`guard_rows`]) where `op.one_pass`; that pass also splits it where
/// `op.early`, for the count the early refusal before it found its elements need (the first or
/// the next), and leaves at once where `refused` is given and that refusal set it. `first`,
/// the first count's constants, fills the place of those the pass does not read.
pub(super) fn scale<T: Element>(
    run: &Run<'_>,
    op: &Rows<'_, '_, T>,
    how: &Scaling,
    first: &Consts,
    refused: Option<u64>,
) -> Result<(), OzError> {
    let stream = run.stream;
    let (_, _, ki) = run.dims;
    let (rows, (sr, sk)) = (op.rows, op.strides);
    let (e, s, l) = (op.shifts, op.sigmas, op.norms);
    if let (
        true,
        Scaling::Guard {
            weighed,
            kg,
            row_bytes,
        },
    ) = (op.one_pass, how)
    {
        return guard_rows(run, op, (weighed, *kg, *row_bytes), first, refused);
    }
    // Rows along the contiguous index: one block of ALONG_R_ROWS × 32 threads per
    // ALONG_R_ROWS rows (each row's 32 threads in the kernel's order of sums); else a warp
    // per row, 32 rows a block.
    let along_r = sk != 1 && sr == 1;
    let rows_per_block = if along_r { ALONG_R_ROWS } else { 32 };
    let cfg = LaunchConfig {
        grid_dim: (
            grid_x((rows as usize).div_ceil(rows_per_block as usize)).map_err(OzError::Gpu)?,
            if along_r { 1 } else { 4 },
            1,
        ),
        block_dim: (rows_per_block, if along_r { 32 } else { 8 }, 1),
        shared_mem_bytes: 0,
    };
    match how {
        Scaling::Plain { bits, bound } => {
            let scale = run.typed("ozaki_scale")?;
            let mut builder = Launch::new(stream, &scale, run.programmatic);
            op.push_rows(&mut builder, &ki);
            builder.arg(bits).arg(bound).arg(&e);
            // SAFETY: arguments match `ozaki_scale_{d,s}(int R, int K, const T* X, i64
            // sr, i64 sk, int bits, double bound, int* E)` in order and type (T the
            // entry's element type by its suffix); element (r, k) of the R × K operand at
            // X[r·sr + k·sk] lies in the buffer (the operand covers its matrix, checked
            // when the arguments were made) and the kernel reads only r < R, k < K; E is
            // the workspace's section of Rp ≥ R ints; one block per ALONG_R_ROWS rows, of
            // (ALONG_R_ROWS, 32) threads and grid y 1 where rows run along the contiguous
            // index (the kernel's own test), else one per 32 rows, of (32, 8) and grid y 4;
            // static shared memory only (32 × 33 entries a part, ALONG_R_ROWS ≤ 32).
            unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki scaling"))?;
        }
        Scaling::Guard { weighed, .. } => {
            let guard_scale = run.typed("ozaki_guard_scale")?;
            let lde = op.padded as i32;
            let mut builder = Launch::new(stream, &guard_scale, run.programmatic);
            op.push_rows(&mut builder, &ki);
            builder.arg(weighed).arg(&e).arg(&lde).arg(&s).arg(&l);
            // SAFETY: arguments match `ozaki_guard_scale_{d,s}(int R, int K, const T* X,
            // i64 sr, i64 sk, GuardScale g, int* E, int ldE, int* S, double* L)`; X as for
            // `ozaki_scale_*`; E is the workspace's section of g.n · Rp ints (layer c at
            // E + c·ldE, ldE = Rp ≥ R), S and L its sections of Rp ints and Rp doubles,
            // written for r < R; `GuardScale` matches the kernel's struct by value; the
            // grid and block as for `ozaki_scale_*`.
            unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki guard's scaling"))?;
        }
    }
    Ok(())
}

/// The guard's one pass over one operand's rows (`ozaki_guard_rows_*`): its scaling for the
/// candidate counts `weighed` and its magnitudes over the guard's sample `kg` of k, with
/// `row_bytes` of shared memory; and its residues where `op.early` ([`scale`] says when).
fn guard_rows<T: Element>(
    run: &Run<'_>,
    op: &Rows<'_, '_, T>,
    (weighed, kg, row_bytes): (&GuardScale, usize, usize),
    first: &Consts,
    refused: Option<u64>,
) -> Result<(), OzError> {
    let stream = run.stream;
    let (_, _, ki) = run.dims;
    let (rows, rows_p, x, (sr, _)) = (op.rows, op.padded, op.x, op.strides);
    let (e, s, l) = (op.shifts, op.sigmas, op.norms);
    let rows_fn = run.typed("ozaki_guard_rows")?;
    let cfg = LaunchConfig {
        grid_dim: (grid_x(rows_p).map_err(OzError::Gpu)?, 1, 1),
        block_dim: (GUARD_ROWS_THREADS, 1, 1),
        shared_mem_bytes: row_bytes as u32,
    };
    let (lde, kgi, kgpi) = (rows_p as i32, kg as i32, kg.next_multiple_of(128) as i32);
    let (residues, (c0, c1)) = match op.early {
        Some(e) => (op.panels, (e.first, e.next)),
        None => (0u64, (first, first)),
    };
    let (rpi, kpi) = (rows_p as i32, (ki as usize).next_multiple_of(128) as i32);
    let refused_ptr = refused.unwrap_or(0);
    let mut builder = Launch::new(stream, &rows_fn, run.programmatic);
    builder
        .arg(&rows)
        .arg(&ki)
        .view(x)
        .arg(&sr)
        .arg(weighed)
        .arg(&e)
        .arg(&lde)
        .arg(&s)
        .arg(&l)
        .arg(&op.magnitudes)
        .arg(&kgi)
        .arg(&kgpi)
        .arg(&op.tile)
        .arg(&residues)
        .arg(&rpi)
        .arg(&kpi)
        .arg(c0)
        .arg(c1)
        .arg(&refused_ptr);
    // SAFETY: arguments match `ozaki_guard_rows_{d,s}(int R, int K, const T* X, i64 sr,
    // GuardScale g, int* E, int ldE, int* S, double* L, signed char* P, int Kg, int Kgp, int
    // TM, signed char* RP, int Rp, int Kp, Consts c, Consts c1, const int* refused)`; X as for
    // `ozaki_guard_scale_*` with sk = 1 (row r's K elements contiguous from X + r·sr; `scale`
    // takes this pass only where `op.one_pass`, which holds only for sk = 1); E, S and L as
    // for that kernel; P is the operand's magnitudes' section (Rp·Kgp bytes, MA or MB),
    // written whole in the tiles of TM rows, as by `ozaki_magnitudes_*`; RP is null, or the
    // operand's residue panels (c1.count·Rp·Kp bytes at least, c and c1 the first and the
    // next candidate count's constants, c1.count ≥ c.count, Kp = K rounded up to 128),
    // written whole as by `ozaki_split_*` with E's layer of the early refusal's lead; one
    // block of `GUARD_ROWS_THREADS` per row of Rp; `row_bytes` of dynamic shared memory (K
    // elements rounded up to 16 bytes, then Kgp), at most the limit the module raised for the
    // entry (`OZAKI_GUARD_ROWS_SMEM`); each `Consts` matches the kernel's struct by value;
    // `refused` is null (and RP then null too) or the FLAGS section, whose ints the early
    // refusal before it on this stream wrote.
    unsafe { builder.launch(cfg) }.map_err(fail("launching the Ozaki guard's one-pass scaling"))?;
    Ok(())
}

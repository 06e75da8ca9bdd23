//! The kernel table: every kernel the crate launches, with the only copy of its launch
//! constants (family, entry name, block, shared memory, tile, K granule, oldest architecture).
//!
//! A family is one file under `kernels/`, compiled by NVRTC as one module. Entry points are
//! `extern "C"`, so their names are stable; the table derives each name from the element type,
//! the operand layouts and, for the tiled GEMMs, the alignment and split-K variant:
//! `{stem}_{ll}[_u][_splitk|_batched]`, `ll` one of `nn`, `nt`, `tn`, `tt` (`t`: that operand
//! is read transposed, i.e. column-major), `_u` the entry that accepts any alignment.
//!
//! Each tiled row has a `// @launch` line in its source, next to `static_assert`s that tie the
//! line to the code; a unit test checks the table against those lines.

use crate::device::modules::{ModuleSpec, MODULE_SLOTS};
use crate::element::Dtype;
use crate::engine::family::Family;
use crate::options::{Kernel, Precision};

#[cfg(test)]
mod tests;

impl Family {
    /// Whether the family has entry points on a device of architecture `arch` (`sm_XY`): every
    /// family but the warpgroup one, which exists on `sm_90` alone (and the Ozaki one, from
    /// `sm_80` on).
    pub(crate) fn has_code_for(self, arch: &str) -> bool {
        let sm = arch
            .strip_prefix("sm_")
            .and_then(|d| d.parse::<u32>().ok())
            .unwrap_or(0);
        !self.entries(sm).is_empty()
    }

    /// Every entry point the module holds on a device of compute capability `sm`
    /// (`major·10 + minor`).
    pub(crate) fn entries(self, sm: u32) -> Vec<String> {
        let mut e = Vec::new();
        if self == Family::Ozaki && sm >= 80 {
            e.extend(OZAKI_ENTRIES.iter().map(|s| s.to_string()));
            e.push(OZAKI_GEMM_MMA.0.to_string());
            e.push(OZAKI_GUARD_GEMM_MMA.to_string());
            e.push(OZAKI_SURE_GEMM_MMA.to_string());
            if sm == 90 {
                e.push(OZAKI_GEMM.0.to_string());
                e.push(OZAKI_GUARD_GEMM.to_string());
                e.push(OZAKI_SURE_GEMM.to_string());
            }
        }
        if self == Family::SgemmWg && WG.iter().any(|r| r.sm == sm) {
            e.push(WgRow::PACK.to_string());
            e.extend(WG.iter().filter(|r| r.sm == sm).map(|r| r.stem.to_string()));
        }
        for row in TILES.iter().filter(|r| r.family == self && r.min_sm <= sm) {
            let alignments: &[&str] = if row.variants { &["", "_u"] } else { &[""] };
            for ll in LAYOUTS {
                for al in alignments {
                    for split in ["", "_splitk", "_batched"] {
                        e.push(format!("{}_{ll}{al}{split}", row.stem));
                    }
                }
            }
        }
        for row in SIMPLE.iter().filter(|r| r.family == self) {
            e.extend(LAYOUTS.iter().map(|ll| format!("{}_{ll}", row.stem)));
        }
        for dtype in Dtype::ALL.into_iter().filter(|&d| Family::fast(d) == self) {
            for gemv in [Gemv::Row, Gemv::Col] {
                e.extend(LAYOUTS.iter().map(|ll| gemv.entry(dtype, ll)));
            }
            e.extend(Aux::ALL.iter().map(|aux| aux.entry(dtype).to_string()));
        }
        e
    }

    /// Dynamic shared memory an entry point needs raised above the default 48 KiB limit.
    pub(crate) fn shared_bytes(entry: &str) -> Option<u32> {
        TILES
            .iter()
            .find(|r| {
                entry
                    .strip_prefix(r.stem)
                    .is_some_and(|rest| rest.starts_with('_') && rest.len() >= 3)
            })
            .map(|r| r.smem)
            .or_else(|| WG.iter().find(|r| r.stem == entry).map(|r| r.smem))
            .or_else(|| {
                [
                    OZAKI_GEMM,
                    OZAKI_GEMM_MMA,
                    (OZAKI_GUARD_GEMM, OZAKI_GEMM.1),
                    (OZAKI_GUARD_GEMM_MMA, OZAKI_GEMM_MMA.1),
                    (OZAKI_SURE_GEMM, OZAKI_GEMM.1),
                    (OZAKI_SURE_GEMM_MMA, OZAKI_GEMM_MMA.1),
                    ("ozaki_guard_rows_d", OZAKI_GUARD_ROWS_SMEM),
                    ("ozaki_guard_rows_s", OZAKI_GUARD_ROWS_SMEM),
                    ("ozaki_guard_refuse_rows_d", OZAKI_GUARD_ROWS_SMEM),
                    ("ozaki_guard_refuse_rows_s", OZAKI_GUARD_ROWS_SMEM),
                ]
                .into_iter()
                .find(|g| g.0 == entry)
                .map(|g| g.1)
            })
            .filter(|&smem| smem > 48 * 1024)
    }
}

impl ModuleSpec for Family {
    fn slot(self) -> usize {
        self.index()
    }
    fn name(self) -> &'static str {
        Family::name(self)
    }
    fn source(self) -> String {
        Family::source(self)
    }
    fn arch(self, arch: &str) -> String {
        Family::arch(self, arch)
    }
    fn entries(self, sm: u32) -> Vec<String> {
        Family::entries(self, sm)
    }
    fn shared_bytes(self, entry: &str) -> Option<u32> {
        Family::shared_bytes(entry)
    }
}

const _: () = assert!(
    Family::COUNT <= MODULE_SLOTS,
    "a context holds every family"
);

/// The Ozaki family's entry points on every architecture it serves (kernels/ozaki.cu), but
/// for its INT8 GEMMs.
const OZAKI_ENTRIES: [&str; 33] = [
    "ozaki_guard_judge",
    "ozaki_guard_keys",
    "ozaki_guard_refuse_d",
    "ozaki_guard_refuse_s",
    "ozaki_guard_refuse_rows_d",
    "ozaki_guard_refuse_rows_s",
    "ozaki_guard_rows_d",
    "ozaki_guard_rows_s",
    "ozaki_scale_d",
    "ozaki_scale_s",
    "ozaki_guard_scale_d",
    "ozaki_guard_scale_s",
    "ozaki_magnitudes_d",
    "ozaki_magnitudes_s",
    "ozaki_split_d",
    "ozaki_split_s",
    "ozaki_split_int_d",
    "ozaki_split_int_s",
    "ozaki_rebuild8_d",
    "ozaki_rebuild8_s",
    "ozaki_rebuild16_d",
    "ozaki_rebuild16_s",
    "ozaki_rebuild18_d",
    "ozaki_rebuild18_s",
    "ozaki_pair_shifts",
    "ozaki_ksplit_d",
    "ozaki_ksplit_s",
    "ozaki_krebuild8_d",
    "ozaki_krebuild8_s",
    "ozaki_krebuild16_d",
    "ozaki_krebuild16_s",
    "ozaki_krebuild18_d",
    "ozaki_krebuild18_s",
];

/// The Ozaki guard's INT8 GEMM (the magnitudes' product, judged tile by tile), with the
/// shared memory and tiles of [`OZAKI_GEMM`].
pub(crate) const OZAKI_GUARD_GEMM: &str = "ozaki_guard_gemm";
/// … and on mma.sync, with those of [`OZAKI_GEMM_MMA`].
pub(crate) const OZAKI_GUARD_GEMM_MMA: &str = "ozaki_guard_gemm_mma";
/// The guard's sure test: the same product, each element tested in the epilogue against a
/// sufficient condition of passing at the first count (no S written), with the shared
/// memory and tiles of [`OZAKI_GEMM`] …
pub(crate) const OZAKI_SURE_GEMM: &str = "ozaki_guard_sure_gemm";
/// … and on mma.sync, with those of [`OZAKI_GEMM_MMA`].
pub(crate) const OZAKI_SURE_GEMM_MMA: &str = "ozaki_guard_sure_gemm_mma";

/// The most dynamic shared memory the guard's one-pass scaling and magnitudes
/// (`ozaki_guard_rows_*`) may take: a row of k elements and up to k bytes of its magnitudes,
/// so rows of about 10,900 `f64` or 19,600 `f32` elements (96 KiB, within every sm_80-on
/// device's limit); longer rows take the two passes.
pub(crate) const OZAKI_GUARD_ROWS_SMEM: u32 = 96 * 1024;

/// The Ozaki INT8 GEMM and its dynamic shared memory (its `// @launch` line).
pub(crate) const OZAKI_GEMM: (&str, u32) = ("ozaki_gemm", 230_464);
/// … its output tile (rows, columns) and threads.
pub(crate) const OZAKI_GEMM_TILE: ((usize, usize), u32) = ((192, 256), 384);
/// The Ozaki INT8 GEMM on mma.sync (sm_80 on) and its dynamic shared memory.
pub(crate) const OZAKI_GEMM_MMA: (&str, u32) = ("ozaki_gemm_mma", 98_432);
/// … its output tile (rows, columns) and threads.
pub(crate) const OZAKI_GEMM_MMA_TILE: ((usize, usize), u32) = ((128, 128), 256);

const LAYOUTS: [&str; 4] = ["nn", "nt", "tn", "tt"];

/// The suffix naming an operand layout pair.
pub(crate) fn layout_suffix(trans_a: bool, trans_b: bool) -> &'static str {
    LAYOUTS[(trans_a as usize) * 2 + trans_b as usize]
}

/// A tile configuration of the register-blocked kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TileConfig {
    /// The large output tile (64 × 128 for `f32` in FP32, 128 × 64 for `f64`), for products
    /// that make enough of them to fill the device.
    Big,
    /// The small output tile (64 × 64), for shapes that make few big tiles.
    Small,
}

impl TileConfig {
    /// Both configurations, big first.
    pub const ALL: [TileConfig; 2] = [TileConfig::Big, TileConfig::Small];

    /// The kernel name the crate gives it (`Kernel::Reg128`, `Kernel::Reg64`).
    pub fn name(self) -> &'static str {
        match self {
            TileConfig::Big => "reg128",
            TileConfig::Small => "reg64",
        }
    }

    /// Output rows and columns one block computes, for `dtype` on the newest devices.
    pub fn tile(self, dtype: Dtype) -> (usize, usize) {
        TileRow::of(dtype, Precision::Native, self, u32::MAX).tile
    }
}

/// A tiled GEMM entry group: one row of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TileRow {
    pub(crate) family: Family,
    pub(crate) dtype: Dtype,
    /// How its multiplications run (`Native` for every f64 row: FP64 throughout).
    pub(crate) precision: Precision,
    /// The configuration it serves (`None`: the fallback serving both on old devices).
    pub(crate) config: Option<TileConfig>,
    /// Entry names start `{stem}_`.
    pub(crate) stem: &'static str,
    /// Output rows × columns per block; the grid has one block per tile.
    pub(crate) tile: (usize, usize),
    /// Threads per block (1-D).
    pub(crate) threads: u32,
    /// Dynamic shared memory per block, in bytes.
    pub(crate) smem: u32,
    /// The kernel's K tile: split-K ranges are multiples of it.
    pub(crate) bk: usize,
    /// The oldest compute capability that has the entries (`major·10 + minor`).
    pub(crate) min_sm: u32,
    /// Whether it has 16-byte-load entries beside the `_u` ones (else its entries take any
    /// alignment and carry no `_u`).
    pub(crate) variants: bool,
    /// Unsplit products with K below this run the `_splitk` entry as one split straight into
    /// C (0: never). Set where the unsplit entry's main loop is built for long K only.
    pub(crate) short_k: usize,
}

/// Every tiled GEMM. Checked against the `// @launch` lines of the sources by a unit test.
pub(crate) const TILES: [TileRow; 9] = [
    TileRow {
        family: Family::Sgemm,
        dtype: Dtype::F32,
        precision: Precision::Native,
        config: Some(TileConfig::Big),
        stem: "sgemm_fast_64x128",
        tile: (64, 128),
        threads: 128,
        smem: 51_200,
        bk: 16,
        min_sm: 0,
        variants: true,
        short_k: 0,
    },
    TileRow {
        family: Family::Sgemm,
        dtype: Dtype::F32,
        precision: Precision::Native,
        config: Some(TileConfig::Small),
        stem: "sgemm_fast_64x64",
        tile: (64, 64),
        threads: 64,
        smem: 34_816,
        bk: 16,
        min_sm: 0,
        variants: true,
        short_k: 0,
    },
    TileRow {
        family: Family::Dgemm,
        dtype: Dtype::F64,
        precision: Precision::Native,
        config: Some(TileConfig::Big),
        stem: "dgemm_tc_128x64",
        tile: (128, 64),
        threads: 128,
        smem: 92_160,
        bk: 16,
        min_sm: 80,
        variants: true,
        short_k: 128,
    },
    TileRow {
        family: Family::Dgemm,
        dtype: Dtype::F64,
        precision: Precision::Native,
        config: Some(TileConfig::Small),
        stem: "dgemm_tc_64x64",
        tile: (64, 64),
        threads: 128,
        smem: 61_440,
        bk: 16,
        min_sm: 80,
        variants: true,
        short_k: 0,
    },
    TileRow {
        family: Family::Dgemm,
        dtype: Dtype::F64,
        precision: Precision::Native,
        config: None,
        stem: "dgemm_simt",
        tile: (64, 64),
        threads: 256,
        smem: 16_640,
        bk: 16,
        min_sm: 0,
        variants: false,
        short_k: 0,
    },
    TileRow {
        family: Family::SgemmTf32x3,
        dtype: Dtype::F32,
        precision: Precision::Tf32x3,
        config: Some(TileConfig::Big),
        stem: "sgemm_tf32x3_128x128",
        tile: (128, 128),
        threads: 256,
        smem: 110_592,
        bk: 32,
        min_sm: 80,
        variants: true,
        short_k: 0,
    },
    TileRow {
        family: Family::SgemmTf32x3,
        dtype: Dtype::F32,
        precision: Precision::Tf32x3,
        config: Some(TileConfig::Small),
        stem: "sgemm_tf32x3_64x64",
        tile: (64, 64),
        threads: 128,
        smem: 55_296,
        bk: 32,
        min_sm: 80,
        variants: true,
        short_k: 0,
    },
    TileRow {
        family: Family::SgemmTf32,
        dtype: Dtype::F32,
        precision: Precision::Tf32,
        config: Some(TileConfig::Big),
        stem: "sgemm_tf32_128x128",
        tile: (128, 128),
        threads: 256,
        smem: 110_592,
        bk: 32,
        min_sm: 80,
        variants: true,
        short_k: 0,
    },
    TileRow {
        family: Family::SgemmTf32,
        dtype: Dtype::F32,
        precision: Precision::Tf32,
        config: Some(TileConfig::Small),
        stem: "sgemm_tf32_64x64",
        tile: (64, 64),
        threads: 128,
        smem: 55_296,
        bk: 32,
        min_sm: 80,
        variants: true,
        short_k: 0,
    },
];

impl TileRow {
    /// The row that runs `config` for `dtype` in `precision` on a device of compute
    /// capability `sm`: the configuration's own, else (a device without the tensor cores it
    /// needs, or `f64`, which has only FP64) its FP32 row, else the fallback where the device
    /// lacks that. The row's `precision` is what runs.
    pub(crate) fn of(
        dtype: Dtype,
        precision: Precision,
        config: TileConfig,
        sm: u32,
    ) -> &'static TileRow {
        let find = |p: Precision| {
            TILES.iter().find(|r| {
                r.dtype == dtype && r.precision == p && r.config == Some(config) && r.min_sm <= sm
            })
        };
        find(precision)
            .or_else(|| find(Precision::Native))
            .or_else(|| {
                TILES
                    .iter()
                    .find(|r| r.dtype == dtype && r.config.is_none() && r.min_sm <= sm)
            })
            .expect("every element type has a tiled kernel for every device")
    }

    /// The entry for operand layouts, alignment and split-K.
    pub(crate) fn entry(&self, trans: (bool, bool), aligned: bool, split: bool) -> String {
        format!(
            "{}_{}{}{}",
            self.stem,
            layout_suffix(trans.0, trans.1),
            if aligned || !self.variants { "" } else { "_u" },
            if split { "_splitk" } else { "" }
        )
    }

    /// The batched entry for operand layouts and alignment: the unsplit entry with batch
    /// strides (`GD_BATCH_PARAMS` in kernels/common.cuh) and one grid layer per item.
    pub(crate) fn batched_entry(&self, trans: (bool, bool), aligned: bool) -> String {
        format!("{}_batched", self.entry(trans, aligned, false))
    }

    /// Output tiles of an `m × n` product.
    pub(crate) fn tiles(&self, m: usize, n: usize) -> usize {
        m.div_ceil(self.tile.0) * n.div_ceil(self.tile.1)
    }
}

/// A warpgroup SGEMM of kernels/sgemm_wg.cu, with split-K (`kt_per_split` K tiles a layer)
/// in the one entry, on the one architecture it is compiled for. The big configuration of its
/// precision: `C = PA · PBᵀ` from K-major panels of op(A) and op(B)ᵀ that [`WgRow::PACK`]
/// makes first (any layout and alignment on input). The small one (`direct`): the product
/// straight from the operands, either way round (`C` or `Cᵀ = op(B)ᵀ op(A)ᵀ`), no panels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WgRow {
    pub(crate) precision: Precision,
    /// The entry's name.
    pub(crate) stem: &'static str,
    pub(crate) tile: (usize, usize),
    pub(crate) threads: u32,
    pub(crate) smem: u32,
    /// The K tile, and the granule of the panels' K extent.
    pub(crate) bk: usize,
    /// The one compute capability it runs on (`sm_90a` code runs on 9.0 only).
    pub(crate) sm: u32,
    /// Reads the operands as they are (no panels).
    pub(crate) direct: bool,
}

/// The warpgroup SGEMMs. Checked against the `// @launch` lines of kernels/sgemm_wg.cu.
pub(crate) const WG: [WgRow; 4] = [
    WgRow {
        precision: Precision::Tf32x3,
        stem: "sgemm_wg_tf32x3_128x128",
        tile: (128, 128),
        threads: 256,
        smem: 197_632,
        bk: 32,
        sm: 90,
        direct: false,
    },
    WgRow {
        precision: Precision::Tf32,
        stem: "sgemm_wg_tf32_128x256",
        tile: (128, 256),
        threads: 256,
        smem: 197_632,
        bk: 32,
        sm: 90,
        direct: false,
    },
    WgRow {
        precision: Precision::Tf32x3,
        stem: "sgemm_wg_tf32x3_128x64",
        tile: (128, 64),
        threads: 256,
        smem: 230_400,
        bk: 32,
        sm: 90,
        direct: true,
    },
    WgRow {
        precision: Precision::Tf32,
        stem: "sgemm_wg_tf32_128x64",
        tile: (128, 64),
        threads: 256,
        smem: 214_016,
        bk: 32,
        sm: 90,
        direct: true,
    },
];

impl WgRow {
    /// The pack kernel: block (32, 8), one block column per 32 panel columns (K).
    pub(crate) const PACK: &'static str = "sgemm_wg_pack";

    /// The row that runs `config` for `dtype` in `precision` on a device of compute
    /// capability `sm`, if any: f32 products in 3xTF32 or TF32 on its architecture, the big
    /// configuration from panels, the small one direct.
    pub(crate) fn of(
        dtype: Dtype,
        precision: Precision,
        config: TileConfig,
        sm: u32,
    ) -> Option<&'static WgRow> {
        if dtype != Dtype::F32 {
            return None;
        }
        let direct = config == TileConfig::Small;
        WG.iter()
            .find(|r| r.precision == precision && r.sm == sm && r.direct == direct)
    }

    /// Output tiles of an `m × n` product (a direct row: the fewer of its two ways round).
    pub(crate) fn tiles(&self, m: usize, n: usize) -> usize {
        let tiles = |m: usize, n: usize| m.div_ceil(self.tile.0) * n.div_ceil(self.tile.1);
        if self.direct {
            tiles(m, n).min(tiles(n, m))
        } else {
            tiles(m, n)
        }
    }

    /// Whether a direct row computes an `m × n` product as `Cᵀ` (`n × m`, from op(B)ᵀ and
    /// op(A)ᵀ): when that makes fewer tiles, as for few rows and many columns.
    pub(crate) fn transposed(&self, m: usize, n: usize) -> bool {
        let tiles = |m: usize, n: usize| m.div_ceil(self.tile.0) * n.div_ceil(self.tile.1);
        self.direct && tiles(n, m) < tiles(m, n)
    }

    /// Floats of the panels of an `m × k × n` product: op(A) as `Mp × Kp`, op(B)ᵀ as
    /// `Np × Kp` (M and N rounded up to the tile, K to the K tile), twice over for 3xTF32
    /// (big and small parts); and `(Mp, Np, Kp)`.
    pub(crate) fn panels(&self, m: usize, k: usize, n: usize) -> (usize, (usize, usize, usize)) {
        let (mp, np) = (
            m.next_multiple_of(self.tile.0),
            n.next_multiple_of(self.tile.1),
        );
        let kp = k.next_multiple_of(self.bk);
        let parts = if self.precision == Precision::Tf32x3 {
            2
        } else {
            1
        };
        (parts * (mp + np) * kp, (mp, np, kp))
    }
}

/// A one-output-per-thread kernel: one row per kernel and element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SimpleRow {
    pub(crate) family: Family,
    pub(crate) dtype: Dtype,
    pub(crate) kernel: Kernel,
    pub(crate) stem: &'static str,
    /// Threads per block along x (columns of C) and y (rows).
    pub(crate) block: (u32, u32),
}

pub(crate) const SIMPLE: [SimpleRow; 6] = [
    SimpleRow {
        family: Family::Naive,
        dtype: Dtype::F32,
        kernel: Kernel::Naive,
        stem: "sgemm_naive",
        block: (16, 16),
    },
    SimpleRow {
        family: Family::Naive,
        dtype: Dtype::F64,
        kernel: Kernel::Naive,
        stem: "dgemm_naive",
        block: (16, 16),
    },
    SimpleRow {
        family: Family::Tiled,
        dtype: Dtype::F32,
        kernel: Kernel::Tiled16,
        stem: "sgemm_tiled_16",
        block: (16, 16),
    },
    SimpleRow {
        family: Family::Tiled,
        dtype: Dtype::F64,
        kernel: Kernel::Tiled16,
        stem: "dgemm_tiled_16",
        block: (16, 16),
    },
    SimpleRow {
        family: Family::Tiled,
        dtype: Dtype::F32,
        kernel: Kernel::Tiled32,
        stem: "sgemm_tiled_32",
        block: (32, 32),
    },
    SimpleRow {
        family: Family::Tiled,
        dtype: Dtype::F64,
        kernel: Kernel::Tiled32,
        stem: "dgemm_tiled_32",
        block: (32, 32),
    },
];

impl SimpleRow {
    /// The row of a one-output-per-thread kernel; `None` for the register-blocked kernels and
    /// `Auto`, which run by plan.
    pub(crate) fn of(dtype: Dtype, kernel: Kernel) -> Option<&'static SimpleRow> {
        SIMPLE
            .iter()
            .find(|r| r.dtype == dtype && r.kernel == kernel)
    }

    pub(crate) fn entry(&self, trans: (bool, bool)) -> String {
        format!("{}_{}", self.stem, layout_suffix(trans.0, trans.1))
    }
}

/// The GEMV kernels of the fast families: 256 threads a block, no shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gemv {
    /// `m == 1`: a row vector times a matrix.
    Row,
    /// `n == 1`: a matrix times a column vector.
    Col,
}

impl Gemv {
    pub(crate) const THREADS: u32 = 256;

    pub(crate) fn entry(self, dtype: Dtype, ll: &str) -> String {
        let which = match self {
            Gemv::Row => "m1",
            Gemv::Col => "n1",
        };
        format!("{}gemv_{which}_{ll}", dtype.letter())
    }

    /// Blocks for `outputs` results: a block covers 16 outputs when the matrix is read along
    /// them (its rows are contiguous along the outputs) and 8 when it is read across.
    pub(crate) fn blocks(self, outputs: usize, trans: (bool, bool)) -> usize {
        let along = match self {
            Gemv::Row => !trans.1,
            Gemv::Col => trans.0,
        };
        outputs.div_ceil(if along { 16 } else { 8 })
    }
}

/// The element-wise kernels of the fast families: 256 threads a block, grid-stride.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Aux {
    SplitKReduce,
    Axpby,
    Relu,
    ReluBackward,
    /// A complex matrix read with any strides, as C-order reals (`complex/device.rs`).
    ComplexGather,
    /// A complex matrix as the `2k × 2n` reals of the stacked form's right operand.
    ComplexExpand,
    /// `C = alpha·P + beta·C` over complex elements.
    ComplexAxpby,
}

impl Aux {
    const ALL: [Aux; 7] = [
        Aux::SplitKReduce,
        Aux::Axpby,
        Aux::Relu,
        Aux::ReluBackward,
        Aux::ComplexGather,
        Aux::ComplexExpand,
        Aux::ComplexAxpby,
    ];

    pub(crate) fn entry(self, dtype: Dtype) -> &'static str {
        match (self, dtype) {
            (Aux::SplitKReduce, Dtype::F32) => "sgemm_splitk_reduce",
            (Aux::SplitKReduce, Dtype::F64) => "dgemm_splitk_reduce",
            (Aux::Axpby, Dtype::F32) => "sgemm_axpby",
            (Aux::Axpby, Dtype::F64) => "dgemm_axpby",
            (Aux::Relu, Dtype::F32) => "elem_relu",
            (Aux::Relu, Dtype::F64) => "delem_relu",
            (Aux::ReluBackward, Dtype::F32) => "elem_relu_backward",
            (Aux::ReluBackward, Dtype::F64) => "delem_relu_backward",
            (Aux::ComplexGather, Dtype::F32) => "elem_complex_gather",
            (Aux::ComplexGather, Dtype::F64) => "delem_complex_gather",
            (Aux::ComplexExpand, Dtype::F32) => "elem_complex_expand",
            (Aux::ComplexExpand, Dtype::F64) => "delem_complex_expand",
            (Aux::ComplexAxpby, Dtype::F32) => "elem_complex_axpby",
            (Aux::ComplexAxpby, Dtype::F64) => "delem_complex_axpby",
        }
    }
}

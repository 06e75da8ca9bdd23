//! The kernel families: one file under `kernels/` each, compiled by NVRTC as one module. A
//! family's name, its source as NVRTC sees it (headers spliced in), the architecture it is
//! compiled for, and the families a product needs. Its entry points and launch constants are
//! the kernel table's ([`table`](super::table)).

use crate::element::Dtype;
use crate::options::{Kernel, Precision};

/// The headers under `kernels/` that the family sources include, each spliced in place of its
/// `#include` line (NVRTC compiles one self-contained source). They include none themselves.
const HEADERS: [(&str, &str); 7] = [
    ("common.cuh", include_str!("../../kernels/common.cuh")),
    ("cp_async.cuh", include_str!("../../kernels/cp_async.cuh")),
    ("tile.cuh", include_str!("../../kernels/tile.cuh")),
    ("loader.cuh", include_str!("../../kernels/loader.cuh")),
    ("epilogue.cuh", include_str!("../../kernels/epilogue.cuh")),
    ("wgmma.cuh", include_str!("../../kernels/wgmma.cuh")),
    ("tma.cuh", include_str!("../../kernels/tma.cuh")),
];

/// One compiled module's worth of kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Family {
    /// One thread per output, both element types.
    Naive,
    /// Shared-memory tiles, both element types.
    Tiled,
    /// Register-blocked, pipelined SGEMM (two tile configurations, split-K), SGEMV and the f32
    /// element-wise kernels.
    Sgemm,
    /// DGEMM on the FP64 tensor cores (two tile configurations, split-K), a SIMT DGEMM for
    /// devices without them, DGEMV and the f64 element-wise kernels.
    Dgemm,
    /// SGEMM on the TF32 tensor cores, three products per step (3xTF32): FP32 accuracy.
    SgemmTf32x3,
    /// SGEMM on the TF32 tensor cores, one product per step.
    SgemmTf32,
    /// SGEMM on Hopper's warpgroup tensor-core instructions (sm_90a), 3xTF32 and TF32, from
    /// K-major panels that its pack kernel makes first ([`WG`](crate::engine::table::WG)).
    SgemmWg,
    /// Products on the INT8 tensor cores by Ozaki scheme II (sm_80 on; its warpgroup GEMM on
    /// sm_90a): scaling, residue panels, the INT8 GEMM of every modulus and the reconstruction
    /// ([`crate::engine::ozaki`]).
    Ozaki,
}

impl Family {
    pub(crate) const COUNT: usize = 8;
    pub(crate) const ALL: [Family; Family::COUNT] = [
        Family::Naive,
        Family::Tiled,
        Family::Sgemm,
        Family::Dgemm,
        Family::SgemmTf32x3,
        Family::SgemmTf32,
        Family::SgemmWg,
        Family::Ozaki,
    ];

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Family::Naive => "naive",
            Family::Tiled => "tiled",
            Family::Sgemm => "sgemm_fast",
            Family::Dgemm => "dgemm",
            Family::SgemmTf32x3 => "sgemm_tf32x3",
            Family::SgemmTf32 => "sgemm_tf32",
            Family::SgemmWg => "sgemm_wg",
            Family::Ozaki => "ozaki",
        }
    }

    /// The family of the register-blocked kernels, GEMVs and element-wise kernels of `dtype`.
    pub(crate) fn fast(dtype: Dtype) -> Family {
        match dtype {
            Dtype::F32 => Family::Sgemm,
            Dtype::F64 => Family::Dgemm,
        }
    }

    pub(crate) fn raw_source(self) -> &'static str {
        match self {
            Family::Naive => include_str!("../../kernels/naive.cu"),
            Family::Tiled => include_str!("../../kernels/tiled.cu"),
            Family::Sgemm => include_str!("../../kernels/sgemm_fast.cu"),
            Family::Dgemm => include_str!("../../kernels/dgemm.cu"),
            Family::SgemmTf32x3 | Family::SgemmTf32 => include_str!("../../kernels/sgemm_tc.cu"),
            Family::SgemmWg => include_str!("../../kernels/sgemm_wg.cu"),
            Family::Ozaki => include_str!("../../kernels/ozaki.cu"),
        }
    }

    /// The source NVRTC compiles: the family's file with the headers it includes spliced in
    /// (and, for the two families of `sgemm_tc.cu`, the define that picks one).
    pub(crate) fn source(self) -> String {
        crate::device::overrides::source_override(self.name()).unwrap_or_else(|| {
            let src = HEADERS
                .iter()
                .fold(self.raw_source().to_string(), |src, (name, text)| {
                    src.replace(&format!("#include \"{name}\""), text)
                });
            match self {
                Family::SgemmTf32x3 => format!("#define SGT_X3 1\n{src}"),
                Family::SgemmTf32 => format!("#define SGT_X3 0\n{src}"),
                _ => src,
            }
        })
    }

    /// The architecture NVRTC compiles the family for on a device of architecture `arch`
    /// (`sm_XY`): the device's own, but `sm_90a` for the warpgroup family on `sm_90` (its
    /// instructions exist only there).
    pub(crate) fn arch(self, arch: &str) -> String {
        match self {
            Family::SgemmWg | Family::Ozaki if arch == "sm_90" => "sm_90a".to_string(),
            _ => arch.to_string(),
        }
    }

    /// The families a product of `dtype` in `precision` with `kernel` (a batch when `batched`)
    /// launches on a device of compute capability `sm` (`major·10 + minor`), the fallbacks of
    /// a failed launch aside: what must be loaded before it runs without waiting on NVRTC.
    pub(crate) fn serving(
        dtype: Dtype,
        precision: Precision,
        kernel: Kernel,
        sm: u32,
        batched: bool,
    ) -> Vec<Family> {
        let fast = Family::fast(dtype);
        if let Precision::Ozaki { .. } = precision {
            if sm >= 80 && !matches!(kernel, Kernel::Naive | Kernel::Tiled16 | Kernel::Tiled32) {
                // The native kernels run what the Ozaki kernels cannot (GEMVs among them).
                return vec![Family::Ozaki, fast];
            }
        }
        match kernel {
            Kernel::Naive => vec![Family::Naive],
            Kernel::Tiled16 | Kernel::Tiled32 => vec![Family::Tiled],
            _ => match Family::tensor_cores(precision.for_dtype(dtype)) {
                None => vec![fast],
                Some(_) if sm < 80 => vec![fast],
                // Batches run the mma.sync tiles on sm_90 too.
                Some(_) if sm == 90 && !batched => vec![Family::SgemmWg, fast],
                Some(mma) => vec![mma, fast],
            },
        }
    }

    /// The mma.sync family of a tensor-core precision, `None` for FP32.
    fn tensor_cores(precision: Precision) -> Option<Family> {
        match precision {
            Precision::Tf32x3 => Some(Family::SgemmTf32x3),
            Precision::Tf32 => Some(Family::SgemmTf32),
            _ => None,
        }
    }

    /// The family whose kernels run a product in `precision` when this one does not compile:
    /// the mma.sync kernels in place of the warpgroup ones (their products fall back so);
    /// `None` for every other family.
    pub(crate) fn stand_in(self, precision: Precision) -> Option<Family> {
        match self {
            Family::SgemmWg => Family::tensor_cores(precision),
            _ => None,
        }
    }
}

/// Makes the crate compile `source` instead of the kernel family named `family` ("naive",
/// "tiled", "sgemm_fast", "dgemm", "sgemm_tf32x3", "sgemm_tf32", "sgemm_wg" or "ozaki") from the next
/// time it compiles that family in this process (prebuilt CUBINs of the family's own source
/// no longer match it); `None` restores the family's own source. Returns false for an
/// unknown family.
pub fn override_kernel_source(family: &str, source: Option<String>) -> bool {
    let Some(f) = Family::ALL.iter().find(|f| f.name() == family) else {
        return false;
    };
    crate::device::overrides::set_source_override(f.name(), source);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_families_a_product_needs() {
        use Family::*;
        let f = |dtype, precision, kernel, sm, batched| {
            Family::serving(dtype, precision, kernel, sm, batched)
        };
        assert_eq!(
            f(Dtype::F32, Precision::Native, Kernel::Auto, 90, false),
            [Sgemm]
        );
        assert_eq!(
            f(Dtype::F64, Precision::Tf32x3, Kernel::Auto, 90, false),
            [Dgemm]
        );
        assert_eq!(
            f(Dtype::F32, Precision::Tf32x3, Kernel::Auto, 90, false),
            [SgemmWg, Sgemm]
        );
        assert_eq!(
            f(Dtype::F32, Precision::Tf32x3, Kernel::Reg64, 90, true),
            [SgemmTf32x3, Sgemm]
        );
        assert_eq!(
            f(Dtype::F32, Precision::Tf32, Kernel::Auto, 86, false),
            [SgemmTf32, Sgemm]
        );
        assert_eq!(
            f(Dtype::F32, Precision::Tf32, Kernel::Auto, 75, false),
            [Sgemm]
        );
        assert_eq!(
            f(Dtype::F32, Precision::Tf32, Kernel::Naive, 90, false),
            [Naive]
        );
        assert_eq!(
            f(Dtype::F64, Precision::Native, Kernel::Tiled32, 90, true),
            [Tiled]
        );
        assert_eq!(SgemmWg.stand_in(Precision::Tf32), Some(SgemmTf32));
        assert_eq!(SgemmWg.stand_in(Precision::Tf32x3), Some(SgemmTf32x3));
        assert_eq!(Sgemm.stand_in(Precision::Tf32x3), None);
    }
}

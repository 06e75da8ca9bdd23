//! The kernel registry: each kernel family's CUDA source and entry points.
//!
//! A family is one file under `kernels/`, compiled by NVRTC as one module. Its entry points
//! are `extern "C"`, so their names are stable; each exists once per operand layout, with the
//! suffix `nn`, `nt`, `tn` or `tt` (`t`: that operand is read transposed, i.e. column-major).

use crate::options::Kernel;

const COMMON: &str = include_str!("../kernels/common.cuh");

/// One compiled module's worth of kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    Naive,
    Tiled,
    /// Register-blocked, pipelined SGEMM (two tile configurations, split-K) and GEMV.
    Fast,
}

impl Family {
    pub(crate) const COUNT: usize = 3;
    pub(crate) const ALL: [Family; Family::COUNT] = [Family::Naive, Family::Tiled, Family::Fast];

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Family::Naive => "naive",
            Family::Tiled => "tiled",
            Family::Fast => "sgemm_fast",
        }
    }

    fn raw_source(self) -> &'static str {
        match self {
            Family::Naive => include_str!("../kernels/naive.cu"),
            Family::Tiled => include_str!("../kernels/tiled.cu"),
            Family::Fast => include_str!("../kernels/sgemm_fast.cu"),
        }
    }

    /// The source NVRTC compiles: the family's file with `common.cuh` spliced in.
    pub(crate) fn source(self) -> String {
        crate::testing::source_override(self)
            .unwrap_or_else(|| self.raw_source().replace("#include \"common.cuh\"", COMMON))
    }

    /// Every entry point the module holds.
    pub(crate) fn entries(self) -> Vec<String> {
        let per_layout = |prefix: &str, suffixes: &[&str]| -> Vec<String> {
            LAYOUTS
                .iter()
                .flat_map(|l| suffixes.iter().map(move |s| format!("{prefix}_{l}{s}")))
                .collect()
        };
        match self {
            Family::Naive => per_layout("sgemm_naive", &[""]),
            Family::Tiled => [
                per_layout("sgemm_tiled_16", &[""]),
                per_layout("sgemm_tiled_32", &[""]),
            ]
            .concat(),
            Family::Fast => {
                let mut e = Vec::new();
                for config in [TileConfig::Big, TileConfig::Small] {
                    let prefix = format!("sgemm_fast_{}", config.name_in_source());
                    e.extend(per_layout(&prefix, &["", "_u", "_splitk", "_u_splitk"]));
                }
                e.extend(per_layout("sgemv_m1", &[""]));
                e.extend(per_layout("sgemv_n1", &[""]));
                e.push("sgemm_splitk_reduce".into());
                e.push("sgemm_axpby".into());
                e.push("elem_relu".into());
                e.push("elem_relu_backward".into());
                e
            }
        }
    }

    /// Dynamic shared memory an entry point needs raised above the default 48 KiB limit.
    pub(crate) fn shared_bytes(entry: &str) -> Option<u32> {
        [TileConfig::Big, TileConfig::Small]
            .into_iter()
            .find_map(|c| {
                let prefix = format!("sgemm_fast_{}_", c.name_in_source());
                (entry.starts_with(&prefix) && c.smem_bytes() > 48 * 1024).then(|| c.smem_bytes())
            })
    }
}

const LAYOUTS: [&str; 4] = ["nn", "nt", "tn", "tt"];

/// A tile configuration of the register-blocked kernels (`kernels/sgemm_fast.cu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TileConfig {
    /// 128 × 128 output tiles, 256 threads, an 8 × 8 block of outputs per thread.
    Big,
    /// 64 × 64 output tiles, 64 threads, an 8 × 8 block of outputs per thread, for shapes
    /// that make few big tiles.
    Small,
}

impl TileConfig {
    /// Output rows and columns one block computes.
    pub fn tile(self) -> (usize, usize) {
        match self {
            TileConfig::Big => (128, 128),
            TileConfig::Small => (64, 64),
        }
    }

    /// The kernel name the crate gives it (`Kernel::Reg128`, `Kernel::Reg64`).
    pub fn name(self) -> &'static str {
        match self {
            TileConfig::Big => "reg128",
            TileConfig::Small => "reg64",
        }
    }

    pub(crate) fn name_in_source(self) -> &'static str {
        match self {
            TileConfig::Big => "128x128",
            TileConfig::Small => "64x64",
        }
    }

    pub(crate) fn threads(self) -> u32 {
        match self {
            TileConfig::Big => 256,
            TileConfig::Small => 64,
        }
    }

    /// Dynamic shared memory per block: the pipeline's stages of both operand tiles.
    pub(crate) fn smem_bytes(self) -> u32 {
        match self {
            TileConfig::Big => 50_688,
            TileConfig::Small => 34_816,
        }
    }
}

/// The suffix naming an operand layout pair.
pub(crate) fn layout_suffix(trans_a: bool, trans_b: bool) -> &'static str {
    LAYOUTS[(trans_a as usize) * 2 + trans_b as usize]
}

/// How a concrete kernel is launched: its family, entry prefix and block shape.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LaunchRule {
    pub(crate) family: Family,
    pub(crate) prefix: &'static str,
    /// Threads per block along x (columns of C) and y (rows); one output per thread.
    pub(crate) block: (u32, u32),
}

impl LaunchRule {
    /// The rule of a one-output-per-thread kernel; `None` for the register-blocked kernels
    /// and `Auto`, which `fast::launch` runs by plan.
    pub(crate) fn of(kernel: Kernel) -> Option<LaunchRule> {
        Some(match kernel {
            Kernel::Naive => LaunchRule {
                family: Family::Naive,
                prefix: "sgemm_naive",
                block: (16, 16),
            },
            Kernel::Tiled16 => LaunchRule {
                family: Family::Tiled,
                prefix: "sgemm_tiled_16",
                block: (16, 16),
            },
            Kernel::Tiled32 => LaunchRule {
                family: Family::Tiled,
                prefix: "sgemm_tiled_32",
                block: (32, 32),
            },
            Kernel::Auto | Kernel::Reg64 | Kernel::Reg128 => return None,
        })
    }

    pub(crate) fn entry(&self, trans_a: bool, trans_b: bool) -> String {
        format!("{}_{}", self.prefix, layout_suffix(trans_a, trans_b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_named_by_a_launch_rule_exists_in_its_source() {
        for kernel in [Kernel::Naive, Kernel::Tiled16, Kernel::Tiled32] {
            let rule = LaunchRule::of(kernel).unwrap();
            let entries = rule.family.entries();
            for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                let entry = rule.entry(ta, tb);
                assert!(entries.contains(&entry), "{entry} not in {entries:?}");
            }
        }
    }

    #[test]
    fn sources_are_self_contained_for_nvrtc() {
        for family in Family::ALL {
            let src = family.source();
            assert!(
                !src.lines().any(|l| l.trim_start().starts_with("#include")),
                "{} still includes a header",
                family.name()
            );
            for entry in family.entries() {
                // Each entry is declared by name or assembled by a macro from its prefix.
                let stem = entry.split('_').take(2).collect::<Vec<_>>().join("_");
                assert!(src.contains(&stem), "{} lacks {entry}", family.name());
            }
        }
    }
}

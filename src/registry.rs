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
}

impl Family {
    pub(crate) const COUNT: usize = 2;
    pub(crate) const ALL: [Family; Family::COUNT] = [Family::Naive, Family::Tiled];

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Family::Naive => "naive",
            Family::Tiled => "tiled",
        }
    }

    fn raw_source(self) -> &'static str {
        match self {
            Family::Naive => include_str!("../kernels/naive.cu"),
            Family::Tiled => include_str!("../kernels/tiled.cu"),
        }
    }

    /// The source NVRTC compiles: the family's file with `common.cuh` spliced in.
    pub(crate) fn source(self) -> String {
        self.raw_source().replace("#include \"common.cuh\"", COMMON)
    }

    /// Every entry point the module holds.
    pub(crate) fn entries(self) -> Vec<String> {
        let prefixes: &[&str] = match self {
            Family::Naive => &["sgemm_naive"],
            Family::Tiled => &["sgemm_tiled_16", "sgemm_tiled_32"],
        };
        prefixes
            .iter()
            .flat_map(|p| LAYOUTS.iter().map(move |l| format!("{p}_{l}")))
            .collect()
    }
}

const LAYOUTS: [&str; 4] = ["nn", "nt", "tn", "tt"];

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
    pub(crate) fn of(kernel: Kernel) -> LaunchRule {
        match kernel {
            Kernel::Naive | Kernel::Auto => LaunchRule {
                family: Family::Naive,
                prefix: "sgemm_naive",
                block: (32, 8),
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
        }
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
        for kernel in Kernel::ALL {
            let rule = LaunchRule::of(kernel);
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
            assert!(
                src.contains("#define SGEMM_PARAMS"),
                "{} lacks common.cuh",
                family.name()
            );
        }
    }
}

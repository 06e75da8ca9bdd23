//! The maker of the prebuilt kernel images under `kernels/prebuilt/`, for
//! `examples/prebuild.rs`: every kernel family compiled by NVRTC, exactly as the crate would
//! compile it at run time, for each architecture of [`ARCHS`]. Hidden from the documentation;
//! not part of the API.

use std::time::Instant;

use crate::device::cache::{self, fnv1a, nvrtc_options};
pub use crate::device::compiler::nvrtc_version;
use crate::device::prebuilt::PREBUILT_ARCHS;
use crate::engine::family::Family;
use crate::error::GpuDotError;

/// The architectures every family is compiled for (the warpgroup family as `sm_90a`).
pub const ARCHS: [&str; 2] = PREBUILT_ARCHS;

/// One compiled image.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The family's name.
    pub family: &'static str,
    /// The architecture compiled for.
    pub arch: String,
    /// FNV-1a of the source text compiled.
    pub source: u64,
    /// The NVRTC options used.
    pub options: Vec<String>,
    /// The CUBIN.
    pub cubin: Vec<u8>,
    /// Seconds NVRTC took.
    pub seconds: f64,
}

impl Compiled {
    /// The manifest line of this image, stored as `file` (see build.rs).
    pub fn manifest_line(&self, file: &str) -> String {
        format!(
            "{} {} {:016x} {} {:016x} {file} {}",
            self.family,
            self.arch,
            self.source,
            self.cubin.len(),
            fnv1a(&self.cubin),
            self.options.join(" ")
        )
    }

    /// The file name the image is stored under, before compression.
    pub fn file_name(&self) -> String {
        format!("{}.{}.cubin", self.family, self.arch)
    }
}

/// Every (family, architecture) pair with code to compile.
pub fn jobs() -> Vec<(&'static str, String)> {
    ARCHS
        .iter()
        .flat_map(|arch| {
            Family::ALL
                .into_iter()
                .filter(move |f| f.has_code_for(arch))
                .map(move |f| (f.name(), f.arch(arch)))
        })
        .collect()
}

/// Compiles the family named `family` for `arch` (a pair of [`jobs`]).
pub fn compile(family: &str, arch: &str) -> Result<Compiled, GpuDotError> {
    let f = Family::ALL
        .into_iter()
        .find(|f| f.name() == family)
        .ok_or_else(|| GpuDotError::Compile {
            kernel: "prebuild",
            log: format!("no kernel family {family}"),
        })?;
    let source = f.source();
    let options = nvrtc_options(arch);
    let start = Instant::now();
    let cubin = cache::compile(f.name(), &source, &options)?;
    Ok(Compiled {
        family: f.name(),
        arch: arch.to_string(),
        source: fnv1a(source.as_bytes()),
        options,
        cubin,
        seconds: start.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::prebuilt::{find, IMAGES};

    /// The images are current: each was compiled from the source the crate compiles today
    /// with today's options, and every family has one for each architecture of [`ARCHS`]. A
    /// kernel change not followed by `examples/prebuild.rs` fails here.
    #[test]
    fn every_image_matches_the_sources_of_today() {
        assert!(
            !IMAGES.is_empty(),
            "kernels/prebuilt/MANIFEST lists no image"
        );
        for image in IMAGES {
            let family = Family::ALL
                .into_iter()
                .find(|f| f.name() == image.family)
                .unwrap_or_else(|| panic!("{image:?}: no such family"));
            assert_eq!(
                image.source,
                fnv1a(family.source().as_bytes()),
                "{image:?} was compiled from another source: run examples/prebuild.rs again"
            );
            assert_eq!(image.options, nvrtc_options(image.arch).join(" "));
        }
        for (family, arch) in jobs() {
            let f = Family::ALL
                .into_iter()
                .find(|f| f.name() == family)
                .unwrap();
            let image = find(family, &f.source(), &arch);
            assert!(
                image.is_some_and(|i| i.arch == arch),
                "{family} has no image for {arch}: run examples/prebuild.rs"
            );
        }
    }

    #[test]
    fn every_image_decompresses_to_its_checksum() {
        for image in IMAGES {
            let cubin = image
                .cubin()
                .unwrap_or_else(|| panic!("{image:?} is damaged"));
            assert_eq!(&cubin[..4], b"\x7fELF", "{image:?} is no CUBIN");
        }
    }

    #[test]
    fn a_changed_source_finds_no_image() {
        let source = Family::Tiled.source() + "\n// changed\n";
        assert!(find("tiled", &source, "sm_90").is_none());
        assert!(find("tiled", &Family::Tiled.source(), "sm_90").is_some());
        assert!(find("tiled", &Family::Tiled.source(), "sm_89").is_some_and(|i| i.arch == "sm_80"));
        assert!(find("tiled", &Family::Tiled.source(), "sm_75").is_none());
    }

    #[test]
    fn every_family_has_code_for_hopper_and_the_warpgroup_family_only_there() {
        let jobs = jobs();
        for family in ["sgemm_wg", "ozaki"] {
            assert!(jobs.contains(&(family, "sm_90a".to_string())));
            assert!(!jobs.contains(&(family, "sm_90".to_string())));
        }
        // The Ozaki family's mma.sync GEMM serves sm_80 to sm_89.
        assert!(jobs.contains(&("ozaki", "sm_80".to_string())));
        assert!(!jobs.iter().any(|(f, a)| *f == "sgemm_wg" && a != "sm_90a"));
        assert_eq!(jobs.len(), 2 * Family::COUNT - 1);
    }
}

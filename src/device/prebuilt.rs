//! Kernels compiled ahead of time: CUBINs of every family for the architectures most devices
//! have, made by NVRTC from the crate's own sources (`examples/prebuild.rs`), stored
//! zstd-compressed under `kernels/prebuilt/` and embedded in the library, so that a first
//! product loads its kernels in milliseconds instead of waiting on NVRTC.
//!
//! An image serves a module only when it was compiled from exactly the text the crate would
//! compile now (a hash of the source, overrides of the fault tests included) with exactly the
//! crate's NVRTC options, for an architecture the device runs: its own, or an older one of the
//! same major version (a CUBIN for `sm_80` runs on `sm_86` and `sm_89`; `sm_90a` only on
//! `sm_90`). Anything else, or an image the driver refuses, is compiled by NVRTC as before.

use std::fmt;

use crate::device::cache::{fnv1a, nvrtc_options};

/// One embedded CUBIN.
pub(crate) struct Image {
    /// The kernel family, e.g. `sgemm_fast`.
    pub(crate) family: &'static str,
    /// The architecture it was compiled for, e.g. `sm_90` or `sm_90a`.
    pub(crate) arch: &'static str,
    /// FNV-1a of the exact source text compiled.
    pub(crate) source: u64,
    /// The CUBIN's length in bytes.
    pub(crate) len: usize,
    /// FNV-1a of the CUBIN.
    pub(crate) checksum: u64,
    /// The NVRTC options it was compiled with, space-separated.
    pub(crate) options: &'static str,
    /// The CUBIN, zstd-compressed.
    pub(crate) zst: &'static [u8],
}

impl fmt::Debug for Image {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} for {} ({} bytes)", self.family, self.arch, self.len)
    }
}

// `NVRTC_VERSION` and `IMAGES`, written by build.rs from kernels/prebuilt/MANIFEST.
include!(concat!(env!("OUT_DIR"), "/prebuilt.rs"));

/// `sm_XY` as `(X, Y)`; `None` for anything else (`sm_90a`, `compute_90`).
fn plain_arch(arch: &str) -> Option<(u32, u32)> {
    let digits = arch.strip_prefix("sm_")?;
    if digits.len() < 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (major, minor) = digits.split_at(digits.len() - 1);
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// How well an image for `image` serves a module compiled for `wanted`: `Some(rank)` where it
/// runs there (higher is closer: the exact architecture first, then the newest older minor
/// version of the same major), `None` where it does not.
fn fit(image: &str, wanted: &str) -> Option<u32> {
    if image == wanted {
        return Some(u32::MAX);
    }
    let ((im, in_), (wm, wn)) = (plain_arch(image)?, plain_arch(wanted)?);
    (im == wm && in_ <= wn).then_some(in_)
}

/// The image that serves `family`, whose source is `source`, compiled for `arch`: the best
/// fitting one, or `None`.
pub(crate) fn find(family: &str, source: &str, arch: &str) -> Option<&'static Image> {
    let hash = fnv1a(source.as_bytes());
    IMAGES
        .iter()
        .filter(|i| i.family == family && i.source == hash)
        .filter(|i| i.options == nvrtc_options(i.arch).join(" "))
        .filter_map(|i| fit(i.arch, arch).map(|rank| (rank, i)))
        .max_by_key(|&(rank, _)| rank)
        .map(|(_, i)| i)
}

impl Image {
    /// The CUBIN, or `None` when it does not decompress to the length and checksum the
    /// manifest records.
    pub(crate) fn cubin(&self) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(self.len);
        ruzstd::decoding::FrameDecoder::new()
            .decode_all_to_vec(self.zst, &mut out)
            .ok()?;
        (out.len() == self.len && fnv1a(&out) == self.checksum).then_some(out)
    }
}

/// The architectures `examples/prebuild.rs` compiles every family for (the warpgroup family
/// as `sm_90a`): `sm_80` serves every Ampere and Ada device, `sm_90` the H100 and H200.
pub(crate) const PREBUILT_ARCHS: [&str; 2] = ["sm_80", "sm_90"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn architectures_that_run_an_image() {
        assert_eq!(fit("sm_90", "sm_90"), Some(u32::MAX));
        assert_eq!(fit("sm_90a", "sm_90a"), Some(u32::MAX));
        assert_eq!(fit("sm_80", "sm_89"), Some(0));
        assert_eq!(fit("sm_86", "sm_89"), Some(6));
        assert_eq!(fit("sm_89", "sm_86"), None);
        assert_eq!(fit("sm_80", "sm_90"), None);
        assert_eq!(fit("sm_90", "sm_90a"), None);
        assert_eq!(fit("sm_90a", "sm_90"), None);
        assert_eq!(fit("sm_90", "sm_100"), None);
        assert_eq!(fit("sm_100", "sm_103"), Some(0));
        assert_eq!(plain_arch("compute_90"), None);
    }
}

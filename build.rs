//! Rebuilds the crate when a kernel source changes, and embeds a hash of the kernel sources
//! (`GPU_DOT_KERNELS_HASH`) that identifies compiled code across processes. Needs no CUDA
//! toolkit: the kernels are compiled at run time by NVRTC.

use std::fs;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=kernels");
    println!("cargo:rerun-if-changed=build.rs");
    let mut files: Vec<_> = fs::read_dir(Path::new("kernels"))
        .expect("the kernels/ folder is part of the crate")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("cu" | "cuh")))
        .collect();
    files.sort();
    // FNV-1a over each file's name and contents.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for path in &files {
        println!("cargo:rerun-if-changed={}", path.display());
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let body = fs::read(path).expect("kernel source readable");
        for byte in name.bytes().chain(body) {
            hash ^= byte as u64;
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    println!("cargo:rustc-env=GPU_DOT_KERNELS_HASH={hash:016x}");
}

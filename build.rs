//! Rebuilds the crate when a kernel source changes, embeds a hash of the kernel sources
//! (`GPU_DOT_KERNELS_HASH`) that identifies compiled code across processes, and writes the
//! table of prebuilt kernel images (`kernels/prebuilt/MANIFEST`) that the crate embeds. Needs
//! no CUDA toolkit: the prebuilt images are files of the crate, and kernels without one are
//! compiled at run time by NVRTC.

use std::fmt::Write as _;
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
    prebuilt_table();
}

/// Writes `$OUT_DIR/prebuilt.rs`: the NVRTC version the images were made with and one
/// `Image` row per line of `kernels/prebuilt/MANIFEST`, its bytes embedded with
/// `include_bytes!` (an empty table when there is no manifest).
///
/// A manifest line: `family arch source-hash cubin-bytes cubin-fnv1a file options…`, the
/// hashes in hexadecimal; `#` lines are comments, `nvrtc VERSION` names the compiler.
fn prebuilt_table() {
    let dir = Path::new("kernels").join("prebuilt");
    let manifest = dir.join("MANIFEST");
    println!("cargo:rerun-if-changed={}", manifest.display());
    let text = fs::read_to_string(&manifest).unwrap_or_default();
    let mut nvrtc = String::new();
    let mut rows = String::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if let ["nvrtc", version] = words[..] {
            nvrtc = version.to_string();
            continue;
        }
        let [family, arch, source, len, checksum, file, ref options @ ..] = words[..] else {
            panic!("kernels/prebuilt/MANIFEST: a line of fewer than six fields: {line}");
        };
        let path = dir
            .join(file)
            .canonicalize()
            .unwrap_or_else(|e| panic!("kernels/prebuilt/{file}, named in MANIFEST: {e}"));
        println!("cargo:rerun-if-changed={}", path.display());
        writeln!(
            rows,
            "    Image {{ family: {family:?}, arch: {arch:?}, source: 0x{source}, len: {len}, \
             checksum: 0x{checksum}, options: {:?}, zst: include_bytes!({:?}) }},",
            options.join(" "),
            path.display()
        )
        .expect("writing to a String");
    }
    let table = format!(
        "/// The NVRTC version the prebuilt images were compiled with.\n\
         pub(crate) const NVRTC_VERSION: &str = {nvrtc:?};\n\
         /// Every prebuilt image the crate embeds.\n\
         pub(crate) static IMAGES: &[Image] = &[\n{rows}];\n"
    );
    let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("prebuilt.rs");
    fs::write(out, table).expect("OUT_DIR is writable");
}

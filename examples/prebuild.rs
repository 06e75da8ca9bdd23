//! The maintainers' tool that makes `kernels/prebuilt/`: every kernel family compiled by
//! NVRTC for the architectures the crate ships CUBINs for, compressed with the `zstd` command
//! (level 19), and the MANIFEST that build.rs turns into the embedded table. Needs NVRTC (no
//! GPU, no driver) and the `zstd` command; run it whenever a kernel source changes (a unit
//! test fails until then):
//!
//! ```text
//! pip download --no-deps -d /tmp/nvrtc nvidia-cuda-nvrtc-cu12==12.9.86
//! (cd /tmp/nvrtc && unzip -q -o *.whl)
//! LD_LIBRARY_PATH=/tmp/nvrtc/nvidia/cuda_nvrtc/lib \
//!     cargo run --release --example prebuild -- kernels/prebuilt [THREADS] [FAMILY]
//! ```
//!
//! The images are made with NVRTC 12.9, the last of CUDA 12, rather than a CUDA 13 NVRTC:
//! CUDA's compatibility rules let CUBINs of CUDA 12.x load on CUDA 12 and 13 drivers (one a
//! driver refuses is compiled at run time instead).

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use gpu_dot::prebuild;

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "kernels/prebuilt".into()));
    let threads: usize = args.next().and_then(|t| t.parse().ok()).unwrap_or(2);
    // Optionally one family: its images are remade and the manifest keeps the others' lines.
    let only = args.next();
    let nvrtc = prebuild::nvrtc_version().expect("NVRTC answers its version");
    println!("NVRTC {nvrtc}, {threads} threads, into {}", dir.display());
    std::fs::create_dir_all(&dir).expect("the output folder can be made");

    // Largest first, so that the threads finish together.
    let all = prebuild::jobs();
    let kept: Vec<String> = match &only {
        Some(family) => std::fs::read_to_string(dir.join("MANIFEST"))
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with("nvrtc "))
            .filter(|l| l.split(' ').next() != Some(family.as_str()))
            .map(str::to_string)
            .collect(),
        None => Vec::new(),
    };
    let chosen = all
        .into_iter()
        .filter(|(f, _)| only.as_deref().is_none_or(|o| o == *f))
        .rev();
    let jobs = Mutex::new(chosen.collect::<Vec<_>>());
    let done = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let Some((family, arch)) = jobs.lock().unwrap().pop() else {
                    return;
                };
                let image = prebuild::compile(family, &arch)
                    .unwrap_or_else(|e| panic!("{family} for {arch}: {e}"));
                let path = dir.join(image.file_name());
                std::fs::write(&path, &image.cubin).expect("the image can be written");
                let status = Command::new("zstd")
                    .args(["-19", "-q", "-f", "--rm"])
                    .arg(&path)
                    .status()
                    .expect("the zstd command runs");
                assert!(status.success(), "zstd failed on {}", path.display());
                println!(
                    "{family} {arch}: {:.1} s, {} bytes",
                    image.seconds,
                    image.cubin.len()
                );
                done.lock().unwrap().push(image);
            });
        }
    });

    let mut images = done.into_inner().unwrap();
    images.sort_by(|a, b| (a.family, &a.arch).cmp(&(b.family, &b.arch)));
    let mut manifest = format!(
        "# gpu-dot prebuilt kernels, made by examples/prebuild.rs; build.rs embeds each line.\n\
         # family arch source-fnv1a cubin-bytes cubin-fnv1a file nvrtc-options\n\
         nvrtc {nvrtc}\n"
    );
    let mut lines: Vec<String> = images
        .iter()
        .map(|image| image.manifest_line(&format!("{}.zst", image.file_name())))
        .chain(kept)
        .collect();
    lines.sort();
    for line in lines {
        manifest += &line;
        manifest.push('\n');
    }
    std::fs::write(dir.join("MANIFEST"), manifest).expect("the manifest can be written");
    println!("{} images", images.len());
}

//! The fallback paths, checked in a build that aborts on panic instead of unwinding.
//!
//! ```sh
//! cargo build --profile release-abort --example faults
//! target/release-abort/examples/faults          # this process, as its environment makes it
//! target/release-abort/examples/faults --all    # this process, then three children without a GPU
//! ```
//!
//! The `release-abort` profile is the release profile with `panic = "abort"`: a panic anywhere,
//! in the crate or below it, ends the process with SIGABRT instead of unwinding, so this
//! example passing shows that no fallback path depends on catching a panic.
//!
//! It checks, printing a line for each: a shape mismatch is a typed error from `try_gpu_dot`
//! (and from the GPU backend); products large enough for the GPU (256³, in C order, F order
//! and a strided slice) come back right, from the GPU when there is one, else from the CPU with
//! the reason `device_status` gives; the GPU backend is a product on the GPU, or a `NoDevice`
//! error; a dimension above `i32::MAX` is `TooLarge` on the GPU backend; products below the
//! threshold and on the CPU backend run on the CPU. Results are compared with an f64 product.
//! It exits 0 when every check holds, 1 otherwise.
//!
//! `--expect gpu` or `--expect none` also requires a usable GPU, or none. `--all` runs the
//! checks here, then in three children of this executable that must find no GPU, each in its
//! own way:
//!
//! - `CUDA_VISIBLE_DEVICES=` (the driver loads, but shows no device);
//! - the driver library unloadable: `LD_LIBRARY_PATH` starts with a fresh folder holding a
//!   file that is not a shared library under every name cudarc tries for it (`libcuda.so`,
//!   `libcuda.so.1`, …); glibc's `dlopen` finds that file before the real one, which may be
//!   in the loader cache, and fails on it without looking further;
//! - NVRTC unloadable, in the same way (`libnvrtc.so`, `libnvrtc.so.12`, …), the driver left
//!   alone.
//!
//! By hand, the same children are, with `$dir` holding such files:
//!
//! ```sh
//! CUDA_VISIBLE_DEVICES= target/release-abort/examples/faults --expect none
//! LD_LIBRARY_PATH=$dir:$LD_LIBRARY_PATH target/release-abort/examples/faults --expect none
//! ```
//!
//! On the GPU machine (which has no Rust toolchain): build here, copy
//! `target/release-abort/examples/faults` into the carried folder (e.g. `.gpu/examples/` after
//! `gpu-stage`), and run it there with `--all`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use gpu_dot::{device_status, Backend, CpuReason, DotOptions, GpuDot, GpuDotError, Route};
use ndarray::{s, Array1, Array2, ArrayView2};
use rand::{Rng, SeedableRng};

/// What the checks expect of the device.
#[derive(Clone, Copy, PartialEq)]
enum Expect {
    Any,
    Gpu,
    NoGpu,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut expect = Expect::Any;
    let mut all = false;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--all" => all = true,
            "--expect" => match it.next().map(String::as_str) {
                Some("gpu") => expect = Expect::Gpu,
                Some("none") => expect = Expect::NoGpu,
                other => return usage(&format!("--expect takes gpu or none, not {other:?}")),
            },
            other => return usage(&format!("unknown argument {other:?}")),
        }
    }
    println!(
        "panic strategy: {}",
        if cfg!(panic = "abort") {
            "abort"
        } else {
            "unwind"
        }
    );
    let mut ok = run_checks(expect);
    if all {
        ok &= run_children();
    }
    println!("{}", if ok { "all checks passed" } else { "FAILED" });
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn usage(problem: &str) -> ExitCode {
    eprintln!("{problem}\nusage: faults [--expect gpu|none] [--all]");
    ExitCode::from(2)
}

/// Prints one check's outcome; returns whether it held.
fn report(what: &str, outcome: Result<String, String>) -> bool {
    match outcome {
        Ok(detail) => {
            println!("ok      {what}: {detail}");
            true
        }
        Err(problem) => {
            println!("FAILED  {what}: {problem}");
            false
        }
    }
}

fn run_checks(expect: Expect) -> bool {
    let status = device_status();
    println!("device: {status}");
    let reason = status.reason().map(str::to_string);
    let mut ok = report(
        "device as expected",
        match (expect, &reason) {
            (Expect::Gpu, Some(r)) => Err(format!("a GPU was expected: {r}")),
            (Expect::NoGpu, None) => Err("no usable GPU was expected".into()),
            (_, Some(_)) => Ok("no GPU".into()),
            (_, None) => Ok("GPU".into()),
        },
    );

    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5EED_FA17);
    let mut random =
        |rows, cols| Array2::from_shape_simple_fn((rows, cols), || rng.random_range(-1.0f32..1.0));

    // 1. The caller's mistake is a typed error, whatever the device.
    let (x, y) = (random(2, 3), random(4, 5));
    let mismatch = |r: Result<(), GpuDotError>| match r {
        Err(GpuDotError::ShapeMismatch {
            m: 2,
            k: 3,
            k2: 4,
            n: 5,
        }) => Ok("ShapeMismatch { m: 2, k: 3, k2: 4, n: 5 }".to_string()),
        other => Err(format!("{other:?}")),
    };
    ok &= report(
        "shape mismatch, try_gpu_dot",
        mismatch(x.try_gpu_dot(&y).map(drop)),
    );
    ok &= report(
        "shape mismatch, Backend::Gpu",
        mismatch(
            x.try_gpu_dot_with(&y, &DotOptions::builtin().backend(Backend::Gpu))
                .map(drop),
        ),
    );

    // 2. Products large enough for the GPU.
    let n = 256;
    let (a, at, wide, b) = (
        random(n, n),
        random(n, n),
        random(n + 1, 2 * n),
        random(n, n),
    );
    let views: [(&str, ArrayView2<f32>); 3] = [
        ("C order", a.view()),
        ("F order", at.t()),
        ("strided slice", wide.slice(s![1.., ..;2])),
    ];
    for (layout, a) in views {
        let auto = a.try_gpu_dot_with(&b, &DotOptions::builtin());
        ok &= report(
            &format!("Backend::Auto, {n}³, {layout}"),
            auto.map_err(|e| format!("error {e:#}")).and_then(|p| {
                let err = check(&p.c, a, b.view())?;
                match (&reason, &p.route) {
                    (None, route @ Route::Gpu { .. }) => Ok(format!("{route}; {err}")),
                    (
                        Some(reason),
                        route @ Route::Cpu(CpuReason::GpuUnavailable(GpuDotError::NoDevice {
                            reason: r,
                        })),
                    ) if r == reason => Ok(format!("{route}; {err}")),
                    (_, route) => Err(format!("unexpected route: {route}")),
                }
            }),
        );
        let gpu = a.try_gpu_dot_with(&b, &DotOptions::builtin().backend(Backend::Gpu));
        ok &= report(
            &format!("Backend::Gpu, {n}³, {layout}"),
            match (&reason, gpu) {
                (None, Ok(p)) if p.route.is_gpu() => {
                    check(&p.c, a, b.view()).map(|e| format!("{}; {e}", p.route))
                }
                (Some(reason), Err(GpuDotError::NoDevice { reason: r })) if &r == reason => {
                    Ok(format!("NoDevice: {r}"))
                }
                (_, other) => Err(format!("{other:?}")),
            },
        );
        ok &= report(
            &format!("gpu_dot, {n}³, {layout}"),
            check(&a.gpu_dot(&b), a, b.view()),
        );
    }

    // 3. A dimension the kernels cannot take, with no memory behind it.
    let big = i32::MAX as usize + 1;
    let one = Array1::from_elem(1, 0.5f32);
    let tall = one.broadcast((big, 1)).expect("a broadcast view");
    let unit = Array2::from_elem((1, 1), 0.25f32);
    ok &= report(
        "m = 2^31, Backend::Gpu",
        match tall.try_gpu_dot_with(&unit, &DotOptions::builtin().backend(Backend::Gpu)) {
            Err(GpuDotError::TooLarge { dims }) if dims == (big, 1, 1) => {
                Ok(format!("TooLarge {{ dims: {dims:?} }}"))
            }
            other => Err(format!("{:?}", other.map(|p| p.route))),
        },
    );

    // 4. Products that never touch the GPU.
    let (small_a, small_b) = (random(20, 30), random(30, 10));
    ok &= report(
        "below the threshold",
        match small_a.try_gpu_dot_with(&small_b, &DotOptions::builtin()) {
            Ok(p) if matches!(p.route, Route::Cpu(CpuReason::BelowThreshold { .. })) => {
                check(&p.c, small_a.view(), small_b.view()).map(|e| format!("{}; {e}", p.route))
            }
            other => Err(format!("{:?}", other.map(|p| p.route))),
        },
    );
    ok &= report(
        "Backend::Cpu",
        match a.try_gpu_dot_with(&b, &DotOptions::builtin().backend(Backend::Cpu)) {
            Ok(p) if matches!(p.route, Route::Cpu(CpuReason::Requested)) => {
                if p.c == a.dot(&b) {
                    Ok("equal to ndarray's dot".into())
                } else {
                    Err("differs from ndarray's dot".into())
                }
            }
            other => Err(format!("{:?}", other.map(|p| p.route))),
        },
    );
    ok
}

/// Compares `c` with the f64 product of `a` and `b`: ‖c − ref‖_F must stay within
/// 4·ε·√k·‖|a|·|b|‖_F (as the crate's tests do).
fn check(c: &Array2<f32>, a: ArrayView2<f32>, b: ArrayView2<f32>) -> Result<String, String> {
    if c.dim() != (a.nrows(), b.ncols()) {
        return Err(format!("shape {:?}", c.dim()));
    }
    let r = a.mapv(f64::from).dot(&b.mapv(f64::from));
    let abs = a
        .mapv(|x| f64::from(x).abs())
        .dot(&b.mapv(|x| f64::from(x).abs()));
    let (mut diff, mut norm, mut scale) = (0.0f64, 0.0f64, 0.0f64);
    for ((&x, &y), &s) in c.iter().zip(&r).zip(&abs) {
        diff += (f64::from(x) - y).powi(2);
        norm += y * y;
        scale += s * s;
    }
    let bound = 4.0 * f64::from(f32::EPSILON) * (a.ncols() as f64).sqrt() * scale.sqrt();
    let rel = (diff / norm).sqrt();
    if diff.sqrt() <= bound {
        Ok(format!("relative error {rel:.1e}"))
    } else {
        Err(format!(
            "‖C − ref‖ = {:.3e} above {bound:.3e} (relative error {rel:.1e})",
            diff.sqrt()
        ))
    }
}

/// Runs this executable with `--expect none` in three environments without a usable GPU.
fn run_children() -> bool {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            println!("FAILED  cannot find this executable: {e}");
            return false;
        }
    };
    let driver = match Garbage::new("driver", &["cuda", "nvcuda"], &["libcuda.so.1"]) {
        Ok(g) => g,
        Err(e) => return report("a folder of placeholder libraries", Err(e.to_string())),
    };
    let nvrtc = match Garbage::new("nvrtc", &["nvrtc"], &["libnvrtc.so.13"]) {
        Ok(g) => g,
        Err(e) => return report("a folder of placeholder libraries", Err(e.to_string())),
    };
    let runs: [(&str, &str, OsString); 3] = [
        ("no visible device", "CUDA_VISIBLE_DEVICES", OsString::new()),
        (
            "no driver library",
            "LD_LIBRARY_PATH",
            driver.ld_library_path(),
        ),
        ("no NVRTC", "LD_LIBRARY_PATH", nvrtc.ld_library_path()),
    ];
    let mut ok = true;
    for (what, var, value) in runs {
        println!("\n== child: {what} ({var}={value:?})");
        let status = Command::new(&exe)
            .args(["--expect", "none"])
            .env(var, &value)
            .env("GPU_DOT_CACHE_DIR", "off")
            .status();
        ok &= report(
            &format!("child, {what}"),
            match status {
                Ok(s) if s.success() => Ok("passed".into()),
                Ok(s) => Err(format!("{s}")),
                Err(e) => Err(format!("did not start: {e}")),
            },
        );
    }
    ok
}

/// A fresh temporary folder, removed on drop, holding a file that is not a shared library
/// under each name cudarc tries for the libraries named, and under the `extra` names.
struct Garbage {
    dir: PathBuf,
}

impl Garbage {
    fn new(tag: &str, libs: &[&str], extra: &[&str]) -> std::io::Result<Garbage> {
        let dir = std::env::temp_dir().join(format!(
            "gpu-dot-faults-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        std::fs::create_dir(&dir)?;
        let garbage = Garbage { dir };
        let text = "not a shared library: a placeholder that shadows the real one\n".repeat(4);
        let names = libs
            .iter()
            .flat_map(|lib| cudarc::get_lib_name_candidates(lib))
            .chain(extra.iter().map(|s| s.to_string()));
        for name in names {
            std::fs::write(garbage.dir.join(name), &text)?;
        }
        Ok(garbage)
    }

    /// This folder, then the current `LD_LIBRARY_PATH`.
    fn ld_library_path(&self) -> OsString {
        let mut paths = vec![self.dir.clone()];
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
            paths.extend(std::env::split_paths(&old));
        }
        std::env::join_paths(paths).unwrap_or_else(|_| self.dir.clone().into_os_string())
    }
}

impl Drop for Garbage {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

//! The on-disk kernel cache across processes: the test binary runs itself as child processes
//! that share one fresh `GPU_DOT_CACHE_DIR`. Needs a CUDA GPU:
//! `cargo test --test cache -- --include-ignored`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use common::{assert_close, random, scaled_tolerance, TempDir, TestElem};
use gpu_dot::{
    device_status, module_loads, nvrtc_compilations, Backend, DeviceStatus, DotOptions, GpuDot,
    Kernel, ENV_CACHE_DIR,
};

/// Set in a child process: do one product and report.
const CHILD: &str = "GPU_DOT_TEST_CACHE_CHILD";
/// The first word of the line a child reports on.
const REPORT: &str = "gpu-dot-cache-child:";
const NAME: &str = "a_second_process_loads_the_kernels_from_the_disk_cache";

/// What one child process saw.
#[derive(Debug)]
struct ChildReport {
    compilations: usize,
    /// `(family, cached, nvrtc_ms)` of each module loaded.
    loads: Vec<(String, bool, f64)>,
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_second_process_loads_the_kernels_from_the_disk_cache() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let dir = TempDir::new("cache-test");

    let first = run_child(&dir.0, "first");
    assert!(first.compilations >= 1, "first process compiled nothing");
    assert!(
        first.loads.iter().all(|l| !l.1),
        "a module came from an empty cache: {first:?}"
    );
    let files = cache_files(&dir.0);
    assert!(
        !files.is_empty(),
        "the first process wrote nothing into {}",
        dir.0.display()
    );

    let second = run_child(&dir.0, "second");
    assert_eq!(second.compilations, 0, "the second process compiled");
    assert!(
        !second.loads.is_empty(),
        "the second process loaded no module"
    );
    for (family, cached, nvrtc_ms) in &second.loads {
        assert!(
            *cached,
            "{family} was not loaded from the cache: {second:?}"
        );
        assert_eq!(
            *nvrtc_ms, 0.0,
            "{family}: NVRTC time reported for a cached module"
        );
    }

    for file in &files {
        let mut bytes = std::fs::read(file).unwrap();
        let len = bytes.len();
        for i in [len / 2, len - 1] {
            bytes[i] ^= 0x5a;
        }
        std::fs::write(file, &bytes).unwrap();
    }
    let third = run_child(&dir.0, "after corruption");
    assert_eq!(
        third.compilations, first.compilations,
        "corrupted entries were not all compiled again: {third:?}"
    );
    assert!(
        third.loads.iter().all(|l| !l.1),
        "a corrupted entry was loaded: {third:?}"
    );

    let fourth = run_child(&dir.0, "after rewriting");
    assert_eq!(
        fourth.compilations, 0,
        "the rewritten entries were not used"
    );
    assert!(fourth.loads.iter().all(|l| l.1), "{fourth:?}");
}

/// Set in a child process: the largest file it may write, in bytes (`RLIMIT_FSIZE`), which
/// makes every larger write fail as on a full disk.
const FILE_SIZE_LIMIT: &str = "GPU_DOT_TEST_CACHE_FSIZE";

/// One GPU product of each element type (f32 on the tiled kernels, f64 on the naive one: two
/// families that compile in well under a second), checked, then the report line.
fn child() {
    if let Ok(limit) = std::env::var(FILE_SIZE_LIMIT) {
        let limit: u64 = limit.parse().expect("a byte count");
        // SAFETY: ignoring SIGXFSZ (so that a write past the limit fails with EFBIG instead
        // of killing the process) and lowering this process's own file-size limit affect
        // nothing but this child.
        unsafe {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let rl = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &rl), 0, "setrlimit");
        }
    }
    assert!(
        matches!(device_status(), DeviceStatus::Ready(_)),
        "{}",
        device_status()
    );
    let first_ms = product::<f32>(Kernel::Tiled16);
    product::<f64>(Kernel::Naive);

    let context_ms = match device_status() {
        DeviceStatus::Ready(info) => info.context_ms,
        _ => f64::NAN,
    };
    let loads: Vec<String> = module_loads()
        .iter()
        .map(|l| format!("{}:{}:{}:{}", l.family, l.cached, l.nvrtc_ms, l.load_ms))
        .collect();
    println!(
        "{REPORT} compilations={} loads={} first_ms={first_ms:.2} context_ms={context_ms:.2}",
        nvrtc_compilations(),
        loads.join(",")
    );
}

/// One GPU product of `T`, checked against ndarray's `dot` and the reference; returns its
/// milliseconds.
fn product<T: TestElem>(kernel: Kernel) -> f64 {
    let (m, k, n) = (256, 256, 256);
    let a = random::<T>(m, k);
    let b = random::<T>(k, n);
    let start = Instant::now();
    let product = a
        .try_gpu_dot_with(
            &b,
            &DotOptions::builtin().backend(Backend::Gpu).kernel(kernel),
        )
        .expect("a GPU product");
    let ms = start.elapsed().as_secs_f64() * 1e3;
    assert!(product.route.is_gpu(), "{}", product.route);
    let expected = a.dot(&b);
    let max_diff = product
        .c
        .iter()
        .zip(expected.iter())
        .map(|(&x, &y)| (x.into_f64() - y.into_f64()).abs())
        .fold(0.0, f64::max);
    // 1e-3 in f32, as many ε in f64.
    let tolerance = scaled_tolerance::<T>(f64::from(1e-3f32));
    assert!(
        max_diff <= tolerance,
        "{}: differs from ndarray's dot by {max_diff}",
        T::DTYPE
    );
    assert_close(&product.c, &a, &b, "product in a child process");
    ms
}

/// Runs the test binary as a child with the cache in `dir`, and parses its report.
fn run_child(dir: &Path, label: &str) -> ChildReport {
    finish(spawn_child(dir, &[]), label)
}

/// Starts the test binary as a child with the cache in `dir` and the extra variables `env`.
fn spawn_child(dir: &Path, env: &[(&str, &str)]) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        // The disk cache serves devices the crate ships no CUBINs for: as on one of those.
        .env(gpu_dot::ENV_PREBUILT, "off")
        .args(["--exact", NAME, "--nocapture", "--include-ignored"])
        .env(CHILD, "1")
        .env(ENV_CACHE_DIR, dir)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for a child, asserts that it passed, and parses its report.
fn finish(child: std::process::Child, label: &str) -> ChildReport {
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{label} child failed ({})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let line = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix(REPORT))
        .unwrap_or_else(|| panic!("{label} child printed no report\nstdout:\n{stdout}"));
    println!("{label} process: {}", line.trim());
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("no {name} in {line:?}"))
    };
    let loads = field("loads")
        .split(',')
        .filter(|l| !l.is_empty())
        .map(|l| {
            let parts: Vec<&str> = l.split(':').collect();
            assert_eq!(parts.len(), 4, "bad module load {l:?}");
            (
                parts[0].to_string(),
                parts[1].parse().expect("true or false"),
                parts[2].parse().expect("milliseconds"),
            )
        })
        .collect();
    ChildReport {
        compilations: field("compilations").parse().expect("a count"),
        loads,
    }
}

/// The cache entries in `dir` (temporary files of unfinished writes left out).
fn cache_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    files.sort();
    files
}

/// The cache under stress, each time with a GPU product checked in every child process:
/// - four processes compiling into one empty folder at once: all succeed, the folder ends
///   with one entry per family and no temporary file, and a fifth process compiles nothing;
/// - truncated entries: compiled again and rewritten, never loaded;
/// - a folder that cannot be written (read-only, and a path through a regular file): only
///   compilations;
/// - a full disk: simulated by a file-size limit below a CUBIN's size (writes fail with
///   EFBIG), and, when `GPU_DOT_TEST_FULL_DIR` names a folder on a full filesystem (a small
///   tmpfs, filled), on that too: only compilations, and no temporary file left behind.
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_cache_under_stress_costs_at_most_a_compilation() {
    let dir = TempDir::new("cache-test");
    // Four at once into the same empty folder.
    let children: Vec<_> = (0..4).map(|_| spawn_child(&dir.0, &[])).collect();
    let reports: Vec<ChildReport> = children
        .into_iter()
        .enumerate()
        .map(|(i, c)| finish(c, &format!("concurrent {i}")))
        .collect();
    let families = reports[0].loads.len();
    assert!(families >= 1);
    let files = cache_files(&dir.0);
    assert_eq!(
        files.len(),
        families,
        "entries after concurrent writers: {files:?}"
    );
    assert_eq!(temp_files(&dir.0), 0, "temporary files left behind");
    let after = run_child(&dir.0, "after the concurrent writers");
    assert_eq!(after.compilations, 0, "{after:?}");

    // Truncated entries: to half their length, and to nothing.
    for (i, file) in files.iter().enumerate() {
        let len = std::fs::metadata(file).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(file).unwrap();
        f.set_len(if i % 2 == 0 { len / 2 } else { 0 }).unwrap();
    }
    let truncated = run_child(&dir.0, "after truncation");
    assert_eq!(truncated.compilations, families, "{truncated:?}");
    assert!(truncated.loads.iter().all(|l| !l.1), "{truncated:?}");
    let rewritten = run_child(&dir.0, "after rewriting");
    assert_eq!(rewritten.compilations, 0, "{rewritten:?}");

    // A folder that cannot be written: read-only (root writes anyway, so also a path that
    // runs through a regular file).
    let ro = TempDir::new("cache-test");
    std::fs::set_permissions(&ro.0, std::os::unix::fs::PermissionsExt::from_mode(0o555)).unwrap();
    let report = run_child(&ro.0, "read-only folder");
    assert_eq!(report.compilations, families, "{report:?}");
    let root_writes = !cache_files(&ro.0).is_empty();
    println!("read-only folder written anyway (running as root): {root_writes}");
    std::fs::set_permissions(&ro.0, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let file = dir.0.join("a-regular-file");
    std::fs::write(&file, b"not a folder").unwrap();
    let report = run_child(&file.join("cache"), "a path through a regular file");
    assert_eq!(report.compilations, families, "{report:?}");

    // A full disk, simulated: no file may grow past 4 KiB (a CUBIN is larger).
    let full = TempDir::new("cache-test");
    let report = finish(
        spawn_child(&full.0, &[(FILE_SIZE_LIMIT, "4096")]),
        "file-size limit",
    );
    assert_eq!(report.compilations, families, "{report:?}");
    assert!(
        cache_files(&full.0).is_empty(),
        "an entry was written past the limit"
    );
    assert_eq!(temp_files(&full.0), 0, "temporary files left behind");
    // And a real full filesystem, when the run provides one.
    match std::env::var_os("GPU_DOT_TEST_FULL_DIR") {
        Some(full) => {
            let full = PathBuf::from(full);
            let before = std::fs::read_dir(&full).unwrap().count();
            let report = run_child(&full, "full filesystem");
            assert_eq!(report.compilations, families, "{report:?}");
            assert_eq!(
                std::fs::read_dir(&full).unwrap().count(),
                before,
                "the full filesystem gained a file"
            );
        }
        None => println!("no full filesystem given (GPU_DOT_TEST_FULL_DIR): simulated only"),
    }
}

/// Temporary files of unfinished cache writes in `dir`.
fn temp_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
                .count()
        })
        .unwrap_or(0)
}

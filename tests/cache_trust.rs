//! The kernel cache trusts only folders that are the user's alone (src/device/trust.rs): with
//! `GPU_DOT_CACHE_DIR` at a folder others may write to, or one another user owns, a child
//! process finds the cache off (`kernel_cache_dir()` is `None`), hears one warning through
//! `log` naming the folder and the reason, writes nothing there, and still multiplies
//! correctly. Runs with or without a GPU (without one, products run on the CPU), as root (CI)
//! and as a normal user. The entries' own checks (owner, mode, links, temporary files) are unit
//! tests in src/device/cache.rs, which reach the cache's reading and writing directly.
#![cfg(unix)]

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{assert_close, random, TempDir, RECORDS};
use gpu_dot::{kernel_cache_dir, GpuDot, ENV_CACHE_DIR};
use log::{Level, LevelFilter};
use ndarray::Array2;

/// Set in a child process: what it should find, `refused:REASON` or `used`.
const EXPECT: &str = "GPU_DOT_TEST_TRUST_EXPECT";

#[test]
fn a_folder_others_may_write_to_is_refused() {
    if is_child() {
        return child();
    }
    for mode in [0o777, 0o1777, 0o775] {
        let dir = TempDir::new("trust-test");
        set_mode(&dir.0, mode);
        run_child(
            "a_folder_others_may_write_to_is_refused",
            &dir.0,
            &format!("refused:may be written by its group or others (mode {mode:o})"),
        );
        assert_eq!(
            std::fs::metadata(&dir.0).unwrap().permissions().mode() & 0o7777,
            mode,
            "the folder's mode was changed"
        );
        assert_empty(&dir.0);
    }
}

#[test]
fn a_folder_of_another_user_is_refused() {
    if is_child() {
        return child();
    }
    let dir = TempDir::new("trust-test");
    let me = std::fs::metadata(&dir.0).unwrap().uid();
    let folder = if me == 0 {
        std::os::unix::fs::chown(&dir.0, Some(65534), Some(65534)).unwrap();
        dir.0.clone()
    } else {
        // A normal user cannot give a folder away; a folder of root's stands in.
        let root_owned = ["/usr", "/"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| std::fs::metadata(p).is_ok_and(|m| m.uid() != me));
        match root_owned {
            Some(folder) => {
                println!(
                    "not root: a folder cannot be given to another user; using {}, which \
                     another user owns",
                    folder.display()
                );
                folder
            }
            None => {
                println!("skipped: not root, and no folder of another user's was found");
                return;
            }
        }
    };
    run_child(
        "a_folder_of_another_user_is_refused",
        &folder,
        "refused:is owned by user",
    );
    if folder == dir.0 {
        assert_empty(&dir.0);
    }
}

/// The checks refuse nothing they should not: a folder of the user's own is used.
#[test]
fn a_folder_of_the_users_own_is_used() {
    if is_child() {
        return child();
    }
    let dir = TempDir::new("trust-test");
    for mode in [0o700, 0o755] {
        set_mode(&dir.0, mode);
        run_child("a_folder_of_the_users_own_is_used", &dir.0, "used");
    }
}

fn is_child() -> bool {
    std::env::var_os(EXPECT).is_some()
}

/// Runs the test `name` of this binary as a child with the cache in `dir`, expecting `expect`.
fn run_child(name: &str, dir: &Path, expect: &str) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture"])
        .env(EXPECT, expect)
        .env(ENV_CACHE_DIR, dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("cache-trust-child: ok"),
        "{name} child ({expect}, {}) failed ({})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        dir.display(),
        out.status
    );
    println!("{name}: {} {expect}: ok", dir.display());
}

/// In the child: the cache as expected, the warnings about it, and products that are right.
fn child() {
    log::set_logger(&common::CAPTURE).expect("no other logger in this process");
    log::set_max_level(LevelFilter::Trace);
    let expect = std::env::var(EXPECT).unwrap();
    let dir = PathBuf::from(std::env::var_os(ENV_CACHE_DIR).unwrap());

    let in_force = kernel_cache_dir();
    products();
    assert_eq!(kernel_cache_dir(), in_force, "the decision changed");

    let warnings: Vec<String> = RECORDS
        .lock()
        .unwrap()
        .iter()
        .filter(|(level, m)| *level == Level::Warn && m.contains("kernel cache"))
        .map(|(_, m)| m.clone())
        .collect();
    match expect.strip_prefix("refused:") {
        Some(reason) => {
            assert_eq!(in_force, None, "the cache uses {}", dir.display());
            assert_eq!(warnings.len(), 1, "one warning: {warnings:?}");
            let folder = dir.display().to_string();
            assert!(warnings[0].contains(&folder), "{warnings:?}");
            assert!(warnings[0].contains(reason), "{warnings:?}");
        }
        None => {
            assert_eq!(in_force, Some(dir));
            assert_eq!(warnings, Vec::<String>::new());
        }
    }
    println!("cache-trust-child: ok");
}

/// Products large enough for the GPU where there is one: f64 on small integers, exact on any
/// route, and f32 against the reference.
fn products() {
    let (m, k, n) = (200, 180, 190);
    let a = Array2::from_shape_fn((m, k), |(i, j)| ((i * 7 + j * 3) % 11) as f64 - 5.0);
    let b = Array2::from_shape_fn((k, n), |(i, j)| ((i * 5 + j * 2) % 13) as f64 - 6.0);
    let exact = Array2::from_shape_fn((m, n), |(i, j)| {
        (0..k).map(|l| a[[i, l]] * b[[l, j]]).sum::<f64>()
    });
    assert_eq!(a.gpu_dot(&b), exact);
    let (a, b) = (random::<f32>(m, k), random::<f32>(k, n));
    assert_close(&a.gpu_dot(&b), &a, &b, "f32 with the cache refused");
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Nothing was written into `dir`.
fn assert_empty(dir: &Path) {
    let names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        names.is_empty(),
        "written into {}: {names:?}",
        dir.display()
    );
}

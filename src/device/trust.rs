//! What the kernel cache trusts: a folder, and files in it, that only the process's own user
//! can have written. A cache entry is code the process runs on the GPU with its own context
//! (a kernel can read and write every buffer of that context), so, as ssh and gpg refuse key
//! folders that others can write to, the cache refuses:
//!
//! - a folder not owned by the process's effective user, or that its group or others may
//!   write to; the folders the process makes for the cache (the folder itself and any missing
//!   ones above it) are made with mode 0700 and checked the same way once made, so that one
//!   made by someone else in between is refused too;
//! - an entry that is not a regular file (a symbolic link, a FIFO, ...), not owned by the
//!   process's effective user, or that its group or others may write to. The file is opened
//!   without following a link and checked through the opened descriptor, so that nothing can
//!   be swapped in between the check and the read;
//! - a temporary file it did not create itself: each is created anew (`O_EXCL`, mode 0600,
//!   never through a link) and renamed within the folder, so that no write follows a link
//!   planted there.
//!
//! The folders above the cache folder that existed already are not checked: whoever can
//! rename them can move the whole cache, and entries still have to pass their own checks.
//! Access control lists are not read.
//!
//! On platforms other than Unix (Windows) there are no owners and modes to check: the folder is
//! made with the platform's defaults, entries must be regular files, and temporary files are
//! still created anew; who may write to the folder is up to its access control list
//! (`%LOCALAPPDATA%`, the default, is the user's own).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

#[cfg(unix)]
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};

/// Makes `dir` if it is missing (mode 0700, with the missing folders above it) and checks that
/// the cache may use it. `Err` holds why not, for a warning.
pub(crate) fn open_folder(dir: &Path) -> Result<(), String> {
    open_folder_missing(dir, &missing_folders(dir))
}

/// `dir` and the folders above it that do not exist, bottom up.
fn missing_folders(dir: &Path) -> Vec<PathBuf> {
    let absent =
        |p: &Path| matches!(fs::symlink_metadata(p), Err(e) if e.kind() == io::ErrorKind::NotFound);
    dir.ancestors()
        .filter(|a| !a.as_os_str().is_empty())
        .take_while(|a| absent(a))
        .map(Path::to_path_buf)
        .collect()
}

/// [`open_folder`] with `missing` (from [`missing_folders`]) the folders to make.
fn open_folder_missing(dir: &Path, missing: &[PathBuf]) -> Result<(), String> {
    if missing.is_empty() {
        // An existing folder: a link to one of the user's own folders is fine.
        let meta = fs::metadata(dir).map_err(|e| format!("it cannot be read: {e}"))?;
        if !meta.is_dir() {
            return Err("it is not a folder".into());
        }
        return owned_and_private(&meta).map_err(|why| format!("it {why}"));
    }
    make_folders(dir).map_err(|e| format!("it could not be made: {e}"))?;
    // Top down, each folder made (or, after a race, found) where a missing one was: a folder,
    // not a link, and the user's own.
    for made in missing.iter().rev() {
        let subject = if made == dir {
            "it".to_string()
        } else {
            format!("{}, a folder made above it,", made.display())
        };
        let meta = fs::symlink_metadata(made).map_err(|e| format!("{subject} is gone: {e}"))?;
        if !meta.is_dir() {
            return Err(format!("{subject} is not a folder"));
        }
        owned_and_private(&meta).map_err(|why| format!("{subject} {why}"))?;
    }
    Ok(())
}

#[cfg(unix)]
fn make_folders(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(not(unix))]
fn make_folders(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)
}

/// The process's effective user.
#[cfg(unix)]
pub(crate) fn euid() -> u32 {
    // SAFETY: geteuid takes nothing, touches no memory of the caller's and always succeeds.
    unsafe { libc::geteuid() }
}

/// `Ok` when the file or folder of `meta` is the process user's own and neither its group nor
/// others may write to it; else why not.
#[cfg(unix)]
pub(crate) fn owned_and_private(meta: &fs::Metadata) -> Result<(), String> {
    let (uid, mode) = (meta.uid(), meta.permissions().mode());
    if uid != euid() {
        return Err(format!(
            "is owned by user {uid}, not by this process's user ({})",
            euid()
        ));
    }
    if mode & 0o022 != 0 {
        return Err(format!(
            "may be written by its group or others (mode {:o})",
            mode & 0o7777
        ));
    }
    Ok(())
}

/// Without owners and modes to check: every file and folder passes.
#[cfg(not(unix))]
pub(crate) fn owned_and_private(_meta: &fs::Metadata) -> Result<(), String> {
    Ok(())
}

/// Opens the entry at `path` for reading if it passes (a regular file, the user's own, not
/// writable by group or others), checked on the opened file; `Ok(None)` when there is no
/// file, `Err` with why one was refused.
pub(crate) fn open_entry(path: &Path) -> Result<Option<File>, String> {
    let mut options = OpenOptions::new();
    options.read(true);
    // No link is followed, and a FIFO planted at the name does not block the open.
    #[cfg(unix)]
    options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    let file = match options.open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(match fs::symlink_metadata(path) {
                Ok(meta) if meta.file_type().is_symlink() => "is a symbolic link".into(),
                _ => format!("cannot be opened: {e}"),
            })
        }
    };
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot be examined: {e}"))?;
    if !meta.is_file() {
        return Err("is not a regular file".into());
    }
    owned_and_private(&meta)?;
    Ok(Some(file))
}

/// Creates a new file at `path` for writing, mode 0600: never one that exists, and never
/// through a link (`AlreadyExists` then).
pub(crate) fn create_new(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    options.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    options.open(path)
}

/// What the tests of the cache share: fresh folders, and a product checked against its exact
/// value (each test of a refused folder or an ignored entry ends with one).
#[cfg(test)]
pub(crate) mod test_support {
    use std::fs;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A fresh folder under the system's temporary folder, removed on drop.
    pub(crate) struct TempDir(pub(crate) PathBuf);

    impl TempDir {
        pub(crate) fn new(name: &str) -> TempDir {
            static N: AtomicU64 = AtomicU64::new(0);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos();
            let dir = std::env::temp_dir().join(format!(
                "gpu-dot-cache-test-{name}-{}-{nanos}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    /// A product on the default route (the GPU where there is one and the product is large
    /// enough, else the CPU) equals its exact value.
    pub(crate) fn a_product_is_right() {
        use crate::GpuDot;
        use ndarray::Array2;
        // Small integers and halves: every product and sum is exact in f64, on any route.
        let (m, k, n) = (160, 150, 140);
        let a = Array2::from_shape_fn((m, k), |(i, j)| ((i * 7 + j * 3) % 11) as f64 - 5.0);
        let b = Array2::from_shape_fn((k, n), |(i, j)| ((i * 5 + j * 2) % 13) as f64 * 0.5 - 3.0);
        let c = a.gpu_dot(&b);
        let exact = Array2::from_shape_fn((m, n), |(i, j)| {
            (0..k).map(|l| a[[i, l]] * b[[l, j]]).sum::<f64>()
        });
        assert_eq!(c, exact);
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::test_support::{a_product_is_right, TempDir};
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
    }

    fn set_mode(path: &Path, mode: u32) {
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn the_folders_made_are_the_users_alone() {
        let tmp = TempDir::new("made");
        let dir = tmp.0.join("a").join("b").join("kernels");
        open_folder(&dir).unwrap();
        for made in [tmp.0.join("a"), tmp.0.join("a").join("b"), dir.clone()] {
            assert_eq!(mode(&made) & 0o077, 0, "{}", made.display());
            assert_eq!(fs::metadata(&made).unwrap().uid(), euid());
        }
        // Made once, it is an existing folder that passes.
        open_folder(&dir).unwrap();
        // An existing folder keeps its mode: 0755 is the user's own too.
        set_mode(&dir, 0o755);
        open_folder(&dir).unwrap();
        assert_eq!(mode(&dir), 0o755);
        a_product_is_right();
    }

    #[test]
    fn a_folder_others_may_write_to_is_refused() {
        let tmp = TempDir::new("writable");
        for bad in [0o777, 0o1777, 0o770, 0o702] {
            set_mode(&tmp.0, bad);
            let why = open_folder(&tmp.0).unwrap_err();
            assert!(
                why.contains("written by its group or others"),
                "{bad:o}: {why}"
            );
            assert_eq!(mode(&tmp.0), bad, "the folder's mode was changed");
        }
        set_mode(&tmp.0, 0o700);
        a_product_is_right();
    }

    #[test]
    fn a_folder_made_by_someone_else_in_between_is_refused() {
        let tmp = TempDir::new("race");
        let dir = tmp.0.join("x").join("kernels");
        let missing = missing_folders(&dir);
        assert_eq!(missing, [dir.clone(), tmp.0.join("x")]);
        // Between the look and the making, another user's process makes `x`, open to all.
        fs::create_dir(tmp.0.join("x")).unwrap();
        set_mode(&tmp.0.join("x"), 0o777);
        let why = open_folder_missing(&dir, &missing).unwrap_err();
        assert!(
            why.contains("a folder made above it, may be written by its group or others"),
            "{why}"
        );
        // A link in place of a folder to make.
        let missing = missing_folders(&tmp.0.join("y").join("kernels"));
        std::os::unix::fs::symlink(&tmp.0, tmp.0.join("y")).unwrap();
        let why = open_folder_missing(&tmp.0.join("y").join("kernels"), &missing).unwrap_err();
        assert!(why.contains("is not a folder"), "{why}");
        a_product_is_right();
    }

    #[test]
    fn a_folder_above_that_existed_is_not_judged() {
        let tmp = TempDir::new("above");
        set_mode(&tmp.0, 0o777);
        open_folder(&tmp.0.join("x").join("kernels")).unwrap();
        assert_eq!(mode(&tmp.0.join("x")) & 0o077, 0);
        set_mode(&tmp.0, 0o700);
    }

    #[test]
    fn a_folder_of_another_user_is_refused() {
        let tmp = TempDir::new("owner");
        if euid() == 0 {
            std::os::unix::fs::chown(&tmp.0, Some(65534), Some(65534)).unwrap();
            let why = open_folder(&tmp.0).unwrap_err();
            assert!(why.contains("owned by user 65534"), "{why}");
        } else {
            println!("not root: the folder cannot be given away; checking / instead");
            let why = open_folder(Path::new("/")).unwrap_err();
            assert!(why.contains("is owned by user"), "{why}");
        }
        a_product_is_right();
    }

    #[test]
    fn a_file_in_the_way_is_no_folder() {
        let tmp = TempDir::new("file");
        let file = tmp.0.join("plain-file");
        fs::write(&file, b"not a folder").unwrap();
        assert!(open_folder(&file).unwrap_err().contains("not a folder"));
        let why = open_folder(&file.join("kernels")).unwrap_err();
        assert!(why.starts_with("it cannot be read"), "{why}");
    }

    #[test]
    fn new_files_are_private_and_never_through_a_link() {
        let tmp = TempDir::new("create");
        let path = tmp.0.join("entry");
        drop(create_new(&path).unwrap());
        assert_eq!(mode(&path) & 0o077, 0);
        assert_eq!(
            create_new(&path).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        // A dangling link: following it would make the file it names.
        let target = tmp.0.join("target");
        let link = tmp.0.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert_eq!(
            create_new(&link).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        assert!(!target.exists());
    }
}

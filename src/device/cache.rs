//! Compiled kernels: NVRTC compiles a family's source to a CUBIN for the device's own
//! architecture, and an on-disk cache keeps those CUBINs so that a later process loads them
//! without NVRTC (and, being CUBINs rather than PTX, without the driver's JIT either).
//!
//! An entry is keyed by everything that decides the compiled code: the kernel sources
//! ([`KERNELS_HASH`](crate::device::KERNELS_HASH), and a hash of the exact text NVRTC compiles), the
//! family, the exact NVRTC options, the architecture (`sm_XY`), the CUDA driver version and
//! the NVRTC version. Its file name is a hash of that key, and the file holds a header (magic
//! bytes, format version, the full key, the payload's length and an FNV-1a checksum of the
//! payload) before the CUBIN. An entry that is missing, truncated, foreign (another key),
//! damaged or refused by the driver is compiled again and rewritten; writes go to a new
//! temporary file in the same folder, then are renamed into place. A cache that cannot be read
//! or written only costs a compilation: it never fails a product.
//!
//! Entries are code that runs with the process's CUDA context, so the cache trusts only a
//! folder and files that the process's own user alone can have written ([`trust`]): a folder
//! that fails is not used for the rest of the process (one warning says why), and an entry
//! that fails is never loaded.
//!
//! The folder is `GPU_DOT_CACHE_DIR` ([`ENV_CACHE_DIR`]) when set (`off`, `0`, `none` or an
//! empty value turn the cache off), else the platform's cache folder: `$XDG_CACHE_HOME/gpu-dot`
//! or `$HOME/.cache/gpu-dot` on Linux, `$HOME/Library/Caches/gpu-dot` on macOS,
//! `%LOCALAPPDATA%\gpu-dot` on Windows. [`kernel_cache_dir`] says which is in force.

use std::ffi::{c_char, CString, OsStr, OsString};
use std::fs;
use std::io;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use cudarc::nvrtc::{result as nvrtc, sys as nvrtc_sys, CompileError};
use once_cell::sync::OnceCell;

use crate::device::trust;
use crate::error::GpuDotError;

pub use crate::settings::ENV_CACHE_DIR;

/// The folder the compiled-kernel cache uses, or `None` when the cache is off
/// (`GPU_DOT_CACHE_DIR=off`), no folder can be found (no `HOME`), or the folder is refused
/// because another user owns it or its group or others may write to it (see the crate docs,
/// "Kernel cache").
///
/// The folder need not exist yet: it is made (mode 0700) when the first kernel is compiled.
pub fn kernel_cache_dir() -> Option<PathBuf> {
    let dir = configured_dir()?;
    let exists = fs::symlink_metadata(&dir).is_ok();
    (!exists || usable(&dir)).then_some(dir)
}

/// The folder `GPU_DOT_CACHE_DIR` or the platform names, trusted or not.
fn configured_dir() -> Option<PathBuf> {
    cache_dir_from(|name| match name {
        ENV_CACHE_DIR => crate::settings::var_os(ENV_CACHE_DIR),
        other => std::env::var_os(other),
    })
}

/// Whether the cache may use `dir`, made if need be ([`trust::open_folder`]). Decided once per
/// folder and process: a refused folder is named in one warning and stays refused.
fn usable(dir: &Path) -> bool {
    static DECIDED: Mutex<Vec<(PathBuf, bool)>> = Mutex::new(Vec::new());
    let mut decided = DECIDED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, ok)) = decided.iter().find(|(d, _)| d == dir) {
        return *ok;
    }
    let ok = match trust::open_folder(dir) {
        Ok(()) => true,
        Err(why) => {
            log::warn!(
                "the kernel cache is off: {} is not used, as {why}; kernels are compiled \
                 (or the shipped ones loaded) instead",
                dir.display()
            );
            false
        }
    };
    decided.push((dir.to_path_buf(), ok));
    ok
}

/// [`kernel_cache_dir`] with variables looked up through `lookup`.
fn cache_dir_from(lookup: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    match setting(lookup(ENV_CACHE_DIR).as_deref()) {
        Setting::Default => default_dir(&lookup),
        Setting::Off => None,
        Setting::Dir(dir) => Some(dir),
    }
}

/// What a `GPU_DOT_CACHE_DIR` value asks for.
#[derive(Debug, PartialEq)]
enum Setting {
    /// Unset: the platform's cache folder.
    Default,
    /// No cache.
    Off,
    /// This folder.
    Dir(PathBuf),
}

fn setting(value: Option<&OsStr>) -> Setting {
    let Some(value) = value else {
        return Setting::Default;
    };
    match value.to_str().map(|s| s.trim().to_ascii_lowercase()) {
        Some(s) if matches!(s.as_str(), "" | "off" | "0" | "none") => Setting::Off,
        _ => Setting::Dir(PathBuf::from(value)),
    }
}

/// The platform's cache folder for the crate; relative or empty variables are ignored.
fn default_dir(lookup: &impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let absolute = |name: &str| lookup(name).map(PathBuf::from).filter(|p| p.is_absolute());
    let base = if cfg!(windows) {
        absolute("LOCALAPPDATA")
    } else if cfg!(target_os = "macos") {
        absolute("HOME").map(|home| home.join("Library").join("Caches"))
    } else {
        absolute("XDG_CACHE_HOME").or_else(|| absolute("HOME").map(|home| home.join(".cache")))
    };
    base.map(|dir| dir.join("gpu-dot"))
}

/// The NVRTC options every kernel family is compiled with, for architecture `arch` (`sm_XY`,
/// or `sm_90a`): the same at run time and for the prebuilt images.
pub(crate) fn nvrtc_options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
    ]
}

/// Compiles `source` (the family `family`) with NVRTC and returns the CUBIN. On failure the
/// error carries NVRTC's log.
pub(crate) fn compile(
    family: &'static str,
    source: &str,
    options: &[String],
) -> Result<Vec<u8>, GpuDotError> {
    let failed = |what: &str, e: nvrtc::NvrtcError| GpuDotError::Compile {
        kernel: family,
        log: format!("{what} failed: {e:?}"),
    };
    let src = CString::new(source).map_err(|_| GpuDotError::Compile {
        kernel: family,
        log: "the source holds a NUL byte".into(),
    })?;
    let name = CString::new(format!("{family}.cu")).expect("family names hold no NUL");
    let program = Program(
        nvrtc::create_program(&src, Some(&name))
            .map_err(|e| GpuDotError::compile(family, CompileError::CreationError(e)))?,
    );
    // SAFETY: `program` is a live program (destroyed only when it drops), and `src` and
    // `name`, which it may point into, outlive it.
    unsafe {
        if let Err(e) = nvrtc::compile_program(program.0, options) {
            let log = nvrtc::get_program_log(program.0)
                .map(|raw| c_string(&raw))
                .unwrap_or_default();
            return Err(GpuDotError::compile(
                family,
                CompileError::CompileError {
                    nvrtc: e,
                    options: options.to_vec(),
                    log,
                },
            ));
        }
        let mut size = 0usize;
        nvrtc_sys::nvrtcGetCUBINSize(program.0, &mut size)
            .result()
            .map_err(|e| failed("nvrtcGetCUBINSize", e))?;
        if size == 0 {
            return Err(GpuDotError::Compile {
                kernel: family,
                log: format!(
                    "NVRTC made no CUBIN (options: {}): a real sm_XY architecture is needed",
                    options.join(" ")
                ),
            });
        }
        let mut cubin = vec![0u8; size];
        nvrtc_sys::nvrtcGetCUBIN(program.0, cubin.as_mut_ptr().cast::<c_char>())
            .result()
            .map_err(|e| failed("nvrtcGetCUBIN", e))?;
        Ok(cubin)
    }
}

/// An NVRTC program, destroyed on drop.
struct Program(nvrtc_sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: made by `create_program` and destroyed only here.
        let _ = unsafe { nvrtc::destroy_program(self.0) };
    }
}

/// NVRTC's NUL-terminated log as a `CString`.
fn c_string(raw: &[c_char]) -> CString {
    let bytes: Vec<u8> = raw
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    CString::new(bytes).unwrap_or_default()
}

/// The CUDA driver and NVRTC versions, as they appear in a key; `None` when either cannot be
/// read, which turns the cache off (an entry must never outlive a toolchain change).
fn toolchain() -> Option<&'static str> {
    static TOOLCHAIN: OnceCell<Option<String>> = OnceCell::new();
    TOOLCHAIN
        .get_or_init(|| {
            let mut driver = 0;
            // SAFETY: called once the context exists, so both libraries are loaded; each call
            // only writes the integers it is given.
            unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver) }
                .result()
                .ok()?;
            let (mut major, mut minor) = (0, 0);
            unsafe { nvrtc_sys::nvrtcVersion(&mut major, &mut minor) }
                .result()
                .ok()?;
            Some(format!("driver={driver}\nnvrtc={major}.{minor}"))
        })
        .as_deref()
}

/// What identifies one compiled module.
#[derive(Debug, Clone, PartialEq)]
struct Key {
    /// The full key, stored in the entry and compared on every read.
    text: String,
    /// `{family}-{hash of text}.cubin`.
    file_name: String,
}

impl Key {
    fn new(family: &str, source: &str, options: &[String], arch: &str, toolchain: &str) -> Key {
        let text = format!(
            "gpu-dot compiled kernels\nimage=cubin\nkernels={}\nfamily={family}\n\
             source={:016x}\narch={arch}\n{toolchain}\noptions={options:?}",
            crate::device::KERNELS_HASH,
            fnv1a(source.as_bytes())
        );
        let file_name = format!("{family}-{:016x}.cubin", fnv1a(text.as_bytes()));
        Key { text, file_name }
    }
}

/// One module's place in the cache.
#[derive(Debug)]
pub(crate) struct Entry {
    dir: PathBuf,
    key: Key,
}

impl Entry {
    /// The entry of `family` (its text `source`) compiled with `options` for `arch` on this
    /// machine's driver and NVRTC, or `None` when the cache is off.
    pub(crate) fn for_module(
        family: &str,
        source: &str,
        options: &[String],
        arch: &str,
    ) -> Option<Entry> {
        let dir = configured_dir().filter(|dir| usable(dir))?;
        Some(Entry {
            dir,
            key: Key::new(family, source, options, arch, toolchain()?),
        })
    }

    fn path(&self) -> PathBuf {
        self.dir.join(&self.key.file_name)
    }

    /// The cached CUBIN, or `None` when there is no valid entry for this key. A file the
    /// cache does not trust ([`trust::open_entry`]) is never read, with a warning.
    pub(crate) fn read(&self) -> Option<Vec<u8>> {
        let path = self.path();
        let mut file = match trust::open_entry(&path) {
            Ok(file) => file?,
            Err(why) => {
                log::warn!(
                    "the kernel cache entry {} is not loaded, as it {why}",
                    path.display()
                );
                return None;
            }
        };
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).ok()?;
        decode(&bytes, &self.key.text)
    }

    /// Stores `payload` for this key, replacing any entry atomically. A failure leaves the
    /// cache as it was; the caller may ignore it.
    pub(crate) fn write(&self, payload: &[u8]) -> io::Result<()> {
        static TEMPS: AtomicU64 = AtomicU64::new(0);
        self.write_numbered(payload, &TEMPS)
    }

    /// [`write`](Self::write) through a temporary file `.{entry}.{pid}-{n}.tmp`, `n` drawn
    /// from `temps`. The file is created anew ([`trust::create_new`]): a name already taken
    /// (by a link planted there, say) is passed over for the next, and after
    /// [`TEMP_TRIES`] taken names the write fails; nothing is written through a link.
    fn write_numbered(&self, payload: &[u8], temps: &AtomicU64) -> io::Result<()> {
        let mut tries = 0;
        let (temp, mut file) = loop {
            let temp = self.temp_path(temps.fetch_add(1, Ordering::Relaxed));
            match trust::create_new(&temp) {
                Ok(file) => break (temp, file),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries + 1 < TEMP_TRIES => {
                    tries += 1;
                }
                Err(e) => return Err(e),
            }
        };
        let written = file
            .write_all(&encode(&self.key.text, payload))
            .and_then(|()| {
                drop(file);
                fs::rename(&temp, self.path())
            });
        if written.is_err() {
            let _ = fs::remove_file(&temp);
        }
        written
    }

    /// The `n`th temporary file name of this process for this entry.
    fn temp_path(&self, n: u64) -> PathBuf {
        self.dir.join(format!(
            ".{}.{}-{n}.tmp",
            self.key.file_name,
            std::process::id()
        ))
    }
}

/// Temporary names a write tries before it gives up.
const TEMP_TRIES: usize = 8;

/// The first bytes of every entry.
const MAGIC: [u8; 8] = *b"GPUDOTKC";
/// The entry layout's version, bumped whenever the layout changes.
const FORMAT: u32 = 1;

/// An entry: magic, format (u32), key length (u32), key, payload length (u64), payload
/// checksum (u64, FNV-1a), payload; integers little-endian.
fn encode(key: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + key.len() + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&fnv1a(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// The payload of `entry` if it is whole and was written for `key`.
fn decode(entry: &[u8], key: &str) -> Option<Vec<u8>> {
    let mut rest = entry;
    let mut take = |n: usize| -> Option<&[u8]> {
        let (head, tail) = rest.split_at_checked(n)?;
        rest = tail;
        Some(head)
    };
    let u32_at = |b: &[u8]| u32::from_le_bytes(b.try_into().expect("4 bytes"));
    let u64_at = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    if take(MAGIC.len())? != MAGIC || u32_at(take(4)?) != FORMAT {
        return None;
    }
    let key_len = u32_at(take(4)?) as usize;
    if take(key_len)? != key.as_bytes() {
        return None;
    }
    let len = u64_at(take(8)?);
    let checksum = u64_at(take(8)?);
    let payload = take(usize::try_from(len).ok()?)?;
    (rest.is_empty() && fnv1a(payload) == checksum).then(|| payload.to_vec())
}

/// 64-bit FNV-1a.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::trust::test_support::{a_product_is_right, TempDir};
    use std::path::Path;

    const SOURCE: &str = "extern \"C\" __global__ void f() {}";

    fn key(family: &str) -> Key {
        let options = ["--gpu-architecture=sm_90".to_string(), "--std=c++17".into()];
        Key::new(
            family,
            SOURCE,
            &options,
            "sm_90",
            "driver=12080\nnvrtc=12.8",
        )
    }

    fn entry(dir: &Path, family: &str) -> Entry {
        Entry {
            dir: dir.to_path_buf(),
            key: key(family),
        }
    }

    fn payload() -> Vec<u8> {
        (0..4099u32).map(|i| (i * 7 + 3) as u8).collect()
    }

    /// Rewrites the entry's file with `damage` applied, checks that it is rejected, then
    /// that a store makes it valid again.
    fn rejected_then_rebuilt(name: &str, damage: impl FnOnce(&mut Vec<u8>, &Path)) {
        let dir = TempDir::new(name);
        let e = entry(&dir.0, "tiled");
        e.write(&payload()).unwrap();
        let mut bytes = fs::read(e.path()).unwrap();
        damage(&mut bytes, &dir.0);
        fs::write(e.path(), &bytes).unwrap();
        assert_eq!(e.read(), None, "{name}: a damaged entry was accepted");
        e.write(&payload()).unwrap();
        assert_eq!(e.read(), Some(payload()), "{name}: not rebuilt");
    }

    #[test]
    fn round_trip() {
        let dir = TempDir::new("round-trip");
        let nested = dir.0.join("a").join("b");
        trust::open_folder(&nested).unwrap();
        let e = entry(&nested, "sgemm_fast");
        assert_eq!(e.read(), None, "nothing stored yet");
        e.write(&payload()).unwrap();
        assert_eq!(e.read(), Some(payload()));
        e.write(b"").unwrap();
        assert_eq!(
            e.read(),
            Some(Vec::new()),
            "an empty payload is an entry too"
        );
        let files: Vec<_> = fs::read_dir(&nested).unwrap().map(|f| f.unwrap()).collect();
        assert_eq!(files.len(), 1, "one file, no temporary left behind");
        assert_eq!(
            files[0].file_name().to_str(),
            Some(e.key.file_name.as_str())
        );
    }

    #[test]
    fn a_flipped_payload_byte_is_rejected() {
        rejected_then_rebuilt("flipped", |b, _| {
            let last = b.len() - 1;
            b[last] ^= 0x40;
        });
    }

    #[test]
    fn a_truncated_entry_is_rejected() {
        rejected_then_rebuilt("truncated", |b, _| b.truncate(b.len() - 1));
        rejected_then_rebuilt("header-only", |b, _| b.truncate(12));
        rejected_then_rebuilt("empty", |b, _| b.clear());
    }

    #[test]
    fn trailing_bytes_are_rejected() {
        rejected_then_rebuilt("trailing", |b, _| b.push(0));
    }

    #[test]
    fn a_wrong_magic_or_format_is_rejected() {
        rejected_then_rebuilt("magic", |b, _| b[0] = b'X');
        rejected_then_rebuilt("format", |b, _| b[MAGIC.len()] ^= 1);
    }

    #[test]
    fn a_foreign_entry_is_rejected() {
        // Another key's entry under this key's file name.
        rejected_then_rebuilt("foreign", |b, dir| {
            let other = entry(dir, "naive");
            *b = encode(&other.key.text, &payload());
            assert_ne!(other.key, key("tiled"));
        });
    }

    #[test]
    fn every_key_part_changes_the_key() {
        let options = |arch: &str| vec![format!("--gpu-architecture={arch}")];
        let make = |family, source, arch_option, arch, toolchain| {
            Key::new(family, source, &options(arch_option), arch, toolchain)
        };
        let (driver, nvrtc) = ("driver=1\nnvrtc=12.8", "driver=1\nnvrtc=12.9");
        let base = make("tiled", SOURCE, "sm_90", "sm_90", driver);
        let others = [
            make("naive", SOURCE, "sm_90", "sm_90", driver),
            make("tiled", "__global__ void g() {}", "sm_90", "sm_90", driver),
            make("tiled", SOURCE, "sm_80", "sm_90", driver),
            make("tiled", SOURCE, "sm_90", "sm_89", driver),
            make("tiled", SOURCE, "sm_90", "sm_90", "driver=2\nnvrtc=12.8"),
            make("tiled", SOURCE, "sm_90", "sm_90", nvrtc),
        ];
        assert!(base.text.contains(crate::device::KERNELS_HASH));
        for other in others {
            assert_ne!(base.text, other.text);
            assert_ne!(base.file_name, other.file_name);
        }
        assert_eq!(base, make("tiled", SOURCE, "sm_90", "sm_90", driver));
    }

    #[test]
    fn an_unwritable_folder_is_no_error() {
        let dir = TempDir::new("unwritable");
        // A folder below a plain file can be neither made nor written, even by root.
        let file = dir.0.join("plain-file");
        fs::write(&file, b"not a folder").unwrap();
        let e = entry(&file.join("cache"), "tiled");
        assert!(e.write(&payload()).is_err());
        assert_eq!(e.read(), None);
        let leftovers: Vec<_> = fs::read_dir(&dir.0).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "only the plain file");
    }

    #[test]
    fn env_values_that_turn_the_cache_off() {
        for off in ["off", "OFF", "0", "none", "None", "", "  ", " off "] {
            assert_eq!(setting(Some(OsStr::new(off))), Setting::Off, "{off:?}");
        }
        assert_eq!(setting(None), Setting::Default);
        assert_eq!(
            setting(Some(OsStr::new("/tmp/kernels"))),
            Setting::Dir(PathBuf::from("/tmp/kernels"))
        );
        assert_eq!(
            setting(Some(OsStr::new("offline"))),
            Setting::Dir(PathBuf::from("offline"))
        );
    }

    #[test]
    fn the_folder_in_force() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        assert_eq!(cache_dir_from(vars(&[(ENV_CACHE_DIR, "off")])), None);
        assert_eq!(
            cache_dir_from(vars(&[(ENV_CACHE_DIR, "/x/k"), ("HOME", "/home/u")])),
            Some(PathBuf::from("/x/k"))
        );
        assert_eq!(cache_dir_from(vars(&[])), None, "no HOME, no cache");
        if cfg!(all(unix, not(target_os = "macos"))) {
            assert_eq!(
                cache_dir_from(vars(&[("HOME", "/home/u")])),
                Some(PathBuf::from("/home/u/.cache/gpu-dot"))
            );
            assert_eq!(
                cache_dir_from(vars(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "/c")])),
                Some(PathBuf::from("/c/gpu-dot"))
            );
            assert_eq!(
                cache_dir_from(vars(&[("HOME", "/home/u"), ("XDG_CACHE_HOME", "rel")])),
                Some(PathBuf::from("/home/u/.cache/gpu-dot")),
                "a relative XDG_CACHE_HOME is ignored"
            );
            assert_eq!(cache_dir_from(vars(&[("HOME", "")])), None);
        }
        if cfg!(target_os = "macos") {
            assert_eq!(
                cache_dir_from(vars(&[("HOME", "/Users/u")])),
                Some(PathBuf::from("/Users/u/Library/Caches/gpu-dot"))
            );
        }
    }

    /// The mode bits of `path` (not following a link).
    #[cfg(unix)]
    fn mode(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[cfg(unix)]
    fn set_mode(path: &Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }

    /// A whole, valid entry that others may write to is never loaded; the next store replaces
    /// it with one of mode 0600.
    #[cfg(unix)]
    #[test]
    fn an_entry_others_may_write_to_is_ignored() {
        let dir = TempDir::new("entry-mode");
        let e = entry(&dir.0, "tiled");
        e.write(&payload()).unwrap();
        assert_eq!(mode(&e.path()) & 0o077, 0, "entries are written 0600");
        for bad in [0o666, 0o620, 0o602, 0o660] {
            set_mode(&e.path(), bad);
            assert_eq!(e.read(), None, "mode {bad:o}: loaded");
        }
        // The same bytes under a private mode: the entry itself is valid.
        set_mode(&e.path(), 0o644);
        assert_eq!(e.read(), Some(payload()));
        set_mode(&e.path(), 0o666);
        e.write(&payload()).unwrap();
        assert_eq!(mode(&e.path()) & 0o077, 0);
        assert_eq!(e.read(), Some(payload()));
        a_product_is_right();
    }

    /// A whole, valid entry owned by another user is never loaded (root gives it away; a
    /// normal user cannot, and says so).
    #[cfg(unix)]
    #[test]
    fn an_entry_of_another_user_is_ignored() {
        let dir = TempDir::new("entry-owner");
        let e = entry(&dir.0, "tiled");
        e.write(&payload()).unwrap();
        if trust::euid() == 0 {
            std::os::unix::fs::chown(e.path(), Some(65534), Some(65534)).unwrap();
            assert_eq!(e.read(), None, "another user's entry was loaded");
            std::os::unix::fs::chown(e.path(), Some(0), Some(0)).unwrap();
            assert_eq!(e.read(), Some(payload()), "the entry itself is valid");
            std::os::unix::fs::chown(e.path(), Some(65534), Some(65534)).unwrap();
            e.write(&payload()).unwrap();
            assert_eq!(e.read(), Some(payload()), "not rewritten as the user's own");
        } else {
            println!(
                "skipped the foreign entry: only root can give a file to another user \
                 (CI runs this part as root)"
            );
        }
        a_product_is_right();
    }

    /// A link at an entry's name, to a valid entry the user owns, is never followed; the next
    /// store replaces the link, not what it points to.
    #[cfg(unix)]
    #[test]
    fn a_linked_entry_is_ignored() {
        let dir = TempDir::new("entry-link");
        let elsewhere = TempDir::new("entry-link-target");
        let target = entry(&elsewhere.0, "tiled");
        target.write(&payload()).unwrap();
        let before = fs::read(target.path()).unwrap();
        let e = entry(&dir.0, "tiled");
        std::os::unix::fs::symlink(target.path(), e.path()).unwrap();
        assert_eq!(e.read(), None, "an entry was read through a link");
        e.write(&[1, 2, 3]).unwrap();
        assert!(fs::symlink_metadata(e.path()).unwrap().is_file());
        assert_eq!(e.read(), Some(vec![1, 2, 3]));
        assert_eq!(
            fs::read(target.path()).unwrap(),
            before,
            "written through the link"
        );
        a_product_is_right();
    }

    /// A FIFO at an entry's name neither blocks the read nor is loaded.
    #[cfg(unix)]
    #[test]
    fn a_fifo_at_an_entry_name_is_ignored() {
        let dir = TempDir::new("entry-fifo");
        let e = entry(&dir.0, "tiled");
        let path = std::ffi::CString::new(e.path().into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: `path` is a NUL-terminated string that outlives the call; mkfifo only makes
        // the node.
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
        assert_eq!(e.read(), None);
        e.write(&payload()).unwrap();
        assert_eq!(e.read(), Some(payload()));
        a_product_is_right();
    }

    /// Links planted at the temporary names a store will use (they are predictable): the
    /// store passes over them to a free name, or fails once [`TEMP_TRIES`] are taken, and the
    /// files they point to are never written.
    #[cfg(unix)]
    #[test]
    fn a_link_at_a_temporary_name_is_never_written_through() {
        let dir = TempDir::new("temp-link");
        let elsewhere = TempDir::new("temp-link-target");
        let victim = elsewhere.0.join("victim");
        fs::write(&victim, b"the user's own file").unwrap();
        let absent = elsewhere.0.join("absent");
        let e = entry(&dir.0, "tiled");
        let temps = AtomicU64::new(0);
        // The first name links to a file, the second to a file that does not exist.
        std::os::unix::fs::symlink(&victim, e.temp_path(0)).unwrap();
        std::os::unix::fs::symlink(&absent, e.temp_path(1)).unwrap();
        e.write_numbered(&payload(), &temps).unwrap();
        assert_eq!(temps.load(Ordering::Relaxed), 3, "the third name was used");
        assert_eq!(e.read(), Some(payload()));
        assert_eq!(fs::read(&victim).unwrap(), b"the user's own file");
        assert!(!absent.exists(), "a file was made through a dangling link");
        assert!(fs::symlink_metadata(e.temp_path(0))
            .unwrap()
            .file_type()
            .is_symlink());
        // Every name a store tries is taken: it fails, and the entry stays as it was.
        let next = temps.load(Ordering::Relaxed);
        for n in next..next + TEMP_TRIES as u64 {
            std::os::unix::fs::symlink(&victim, e.temp_path(n)).unwrap();
        }
        let err = e.write_numbered(b"other", &temps).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&victim).unwrap(), b"the user's own file");
        assert_eq!(e.read(), Some(payload()));
        a_product_is_right();
    }

    #[test]
    fn fnv1a_matches_the_reference_values() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }
}

//! Every environment variable the crate reads at run time, in one table: its name, the values
//! it accepts and a line on what it does. The messages of
//! [`GpuDotError::InvalidEnv`] are made from the same rows, so that what a variable accepts
//! and what its message says cannot drift apart. The public `ENV_*` names are defined here and
//! re-exported by the modules that read them; unit tests (src/settings_tests.rs) check the
//! code that reads each variable, the README's table of settings and the crate docs' against
//! this table.

use std::ffi::OsString;
use std::fmt;
use std::sync::{Mutex, OnceLock};

use crate::error::GpuDotError;

// The public names, re-exported by the modules that read them.

/// Environment variable choosing the backend: `auto`, `gpu` or `cpu`.
pub const ENV_BACKEND: &str = "GPU_DOT_BACKEND";
/// Environment variable choosing the kernel: `auto`, `naive`, `tiled16`, `tiled32`, `reg64`
/// or `reg128`.
pub const ENV_KERNEL: &str = "GPU_DOT_KERNEL";
/// Environment variable overriding [`DEFAULT_MIN_GPU_FLOPS`](crate::DEFAULT_MIN_GPU_FLOPS),
/// [`DEFAULT_MIN_GPU_FLOPS_F64`](crate::DEFAULT_MIN_GPU_FLOPS_F64) and
/// [`DEFAULT_MIN_GPU_FLOPS_C32`](crate::DEFAULT_MIN_GPU_FLOPS_C32) (a non-negative integer, for
/// every element type).
pub const ENV_MIN_FLOPS: &str = "GPU_DOT_MIN_FLOPS";
/// Environment variable turning the autotuner off (`0`, `off`, `false`, `no`) or on (`1`, `on`,
/// `true`, `yes`).
pub const ENV_AUTOTUNE: &str = "GPU_DOT_AUTOTUNE";
/// Environment variable choosing the CUDA device by ordinal (default 0).
pub const ENV_DEVICE: &str = "GPU_DOT_DEVICE";
/// Environment variable letting large host-to-host products split across several devices:
/// `all`, or ordinals separated by commas (`0,1`); one ordinal is that device alone.
pub const ENV_DEVICES: &str = "GPU_DOT_DEVICES";
/// Environment variable: `0` (or `off`) makes every device of a split product upload all of
/// B from the host instead of sharing it over peer links (see
/// [`DotOptions::peer_copies`](crate::DotOptions::peer_copies)).
pub const ENV_PEER_COPY: &str = "GPU_DOT_PEER_COPY";
/// Environment variable choosing the precision of products: `auto` (the default: emulated
/// where that is faster and the device's guard finds it within native's error bound, else
/// native), `native` (`fp32`, its former name: FP32 for `f32`, FP64 for `f64`), `tf32x3` or
/// `tf32` (`f32` only), `ozaki` or `ozaki-N` with N from 2 to 18 (both element types,
/// unguarded; see [`Precision`](crate::Precision)).
pub const ENV_PRECISION: &str = "GPU_DOT_PRECISION";
/// The environment variable that moves the kernel cache to another folder, or turns it off
/// with `off`, `0`, `none` or an empty value.
pub const ENV_CACHE_DIR: &str = "GPU_DOT_CACHE_DIR";
/// The environment variable that turns the prebuilt CUBINs off (`0`, `off`, `none`, `false`
/// or `no`; `1`, `on`, `true` or `yes` keep them, as does leaving it unset): every kernel
/// family then comes from the disk cache or NVRTC, as on a device the crate ships no CUBINs
/// for. Read once, at the first module load; another value is ignored, with a warning.
pub const ENV_PREBUILT: &str = "GPU_DOT_PREBUILT";
/// Environment variable setting the number of helper threads (default: one fewer than the
/// cores, at most 15; `0` copies on the calling thread alone).
pub const ENV_HOST_THREADS: &str = "GPU_DOT_HOST_THREADS";

/// Environment variable: `1` (or `on`) prints each GPU product's phase times to stderr.
pub const ENV_TRACE: &str = "GPU_DOT_TRACE";
/// Environment variable: `0` (or `off`) stops a loop of products with large host results
/// from getting its next result's memory ready on a background thread between products.
pub const ENV_SPARE_RESULT: &str = "GPU_DOT_SPARE_RESULT";
/// Environment variable: `0` (or `off`) makes the default precision forget the shapes its
/// guard refused, so that every product of such a shape weighs emulation again.
pub const ENV_GUARD_MEMORY: &str = "GPU_DOT_GUARD_MEMORY";

/// One environment variable.
#[derive(Debug)]
pub(crate) struct Setting {
    /// The variable's name, `GPU_DOT_…`.
    pub(crate) name: &'static str,
    /// The values it accepts, as the docs and its message write them.
    pub(crate) values: &'static [Value],
    /// What it does, in one line.
    pub(crate) doc: &'static str,
    /// What the crate does where the variable is unset, as the docs' tables write it. The
    /// switches read theirs from here; the unit tests check the others against the code's
    /// defaults ([`DotOptions::builtin`](crate::DotOptions::builtin) and the constants).
    pub(crate) default: &'static str,
}

/// A value, or a form of values, that a setting accepts.
#[derive(Debug)]
pub(crate) struct Value {
    /// As the docs and the messages write it: a word (`fp32`), a pattern (`ozaki-N`) or a
    /// description (`a non-negative integer`).
    pub(crate) spelled: &'static str,
    /// Words and patterns are written as code (in backticks) in the docs; descriptions as
    /// text.
    pub(crate) code: bool,
    /// What the message adds in parentheses (`N from 2 to 18`), or nothing.
    pub(crate) detail: &'static str,
    /// Values of this form, each accepted (a word: none, it stands for itself). The tests try
    /// each.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) examples: &'static [&'static str],
}

impl Value {
    /// A value that stands for itself.
    const fn word(spelled: &'static str) -> Value {
        Value {
            spelled,
            code: true,
            detail: "",
            examples: &[],
        }
    }

    /// Values of one form (`ozaki-N`), with what the message adds about it.
    const fn pattern(
        spelled: &'static str,
        detail: &'static str,
        examples: &'static [&'static str],
    ) -> Value {
        Value {
            spelled,
            code: true,
            detail,
            examples,
        }
    }

    /// Values described in words (`a non-negative integer`).
    const fn described(spelled: &'static str, examples: &'static [&'static str]) -> Value {
        Value {
            spelled,
            code: false,
            detail: "",
            examples,
        }
    }

    /// Values of this form that are accepted: the word itself, or the examples.
    #[cfg(test)]
    pub(crate) fn accepted(&self) -> impl Iterator<Item = &'static str> + '_ {
        let word = self.examples.is_empty().then_some(self.spelled);
        word.into_iter().chain(self.examples.iter().copied())
    }
}

/// The words of an on/off switch, on first.
const SWITCH_ON: [&str; 4] = ["1", "on", "true", "yes"];
const SWITCH_OFF: [&str; 4] = ["0", "off", "false", "no"];
const SWITCH: &[Value] = &[
    Value::word("1"),
    Value::word("on"),
    Value::word("true"),
    Value::word("yes"),
    Value::word("0"),
    Value::word("off"),
    Value::word("false"),
    Value::word("no"),
];

/// `GPU_DOT_BACKEND`.
pub(crate) const BACKEND: Setting = Setting {
    name: ENV_BACKEND,
    values: &[Value::word("auto"), Value::word("gpu"), Value::word("cpu")],
    doc: "where products run: by size (auto), always on the GPU, or always on the CPU",
    default: "`auto`",
};

/// `GPU_DOT_KERNEL`.
pub(crate) const KERNEL: Setting = Setting {
    name: ENV_KERNEL,
    values: &[
        Value::word("auto"),
        Value::word("naive"),
        Value::word("tiled16"),
        Value::word("tiled32"),
        Value::word("reg64"),
        Value::word("reg128"),
    ],
    doc: "the CUDA kernel of GPU products",
    default: "`auto`",
};

/// `GPU_DOT_AUTOTUNE`.
pub(crate) const AUTOTUNE: Setting = Setting {
    name: ENV_AUTOTUNE,
    values: SWITCH,
    doc: "whether the auto kernel measures its candidate plans once per shape class",
    default: "`1`",
};

/// `GPU_DOT_PRECISION`.
pub(crate) const PRECISION: Setting = Setting {
    name: ENV_PRECISION,
    values: &[
        Value::word("auto"),
        Value::word("native"),
        Value::word("fp32"),
        Value::word("tf32x3"),
        Value::word("tf32"),
        Value::word("ozaki"),
        Value::pattern(
            "ozaki-N",
            "N from 2 to 18",
            &["ozaki-2", "ozaki-15", "ozaki-18"],
        ),
    ],
    doc: "how GPU products multiply",
    default: "`auto`",
};

/// `GPU_DOT_MIN_FLOPS`.
pub(crate) const MIN_FLOPS: Setting = Setting {
    name: ENV_MIN_FLOPS,
    values: &[Value::described(
        "a non-negative integer",
        &["0", "6000000"],
    )],
    doc: "under auto, products of fewer flops (2·m·k·n) run on the CPU",
    default:
        "`4000000` for f32, `3000000` for f64 and complex f64, `5000000` for complex f32 (8·m·k·n)",
};

/// `GPU_DOT_DEVICE`.
pub(crate) const DEVICE: Setting = Setting {
    name: ENV_DEVICE,
    values: &[Value::described("a device ordinal", &["0", "1"])],
    doc: "the CUDA device of products whose options name none",
    default: "`0`",
};

/// `GPU_DOT_DEVICES`.
pub(crate) const DEVICES: Setting = Setting {
    name: ENV_DEVICES,
    values: &[
        Value::word("all"),
        Value::described(
            "device ordinals separated by commas",
            &["0,1", "0, 1,3", "2"],
        ),
    ],
    doc: "the devices that may share a large host-to-host product",
    default: "one device",
};

/// `GPU_DOT_PEER_COPY`.
pub(crate) const PEER_COPY: Setting = Setting {
    name: ENV_PEER_COPY,
    values: SWITCH,
    doc: "whether a split product shares B over peer links",
    default: "`1`",
};

/// `GPU_DOT_CACHE_DIR`.
pub(crate) const CACHE_DIR: Setting = Setting {
    name: ENV_CACHE_DIR,
    values: &[
        Value::described("a folder", &["/var/cache/gpu-dot", "kernels"]),
        Value::word("off"),
        Value::word("0"),
        Value::word("none"),
        Value::described("empty", &[""]),
    ],
    doc: "the folder of the compiled-kernel cache, or none",    default: "`$XDG_CACHE_HOME/gpu-dot` or `~/.cache/gpu-dot` (Linux), `~/Library/Caches/gpu-dot` (macOS), `%LOCALAPPDATA%\\gpu-dot` (Windows)",
};

/// `GPU_DOT_PREBUILT`.
pub(crate) const PREBUILT: Setting = Setting {
    name: ENV_PREBUILT,
    values: &[
        Value::word("1"),
        Value::word("on"),
        Value::word("true"),
        Value::word("yes"),
        Value::word("0"),
        Value::word("off"),
        Value::word("false"),
        Value::word("no"),
        Value::word("none"),
    ],
    doc: "whether modules may come from the CUBINs the crate ships (off: NVRTC compiles them)",
    default: "on",
};

/// `GPU_DOT_HOST_THREADS`.
pub(crate) const HOST_THREADS: Setting = Setting {
    name: ENV_HOST_THREADS,
    values: &[Value::described(
        "a number of helper threads",
        &["0", "4", "15", "64"],
    )],
    doc: "helper threads for host copies (0: the calling thread alone; at most 15)",
    default: "cores − 1, at most 15",
};

/// `GPU_DOT_TRACE`.
pub(crate) const TRACE: Setting = Setting {
    name: ENV_TRACE,
    values: SWITCH,
    doc: "whether each GPU product's phase times are printed to stderr",
    default: "`0`",
};

/// `GPU_DOT_SPARE_RESULT`.
pub(crate) const SPARE_RESULT: Setting = Setting {
    name: ENV_SPARE_RESULT,
    values: SWITCH,
    doc: "whether a loop of products with large host results (32 to 256 MiB) gets its next result's memory allocated and its pages faulted in by a background thread between products (`trim` frees it)",    default: "`1`",
};

/// `GPU_DOT_GUARD_MEMORY`.
pub(crate) const GUARD_MEMORY: Setting = Setting {
    name: ENV_GUARD_MEMORY,
    values: SWITCH,
    doc: "whether the default precision remembers the guard's refusals by shape: after two refusals in a row, the next products of that shape (1, then 3, 7, … up to 63 as refusals repeat) run natively without the guard",    default: "`1`",
};

/// Every setting.
pub(crate) const ALL: [Setting; 14] = [
    BACKEND,
    KERNEL,
    AUTOTUNE,
    PRECISION,
    MIN_FLOPS,
    DEVICE,
    DEVICES,
    PEER_COPY,
    CACHE_DIR,
    PREBUILT,
    HOST_THREADS,
    TRACE,
    SPARE_RESULT,
    GUARD_MEMORY,
];

/// Each setting's accepted values as its message lists them, made once (the error keeps a
/// `&'static str`).
static EXPECTED: [OnceLock<String>; ALL.len()] = [const { OnceLock::new() }; ALL.len()];

impl Setting {
    /// What the setting accepts, as its message says it: every value, `a, b or c`, with
    /// each pattern's detail (`ozaki-N (N from 2 to 18)`).
    pub(crate) fn expected(&self) -> &'static str {
        let row = ALL
            .iter()
            .position(|s| s.name == self.name)
            .expect("every setting is a row of the table");
        EXPECTED[row].get_or_init(|| {
            let spelled: Vec<String> = self
                .values
                .iter()
                .map(|v| match v.detail {
                    "" => v.spelled.to_string(),
                    detail => format!("{} ({detail})", v.spelled),
                })
                .collect();
            match spelled.split_last() {
                Some((last, [])) => last.clone(),
                Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                None => String::new(),
            }
        })
    }

    /// The error for `value`, which the setting does not accept.
    pub(crate) fn invalid(&self, value: &str) -> GpuDotError {
        GpuDotError::InvalidEnv {
            var: self.name,
            value: value.to_string(),
            expected: self.expected(),
        }
    }

    /// The setting read from the environment as an on/off switch ([`Setting::switch`]): its
    /// default where it is unset, and where its value is no switch's, with a warning that
    /// ends `; {otherwise}` (what the crate does instead).
    pub(crate) fn switch_from_env(&self, otherwise: &str) -> bool {
        let default = self.switch_default();
        let Some(value) = var(self.name) else {
            return default;
        };
        self.switch(&value).unwrap_or_else(|e| {
            log::warn!("{e}; {otherwise}");
            default
        })
    }

    /// A switch's default, its row's `default` (`` `1` `` or `` `0` ``).
    pub(crate) fn switch_default(&self) -> bool {
        self.switch(self.default.trim_matches('`'))
            .expect("a switch's default is a switch word")
    }

    /// `value` read as an on/off switch (`1`, `on`, `true`, `yes`; `0`, `off`, `false`, `no`;
    /// any case, spaces around ignored).
    pub(crate) fn switch(&self, value: &str) -> Result<bool, GpuDotError> {
        let v = value.trim().to_ascii_lowercase();
        if SWITCH_ON.contains(&v.as_str()) {
            Ok(true)
        } else if SWITCH_OFF.contains(&v.as_str()) {
            Ok(false)
        } else {
            Err(self.invalid(value))
        }
    }
}

/// The setting as a row of the README's table: `| `NAME` | values | what it does |`.
impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "| `{}` | ", self.name)?;
        for (i, v) in self.values.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            if v.code {
                write!(f, "{sep}`{}`", v.spelled)?;
            } else {
                write!(f, "{sep}{}", v.spelled)?;
            }
        }
        write!(f, " | {} |", self.doc)
    }
}

/// Values set in code ([`ProcessSettings::apply`]) for settings read once per process, each
/// taking the place of its variable.
static IN_CODE: Mutex<Vec<(&'static str, OsString)>> = Mutex::new(Vec::new());
/// The settings the crate has read: from then on a value set in code would come too late.
static READ: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// The value of the setting `name` (a `GPU_DOT_*` variable): the one set in code, else the
/// environment's. Noted as read.
pub(crate) fn var_os(name: &'static str) -> Option<OsString> {
    let in_code = IN_CODE.lock().unwrap_or_else(|e| e.into_inner());
    let mut read = READ.lock().unwrap_or_else(|e| e.into_inner());
    if !read.contains(&name) {
        read.push(name);
    }
    match in_code.iter().find(|(n, _)| *n == name) {
        Some((_, value)) => Some(value.clone()),
        None => std::env::var_os(name),
    }
}

/// [`var_os`] as text (a value that is not Unicode reads as unset, as `std::env::var` has it).
pub(crate) fn var(name: &'static str) -> Option<String> {
    var_os(name).and_then(|v| v.into_string().ok())
}

/// The settings the crate reads once per process, set in code instead of by environment
/// variables (`std::env::set_var` is `unsafe` in Rust 2024, and racy in any edition). Each
/// setting given takes the place of its variable; those not given keep the variable's value
/// or the default. Apply them before the crate's first product: a setting the crate has already
/// read cannot change, and [`apply`](Self::apply) then changes nothing and says which.
///
/// The per-product settings are [`DotOptions`](crate::DotOptions)'
/// ([`DotOptions::default`](crate::DotOptions) reads their variables,
/// [`DotOptions::builtin`](crate::DotOptions::builtin) does not).
///
/// ```
/// gpu_dot::ProcessSettings::new()
///     .host_threads(4)
///     .trace(false)
///     .apply()
///     .expect("set before the first product");
/// ```
#[derive(Debug, Clone, Default)]
#[must_use = "the settings take effect when applied"]
pub struct ProcessSettings {
    values: Vec<(&'static str, OsString)>,
}

impl ProcessSettings {
    /// No setting: every variable keeps its value or its default.
    pub fn new() -> Self {
        Self::default()
    }

    fn with(mut self, name: &'static str, value: impl Into<OsString>) -> Self {
        self.values.retain(|(n, _)| *n != name);
        self.values.push((name, value.into()));
        self
    }

    fn switch(self, name: &'static str, on: bool) -> Self {
        self.with(name, if on { "1" } else { "0" })
    }

    /// The folder of the compiled-kernel cache ([`ENV_CACHE_DIR`]); the crate makes it, owned
    /// by the user and closed to others, if need be.
    pub fn cache_dir(self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.with(ENV_CACHE_DIR, dir.into().into_os_string())
    }

    /// No compiled-kernel cache on disk ([`ENV_CACHE_DIR`] `off`).
    pub fn no_cache(self) -> Self {
        self.with(ENV_CACHE_DIR, "off")
    }

    /// Whether modules may come from the CUBINs the crate ships ([`ENV_PREBUILT`]; off,
    /// NVRTC compiles every kernel family).
    pub fn prebuilt(self, on: bool) -> Self {
        self.switch(ENV_PREBUILT, on)
    }

    /// Helper threads for host copies ([`ENV_HOST_THREADS`]; at most 15 are used, `0`: the
    /// calling thread alone).
    pub fn host_threads(self, count: usize) -> Self {
        self.with(ENV_HOST_THREADS, count.to_string())
    }

    /// Whether each GPU product's phase times are printed to stderr ([`ENV_TRACE`]).
    pub fn trace(self, on: bool) -> Self {
        self.switch(ENV_TRACE, on)
    }

    /// Whether a loop of products with large host results gets its next result's memory
    /// ready between products ([`ENV_SPARE_RESULT`]).
    pub fn spare_result(self, on: bool) -> Self {
        self.switch(ENV_SPARE_RESULT, on)
    }

    /// Whether the default precision remembers the shapes its guard refused
    /// ([`ENV_GUARD_MEMORY`]).
    pub fn guard_memory(self, on: bool) -> Self {
        self.switch(ENV_GUARD_MEMORY, on)
    }

    /// Sets these values for the process. All or nothing: where the crate has already read
    /// one of them, none is set, and the error names it.
    pub fn apply(self) -> Result<(), SettingAlreadyRead> {
        let mut in_code = IN_CODE.lock().unwrap_or_else(|e| e.into_inner());
        let read = READ.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((name, _)) = self.values.iter().find(|(n, _)| read.contains(n)) {
            return Err(SettingAlreadyRead { var: name });
        }
        for (name, value) in self.values {
            in_code.retain(|(n, _)| *n != name);
            in_code.push((name, value));
        }
        Ok(())
    }
}

/// [`ProcessSettings::apply`] came after the crate had read one of the settings.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SettingAlreadyRead {
    /// The setting's variable.
    pub var: &'static str,
}

impl fmt::Display for SettingAlreadyRead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} was already read: process settings are applied before the first product",
            self.var
        )
    }
}

impl std::error::Error for SettingAlreadyRead {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_and_of_the_crate() {
        for (i, s) in ALL.iter().enumerate() {
            assert!(s.name.starts_with("GPU_DOT_"), "{}", s.name);
            assert!(!s.values.is_empty(), "{}", s.name);
            assert!(!s.doc.is_empty(), "{}", s.name);
            assert!(
                ALL[..i].iter().all(|t| t.name != s.name),
                "{} twice",
                s.name
            );
        }
    }

    #[test]
    fn messages_list_every_value() {
        assert_eq!(
            PRECISION.expected(),
            "auto, native, fp32, tf32x3, tf32, ozaki or ozaki-N (N from 2 to 18)"
        );
        assert_eq!(BACKEND.expected(), "auto, gpu or cpu");
        assert_eq!(MIN_FLOPS.expected(), "a non-negative integer");
        for s in &ALL {
            for v in s.values {
                assert!(
                    s.expected().contains(v.spelled),
                    "{}: {}",
                    s.name,
                    v.spelled
                );
            }
        }
        let e = PRECISION.invalid("bf16").to_string();
        assert_eq!(
            e,
            "GPU_DOT_PRECISION=\"bf16\" is not valid: expected auto, native, fp32, tf32x3, \
             tf32, ozaki or ozaki-N (N from 2 to 18)"
        );
    }

    #[test]
    fn switches() {
        for on in ["1", "on", " ON", "true", "Yes "] {
            assert_eq!(AUTOTUNE.switch(on).ok(), Some(true), "{on:?}");
        }
        for off in ["0", "off", "False", " no"] {
            assert_eq!(AUTOTUNE.switch(off).ok(), Some(false), "{off:?}");
        }
        for bad in ["", "2", "sometimes"] {
            assert!(AUTOTUNE.switch(bad).is_err(), "{bad:?}");
        }
        // Every word a switch's row lists is a switch word, and the reverse.
        let words: Vec<&str> = SWITCH.iter().map(|v| v.spelled).collect();
        assert_eq!(words, [SWITCH_ON, SWITCH_OFF].concat());
    }
}

//! The table of settings ([`crate::settings`]) against the code that reads each variable and
//! against the docs: every documented value parses, every rejected value's message names
//! every accepted one, each default is the code's, and the README's and the crate docs' tables
//! list every variable with its values (the README's with its default too). That no variable is
//! named outside the table is a source check (tools/settings-names, run by .ci/run).

use crate::error::GpuDotError;
use crate::options::DotOptions;
use crate::settings::{self, Setting, ALL};

/// `value` of the variable `name` read by the code that reads it.
fn parse(name: &str, value: &str) -> Result<(), GpuDotError> {
    let options = [
        settings::BACKEND.name,
        settings::KERNEL.name,
        settings::AUTOTUNE.name,
        settings::PRECISION.name,
        settings::MIN_FLOPS.name,
        settings::DEVICE.name,
        settings::DEVICES.name,
        settings::PEER_COPY.name,
    ];
    if options.contains(&name) {
        DotOptions::from_lookup(|n| (n == name).then(|| value.to_string())).map(drop)
    } else if name == settings::HOST_THREADS.name {
        crate::host::crew::parse_count(value).map(drop)
    } else if name == settings::PREBUILT.name {
        crate::device::overrides::parse_prebuilt(value).map(drop)
    } else if let Some(switch) = [
        &settings::TRACE,
        &settings::SPARE_RESULT,
        &settings::GUARD_MEMORY,
    ]
    .into_iter()
    .find(|s| s.name == name)
    {
        // The on/off switches, each read by `Setting::switch_from_env`.
        switch.switch(value).map(drop)
    } else if name == settings::CACHE_DIR.name {
        // Every value is a folder or turns the cache off (the cache's own tests say which).
        Ok(())
    } else {
        panic!("{name}: a setting no code reads")
    }
}

/// Values each setting refuses (none for the cache folder, which takes any path).
const REJECTED: &[(&str, &[&str])] = &[
    ("GPU_DOT_BACKEND", &["tpu", "gpus", "", "cuda"]),
    (
        "GPU_DOT_KERNEL",
        &["fastest", "reg256", "", "tiled_16", "tiled_32"],
    ),
    ("GPU_DOT_AUTOTUNE", &["sometimes", "2", ""]),
    (
        "GPU_DOT_PRECISION",
        &[
            "bf16", "ozaki-1", "ozaki-19", "ozaki-", "ozaki-x", "ozaki-+5", "fp64", "", "3xtf32",
        ],
    ),
    ("GPU_DOT_MIN_FLOPS", &["-1", "1e6", "many"]),
    ("GPU_DOT_DEVICE", &["first", "-1", "0,1"]),
    ("GPU_DOT_DEVICES", &["", "one", "0,,1", "-1", "+1", "0,"]),
    ("GPU_DOT_PEER_COPY", &["sometimes"]),
    ("GPU_DOT_PREBUILT", &["later", "2"]),
    ("GPU_DOT_HOST_THREADS", &["many", "-1"]),
    ("GPU_DOT_TRACE", &["loud"]),
    ("GPU_DOT_SPARE_RESULT", &["spare", "2"]),
    ("GPU_DOT_GUARD_MEMORY", &["forget", "2"]),
];

#[test]
fn every_documented_value_parses() {
    for s in &ALL {
        for v in s.values {
            for example in v.accepted() {
                if let Err(e) = parse(s.name, example) {
                    panic!("{}={example:?} ({}) is refused: {e}", s.name, v.spelled);
                }
            }
        }
    }
}

#[test]
fn every_rejected_value_names_the_accepted_ones() {
    for s in &ALL {
        let rejected = REJECTED.iter().find(|(n, _)| *n == s.name);
        if s.name == settings::CACHE_DIR.name {
            assert!(rejected.is_none());
            continue;
        }
        let (_, values) = rejected.unwrap_or_else(|| panic!("{}: no rejected value tried", s.name));
        for bad in *values {
            let message = match parse(s.name, bad) {
                Err(e @ GpuDotError::InvalidEnv { var, .. }) => {
                    assert_eq!(var, s.name);
                    e.to_string()
                }
                other => panic!("{}={bad:?}: expected InvalidEnv, got {other:?}", s.name),
            };
            for v in s.values {
                let shown = match v.detail {
                    "" => v.spelled.to_string(),
                    detail => format!("{} ({detail})", v.spelled),
                };
                assert!(
                    message.contains(&shown),
                    "{}={bad:?}: the message does not name {shown:?}: {message}",
                    s.name
                );
            }
        }
    }
    // The drift this table ended: every precision that parses is in the message.
    let e = parse("GPU_DOT_PRECISION", "fp16").unwrap_err().to_string();
    assert!(e.contains("ozaki-N (N from 2 to 18)"), "{e}");
    assert_eq!(
        crate::options::MIN_MODULI..=crate::options::MAX_MODULI,
        2..=18,
        "the range the table spells out"
    );
}

/// The `FromStr` of the options' types accepts exactly what their variables document: every
/// documented value (in any case, with spaces around it), no rejected one, and a rejected
/// value's [`ParseOptionError`](crate::ParseOptionError) says what is accepted.
#[test]
fn the_options_parse_the_documented_values_alone() {
    use crate::{Backend, Devices, Kernel, ParseOptionError, Precision};
    use std::str::FromStr;

    fn check<T: FromStr<Err = ParseOptionError>>(s: &Setting, what: &str) {
        for v in s.values {
            for example in v.accepted() {
                for spelled in [
                    example.to_string(),
                    example.to_ascii_uppercase(),
                    format!(" {example} "),
                ] {
                    if let Err(e) = spelled.parse::<T>() {
                        panic!("{what}: {spelled:?} ({}) is refused: {e}", v.spelled);
                    }
                }
            }
        }
        let (_, rejected) = REJECTED.iter().find(|(n, _)| *n == s.name).unwrap();
        for bad in *rejected {
            match bad.parse::<T>() {
                Err(e) => {
                    assert_eq!((e.what, e.value.as_str()), (what, *bad));
                    assert_eq!(e.expected, s.expected());
                    assert_eq!(
                        e.to_string(),
                        format!("{bad:?} is not a valid {what}: expected {}", s.expected())
                    );
                }
                Ok(_) => panic!("{what}: {bad:?} is accepted"),
            }
        }
    }
    check::<Backend>(&settings::BACKEND, "backend");
    check::<Kernel>(&settings::KERNEL, "kernel");
    check::<Precision>(&settings::PRECISION, "precision");
    check::<Devices>(&settings::DEVICES, "devices");
    // Every precision's and kernel's own spelling parses back to it.
    for p in [
        Precision::Auto,
        Precision::OZAKI,
        Precision::Ozaki { moduli: 11 },
    ]
    .into_iter()
    .chain(Precision::ALL)
    {
        assert_eq!(p.to_string().parse::<Precision>(), Ok(p));
    }
    for k in std::iter::once(Kernel::Auto).chain(Kernel::ALL) {
        assert_eq!(k.name().parse::<Kernel>(), Ok(k));
    }
}

/// The row of the markdown table in `doc` (lines may carry a prefix, `//! `) that starts with
/// `| `NAME``.
fn row<'a>(doc: &'a str, s: &Setting) -> Option<&'a str> {
    let start = format!("| `{}`", s.name);
    doc.lines()
        .map(|l| l.trim_start_matches("//!").trim())
        .find(|l| l.starts_with(&start))
}

/// Every setting has a row in `doc`'s table, and the row names each of its values: words and
/// patterns as code (`` `fp32` ``), descriptions as text. With `defaults`, the row's last cell
/// is the setting's default.
fn check_table(doc: &str, what: &str, defaults: bool) {
    for s in &ALL {
        let row = row(doc, s)
            .unwrap_or_else(|| panic!("{what}: no row for {}; the table has\n{s}", s.name));
        for v in s.values {
            let shown = match v.code {
                true => format!("`{}`", v.spelled),
                false => v.spelled.to_string(),
            };
            assert!(
                row.contains(&shown),
                "{what}: the row of {} does not name {shown}:\n{row}\nthe table has\n{s}",
                s.name
            );
        }
        if defaults {
            let last = row
                .trim_end_matches('|')
                .rsplit('|')
                .next()
                .unwrap_or("")
                .trim();
            assert_eq!(
                last, s.default,
                "{what}: the default of {} is not the code's",
                s.name
            );
        }
    }
}

/// Each default the table states is what the code does where the variable is unset.
#[test]
fn the_defaults_are_the_codes() {
    let builtin = DotOptions::builtin();
    let switch = |on: bool| if on { "`1`" } else { "`0`" };
    assert_eq!(settings::BACKEND.default, format!("`{}`", builtin.backend));
    assert_eq!(settings::KERNEL.default, format!("`{}`", builtin.kernel));
    assert_eq!(
        settings::PRECISION.default,
        format!("`{}`", builtin.precision)
    );
    assert_eq!(settings::AUTOTUNE.default, switch(builtin.autotune));
    assert_eq!(settings::PEER_COPY.default, switch(builtin.peer_copies));
    assert_eq!(
        settings::MIN_FLOPS.default,
        format!(
            "`{}` for f32, `{}` for f64 and complex f64, `{}` for complex f32 (8·m·k·n)",
            crate::options::DEFAULT_MIN_GPU_FLOPS,
            crate::options::DEFAULT_MIN_GPU_FLOPS_F64,
            crate::options::DEFAULT_MIN_GPU_FLOPS_C32
        )
    );
    assert_eq!(
        settings::HOST_THREADS.default,
        format!("cores − 1, at most {}", crate::host::crew::MAX_HELPERS)
    );
    // The switches read their defaults from the table: each is a switch word.
    assert!(settings::GUARD_MEMORY.switch_default());
    assert!(settings::SPARE_RESULT.switch_default());
    assert!(!settings::TRACE.switch_default());
}

#[test]
fn the_readme_lists_every_setting_and_its_values() {
    check_table(include_str!("../README.md"), "README.md", true);
}

#[test]
fn the_crate_docs_list_every_setting_and_its_values() {
    check_table(include_str!("lib.rs"), "the crate docs (src/lib.rs)", false);
}

/// The table check fails on a row whose default is not the code's (the drift it caught: a
/// threshold the README gave as 6 Mflop where the code has 4).
#[test]
fn a_wrong_default_fails_the_check() {
    let readme = include_str!("../README.md");
    let right = settings::MIN_FLOPS.default;
    assert!(readme.contains(right));
    let wrong = readme.replace(right, "`6000000` for f32, `3000000` for f64");
    let caught = std::panic::catch_unwind(|| check_table(&wrong, "a README", true));
    assert!(caught.is_err());
}

/// One invalid variable loses only itself: the valid ones still apply, and the error names
/// the invalid one.
#[test]
fn an_invalid_variable_loses_only_itself() {
    let vars = [
        (settings::BACKEND.name, "cpu"),
        (settings::KERNEL.name, "bogus"),
        (settings::PRECISION.name, "native"),
        (settings::AUTOTUNE.name, "sometimes"),
    ];
    let lookup = |name: &str| {
        vars.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_string())
    };
    let (opts, errors) = DotOptions::lenient(lookup);
    assert_eq!(opts.backend, crate::Backend::Cpu);
    assert_eq!(opts.precision, crate::Precision::Native);
    assert_eq!(opts.kernel, DotOptions::builtin().kernel);
    assert_eq!(opts.autotune, DotOptions::builtin().autotune);
    let vars_named: Vec<&str> = errors
        .iter()
        .map(|e| match e {
            GpuDotError::InvalidEnv { var, .. } => *var,
            other => panic!("expected InvalidEnv, got {other:?}"),
        })
        .collect();
    assert_eq!(vars_named, [settings::KERNEL.name, settings::AUTOTUNE.name]);
    // The fallible form reports the first.
    match DotOptions::from_lookup(lookup) {
        Err(GpuDotError::InvalidEnv { var, value, .. }) => {
            assert_eq!((var, value.as_str()), (settings::KERNEL.name, "bogus"));
        }
        other => panic!("expected InvalidEnv, got {other:?}"),
    }
}

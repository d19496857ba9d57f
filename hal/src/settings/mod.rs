//! Every environment variable and tuning-file key commhal reads, declared once.
//!
//! A setting is a [`Setting`]: its variable, the file key that also sets it (if any), its
//! type and range, its default, a one-line doc, who is meant to set it and which
//! component reads it. The declarations live in this module's files, one per component
//! ([`launch`], [`host`], [`gpu`], [`nccl`], [`ibverbs`], [`tests`]), and [`ALL`] lists
//! them. Everything else comes from that table:
//!
//! * the parsing: [`Setting::number`], [`Setting::flag`], [`Setting::choice`] and
//!   [`Setting::text`] read the variable and reject a value outside the declared type or
//!   range with a message that names the variable, the value and what is allowed;
//! * `commhal info --settings` ([`render_text`]);
//! * the table in `docs/tuning.md` ([`render_markdown`]; a test keeps them equal).
//!
//! Code never spells a variable's name to read it: it reads the declared setting, so a
//! name, a default or a range exists in one place. A test of the CLI scans the tree for
//! `COMMHAL_*` names and fails on any that is not declared here.
//!
//! In the spirit of NCCL's `NCCL_PARAM` and libfabric's `fi_param_define`.

pub mod gpu;
pub mod host;
pub mod ibverbs;
pub mod launch;
pub mod nccl;
pub mod tests;

use std::fmt::Write as _;
use std::time::Duration;

use crate::error::HalError;

/// What values a setting takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// On or off: `1`/`0`, `true`/`false`, `on`/`off`, `yes`/`no`.
    Flag,
    /// A whole number in `min..=max`, in `unit`. Byte counts also take `K`, `M`, `G`
    /// suffixes (powers of 1024).
    Number {
        /// Smallest accepted value.
        min: u64,
        /// Largest accepted value.
        max: u64,
        /// What one unit is.
        unit: Unit,
    },
    /// One of these words.
    Choice(&'static [&'static str]),
    /// Free text; the string says what it must look like (a path, `host:port`, ...).
    Text(&'static str),
}

/// The unit of a [`Kind::Number`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A plain count.
    Count,
    /// Bytes.
    Bytes,
    /// Seconds.
    Seconds,
    /// Milliseconds.
    Millis,
    /// Microseconds.
    Micros,
    /// Nanoseconds.
    Nanos,
}

impl Unit {
    fn suffix(self) -> &'static str {
        match self {
            Unit::Count => "",
            Unit::Bytes => " bytes",
            Unit::Seconds => " s",
            Unit::Millis => " ms",
            Unit::Micros => " µs",
            Unit::Nanos => " ns",
        }
    }

    /// `n` of this unit as a [`Duration`].
    ///
    /// # Panics
    /// For a unit that is not a time (a declaration read with the wrong reader).
    fn duration(self, n: u64) -> Duration {
        match self {
            Unit::Seconds => Duration::from_secs(n),
            Unit::Millis => Duration::from_millis(n),
            Unit::Micros => Duration::from_micros(n),
            Unit::Nanos => Duration::from_nanos(n),
            Unit::Count | Unit::Bytes => panic!("{self:?} is not a unit of time"),
        }
    }
}

/// Who is meant to set a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetBy {
    /// The user or the deployment.
    User,
    /// A launcher (`commhal launch`, torchrun, Open MPI, Slurm) for each rank it starts.
    Launcher,
    /// The test suite, for the child processes it starts; never set it yourself.
    Tests,
}

/// Which file, besides the environment, sets a setting (the variable wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKey {
    /// None: only the variable.
    None,
    /// A key of the GPU tuning file's `[ranks.N]` sections (`commhal tune`,
    /// `COMMHAL_GPU_TUNING`).
    Tuning(&'static str),
    /// A top-level key of the `COMMHAL_CONFIG` file.
    Config(&'static str),
}

/// One setting. Declare it as a `pub static` in the component's file of this module and
/// list it in [`ALL`].
#[derive(Debug)]
pub struct Setting {
    /// The environment variable.
    pub env: &'static str,
    /// The file key that also sets it.
    pub key: FileKey,
    /// Its type and range.
    pub kind: Kind,
    /// Its value when unset, as text (`""`: unset means off, or the text says what).
    pub default: &'static str,
    /// Who sets it.
    pub set_by: SetBy,
    /// The crate(s) that read it.
    pub read_by: &'static str,
    /// What it does, in one line.
    pub doc: &'static str,
}

/// A setting whose value breaks its declaration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{env}={value:?} is not valid: expected {expected}; fix it or unset it (default: {default})"
)]
pub struct SettingError {
    /// The variable.
    pub env: &'static str,
    /// The value given.
    pub value: String,
    /// What the declaration allows.
    pub expected: String,
    /// The default, as text.
    pub default: String,
}

impl From<SettingError> for HalError {
    fn from(e: SettingError) -> Self {
        HalError::Config(e.to_string())
    }
}

/// Reads a variable: the process environment, or a map in tests.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment as an [`Env`].
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

impl Setting {
    /// The variable's value, trimmed; `None` when unset or empty (an empty value counts
    /// as unset everywhere).
    pub fn raw(&self) -> Option<String> {
        self.raw_in(&process_env)
    }

    /// [`Setting::raw`] from `env`.
    pub fn raw_in(&self, env: Env<'_>) -> Option<String> {
        env(self.env)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    }

    /// Whether the variable is set (and not empty).
    pub fn is_set(&self) -> bool {
        self.raw().is_some()
    }

    /// A [`Kind::Text`] setting's value (`None` when unset).
    pub fn text(&self) -> Option<String> {
        debug_assert!(
            matches!(self.kind, Kind::Text(_)),
            "{} is not text",
            self.env
        );
        self.raw()
    }

    /// A [`Kind::Text`] setting's value like [`Setting::text`], but a value that is not
    /// UTF-8 is an error rather than unset: for a path or a list, silently going without
    /// it hides the mistake.
    pub fn text_utf8(&self) -> Result<Option<String>, SettingError> {
        match std::env::var_os(self.env) {
            Some(v) if v.to_str().is_none() => {
                let mut e = self.error(&v.to_string_lossy());
                e.expected.push_str(", in UTF-8");
                Err(e)
            }
            _ => Ok(self.text()),
        }
    }

    /// A [`Kind::Number`] setting's value, `None` when unset; an error when it is not a
    /// whole number in the declared range.
    pub fn number(&self) -> Result<Option<u64>, SettingError> {
        self.number_in(&process_env)
    }

    /// [`Setting::number`] from `env`.
    pub fn number_in(&self, env: Env<'_>) -> Result<Option<u64>, SettingError> {
        self.raw_in(env).map(|v| self.parse_number(&v)).transpose()
    }

    /// A [`Kind::Number`] setting's value, its declared default when unset.
    pub fn number_or_default(&self) -> Result<u64, SettingError> {
        self.number_or_default_in(&process_env)
    }

    /// [`Setting::number_or_default`] from `env`.
    pub fn number_or_default_in(&self, env: Env<'_>) -> Result<u64, SettingError> {
        match self.number_in(env)? {
            Some(v) => Ok(v),
            None => Ok(self.default_number()),
        }
    }

    /// A [`Kind::Number`] setting in a unit of time as a [`Duration`], its declared
    /// default when unset.
    pub fn duration_or_default(&self) -> Result<Duration, SettingError> {
        self.duration_or_default_in(&process_env)
    }

    /// [`Setting::duration_or_default`] from `env`.
    pub fn duration_or_default_in(&self, env: Env<'_>) -> Result<Duration, SettingError> {
        Ok(self.unit().duration(self.number_or_default_in(env)?))
    }

    /// A [`Kind::Number`] setting in a unit of time as a [`Duration`], `None` when unset.
    pub fn duration(&self) -> Result<Option<Duration>, SettingError> {
        Ok(self.number()?.map(|n| self.unit().duration(n)))
    }

    /// The declared default of a [`Kind::Number`] setting in a unit of time.
    pub fn default_duration(&self) -> Duration {
        self.unit().duration(self.default_number())
    }

    fn unit(&self) -> Unit {
        match self.kind {
            Kind::Number { unit, .. } => unit,
            _ => panic!("{} is not a number", self.env),
        }
    }

    /// Whether the variable's value in `env` is one the declaration accepts (unset
    /// always is): the check of each kind's reader, without its value.
    pub fn check_in(&self, env: Env<'_>) -> Result<(), SettingError> {
        match self.kind {
            Kind::Flag => self.flag_in(env).map(drop),
            Kind::Number { .. } => self.number_in(env).map(drop),
            Kind::Choice(_) => self.choice_in(env).map(drop),
            Kind::Text(_) => Ok(()),
        }
    }

    /// The declared default of a [`Kind::Number`] setting.
    ///
    /// # Panics
    /// When the declaration's default is not a number in range (a test checks every
    /// declaration, so this cannot happen in a released build), or is empty (unset has
    /// no single value: its doc says what it means, and callers use [`Setting::number`]).
    pub fn default_number(&self) -> u64 {
        self.parse_number(self.default)
            .unwrap_or_else(|e| panic!("declaration of {}: default {e}", self.env))
    }

    /// A [`Kind::Flag`] setting's value, its default when unset.
    pub fn flag(&self) -> Result<bool, SettingError> {
        self.flag_in(&process_env)
    }

    /// [`Setting::flag`] from `env`.
    pub fn flag_in(&self, env: Env<'_>) -> Result<bool, SettingError> {
        debug_assert_eq!(self.kind, Kind::Flag, "{} is not a flag", self.env);
        let v = self.raw_in(env).unwrap_or_else(|| self.default.to_string());
        match v.to_ascii_lowercase().as_str() {
            "1" | "true" | "on" | "yes" => Ok(true),
            "0" | "false" | "off" | "no" | "" => Ok(false),
            _ => Err(self.error(&v)),
        }
    }

    /// A [`Kind::Choice`] setting's value (`None` when unset); an error when it is not
    /// one of the declared words.
    pub fn choice(&self) -> Result<Option<&'static str>, SettingError> {
        self.choice_in(&process_env)
    }

    /// [`Setting::choice`] from `env`.
    pub fn choice_in(&self, env: Env<'_>) -> Result<Option<&'static str>, SettingError> {
        let Kind::Choice(words) = self.kind else {
            panic!("{} is not a choice", self.env)
        };
        let Some(v) = self.raw_in(env) else {
            return Ok(None);
        };
        words
            .iter()
            .find(|w| w.eq_ignore_ascii_case(&v))
            .map(|w| Some(*w))
            .ok_or_else(|| self.error(&v))
    }

    /// Parse `v` as this [`Kind::Number`] setting's value.
    pub fn parse_number(&self, v: &str) -> Result<u64, SettingError> {
        let Kind::Number { min, max, unit } = self.kind else {
            panic!("{} is not a number", self.env)
        };
        let v = v.trim();
        let (digits, scale) = match (unit, v.as_bytes().last()) {
            (Unit::Bytes, Some(b'K' | b'k')) => (&v[..v.len() - 1], 1u64 << 10),
            (Unit::Bytes, Some(b'M' | b'm')) => (&v[..v.len() - 1], 1 << 20),
            (Unit::Bytes, Some(b'G' | b'g')) => (&v[..v.len() - 1], 1 << 30),
            _ => (v, 1),
        };
        digits
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(scale))
            .filter(|n| (min..=max).contains(n))
            .ok_or_else(|| self.error(v))
    }

    fn error(&self, value: &str) -> SettingError {
        SettingError {
            env: self.env,
            value: value.to_string(),
            expected: self.expected(),
            default: self.default_text().into(),
        }
    }

    /// The default as the docs show it: `unset` for none, `no limit` for `u64::MAX`.
    pub fn default_text(&self) -> &'static str {
        match self.default {
            "" => "unset",
            "18446744073709551615" => "no limit",
            d => d,
        }
    }

    /// What the declaration accepts, in words.
    pub fn expected(&self) -> String {
        match self.kind {
            Kind::Flag => "0 or 1".into(),
            Kind::Number { min, max, unit } => {
                let k = if unit == Unit::Bytes {
                    " (K, M, G suffixes allowed)"
                } else {
                    ""
                };
                let max = if max == u64::MAX {
                    "".into()
                } else {
                    max.to_string()
                };
                format!("a whole number in {min}..={max}{}{k}", unit.suffix())
            }
            Kind::Choice(words) => format!("one of {}", words.join(", ")),
            Kind::Text(what) => what.into(),
        }
    }
}

/// Every declared setting, grouped by component.
pub fn all() -> impl Iterator<Item = &'static Setting> {
    ALL.iter().flat_map(|group| group.1.iter().copied())
}

/// The declared setting named `env`.
pub fn find(env: &str) -> Option<&'static Setting> {
    all().find(|s| s.env == env)
}

/// The table: (component, its settings), in the order the docs list them.
pub const ALL: &[(&str, &[&Setting])] = &[
    ("Launch and bootstrap", launch::ALL),
    ("Host communicator and backends", host::ALL),
    ("GPU collectives", gpu::ALL),
    ("GPU tuning-file thresholds", gpu::THRESHOLDS),
    ("NCCL drop-in", nccl::ALL),
    ("ib-verbs", ibverbs::ALL),
    ("Set by the test suite", tests::ALL),
];

fn key_text(k: FileKey) -> String {
    match k {
        FileKey::None => String::new(),
        FileKey::Tuning(k) => format!("tuning `{k}`"),
        FileKey::Config(k) => format!("config `{k}`"),
    }
}

fn set_by_text(s: SetBy) -> &'static str {
    match s {
        SetBy::User => "user",
        SetBy::Launcher => "launcher",
        SetBy::Tests => "tests",
    }
}

/// The table as Markdown (`docs/tuning.md`'s settings section).
pub fn render_markdown() -> String {
    let mut out = String::new();
    for (group, settings) in ALL {
        let _ = writeln!(out, "### {group}\n");
        out.push_str(
            "| variable | file key | values | default | set by | read by | what it does |\n",
        );
        out.push_str("|---|---|---|---|---|---|---|\n");
        for s in *settings {
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | {} | {} | {} | {} |",
                s.env,
                key_text(s.key),
                s.expected().replace('|', "\\|"),
                match s.default_text() {
                    d if d == s.default => format!("`{d}`"),
                    d => d.to_string(),
                },
                set_by_text(s.set_by),
                s.read_by,
                s.doc.replace('|', "\\|"),
            );
        }
        out.push('\n');
    }
    out
}

/// The table as plain text for a terminal (`commhal info --settings`), with each
/// variable's current value where it is set.
pub fn render_text(env: Env<'_>) -> String {
    let mut out = String::new();
    for (group, settings) in ALL {
        let _ = writeln!(out, "{group}:");
        for s in *settings {
            let now = match s.raw_in(env) {
                Some(v) => format!("  [set: {v}]"),
                None => String::new(),
            };
            let default = s.default_text();
            let key = key_text(s.key);
            let key = if key.is_empty() {
                key
            } else {
                format!("; {key}")
            };
            let _ = writeln!(
                out,
                "  {}  (default {default}; {}; set by {}{key}){now}\n      {}",
                s.env,
                s.expected(),
                set_by_text(s.set_by),
                s.doc
            );
        }
    }
    out
}

#[cfg(test)]
mod unit_tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn every_declaration_is_well_formed_and_named_once() {
        let mut seen = HashSet::new();
        for s in all() {
            assert!(seen.insert(s.env), "{} is declared twice", s.env);
            assert!(s.env.starts_with("COMMHAL_"), "{}", s.env);
            assert!(!s.doc.is_empty() && !s.read_by.is_empty(), "{}", s.env);
            match s.kind {
                Kind::Number { min, max, .. } => {
                    assert!(min <= max, "{}", s.env);
                    if !s.default.is_empty() {
                        s.default_number();
                    }
                }
                Kind::Flag => {
                    s.flag_in(&|_| None).unwrap();
                }
                Kind::Choice(words) => assert!(
                    s.default.is_empty() || words.contains(&s.default),
                    "{}: default {} is not a choice",
                    s.env,
                    s.default
                ),
                Kind::Text(_) => {}
            }
        }
    }

    static NUM: Setting = Setting {
        env: "COMMHAL_EXAMPLE",
        key: FileKey::None,
        kind: Kind::Number {
            min: 1,
            max: 1 << 30,
            unit: Unit::Bytes,
        },
        default: "4096",
        set_by: SetBy::User,
        read_by: "hal",
        doc: "an example",
    };

    fn env_of(v: &'static str) -> impl Fn(&str) -> Option<String> {
        move |_| Some(v.to_string())
    }

    #[test]
    fn numbers_parse_with_suffixes_and_reject_out_of_range() {
        assert_eq!(NUM.number_in(&env_of(" 64K ")), Ok(Some(65536)));
        assert_eq!(NUM.number_in(&env_of("1G")), Ok(Some(1 << 30)));
        assert_eq!(NUM.number_in(&env_of("")), Ok(None));
        assert_eq!(NUM.number_or_default_in(&|_| None), Ok(4096));
        for bad in ["0", "2G", "abc", "-5", "1.5"] {
            let e = NUM.number_in(&env_of(bad)).unwrap_err();
            let text = e.to_string();
            assert!(
                text.contains("COMMHAL_EXAMPLE") && text.contains(bad),
                "{text}"
            );
            assert!(text.contains("1..=1073741824 bytes"), "{text}");
        }
    }

    #[test]
    fn times_become_durations_in_their_declared_unit() {
        let ms = Setting {
            kind: Kind::Number {
                min: 1,
                max: 1000,
                unit: Unit::Millis,
            },
            default: "30",
            ..NUM
        };
        assert_eq!(
            ms.duration_or_default_in(&env_of("250")),
            Ok(Duration::from_millis(250))
        );
        assert_eq!(ms.default_duration(), Duration::from_millis(30));
        assert!(ms.duration_or_default_in(&env_of("0")).is_err());
        assert!(ms.check_in(&env_of("abc")).is_err());
        assert_eq!(ms.check_in(&|_| None), Ok(()));
    }

    #[test]
    fn flags_and_choices_reject_other_words() {
        let flag = Setting {
            kind: Kind::Flag,
            default: "0",
            ..NUM
        };
        assert_eq!(flag.flag_in(&env_of("ON")), Ok(true));
        assert_eq!(flag.flag_in(&|_| None), Ok(false));
        assert!(flag.flag_in(&env_of("2")).is_err());
        let choice = Setting {
            kind: Kind::Choice(&["auto", "dma"]),
            default: "auto",
            ..NUM
        };
        assert_eq!(choice.choice_in(&env_of("DMA")), Ok(Some("dma")));
        let e = choice.choice_in(&env_of("fast")).unwrap_err().to_string();
        assert!(e.contains("one of auto, dma"), "{e}");
    }

    #[test]
    fn the_renderings_list_every_setting() {
        let md = render_markdown();
        let text = render_text(&|_| None);
        for s in all() {
            assert!(md.contains(&format!("`{}`", s.env)), "{}", s.env);
            assert!(text.contains(s.env), "{}", s.env);
        }
    }
}

/// Checks of the table against the tree: the docs' copy, and every `COMMHAL_*` name the
/// code spells.
#[cfg(test)]
mod tree_tests {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use super::*;

    const BEGIN: &str = "<!-- settings:begin (rendered from hal/src/settings; do not edit) -->\n";
    const END: &str = "<!-- settings:end -->";

    fn repo() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    /// `docs/tuning.md` holds [`render_markdown`] between its markers.
    /// `COMMHAL_RERENDER=1` writes the rendering over it (then check `git diff`).
    #[test]
    fn docs_tuning_md_holds_the_rendered_table() {
        let path = repo().join("docs/tuning.md");
        let doc = std::fs::read_to_string(&path).expect("docs/tuning.md");
        let (Some(b), Some(e)) = (doc.find(BEGIN), doc.find(END)) else {
            panic!("docs/tuning.md has no settings markers ({BEGIN:?} … {END:?})")
        };
        let rendered = render_markdown();
        if doc[b + BEGIN.len()..e] == rendered {
            return;
        }
        if tests::RERENDER.flag().unwrap_or(false) {
            let new = format!("{}{BEGIN}{rendered}{}", &doc[..b], &doc[e..]);
            std::fs::write(&path, new).expect("write docs/tuning.md");
            return;
        }
        panic!(
            "docs/tuning.md's settings table differs from the declarations: COMMHAL_RERENDER=1 cargo test -p commhal-hal docs_tuning_md, then check git diff"
        );
    }

    /// Every `"COMMHAL_…"` string in the Rust sources is a declared setting, and no
    /// code outside this module reads one with `std::env::var` by name.
    #[test]
    fn every_variable_the_code_names_is_declared() {
        let out = Command::new("git")
            .args(["ls-files", "*.rs"])
            .current_dir(repo())
            .output()
            .expect("git must be installed to list the tree's sources");
        assert!(out.status.success(), "git ls-files failed");
        let mut undeclared = Vec::new();
        let mut direct = Vec::new();
        for file in String::from_utf8_lossy(&out.stdout).lines() {
            if file.starts_with("hal/src/settings/") {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(repo().join(file)) else {
                continue;
            };
            for (n, line) in text.lines().enumerate() {
                for name in quoted_names(line) {
                    if find(name).is_none() {
                        undeclared.push(format!("{file}:{}: {name}", n + 1));
                    }
                    if line.contains("env::var") {
                        direct.push(format!("{file}:{}: {name}", n + 1));
                    }
                }
            }
        }
        assert!(
            undeclared.is_empty(),
            "declare these in hal/src/settings (and read them through the declaration):\n{}",
            undeclared.join("\n")
        );
        assert!(
            direct.is_empty(),
            "read these through their declaration in hal/src/settings, not std::env::var:\n{}",
            direct.join("\n")
        );
    }

    /// The `COMMHAL_…` names written in double quotes on `line`.
    fn quoted_names(line: &str) -> Vec<&str> {
        let mut names = Vec::new();
        let mut rest = line;
        while let Some(i) = rest.find("\"COMMHAL_") {
            let tail = &rest[i + 1..];
            let end = tail
                .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(tail.len());
            if tail[end..].starts_with('"') {
                names.push(&tail[..end]);
            }
            rest = &tail[end..];
        }
        names
    }

    #[test]
    fn quoted_names_finds_whole_literals_only() {
        assert_eq!(
            quoted_names(r#"x("COMMHAL_A", "COMMHAL_B_2") "COMMHAL_C={v}" COMMHAL_D"#),
            ["COMMHAL_A", "COMMHAL_B_2"]
        );
    }
}

//! Which backends to use, in which order, with which options.
//!
//! **Precedence** of the backend list, first given wins:
//! 1. the CLI (`--backends a,b`, passed to [`Selection::resolve`] as `cli`);
//! 2. `COMMHAL_BACKENDS=a,b,c` (comma-separated, ordered);
//! 3. the `backends = [...]` key of the TOML file named by `COMMHAL_CONFIG`;
//! 4. default: every available backend, ranked by [`rank_by_reach`].
//!
//! Option tables `[backend.NAME]` always come from the `COMMHAL_CONFIG` file, whichever
//! source gave the list. An empty value (`COMMHAL_BACKENDS=`) counts as not given.
//!
//! ```toml
//! # commhal.toml, named by COMMHAL_CONFIG
//! backends = ["example-loopback", "host-emu"]
//!
//! [backend.host-emu]
//! threads = 4
//! ```
//!
//! The parsing functions take their inputs as arguments (nothing reads the process
//! environment except [`Selection::from_env`]), so they are unit-testable.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::{Backend, BackendOptions};
use crate::error::{HalError, Result};
use crate::settings::host::{BACKENDS, CONFIG};
use crate::topology::{Endpoint, Rank, Reach};

/// Where the backend list of a [`Selection`] came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SelectionSource {
    /// Command-line flags.
    Cli,
    /// `COMMHAL_BACKENDS`.
    BackendsEnv,
    /// The `backends` key of this `COMMHAL_CONFIG` file.
    ConfigFile(PathBuf),
    /// Nothing named backends: every available one, ranked by reach.
    #[default]
    Default,
}

/// A resolved choice of backends: hand it to [`super::Catalog::instantiate`].
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Backend names in order of preference; `None` = default (every available one,
    /// ranked by reach).
    pub backends: Option<Vec<String>>,
    /// `[backend.NAME]` option tables from the config file, by name.
    pub options: BTreeMap<String, BackendOptions>,
    /// Where `backends` came from.
    pub source: SelectionSource,
}

/// The parsed `COMMHAL_CONFIG` file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConfigFile {
    /// Its `backends` list, if it has one.
    pub backends: Option<Vec<String>>,
    /// Its `[backend.NAME]` tables.
    pub options: BTreeMap<String, BackendOptions>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    backends: Option<Vec<String>>,
    #[serde(default)]
    backend: BTreeMap<String, BackendOptions>,
}

fn check_names(names: Vec<String>, source: &str) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for n in names {
        let n = n.trim().to_string();
        if n.is_empty() {
            continue;
        }
        if !n
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(HalError::Config(format!(
                "{source}: `{n}` is not a backend name (names are lowercase letters, digits and `-`; separate names with commas)"
            )));
        }
        if out.contains(&n) {
            return Err(HalError::Config(format!(
                "{source}: backend `{n}` is listed twice; list each backend once"
            )));
        }
        out.push(n);
    }
    Ok(out)
}

/// Parse a comma-separated backend list (`COMMHAL_BACKENDS` or a CLI flag). Spaces and
/// empty items are ignored; a duplicate or malformed name is a [`HalError::Config`]
/// naming `source`.
pub fn parse_backend_list(value: &str, source: &str) -> Result<Vec<String>> {
    check_names(value.split(',').map(str::to_string).collect(), source)
}

/// Parse the text of a `COMMHAL_CONFIG` file; `file` names it in errors. Unknown
/// top-level keys are errors (they are usually typos).
pub fn parse_config(text: &str, file: &str) -> Result<ConfigFile> {
    let raw: RawConfig = toml::from_str(text).map_err(|e| {
        HalError::Config(format!(
            "{} file {file}: {e}; expected `backends = [\"name\", ...]` and `[backend.NAME]` tables",
            CONFIG.env
        ))
    })?;
    let source = format!("{} file {file}, key `backends`", CONFIG.env);
    let backends = match raw.backends {
        Some(list) => Some(check_names(list, &source)?),
        None => None,
    };
    Ok(ConfigFile {
        backends: backends.filter(|b| !b.is_empty()),
        options: raw.backend,
    })
}

impl Selection {
    /// Build a selection from explicit inputs: `cli` (each item may itself be a
    /// comma-separated list), the values of `COMMHAL_BACKENDS` and `COMMHAL_CONFIG`.
    /// Reads the config file if one is named.
    pub fn resolve(
        cli: Option<&[String]>,
        backends_env: Option<&str>,
        config_env: Option<&str>,
    ) -> Result<Selection> {
        let config_path = config_env.map(str::trim).filter(|s| !s.is_empty());
        let config = match config_path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    HalError::Config(format!(
                        "cannot read {env} file {path}: {e}; fix the path or unset {env}",
                        env = CONFIG.env
                    ))
                })?;
                parse_config(&text, path)?
            }
            None => ConfigFile::default(),
        };
        let mut sel = Selection {
            backends: None,
            options: config.options,
            source: SelectionSource::Default,
        };
        let cli_list = match cli {
            Some(items) => {
                let joined = items.join(",");
                Some(parse_backend_list(&joined, "command line")?).filter(|l| !l.is_empty())
            }
            None => None,
        };
        let env_list = match backends_env {
            Some(v) => Some(parse_backend_list(v, BACKENDS.env)?).filter(|l| !l.is_empty()),
            None => None,
        };
        if let Some(list) = cli_list {
            sel.backends = Some(list);
            sel.source = SelectionSource::Cli;
        } else if let Some(list) = env_list {
            sel.backends = Some(list);
            sel.source = SelectionSource::BackendsEnv;
        } else if let (Some(list), Some(path)) = (config.backends, config_path) {
            sel.backends = Some(list);
            sel.source = SelectionSource::ConfigFile(PathBuf::from(path));
        }
        Ok(sel)
    }

    /// [`Selection::resolve`] with `COMMHAL_BACKENDS` and `COMMHAL_CONFIG` read from the
    /// process environment.
    pub fn from_env(cli: Option<&[String]>) -> Result<Selection> {
        let backends = BACKENDS.text_utf8()?;
        let config = CONFIG.text_utf8()?;
        Selection::resolve(cli, backends.as_deref(), config.as_deref())
    }

    /// An explicit list (as if given on the command line), no options.
    pub fn named<S: AsRef<str>>(names: &[S]) -> Selection {
        Selection {
            backends: Some(names.iter().map(|s| s.as_ref().to_string()).collect()),
            options: BTreeMap::new(),
            source: SelectionSource::Cli,
        }
    }

    /// The `[backend.NAME]` options for `name` (empty if none).
    pub fn options_for(&self, name: &str) -> BackendOptions {
        self.options.get(name).cloned().unwrap_or_default()
    }
}

/// A constructed backend with how well it reaches a set of peers.
#[derive(Debug)]
pub struct RankedBackend {
    /// The backend.
    pub backend: Backend,
    /// How many peers at least one of its transports reaches.
    pub reached: usize,
    /// Sum over reached peers of the cheapest cost among its transports.
    pub cost: u64,
    /// Peers it cannot reach, with the reason its first transport gave.
    pub unreached: Vec<(Rank, String)>,
}

/// Rank backends for talking from `local` to `peers`: most peers reached first, then
/// lowest total cost, then name. For each peer a backend's best transport (memory,
/// port or switch) counts. Every backend is returned, including those reaching none.
pub fn rank_by_reach(
    backends: Vec<Backend>,
    local: &Endpoint,
    peers: &[Endpoint],
) -> Vec<RankedBackend> {
    let mut ranked: Vec<RankedBackend> = backends
        .into_iter()
        .map(|backend| {
            let mut reached = 0;
            let mut cost = 0u64;
            let mut unreached = Vec::new();
            for peer in peers {
                let mut reaches: Vec<Reach> = Vec::new();
                if let Some(m) = &backend.memory {
                    reaches.push(m.reach(local, peer));
                }
                if let Some(p) = &backend.port {
                    reaches.push(p.reach(local, peer));
                }
                if let Some(s) = &backend.switch {
                    reaches.push(s.reach(local, peer));
                }
                let best = reaches
                    .iter()
                    .filter_map(|r| match r {
                        Reach::Yes { cost } => Some(*cost),
                        Reach::No(_) => None,
                    })
                    .min();
                match best {
                    Some(c) => {
                        reached += 1;
                        cost += u64::from(c);
                    }
                    None => {
                        let why = reaches
                            .iter()
                            .find_map(|r| match r {
                                Reach::No(why) => Some(why.clone()),
                                Reach::Yes { .. } => None,
                            })
                            .unwrap_or_else(|| "it provides no transport".into());
                        unreached.push((peer.rank, why));
                    }
                }
            }
            RankedBackend {
                backend,
                reached,
                cost,
                unreached,
            }
        })
        .collect();
    ranked.sort_by(|a, b| {
        b.reached
            .cmp(&a.reached)
            .then(a.cost.cmp(&b.cost))
            .then_with(|| a.backend.name.cmp(&b.backend.name))
    });
    ranked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_parsing_trims_skips_empty_and_rejects_duplicates() {
        assert_eq!(
            parse_backend_list(" a , b,,c,", "t").unwrap(),
            vec!["a", "b", "c"]
        );
        assert!(parse_backend_list("", "t").unwrap().is_empty());
        let e = parse_backend_list("a,b,a", BACKENDS.env).unwrap_err();
        assert!(e.to_string().contains("listed twice"), "{e}");
        assert!(e.to_string().contains(BACKENDS.env), "{e}");
        let e = parse_backend_list("a;b", "t").unwrap_err();
        assert!(e.to_string().contains("not a backend name"), "{e}");
    }

    #[test]
    fn config_parsing() {
        let c = parse_config(
            "backends = [\"b\", \"a\"]\n[backend.a]\nthreads = 4\n",
            "x.toml",
        )
        .unwrap();
        assert_eq!(c.backends, Some(vec!["b".into(), "a".into()]));
        assert_eq!(c.options["a"]["threads"].as_integer(), Some(4));
        let e = parse_config("backend = [\"a\"]", "x.toml").unwrap_err();
        assert!(e.to_string().contains("x.toml"), "{e}");
        let e = parse_config("bakends = [\"a\"]", "x.toml").unwrap_err();
        assert!(e.to_string().contains("bakends"), "{e}");
        assert_eq!(parse_config("", "x").unwrap(), ConfigFile::default());
    }

    #[test]
    fn precedence_cli_env_default() {
        let cli = vec!["c1,c2".to_string()];
        let s = Selection::resolve(Some(&cli), Some("e1"), None).unwrap();
        assert_eq!(s.backends, Some(vec!["c1".into(), "c2".into()]));
        assert_eq!(s.source, SelectionSource::Cli);
        let s = Selection::resolve(Some(&[]), Some("e1,e2"), None).unwrap();
        assert_eq!(s.backends, Some(vec!["e1".into(), "e2".into()]));
        assert_eq!(s.source, SelectionSource::BackendsEnv);
        let s = Selection::resolve(None, Some(" "), None).unwrap();
        assert_eq!(s.backends, None);
        assert_eq!(s.source, SelectionSource::Default);
        let e = Selection::resolve(None, None, Some("/nonexistent/commhal.toml")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/commhal.toml"), "{e}");
    }
}

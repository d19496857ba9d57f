//! Per-backend expectations: known failures, with reasons.
//!
//! File `conformance/expectations/<backend>.toml`:
//!
//! ```toml
//! [[known-failure]]
//! id = "some-backend/port/flush-remote-visible/*"   # exact id, or a prefix ending in `*`
//! reason = "the NIC acknowledges before the data is in memory; tracked in #123"
//! ```
//!
//! A listed case that fails is reported as *known-failure* (skipped, with the reason);
//! one that passes is reported as *unexpected-pass* (counted as failed, so the entry is
//! removed once the backend is fixed).

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Known failures of one backend.
#[derive(Debug, Clone, Default)]
pub struct Expectations {
    known: Vec<KnownFailure>,
}

/// One `[[known-failure]]` entry.
#[derive(Debug, Clone, Deserialize)]
pub struct KnownFailure {
    /// Case id, or a prefix ending in `*`.
    pub id: String,
    /// Why it fails.
    pub reason: String,
}

#[derive(Debug, Deserialize, Default)]
struct File {
    #[serde(default, rename = "known-failure")]
    known_failure: Vec<KnownFailure>,
}

/// Where the expectation files of this source tree live.
pub fn default_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("expectations")
}

impl Expectations {
    /// Parse a file's text.
    pub fn parse(text: &str) -> Result<Expectations, String> {
        let f: File = toml::from_str(text).map_err(|e| {
            format!("expectations file is not valid: {e} (expected [[known-failure]] tables with id and reason)")
        })?;
        for k in &f.known_failure {
            if k.reason.trim().is_empty() {
                return Err(format!(
                    "known failure `{}` has no reason: say why it fails",
                    k.id
                ));
            }
        }
        Ok(Expectations {
            known: f.known_failure,
        })
    }

    /// Load `path`; a missing file means no known failures.
    pub fn load(path: &Path) -> Result<Expectations, String> {
        match std::fs::read_to_string(path) {
            Ok(t) => Expectations::parse(&t).map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Expectations::default()),
            Err(e) => Err(format!("reading {}: {e}", path.display())),
        }
    }

    /// `<dir>/<backend>.toml`.
    pub fn for_backend(dir: &Path, backend: &str) -> Result<Expectations, String> {
        Expectations::load(&dir.join(format!("{backend}.toml")))
    }

    /// The reason `id` is expected to fail, if it is.
    pub fn lookup(&self, id: &str) -> Option<&str> {
        self.known
            .iter()
            .find(|k| match k.id.strip_suffix('*') {
                Some(prefix) => id.starts_with(prefix),
                None => id == k.id,
            })
            .map(|k| k.reason.as_str())
    }

    /// Entries, in file order.
    pub fn entries(&self) -> &[KnownFailure] {
        &self.known
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_lookup() {
        let e = Expectations::parse(
            "[[known-failure]]\nid = \"b/port/x\"\nreason = \"r1\"\n[[known-failure]]\nid = \"b/memory/*\"\nreason = \"r2\"\n",
        )
        .unwrap();
        assert_eq!(e.lookup("b/port/x"), Some("r1"));
        assert_eq!(e.lookup("b/port/x/n=1"), None);
        assert_eq!(e.lookup("b/memory/anything"), Some("r2"));
        assert!(Expectations::parse("[[known-failure]]\nid = \"a\"\nreason = \"\"\n").is_err());
        assert!(Expectations::parse("nonsense = [").is_err());
        assert!(Expectations::parse("").unwrap().entries().is_empty());
    }

    #[test]
    fn shipped_files_parse() {
        for entry in std::fs::read_dir(default_dir()).unwrap() {
            let p = entry.unwrap().path();
            Expectations::load(&p).unwrap();
        }
    }
}

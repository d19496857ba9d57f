//! Backend discovery and selection.
//!
//! * **Built-ins** register a [`BackendDescriptor`] with `inventory::submit!`; the
//!   `commhal-backends` crate names every enabled backend crate so the linker keeps the
//!   registration ([`builtin`] lists them).
//! * **Plugins** are loaded from `COMMHAL_PLUGIN_PATH` by [`crate::plugin`].
//! * A [`Catalog`] holds both as [`BackendEntry`]s (one interface: name, kinds,
//!   guarantees, probe, create, origin) plus the errors met while loading plugins.
//!   Names are unique: a plugin whose name is taken (by a built-in or an earlier plugin)
//!   is refused with an error naming its file.
//! * A [`Selection`] says which backends to use, in which order, with which options
//!   (CLI > `COMMHAL_BACKENDS` > `COMMHAL_CONFIG` > default); [`Catalog::instantiate`]
//!   turns it into constructed [`Backend`]s.
//!
//! **Plugin load errors** never make discovery fail: they are kept in
//! [`Catalog::errors`] (so `commhal info` can show them) and a plugin that failed is
//! simply not in the catalog. *Asking* for it by name is an error
//! ([`HalError::UnknownBackend`], whose message points at those load errors).

mod selection;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::dynamic::{DynMemoryMapped, DynPortMapped, DynSwitchMapped};
use crate::error::{HalError, Result};
use crate::guarantees::Guarantees;
use crate::plugin::loader::PluginBackend;
use crate::settings::host::PLUGIN_PATH;
use crate::topology::Endpoint;
use crate::transport::TransportKinds;

pub use selection::{
    ConfigFile, RankedBackend, Selection, SelectionSource, parse_backend_list, parse_config,
    rank_by_reach,
};

/// Whether a backend can run here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", content = "reason", rename_all = "kebab-case")]
pub enum Availability {
    /// Ready to use.
    Available,
    /// Not usable on this machine, and why (no driver, no device, disabled by policy).
    Unavailable(String),
}

impl Availability {
    /// True for [`Availability::Available`].
    pub fn is_available(&self) -> bool {
        matches!(self, Availability::Available)
    }
}

/// A constructed backend: the transports it provides, as object-safe handles.
#[derive(Clone, Default)]
pub struct Backend {
    /// Backend name.
    pub name: String,
    /// Its memory-mapped transport, if any.
    pub memory: Option<Arc<dyn DynMemoryMapped>>,
    /// Its port-mapped transport, if any.
    pub port: Option<Arc<dyn DynPortMapped>>,
    /// Its switch-mapped transport, if any.
    pub switch: Option<Arc<dyn DynSwitchMapped>>,
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backend")
            .field("name", &self.name)
            .field("memory", &self.memory.is_some())
            .field("port", &self.port.is_some())
            .field("switch", &self.switch.is_some())
            .finish()
    }
}

/// Options handed to a backend's constructor (a `[backend.NAME]` table of the
/// `COMMHAL_CONFIG` TOML file, or empty).
pub type BackendOptions = toml::Table;

/// How a built-in backend introduces itself. Submit one with
/// `inventory::submit! { BackendDescriptor { .. } }`.
#[derive(Clone, Copy)]
pub struct BackendDescriptor {
    /// Unique name (`host-emu`, `cuda-nvlink`, ...).
    pub name: &'static str,
    /// One line for `commhal info`.
    pub description: &'static str,
    /// Which transport kinds it provides.
    pub kinds: TransportKinds,
    /// What it promises (static: the same on every machine where it is available).
    pub guarantees: fn() -> Guarantees,
    /// Cheap check whether it can run here; must not panic and must not touch devices
    /// in ways that have side effects.
    pub probe: fn() -> Availability,
    /// Build it. Called only after `probe` said available.
    pub create: fn(&BackendOptions) -> Result<Backend>,
}

impl fmt::Debug for BackendDescriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendDescriptor")
            .field("name", &self.name)
            .field("kinds", &self.kinds)
            .finish()
    }
}

inventory::collect!(BackendDescriptor);

/// Every built-in backend linked into this binary, sorted by name.
pub fn builtin() -> Vec<&'static BackendDescriptor> {
    let mut v: Vec<_> = inventory::iter::<BackendDescriptor>.into_iter().collect();
    v.sort_by_key(|d| d.name);
    v
}

/// Where a catalog entry comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Linked into this binary (inventory registration).
    Builtin,
    /// Loaded from this plugin library.
    Plugin(PathBuf),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Builtin => write!(f, "built-in"),
            Origin::Plugin(p) => write!(f, "plugin {}", p.display()),
        }
    }
}

/// One backend the catalog knows: a built-in descriptor or a loaded plugin. Both answer
/// the same questions, so callers never care which it is.
#[derive(Debug, Clone)]
pub enum BackendEntry {
    /// A backend linked into this binary.
    Builtin(&'static BackendDescriptor),
    /// A backend loaded from a plugin library.
    Plugin(Arc<PluginBackend>),
}

impl BackendEntry {
    /// Unique name.
    pub fn name(&self) -> &str {
        match self {
            BackendEntry::Builtin(d) => d.name,
            BackendEntry::Plugin(p) => p.name(),
        }
    }
    /// One line for `commhal info`.
    pub fn description(&self) -> &str {
        match self {
            BackendEntry::Builtin(d) => d.description,
            BackendEntry::Plugin(p) => p.description(),
        }
    }
    /// Transport kinds it provides.
    pub fn kinds(&self) -> TransportKinds {
        match self {
            BackendEntry::Builtin(d) => d.kinds,
            BackendEntry::Plugin(p) => p.kinds(),
        }
    }
    /// What it promises.
    pub fn guarantees(&self) -> Guarantees {
        match self {
            BackendEntry::Builtin(d) => (d.guarantees)(),
            BackendEntry::Plugin(p) => p.guarantees(),
        }
    }
    /// Whether it can run here (cheap; no side effects).
    pub fn probe(&self) -> Availability {
        match self {
            BackendEntry::Builtin(d) => (d.probe)(),
            BackendEntry::Plugin(p) => p.probe(),
        }
    }
    /// Build it with `opts` (the `[backend.NAME]` table, or empty). Probes first: an
    /// unavailable backend gives [`HalError::Unavailable`] with the probe's reason.
    pub fn create(&self, opts: &BackendOptions) -> Result<Backend> {
        match self {
            BackendEntry::Builtin(d) => {
                if let Availability::Unavailable(reason) = (d.probe)() {
                    return Err(HalError::Unavailable {
                        backend: d.name.to_string(),
                        reason,
                    });
                }
                (d.create)(opts)
            }
            BackendEntry::Plugin(p) => p.create(opts),
        }
    }
    /// Built-in, or the plugin file it came from.
    pub fn origin(&self) -> Origin {
        match self {
            BackendEntry::Builtin(_) => Origin::Builtin,
            BackendEntry::Plugin(p) => Origin::Plugin(p.file().to_path_buf()),
        }
    }
    /// Everything `commhal info` prints about it (runs `probe`).
    pub fn info(&self) -> BackendInfo {
        BackendInfo {
            name: self.name().to_string(),
            description: self.description().to_string(),
            kinds: self.kinds(),
            origin: self.origin().to_string(),
            availability: self.probe(),
            guarantees: self.guarantees(),
        }
    }
}

/// A serialisable summary of one entry (for `commhal info`, text or JSON).
#[derive(Debug, Clone, Serialize)]
pub struct BackendInfo {
    /// Name.
    pub name: String,
    /// One-line description.
    pub description: String,
    /// Transport kinds.
    pub kinds: TransportKinds,
    /// `built-in` or `plugin <path>`.
    pub origin: String,
    /// Result of `probe`.
    pub availability: Availability,
    /// Claimed guarantees.
    pub guarantees: Guarantees,
}

/// Every backend this process can use: built-ins plus loaded plugins, unique by name,
/// sorted by name, and the errors met while loading plugins.
#[derive(Debug, Default)]
pub struct Catalog {
    entries: Vec<BackendEntry>,
    errors: Vec<HalError>,
}

impl Catalog {
    /// Built-ins linked into this binary plus plugins found on `COMMHAL_PLUGIN_PATH`.
    /// Fails only if `COMMHAL_PLUGIN_PATH` is not valid UTF-8; bad plugins are reported
    /// in [`Catalog::errors`].
    pub fn discover() -> Result<Catalog> {
        let path = PLUGIN_PATH.text_utf8()?;
        Ok(Catalog::with_builtins(builtin(), path.as_deref()))
    }

    /// A catalog of the given built-ins plus the plugins a `COMMHAL_PLUGIN_PATH`
    /// value names (`None`: no plugins). Tests use it to inject fake built-ins.
    pub fn with_builtins(
        builtins: Vec<&'static BackendDescriptor>,
        plugin_path: Option<&str>,
    ) -> Catalog {
        let mut cat = Catalog::default();
        for d in builtins {
            if let Some(other) = cat.get_entry(d.name) {
                cat.errors.push(HalError::Config(format!(
                    "two built-in backends are named `{}` ({} kept); rename one in its crate",
                    d.name,
                    other.description()
                )));
                continue;
            }
            cat.entries.push(BackendEntry::Builtin(d));
        }
        if let Some(path) = plugin_path {
            let (plugins, errors) = crate::plugin::loader::load_path(path);
            cat.errors.extend(errors);
            for p in plugins {
                if let Err(e) = cat.add_plugin(p) {
                    cat.errors.push(e);
                }
            }
        }
        cat.entries.sort_by(|a, b| a.name().cmp(b.name()));
        cat
    }

    /// Add a loaded plugin; refused (error naming its file) if its name is taken.
    pub fn add_plugin(&mut self, plugin: Arc<PluginBackend>) -> Result<()> {
        if let Some(other) = self.get_entry(plugin.name()) {
            let by = match other.origin() {
                Origin::Builtin => "the built-in backend of that name; rename the plugin".into(),
                Origin::Plugin(f) => format!(
                    "plugin {}; keep only one of them on {}",
                    f.display(),
                    PLUGIN_PATH.env
                ),
            };
            return Err(HalError::Plugin {
                file: plugin.file().display().to_string(),
                reason: format!("backend name `{}` is already taken by {by}", plugin.name()),
            });
        }
        self.entries.push(BackendEntry::Plugin(plugin));
        self.entries.sort_by(|a, b| a.name().cmp(b.name()));
        Ok(())
    }

    /// Load one plugin file and add it (for tools that take a library path directly).
    pub fn add_plugin_file(&mut self, file: &Path) -> Result<()> {
        self.add_plugin(PluginBackend::load(file)?)
    }

    /// Every entry, sorted by name.
    pub fn entries(&self) -> &[BackendEntry] {
        &self.entries
    }

    /// Problems met while building the catalog (bad plugins, name clashes).
    pub fn errors(&self) -> &[HalError] {
        &self.errors
    }

    /// Every name, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.entries.iter().map(|e| e.name()).collect()
    }

    fn get_entry(&self, name: &str) -> Option<&BackendEntry> {
        self.entries.iter().find(|e| e.name() == name)
    }

    /// The entry called `name`, or [`HalError::UnknownBackend`] listing the known ones.
    pub fn get(&self, name: &str) -> Result<&BackendEntry> {
        self.get_entry(name).ok_or_else(|| self.unknown(name))
    }

    fn unknown(&self, name: &str) -> HalError {
        let mut known = if self.entries.is_empty() {
            "(none)".to_string()
        } else {
            self.names().join(", ")
        };
        if !self.errors.is_empty() {
            known.push_str(&format!(
                " ({} plugin problem(s) while loading, see `commhal info`)",
                self.errors.len()
            ));
        }
        HalError::UnknownBackend {
            name: name.to_string(),
            known,
        }
    }

    /// Entries whose probe says available, sorted by name.
    pub fn available(&self) -> Vec<&BackendEntry> {
        self.entries
            .iter()
            .filter(|e| e.probe().is_available())
            .collect()
    }

    /// [`BackendEntry::info`] of every entry.
    pub fn infos(&self) -> Vec<BackendInfo> {
        self.entries.iter().map(|e| e.info()).collect()
    }

    /// The entries a selection names, in its order. An explicit list must name known
    /// backends ([`HalError::UnknownBackend`] otherwise); the default is every
    /// available entry, by name (ranking needs constructed backends: see
    /// [`Catalog::instantiate`]).
    pub fn resolve(&self, selection: &Selection) -> Result<Vec<&BackendEntry>> {
        match &selection.backends {
            Some(names) => names.iter().map(|n| self.get(n)).collect(),
            None => Ok(self.available()),
        }
    }

    /// Build the selected backends.
    ///
    /// * Explicit list: every named backend is created in the given order, with its
    ///   options; any that is unknown, unavailable or fails to build is an error.
    /// * Default: every available backend is created (one that fails is skipped with a
    ///   warning), ranked with [`rank_by_reach`] over `peers`, and those reaching no
    ///   peer are dropped (none are dropped when `peers` is empty).
    pub fn instantiate(
        &self,
        selection: &Selection,
        local: &Endpoint,
        peers: &[Endpoint],
    ) -> Result<Vec<Backend>> {
        let entries = self.resolve(selection)?;
        if selection.backends.is_some() {
            return entries
                .iter()
                .map(|e| e.create(&selection.options_for(e.name())))
                .collect();
        }
        let mut built = Vec::new();
        for e in entries {
            match e.create(&selection.options_for(e.name())) {
                Ok(b) => built.push(b),
                Err(err) => tracing::warn!(backend = e.name(), "skipped: {err}"),
            }
        }
        Ok(rank_by_reach(built, local, peers)
            .into_iter()
            .filter(|r| peers.is_empty() || r.reached > 0)
            .map(|r| r.backend)
            .collect())
    }
}

//! Finding and opening plugin libraries.
//!
//! **Search rule.** `COMMHAL_PLUGIN_PATH` is a colon-separated list of entries (empty
//! entries are skipped):
//! * a **file** is loaded whatever its name;
//! * a **directory** contributes every regular file (or link to one) whose name starts
//!   with `libcommhal_`, contains `plugin` and ends with `.so` — for example
//!   `libcommhal_plugin_acme.so` or `libcommhal_acme_plugin.so` (what cargo names a
//!   `cdylib` crate `commhal-acme-plugin`) — in byte order of the names;
//! * an entry that does not exist is reported as an error.
//!
//! A library reached twice (same canonical path) is loaded once.
//!
//! **Checks.** The library is opened with `RTLD_NOW | RTLD_LOCAL` (unresolved symbols
//! fail now, not at first call), must export [`abi::ENTRY_SYMBOL`], the entry must return
//! a non-NULL table whose version is [`abi::ABI_VERSION`], whose size is at least
//! [`abi::TABLE_SIZE`], whose strings are UTF-8, whose guarantees are 0/1 flags and whose
//! function pointers are all set. Each failure is a [`HalError::Plugin`] naming the file.
//!
//! **Never unloaded.** A loaded library is leaked on purpose: its functions and strings
//! stay valid for the life of the process, so no handle can dangle.
//!
//! Loading a library runs its initialisers: put only trusted directories on the path.

use std::ffi::{CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{HalError, Result};
use crate::guarantees::{FlushMeaning, Guarantees, SignalStrength};
use crate::memory::MemoryKind;
use crate::plugin::abi::{self, PluginTable};
use crate::plugin::adapter::{PluginMemory, PluginTransport};
use crate::registry::{Availability, Backend, BackendOptions};
use crate::settings::host::PLUGIN_PATH;
use crate::transport::TransportKinds;

/// True for a directory entry the search rule takes: `libcommhal_*plugin*.so`.
pub fn is_plugin_file_name(name: &str) -> bool {
    name.starts_with("libcommhal_")
        && name.ends_with(".so")
        && name["libcommhal_".len()..].contains("plugin")
}

/// `e` and its sources (libloading's `Display` says only "dlopen failed"; the
/// loader's own text, e.g. "invalid ELF header", is the source).
fn with_sources(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let c_text = c.to_string();
        if !text.contains(&c_text) {
            text.push_str(": ");
            text.push_str(&c_text);
        }
        cause = c.source();
    }
    text
}

fn plugin_err(file: &Path, reason: impl Into<String>) -> HalError {
    HalError::Plugin {
        file: file.display().to_string(),
        reason: reason.into(),
    }
}

/// Expand a `COMMHAL_PLUGIN_PATH` value into library files, following the search rule.
/// Returns the files found and one error per entry that could not be read.
pub fn plugin_files(path_value: &str) -> (Vec<PathBuf>, Vec<HalError>) {
    let mut files = Vec::new();
    let mut errors = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut push = |p: PathBuf, files: &mut Vec<PathBuf>| {
        let key = std::fs::canonicalize(&p).unwrap_or_else(|_| p.clone());
        if seen.insert(key) {
            files.push(p);
        }
    };
    for entry in path_value.split(':').filter(|e| !e.trim().is_empty()) {
        let path = PathBuf::from(entry);
        match std::fs::metadata(&path) {
            Err(e) => errors.push(plugin_err(
                &path,
                format!(
                    "cannot read this {} entry ({e}); fix or remove it",
                    PLUGIN_PATH.env
                ),
            )),
            Ok(m) if m.is_dir() => {
                let rd = match std::fs::read_dir(&path) {
                    Ok(rd) => rd,
                    Err(e) => {
                        errors.push(plugin_err(&path, format!("cannot list directory: {e}")));
                        continue;
                    }
                };
                let mut names: Vec<PathBuf> = rd
                    .filter_map(|d| d.ok())
                    .filter(|d| d.file_name().to_str().is_some_and(is_plugin_file_name))
                    .map(|d| d.path())
                    .filter(|p| p.is_file())
                    .collect();
                names.sort();
                for p in names {
                    push(p, &mut files);
                }
            }
            Ok(_) => push(path, &mut files),
        }
    }
    (files, errors)
}

/// Load every plugin a `COMMHAL_PLUGIN_PATH` value names. Name clashes are *not*
/// checked here (the [`crate::registry::Catalog`] does that, against built-ins too).
pub fn load_path(path_value: &str) -> (Vec<Arc<PluginBackend>>, Vec<HalError>) {
    let (files, mut errors) = plugin_files(path_value);
    let mut plugins = Vec::new();
    for f in files {
        match PluginBackend::load(&f) {
            Ok(p) => plugins.push(p),
            Err(e) => errors.push(e),
        }
    }
    (plugins, errors)
}

/// A loaded, checked plugin library: everything its table declared, plus the table.
pub struct PluginBackend {
    file: PathBuf,
    name: String,
    description: String,
    guarantees: Guarantees,
    memory_kind: MemoryKind,
    reach_scope: u32,
    reach_cost: u32,
    table: &'static PluginTable,
}

impl std::fmt::Debug for PluginBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginBackend")
            .field("name", &self.name)
            .field("file", &self.file)
            .finish()
    }
}

/// Copy a NUL-terminated message out of a buffer the plugin wrote (never reads past it).
pub(crate) fn msg_from(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    let s = String::from_utf8_lossy(&bytes).trim().to_string();
    if s.is_empty() {
        "(the plugin gave no message)".into()
    } else {
        s
    }
}

fn flag(file: &Path, field: &str, v: u8) -> Result<bool> {
    match v {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(plugin_err(
            file,
            format!("guarantees.{field} is {v}; it must be 0 or 1"),
        )),
    }
}

impl PluginBackend {
    /// Open `file`, check its table and keep the library loaded for good.
    pub fn load(file: &Path) -> Result<Arc<PluginBackend>> {
        use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
        // SAFETY: loading a library runs its initialisers; the search path is the
        // operator's statement that these files are trusted commhal plugins (documented
        // in the module docs and docs/backends.md).
        let lib = unsafe { Library::open(Some(file), RTLD_NOW | RTLD_LOCAL) }.map_err(|e| {
            plugin_err(
                file,
                format!(
                    "cannot be loaded as a shared library ({}); build the plugin as a cdylib for this platform",
                    with_sources(&e)
                ),
            )
        })?;
        // SAFETY: the symbol is declared by the ABI as `EntryFn`; a library exporting a
        // symbol of this name with another type breaks the ABI contract.
        let entry = match unsafe { lib.get::<abi::EntryFn>(abi::ENTRY_SYMBOL) } {
            Ok(sym) => *sym,
            Err(_) => return Err(plugin_err(file, missing_entry_reason(&lib))),
        };
        // SAFETY: calling the checked entry point, which takes no arguments.
        let table_ptr = unsafe { entry() };
        if table_ptr.is_null() {
            return Err(plugin_err(
                file,
                "commhal_plugin_v1 returned NULL: the plugin could not initialise (see its own logs)",
            ));
        }
        // Read only the 8-byte header before trusting the size of the rest.
        // SAFETY: every version of the table starts with two u32 (version, size); the
        // pointer is non-NULL and the plugin promises it points to a table.
        let (version, size) = unsafe {
            let hdr = table_ptr.cast::<u32>();
            (hdr.read_unaligned(), hdr.add(1).read_unaligned())
        };
        if version != abi::ABI_VERSION {
            return Err(plugin_err(
                file,
                format!(
                    "ABI version {version} in its table, but this commhal speaks version {}; rebuild the plugin against this commhal",
                    abi::ABI_VERSION
                ),
            ));
        }
        if size < abi::TABLE_SIZE {
            return Err(plugin_err(
                file,
                format!(
                    "table is {size} bytes, smaller than the {} bytes of ABI v{}; rebuild the plugin against this commhal",
                    abi::TABLE_SIZE,
                    abi::ABI_VERSION
                ),
            ));
        }
        // SAFETY: non-NULL, version and size checked, so at least a full v1 table is
        // there; the library is leaked below, so the table lives for 'static.
        let table: &'static PluginTable = unsafe { &*table_ptr };
        let backend = Self::check(file, table)?;
        // Never unload: functions and strings of the table stay valid forever.
        std::mem::forget(lib);
        Ok(Arc::new(backend))
    }

    fn check(file: &Path, t: &'static PluginTable) -> Result<PluginBackend> {
        // SAFETY: the ABI requires NUL-terminated static strings (or NULL).
        let name = unsafe { abi::read_c_str(t.name) }
            .ok_or_else(|| plugin_err(file, "name is NULL or not UTF-8"))?;
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(plugin_err(
                file,
                format!("name `{name}` is not a backend name: use [a-z0-9-]+"),
            ));
        }
        // SAFETY: as for the name.
        let description = unsafe { abi::read_c_str(t.description) }
            .unwrap_or("")
            .to_string();
        if t.kinds != abi::KIND_MEMORY {
            return Err(plugin_err(
                file,
                format!(
                    "kinds = {:#x}: ABI v1 plugins provide exactly the memory-mapped kind ({:#x})",
                    t.kinds,
                    abi::KIND_MEMORY
                ),
            ));
        }
        let memory_kind = match t.memory_kind {
            abi::MEMORY_HOST_SHARED => MemoryKind::HostShared,
            abi::MEMORY_HOST_PINNED => MemoryKind::HostPinned,
            abi::MEMORY_DEVICE => MemoryKind::Device,
            k => {
                return Err(plugin_err(
                    file,
                    format!("memory_kind {k} is not 0, 1 or 2"),
                ));
            }
        };
        if !(abi::REACH_SAME_PROCESS..=abi::REACH_ANY).contains(&t.reach_scope) {
            return Err(plugin_err(
                file,
                format!("reach_scope {} is not 1, 2 or 3", t.reach_scope),
            ));
        }
        let g = &t.guarantees;
        let guarantees = Guarantees {
            signal: if flag(file, "signal_strong", g.signal_strong)? {
                SignalStrength::Strong
            } else {
                SignalStrength::Weak
            },
            put_put_ordered: flag(file, "put_put_ordered", g.put_put_ordered)?,
            flush: FlushMeaning {
                source_reusable: flag(file, "flush_source_reusable", g.flush_source_reusable)?,
                remote_visible: flag(file, "flush_remote_visible", g.flush_remote_visible)?,
            },
            get: flag(file, "get", g.get)?,
            ll8: flag(file, "ll8", g.ll8)?,
            ll16: flag(file, "ll16", g.ll16)?,
            graph_capture: flag(file, "graph_capture", g.graph_capture)?,
            write_copies_source: flag(file, "write_copies_source", g.write_copies_source)?,
            max_transfer: g.max_transfer,
            fifo_depth: g.fifo_depth,
        };
        let missing: Vec<&str> = [
            ("probe", t.probe.is_none()),
            ("create", t.create.is_none()),
            ("destroy", t.destroy.is_none()),
            ("mem_alloc", t.mem_alloc.is_none()),
            ("mem_export", t.mem_export.is_none()),
            ("mem_map", t.mem_map.is_none()),
            ("mem_release", t.mem_release.is_none()),
        ]
        .into_iter()
        .filter_map(|(n, missing)| missing.then_some(n))
        .collect();
        if !missing.is_empty() {
            return Err(plugin_err(
                file,
                format!(
                    "NULL function pointer(s) in its table: {}; every v1 function is required",
                    missing.join(", ")
                ),
            ));
        }
        Ok(PluginBackend {
            file: file.to_path_buf(),
            name: name.to_string(),
            description,
            guarantees,
            memory_kind,
            reach_scope: t.reach_scope,
            reach_cost: t.reach_cost,
            table: t,
        })
    }

    /// The library file it came from.
    pub fn file(&self) -> &Path {
        &self.file
    }
    /// Backend name from its table.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// One-line description from its table.
    pub fn description(&self) -> &str {
        &self.description
    }
    /// v1 plugins provide the memory-mapped kind only.
    pub fn kinds(&self) -> TransportKinds {
        TransportKinds {
            memory: true,
            port: false,
            switch: false,
        }
    }
    /// What the plugin claims.
    pub fn guarantees(&self) -> Guarantees {
        self.guarantees
    }
    /// Where its allocations live.
    pub fn memory_kind(&self) -> MemoryKind {
        self.memory_kind
    }
    pub(crate) fn reach_rule(&self) -> (u32, u32) {
        (self.reach_scope, self.reach_cost)
    }
    pub(crate) fn table(&self) -> &'static PluginTable {
        self.table
    }

    /// Ask the plugin whether it can run here.
    pub fn probe(&self) -> Availability {
        let Some(probe) = self.table.probe else {
            return Availability::Unavailable("plugin has no probe function".into());
        };
        let mut buf = [0 as c_char; abi::MSG_BUF_LEN];
        // SAFETY: `probe` is the plugin's v1 probe; `buf` is MSG_BUF_LEN writable bytes.
        let rc = unsafe { probe(buf.as_mut_ptr(), buf.len()) };
        match rc {
            1 => Availability::Available,
            0 => Availability::Unavailable(msg_from(&buf)),
            c => Availability::Unavailable(format!("probe failed (code {c}): {}", msg_from(&buf))),
        }
    }

    /// Build the backend: `create` on the plugin, wrapped as a `Backend` whose `memory`
    /// is a [`PluginMemory`]. `opts` reaches the plugin as a JSON object.
    pub fn create(self: &Arc<Self>, opts: &BackendOptions) -> Result<Backend> {
        if let Availability::Unavailable(reason) = self.probe() {
            return Err(HalError::Unavailable {
                backend: self.name.clone(),
                reason,
            });
        }
        let json = serde_json::to_string(opts)
            .ok()
            .and_then(|s| CString::new(s).ok())
            .ok_or_else(|| {
                HalError::Config(format!(
                    "options for backend `{}` cannot be passed as JSON",
                    self.name
                ))
            })?;
        let create = self
            .table
            .create
            .ok_or_else(|| HalError::backend(&self.name, "plugin has no create function"))?;
        let mut handle: *mut c_void = std::ptr::null_mut();
        let mut err = [0 as c_char; abi::MSG_BUF_LEN];
        // SAFETY: v1 `create`: NUL-terminated JSON, a valid out-pointer and a
        // MSG_BUF_LEN error buffer, all alive for the call.
        let rc = unsafe { create(json.as_ptr(), &mut handle, err.as_mut_ptr(), err.len()) };
        check_rc(&self.name, "create", rc, &err)?;
        if handle.is_null() {
            return Err(HalError::backend(
                &self.name,
                "create returned success but a NULL transport: plugin bug, report it to its vendor",
            ));
        }
        let transport = Arc::new(PluginTransport::new(self.clone(), handle));
        Ok(Backend {
            name: self.name.clone(),
            memory: Some(Arc::new(PluginMemory::new(transport))),
            port: None,
            switch: None,
        })
    }
}

/// Turn a plugin return code into a `Result`, with the message it wrote.
pub(crate) fn check_rc(name: &str, what: &str, rc: c_int, err: &[c_char]) -> Result<()> {
    if rc == abi::OK {
        return Ok(());
    }
    let msg = msg_from(err);
    Err(match rc {
        abi::ERR_INVALID => HalError::invalid(format!("backend `{name}` {what}: {msg}")),
        abi::ERR_UNSUPPORTED => HalError::unsupported(name, format!("{what}: {msg}")),
        abi::ERR_PANIC => HalError::backend(
            name,
            format!("{what}: internal plugin bug ({msg}); report it to the plugin's vendor"),
        ),
        _ => HalError::backend(name, format!("{what} failed (code {rc}): {msg}")),
    })
}

fn missing_entry_reason(lib: &libloading::os::unix::Library) -> String {
    for v in 2..=9u32 {
        let sym = format!("commhal_plugin_v{v}\0");
        // SAFETY: only checks the symbol exists; the pointer is never called.
        if unsafe { lib.get::<*const c_void>(sym.as_bytes()) }.is_ok() {
            return format!(
                "exports commhal_plugin_v{v} but not commhal_plugin_v1: it was built for a newer commhal (ABI v{v}); this one speaks v{}",
                abi::ABI_VERSION
            );
        }
    }
    "no `commhal_plugin_v1` entry point: not a commhal plugin (export \
     `extern \"C\" fn commhal_plugin_v1() -> *const PluginTable` with #[unsafe(no_mangle)])"
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_file_name_rule() {
        assert!(is_plugin_file_name("libcommhal_plugin_acme.so"));
        assert!(is_plugin_file_name("libcommhal_example_plugin.so"));
        assert!(!is_plugin_file_name("libcommhal_nccl.so"));
        assert!(!is_plugin_file_name("libacme_plugin.so"));
        assert!(!is_plugin_file_name("libcommhal_plugin_acme.so.1"));
        assert!(!is_plugin_file_name("libcommhal_.so"));
    }

    #[test]
    fn msg_from_stops_at_nul_and_never_overruns() {
        let buf: Vec<c_char> = b"hello\0junk".iter().map(|&b| b as c_char).collect();
        assert_eq!(msg_from(&buf), "hello");
        let unterminated: Vec<c_char> = b"abc".iter().map(|&b| b as c_char).collect();
        assert_eq!(msg_from(&unterminated), "abc");
        assert_eq!(msg_from(&[0; 4]), "(the plugin gave no message)");
    }

    #[test]
    fn rc_codes_map_to_errors() {
        let err: Vec<c_char> = b"bad len\0".iter().map(|&b| b as c_char).collect();
        assert!(check_rc("x", "alloc", abi::OK, &err).is_ok());
        assert!(matches!(
            check_rc("x", "alloc", abi::ERR_INVALID, &err),
            Err(HalError::InvalidArgument(m)) if m.contains("bad len")
        ));
        assert!(matches!(
            check_rc("x", "alloc", abi::ERR_UNSUPPORTED, &err),
            Err(HalError::Unsupported { .. })
        ));
        assert!(matches!(
            check_rc("x", "alloc", 42, &err),
            Err(HalError::Backend { msg, .. }) if msg.contains("42")
        ));
    }
}

//! Catalog and selection with injected fake built-ins (no real backend is linked into
//! the hal's tests) and the plugin search path's error reporting. Loading real plugin
//! libraries is tested in plugins/example-plugin/tests.

use std::path::PathBuf;
use std::sync::Arc;

use commhal_hal::dynamic::DynMemoryMapped;
use commhal_hal::registry::{
    Availability, Backend, BackendDescriptor, BackendEntry, BackendOptions, Catalog, Origin,
    Selection, SelectionSource, rank_by_reach,
};
use commhal_hal::{
    Device, Endpoint, Export, Guarantees, HalError, Reach, Region, Result, TransportKinds,
};

/// A transport whose reach is fixed: `Some(cost)` to same-node peers, else no.
#[derive(Debug)]
struct FakeMem {
    name: String,
    same_node_cost: Option<u32>,
    remote_cost: Option<u32>,
}

impl DynMemoryMapped for FakeMem {
    fn name(&self) -> &str {
        &self.name
    }
    fn guarantees(&self) -> Guarantees {
        Guarantees::minimal()
    }
    fn reach(&self, local: &Endpoint, remote: &Endpoint) -> Reach {
        let c = if local.same_node(remote) {
            self.same_node_cost
        } else {
            self.remote_cost
        };
        match c {
            Some(cost) => Reach::Yes { cost },
            None => Reach::No(format!("{} cannot reach node {}", self.name, remote.node)),
        }
    }
    fn alloc(&self, _: Device, _: u64) -> Result<Box<dyn Region>> {
        Err(HalError::unsupported(&self.name, "alloc"))
    }
    fn export(&self, _: &dyn Region) -> Result<Export> {
        Err(HalError::unsupported(&self.name, "export"))
    }
    fn map(&self, _: Export) -> Result<Box<dyn Region>> {
        Err(HalError::unsupported(&self.name, "map"))
    }
}

fn backend(name: &str, same_node: Option<u32>, remote: Option<u32>) -> Backend {
    Backend {
        name: name.into(),
        memory: Some(Arc::new(FakeMem {
            name: name.into(),
            same_node_cost: same_node,
            remote_cost: remote,
        })),
        port: None,
        switch: None,
    }
}

fn kinds() -> TransportKinds {
    TransportKinds {
        memory: true,
        port: false,
        switch: false,
    }
}

fn available() -> Availability {
    Availability::Available
}

/// The option `tag` (if any) is appended to the backend name so tests can see that
/// options reached `create`.
fn tagged(base: &str, opts: &BackendOptions) -> String {
    match opts.get("tag").and_then(|v| v.as_str()) {
        Some(t) => format!("{base}:{t}"),
        None => base.to_string(),
    }
}

static LOCAL_ONLY: BackendDescriptor = BackendDescriptor {
    name: "local-only",
    description: "reaches same-node peers, cost 10",
    kinds: TransportKinds {
        memory: true,
        port: false,
        switch: false,
    },
    guarantees: Guarantees::minimal,
    probe: available,
    create: |o| {
        let mut b = backend("local-only", Some(10), None);
        b.name = tagged("local-only", o);
        Ok(b)
    },
};

static EVERYWHERE: BackendDescriptor = BackendDescriptor {
    name: "everywhere",
    description: "reaches every peer, cost 50",
    kinds: TransportKinds {
        memory: true,
        port: false,
        switch: false,
    },
    guarantees: Guarantees::minimal,
    probe: available,
    create: |o| {
        let mut b = backend("everywhere", Some(50), Some(50));
        b.name = tagged("everywhere", o);
        Ok(b)
    },
};

static NOWHERE: BackendDescriptor = BackendDescriptor {
    name: "nowhere",
    description: "available but reaches no peer",
    kinds: TransportKinds {
        memory: true,
        port: false,
        switch: false,
    },
    guarantees: Guarantees::minimal,
    probe: available,
    create: |_| Ok(backend("nowhere", None, None)),
};

static MISSING_DRIVER: BackendDescriptor = BackendDescriptor {
    name: "missing-driver",
    description: "never available",
    kinds: TransportKinds {
        memory: true,
        port: false,
        switch: false,
    },
    guarantees: Guarantees::minimal,
    probe: || Availability::Unavailable("libfoo.so.1 not found".into()),
    create: |_| panic!("create must not be called on an unavailable backend"),
};

static DUPLICATE_LOCAL_ONLY: BackendDescriptor = BackendDescriptor {
    name: "local-only",
    description: "a second built-in with a taken name",
    kinds: TransportKinds {
        memory: true,
        port: false,
        switch: false,
    },
    guarantees: Guarantees::minimal,
    probe: available,
    create: |_| Ok(backend("dup", None, None)),
};

fn catalog() -> Catalog {
    Catalog::with_builtins(
        vec![&NOWHERE, &LOCAL_ONLY, &MISSING_DRIVER, &EVERYWHERE],
        None,
    )
}

fn endpoint(rank: u32, node: u32) -> Endpoint {
    let mut e = Endpoint::this_process(rank, Device::HOST);
    e.node = node;
    e
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "commhal-registry-test-{}-{tag}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn catalog_lists_builtins_by_name_with_origin_and_probe() {
    let cat = catalog();
    assert_eq!(
        cat.names(),
        vec!["everywhere", "local-only", "missing-driver", "nowhere"]
    );
    assert!(cat.errors().is_empty());
    let e = cat.get("missing-driver").unwrap();
    assert!(matches!(e, BackendEntry::Builtin(_)));
    assert_eq!(e.origin(), Origin::Builtin);
    assert_eq!(e.kinds(), kinds());
    let info = e.info();
    assert_eq!(
        info.availability,
        Availability::Unavailable("libfoo.so.1 not found".into())
    );
    assert_eq!(info.origin, "built-in");
    let names: Vec<_> = cat.available().iter().map(|e| e.name()).collect();
    assert_eq!(names, vec!["everywhere", "local-only", "nowhere"]);
}

#[test]
fn unknown_name_lists_known_backends() {
    let err = catalog().get("cuda-nvlnk").unwrap_err();
    match &err {
        HalError::UnknownBackend { name, known } => {
            assert_eq!(name, "cuda-nvlnk");
            assert!(
                known.contains("everywhere") && known.contains("nowhere"),
                "{known}"
            );
        }
        other => panic!("expected UnknownBackend, got {other:?}"),
    }
    let sel = Selection::named(&["local-only", "cuda-nvlnk"]);
    let err = catalog()
        .instantiate(&sel, &endpoint(0, 0), &[])
        .unwrap_err();
    assert!(matches!(err, HalError::UnknownBackend { .. }), "{err}");
}

#[test]
fn duplicate_builtin_names_are_reported_and_first_kept() {
    let cat = Catalog::with_builtins(vec![&LOCAL_ONLY, &DUPLICATE_LOCAL_ONLY], None);
    assert_eq!(cat.names(), vec!["local-only"]);
    assert_eq!(cat.errors().len(), 1);
    assert!(
        cat.errors()[0].to_string().contains("local-only"),
        "{}",
        cat.errors()[0]
    );
    assert_eq!(
        cat.get("local-only").unwrap().description(),
        LOCAL_ONLY.description
    );
}

#[test]
fn explicit_selection_keeps_order_and_passes_options() {
    let dir = temp_dir("config");
    let cfg = dir.join("commhal.toml");
    std::fs::write(
        &cfg,
        "backends = [\"everywhere\"]\n[backend.local-only]\ntag = \"from-config\"\n",
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();

    // COMMHAL_BACKENDS beats the config's list, but the config's options still apply.
    let sel = Selection::resolve(None, Some("local-only,everywhere"), Some(cfg)).unwrap();
    assert_eq!(sel.source, SelectionSource::BackendsEnv);
    let built = catalog().instantiate(&sel, &endpoint(0, 0), &[]).unwrap();
    let names: Vec<_> = built.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, vec!["local-only:from-config", "everywhere"]);

    // Only the config: its list is used.
    let sel = Selection::resolve(None, None, Some(cfg)).unwrap();
    assert_eq!(sel.source, SelectionSource::ConfigFile(PathBuf::from(cfg)));
    let built = catalog().instantiate(&sel, &endpoint(0, 0), &[]).unwrap();
    assert_eq!(built.len(), 1);
    assert_eq!(built[0].name, "everywhere");

    // The CLI beats both.
    let cli = vec!["nowhere".to_string()];
    let sel = Selection::resolve(Some(&cli), Some("local-only"), Some(cfg)).unwrap();
    assert_eq!(sel.backends, Some(vec!["nowhere".to_string()]));

    // A config naming an unknown top-level key is refused, naming the file.
    std::fs::write(dir.join("bad.toml"), "backend = \"x\"\n").unwrap();
    let bad = dir.join("bad.toml");
    let err = Selection::resolve(None, None, bad.to_str()).unwrap_err();
    assert!(err.to_string().contains("bad.toml"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn explicit_unavailable_backend_is_an_error_with_the_reason() {
    let sel = Selection::named(&["missing-driver"]);
    let err = catalog()
        .instantiate(&sel, &endpoint(0, 0), &[])
        .unwrap_err();
    match err {
        HalError::Unavailable { backend, reason } => {
            assert_eq!(backend, "missing-driver");
            assert!(reason.contains("libfoo"), "{reason}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[test]
fn default_selection_ranks_by_reach_and_drops_useless_backends() {
    let local = endpoint(0, 0);
    let same_node = [endpoint(1, 0)];
    let built = catalog()
        .instantiate(&Selection::default(), &local, &same_node)
        .unwrap();
    let names: Vec<_> = built.iter().map(|b| b.name.as_str()).collect();
    // local-only (cost 10) beats everywhere (50); nowhere reaches nobody; the
    // unavailable one is skipped.
    assert_eq!(names, vec!["local-only", "everywhere"]);

    let two_nodes = [endpoint(1, 0), endpoint(2, 1)];
    let built = catalog()
        .instantiate(&Selection::default(), &local, &two_nodes)
        .unwrap();
    let names: Vec<_> = built.iter().map(|b| b.name.as_str()).collect();
    // everywhere reaches 2 peers, local-only 1: more peers first.
    assert_eq!(names, vec!["everywhere", "local-only"]);

    // No peers: nothing to rank against, every available backend is kept.
    let built = catalog()
        .instantiate(&Selection::default(), &local, &[])
        .unwrap();
    assert_eq!(built.len(), 3);
}

#[test]
fn rank_by_reach_breaks_ties_by_name_and_explains_unreached_peers() {
    let local = endpoint(0, 0);
    let peers = [endpoint(1, 0), endpoint(2, 1)];
    let ranked = rank_by_reach(
        vec![
            backend("zeta", Some(20), None),
            backend("alpha", Some(20), None),
            backend("beta", Some(5), Some(100)),
        ],
        &local,
        &peers,
    );
    let order: Vec<_> = ranked.iter().map(|r| r.backend.name.as_str()).collect();
    assert_eq!(order, vec!["beta", "alpha", "zeta"]);
    assert_eq!(ranked[0].reached, 2);
    assert_eq!(ranked[0].cost, 105);
    assert_eq!(ranked[1].unreached.len(), 1);
    assert_eq!(ranked[1].unreached[0].0, 2);
    assert!(
        ranked[1].unreached[0].1.contains("cannot reach node 1"),
        "{:?}",
        ranked[1].unreached
    );
    // A backend with no transport at all reaches nobody, and says why.
    let ranked = rank_by_reach(vec![Backend::default()], &local, &peers);
    assert_eq!(ranked[0].reached, 0);
    assert!(ranked[0].unreached[0].1.contains("no transport"));
}

#[test]
fn plugin_path_problems_are_collected_not_fatal() {
    let dir = temp_dir("path");
    // Ignored by the directory rule: wrong name pattern.
    std::fs::write(dir.join("notes.so"), "not a library").unwrap();
    std::fs::write(dir.join("libcommhal_nccl.so"), "not a library").unwrap();
    // Taken by the rule, but a text file.
    std::fs::write(dir.join("libcommhal_plugin_text.so"), "just text\n").unwrap();
    let missing = dir.join("does-not-exist");
    let path = format!("{}::{}", dir.display(), missing.display());

    let (files, errors) = commhal_hal::plugin::plugin_files(&path);
    assert_eq!(files, vec![dir.join("libcommhal_plugin_text.so")]);
    assert_eq!(errors.len(), 1);

    let cat = Catalog::with_builtins(vec![&LOCAL_ONLY], Some(&path));
    assert_eq!(cat.names(), vec!["local-only"]);
    let msgs: Vec<String> = cat.errors().iter().map(|e| e.to_string()).collect();
    assert_eq!(msgs.len(), 2, "{msgs:?}");
    assert!(
        cat.errors().iter().any(|e| matches!(e,
            HalError::Plugin { file, reason }
                if file.ends_with("libcommhal_plugin_text.so") && reason.contains("shared library"))),
        "{msgs:?}"
    );
    // The dynamic loader's own words are kept, not just "dlopen failed".
    assert!(
        msgs.iter().any(|m| m.contains("libcommhal_plugin_text.so")
            && (m.contains("invalid ELF header") || m.contains("file too short"))),
        "{msgs:?}"
    );
    assert!(
        cat.errors().iter().any(|e| matches!(e,
            HalError::Plugin { file, .. } if file.ends_with("does-not-exist"))),
        "{msgs:?}"
    );
    // Asking for a backend now mentions that plugins failed to load.
    let err = cat.get("acme").unwrap_err().to_string();
    assert!(err.contains("commhal info"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

//! The plugin loader against real libraries: the example plugin (loads, allocates,
//! exports, maps, reads back) and the broken fixtures (each refused with an error
//! naming its file).

mod common;

use std::sync::Arc;

use commhal_hal::plugin::PluginBackend;
use commhal_hal::registry::{
    Availability, Backend, BackendDescriptor, BackendEntry, BackendOptions, Catalog, Origin,
};
use commhal_hal::{
    Device, DeviceKind, Endpoint, Guarantees, HalError, MemoryKind, Reach, SignalStrength,
    TransportKinds,
};
use common::*;

fn create(opts: &str) -> commhal_hal::Result<Backend> {
    let plugin = PluginBackend::load(&example_plugin())?;
    let opts: BackendOptions = toml::from_str(opts).expect("test options are TOML");
    plugin.create(&opts)
}

fn plugin_error(result: commhal_hal::Result<Arc<PluginBackend>>) -> (String, String) {
    match result {
        Err(HalError::Plugin { file, reason }) => (file, reason),
        other => panic!("expected HalError::Plugin, got {other:?}"),
    }
}

#[test]
fn example_plugin_declares_what_its_table_says() {
    let p = PluginBackend::load(&example_plugin()).unwrap();
    assert_eq!(p.name(), "example-loopback");
    assert_eq!(p.file(), example_plugin());
    assert!(p.description().contains("memfd"));
    assert_eq!(
        p.kinds(),
        TransportKinds {
            memory: true,
            port: false,
            switch: false
        }
    );
    let g = p.guarantees();
    assert_eq!(g.signal, SignalStrength::Strong);
    assert!(g.get && g.ll8 && !g.ll16 && !g.put_put_ordered);
    assert!(
        !g.write_copies_source,
        "a memory-only plugin has no port write"
    );
    assert_eq!(p.memory_kind(), MemoryKind::HostShared);
    assert_eq!(p.probe(), Availability::Available);
}

#[test]
fn allocate_write_export_map_read_back() {
    let backend = create("").unwrap();
    assert_eq!(backend.name, "example-loopback");
    assert!(backend.port.is_none() && backend.switch.is_none());
    let mem = backend.memory.expect("a memory-mapped transport");
    assert_eq!(mem.guarantees().signal, SignalStrength::Strong);

    const N: usize = 64 * 1024 + 3;
    let region = mem.alloc(Device::HOST, N as u64).unwrap();
    assert_eq!(region.len(), N as u64);
    assert_eq!(region.device(), Device::HOST);
    assert_eq!(region.kind(), MemoryKind::HostShared);
    // SAFETY: the region is N writable bytes that only this test uses.
    assert_eq!(unsafe { read(region.addr(), N) }, vec![0; N], "zeroed");
    // SAFETY: as above.
    unsafe { fill(region.addr(), N, 7) };

    let export = mem.export(region.as_ref()).unwrap();
    assert_eq!(export.backend, "example-loopback");
    assert_eq!(export.len, N as u64);
    assert_eq!(export.fds.len(), 1, "the memfd travels with the export");
    assert_eq!(export.bytes.len(), 16);

    let mapping = mem.map(export).unwrap();
    assert_eq!(mapping.len(), N as u64);
    assert_ne!(
        mapping.addr(),
        region.addr(),
        "a second, independent mapping"
    );
    // SAFETY: the mapping is N readable bytes; nobody writes concurrently.
    assert_eq!(unsafe { read(mapping.addr(), N) }, pattern(N, 7));

    // Same pages: a store through the mapping is seen by the owner.
    // SAFETY: N writable bytes, used only here.
    unsafe { fill(mapping.addr(), N, 99) };
    // SAFETY: N readable bytes.
    assert_eq!(unsafe { read(region.addr(), N) }, pattern(N, 99));

    // The mapping outlives the allocation it came from (the memfd keeps the pages).
    drop(region);
    // SAFETY: the mapping is still mapped (released only on drop).
    assert_eq!(unsafe { read(mapping.addr(), N) }, pattern(N, 99));
}

#[test]
fn reach_is_same_node_only() {
    let mem = create("").unwrap().memory.unwrap();
    let a = Endpoint::this_process(0, Device::HOST);
    let mut b = Endpoint::this_process(1, Device::HOST);
    b.pid += 1;
    assert_eq!(mem.reach(&a, &b), Reach::Yes { cost: 30 });
    b.node = 1;
    assert!(!mem.reach(&a, &b).is_yes());
}

#[test]
fn options_reach_the_plugin() {
    let mem = create("max_alloc = 1024").unwrap().memory.unwrap();
    assert!(mem.alloc(Device::HOST, 1024).is_ok());
    let err = mem.alloc(Device::HOST, 1025).unwrap_err();
    assert!(
        matches!(&err, HalError::InvalidArgument(m) if m.contains("max_alloc")),
        "{err}"
    );
    let err = create("max_allocc = 1").unwrap_err();
    assert!(
        err.to_string().contains("unknown option `max_allocc`"),
        "{err}"
    );
    let err = create("max_alloc = -1").unwrap_err();
    assert!(err.to_string().contains("non-negative"), "{err}");
}

#[test]
fn bad_calls_are_errors_not_crashes() {
    let mem = create("").unwrap().memory.unwrap();
    let other = create("").unwrap().memory.unwrap();

    let err = mem.alloc(Device::HOST, 0).unwrap_err();
    assert!(err.to_string().contains("len is 0"), "{err}");
    let cuda = Device {
        kind: DeviceKind::Cuda,
        ordinal: 0,
    };
    let err = mem.alloc(cuda, 8).unwrap_err();
    assert!(matches!(err, HalError::Unsupported { .. }), "{err}");

    // A region of another transport instance is refused by the adapter.
    let r = other.alloc(Device::HOST, 8).unwrap();
    let err = mem.export(r.as_ref()).unwrap_err();
    assert!(err.to_string().contains("not allocated by this"), "{err}");

    // An export without its descriptor, with a lying length, or from another backend.
    let r = mem.alloc(Device::HOST, 4096).unwrap();
    let mut e = mem.export(r.as_ref()).unwrap();
    e.fds.clear();
    let err = mem.map(e).unwrap_err();
    assert!(err.to_string().contains("no memfd"), "{err}");
    let mut e = mem.export(r.as_ref()).unwrap();
    e.len = 8192;
    let err = mem.map(e).unwrap_err();
    assert!(err.to_string().contains("8192"), "{err}");
    let mut e = mem.export(r.as_ref()).unwrap();
    e.backend = "host-emu".into();
    let err = mem.map(e).unwrap_err();
    assert!(err.to_string().contains("host-emu"), "{err}");
    let mut e = mem.export(r.as_ref()).unwrap();
    e.bytes[0] ^= 0xff;
    let err = mem.map(e).unwrap_err();
    assert!(err.to_string().contains("not an example-loopback"), "{err}");
}

#[test]
fn wrong_abi_version_is_refused() {
    let lib = cdylib("commhal_plugin_bad_version");
    let (file, reason) = plugin_error(PluginBackend::load(&lib));
    assert_eq!(file, lib.display().to_string());
    assert!(reason.contains("ABI version 99"), "{reason}");
    assert!(reason.contains("speaks version 1"), "{reason}");
}

#[test]
fn missing_entry_symbol_is_refused() {
    let lib = cdylib("commhal_plugin_no_entry");
    let (file, reason) = plugin_error(PluginBackend::load(&lib));
    assert_eq!(file, lib.display().to_string());
    assert!(reason.contains("commhal_plugin_v1"), "{reason}");
}

#[test]
fn text_file_named_so_is_refused() {
    let dir = temp_dir("text");
    let lib = dir.join("libcommhal_plugin_text.so");
    std::fs::write(&lib, "this is not an ELF file\n").unwrap();
    let (file, reason) = plugin_error(PluginBackend::load(&lib));
    assert_eq!(file, lib.display().to_string());
    assert!(
        reason.contains("cannot be loaded as a shared library"),
        "{reason}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

static FAKE_HOST_EMU: BackendDescriptor = BackendDescriptor {
    name: "host-emu",
    description: "stand-in for the built-in host-emu",
    kinds: TransportKinds {
        memory: true,
        port: false,
        switch: false,
    },
    guarantees: Guarantees::minimal,
    probe: || Availability::Available,
    create: |_| {
        Ok(Backend {
            name: "host-emu".into(),
            ..Backend::default()
        })
    },
};

#[test]
fn plugin_named_like_a_builtin_is_refused() {
    let clash = cdylib("commhal_plugin_name_clash");
    let path = format!("{}:{}", clash.display(), example_plugin().display());
    let cat = Catalog::with_builtins(vec![&FAKE_HOST_EMU], Some(&path));
    assert_eq!(cat.names(), vec!["example-loopback", "host-emu"]);
    assert!(matches!(
        cat.get("host-emu").unwrap(),
        BackendEntry::Builtin(_)
    ));
    assert_eq!(
        cat.get("example-loopback").unwrap().origin(),
        Origin::Plugin(example_plugin())
    );
    assert_eq!(cat.errors().len(), 1, "{:?}", cat.errors());
    match &cat.errors()[0] {
        HalError::Plugin { file, reason } => {
            assert_eq!(file, &clash.display().to_string());
            assert!(reason.contains("`host-emu`"), "{reason}");
            assert!(reason.contains("built-in"), "{reason}");
        }
        other => panic!("expected a plugin error, got {other:?}"),
    }
}

#[test]
fn two_plugins_with_one_name_keep_the_first() {
    // Two copies of the example plugin under different file names: distinct libraries
    // (distinct inodes) that both call themselves `example-loopback`.
    let dir = temp_dir("twins");
    let a = dir.join("libcommhal_plugin_a.so");
    let b = dir.join("libcommhal_plugin_b.so");
    std::fs::copy(example_plugin(), &a).unwrap();
    std::fs::copy(example_plugin(), &b).unwrap();
    let cat = Catalog::with_builtins(vec![], Some(dir.to_str().unwrap()));
    assert_eq!(cat.names(), vec!["example-loopback"]);
    assert_eq!(
        cat.get("example-loopback").unwrap().origin(),
        Origin::Plugin(a.clone())
    );
    assert_eq!(cat.errors().len(), 1, "{:?}", cat.errors());
    match &cat.errors()[0] {
        HalError::Plugin { file, reason } => {
            assert_eq!(file, &b.display().to_string());
            assert!(reason.contains(&a.display().to_string()), "{reason}");
        }
        other => panic!("expected a plugin error, got {other:?}"),
    }
    // The same file reached twice (as a file and through its directory) loads once.
    let path = format!("{}:{}", a.display(), dir.display());
    let (files, errors) = commhal_hal::plugin::plugin_files(&path);
    assert!(errors.is_empty());
    assert_eq!(files, vec![a.clone(), b.clone()]);
    let _ = std::fs::remove_dir_all(&dir);
}

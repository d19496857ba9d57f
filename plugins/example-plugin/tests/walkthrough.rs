//! docs/backends.md, part (b) and (c), step by step: the built plugin is copied into a
//! plugin directory, `COMMHAL_PLUGIN_PATH` names it, and a fresh process (this test
//! binary, re-run with the environment set, so the real `Catalog::discover` and
//! `Selection::from_env` read the real environment) discovers it, selects it by name
//! (`COMMHAL_BACKENDS`, or a `COMMHAL_CONFIG` file), creates it and uses it.

mod common;

use std::path::Path;
use std::process::Command;

use commhal_hal::registry::{Availability, Catalog, Origin, Selection, SelectionSource};
use commhal_hal::settings::host::{BACKENDS, CONFIG, PLUGIN_PATH};
use commhal_hal::settings::tests::{EXAMPLE_LOOPBACK_DISABLE, WALKTHROUGH_CHILD as CHILD};
use commhal_hal::{Device, Endpoint, HalError};
use common::*;

/// Run `child_scenario` in a fresh process with `envs` (and no inherited commhal
/// variables), and return its output; fails the test if the child failed.
fn run_child(scenario: &str, envs: &[(&str, &Path)]) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "child_scenario",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD.env, scenario);
    for var in [
        PLUGIN_PATH.env,
        BACKENDS.env,
        CONFIG.env,
        EXAMPLE_LOOPBACK_DISABLE.env,
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("re-run the test binary");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child `{scenario}` failed:\n{text}");
    assert!(
        text.contains(&format!("scenario {scenario} ok")),
        "child `{scenario}` did not run:\n{text}"
    );
    text
}

/// Step "copy the .so into a plugin directory" of the doc.
fn plugin_dir(tag: &str) -> std::path::PathBuf {
    let dir = temp_dir(tag).join("plugins");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(example_plugin(), dir.join("libcommhal_example_plugin.so")).unwrap();
    dir
}

#[test]
fn select_by_commhal_backends() {
    let dir = plugin_dir("env");
    run_child(
        "backends",
        &[
            (PLUGIN_PATH.env, &dir),
            (BACKENDS.env, Path::new("example-loopback")),
        ],
    );
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn select_by_commhal_config() {
    let dir = plugin_dir("config");
    let cfg = dir.parent().unwrap().join("commhal.toml");
    std::fs::write(
        &cfg,
        "backends = [\"example-loopback\"]\n\n[backend.example-loopback]\nmax_alloc = 4096\n",
    )
    .unwrap();
    run_child("config", &[(PLUGIN_PATH.env, &dir), (CONFIG.env, &cfg)]);
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

#[test]
fn unavailable_plugin_is_listed_with_its_reason() {
    let dir = plugin_dir("disabled");
    run_child(
        "disabled",
        &[
            (PLUGIN_PATH.env, &dir),
            (EXAMPLE_LOOPBACK_DISABLE.env, Path::new("1")),
        ],
    );
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

/// A switch value its declaration refuses makes the probe fail, naming the variable.
#[test]
fn a_bad_switch_value_fails_the_probe_by_name() {
    let dir = plugin_dir("bad-switch");
    run_child(
        "bad-switch",
        &[
            (PLUGIN_PATH.env, &dir),
            (EXAMPLE_LOOPBACK_DISABLE.env, Path::new("maybe")),
        ],
    );
    let _ = std::fs::remove_dir_all(dir.parent().unwrap());
}

/// The child side. Does nothing unless started by `run_child` (it needs the
/// environment that the parent sets up).
#[test]
fn child_scenario() {
    let Some(scenario) = CHILD.text() else {
        return;
    };
    match scenario.as_str() {
        "backends" | "config" => use_it(&scenario),
        "disabled" => disabled(),
        "bad-switch" => bad_switch(),
        other => panic!("unknown scenario {other}"),
    }
    println!("scenario {scenario} ok");
}

/// What docs/backends.md shows an application doing, plus checks.
fn use_it(scenario: &str) {
    // discover: built-ins (none are linked into this test) + COMMHAL_PLUGIN_PATH
    let catalog = Catalog::discover().unwrap();
    assert!(catalog.errors().is_empty(), "{:?}", catalog.errors());
    let entry = catalog.get("example-loopback").unwrap();
    let plugin_dir = PLUGIN_PATH.text().unwrap();
    assert_eq!(
        entry.origin(),
        Origin::Plugin(Path::new(&plugin_dir).join("libcommhal_example_plugin.so"))
    );
    assert_eq!(entry.probe(), Availability::Available);

    // select by name (COMMHAL_BACKENDS or COMMHAL_CONFIG), create
    let selection = Selection::from_env(None).unwrap();
    assert_eq!(
        selection.backends,
        Some(vec!["example-loopback".to_string()])
    );
    let local = Endpoint::this_process(0, Device::HOST);
    let backends = catalog.instantiate(&selection, &local, &[]).unwrap();
    assert_eq!(backends.len(), 1);
    let mem = backends[0].memory.clone().unwrap();

    // use: allocate, write, export, map, read back through the mapping
    let region = mem.alloc(Device::HOST, 4096).unwrap();
    // SAFETY: 4096 writable bytes used only here.
    unsafe { fill(region.addr(), 4096, 42) };
    let mapping = mem.map(mem.export(region.as_ref()).unwrap()).unwrap();
    // SAFETY: 4096 readable bytes.
    assert_eq!(unsafe { read(mapping.addr(), 4096) }, pattern(4096, 42));

    if scenario == "config" {
        assert!(matches!(selection.source, SelectionSource::ConfigFile(_)));
        // The [backend.example-loopback] table reached the plugin.
        let err = mem.alloc(Device::HOST, 4097).unwrap_err();
        assert!(err.to_string().contains("max_alloc"), "{err}");
    } else {
        assert_eq!(selection.source, SelectionSource::BackendsEnv);
        assert!(mem.alloc(Device::HOST, 1 << 20).is_ok());
    }
}

fn bad_switch() {
    let catalog = Catalog::discover().unwrap();
    let info = catalog.get("example-loopback").unwrap().info();
    let Availability::Unavailable(reason) = &info.availability else {
        panic!("{:?}", info.availability)
    };
    assert!(
        reason.contains("probe failed")
            && reason.contains("COMMHAL_EXAMPLE_LOOPBACK_DISABLE=\"maybe\" is not valid"),
        "{reason}"
    );
}

fn disabled() {
    let catalog = Catalog::discover().unwrap();
    let entry = catalog.get("example-loopback").unwrap();
    let info = entry.info();
    assert_eq!(
        info.availability,
        Availability::Unavailable("disabled by COMMHAL_EXAMPLE_LOOPBACK_DISABLE=1".into())
    );
    let local = Endpoint::this_process(0, Device::HOST);
    // Default selection skips it; naming it is an error with the reason.
    let none = catalog
        .instantiate(&Selection::from_env(None).unwrap(), &local, &[])
        .unwrap();
    assert!(none.is_empty());
    let err = catalog
        .instantiate(&Selection::named(&["example-loopback"]), &local, &[])
        .unwrap_err();
    assert!(
        matches!(&err, HalError::Unavailable { reason, .. } if reason.contains("DISABLE")),
        "{err}"
    );
}

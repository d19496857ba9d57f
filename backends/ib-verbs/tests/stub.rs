//! The ib-verbs host path against the stub verbs provider (`stub/`, a cdylib built by
//! cargo before these tests): discovery, registration, RC set-up through the
//! bootstrap, RDMA WRITE + fetch-add signals + flush, and the provider's fault
//! switches (each run in a re-executed child process with its environment).
//! Nothing here touches RDMA hardware.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use commhal_backend_host_emu::HostRegion;
use commhal_backend_ib_verbs::{IbOptions, IbPort, IbRemote, IbVerbs};
use commhal_hal::bootstrap::{Bootstrap, InProcBootstrap};
use commhal_hal::transport::{PeerContext, Port, PortMapped};
use commhal_hal::{Device, Endpoint, HalError, Rank, Result};

const TAG: u64 = 77;

/// `libcommhal_ibverbs_stub.so`, next to the test binary (cargo builds it first).
fn stub_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().expect("test binary dir").to_path_buf();
    for d in [dir.clone(), dir.join("..")] {
        let p = d.join("libcommhal_ibverbs_stub.so");
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "libcommhal_ibverbs_stub.so not found next to {}: run through cargo",
        dir.display()
    );
}

fn transport() -> Result<IbVerbs> {
    IbVerbs::new(&IbOptions {
        library: Some(stub_lib().display().to_string()),
        flush_timeout: Some(Duration::from_secs(5)),
        ..Default::default()
    })
}

struct Side {
    port: IbPort,
    buf: HostRegion,
    local: commhal_backend_ib_verbs::IbLocal,
    remote: IbRemote,
}

/// Two ranks as threads, each with its own transport (own device context).
fn world(len: u64) -> Result<[Side; 2]> {
    let boots = InProcBootstrap::create_with_timeout(2, Duration::from_secs(10));
    let sides: Vec<Result<Side>> = std::thread::scope(|s| {
        let hs: Vec<_> = boots
            .iter()
            .map(|b| s.spawn(move || side(b, len)))
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank thread"))
            .collect()
    });
    let mut it = sides.into_iter();
    Ok([it.next().unwrap()?, it.next().unwrap()?])
}

fn side(b: &dyn Bootstrap, len: u64) -> Result<Side> {
    let me: Rank = b.rank();
    let t = transport()?;
    let buf = HostRegion::alloc(len)?;
    let local = t.register(&buf)?;
    b.send(1 - me, 1, &local.export().bytes)?;
    let theirs = b.recv(1 - me, 1)?;
    let remote = t.import(commhal_hal::Export {
        backend: "ib-verbs".into(),
        len,
        bytes: theirs,
        fds: vec![],
    })?;
    let (l, r) = (
        Endpoint::this_process(me, Device::HOST),
        Endpoint::this_process(1 - me, Device::HOST),
    );
    let port = t.connect(&PeerContext {
        bootstrap: b,
        local: &l,
        remote: &r,
        tag: TAG,
    })?;
    Ok(Side {
        port,
        buf,
        local,
        remote,
    })
}

fn read_u64(r: &HostRegion, off: u64) -> u64 {
    let mut b = [0u8; 8];
    r.read(off, &mut b).unwrap();
    u64::from_le_bytes(b)
}

fn wait_for(r: &HostRegion, off: u64, want: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = read_u64(r, off);
        if v == want || Instant::now() > deadline {
            return v;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Put, signal, flush; the peer sees the signal and the data.
fn put_signal_round(w: &mut [Side; 2]) -> Result<()> {
    let [a, b] = w;
    let data: Vec<u8> = (0..(1u32 << 20) + 3).map(|i| (i % 251) as u8).collect();
    a.buf.write(64, &data)?;
    a.port
        .write(&a.remote, 64, &a.local, 64, data.len() as u64)?;
    a.port.signal(&a.remote, 0, 5)?;
    a.port.signal(&a.remote, 0, u64::MAX - 1)?; // wraps: 5 + 2^64 - 2 = 3
    a.port.flush()?;
    assert_eq!(wait_for(&b.buf, 0, 3), 3, "the two adds landed");
    let mut got = vec![0u8; data.len()];
    b.buf.read(64, &mut got)?;
    assert!(got == data, "the RDMA WRITE landed");
    // The other direction, and out-of-range requests refused before posting.
    b.port.signal(&b.remote, 8, 1)?;
    b.port.flush()?;
    assert_eq!(wait_for(&a.buf, 8, 1), 1);
    assert!(matches!(
        b.port.write(&b.remote, 1 << 21, &b.local, 0, 1),
        Err(HalError::OutOfRange { .. })
    ));
    assert!(matches!(
        b.port.signal(&b.remote, 4, 1),
        Err(HalError::Unaligned { .. })
    ));
    Ok(())
}

#[test]
fn write_signal_flush_over_the_stub() {
    let mut w = world(2 << 20).unwrap();
    put_signal_round(&mut w).unwrap();
    // Many small writes: more than the send queue holds, drained by polling.
    let [a, b] = &mut w;
    for i in 0..1000u64 {
        a.buf.write(4096 + i, &[(i % 200) as u8 + 1]).unwrap();
        a.port
            .write(&a.remote, 4096 + i, &a.local, 4096 + i, 1)
            .unwrap();
    }
    a.port.signal(&a.remote, 16, 1).unwrap();
    a.port.flush().unwrap();
    assert_eq!(wait_for(&b.buf, 16, 1), 1);
    let mut got = vec![0u8; 1000];
    b.buf.read(4096, &mut got).unwrap();
    assert!(
        got.iter()
            .enumerate()
            .all(|(i, &v)| v == (i % 200) as u8 + 1)
    );
}

#[test]
fn foreign_memory_is_refused() {
    let t = transport().unwrap();
    #[derive(Debug)]
    struct Foreign(Box<[u64]>);
    impl commhal_hal::Region for Foreign {
        fn addr(&self) -> u64 {
            self.0.as_ptr() as u64
        }
        fn len(&self) -> u64 {
            64
        }
        fn device(&self) -> Device {
            Device::HOST
        }
        fn kind(&self) -> commhal_hal::MemoryKind {
            commhal_hal::MemoryKind::HostShared
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }
    let f = Foreign(vec![0; 8].into_boxed_slice());
    assert!(matches!(t.register(&f), Err(HalError::Unregistered { .. })));
    assert!(
        t.describe()
            .contains("commhal_stub0 port 1 (RoCE, GID index 1"),
        "{}",
        t.describe()
    );
}

#[test]
fn a_missing_library_says_so() {
    let e = IbVerbs::new(&IbOptions {
        library: Some("/nonexistent/libibverbs.so.1".into()),
        ..Default::default()
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("unavailable") && e.contains("not found at /nonexistent"),
        "{e}"
    );
}

// ---- fault switches, each in a child process with the stub's environment ----

const ROLE_ENV: &str = "IBVERBS_TEST_ROLE";

/// Child entry: a no-op in a normal run.
#[test]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    let out = match role.as_str() {
        "wc-error" => {
            let mut w = world(4096).unwrap();
            let [a, _] = &mut w;
            a.port.write(&a.remote, 0, &a.local, 0, 64).unwrap();
            let e = a.port.flush().unwrap_err().to_string();
            let again = a.port.signal(&a.remote, 0, 1).unwrap_err().to_string();
            format!("{e}\n{again}")
        }
        "dead-peer" => {
            let mut w = world(4096).unwrap();
            let [a, _] = &mut w;
            a.port.write(&a.remote, 0, &a.local, 0, 64).unwrap();
            format!("{:?}", a.port.flush().unwrap_err())
        }
        "no-atomics" => {
            let mut w = world(2 << 20).unwrap();
            put_signal_round(&mut w).unwrap();
            // A counter that does not start at 0: its value is read once, then written.
            let [a, b] = &mut w;
            b.buf.write(24, &100u64.to_le_bytes()).unwrap();
            a.port.signal(&a.remote, 24, 1).unwrap();
            a.port.signal(&a.remote, 24, 2).unwrap();
            a.port.flush().unwrap();
            assert_eq!(wait_for(&b.buf, 24, 103), 103);
            "ok".into()
        }
        "ib" => {
            let mut w = world(2 << 20).unwrap();
            put_signal_round(&mut w).unwrap();
            transport().unwrap().describe()
        }
        "no-devices" => transport().unwrap_err().to_string(),
        "survivor" | "leaver" => two_process_rank(&role),
        other => panic!("unknown role {other}"),
    };
    println!("ROLE-OUTPUT<{out}>");
}

fn run_child(role: &str, env: &[(&str, &str)]) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(ROLE_ENV, role)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child {role} failed: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let start = text.find("ROLE-OUTPUT<").expect("child printed its output") + 12;
    let end = text[start..]
        .find(">\n")
        .map(|e| start + e)
        .unwrap_or(text.len());
    text[start..end].to_string()
}

#[test]
fn completion_errors_say_what_to_check() {
    let out = run_child("wc-error", &[("COMMHAL_IBVERBS_STUB_FAULT", "wc-error")]);
    assert!(
        out.contains("IBV_WC_REM_ACCESS_ERR") && out.contains("registered for remote write"),
        "{out}"
    );
    assert!(out.contains("failed earlier and cannot be used"), "{out}");
}

#[test]
fn a_dead_peer_is_peer_dead() {
    let out = run_child("dead-peer", &[("COMMHAL_IBVERBS_STUB_FAULT", "dead-peer")]);
    assert!(
        out.contains("PeerDead") && out.contains("IBV_WC_RETRY_EXC_ERR"),
        "{out}"
    );
}

#[test]
fn signals_without_atomics_write_a_shadow_counter() {
    let out = run_child(
        "no-atomics",
        &[("COMMHAL_IBVERBS_STUB_FAULT", "no-atomics")],
    );
    assert_eq!(out, "ok");
}

#[test]
fn infiniband_ports_use_the_lid() {
    let out = run_child("ib", &[("COMMHAL_IBVERBS_STUB_LINK", "ib")]);
    assert!(out.contains("InfiniBand, LID 1"), "{out}");
}

#[test]
fn no_device_is_unavailable_with_the_count() {
    let out = run_child("no-devices", &[("COMMHAL_IBVERBS_STUB_DEVICES", "0")]);
    assert!(
        out.contains("no RDMA device (libibverbs found 0 devices)"),
        "{out}"
    );
}

/// A peer whose queue pair is gone (its port dropped, as when its process exits):
/// the next flush is `PeerDead` within the bound, never a hang.
#[test]
fn a_peer_whose_queue_pair_is_gone_is_peer_dead() {
    let [mut a, b] = world(4096).unwrap();
    drop(b);
    a.port.write(&a.remote, 0, &a.local, 0, 64).unwrap();
    let started = Instant::now();
    let e = a.port.flush().unwrap_err();
    assert!(matches!(e, HalError::PeerDead { rank: 1, .. }), "{e}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// One rank of [`a_peer_process_that_exits_is_peer_dead`]: rank 1 (`leaver`) exits
/// without tearing anything down shortly after connecting; rank 0 (`survivor`) keeps
/// writing and flushing until the flush reports the loss.
fn two_process_rank(role: &str) -> String {
    use commhal_hal::bootstrap::{TcpBootstrap, UniqueId};
    let id: UniqueId = std::env::var("IBVERBS_TEST_ID").unwrap().parse().unwrap();
    let rank = u32::from(role == "leaver");
    let b = TcpBootstrap::new(rank, 2, &id, Duration::from_secs(20)).unwrap();
    let mut s = side(&b, 4096).unwrap();
    if rank == 1 {
        std::thread::sleep(Duration::from_millis(200));
        std::process::exit(0);
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut rounds = 0u32;
    while Instant::now() < deadline {
        s.port.write(&s.remote, 0, &s.local, 0, 64).ok();
        match s.port.flush() {
            Ok(()) => rounds += 1,
            Err(e) => return format!("{e:?} after {rounds} rounds"),
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    format!("no error after {rounds} rounds")
}

/// A peer process that exits (its QP never destroyed): the stub sees its pid gone,
/// the flush is `PeerDead`. Both ranks are child processes sharing a private stub dir.
#[test]
fn a_peer_process_that_exits_is_peer_dead() {
    use commhal_hal::bootstrap::UniqueId;
    let dir = std::env::temp_dir().join(format!("ibstub-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let id = UniqueId::new_local().unwrap().to_string();
    let spawn = |role: &str| {
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
            .env(ROLE_ENV, role)
            .env("IBVERBS_TEST_ID", &id)
            .env("COMMHAL_IBVERBS_STUB_DIR", &dir)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let leaver = spawn("leaver");
    let survivor = spawn("survivor");
    let out = survivor.wait_with_output().unwrap();
    let _ = leaver.wait_with_output();
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("PeerDead") && text.contains("IBV_WC_RETRY_EXC_ERR"),
        "{text}"
    );
}

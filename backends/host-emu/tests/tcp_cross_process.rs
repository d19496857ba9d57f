//! `host-tcp` between two processes on two virtual nodes, set up through the real
//! `TcpBootstrap`. The test re-runs this binary on `tcp_child` (`--exact`), once per
//! rank; rank 0 binds a `UniqueId`, prints it, and the parent hands it to rank 1 in
//! `COMMHAL_UNIQUE_ID`. Rank 0 uses plain host memory, rank 1 host-emu shared memory.
//! The ranks claim different hosts, so the cross-host address path is taken (with
//! `COMMHAL_HOST_TCP_ADDR=127.0.0.1`). After the exchange rank 1 exits without any goodbye: rank 0 must see `PeerDead`.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use commhal_backend_host_emu::{HostRegion, HostTcp, ShmRegion};
use commhal_hal::bootstrap::{
    Bootstrap, LaunchEnv, TcpBootstrap, UniqueId, recv_export, send_export, timeout_from_env,
};
use commhal_hal::settings::launch::{
    BOOTSTRAP_TIMEOUT_MS, HOST_TCP_ADDR, RANK, UNIQUE_ID, WORLD_SIZE,
};
use commhal_hal::settings::tests::TCP_TEST_ROLE as ROLE;
use commhal_hal::transport::{PeerContext, Port, PortMapped};
use commhal_hal::{Device, Endpoint, HalError, Region};

const ID_LINE: &str = "TEST_UNIQUE_ID=";
const LEN: u64 = 3 << 20;
const SEM: u64 = 0;
const DATA: u64 = 64;
const N: u64 = LEN - DATA;
const BOUND: Duration = Duration::from_secs(30);

fn pattern(rank: u32) -> Vec<u8> {
    (0..N)
        .map(|i| (i.wrapping_mul(13) ^ (i >> 9)).wrapping_add(rank as u64 * 101) as u8)
        .collect()
}

// ---------------------------------------------------------------- child side ----

/// Runs only when re-executed by the parent test.
#[test]
fn tcp_child() {
    let Some(role) = ROLE.text() else {
        return;
    };
    assert_eq!(role, "rank");
    let env = LaunchEnv::detect().unwrap().expect("COMMHAL_RANK is set");
    let b = if env.rank == 0 {
        let id = UniqueId::bind("127.0.0.1".parse().unwrap()).unwrap();
        println!("{ID_LINE}{id}");
        std::io::stdout().flush().unwrap();
        TcpBootstrap::new(0, 2, &id, timeout_from_env().unwrap()).unwrap()
    } else {
        TcpBootstrap::from_env().unwrap()
    };
    let me = b.rank();
    let peer = 1 - me;
    // Each rank claims its own host, so host-tcp takes its cross-host path: listen on
    // and offer COMMHAL_HOST_TCP_ADDR (loopback, set by the parent) instead of the
    // same-host loopback shortcut. The peer's pid is irrelevant to host-tcp.
    let endpoint = |rank: u32| {
        let mut e = Endpoint::this_process(rank, Device::HOST);
        e.host = format!("virtual-host-{rank}");
        e.node = rank;
        e
    };
    let (local, remote) = (endpoint(me), endpoint(peer));

    let t = HostTcp::new().unwrap();
    let mine: Box<dyn Region> = if me == 0 {
        Box::new(HostRegion::alloc(LEN).unwrap())
    } else {
        Box::new(ShmRegion::alloc(LEN).unwrap())
    };
    let buf = PortMapped::register(&t, &mine).unwrap();
    let src = PortMapped::register(&t, &HostRegion::from_bytes(&pattern(me)).unwrap()).unwrap();
    send_export(&b, peer, 10, &PortMapped::export(&t, &buf).unwrap()).unwrap();
    let theirs = PortMapped::import(&t, recv_export(&b, peer, 10).unwrap()).unwrap();
    let mut port = PortMapped::connect(
        &t,
        &PeerContext {
            bootstrap: &b,
            local: &local,
            remote: &remote,
            tag: 20,
        },
    )
    .unwrap();

    port.write(&theirs, DATA, &src, 0, N).unwrap();
    port.signal(&theirs, SEM, 1).unwrap();
    port.flush().unwrap();
    let give_up = Instant::now() + BOUND;
    while buf.atomic_u64(SEM).unwrap().load(Ordering::Acquire) < 1 {
        assert!(
            Instant::now() < give_up,
            "rank {me}: no signal from rank {peer}"
        );
        thread::yield_now();
    }
    let mut got = vec![0u8; N as usize];
    buf.read(DATA, &mut got).unwrap();
    assert!(
        got == pattern(peer),
        "rank {me}: rank {peer}'s data arrived damaged"
    );
    b.barrier().unwrap();
    println!("OK rank {me}");
    std::io::stdout().flush().unwrap();

    if me == 1 {
        // Leave abruptly: no port drop, no bootstrap goodbye.
        std::process::exit(0);
    }
    // Rank 0: once the bootstrap sees rank 1 gone, the port must say so too.
    assert!(matches!(
        b.recv(1, 30),
        Err(HalError::PeerDead { rank: 1, .. })
    ));
    match port.flush() {
        Err(HalError::PeerDead { rank: 1, detail }) => println!("PEER_DEAD: {detail}"),
        other => panic!("expected PeerDead from rank 1, got {other:?}"),
    }
    assert!(matches!(
        port.signal(&theirs, SEM, 1),
        Err(HalError::PeerDead { rank: 1, .. })
    ));
}

// --------------------------------------------------------------- parent side ----

struct Proc {
    child: Child,
    out: JoinHandle<String>,
    err: JoinHandle<String>,
}

fn spawn(rank: u32, id: Option<&str>) -> Child {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", "tcp_child", "--nocapture", "--test-threads=1"]);
    for v in commhal_hal::bootstrap::env::VARS {
        c.env_remove(v);
    }
    c.env(ROLE.env, "rank")
        .env(RANK.env, rank.to_string())
        .env(WORLD_SIZE.env, "2")
        .env(BOOTSTRAP_TIMEOUT_MS.env, "20000")
        .env(HOST_TCP_ADDR.env, "127.0.0.1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(id) = id {
        c.env(UNIQUE_ID.env, id);
    }
    c.spawn().unwrap()
}

fn drain(r: impl Read + Send + 'static) -> JoinHandle<String> {
    thread::spawn(move || {
        let mut s = String::new();
        let _ = BufReader::new(r).read_to_string(&mut s);
        s
    })
}

/// Wait for a child, killing it if it hangs (a safety net, not a timing assertion).
fn finish(mut p: Proc) -> (bool, String, String) {
    let give_up = Instant::now() + Duration::from_secs(60);
    let ok = loop {
        if let Some(s) = p.child.try_wait().unwrap() {
            break s.success();
        }
        if Instant::now() > give_up {
            let _ = p.child.kill();
            let _ = p.child.wait();
            break false;
        }
        thread::sleep(Duration::from_millis(20));
    };
    (ok, p.out.join().unwrap(), p.err.join().unwrap())
}

#[test]
fn two_processes_on_two_virtual_nodes() {
    if ROLE.is_set() {
        return;
    }
    let mut root = spawn(0, None);
    let mut stdout = BufReader::new(root.stdout.take().unwrap());
    let mut seen = String::new();
    let id = loop {
        let mut line = String::new();
        if stdout.read_line(&mut line).unwrap() == 0 {
            let _ = root.kill();
            panic!("rank 0 exited before printing its id; output:\n{seen}");
        }
        seen.push_str(&line);
        if let Some(at) = line.find(ID_LINE) {
            break line[at + ID_LINE.len()..].trim().to_string();
        }
    };
    let r0 = Proc {
        err: drain(root.stderr.take().unwrap()),
        out: thread::spawn(move || {
            let mut rest = String::new();
            let _ = stdout.read_to_string(&mut rest);
            seen + &rest
        }),
        child: root,
    };
    let mut c1 = spawn(1, Some(&id));
    let r1 = Proc {
        out: drain(c1.stdout.take().unwrap()),
        err: drain(c1.stderr.take().unwrap()),
        child: c1,
    };
    let (ok1, out1, err1) = finish(r1);
    let (ok0, out0, err0) = finish(r0);
    assert!(ok1 && out1.contains("OK rank 1"), "rank 1:\n{out1}\n{err1}");
    assert!(ok0 && out0.contains("OK rank 0"), "rank 0:\n{out0}\n{err0}");
    assert!(out0.contains("PEER_DEAD: "), "rank 0:\n{out0}\n{err0}");
}

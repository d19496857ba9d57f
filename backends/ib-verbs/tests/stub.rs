//! The ib-verbs host path against the stub verbs provider (`stub/`, a cdylib built by
//! cargo before these tests): discovery, registration, RC set-up through the
//! bootstrap, RDMA WRITE + RDMA READ + fetch-add signals + flush, and the provider's
//! fault switches (each run in a re-executed child process with its environment).
//! Nothing here touches RDMA hardware: RDMA READ in particular has only ever run
//! against the stub.

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
    built_lib("libcommhal_ibverbs_stub.so")
}

/// A cdylib dev-dependency `name`, next to the test binary.
fn built_lib(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().expect("test binary dir").to_path_buf();
    for d in [dir.clone(), dir.join("..")] {
        let p = d.join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "{name} not found next to {}: run through cargo",
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

/// Rank `me`'s port to the other rank of a 2-rank world (both in this process).
fn connect(t: &IbVerbs, b: &dyn Bootstrap, me: Rank) -> Result<IbPort> {
    let (l, r) = (
        Endpoint::this_process(me, Device::HOST),
        Endpoint::this_process(1 - me, Device::HOST),
    );
    t.connect(&PeerContext {
        bootstrap: b,
        local: &l,
        remote: &r,
        tag: TAG,
    })
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
    let port = connect(&t, b, me)?;
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
    // RDMA READ of the second half of what `a` wrote, back out of b's buffer into
    // a's: 512 KiB + 3 bytes, one more than the stub's max_msg_sz allows in one request.
    let (dst, n) = ((3 << 19) - 8, (1 << 19) + 3);
    a.buf.write(dst, &vec![0xee; n as usize])?;
    a.port.read(&a.local, dst, &a.remote, 64 + (1 << 19), n)?;
    a.port.flush()?;
    let mut back = vec![0u8; n as usize];
    a.buf.read(dst, &mut back)?;
    assert!(back == data[1 << 19..], "the RDMA READ landed");
    Ok(())
}

/// A pattern whose bytes differ from their neighbours' and from round to round.
fn pattern(n: usize, round: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i % 251) as u8 ^ round.wrapping_mul(37))
        .collect()
}

/// Rank `a` reads rank `b`'s host buffer into its own: sizes across the stub's
/// `max_msg_sz` (512 KiB) and odd offsets, more reads than the send queue and the
/// stub's response area hold before a flush, every byte checked; out-of-range reads
/// refused before anything is posted; a 0-byte read is a no-op.
#[test]
fn rdma_read_host_to_host_over_the_stub() {
    let len = 4u64 << 20;
    let [mut a, b] = world(len).unwrap();
    let src = pattern(len as usize, 1);
    b.buf.write(0, &src).unwrap();
    a.buf.write(0, &vec![0xee; len as usize]).unwrap();
    for (n, dst, from) in [
        (1u64, 3u64, 5u64),
        (7, 16, 1),
        (4099, 100, 3),
        ((1 << 20) + 3, 8192, 12_345),
        ((512 << 10) + 1, (2 << 20) + 7, 3 << 20),
    ] {
        a.port.read(&a.local, dst, &a.remote, from, n).unwrap();
        a.port.flush().unwrap();
        let mut got = vec![0u8; n as usize];
        a.buf.read(dst, &mut got).unwrap();
        let want = &src[from as usize..(from + n) as usize];
        if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
            panic!("read of {n} bytes from {from} to {dst}: byte {i} differs");
        }
        let mut edge = [0u8; 1];
        a.buf.read(dst - 1, &mut edge).unwrap();
        assert_eq!(edge, [0xee], "the byte before the destination is untouched");
    }
    // 3 MiB of reads and 600 single bytes before one flush: the send queue (256) and the
    // stub's response area (2 MiB) fill and are drained by polling completions.
    a.buf.write(0, &vec![0xee; len as usize]).unwrap();
    for i in 0..6u64 {
        let off = i * (512 << 10);
        a.port
            .read(&a.local, off, &a.remote, off, 512 << 10)
            .unwrap();
    }
    for i in 0..600u64 {
        a.port
            .read(&a.local, (3 << 20) + i, &a.remote, (3 << 20) + 2 * i, 1)
            .unwrap();
    }
    a.port.flush().unwrap();
    let mut got = vec![0u8; 3 << 20];
    a.buf.read(0, &mut got).unwrap();
    assert!(got == src[..3 << 20], "3 MiB of reads before one flush");
    let mut small = vec![0u8; 600];
    a.buf.read(3 << 20, &mut small).unwrap();
    assert!(
        (0..600).all(|i| small[i] == src[(3 << 20) + 2 * i]),
        "600 one-byte reads before one flush"
    );
    // Refused before posting, with what was out of range; the port stays usable.
    let e = a.port.read(&a.local, 0, &a.remote, len - 4, 8).unwrap_err();
    assert!(
        matches!(e, HalError::OutOfRange { .. }) && e.to_string().contains("read source"),
        "{e}"
    );
    let e = a.port.read(&a.local, len - 4, &a.remote, 0, 8).unwrap_err();
    assert!(
        matches!(e, HalError::OutOfRange { .. }) && e.to_string().contains("read destination"),
        "{e}"
    );
    assert!(a.port.read(&a.local, 0, &a.remote, u64::MAX, 2).is_err());
    a.buf.write(0, &[0xee; 8]).unwrap();
    a.port.read(&a.local, 0, &a.remote, 64, 0).unwrap();
    a.port.flush().unwrap();
    let mut head = [0u8; 8];
    a.buf.read(0, &mut head).unwrap();
    assert_eq!(head, [0xee; 8], "a 0-byte read is a no-op");
    a.port.read(&a.local, 0, &a.remote, 64, 8).unwrap();
    a.port.flush().unwrap();
    a.buf.read(0, &mut head).unwrap();
    assert!(head[..] == src[64..72], "the port works after refusals");
    drop(b);
}

/// Reads are ordered after the port's earlier writes and signals (one RC queue pair
/// executes in order): a's read of the range it just wrote and signalled, without a
/// flush in between, returns the new bytes. And a read issued after seeing the peer's
/// signal returns what the peer stored before signalling.
#[test]
fn rdma_read_after_write_and_signal_sees_them() {
    let [mut a, mut b] = world(1 << 20).unwrap();
    for round in 1..=20u8 {
        let n = 4099 + usize::from(round) * 13;
        let data = pattern(n, round);
        // a: RDMA WRITE into b, signal b, read the range back on the same port.
        a.buf.write(4096, &data).unwrap();
        a.port
            .write(&a.remote, 8192, &a.local, 4096, n as u64)
            .unwrap();
        a.port.signal(&a.remote, 0, 1).unwrap();
        a.port
            .read(&a.local, 65_536, &a.remote, 8192, n as u64)
            .unwrap();
        a.port.flush().unwrap();
        let mut got = vec![0u8; n];
        a.buf.read(65_536, &mut got).unwrap();
        assert!(got == data, "round {round}: the read saw the earlier write");
        assert_eq!(wait_for(&b.buf, 0, u64::from(round)), u64::from(round));
        // b: store into its own buffer, signal a; a waits, then reads b's bytes.
        let fresh = pattern(n, round ^ 0x55);
        b.buf.write(200_000, &fresh).unwrap();
        b.port.signal(&b.remote, 8, 1).unwrap();
        b.port.flush().unwrap();
        assert_eq!(wait_for(&a.buf, 8, u64::from(round)), u64::from(round));
        a.port
            .read(&a.local, 300_000, &a.remote, 200_000, n as u64)
            .unwrap();
        a.port.flush().unwrap();
        a.buf.read(300_000, &mut got).unwrap();
        assert!(
            got == fresh,
            "round {round}: the read after the signal is fresh"
        );
    }
}

/// A read of a peer region that was deregistered fails at the flush with the remote
/// access error (the stub checks the rkey, range and remote-read access), and the port
/// stays failed.
#[test]
fn rdma_read_of_a_deregistered_region_is_a_remote_access_error() {
    let [mut a, b] = world(4096).unwrap();
    let Side {
        port: _b_port,
        buf: _b_buf,
        local: b_local,
        ..
    } = b;
    drop(b_local);
    a.port.read(&a.local, 0, &a.remote, 0, 64).unwrap();
    let e = a.port.flush().unwrap_err().to_string();
    assert!(
        e.contains("IBV_WC_REM_ACCESS_ERR") && e.contains("remote write/read/atomic"),
        "{e}"
    );
    let again = a.port.read(&a.local, 0, &a.remote, 0, 8).unwrap_err();
    assert!(
        again
            .to_string()
            .contains("failed earlier and cannot be used"),
        "{again}"
    );
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
        "wc-error-read" => {
            let mut w = world(4096).unwrap();
            let [a, _] = &mut w;
            a.buf.write(0, &[0xee; 64]).unwrap();
            a.port.read(&a.local, 0, &a.remote, 0, 64).unwrap();
            let e = a.port.flush().unwrap_err().to_string();
            let mut b = [0u8; 64];
            a.buf.read(0, &mut b).unwrap();
            assert_eq!(b, [0xee; 64], "a failed read leaves its destination alone");
            e
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
        "no-dmabuf-symbol" => {
            let t = IbVerbs::new(&IbOptions {
                library: Some(
                    built_lib("libcommhal_ibverbs_stub_nodmabuf.so")
                        .display()
                        .to_string(),
                ),
                ..Default::default()
            })
            .unwrap();
            assert!(!t.dmabuf());
            let (file, _) = memfd(8192);
            let e = register_memfd(&t, &file, 4096, 4096, 0x7000_0000_1000).unwrap_err();
            format!("{e:?}")
        }
        "dmabuf-refused" => {
            let t = transport().unwrap();
            let (file, _) = memfd(8192);
            let e = register_memfd(&t, &file, 0, 8192, 0x7000_0000_0000).unwrap_err();
            e.to_string()
        }
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
fn a_failed_rdma_read_says_what_to_check() {
    let out = run_child(
        "wc-error-read",
        &[("COMMHAL_IBVERBS_STUB_FAULT", "wc-error")],
    );
    assert!(
        out.contains("IBV_WC_REM_ACCESS_ERR") && out.contains("remote write/read/atomic"),
        "{out}"
    );
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

// ---- dma-buf registration (ibv_reg_dmabuf_mr), a memfd standing in for the dma-buf ----

use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use commhal_backend_ib_verbs::{DmabufRange, IbLocal};
use commhal_hal::MemoryKind;

/// A memfd of `len` bytes (zeroed): the test's "dma-buf", and a second descriptor of
/// it for reading and writing its bytes from the test.
fn memfd(len: u64) -> (std::fs::File, std::fs::File) {
    // SAFETY: a NUL-terminated name and no flags beyond close-on-exec.
    let fd = unsafe { libc::memfd_create(c"ibstub-dmabuf".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor this test owns.
    let f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    f.set_len(len).unwrap();
    let view = f.try_clone().unwrap();
    (f, view)
}

/// Register `len` bytes at `offset` of the memfd as a dma-buf addressed at `iova`,
/// through a duplicate descriptor closed right after the registration (the MR must
/// not depend on it, as with a real dma-buf).
fn register_memfd(
    t: &IbVerbs,
    file: &std::fs::File,
    offset: u64,
    len: u64,
    iova: u64,
) -> Result<IbLocal> {
    let dup: OwnedFd = file.as_fd().try_clone_to_owned().unwrap();
    let r = t.register_dmabuf(
        DmabufRange {
            fd: dup.as_fd(),
            offset,
            len,
            iova,
        },
        MemoryKind::HostShared,
        Device::HOST,
        Arc::new(()),
    );
    drop(dup);
    r
}

/// One rank of [`writes_signals_and_flush_into_and_out_of_a_dmabuf_region`].
struct DmaSide {
    port: IbPort,
    host: HostRegion,
    host_reg: IbLocal,
    dma: IbLocal,
    view: std::fs::File,
    peer_host: IbRemote,
    peer_dma: IbRemote,
}

const DMA_OFFSET: u64 = 4096;
const DMA_LEN: u64 = 1 << 20;

fn dma_side(b: &dyn Bootstrap) -> Result<DmaSide> {
    let me: Rank = b.rank();
    let t = transport()?;
    assert!(t.dmabuf(), "the stub exports ibv_reg_dmabuf_mr");
    let host = HostRegion::alloc(DMA_LEN)?;
    let host_reg = t.register(&host)?;
    // The "dma-buf" has a page before the registered range; the IOVA is an address
    // no host mapping has, so the data path must translate it.
    let (file, view) = memfd(DMA_OFFSET + DMA_LEN);
    let iova = 0x7e00_0000_0000 + u64::from(me) * 0x1000_0000;
    let dma = register_memfd(&t, &file, DMA_OFFSET, DMA_LEN, iova)?;
    drop(file);
    assert!(dma.is_dmabuf());
    assert_eq!(commhal_hal::Region::addr(&dma), iova);
    // Registering the registration again keeps its MR.
    assert_eq!(t.register(&dma)?.rkey(), dma.rkey());
    for (tag, l) in [(1u64, &host_reg), (2, &dma)] {
        b.send(1 - me, tag, &l.export().bytes)?;
    }
    let mut remotes = Vec::new();
    for tag in [1u64, 2] {
        let bytes = b.recv(1 - me, tag)?;
        remotes.push(t.import(commhal_hal::Export {
            backend: "ib-verbs".into(),
            len: DMA_LEN,
            bytes,
            fds: vec![],
        })?);
    }
    let port = connect(&t, b, me)?;
    Ok(DmaSide {
        port,
        host,
        host_reg,
        dma,
        view,
        peer_host: remotes[0],
        peer_dma: remotes[1],
    })
}

fn view_u64(f: &std::fs::File, off: u64) -> u64 {
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, DMA_OFFSET + off).unwrap();
    u64::from_le_bytes(b)
}

fn wait_view(f: &std::fs::File, off: u64, want: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = view_u64(f, off);
        if v == want || Instant::now() > deadline {
            return v;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// RDMA WRITE from host memory into the peer's dma-buf region and from a dma-buf
/// region into the peer's host memory and dma-buf region, fetch-add signals into a
/// dma-buf region, flush: every byte checked in the memfd's pages.
#[test]
fn writes_signals_and_flush_into_and_out_of_a_dmabuf_region() {
    let boots = InProcBootstrap::create_with_timeout(2, Duration::from_secs(10));
    let sides: Vec<DmaSide> = std::thread::scope(|s| {
        let hs: Vec<_> = boots.iter().map(|b| s.spawn(move || dma_side(b))).collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank thread").unwrap())
            .collect()
    });
    let [mut a, b]: [DmaSide; 2] = sides.try_into().ok().unwrap();
    let data: Vec<u8> = (0..(600u32 << 10) + 5).map(|i| (i % 253) as u8).collect();
    let n = data.len() as u64;

    // Host → peer dma-buf, then a signal into the peer's dma-buf word 0.
    a.host.write(64, &data).unwrap();
    a.port.write(&a.peer_dma, 128, &a.host_reg, 64, n).unwrap();
    a.port.signal(&a.peer_dma, 0, 7).unwrap();
    a.port.signal(&a.peer_dma, 0, 9).unwrap();
    a.port.flush().unwrap();
    assert_eq!(
        wait_view(&b.view, 0, 16),
        16,
        "both adds landed in the dma-buf"
    );
    let mut got = vec![0u8; data.len()];
    b.view.read_exact_at(&mut got, DMA_OFFSET + 128).unwrap();
    assert!(got == data, "the RDMA WRITE landed in the dma-buf's pages");
    let mut before = [0xffu8; 120];
    b.view.read_exact_at(&mut before, DMA_OFFSET + 8).unwrap();
    assert!(before.iter().all(|&x| x == 0), "nothing else was written");
    let mut page0 = vec![0xffu8; DMA_OFFSET as usize];
    b.view.read_exact_at(&mut page0, 0).unwrap();
    assert!(
        page0.iter().all(|&x| x == 0),
        "the page before the range is untouched"
    );

    // Out of a dma-buf region: a's memfd → b's host memory and b's dma-buf.
    let src: Vec<u8> = (0..4099u32).map(|i| (i % 241) as u8 + 3).collect();
    a.view.write_all_at(&src, DMA_OFFSET + 8192).unwrap();
    a.port
        .write(&a.peer_host, 256, &a.dma, 8192, src.len() as u64)
        .unwrap();
    a.port
        .write(&a.peer_dma, 700_000, &a.dma, 8192, src.len() as u64)
        .unwrap();
    a.port.signal(&a.peer_host, 8, 1).unwrap();
    a.port.flush().unwrap();
    assert_eq!(wait_for(&b.host, 8, 1), 1);
    let mut got = vec![0u8; src.len()];
    b.host.read(256, &mut got).unwrap();
    assert!(
        got == src,
        "the write out of the dma-buf landed in host memory"
    );
    b.view
        .read_exact_at(&mut got, DMA_OFFSET + 700_000)
        .unwrap();
    assert!(got == src, "dma-buf to dma-buf");

    // The other direction: b signals into a's dma-buf at the range's last word.
    let mut b = b;
    b.port.signal(&b.peer_dma, DMA_LEN - 8, 3).unwrap();
    b.port.flush().unwrap();
    assert_eq!(wait_view(&a.view, DMA_LEN - 8, 3), 3);
    // Past the registered range: refused before posting.
    assert!(matches!(
        b.port.write(&b.peer_dma, DMA_LEN, &b.dma, 0, 1),
        Err(HalError::OutOfRange { .. })
    ));
    drop((a.dma, b.dma));
}

/// RDMA READ out of the peer's dma-buf region into host memory, out of the peer's host
/// memory into a local dma-buf region (the destination's IOVA translated by the
/// provider), and dma-buf to dma-buf, sizes across `max_msg_sz`: every byte checked in
/// host memory and in the memfd's pages.
#[test]
fn rdma_reads_into_and_out_of_a_dmabuf_region() {
    let boots = InProcBootstrap::create_with_timeout(2, Duration::from_secs(10));
    let sides: Vec<DmaSide> = std::thread::scope(|s| {
        let hs: Vec<_> = boots.iter().map(|b| s.spawn(move || dma_side(b))).collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank thread").unwrap())
            .collect()
    });
    let [mut a, b]: [DmaSide; 2] = sides.try_into().ok().unwrap();
    let n = (600u64 << 10) + 5;
    let in_dma = pattern(n as usize, 3);
    b.view.write_all_at(&in_dma, DMA_OFFSET + 1000).unwrap();
    let in_host = pattern(n as usize, 4);
    b.host.write(2000, &in_host).unwrap();

    // Peer dma-buf → local host memory.
    a.port.read(&a.host_reg, 64, &a.peer_dma, 1000, n).unwrap();
    // Peer host memory → local dma-buf region.
    a.port.read(&a.dma, 8, &a.peer_host, 2000, n).unwrap();
    a.port.flush().unwrap();
    let mut got = vec![0u8; n as usize];
    a.host.read(64, &mut got).unwrap();
    assert!(got == in_dma, "dma-buf to host memory");
    a.view.read_exact_at(&mut got, DMA_OFFSET + 8).unwrap();
    assert!(got == in_host, "host memory to the dma-buf's pages");
    let mut before = [0xffu8; 8];
    a.view.read_exact_at(&mut before, DMA_OFFSET).unwrap();
    assert_eq!(before, [0; 8], "nothing before the destination was written");

    // Peer dma-buf → local dma-buf, ending at the range's last byte.
    a.port
        .read(&a.dma, DMA_LEN - n, &a.peer_dma, 1000, n)
        .unwrap();
    a.port.flush().unwrap();
    a.view
        .read_exact_at(&mut got, DMA_OFFSET + DMA_LEN - n)
        .unwrap();
    assert!(got == in_dma, "dma-buf to dma-buf");

    // Past either registered range: refused before posting.
    assert!(matches!(
        a.port.read(&a.host_reg, 0, &a.peer_dma, DMA_LEN - 4, 8),
        Err(HalError::OutOfRange { .. })
    ));
    assert!(matches!(
        a.port.read(&a.dma, DMA_LEN - 4, &a.peer_host, 0, 8),
        Err(HalError::OutOfRange { .. })
    ));
    drop((a.dma, b.dma));
}

#[test]
fn a_dmabuf_range_outside_its_registration_or_foreign_device_memory_is_refused() {
    let t = transport().unwrap();
    let (file, _) = memfd(4096);
    // Past the end of the file: the provider refuses (as the kernel checks the size).
    let e = register_memfd(&t, &file, 0, 8192, 0x7000_0000_0000).unwrap_err();
    assert!(
        e.to_string().contains("ibv_reg_dmabuf_mr of 8192 bytes"),
        "{e}"
    );
    #[derive(Debug)]
    struct Gpu;
    impl commhal_hal::Region for Gpu {
        fn addr(&self) -> u64 {
            0x7f00_0000_0000
        }
        fn len(&self) -> u64 {
            64
        }
        fn device(&self) -> Device {
            Device {
                kind: commhal_hal::DeviceKind::Cuda,
                ordinal: 0,
            }
        }
        fn kind(&self) -> MemoryKind {
            MemoryKind::Device
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }
    assert!(matches!(
        t.register(&Gpu),
        Err(HalError::Unregistered { .. })
    ));
}

#[test]
fn a_libibverbs_without_reg_dmabuf_mr_says_gpu_memory_cannot_be_registered() {
    let out = run_child("no-dmabuf-symbol", &[]);
    assert!(
        out.contains(
            "has no ibv_reg_dmabuf_mr (rdma-core >= 34 needed) — GPU memory cannot be registered"
        ) && out.contains("stage GPU memory through host memory")
            && out.contains("Unsupported"),
        "{out}"
    );
}

#[test]
fn a_provider_refusing_dmabuf_says_what_to_do() {
    let out = run_child(
        "dmabuf-refused",
        &[("COMMHAL_IBVERBS_STUB_FAULT", "dmabuf-refused")],
    );
    assert!(
        out.contains("ibv_reg_dmabuf_mr of 8192 bytes")
            && out.contains(&format!("errno {}", libc::EOPNOTSUPP))
            && out.contains("stage GPU memory through host memory"),
        "{out}"
    );
}

// ---- memory of types ib-verbs does not know, offered through `Region::registrable` ----

use commhal_hal::{DmaBufRange, Region, Registrable};

/// Host memory of a type defined here: offered as [`Registrable::Host`].
#[derive(Debug)]
struct OfferedHost(Arc<Box<[u64]>>);

impl Region for OfferedHost {
    fn addr(&self) -> u64 {
        self.0.as_ptr() as u64
    }
    fn len(&self) -> u64 {
        8 * self.0.len() as u64
    }
    fn device(&self) -> Device {
        Device::HOST
    }
    fn kind(&self) -> MemoryKind {
        MemoryKind::HostShared
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn registrable(&self) -> Option<Registrable> {
        Some(Registrable::Host {
            owner: self.0.clone(),
        })
    }
}

#[test]
fn host_memory_of_an_unknown_type_registers_through_registrable() {
    let t = transport().unwrap();
    let mem = Arc::new(vec![0u64; 512].into_boxed_slice());
    let r = OfferedHost(mem.clone());
    let l = t.register(&r).unwrap();
    assert!(!l.is_dmabuf());
    assert_eq!((l.addr(), l.len()), (r.addr(), 4096));
    assert_eq!(l.kind(), MemoryKind::HostShared);
    // The registration holds the owner; dropping it lets go.
    drop(r);
    assert_eq!(Arc::strong_count(&mem), 2);
    drop(l);
    assert_eq!(Arc::strong_count(&mem), 1);
    // Through the object-safe box too.
    let boxed: Box<dyn Region> = Box::new(OfferedHost(mem.clone()));
    assert!(t.register(&boxed).is_ok());
}

/// Device memory of a type defined here: a memfd stands in for the dma-buf its
/// exporter makes, addressed from `iova`; `fail` makes the export refuse.
#[derive(Debug)]
struct OfferedDevice {
    file: Arc<std::fs::File>,
    iova: u64,
    fail: bool,
    asked: Arc<std::sync::Mutex<Vec<(u64, u64)>>>,
}

impl Region for OfferedDevice {
    fn addr(&self) -> u64 {
        self.iova + 16
    }
    fn len(&self) -> u64 {
        64
    }
    fn device(&self) -> Device {
        Device {
            kind: commhal_hal::DeviceKind::Cuda,
            ordinal: 0,
        }
    }
    fn kind(&self) -> MemoryKind {
        MemoryKind::Device
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn registrable(&self) -> Option<Registrable> {
        let (file, iova, fail, asked) =
            (self.file.clone(), self.iova, self.fail, self.asked.clone());
        Some(Registrable::DeviceDmaBuf {
            owner: self.file.clone(),
            export: Arc::new(move |addr, len| {
                asked.lock().unwrap().push((addr, len));
                if fail {
                    return Err(HalError::invalid("this exporter has no dma-buf to give"));
                }
                Ok(DmaBufRange {
                    fd: file.as_fd().try_clone_to_owned().unwrap(),
                    offset: 0,
                    len: 4096,
                    iova,
                })
            }),
        })
    }
}

#[test]
fn device_memory_of_an_unknown_type_registers_through_its_dmabuf_export() {
    let t = transport().unwrap();
    let (file, _) = memfd(4096);
    let r = OfferedDevice {
        file: Arc::new(file),
        iova: 0x7d00_0000_0000,
        fail: false,
        asked: Default::default(),
    };
    let l = t.register(&r).unwrap();
    assert!(l.is_dmabuf());
    assert_eq!((l.addr(), l.len()), (r.addr(), 64));
    assert_eq!((l.kind(), l.device()), (MemoryKind::Device, r.device()));
    assert_eq!(*r.asked.lock().unwrap(), vec![(r.addr(), 64)]);
    // The registration holds the owner (the memfd), not the exported descriptor.
    assert_eq!(Arc::strong_count(&r.file), 2);
    drop(l);
    assert_eq!(Arc::strong_count(&r.file), 1);

    let refused = OfferedDevice { fail: true, ..r };
    let e = t.register(&refused).unwrap_err().to_string();
    assert!(
        e.contains("this exporter has no dma-buf to give")
            && e.contains("Stage GPU memory through host memory"),
        "{e}"
    );
}

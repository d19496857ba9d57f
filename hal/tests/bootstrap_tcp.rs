//! `TcpBootstrap` with real processes. Each test starts ranks by re-running this test
//! binary on the `child` test (`--exact child`), telling it its role in environment
//! variables; `child` does nothing in an ordinary test run. Rank 0 binds its
//! listener with `UniqueId::bind`, prints the id, and the parent hands it to the other
//! ranks in `COMMHAL_UNIQUE_ID` (so they use `TcpBootstrap::from_env`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::fd::OwnedFd;
use std::process::{Child, Command, Stdio};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use commhal_hal::HalError;
use commhal_hal::bootstrap::{Bootstrap, LaunchEnv, TcpBootstrap, UniqueId, timeout_from_env};
use commhal_hal::settings::launch::{BOOTSTRAP_TIMEOUT_MS, RANK, UNIQUE_ID, WORLD_SIZE};
use commhal_hal::settings::tests::{TEST_ROLE as ROLE, TEST_SCENARIO as SCENARIO};

const ID_LINE: &str = "TEST_UNIQUE_ID=";

// ---------------------------------------------------------------- child side ----

#[test]
fn child() {
    let Some(role) = ROLE.text() else {
        return; // an ordinary test run
    };
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .try_init();
    match role.as_str() {
        "rank" => run_rank(),
        "impostor" => run_impostor(),
        other => panic!("unknown role {other}"),
    }
}

fn join() -> commhal_hal::Result<TcpBootstrap> {
    let env = LaunchEnv::detect()?.expect("parent sets COMMHAL_RANK/COMMHAL_WORLD_SIZE");
    if env.rank == 0 {
        let id = UniqueId::bind("127.0.0.1".parse().unwrap())?;
        println!("{ID_LINE}{id}");
        std::io::stdout().flush().unwrap();
        TcpBootstrap::new(0, env.world_size, &id, timeout_from_env()?)
    } else {
        TcpBootstrap::from_env()
    }
}

fn run_rank() {
    let scenario = SCENARIO.text().unwrap();
    let b = match join() {
        Ok(b) => b,
        Err(e) if scenario == "missing" => {
            println!("EXPECTED_ERROR: {e}");
            return;
        }
        Err(e) => panic!("bootstrap failed: {e}"),
    };
    let me = b.rank();
    match scenario.as_str() {
        "split" => split_pairs(b),
        "full" => full(&b),
        "fds" => fds(&b),
        "peer_dead" => peer_dead(&b),
        "crash" => crash(&b),
        "missing" => panic!("rank {me} joined although a rank is missing"),
        s => panic!("unknown scenario {s}"),
    }
    println!("OK rank {me}");
}

fn contribution(r: u32) -> Vec<u8> {
    format!("rank-{r}|").repeat(r as usize + 1).into_bytes()
}

fn full(b: &TcpBootstrap) {
    let (me, n) = (b.rank(), b.size());

    let all = b.all_gather(&contribution(me)).unwrap();
    assert_eq!(all.len(), n as usize);
    for (r, d) in all.iter().enumerate() {
        assert_eq!(
            d,
            &contribution(r as u32),
            "all_gather slot {r} on rank {me}"
        );
    }

    let root = n - 1;
    let mine = if me == root {
        format!("broadcast from {root} of {n}").into_bytes()
    } else {
        b"ignored".to_vec()
    };
    let got = b.broadcast(root, &mine).unwrap();
    assert_eq!(got, format!("broadcast from {root} of {n}").into_bytes());

    for _ in 0..3 {
        b.barrier().unwrap();
    }

    // Interleaved tags to every peer (and self); received tag by tag, in another order.
    const ROUNDS: usize = 20;
    let tags = [1u64, 2, 3];
    for p in 0..n {
        for i in 0..ROUNDS {
            for t in tags {
                b.send(p, t, format!("{me}->{p} tag {t} #{i}").as_bytes())
                    .unwrap();
            }
        }
    }
    for p in 0..n {
        for t in [3u64, 1, 2] {
            for i in 0..ROUNDS {
                let m = b.recv(p, t).unwrap();
                assert_eq!(
                    String::from_utf8(m).unwrap(),
                    format!("{p}->{me} tag {t} #{i}")
                );
            }
        }
    }

    // A message large enough to need several writes, around a ring.
    let big: Vec<u8> = (0..(1usize << 20) + 7)
        .map(|i| (i as u32 ^ me) as u8)
        .collect();
    b.send((me + 1) % n, 9, &big).unwrap();
    let from = (me + n - 1) % n;
    let got = b.recv(from, 9).unwrap();
    let want: Vec<u8> = (0..(1usize << 20) + 7)
        .map(|i| (i as u32 ^ from) as u8)
        .collect();
    assert!(got == want, "ring message from rank {from} differs");

    // Reserved tags and unknown peers are refused, not sent.
    assert!(matches!(
        b.send(0, u64::MAX, b"x"),
        Err(HalError::InvalidArgument(_))
    ));
    assert!(matches!(
        b.send(n, 1, b"x"),
        Err(HalError::InvalidArgument(_))
    ));
    b.barrier().unwrap();
}

fn fds(b: &TcpBootstrap) {
    use nix::sys::memfd::{MFdFlags, memfd_create};
    use std::fs::File;
    use std::io::{Seek, SeekFrom};
    assert_eq!(b.size(), 2);
    if b.rank() == 0 {
        let fd = memfd_create("commhal-test", MFdFlags::MFD_CLOEXEC).unwrap();
        let mut f = File::from(fd);
        let msg = format!("written by pid {}", std::process::id());
        f.write_all(msg.as_bytes()).unwrap();
        b.send(1, 7, msg.as_bytes()).unwrap();
        b.send_fds(1, 7, &[OwnedFd::from(f.try_clone().unwrap())])
            .unwrap();
        b.barrier().unwrap(); // rank 1 has written its reply
        let mut s = String::new();
        f.seek(SeekFrom::Start(0)).unwrap();
        f.read_to_string(&mut s).unwrap();
        assert_eq!(s, format!("{msg} / answered by rank 1"));
    } else {
        let expected = String::from_utf8(b.recv(0, 7).unwrap()).unwrap();
        let fds = b.recv_fds(0, 7).unwrap();
        assert_eq!(fds.len(), 1);
        let mut f = File::from(fds.into_iter().next().unwrap());
        let mut s = String::new();
        f.seek(SeekFrom::Start(0)).unwrap();
        f.read_to_string(&mut s).unwrap();
        assert_eq!(s, expected, "memfd content seen by rank 1");
        f.write_all(b" / answered by rank 1").unwrap();
        b.barrier().unwrap();
    }
}

/// Four processes split into two pairs (odd / even ranks, reversed by key); each pair
/// passes a memfd and gathers, as a GPU communicator made on a split does at setup.
fn split_pairs(b: TcpBootstrap) {
    use nix::sys::memfd::{MFdFlags, memfd_create};
    let r = b.rank();
    let root: std::sync::Arc<dyn Bootstrap> = std::sync::Arc::new(b);
    let s = commhal_hal::bootstrap::split(root, Some(r % 2), 10 - r)
        .unwrap()
        .unwrap();
    assert_eq!((s.size(), s.rank()), (2, 1 - r / 2), "rank {r}");
    let all = s.all_gather(&[r as u8]).unwrap();
    assert_eq!(all.concat(), vec![r as u8 % 2 + 2, r as u8 % 2]);
    if s.rank() == 0 {
        let fd = memfd_create("commhal-split", MFdFlags::MFD_CLOEXEC).unwrap();
        s.send_fds(1, 3, &[fd]).unwrap();
    } else {
        assert_eq!(s.recv_fds(0, 3).unwrap().len(), 1);
    }
    s.barrier().unwrap();
}

fn peer_dead(b: &TcpBootstrap) {
    b.barrier().unwrap();
    if b.rank() == 0 {
        // Rank 1 sent one message and exited: the message arrives, then PeerDead.
        assert_eq!(b.recv(1, 5).unwrap(), b"goodbye");
        match b.recv(1, 5) {
            Err(HalError::PeerDead { rank: 1, detail }) => println!("PEER_DEAD: {detail}"),
            other => panic!("expected PeerDead from rank 1, got {other:?}"),
        }
        // it dropped its bootstrap: a departure, not a failure of the job
        let failed = b.peer_failure().is_some_and(|f| f.is_set());
        println!("FAILURE_FLAG: {failed}");
        assert!(matches!(
            b.recv_fds(1, 5),
            Err(HalError::PeerDead { rank: 1, .. })
        ));
    } else {
        b.send(0, 5, b"goodbye").unwrap();
    }
}

/// Rank 1 exits without dropping its bootstrap (as a crash would): rank 0 sees a
/// failure.
fn crash(b: &TcpBootstrap) {
    b.barrier().unwrap();
    if b.rank() == 1 {
        use std::io::Write;
        println!("OK rank 1");
        let _ = std::io::stdout().flush();
        std::process::exit(0);
    }
    let flag = b.peer_failure().expect("a TCP bootstrap watches its peers");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !flag.is_set() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    println!("FAILURE_FLAG: {}", flag.is_set());
}

fn run_impostor() {
    let id: UniqueId = UNIQUE_ID.text().unwrap().parse().unwrap();
    match TcpBootstrap::new(1, 2, &id, Duration::from_secs(10)) {
        Ok(_) => panic!("the root accepted a wrong secret"),
        Err(e) => println!("IMPOSTOR_REFUSED: {e}"),
    }
}

// --------------------------------------------------------------- parent side ----

struct Proc {
    name: String,
    child: Child,
    out: JoinHandle<String>,
    err: JoinHandle<String>,
}

struct Done {
    name: String,
    ok: bool,
    out: String,
    err: String,
}

fn command(role: &str, env: &[(&str, String)]) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", "child", "--nocapture", "--test-threads=1"]);
    for v in commhal_hal::bootstrap::env::VARS {
        c.env_remove(v);
    }
    c.env(ROLE.env, role)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn drain(r: impl Read + Send + 'static) -> JoinHandle<String> {
    thread::spawn(move || {
        let mut s = String::new();
        let _ = BufReader::new(r).read_to_string(&mut s);
        s
    })
}

fn rank_env(rank: u32, size: u32, scenario: &str, timeout_ms: u64) -> Vec<(&'static str, String)> {
    vec![
        (RANK.env, rank.to_string()),
        (WORLD_SIZE.env, size.to_string()),
        (SCENARIO.env, scenario.to_string()),
        (BOOTSTRAP_TIMEOUT_MS.env, timeout_ms.to_string()),
    ]
}

/// Start rank 0 and read the unique id it prints.
fn start_root(size: u32, scenario: &str, timeout_ms: u64) -> (Proc, String) {
    let mut child = command("rank", &rank_env(0, size, scenario, timeout_ms))
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    let id = loop {
        let mut line = String::new();
        if stdout.read_line(&mut line).unwrap() == 0 {
            let _ = child.kill();
            panic!("rank 0 exited before printing its id; output:\n{seen}");
        }
        seen.push_str(&line);
        // The harness may have printed "test child ... " on the same line.
        if let Some(at) = line.find(ID_LINE) {
            break line[at + ID_LINE.len()..].trim().to_string();
        }
    };
    let err = drain(child.stderr.take().unwrap());
    let out = thread::spawn(move || {
        let mut rest = String::new();
        let _ = stdout.read_to_string(&mut rest);
        seen + &rest
    });
    (
        Proc {
            name: "rank 0".into(),
            child,
            out,
            err,
        },
        id,
    )
}

fn start(name: &str, role: &str, env: &[(&str, String)]) -> Proc {
    let mut child = command(role, env).spawn().unwrap();
    Proc {
        name: name.into(),
        out: drain(child.stdout.take().unwrap()),
        err: drain(child.stderr.take().unwrap()),
        child,
    }
}

/// Wait for a child, killing it if it hangs (a safety net, not a timing assertion).
fn finish(mut p: Proc) -> Done {
    let give_up = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = p.child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() > give_up {
            let _ = p.child.kill();
            let _ = p.child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(20));
    };
    Done {
        ok: status.is_some_and(|s| s.success()),
        name: p.name,
        out: p.out.join().unwrap(),
        err: p.err.join().unwrap(),
    }
}

fn assert_ok(d: &Done, marker: &str) {
    assert!(
        d.ok && d.out.contains(marker),
        "{} failed or did not print {marker:?}\nstdout:\n{}\nstderr:\n{}",
        d.name,
        d.out,
        d.err
    );
}

fn run_job(size: u32, scenario: &str) -> Vec<Done> {
    let (root, id) = start_root(size, scenario, 20_000);
    let mut procs = vec![root];
    for r in 1..size {
        let mut env = rank_env(r, size, scenario, 20_000);
        env.push((UNIQUE_ID.env, id.clone()));
        procs.push(start(&format!("rank {r}"), "rank", &env));
    }
    let done: Vec<Done> = procs.into_iter().map(finish).collect();
    for (r, d) in done.iter().enumerate() {
        assert_ok(d, &format!("OK rank {r}"));
    }
    done
}

#[test]
fn two_ranks() {
    run_job(2, "full");
}

#[test]
fn four_ranks() {
    run_job(4, "full");
}

#[test]
fn eight_ranks() {
    run_job(8, "full");
}

#[test]
fn split_pairs_pass_descriptors_between_processes() {
    run_job(4, "split");
}

#[test]
fn memfd_passes_between_processes() {
    run_job(2, "fds");
}

#[test]
fn closed_peer_is_peer_dead() {
    let done = run_job(2, "peer_dead");
    assert!(done[0].out.contains("PEER_DEAD: "), "{}", done[0].out);
    assert!(done[0].out.contains("left the job"), "{}", done[0].out);
    assert!(
        done[0].out.contains("FAILURE_FLAG: false"),
        "{}",
        done[0].out
    );
}

#[test]
fn crashed_peer_raises_the_failure_flag() {
    let done = run_job(2, "crash");
    assert!(
        done[0].out.contains("FAILURE_FLAG: true"),
        "{}",
        done[0].out
    );
}

/// Long enough that ranks 1 and 2 join in time even on a loaded 2-core CI machine (the
/// error must name rank 3, the one that never starts, not a late one).
const MISSING_TIMEOUT_MS: u64 = 5000;

#[test]
fn missing_rank_is_named_on_every_started_rank() {
    let (root, id) = start_root(4, "missing", MISSING_TIMEOUT_MS);
    let mut procs = vec![root];
    for r in 1..3 {
        let mut env = rank_env(r, 4, "missing", MISSING_TIMEOUT_MS);
        env.push((UNIQUE_ID.env, id.clone()));
        procs.push(start(&format!("rank {r}"), "rank", &env));
    }
    for d in procs.into_iter().map(finish) {
        assert_ok(&d, "EXPECTED_ERROR: ");
        let line = d
            .out
            .lines()
            .find(|l| l.contains("EXPECTED_ERROR"))
            .unwrap();
        assert!(
            line.contains("rank 3 of 4") && line.contains(&format!("{MISSING_TIMEOUT_MS} ms")),
            "{}: error does not name the missing rank: {line}",
            d.name
        );
    }
}

#[test]
fn wrong_secret_and_garbage_are_refused_while_the_job_completes() {
    let (root, id) = start_root(2, "full", 20_000);
    let real: UniqueId = id.parse().unwrap();

    // A process with the right address but another secret.
    let fake = UniqueId::new(real.addr()).unwrap().to_string();
    let imp = finish(start("impostor", "impostor", &[(UNIQUE_ID.env, fake)]));
    assert_ok(&imp, "IMPOSTOR_REFUSED: ");
    assert!(imp.out.contains("wrong job secret"), "{}", imp.out);

    // Not our protocol at all, and a frame announcing an absurd length.
    let mut http = TcpStream::connect(real.addr()).unwrap();
    http.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut huge = TcpStream::connect(real.addr()).unwrap();
    let mut frame = b"CMHL".to_vec();
    frame.extend_from_slice(&1u16.to_le_bytes());
    frame.extend_from_slice(&1u16.to_le_bytes());
    frame.extend_from_slice(&0u64.to_le_bytes());
    frame.extend_from_slice(&u64::MAX.to_le_bytes());
    huge.write_all(&frame).unwrap();
    // Both are answered with a refusal and closed.
    for s in [&mut http, &mut huge] {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        assert!(
            String::from_utf8_lossy(&buf).contains("refused"),
            "got {buf:?}"
        );
    }

    // The real rank 1 still joins and the job completes.
    let env = {
        let mut e = rank_env(1, 2, "full", 20_000);
        e.push((UNIQUE_ID.env, id));
        e
    };
    let r1 = finish(start("rank 1", "rank", &env));
    let r0 = finish(root);
    assert_ok(&r0, "OK rank 0");
    assert_ok(&r1, "OK rank 1");
    for needle in ["wrong job secret", "bad magic", "more than"] {
        assert!(
            r0.err.contains(needle),
            "rank 0 did not log {needle:?}:\n{}",
            r0.err
        );
    }
    assert!(
        r0.err.contains("WARN"),
        "refusals are warnings:\n{}",
        r0.err
    );
}

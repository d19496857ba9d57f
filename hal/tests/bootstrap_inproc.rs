//! `InProcBootstrap`: ranks as threads of one process.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::thread;
use std::time::Duration;

use commhal_hal::bootstrap::{Bootstrap, InProcBootstrap, recv_export, send_export};
use commhal_hal::{Export, HalError};

/// Run `f` on every rank in its own thread; results in rank order.
fn on_all<T: Send + 'static>(
    ranks: Vec<InProcBootstrap>,
    f: impl Fn(InProcBootstrap) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    let handles: Vec<_> = ranks
        .into_iter()
        .map(|b| {
            let f = f.clone();
            thread::spawn(move || f(b))
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn collectives_and_ordering_on_four_threads() {
    let out = on_all(InProcBootstrap::create(4), |b| {
        let (me, n) = (b.rank(), b.size());
        let all = b
            .all_gather(format!("r{me}").repeat(me as usize + 1).as_bytes())
            .unwrap();
        for (r, d) in all.iter().enumerate() {
            assert_eq!(d, format!("r{r}").repeat(r + 1).as_bytes());
        }
        let got = b
            .broadcast(2, if me == 2 { b"from two" } else { b"junk" })
            .unwrap();
        assert_eq!(got, b"from two");
        b.barrier().unwrap();
        for p in 0..n {
            for i in 0..10 {
                for t in [5u64, 6] {
                    b.send(p, t, format!("{me}>{p}:{t}:{i}").as_bytes())
                        .unwrap();
                }
            }
        }
        for p in 0..n {
            for t in [6u64, 5] {
                for i in 0..10 {
                    assert_eq!(
                        b.recv(p, t).unwrap(),
                        format!("{p}>{me}:{t}:{i}").as_bytes()
                    );
                }
            }
        }
        b.barrier().unwrap();
        me
    });
    assert_eq!(out, vec![0, 1, 2, 3]);
}

#[test]
fn absent_rank_times_out_naming_it() {
    let mut ranks = InProcBootstrap::create_with_timeout(3, Duration::from_millis(200));
    let idle = ranks.pop().unwrap(); // rank 2 stays alive but never enters
    let errs = on_all(ranks, |b| b.barrier().unwrap_err().to_string());
    for e in errs {
        assert!(e.contains("rank 2 of 3") && e.contains("barrier"), "{e}");
    }
    drop(idle);
}

#[test]
fn dropped_rank_is_peer_dead() {
    let mut ranks = InProcBootstrap::create(2);
    let one = ranks.pop().unwrap();
    let zero = ranks.pop().unwrap();
    one.send(0, 1, b"before").unwrap();
    drop(one);
    assert_eq!(zero.recv(1, 1).unwrap(), b"before");
    assert!(matches!(
        zero.recv(1, 1),
        Err(HalError::PeerDead { rank: 1, .. })
    ));
    assert!(matches!(
        zero.send(1, 1, b"x"),
        Err(HalError::PeerDead { rank: 1, .. })
    ));
    assert!(matches!(
        zero.barrier(),
        Err(HalError::PeerDead { rank: 1, .. })
    ));
}

#[test]
fn bad_arguments_are_errors() {
    let ranks = InProcBootstrap::create(2);
    let b = &ranks[0];
    assert!(matches!(
        b.send(2, 1, b"x"),
        Err(HalError::InvalidArgument(_))
    ));
    assert!(matches!(b.recv(7, 1), Err(HalError::InvalidArgument(_))));
    assert!(matches!(
        b.send(1, u64::MAX, b"x"),
        Err(HalError::InvalidArgument(_))
    ));
    assert!(matches!(
        b.broadcast(5, b"x"),
        Err(HalError::InvalidArgument(_))
    ));
}

fn memfd(content: &[u8]) -> File {
    use nix::sys::memfd::{MFdFlags, memfd_create};
    let mut f = File::from(memfd_create("inproc-test", MFdFlags::MFD_CLOEXEC).unwrap());
    f.write_all(content).unwrap();
    f
}

#[test]
fn fds_are_duplicated_to_the_peer() {
    let mut ranks = InProcBootstrap::create(2);
    let one = ranks.pop().unwrap();
    let zero = ranks.pop().unwrap();
    let f = memfd(b"shared page");
    zero.send_fds(1, 3, &[OwnedFd::from(f.try_clone().unwrap())])
        .unwrap();
    drop(f); // the peer holds its own duplicate
    let got = one.recv_fds(0, 3).unwrap();
    assert_eq!(got.len(), 1);
    let mut g = File::from(got.into_iter().next().unwrap());
    g.seek(SeekFrom::Start(0)).unwrap();
    let mut s = String::new();
    g.read_to_string(&mut s).unwrap();
    assert_eq!(s, "shared page");
}

#[test]
fn export_round_trip_with_descriptors() {
    let mut ranks = InProcBootstrap::create(2);
    let one = ranks.pop().unwrap();
    let zero = ranks.pop().unwrap();
    let export = Export {
        backend: "host-emu".into(),
        len: 11,
        bytes: b"opaque".to_vec(),
        fds: vec![OwnedFd::from(memfd(b"hello world"))],
    };
    send_export(&zero, 1, 40, &export).unwrap();
    let got = recv_export(&one, 0, 40).unwrap();
    assert_eq!(
        (got.backend.as_str(), got.len, got.bytes.as_slice()),
        ("host-emu", 11, &b"opaque"[..])
    );
    let mut f = File::from(got.fds.into_iter().next().unwrap());
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut s = String::new();
    f.read_to_string(&mut s).unwrap();
    assert_eq!(s, "hello world");
}

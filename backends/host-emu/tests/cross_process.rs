//! Two processes share host-emu memory: the test re-executes itself as a child
//! (`--exact child_entry`, marked by an env var), passes the export's memfd over a Unix
//! socket with `SCM_RIGHTS`, and both sides read what the other wrote.

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use commhal_backend_host_emu::{HostEmu, ShmRegion};
use commhal_hal::settings::tests::HOST_EMU_TEST_CHILD as CHILD;
use commhal_hal::{Device, Export, MemoryMapped, Region};
use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};

const LEN: u64 = 3 * 4096 + 123;
const SEM: u64 = 0;
const DATA: std::ops::Range<u64> = 8..6000;
const REPLY: std::ops::Range<u64> = 6000..LEN;
const BOUND: Duration = Duration::from_secs(30);

fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(7).wrapping_add(3) % 251) as u8
}

// ---- a tiny fd-passing helper (the real one lives in the bootstrap) ----

/// Send `export` as one length-prefixed message, its fds attached with SCM_RIGHTS.
fn send_export(sock: &UnixStream, e: &Export) -> std::io::Result<()> {
    let mut body = Vec::new();
    body.extend_from_slice(&(e.backend.len() as u32).to_le_bytes());
    body.extend_from_slice(e.backend.as_bytes());
    body.extend_from_slice(&e.len.to_le_bytes());
    body.extend_from_slice(&e.bytes);
    let mut msg = (body.len() as u32).to_le_bytes().to_vec();
    msg.extend_from_slice(&body);
    let fds: Vec<i32> = e.fds.iter().map(|f| f.as_raw_fd()).collect();
    let cmsg = [ControlMessage::ScmRights(&fds)];
    let n = sendmsg::<()>(
        sock.as_raw_fd(),
        &[IoSlice::new(&msg)],
        &cmsg,
        MsgFlags::empty(),
        None,
    )?;
    (&*sock).write_all(&msg[n..])
}

fn recv_export(sock: &UnixStream) -> std::io::Result<Export> {
    let mut first = [0u8; 256];
    let mut cmsg_buf = nix::cmsg_space!([i32; 4]);
    let (n, fds) = {
        let mut iov = [IoSliceMut::new(&mut first)];
        let r = recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg_buf),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )?;
        let mut fds = Vec::new();
        for c in r.cmsgs()? {
            if let ControlMessageOwned::ScmRights(raw) = c {
                for fd in raw {
                    // SAFETY: the kernel just installed `fd` in this process for us; nothing
                    // else owns it.
                    fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                }
            }
        }
        (r.bytes, fds)
    };
    let mut msg = first[..n].to_vec();
    let bad = || std::io::Error::other("short export message");
    let total = 4 + u32::from_le_bytes(msg.get(..4).ok_or_else(bad)?.try_into().unwrap()) as usize;
    if msg.len() < total {
        let mut rest = vec![0u8; total - msg.len()];
        (&*sock).read_exact(&mut rest)?;
        msg.extend_from_slice(&rest);
    }
    let name_len = u32::from_le_bytes(msg[4..8].try_into().unwrap()) as usize;
    let backend = String::from_utf8_lossy(&msg[8..8 + name_len]).into_owned();
    let at = 8 + name_len;
    let len = u64::from_le_bytes(msg[at..at + 8].try_into().unwrap());
    Ok(Export {
        backend,
        len,
        bytes: msg[at + 8..total].to_vec(),
        fds,
    })
}

// ---- the child ----

/// Runs only when re-executed by `parent_and_child_share_memory`.
#[test]
fn child_entry() {
    let Some(path) = CHILD.text() else {
        return;
    };
    let sock = UnixStream::connect(&path).expect("child: connect");
    sock.set_read_timeout(Some(BOUND)).unwrap();
    let export = recv_export(&sock).expect("child: receive export");
    let t = HostEmu::new();
    let m = MemoryMapped::map(&t, export).expect("child: map");
    assert!(!m.is_same_process(), "a child must mmap the fd");
    assert_eq!(m.len(), LEN);
    let mut data = vec![0u8; (DATA.end - DATA.start) as usize];
    m.read(DATA.start, &mut data).unwrap();
    let ok = data
        .iter()
        .enumerate()
        .all(|(i, &b)| b == pattern(i as u64));
    let reply: Vec<u8> = (REPLY.start..REPLY.end).map(|i| !pattern(i)).collect();
    m.write(REPLY.start, &reply).unwrap();
    m.atomic_u64(SEM).unwrap().fetch_add(1, Ordering::Release);
    (&sock).write_all(if ok { b"ok" } else { b"no" }).unwrap();
}

// ---- the parent ----

#[test]
fn parent_and_child_share_memory() {
    if CHILD.is_set() {
        return;
    }
    let path = std::env::temp_dir().join(format!(
        "commhal-host-emu-xproc-{}.sock",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();

    let t = HostEmu::new();
    let mem: ShmRegion = MemoryMapped::alloc(&t, Device::HOST, LEN).unwrap();
    let data: Vec<u8> = (0..DATA.end - DATA.start).map(pattern).collect();
    mem.write(DATA.start, &data).unwrap();

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(CHILD.env, &path)
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();

    let deadline = Instant::now() + BOUND;
    let sock = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                if let Some(status) = child.try_wait().unwrap() {
                    panic!("child exited before connecting: {status}");
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => {
                let _ = child.kill();
                panic!("child never connected: {e}");
            }
        }
    };
    let _ = std::fs::remove_file(&path);
    sock.set_nonblocking(false).unwrap();
    sock.set_read_timeout(Some(BOUND)).unwrap();
    send_export(&sock, &MemoryMapped::export(&t, &mem).unwrap()).unwrap();

    // Wait for the child's release, then its reply must be visible (acquire).
    let sem = mem.atomic_u64(SEM).unwrap();
    while sem.load(Ordering::Acquire) == 0 {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("child never signalled");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut reply = vec![0u8; (REPLY.end - REPLY.start) as usize];
    mem.read(REPLY.start, &mut reply).unwrap();
    for (k, &b) in reply.iter().enumerate() {
        assert_eq!(b, !pattern(REPLY.start + k as u64), "reply byte {k}");
    }
    let mut verdict = [0u8; 2];
    (&sock).read_exact(&mut verdict).unwrap();
    assert_eq!(&verdict, b"ok", "child saw a wrong pattern");
    let status = child.wait().unwrap();
    assert!(status.success(), "child failed: {status}");
}

/// A peer that hands over a memfd of the wrong size (or unsealed) is refused.
#[test]
fn mapping_a_lying_fd_fails() {
    let t = HostEmu::new();
    let mem = MemoryMapped::alloc(&t, Device::HOST, 8192).unwrap();
    let mut e = MemoryMapped::export(&t, &mem).unwrap();
    // Swap in an unrelated, smaller, unsealed memfd.
    let small =
        nix::sys::memfd::memfd_create("lie", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).unwrap();
    nix::unistd::ftruncate(&small, 4096).unwrap();
    e.fds = vec![small];
    let err = MemoryMapped::map(&t, e).unwrap_err().to_string();
    assert!(err.contains("host-emu export rejected"), "{err}");
}

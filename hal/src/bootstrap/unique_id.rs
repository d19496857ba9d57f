//! [`UniqueId`]: the root's address plus a random 128-bit secret. Every rank of a job
//! gets the same id (NCCL's `ncclUniqueId`); a connection that does not present the
//! secret is refused.
//!
//! Text form (for `COMMHAL_UNIQUE_ID`): `commhal1-<32 hex digits>@<ip>:<port>`, IPv6 as
//! `[addr]:port`. Byte form: [`UniqueId::BYTES`] bytes, see [`UniqueId::to_bytes`].
//! Treat both as a password: whoever holds the id can join the job. `Debug` hides the
//! secret; `Display` does not (it must travel).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::str::FromStr;
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::error::{HalError, Result};

const TEXT_PREFIX: &str = "commhal1-";
const BYTES_VERSION: u8 = 1;

/// Where the root listens and the job secret.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct UniqueId {
    addr: SocketAddr,
    secret: [u8; 16],
}

/// Listeners bound by [`UniqueId::bind`], waiting for this process's rank-0
/// [`crate::bootstrap::TcpBootstrap`], keyed by secret.
static PREBOUND: Mutex<Vec<([u8; 16], TcpListener)>> = Mutex::new(Vec::new());

impl UniqueId {
    /// Length of [`UniqueId::to_bytes`].
    pub const BYTES: usize = 36;

    /// An id for a root that will listen on `addr`, with a fresh random secret.
    /// `addr`'s port must be free on the root's host when rank 0 starts.
    pub fn new(addr: SocketAddr) -> Result<UniqueId> {
        Ok(UniqueId {
            addr,
            secret: random_secret()?,
        })
    }

    /// An id with a caller-chosen secret (e.g. derived from the launcher's
    /// environment; see [`crate::bootstrap::env`]).
    pub fn with_secret(addr: SocketAddr, secret: [u8; 16]) -> UniqueId {
        UniqueId { addr, secret }
    }

    /// An id for a job on this machine only: loopback address, a port that was free a
    /// moment ago (probed and released; another process could take it before rank 0
    /// binds it, in which case rank 0 fails with "address in use"). For launchers
    /// that do not run rank 0 themselves.
    pub fn new_local() -> Result<UniqueId> {
        let probe = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| HalError::io("probing a free loopback port for the bootstrap root", e))?;
        let addr = probe
            .local_addr()
            .map_err(|e| HalError::io("reading the probed port", e))?;
        UniqueId::new(addr)
    }

    /// Bind the root's listener now, on `ip` with a free port, and return its id. Call
    /// this in the process that will be rank 0: its [`crate::bootstrap::TcpBootstrap`]
    /// uses the bound listener, so the port cannot be lost to a race. (Pass the id to
    /// the other ranks as a string or bytes.)
    pub fn bind(ip: IpAddr) -> Result<UniqueId> {
        let listener = TcpListener::bind((ip, 0))
            .map_err(|e| HalError::io(format!("binding the bootstrap root listener on {ip}"), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| HalError::io("reading the root listener's address", e))?;
        let id = UniqueId::new(addr)?;
        lock_prebound().push((id.secret, listener));
        Ok(id)
    }

    /// The root's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The job secret.
    pub fn secret(&self) -> &[u8; 16] {
        &self.secret
    }

    /// Fixed-size byte form: version (1), address family (4 or 6), IP (16 bytes, IPv4
    /// in the first 4), port (big-endian), secret (16).
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[0] = BYTES_VERSION;
        match self.addr.ip() {
            IpAddr::V4(ip) => {
                b[1] = 4;
                b[2..6].copy_from_slice(&ip.octets());
            }
            IpAddr::V6(ip) => {
                b[1] = 6;
                b[2..18].copy_from_slice(&ip.octets());
            }
        }
        b[18..20].copy_from_slice(&self.addr.port().to_be_bytes());
        b[20..36].copy_from_slice(&self.secret);
        b
    }

    /// Parse [`UniqueId::to_bytes`].
    pub fn from_bytes(b: &[u8]) -> Result<UniqueId> {
        if b.len() != Self::BYTES {
            return Err(HalError::invalid(format!(
                "a unique id is {} bytes, got {}",
                Self::BYTES,
                b.len()
            )));
        }
        if b[0] != BYTES_VERSION {
            return Err(HalError::invalid(format!(
                "unique id version {} is not supported (expected {BYTES_VERSION})",
                b[0]
            )));
        }
        let ip = match b[1] {
            4 => IpAddr::V4(Ipv4Addr::new(b[2], b[3], b[4], b[5])),
            6 => {
                let mut o = [0u8; 16];
                o.copy_from_slice(&b[2..18]);
                IpAddr::V6(Ipv6Addr::from(o))
            }
            f => {
                return Err(HalError::invalid(format!(
                    "unique id has unknown address family {f}"
                )));
            }
        };
        let port = u16::from_be_bytes([b[18], b[19]]);
        let mut secret = [0u8; 16];
        secret.copy_from_slice(&b[20..36]);
        Ok(UniqueId {
            addr: SocketAddr::new(ip, port),
            secret,
        })
    }

    /// Hex of the secret (what travels in hellos).
    pub(crate) fn secret_hex(&self) -> String {
        hex(&self.secret)
    }

    /// The listener [`UniqueId::bind`] left for this id, if any.
    pub(crate) fn take_prebound(&self) -> Option<TcpListener> {
        let mut v = lock_prebound();
        let at = v.iter().position(|(s, _)| *s == self.secret)?;
        Some(v.swap_remove(at).1)
    }
}

fn lock_prebound() -> std::sync::MutexGuard<'static, Vec<([u8; 16], TcpListener)>> {
    // A panic while holding this lock cannot leave the Vec inconsistent.
    PREBOUND.lock().unwrap_or_else(|p| p.into_inner())
}

impl fmt::Display for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{TEXT_PREFIX}{}@{}", hex(&self.secret), self.addr)
    }
}

impl fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UniqueId")
            .field("addr", &self.addr)
            .field("secret", &"<hidden>")
            .finish()
    }
}

impl FromStr for UniqueId {
    type Err = HalError;

    fn from_str(s: &str) -> Result<UniqueId> {
        let bad = |why: &str| {
            HalError::invalid(format!(
                "`{}` is not a commhal unique id ({why}); expected `{TEXT_PREFIX}<32 hex digits>@<ip>:<port>` as printed by UniqueId's Display",
                redact(s)
            ))
        };
        let rest = s
            .trim()
            .strip_prefix(TEXT_PREFIX)
            .ok_or_else(|| bad("missing prefix"))?;
        let (secret, addr) = rest.split_once('@').ok_or_else(|| bad("missing `@`"))?;
        let secret = parse_secret_hex(secret).ok_or_else(|| bad("secret is not 32 hex digits"))?;
        let addr = addr
            .parse::<SocketAddr>()
            .map_err(|_| bad("address is not ip:port"))?;
        Ok(UniqueId { addr, secret })
    }
}

/// Keep error messages from echoing a secret.
fn redact(s: &str) -> String {
    match s.split_once('@') {
        Some((_, addr)) => format!("{TEXT_PREFIX}<secret>@{addr}"),
        None if s.chars().count() > 12 => format!("{}...", s.chars().take(12).collect::<String>()),
        None => s.to_string(),
    }
}

/// 16 random bytes from the OS.
pub(crate) fn random_secret() -> Result<[u8; 16]> {
    let mut s = [0u8; 16];
    getrandom::fill(&mut s).map_err(|e| {
        HalError::Bootstrap(format!(
            "the OS random source failed ({e}); cannot make a job secret"
        ))
    })?;
    Ok(s)
}

/// Parse exactly 32 hex digits.
pub(crate) fn parse_secret_hex(s: &str) -> Option<[u8; 16]> {
    let s = s.as_bytes();
    if s.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, pair) in s.chunks(2).enumerate() {
        let hi = (pair[0] as char).to_digit(16)?;
        let lo = (pair[1] as char).to_digit(16)?;
        out[i] = (hi * 16 + lo) as u8;
    }
    Some(out)
}

/// Lower-case hex.
pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// SHA-256 over length-prefixed parts (so part boundaries cannot be shifted).
pub(crate) fn digest(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    h.finalize().into()
}

/// Compare secrets without an early exit.
pub(crate) fn secrets_equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trip_v4_and_v6() {
        for addr in ["10.1.2.3:29500", "[::1]:4000", "[fe80::1:2]:1"] {
            let id = UniqueId::new(addr.parse().unwrap()).unwrap();
            let s = id.to_string();
            assert!(s.starts_with("commhal1-"), "{s}");
            assert_eq!(s.parse::<UniqueId>().unwrap(), id);
        }
    }

    #[test]
    fn bytes_round_trip() {
        for addr in ["127.0.0.1:5", "[2001:db8::7]:65535"] {
            let id = UniqueId::new(addr.parse().unwrap()).unwrap();
            let b = id.to_bytes();
            assert_eq!(UniqueId::from_bytes(&b).unwrap(), id);
        }
        assert!(UniqueId::from_bytes(&[1u8; 10]).is_err());
        let mut b = UniqueId::new_local().unwrap().to_bytes();
        b[1] = 5;
        assert!(UniqueId::from_bytes(&b).is_err());
        b[0] = 9;
        assert!(UniqueId::from_bytes(&b).is_err());
    }

    #[test]
    fn secrets_are_random() {
        let a = UniqueId::new_local().unwrap();
        let b = UniqueId::new_local().unwrap();
        assert_ne!(a.secret(), b.secret());
    }

    #[test]
    fn debug_hides_secret_and_errors_do_not_echo_it() {
        let id = UniqueId::new("1.2.3.4:5".parse().unwrap()).unwrap();
        assert!(!format!("{id:?}").contains(&id.secret_hex()));
        let broken = id.to_string().replace('@', "@@");
        let e = broken.parse::<UniqueId>().unwrap_err().to_string();
        assert!(!e.contains(&id.secret_hex()), "{e}");
    }

    #[test]
    fn rejects_malformed_text() {
        for s in [
            "",
            "commhal1-",
            "commhal1-00@1.2.3.4:5",
            "commhal1-zz000000000000000000000000000000@1.2.3.4:5",
            "commhal1-00000000000000000000000000000000@nohost",
            "nccl-00000000000000000000000000000000@1.2.3.4:5",
        ] {
            assert!(s.parse::<UniqueId>().is_err(), "{s}");
        }
    }

    #[test]
    fn bind_leaves_a_listener_for_rank_0() {
        let id = UniqueId::bind(Ipv4Addr::LOCALHOST.into()).unwrap();
        assert_ne!(id.addr().port(), 0);
        let l = id.take_prebound().expect("prebound listener");
        assert_eq!(l.local_addr().unwrap(), id.addr());
        assert!(id.take_prebound().is_none());
    }

    #[test]
    fn compare() {
        assert!(secrets_equal(b"abc", b"abc"));
        assert!(!secrets_equal(b"abc", b"abd"));
        assert!(!secrets_equal(b"abc", b"ab"));
    }
}

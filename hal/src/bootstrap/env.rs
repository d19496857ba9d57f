//! Where a rank learns its place from the launcher's environment.
//!
//! Rank and world size, first match wins:
//!
//! | launcher          | rank                   | world size             | local rank                   |
//! |-------------------|------------------------|------------------------|------------------------------|
//! | `commhal launch`  | `COMMHAL_RANK`         | `COMMHAL_WORLD_SIZE`   | `COMMHAL_LOCAL_RANK`         |
//! | torchrun          | `RANK`                 | `WORLD_SIZE`           | `LOCAL_RANK`                 |
//! | Open MPI `mpirun` | `OMPI_COMM_WORLD_RANK` | `OMPI_COMM_WORLD_SIZE` | `OMPI_COMM_WORLD_LOCAL_RANK` |
//! | Slurm `srun`      | `SLURM_PROCID`         | `SLURM_NTASKS`         | `SLURM_LOCALID`              |
//!
//! Rendezvous (independent of the launcher, so an `srun` job may set `MASTER_ADDR`):
//!
//! * `COMMHAL_UNIQUE_ID` (the text form of a [`UniqueId`]): the root address and a
//!   random secret. **Preferred**: only holders of the id can join.
//! * else `MASTER_ADDR` + `MASTER_PORT`. The root listens on `MASTER_PORT + 1`
//!   (`MASTER_PORT` itself is taken by PyTorch's TCPStore under torchrun); set
//!   `COMMHAL_MASTER_PORT` to choose the port. The secret is `COMMHAL_SECRET` (32 hex
//!   digits, e.g. `openssl rand -hex 16`, given to every rank) if set; otherwise it is
//!   **derived** by hashing `MASTER_ADDR`, `MASTER_PORT`, the world size and the job
//!   ids the launcher exports (`TORCHELASTIC_RUN_ID`, `SLURM_JOB_ID`,
//!   `SLURM_STEP_ID`, `PMIX_NAMESPACE`, `OMPI_MCA_ess_base_jobid`).
//!
//! Trade-off of the derived secret: it needs no extra plumbing, and it keeps two jobs
//! (or a rerun on the same port) from joining each other by accident. It is **not**
//! protection against a hostile user: everything it is derived from is visible to
//! others on the cluster (job listings, `/proc`), so anyone who can reach the port can
//! compute it. Use `COMMHAL_UNIQUE_ID` or `COMMHAL_SECRET` where that matters.
//!
//! The bootstrap timeout is `COMMHAL_BOOTSTRAP_TIMEOUT_MS` (default 60 s).

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use crate::bootstrap::unique_id::{UniqueId, digest, parse_secret_hex};
use crate::error::{HalError, Result};
use crate::settings::launch::{
    BOOTSTRAP_TIMEOUT_MS, LOCAL_RANK, MASTER_PORT, RANK, SECRET, UNIQUE_ID, WORLD_SIZE,
};
use crate::settings::{self, Env};
use crate::topology::Rank;

/// Job identifiers mixed into a derived secret.
const JOB_ID_VARS: [&str; 5] = [
    "TORCHELASTIC_RUN_ID",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "PMIX_NAMESPACE",
    "OMPI_MCA_ess_base_jobid",
];

/// Every variable [`LaunchEnv::detect`] reads.
pub const VARS: [&str; 23] = [
    RANK.env,
    WORLD_SIZE.env,
    LOCAL_RANK.env,
    UNIQUE_ID.env,
    SECRET.env,
    MASTER_PORT.env,
    BOOTSTRAP_TIMEOUT_MS.env,
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    JOB_ID_VARS[0],
    JOB_ID_VARS[1],
    JOB_ID_VARS[2],
    JOB_ID_VARS[3],
    JOB_ID_VARS[4],
];

/// Which launcher's variables gave the rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// `COMMHAL_RANK` / `COMMHAL_WORLD_SIZE` (`commhal launch`, or set by hand).
    Commhal,
    /// `RANK` / `WORLD_SIZE` (torchrun, `torch.distributed.launch`).
    Torchrun,
    /// `OMPI_COMM_WORLD_*` (Open MPI's mpirun).
    OpenMpi,
    /// `SLURM_PROCID` / `SLURM_NTASKS` (srun).
    Slurm,
}

/// How the ranks find the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rendezvous {
    /// `COMMHAL_UNIQUE_ID`.
    UniqueId(UniqueId),
    /// `MASTER_ADDR` and the commhal port derived from `MASTER_PORT`.
    Master {
        /// `MASTER_ADDR` (host name or IP).
        host: String,
        /// Port the root listens on (`COMMHAL_MASTER_PORT`, else `MASTER_PORT + 1`).
        port: u16,
        /// The job secret.
        secret: [u8; 16],
        /// True when the secret was derived rather than given (`COMMHAL_SECRET`);
        /// see the module docs for what that means.
        derived_secret: bool,
    },
}

/// What the launcher told this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchEnv {
    /// This process's rank.
    pub rank: Rank,
    /// Number of ranks.
    pub world_size: u32,
    /// Rank among the ranks on this host, when the launcher says.
    pub local_rank: Option<u32>,
    /// Whose variables gave the rank.
    pub launcher: Launcher,
    /// How to find the root, if the environment says.
    pub rendezvous: Option<Rendezvous>,
    /// Bound on every bootstrap step (`COMMHAL_BOOTSTRAP_TIMEOUT_MS`).
    pub timeout: Duration,
}

impl LaunchEnv {
    /// Read the process environment. `Ok(None)`: no launcher variables at all.
    pub fn detect() -> Result<Option<LaunchEnv>> {
        Self::from_vars(settings::process_env)
    }

    /// Like [`LaunchEnv::detect`], from an explicit map (for tests and launchers).
    pub fn from_map(vars: &HashMap<String, String>) -> Result<Option<LaunchEnv>> {
        Self::from_vars(|k| vars.get(k).cloned())
    }

    /// Like [`LaunchEnv::detect`], with `get` answering for each variable name.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Option<LaunchEnv>> {
        let get = |k: &str| {
            get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let sources = [
            (Launcher::Commhal, RANK.env, WORLD_SIZE.env, LOCAL_RANK.env),
            (Launcher::Torchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK"),
            (
                Launcher::OpenMpi,
                "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE",
                "OMPI_COMM_WORLD_LOCAL_RANK",
            ),
            (
                Launcher::Slurm,
                "SLURM_PROCID",
                "SLURM_NTASKS",
                "SLURM_LOCALID",
            ),
        ];
        let mut found = None;
        for (launcher, rank_var, size_var, local_var) in sources {
            match (get(rank_var), get(size_var)) {
                (None, None) => continue,
                (Some(_), None) => {
                    return Err(HalError::Config(format!(
                        "{rank_var} is set but {size_var} is not: set both (or neither)"
                    )));
                }
                (None, Some(_)) => {
                    return Err(HalError::Config(format!(
                        "{size_var} is set but {rank_var} is not: set both (or neither)"
                    )));
                }
                (Some(r), Some(s)) => {
                    let rank = parse_u32(rank_var, &r)?;
                    let world_size = parse_u32(size_var, &s)?;
                    if world_size == 0 || rank >= world_size {
                        return Err(HalError::Config(format!(
                            "{rank_var}={rank} with {size_var}={world_size}: need 0 <= rank < world size"
                        )));
                    }
                    let local_rank = get(local_var)
                        .map(|v| parse_u32(local_var, &v))
                        .transpose()?;
                    found = Some((launcher, rank, world_size, local_rank));
                    break;
                }
            }
        }
        let Some((launcher, rank, world_size, local_rank)) = found else {
            return Ok(None);
        };
        let timeout = crate::bootstrap::timeout_in(&get)?;
        let rendezvous = rendezvous(&get, world_size)?;
        Ok(Some(LaunchEnv {
            rank,
            world_size,
            local_rank,
            launcher,
            rendezvous,
            timeout,
        }))
    }

    /// The unique id to bootstrap with (resolving `MASTER_ADDR` if that is the
    /// rendezvous).
    pub fn unique_id(&self) -> Result<UniqueId> {
        match &self.rendezvous {
            Some(Rendezvous::UniqueId(id)) => Ok(id.clone()),
            Some(Rendezvous::Master {
                host,
                port,
                secret,
                derived_secret,
            }) => {
                if *derived_secret {
                    static WARNED: std::sync::Once = std::sync::Once::new();
                    WARNED.call_once(|| {
                        tracing::warn!(
                            "the job secret is derived from the launcher's variables (MASTER_ADDR, MASTER_PORT, world size, job ids): anyone who can read them can join this job; set {} to the same 32 hex digits on every rank (e.g. from `openssl rand -hex 16`) or use {}",
                            SECRET.env,
                            UNIQUE_ID.env
                        )
                    });
                }
                let addr = resolve(host, *port)?;
                Ok(UniqueId::with_secret(addr, *secret))
            }
            None => Err(HalError::Config(format!(
                "no rendezvous in the environment: set {} (preferred) or MASTER_ADDR and MASTER_PORT",
                UNIQUE_ID.env
            ))),
        }
    }
}

/// `var`'s value `v` as a rank or a count: commhal's variables as their declarations
/// say, the other launchers' as any `u32`.
fn parse_u32(var: &str, v: &str) -> Result<u32> {
    match settings::find(var) {
        // in range: the declarations' maximum is u32::MAX
        Some(s) => Ok(s.parse_number(v)? as u32),
        None => v
            .parse::<u32>()
            .map_err(|_| HalError::Config(format!("{var}={v:?} is not a non-negative integer"))),
    }
}

fn rendezvous(get: Env<'_>, world_size: u32) -> Result<Option<Rendezvous>> {
    if let Some(id) = UNIQUE_ID.raw_in(get) {
        let id = id
            .parse::<UniqueId>()
            .map_err(|e| HalError::Config(format!("{}: {e}", UNIQUE_ID.env)))?;
        return Ok(Some(Rendezvous::UniqueId(id)));
    }
    let (host, master_port) = match (get("MASTER_ADDR"), get("MASTER_PORT")) {
        (None, None) => return Ok(None),
        (Some(h), Some(p)) => (h, p),
        (Some(_), None) => {
            return Err(HalError::Config(
                "MASTER_ADDR is set but MASTER_PORT is not".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(HalError::Config(
                "MASTER_PORT is set but MASTER_ADDR is not".into(),
            ));
        }
    };
    let mp = master_port.parse::<u16>().map_err(|_| {
        HalError::Config(format!("MASTER_PORT={master_port:?} is not a port number"))
    })?;
    let port = match MASTER_PORT.number_in(get)? {
        // in range: the declaration's is 1..=65535
        Some(p) => p as u16,
        None => mp.checked_add(1).ok_or_else(|| {
            HalError::Config(format!(
                "MASTER_PORT={mp}: commhal listens on MASTER_PORT + 1, which overflows; set {}",
                MASTER_PORT.env
            ))
        })?,
    };
    let (secret, derived_secret) = match SECRET.raw_in(get) {
        // the message leaves the value out: it is a secret
        Some(s) => (
            parse_secret_hex(&s).ok_or_else(|| {
                HalError::Config(format!(
                    "{} must be 32 hex digits (e.g. from `openssl rand -hex 16`); got {} characters",
                    SECRET.env,
                    s.len()
                ))
            })?,
            false,
        ),
        None => (derive_secret(get, &host, mp, port, world_size), true),
    };
    Ok(Some(Rendezvous::Master {
        host,
        port,
        secret,
        derived_secret,
    }))
}

/// The weak, derived secret (see the module docs).
fn derive_secret(get: Env<'_>, host: &str, master_port: u16, port: u16, size: u32) -> [u8; 16] {
    let mut parts: Vec<Vec<u8>> = vec![
        b"commhal derived secret v1".to_vec(),
        host.as_bytes().to_vec(),
        master_port.to_le_bytes().to_vec(),
        port.to_le_bytes().to_vec(),
        size.to_le_bytes().to_vec(),
    ];
    for var in JOB_ID_VARS {
        parts.push(format!("{var}={}", get(var).unwrap_or_default()).into_bytes());
    }
    let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
    let d = digest(&refs);
    let mut s = [0u8; 16];
    s.copy_from_slice(&d[..16]);
    s
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| HalError::io(format!("resolving MASTER_ADDR={host}"), e))?
        .collect();
    // Prefer IPv4: that is what launchers usually mean.
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| HalError::Config(format!("MASTER_ADDR={host} resolves to no address")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Result<Option<LaunchEnv>> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        LaunchEnv::from_map(&m)
    }

    #[test]
    fn nothing_set_is_none() {
        assert_eq!(env(&[]).unwrap(), None);
        assert_eq!(
            env(&[("MASTER_ADDR", "x"), ("MASTER_PORT", "1")]).unwrap(),
            None
        );
    }

    #[test]
    fn commhal_vars_with_unique_id() {
        let id = UniqueId::new("10.0.0.1:4000".parse().unwrap()).unwrap();
        let s = id.to_string();
        let e = env(&[
            (RANK.env, "2"),
            (WORLD_SIZE.env, "4"),
            (LOCAL_RANK.env, "0"),
            (UNIQUE_ID.env, &s),
            (BOOTSTRAP_TIMEOUT_MS.env, "1500"),
            // torchrun variables too, as `commhal launch` sets both: commhal wins.
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("MASTER_ADDR", "10.9.9.9"),
            ("MASTER_PORT", "1"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((e.rank, e.world_size, e.local_rank), (2, 4, Some(0)));
        assert_eq!(e.launcher, Launcher::Commhal);
        assert_eq!(e.timeout, Duration::from_millis(1500));
        assert_eq!(e.rendezvous, Some(Rendezvous::UniqueId(id.clone())));
        assert_eq!(e.unique_id().unwrap(), id);
    }

    #[test]
    fn torchrun_master_addr_port_plus_one_and_derived_secret() {
        let vars = [
            ("RANK", "1"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_RUN_ID", "job-a"),
        ];
        let e = env(&vars).unwrap().unwrap();
        assert_eq!(e.launcher, Launcher::Torchrun);
        assert_eq!((e.rank, e.world_size, e.local_rank), (1, 8, Some(1)));
        assert_eq!(e.timeout, crate::bootstrap::default_timeout());
        let Some(Rendezvous::Master {
            host,
            port,
            secret,
            derived_secret,
        }) = e.rendezvous.clone()
        else {
            panic!("expected MASTER_ADDR rendezvous, got {:?}", e.rendezvous)
        };
        assert_eq!(
            (host.as_str(), port, derived_secret),
            ("127.0.0.1", 29501, true)
        );
        // Every rank of the job derives the same secret...
        let mut other = vars.to_vec();
        other[0] = ("RANK", "5");
        let e2 = env(&other).unwrap().unwrap();
        let Some(Rendezvous::Master { secret: s2, .. }) = e2.rendezvous else {
            panic!()
        };
        assert_eq!(secret, s2);
        // ...and another job on the same address does not.
        other[5] = ("TORCHELASTIC_RUN_ID", "job-b");
        let Some(Rendezvous::Master { secret: s3, .. }) = env(&other).unwrap().unwrap().rendezvous
        else {
            panic!()
        };
        assert_ne!(secret, s3);
        assert_eq!(
            e.unique_id().unwrap().addr(),
            "127.0.0.1:29501".parse().unwrap()
        );
    }

    #[test]
    fn explicit_secret_and_port() {
        let e = env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "localhost"),
            ("MASTER_PORT", "29500"),
            (MASTER_PORT.env, "31000"),
            (SECRET.env, "000102030405060708090a0b0c0d0e0f"),
        ])
        .unwrap()
        .unwrap();
        let Some(Rendezvous::Master {
            port,
            secret,
            derived_secret,
            ..
        }) = e.rendezvous.clone()
        else {
            panic!()
        };
        assert_eq!(port, 31000);
        assert!(!derived_secret);
        assert_eq!(secret[15], 0x0f);
        let id = e.unique_id().unwrap();
        assert_eq!(id.addr().port(), 31000);
        assert!(id.addr().ip().is_loopback());
    }

    #[test]
    fn open_mpi_and_slurm() {
        let e = env(&[
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "4"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (e.launcher, e.rank, e.local_rank, e.rendezvous.clone()),
            (Launcher::OpenMpi, 3, Some(1), None)
        );
        assert!(
            e.unique_id()
                .unwrap_err()
                .to_string()
                .contains(UNIQUE_ID.env)
        );
        let e = env(&[
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "6"),
            ("SLURM_LOCALID", "1"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (e.launcher, e.rank, e.world_size, e.local_rank),
            (Launcher::Slurm, 5, 6, Some(1))
        );
    }

    #[test]
    fn bad_values_are_config_errors() {
        let cases: &[&[(&str, &str)]] = &[
            &[("RANK", "1")],
            &[("WORLD_SIZE", "1")],
            &[("RANK", "x"), ("WORLD_SIZE", "2")],
            &[("RANK", "2"), ("WORLD_SIZE", "2")],
            &[("RANK", "0"), ("WORLD_SIZE", "0")],
            &[("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "-1")],
            &[("RANK", "0"), ("WORLD_SIZE", "2"), (UNIQUE_ID.env, "nope")],
            &[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "h")],
            &[
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "h"),
                ("MASTER_PORT", "99999"),
            ],
            &[
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "h"),
                ("MASTER_PORT", "65535"),
            ],
            &[
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "h"),
                ("MASTER_PORT", "1"),
                (SECRET.env, "short"),
            ],
            &[
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                (BOOTSTRAP_TIMEOUT_MS.env, "0"),
            ],
            &[
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                (BOOTSTRAP_TIMEOUT_MS.env, "soon"),
            ],
        ];
        for c in cases {
            match env(c) {
                Err(HalError::Config(msg)) => assert!(!msg.is_empty()),
                other => panic!("{c:?}: expected a configuration error, got {other:?}"),
            }
        }
    }

    /// A `COMMHAL_*` value outside its declaration is refused with the declaration's
    /// message: the variable, the value and the range.
    #[test]
    fn commhal_values_outside_their_declaration_are_refused_by_name() {
        let cases = [
            (RANK.env, "-1"),
            (WORLD_SIZE.env, "0"),
            (LOCAL_RANK.env, "one"),
            (BOOTSTRAP_TIMEOUT_MS.env, "90000000"),
            (MASTER_PORT.env, "0"),
            (MASTER_PORT.env, "65536"),
        ];
        for (var, value) in cases {
            let mut vars = vec![
                (RANK.env, "0"),
                (WORLD_SIZE.env, "2"),
                ("MASTER_ADDR", "h"),
                ("MASTER_PORT", "1"),
            ];
            vars.retain(|(k, _)| *k != var);
            vars.push((var, value));
            let e = env(&vars).unwrap_err().to_string();
            assert!(
                e.contains(var)
                    && e.contains(&format!("{value:?}"))
                    && e.contains("expected a whole number in"),
                "{var}={value}: {e}"
            );
        }
    }

    #[test]
    fn secret_error_does_not_echo_the_value() {
        let e = env(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "1"),
            (SECRET.env, "hunter2-hunter2"),
        ])
        .unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }
}

//! Finding a device, port and GID, and describing why none is usable.
//!
//! * **Device**: the one named by the `device` option / `COMMHAL_IBVERBS_DEVICE`, else
//!   the first device (library order) with an active port.
//! * **Port**: the `port` option / `COMMHAL_IBVERBS_PORT`, else the first active one.
//! * **Addressing**: InfiniBand ports are addressed by LID (a LID of 0 means no subnet
//!   manager configured the port); RoCE (Ethernet) ports by GID through the GRH. The
//!   GID index is the `gid_index` option / `COMMHAL_IBVERBS_GID_INDEX`, else on RoCE
//!   the first index sysfs types as `RoCE v2` (`/sys/class/infiniband/<dev>/ports/
//!   <port>/gid_attrs/types/<i>`) and, where sysfs has no entry, the first non-zero
//!   IPv4-mapped GID (what RoCE v2 over IPv4 uses), else the first non-zero GID.

use std::sync::Arc;

use commhal_hal::settings::Setting;
use commhal_hal::settings::ibverbs::{DEVICE, GID_INDEX, LIB, PORT};
use commhal_hal::{HalError, Result};

use crate::BACKEND;
use crate::sys::abi::{IBV_LINK_LAYER_ETHERNET, IBV_LINK_LAYER_INFINIBAND, IBV_PORT_ACTIVE};
use crate::sys::{Context, DeviceAttr, LoadError, PortAttr, Verbs};

/// The link a port runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// InfiniBand: LID addressing.
    InfiniBand,
    /// RoCE: GID addressing over Ethernet.
    Roce,
}

/// What the choice was, for connecting and for `commhal info`.
#[derive(Debug)]
pub struct Chosen {
    /// The open device.
    pub ctx: Arc<Context>,
    /// Device attributes.
    pub attr: DeviceAttr,
    /// Port number.
    pub port: u8,
    /// Port attributes.
    pub port_attr: PortAttr,
    /// The link.
    pub link: Link,
    /// GID index used as the source GID.
    pub gid_index: u8,
    /// That GID.
    pub gid: [u8; 16],
}

/// What the user asked for (`None`: choose).
#[derive(Debug, Clone, Default)]
pub struct Wanted {
    /// Device name.
    pub device: Option<String>,
    /// Port number.
    pub port: Option<u8>,
    /// GID index.
    pub gid_index: Option<u8>,
}

impl Wanted {
    /// Fill unset fields from the environment.
    pub fn with_env(mut self) -> Result<Wanted> {
        if self.device.is_none() {
            self.device = DEVICE.text();
        }
        if self.port.is_none() {
            self.port = env_u8(&PORT)?;
        }
        if self.gid_index.is_none() {
            self.gid_index = env_u8(&GID_INDEX)?;
        }
        Ok(self)
    }
}

fn env_u8(s: &Setting) -> Result<Option<u8>> {
    // in range: the declarations' maximum is 255
    Ok(s.number()?.map(|v| v as u8))
}

/// Load the library or say why not, in the words `commhal info` prints.
pub fn load(path: &str) -> std::result::Result<&'static Verbs, String> {
    Verbs::load(path).map_err(|e| match e {
        LoadError::NotFound(msg) if path == crate::sys::DEFAULT_LIB => format!(
            "libibverbs.so.1 not found ({msg}): install rdma-core (libibverbs1) or set {}",
            LIB.env
        ),
        LoadError::NotFound(msg) => format!(
            "libibverbs not found at {path} ({msg}): check {} / the `library` option",
            LIB.env
        ),
        LoadError::MissingSymbol(s) => format!(
            "{path} lacks {s}: it is not a usable libibverbs (rdma-core 17 or newer exports every entry point used)"
        ),
    })
}

fn unavailable(reason: String) -> HalError {
    HalError::Unavailable {
        backend: BACKEND.into(),
        reason,
    }
}

/// Open the wanted (or first usable) device and pick port and GID.
pub fn choose(verbs: &'static Verbs, want: &Wanted) -> Result<Chosen> {
    let names = verbs.device_names().map_err(|errno| {
        unavailable(format!(
            "ibv_get_device_list failed (errno {errno}): is the kernel's RDMA stack (ib_uverbs) loaded?"
        ))
    })?;
    if names.is_empty() {
        return Err(unavailable(
            "no RDMA device (libibverbs found 0 devices): check `ibv_devices` and that the NIC's kernel driver is loaded".into(),
        ));
    }
    let candidates: Vec<&String> = match &want.device {
        Some(d) => match names.iter().find(|n| *n == d) {
            Some(n) => vec![n],
            None => {
                return Err(HalError::Config(format!(
                    "RDMA device `{d}` (from the `device` option or {}) does not exist; libibverbs lists: {}",
                    DEVICE.env,
                    names.join(", ")
                )));
            }
        },
        None => names.iter().collect(),
    };
    let mut why = Vec::new();
    for name in candidates {
        match try_device(verbs, name, want) {
            Ok(c) => return Ok(c),
            Err(e) => why.push(format!("{name}: {e}")),
        }
    }
    Err(unavailable(format!(
        "no usable RDMA port (libibverbs found {} devices): {}",
        names.len(),
        why.join("; ")
    )))
}

fn try_device(
    verbs: &'static Verbs,
    name: &str,
    want: &Wanted,
) -> std::result::Result<Chosen, String> {
    let ctx = Arc::new(Context::open(verbs, name)?);
    let attr = ctx
        .query_device()
        .map_err(|e| format!("ibv_query_device failed (errno {e})"))?;
    let ports: Vec<u8> = match want.port {
        Some(p) => vec![p],
        None => (1..=attr.ports.max(1)).collect(),
    };
    let mut why = Vec::new();
    for port in ports {
        let pa = match ctx.query_port(port) {
            Ok(pa) => pa,
            Err(e) => {
                why.push(format!("port {port}: ibv_query_port failed (errno {e})"));
                continue;
            }
        };
        if pa.state != IBV_PORT_ACTIVE {
            why.push(format!(
                "port {port} is not active (state {}): check the cable / `ibstat`",
                pa.state
            ));
            continue;
        }
        let link = match pa.link_layer {
            IBV_LINK_LAYER_ETHERNET => Link::Roce,
            IBV_LINK_LAYER_INFINIBAND | 0 => Link::InfiniBand,
            other => {
                why.push(format!("port {port} has an unknown link layer {other}"));
                continue;
            }
        };
        if link == Link::InfiniBand && pa.lid == 0 {
            why.push(format!(
                "port {port} is InfiniBand with LID 0: is a subnet manager (opensm) running?"
            ));
            continue;
        }
        match pick_gid(&ctx, name, port, &pa, link, want.gid_index) {
            Ok((gid_index, gid)) => {
                return Ok(Chosen {
                    ctx,
                    attr,
                    port,
                    port_attr: pa,
                    link,
                    gid_index,
                    gid,
                });
            }
            Err(e) => why.push(format!("port {port}: {e}")),
        }
    }
    Err(why.join("; "))
}

fn is_v4_mapped(g: &[u8; 16]) -> bool {
    g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff
}

fn pick_gid(
    ctx: &Context,
    dev: &str,
    port: u8,
    pa: &PortAttr,
    link: Link,
    wanted: Option<u8>,
) -> std::result::Result<(u8, [u8; 16]), String> {
    let len = pa.gid_tbl_len.clamp(0, 256) as usize;
    if let Some(i) = wanted {
        let g = ctx.query_gid(port, i32::from(i)).map_err(|e| {
            format!(
                "ibv_query_gid(index {i}) failed (errno {e}): check {}",
                GID_INDEX.env
            )
        })?;
        if g == [0; 16] && link == Link::Roce {
            return Err(format!(
                "GID index {i} is empty: pick one listed by `show_gids` ({})",
                GID_INDEX.env
            ));
        }
        return Ok((i, g));
    }
    let gids: Vec<(u8, [u8; 16])> = (0..len.min(256))
        .filter_map(|i| Some((i as u8, ctx.query_gid(port, i as i32).ok()?)))
        .filter(|(_, g)| *g != [0; 16])
        .collect();
    if link == Link::InfiniBand {
        // LID addressing; the GID only matters across subnets.
        return Ok(gids.first().copied().unwrap_or((0, [0; 16])));
    }
    let typed = |i: u8| {
        std::fs::read_to_string(format!(
            "/sys/class/infiniband/{dev}/ports/{port}/gid_attrs/types/{i}"
        ))
        .ok()
        .map(|t| t.trim().eq_ignore_ascii_case("RoCE v2"))
    };
    if let Some(&(i, g)) = gids
        .iter()
        .find(|(i, g)| typed(*i) == Some(true) && is_v4_mapped(g))
    {
        return Ok((i, g));
    }
    if let Some(&(i, g)) = gids.iter().find(|(i, _)| typed(*i) == Some(true)) {
        return Ok((i, g));
    }
    if let Some(&(i, g)) = gids
        .iter()
        .find(|(i, g)| typed(*i).is_none() && is_v4_mapped(g))
    {
        return Ok((i, g));
    }
    gids.first().copied().ok_or_else(|| {
        "no non-zero GID on this RoCE port: configure an IP address on the netdev (RoCE GIDs follow its addresses)".to_string()
    })
}

//! Reach of the CUDA peer-memory backends (cuda-nvlink, cuda-dma): both endpoints
//! drive CUDA devices on the same host and virtual node, and the driver says the local
//! device can access the remote one (`cuDeviceCanAccessPeer`).
//!
//! Conservative rules:
//! * no driver here → no (we cannot ask);
//! * a remote ordinal this process cannot see → no;
//! * `CUDA_VISIBLE_DEVICES` set → the peer's ordinal may be numbered differently in its
//!   own process, so yes only if *every* pair of devices visible here has peer access.

use commhal_hal::{DeviceKind, Endpoint, Reach};

use crate::driver;

/// Decide reach for a CUDA peer-memory backend named `backend`; `cost` when joined
/// across processes, `cost / 2` in one process.
pub fn cuda_reach(backend: &str, local: &Endpoint, remote: &Endpoint, cost: u32) -> Reach {
    if let Some(no) = static_reach(backend, local, remote) {
        return no;
    }
    let (a, b) = (local.device.ordinal, remote.device.ordinal);
    let n = match driver::device_count(backend) {
        Ok(n) => n,
        Err(e) => return Reach::No(format!("cannot query CUDA devices: {e}")),
    };
    if a >= n || b >= n {
        return Reach::No(format!(
            "device ordinal {} is not visible in this process ({n} CUDA device(s)): check CUDA_VISIBLE_DEVICES",
            a.max(b)
        ));
    }
    let pairs: Vec<(u32, u32)> = if std::env::var_os("CUDA_VISIBLE_DEVICES").is_some() {
        (0..n)
            .flat_map(|i| (0..n).map(move |j| (i, j)))
            .filter(|(i, j)| i != j)
            .collect()
    } else {
        vec![(a, b)]
    };
    for (i, j) in pairs {
        match driver::can_access_peer(backend, i, j) {
            Ok(true) => {}
            Ok(false) => {
                return Reach::No(format!(
                    "cuDeviceCanAccessPeer({i}, {j}) = 0: no NVLink/P2P path between these GPUs (see `nvidia-smi topo -m`)"
                ));
            }
            Err(e) => return Reach::No(format!("cannot query peer access: {e}")),
        }
    }
    let cost = if local.same_process(remote) {
        (cost / 2).max(1)
    } else {
        cost
    };
    Reach::Yes { cost }
}

/// The checks that need no driver: `Some(Reach::No)` when they already fail.
pub fn static_reach(backend: &str, local: &Endpoint, remote: &Endpoint) -> Option<Reach> {
    if local.device.kind != DeviceKind::Cuda || remote.device.kind != DeviceKind::Cuda {
        return Some(Reach::No(format!(
            "{backend} joins CUDA devices only (ranks drive {:?} and {:?})",
            local.device.kind, remote.device.kind
        )));
    }
    if local.host != remote.host {
        return Some(Reach::No(format!(
            "ranks {} and {} are on different hosts: peer memory needs one machine (use a network transport)",
            local.rank, remote.rank
        )));
    }
    if local.node != remote.node {
        return Some(Reach::No(format!(
            "ranks {} and {} are on different virtual nodes ({} vs {}): use a cross-node transport",
            local.rank, remote.rank, local.node, remote.node
        )));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use commhal_hal::Device;

    fn ep(rank: u32, kind: DeviceKind, ordinal: u32) -> Endpoint {
        Endpoint::this_process(rank, Device { kind, ordinal })
    }

    #[test]
    fn static_rules() {
        let a = ep(0, DeviceKind::Cuda, 0);
        let h = ep(1, DeviceKind::Host, 0);
        assert!(
            matches!(static_reach("x", &a, &h), Some(Reach::No(m)) if m.contains("CUDA devices only"))
        );
        let mut far = ep(1, DeviceKind::Cuda, 1);
        far.host = "elsewhere".into();
        assert!(
            matches!(static_reach("x", &a, &far), Some(Reach::No(m)) if m.contains("different hosts"))
        );
        let mut other_node = ep(1, DeviceKind::Cuda, 1);
        other_node.node = 3;
        assert!(
            matches!(static_reach("x", &a, &other_node), Some(Reach::No(m)) if m.contains("virtual nodes"))
        );
        assert_eq!(static_reach("x", &a, &ep(1, DeviceKind::Cuda, 1)), None);
    }

    #[test]
    fn without_a_driver_reach_is_no_with_a_reason() {
        if commhal_cuda_rt::probe().is_available() {
            return; // covered by the GPU conformance run instead
        }
        let r = cuda_reach(
            "cuda-nvlink",
            &ep(0, DeviceKind::Cuda, 0),
            &ep(1, DeviceKind::Cuda, 1),
            20,
        );
        match r {
            Reach::No(m) => assert!(m.contains("CUDA"), "{m}"),
            Reach::Yes { .. } => panic!("no driver here, yet reach said yes"),
        }
    }
}

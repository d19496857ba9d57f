//! Finding NVRTC inside the application's process, so that preloading the library into
//! a PyTorch job needs no `LD_LIBRARY_PATH` for it: commhal's kernels are compiled by
//! NVRTC 13 at first use. When `libnvrtc.so.13` is not loadable by name, the directories
//! near what the process already mapped are tried — the `nvidia-cuda-nvrtc` wheel next to
//! PyTorch's libraries (`<site-packages>/nvidia/cu13/lib`, `.../cuda_nvrtc/lib`), a
//! directory that holds a mapped CUDA library — then the CUDA install.

use std::path::{Path, PathBuf};

/// Directories to look for `libnvrtc.so.13` in, in order, from `/proc/self/maps` text.
pub fn candidates(maps: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut push = |p: PathBuf| {
        if !out.contains(&p) {
            out.push(p);
        }
    };
    for line in maps.lines() {
        let Some(path) = line
            .split_whitespace()
            .nth(5)
            .filter(|p| p.starts_with('/'))
        else {
            continue;
        };
        let path = Path::new(path);
        if let Some(site) = site_packages(path) {
            push(site.join("nvidia/cu13/lib"));
            push(site.join("nvidia/cuda_nvrtc/lib"));
        }
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if (name.starts_with("libcudart.so") || name.starts_with("libnvrtc"))
            && let Some(dir) = path.parent()
        {
            push(dir.to_path_buf());
        }
    }
    push(PathBuf::from("/usr/local/cuda/lib64"));
    push(PathBuf::from("/usr/local/cuda/targets/x86_64-linux/lib"));
    out
}

/// The `site-packages` (or `dist-packages`) directory above `path`, if any.
fn site_packages(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .find(|a| {
            a.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n == "site-packages" || n == "dist-packages")
        })
        .map(Path::to_path_buf)
}

/// Make NVRTC loadable if it is not: the first candidate that holds it is preloaded.
/// Returns where it came from (`None`: it was loadable already, or nothing was found —
/// the communicator's setup then says so).
pub fn ensure() -> Option<PathBuf> {
    if commhal_cuda_rt::nvrtc_available() {
        return None;
    }
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    for dir in candidates(&maps) {
        if dir.join("libnvrtc.so.13").exists()
            && commhal_cuda_rt::nvrtc::loader::preload_nvrtc_from(&dir).is_ok()
        {
            crate::settings::log(|| format!("NVRTC from {}", dir.display()));
            return Some(dir);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wheel_dirs_come_from_mapped_site_packages_then_cuda() {
        let maps = "\
7f00-7f01 r-xp 00000000 08:01 1 /opt/v/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so
7f01-7f02 r--p 00000000 08:01 2 /opt/v/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2
7f02-7f03 r-xp 00000000 08:01 3 /usr/lib/x86_64-linux-gnu/libcudart.so.13.0.1
7f03-7f04 rw-p 00000000 00:00 0 [heap]
7f04-7f05 rw-p 00000000 00:00 0
";
        let c = candidates(maps);
        let site = PathBuf::from("/opt/v/lib/python3.12/site-packages");
        assert_eq!(c[0], site.join("nvidia/cu13/lib"));
        assert_eq!(c[1], site.join("nvidia/cuda_nvrtc/lib"));
        assert_eq!(c[2], PathBuf::from("/usr/lib/x86_64-linux-gnu"));
        assert_eq!(c[3], PathBuf::from("/usr/local/cuda/lib64"));
        assert_eq!(c.len(), 5, "{c:?}");
    }
}

//! NVRTC compiles every device-src translation unit (no GPU or driver needed).
//!
//! NVRTC is found through `LD_LIBRARY_PATH`, `COMMHAL_NVRTC_DIR`, or the directory
//! `scripts/install-nvrtc.sh` installs into (`<repo>/.cache/nvrtc/nvidia/cu13/lib`).
//! Without NVRTC each test prints "SKIPPED: NVRTC not found (run
//! scripts/install-nvrtc.sh)" and checks nothing; with `COMMHAL_REQUIRE_NVRTC=1` (CI)
//! it fails instead.

use std::path::PathBuf;

use commhal_cuda_rt::nvrtc::loader::nvrtc_or_skip;
use commhal_cuda_rt::nvrtc::{self, CompileRequest, ImageKind};
use commhal_cuda_rt::{CacheOutcome, CudaError, KernelCache, jit};
use commhal_device_src::{HEADERS, KERNEL_UNITS, Source};

/// The architecture CI compiles for (H100/H200).
const ARCH: &str = "sm_90";

#[test]
fn every_kernel_unit_compiles_for_sm_90() {
    if !nvrtc_or_skip("every_kernel_unit_compiles_for_sm_90") {
        return;
    }
    let (major, minor) = nvrtc::nvrtc_version().expect("nvrtc version");
    eprintln!("NVRTC {major}.{minor}");
    assert_eq!(
        major, 13,
        "expected NVRTC 13.x (cudarc is built for CUDA 13.0)"
    );
    assert!(!KERNEL_UNITS.is_empty());
    for unit in KERNEL_UNITS {
        let (img, outcome) = match jit::compile_unit(unit, ARCH, None) {
            Ok(x) => x,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(outcome, CacheOutcome::Disabled);
        assert_eq!(img.kind, ImageKind::Cubin);
        assert!(
            img.bytes.starts_with(b"\x7fELF"),
            "{}: CUBIN is not an ELF image",
            unit.source.name
        );
        assert!(
            !img.log.contains("warning"),
            "{}: NVRTC warnings:\n{}",
            unit.source.name,
            img.log
        );
    }
}

/// The PTX of every unit defines exactly the kernels the unit lists (names are
/// extern "C", so cuModuleGetFunction will find them).
#[test]
fn every_listed_kernel_is_an_entry_point() {
    if !nvrtc_or_skip("every_listed_kernel_is_an_entry_point") {
        return;
    }
    for unit in KERNEL_UNITS {
        let (img, _) =
            jit::compile_unit(unit, "compute_90", None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(img.kind, ImageKind::Ptx);
        let ptx = String::from_utf8_lossy(&img.bytes);
        let mut entries: Vec<String> = ptx
            .lines()
            .filter_map(|l| l.trim().strip_prefix(".visible .entry "))
            .map(|l| l.split('(').next().unwrap_or_default().trim().to_string())
            .collect();
        entries.sort();
        let mut listed: Vec<String> = unit.kernels.iter().map(|s| s.to_string()).collect();
        listed.sort();
        assert_eq!(entries, listed, "entry points of {}", unit.source.name);
    }
}

/// handles.h static_asserts its layout table under NVRTC: a wrong table entry must
/// fail the compile, and the error must carry NVRTC's log.
#[test]
fn layout_static_asserts_fire_under_nvrtc() {
    if !nvrtc_or_skip("layout_static_asserts_fire_under_nvrtc") {
        return;
    }
    let good = "X(MemoryChannelHandle, expected, 32, 8)";
    let handles = commhal_device_src::header("commhal/handles.h").expect("handles.h");
    assert!(
        handles.contents.contains(good),
        "test needs the table row {good}"
    );
    let broken: &'static str = Box::leak(
        handles
            .contents
            .replace(good, "X(MemoryChannelHandle, expected, 40, 8)")
            .into_boxed_str(),
    );
    let headers: Vec<Source> = HEADERS
        .iter()
        .map(|h| {
            if h.name == "commhal/handles.h" {
                Source {
                    name: h.name,
                    contents: broken,
                }
            } else {
                *h
            }
        })
        .collect();
    let options = jit::default_options();
    let req = CompileRequest {
        unit: "layout_check.cu",
        source: "#include \"commhal/handles.h\"\n",
        headers: &headers,
        arch: ARCH,
        options: &options,
    };
    match nvrtc::compile(&req) {
        Err(CudaError::Compile { log, unit, .. }) => {
            assert_eq!(unit, "layout_check.cu");
            assert!(
                log.contains("MemoryChannelHandle::expected offset mismatch"),
                "log lacks the static_assert message:\n{log}"
            );
        }
        other => panic!("a wrong layout table must fail to compile, got {other:?}"),
    }
    // And the real header compiles on its own.
    let req = CompileRequest {
        headers: HEADERS,
        ..req
    };
    nvrtc::compile(&req).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn syntax_error_reports_full_log() {
    if !nvrtc_or_skip("syntax_error_reports_full_log") {
        return;
    }
    let options = jit::default_options();
    let req = CompileRequest {
        unit: "broken.cu",
        source: "extern \"C\" __global__ void k() { this_is_not_defined(); }\n",
        headers: &[],
        arch: ARCH,
        options: &options,
    };
    let err = nvrtc::compile(&req).expect_err("must fail");
    let text = err.to_string();
    assert!(text.contains("broken.cu"), "{text}");
    assert!(text.contains("this_is_not_defined"), "{text}");
    assert!(text.contains("--gpu-architecture=sm_90"), "{text}");
}

#[test]
fn cache_hits_and_keys_separate_arch_and_options() {
    if !nvrtc_or_skip("cache_hits_and_keys_separate_arch_and_options") {
        return;
    }
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("kcache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = KernelCache::new(&dir);
    let unit = &KERNEL_UNITS[1]; // switch.cu: small, quick to compile
    let (a, o1) = jit::compile_unit(unit, ARCH, Some(&cache)).unwrap_or_else(|e| panic!("{e}"));
    let (b, o2) = jit::compile_unit(unit, ARCH, Some(&cache)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((o1, o2), (CacheOutcome::Miss, CacheOutcome::Hit));
    assert_eq!(
        a.bytes, b.bytes,
        "cached image differs from the compiled one"
    );

    let version = nvrtc::nvrtc_version().unwrap();
    let opts = jit::default_options();
    let base = CompileRequest {
        unit: unit.source.name,
        source: unit.source.contents,
        headers: HEADERS,
        arch: ARCH,
        options: &opts,
    };
    let k = KernelCache::key(&base, version);
    let other_opts = vec!["-std=c++17".to_string(), "-lineinfo".to_string()];
    assert_ne!(
        k,
        KernelCache::key(
            &CompileRequest {
                arch: "sm_100",
                ..base
            },
            version
        )
    );
    assert_ne!(
        k,
        KernelCache::key(
            &CompileRequest {
                options: &other_opts,
                ..base
            },
            version
        )
    );
    assert_ne!(k, KernelCache::key(&base, (version.0, version.1 + 1)));
    assert_eq!(k, KernelCache::key(&base, version));

    // A corrupt cache file is a miss, and gets replaced.
    for e in std::fs::read_dir(&dir).unwrap() {
        std::fs::write(e.unwrap().path(), b"garbage").unwrap();
    }
    let (_, o3) = jit::compile_unit(unit, ARCH, Some(&cache)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(o3, CacheOutcome::Miss);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every kernel launches with the largest block the hosts use (512 threads: the
/// cuda-coll `threads` tuning key is clamped to 32..=512): at most 65536 / 512 = 128
/// registers per thread, and no register spills. A kernel over that fails its launch
/// with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (a scatter-pipeline reduce with 130+
/// registers did, on the GPUs); this catches it without one.
#[test]
fn every_kernel_fits_512_threads_without_spills() {
    if !nvrtc_or_skip("every_kernel_fits_512_threads_without_spills") {
        return;
    }
    for unit in KERNEL_UNITS {
        let mut options = jit::default_options();
        options.push("--ptxas-options=--verbose".to_string());
        let req = CompileRequest {
            unit: unit.source.name,
            source: unit.source.contents,
            headers: HEADERS,
            arch: ARCH,
            options: &options,
        };
        let img = nvrtc::compile(&req).unwrap_or_else(|e| panic!("{e}"));
        let mut entry = String::new();
        let mut seen = 0;
        for line in img.log.lines() {
            if let Some(rest) = line.split("Compiling entry function '").nth(1) {
                entry = rest.split('\'').next().unwrap_or_default().to_string();
            }
            if let Some(rest) = line.split("Used ").nth(1)
                && let Some(n) = rest.strip_suffix_registers()
            {
                seen += 1;
                if commhal_hal::settings::gpu::PRINT_REGISTERS
                    .flag()
                    .unwrap_or_else(|e| panic!("{e}"))
                {
                    eprintln!("{entry}: {n} registers");
                }
                assert!(
                    n <= 128,
                    "{entry}: {n} registers (> 128: no 512-thread launch)"
                );
            }
            if line.contains("bytes spill") {
                assert!(
                    line.contains(" 0 bytes spill stores, 0 bytes spill loads"),
                    "{entry}: {line}"
                );
            }
        }
        assert!(
            seen >= unit.kernels.len(),
            "{}: ptxas reported {seen} register counts for {} kernels:\n{}",
            unit.source.name,
            unit.kernels.len(),
            img.log
        );
    }
}

/// "N registers, ..." -> N.
trait RegisterCount {
    fn strip_suffix_registers(&self) -> Option<u32>;
}

impl RegisterCount for str {
    fn strip_suffix_registers(&self) -> Option<u32> {
        let (n, rest) = self.split_once(' ')?;
        rest.starts_with("registers").then(|| n.parse().ok())?
    }
}

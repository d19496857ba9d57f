//! The handle layout check: g++ compiles `include/commhal/handles.h` in host mode
//! (`COMMHAL_HOST_LAYOUT`), prints sizeof/offsetof of every row of its
//! `COMMHAL_HANDLE_LAYOUT` table, every struct's size and alignment, the error codes
//! and a few encoded triggers; this test compares all of it with the Rust mirrors in
//! `commhal_device_src::layout`. The same header static_asserts its table under NVRTC
//! (see commhal-cuda-rt's NVRTC test), so host g++, Rust and the device compiler
//! agree.
//!
//! Needs a host C++ compiler: `$CXX`, else `g++`. Without one the test fails and
//! says so (it cannot check anything).

use std::path::PathBuf;
use std::process::Command;

use commhal_device_src::layout::{self, Trigger, TriggerFields, error_code, trigger_type};

const PROGRAM: &str = r#"
#include <stdio.h>
#include "commhal/handles.h"
using namespace commhal;
#define PRINT_FIELD(s, f, off, size) \
  printf("field %s %s %zu %zu\n", #s, #f, (size_t)COMMHAL_OFFSETOF(s, f), sizeof(((s*)0)->f));
#define PRINT_SIZE(s, size) printf("size %s %zu %zu\n", #s, sizeof(s), alignof(s));
#define PRINT_ERROR(name, value) printf("error %s %u\n", #name, (unsigned)name);
int main() {
  COMMHAL_HANDLE_LAYOUT(PRINT_FIELD)
  COMMHAL_HANDLE_SIZES(PRINT_SIZE)
  COMMHAL_ERRORS(PRINT_ERROR)
  Trigger t = make_trigger(TRIGGER_PUT | TRIGGER_SIGNAL, 0xdeadbeefu, 0x12345678u, 0xffffffffu,
                           511, 3, 1023);
  printf("trigger %llu %llu\n", t.w0, t.w1);
  t = make_trigger(TRIGGER_FLUSH, 7, 9, 11, 1, 2, 5);
  printf("trigger %llu %llu\n", t.w0, t.w1);
  return 0;
}
"#;

fn run_host_program() -> String {
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".to_string());
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("device-src-layout");
    std::fs::create_dir_all(&dir).expect("create temp dir");
    let src = dir.join("layout.cpp");
    let exe = dir.join("layout");
    std::fs::write(&src, PROGRAM).expect("write layout.cpp");
    let include = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("include");
    let out = Command::new(&cxx)
        .args([
            "-std=c++17",
            "-Wall",
            "-Werror",
            "-DCOMMHAL_HOST_LAYOUT",
            "-I",
        ])
        .arg(&include)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run host C++ compiler `{cxx}` ({e}): install g++ or set CXX")
        });
    assert!(
        out.status.success(),
        "{cxx} failed to compile handles.h in host mode:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run layout program");
    assert!(run.status.success(), "layout program failed");
    String::from_utf8(run.stdout).expect("utf-8 output")
}

#[test]
fn cpp_and_rust_layouts_match() {
    let text = run_host_program();
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();

    // Fields: same rows in the same order, same offsets and sizes.
    let cpp_fields: Vec<(String, String, usize, usize)> = lines
        .iter()
        .filter(|l| l[0] == "field")
        .map(|l| {
            (
                l[1].to_string(),
                l[2].to_string(),
                l[3].parse().unwrap(),
                l[4].parse().unwrap(),
            )
        })
        .collect();
    let rust_fields: Vec<(String, String, usize, usize)> = layout::field_table()
        .into_iter()
        .map(|f| (f.strukt.to_string(), f.field.to_string(), f.offset, f.size))
        .collect();
    assert!(!cpp_fields.is_empty(), "g++ program printed no fields");
    assert_eq!(
        cpp_fields, rust_fields,
        "field offsets/sizes differ (C++ left, Rust right)"
    );

    // Struct sizes and alignments.
    let cpp_sizes: Vec<(String, usize, usize)> = lines
        .iter()
        .filter(|l| l[0] == "size")
        .map(|l| {
            (
                l[1].to_string(),
                l[2].parse().unwrap(),
                l[3].parse().unwrap(),
            )
        })
        .collect();
    let rust_sizes: Vec<(String, usize, usize)> = layout::size_table()
        .into_iter()
        .map(|(n, s, a)| (n.to_string(), s, a))
        .collect();
    assert_eq!(
        cpp_sizes, rust_sizes,
        "struct size/align differ (C++ left, Rust right)"
    );

    // Error codes.
    let cpp_errors: Vec<(String, u32)> = lines
        .iter()
        .filter(|l| l[0] == "error")
        .map(|l| (l[1].to_string(), l[2].parse().unwrap()))
        .collect();
    let rust_errors: Vec<(String, u32)> = error_code::ALL
        .iter()
        .map(|(n, v)| (n.to_string(), *v))
        .collect();
    assert_eq!(cpp_errors, rust_errors, "error codes differ");

    // Trigger encoding: device make_trigger == Rust Trigger::encode.
    let cpp_triggers: Vec<Trigger> = lines
        .iter()
        .filter(|l| l[0] == "trigger")
        .map(|l| Trigger {
            w0: l[1].parse().unwrap(),
            w1: l[2].parse().unwrap(),
        })
        .collect();
    let rust_triggers = [
        TriggerFields {
            kind: trigger_type::PUT | trigger_type::SIGNAL,
            dst_offset: 0xdead_beef,
            src_offset: 0x1234_5678,
            len: 0xffff_ffff,
            dst_memory_id: 511,
            src_memory_id: 3,
            semaphore_id: 1023,
        },
        TriggerFields {
            kind: trigger_type::FLUSH,
            dst_offset: 7,
            src_offset: 9,
            len: 11,
            dst_memory_id: 1,
            src_memory_id: 2,
            semaphore_id: 5,
        },
    ]
    .map(|f| Trigger::encode(&f).expect("fits"));
    assert_eq!(
        cpp_triggers,
        rust_triggers.to_vec(),
        "trigger encoding differs"
    );
}

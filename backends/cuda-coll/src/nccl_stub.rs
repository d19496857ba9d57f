//! A stub `libnccl.so` for tests: every function [`crate::nccl_lib::NcclLib`] reads,
//! built from C with the system's `cc`, each returning a code that says whether it got
//! the arguments the tests pass. Test support only (hidden from the docs); its builder
//! panics when `cc` exists but fails.

/// Every function the table reads, as a C stub: each returns a code that says
/// whether it got the arguments the test passes (so a wrong prototype in the table
/// shows as a wrong code).
pub const STUB_C: &str = r#"
#include <stddef.h>
#include <string.h>
typedef struct { char internal[128]; } ncclUniqueId;
typedef void* ncclComm_t;
static int the_comm;
int ncclGetVersion(int* v) { *v = STUB_VERSION; return 0; }
const char* ncclGetErrorString(int r) { return r == 5 ? "invalid usage (stub)" : "stub error"; }
const char* ncclGetLastError(ncclComm_t c) { (void)c; return "last error (stub)"; }
int ncclGetUniqueId(ncclUniqueId* id) { memset(id->internal, 7, 128); return 0; }
int ncclCommInitRank(ncclComm_t* c, int n, ncclUniqueId id, int r) {
  if (id.internal[0] != 7 || id.internal[127] != 7 || r < 0 || r >= n) return 4;
  *c = &the_comm; return 0;
}
int ncclCommInitRankConfig(ncclComm_t* c, int n, ncclUniqueId id, int r, void* cfg) {
  (void)cfg; return ncclCommInitRank(c, n, id, r);
}
int ncclCommInitAll(ncclComm_t* c, int n, const int* d) { (void)c; (void)n; (void)d; return 5; }
int ncclCommSplit(ncclComm_t c, int a, int b, ncclComm_t* o, void* cfg) {
  (void)c; (void)a; (void)b; (void)o; (void)cfg; return 5;
}
int ncclCommFinalize(ncclComm_t c) { return c == &the_comm ? 0 : 4; }
int ncclCommDestroy(ncclComm_t c) { return c == &the_comm ? 0 : 4; }
int ncclCommAbort(ncclComm_t c) { return c == &the_comm ? 0 : 4; }
int ncclCommGetAsyncError(ncclComm_t c, int* e) { *e = 0; return c == &the_comm ? 0 : 4; }
int ncclCommCount(ncclComm_t c, int* n) { *n = 2; return c == &the_comm ? 0 : 4; }
int ncclCommUserRank(ncclComm_t c, int* r) { *r = 1; return c == &the_comm ? 0 : 4; }
int ncclCommCuDevice(ncclComm_t c, int* d) { *d = 0; return c == &the_comm ? 0 : 4; }
int ncclGroupStart(void) { return 0; }
int ncclGroupEnd(void) { return 0; }
int ncclAllReduce(const void* s, void* r, size_t n, int t, int op, ncclComm_t c, void* st) {
  return (s == (void*)0x1000 && r == (void*)0x2000 && n == 33 && t == 6 && op == 4
      && c == &the_comm && st == (void*)0x3000) ? 0 : 4;
}
int ncclAllGather(const void* s, void* r, size_t n, int t, ncclComm_t c, void* st) {
  return (s == (void*)0x1000 && r == (void*)0x2000 && n == 33 && t == 9 && c == &the_comm
      && st == (void*)0x3000) ? 0 : 4;
}
int ncclReduceScatter(const void* s, void* r, size_t n, int t, int op, ncclComm_t c, void* st) {
  return ncclAllReduce(s, r, n, t, op, c, st);
}
int ncclBroadcast(const void* s, void* r, size_t n, int t, int root, ncclComm_t c, void* st) {
  return (n == 33 && t == 6 && root == 1 && c == &the_comm && st == (void*)0x3000) ? 0 : 4;
}
int ncclReduce(const void* s, void* r, size_t n, int t, int op, int root, ncclComm_t c, void* st) {
  return (n == 33 && t == 6 && op == 4 && root == 1 && c == &the_comm && st == (void*)0x3000) ? 0 : 4;
}
int ncclSend(const void* b, size_t n, int t, int peer, ncclComm_t c, void* st) {
  return (b == (void*)0x1000 && n == 33 && t == 6 && peer == 1 && c == &the_comm) ? 0 : 4;
}
int ncclRecv(void* b, size_t n, int t, int peer, ncclComm_t c, void* st) {
  return (b == (void*)0x2000 && n == 33 && t == 6 && peer == 1 && c == &the_comm) ? 0 : 4;
}
int ncclRedOpCreatePreMulSum(int* op, void* s, int t, int res, ncclComm_t c) {
  (void)s; (void)t; (void)res; (void)c; *op = 5; return 0;
}
int ncclRedOpDestroy(int op, ncclComm_t c) { return (op == 5 && c == &the_comm) ? 0 : 4; }
int ncclCommRegister(ncclComm_t c, void* b, size_t n, void** h) {
  (void)c; (void)b; (void)n; *h = NULL; return 0;
}
int ncclCommDeregister(ncclComm_t c, void* h) { (void)c; (void)h; return 0; }
"#;

/// A stub library in a folder of its own, removed on drop (a loaded library stays
/// mapped).
#[derive(Debug)]
pub struct Stub {
    /// The library's path.
    pub path: String,
    dir: std::path::PathBuf,
}

impl Drop for Stub {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A stub library built from [`STUB_C`] with `cc` into a fresh folder as `file`
/// (`ncclGetVersion` = `version`; `-D` `defines` such as `ncclAllReduce=x` to leave
/// a function out), or `None` (printed) when there is no `cc`.
pub fn build_stub(file: &str, version: i32, defines: &[&str]) -> Option<Stub> {
    // a folder per stub: tests build theirs at the same time
    static BUILT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "commhal-nccl-stub-{}-{}",
        std::process::id(),
        BUILT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).ok()?;
    let src = dir.join("stub.c");
    std::fs::write(&src, STUB_C).expect("write the stub's source");
    let out = dir.join(file);
    let mut cmd = std::process::Command::new("cc");
    cmd.args(["-shared", "-fPIC", "-o"])
        .arg(&out)
        .arg(&src)
        .arg(format!("-DSTUB_VERSION={version}"));
    for d in defines {
        cmd.arg(format!("-D{d}"));
    }
    match cmd.output() {
        Ok(o) if o.status.success() => Some(Stub {
            path: out.to_string_lossy().into_owned(),
            dir,
        }),
        Ok(o) => panic!(
            "cc could not build the stub: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => {
            println!("skipped: no C compiler to build a stub NCCL ({e})");
            None
        }
    }
}

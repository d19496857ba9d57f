//! Declares the `stub_no_dmabuf` cfg, set only by the `stub-nodmabuf` build of this
//! source (a libibverbs without `ibv_reg_dmabuf_mr`).
fn main() {
    println!("cargo::rustc-check-cfg=cfg(stub_no_dmabuf)");
}

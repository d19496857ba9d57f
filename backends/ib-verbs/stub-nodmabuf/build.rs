//! Builds the stub's source without `ibv_reg_dmabuf_mr` (cfg `stub_no_dmabuf`).
fn main() {
    println!("cargo::rustc-check-cfg=cfg(stub_no_dmabuf)");
    println!("cargo::rustc-cfg=stub_no_dmabuf");
}

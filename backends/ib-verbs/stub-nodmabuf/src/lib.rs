//! # commhal-ibverbs-stub-nodmabuf — the stub provider without `ibv_reg_dmabuf_mr`
//!
//! The source of `../stub` compiled with cfg `stub_no_dmabuf`: every entry point of
//! the stub except `ibv_reg_dmabuf_mr`, as a libibverbs older than rdma-core 34
//! exports. The ib-verbs tests load it to check what the backend says when device
//! memory cannot be registered for lack of the call.

#[path = "../../stub/src/lib.rs"]
mod stub;

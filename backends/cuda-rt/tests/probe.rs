//! probe() and constructors explain a missing driver instead of panicking.

use commhal_cuda_rt::{Context, CudaError, DeviceBuffer, driver, probe};
use commhal_hal::HalError;
use commhal_hal::registry::Availability;

#[test]
fn probe_explains_why_cuda_is_unavailable() {
    let a = probe();
    if !driver::driver_present() {
        match &a {
            Availability::Unavailable(reason) => assert!(
                reason.starts_with("no CUDA driver (libcuda.so not found)"),
                "{reason}"
            ),
            Availability::Available => panic!("available without a driver"),
        }
        let err = Context::new(0).expect_err("no driver");
        assert!(matches!(err, CudaError::NoDriver), "{err}");
        let hal: HalError = err.into();
        assert!(matches!(hal, HalError::Unavailable { .. }), "{hal}");
    } else {
        match &a {
            Availability::Available => {
                let ctx = Context::new(0).expect("device 0");
                assert!(ctx.arch().unwrap().starts_with("sm_"));
                // Bad input is an error, not a panic.
                assert!(matches!(
                    DeviceBuffer::new(&ctx, 0),
                    Err(CudaError::Invalid(_))
                ));
                let n = driver::device_count().unwrap();
                assert!(matches!(Context::new(n), Err(CudaError::Invalid(_))));
            }
            Availability::Unavailable(reason) => {
                assert!(reason.starts_with("no CUDA device"), "{reason}")
            }
        }
    }
}

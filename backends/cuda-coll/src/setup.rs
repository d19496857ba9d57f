//! How a process joins a job: its bootstrap from the launcher's environment and the GPU
//! it drives.

use commhal_hal::bootstrap::{Bootstrap, InProcBootstrap, LaunchEnv, TcpBootstrap};
use commhal_hal::settings::launch::LOCAL_RANK;

use crate::error::{CollError, Result};

/// The bootstrap of this process: the launcher's (`commhal launch`, or `commhal bench
/// --ranks N` which starts one), else a one-rank world.
pub fn bootstrap_from_env() -> Result<Box<dyn Bootstrap>> {
    Ok(match LaunchEnv::detect()? {
        Some(_) => Box::new(TcpBootstrap::from_env()?),
        None => Box::new(
            InProcBootstrap::create(1)
                .pop()
                .ok_or_else(|| CollError::invalid("no in-process bootstrap"))?,
        ),
    })
}

/// This rank's GPU: `COMMHAL_LOCAL_RANK` (else the rank) modulo the device count.
pub fn local_device(boot: &dyn Bootstrap) -> Result<u32> {
    let ndev = commhal_cuda_rt::driver::device_count()?;
    if ndev == 0 {
        return Err(commhal_cuda_rt::CudaError::NoDevice(
            "the driver reports 0 CUDA devices (check CUDA_VISIBLE_DEVICES and nvidia-smi)".into(),
        )
        .into());
    }
    let local = match LOCAL_RANK
        .number()
        .map_err(|e| CollError::invalid(e.to_string()))?
    {
        Some(r) => r as u32, // declared 0..=u32::MAX
        None => boot.rank(),
    };
    Ok(local % ndev)
}

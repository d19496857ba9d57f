//! The one place that calls NVRTC's C API (through cudarc's `sys` layer).

use std::ffi::{CString, c_char, c_int};

use cudarc::nvrtc::sys;

use crate::error::{CudaError, Result};

fn nv_check(r: sys::nvrtcResult, call: &'static str) -> Result<()> {
    if r == sys::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(CudaError::Nvrtc {
            call,
            code: format!("{r:?}"),
        })
    }
}

/// NVRTC `(major, minor)`. NVRTC must be loaded ([`super::loader::ensure_loaded`]).
pub(crate) fn version() -> Result<(i32, i32)> {
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: library loaded (caller's contract); out-pointers valid.
    let r = unsafe { sys::nvrtcVersion(&mut major, &mut minor) };
    nv_check(r, "nvrtcVersion")?;
    Ok((major, minor))
}

/// An nvrtcProgram, destroyed on drop.
pub(crate) struct Program {
    raw: sys::nvrtcProgram,
}

/// Outcome of a compilation: success flag and the full log.
pub(crate) struct Compiled {
    pub ok: bool,
    pub log: String,
}

fn cstring(what: &str, s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| CudaError::invalid(format!("{what} contains a NUL byte")))
}

impl Program {
    /// Create a program from `source` with in-memory headers `(include name, text)`.
    pub(crate) fn new(name: &str, source: &str, headers: &[(&str, &str)]) -> Result<Program> {
        let src = cstring("kernel source", source)?;
        let cname = cstring("unit name", name)?;
        let names: Vec<CString> = headers
            .iter()
            .map(|(n, _)| cstring("header name", n))
            .collect::<Result<_>>()?;
        let texts: Vec<CString> = headers
            .iter()
            .map(|(n, t)| cstring(&format!("header {n}"), t))
            .collect::<Result<_>>()?;
        let name_ptrs: Vec<*const c_char> = names.iter().map(|c| c.as_ptr()).collect();
        let text_ptrs: Vec<*const c_char> = texts.iter().map(|c| c.as_ptr()).collect();
        let mut raw: sys::nvrtcProgram = std::ptr::null_mut();
        // SAFETY: NVRTC loaded (caller's contract); every string is NUL-terminated and
        // lives across the call (NVRTC copies them); arrays have `headers.len()` items.
        let r = unsafe {
            sys::nvrtcCreateProgram(
                &mut raw,
                src.as_ptr(),
                cname.as_ptr(),
                headers.len() as c_int,
                text_ptrs.as_ptr(),
                name_ptrs.as_ptr(),
            )
        };
        nv_check(r, "nvrtcCreateProgram")?;
        Ok(Program { raw })
    }

    /// Compile with `options`; always returns the log.
    pub(crate) fn compile(&self, options: &[String]) -> Result<Compiled> {
        let opts: Vec<CString> = options
            .iter()
            .map(|o| cstring("compiler option", o))
            .collect::<Result<_>>()?;
        let ptrs: Vec<*const c_char> = opts.iter().map(|c| c.as_ptr()).collect();
        // SAFETY: program alive; `ptrs` holds options.len() NUL-terminated strings
        // alive across the call.
        let r = unsafe { sys::nvrtcCompileProgram(self.raw, ptrs.len() as c_int, ptrs.as_ptr()) };
        let log = self.log()?;
        match r {
            sys::nvrtcResult::NVRTC_SUCCESS => Ok(Compiled { ok: true, log }),
            sys::nvrtcResult::NVRTC_ERROR_COMPILATION => Ok(Compiled { ok: false, log }),
            other => Err(CudaError::Nvrtc {
                call: "nvrtcCompileProgram",
                code: format!("{other:?}\n{log}"),
            }),
        }
    }

    fn log(&self) -> Result<String> {
        let mut size: usize = 0;
        // SAFETY: program alive; out-pointer valid.
        let r = unsafe { sys::nvrtcGetProgramLogSize(self.raw, &mut size) };
        nv_check(r, "nvrtcGetProgramLogSize")?;
        let mut buf = vec![0u8; size.max(1)];
        // SAFETY: buffer holds `size` bytes as NVRTC asked for.
        let r = unsafe { sys::nvrtcGetProgramLog(self.raw, buf.as_mut_ptr() as *mut c_char) };
        nv_check(r, "nvrtcGetProgramLog")?;
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
    }

    /// The CUBIN (compiled for a real `sm_XX` architecture).
    pub(crate) fn cubin(&self) -> Result<Vec<u8>> {
        let mut size: usize = 0;
        // SAFETY: program alive and compiled; out-pointer valid.
        let r = unsafe { sys::nvrtcGetCUBINSize(self.raw, &mut size) };
        nv_check(r, "nvrtcGetCUBINSize")?;
        let mut buf = vec![0u8; size];
        // SAFETY: buffer holds `size` bytes.
        let r = unsafe { sys::nvrtcGetCUBIN(self.raw, buf.as_mut_ptr() as *mut c_char) };
        nv_check(r, "nvrtcGetCUBIN")?;
        Ok(buf)
    }

    /// The PTX text, NUL-terminated.
    pub(crate) fn ptx(&self) -> Result<Vec<u8>> {
        let mut size: usize = 0;
        // SAFETY: program alive and compiled; out-pointer valid.
        let r = unsafe { sys::nvrtcGetPTXSize(self.raw, &mut size) };
        nv_check(r, "nvrtcGetPTXSize")?;
        let mut buf = vec![0u8; size];
        // SAFETY: buffer holds `size` bytes.
        let r = unsafe { sys::nvrtcGetPTX(self.raw, buf.as_mut_ptr() as *mut c_char) };
        nv_check(r, "nvrtcGetPTX")?;
        Ok(buf)
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once.
        let r = unsafe { sys::nvrtcDestroyProgram(&mut self.raw) };
        if r != sys::nvrtcResult::NVRTC_SUCCESS {
            tracing::warn!("nvrtcDestroyProgram failed: {r:?}");
        }
    }
}

//! The host's wait for the server's answer, with every way out (see the parent module's docs).

use super::super::GpuDerivativePipeline;
use crate::kernels::ndt::derivatives::server::{
    EXIT_WORD, RESULT_SEQ_WORD, STATUS_IDLE, STATUS_NOT_RESIDENT, STATUS_WORD,
};
use crate::{Error, Result};
use cudarc::driver::sys;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

impl GpuDerivativePipeline {
    /// Spins until the kernel has answered request `seq` (see the module docs for the ways out).
    pub(super) fn wait_answer(&self, seq: u32) -> Result<()> {
        self.spin_for(RESULT_SEQ_WORD, u64::from(seq), u64::from(u32::MAX), seq)
    }

    /// Spins until the kernel's exit word says every block has left the serving loop.
    pub(super) fn wait_exit(&self) -> Result<()> {
        let token = u64::from(self.server.token) | 1 << 32;
        self.spin_for(EXIT_WORD, token, u64::MAX, self.server.seq)
    }

    /// Spins until answers word `word`, masked, equals `want`; `seq` names the request in errors.
    fn spin_for(&self, word: usize, want: u64, mask: u64, seq: u32) -> Result<()> {
        let b = self
            .server
            .buffers
            .as_ref()
            .expect("a running server has buffers");
        let a = b.answers.as_slice()?.as_ptr().cast_mut();
        // SAFETY: aligned u64 words of the answers (alive with `self`), read atomically (the
        // low half holds the u32 the kernel stores; little-endian).
        let (answered, status) = unsafe {
            (
                AtomicU64::from_ptr(a.add(word)),
                AtomicU32::from_ptr(a.add(STATUS_WORD).cast::<u32>()),
            )
        };
        let start = Instant::now();
        let mut next_check = Duration::from_millis(1);
        let mut spins = 0u32;
        loop {
            if answered.load(Ordering::Acquire) & mask == want {
                return Ok(());
            }
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(256) {
                std::hint::spin_loop();
                continue;
            }
            match status.load(Ordering::Acquire) {
                0 => {}
                STATUS_IDLE => {
                    return Err(server_error(
                        2,
                        "the server kernel ended: no request within its idle timeout".into(),
                    ))
                }
                STATUS_NOT_RESIDENT => {
                    return Err(server_error(
                        3,
                        "the server kernel's grid was not co-resident (start barrier timed out)"
                            .into(),
                    ))
                }
                other => return Err(server_error(other, "unknown server status".into())),
            }
            let waited = start.elapsed();
            if waited >= next_check {
                next_check = waited + Duration::from_millis(1);
                if self.stream_idle()? && answered.load(Ordering::Acquire) & mask != want {
                    return Err(server_error(
                        4,
                        format!("the server kernel ended without answering request {seq}"),
                    ));
                }
            }
            if waited > self.server.timeouts.answer {
                return Err(server_error(
                    5,
                    format!(
                        "no answer to request {seq} within {:?} (PTXFLOW_NDT_SERVER_TIMEOUT_MS)",
                        self.server.timeouts.answer
                    ),
                ));
            }
        }
    }

    /// Whether the stream has no work left (the server kernel ended); driver errors of the
    /// kernel come back here.
    fn stream_idle(&self) -> Result<bool> {
        let Some(b) = self.server.buffers.as_ref() else {
            return Ok(true);
        };
        // SAFETY: the server's stream handle is alive with `self`.
        let r = unsafe { sys::cuStreamQuery(b.stream.cu_stream()) };
        match r {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            e => Err(Error::driver("cuStreamQuery (NDT server)")(
                cudarc::driver::DriverError(e),
            )),
        }
    }
}

/// An [`Error::Kernel`] of the server kernel.
pub(super) fn server_error(code: u32, detail: String) -> Error {
    Error::Kernel {
        kernel: "ndt_derivatives_server",
        code,
        detail,
    }
}

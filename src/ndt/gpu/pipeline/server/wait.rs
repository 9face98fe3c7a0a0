//! The host's waits for the server (an answer, the kernel's exit) with every way out, and the
//! stop (see the parent module's docs).

use super::super::launch::stream_idle;
use super::super::GpuDerivativePipeline;
use crate::kernels::ndt::derivatives::server::{
    CMD_STOP, EXIT_WORD, RESULT_SEQ_WORD, STATUS_IDLE, STATUS_NOT_RESIDENT, STATUS_WORD,
};
use crate::{Error, Result};
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
        let stream = self.server.buffers.as_ref().map(|b| &*b.stream);
        stream_idle(stream, "cuStreamQuery (NDT server)")
    }
}

impl GpuDerivativePipeline {
    /// At the end of an alignment: the stop command, then a spin until the kernel's exit word
    /// says every block has left (no driver call); the stream is synchronized later, before any
    /// other use of the pipeline ([`Self::stop_server`]). Falls back to that on any trouble.
    pub(in crate::ndt::gpu::pipeline) fn stop_server_quick(&mut self) -> Result<()> {
        if !self.server.running {
            return Ok(());
        }
        self.send_stop()?;
        if self.wait_exit().is_ok() {
            self.server.running = false;
            self.server.needs_sync = true;
            return Ok(());
        }
        self.stop_server()
    }

    /// Sends the stop command to a running server and waits for the kernel to end (a stream
    /// synchronization, also after a quick stop).
    pub(in crate::ndt::gpu::pipeline) fn stop_server(&mut self) -> Result<()> {
        if !self.server.running && !self.server.needs_sync {
            return Ok(());
        }
        if self.server.running {
            self.send_stop()?;
        }
        self.server.running = false;
        self.server.needs_sync = false;
        let r = match self.server.buffers.as_ref() {
            Some(b) => b
                .stream
                .synchronize()
                .map_err(Error::driver("running ndt_derivatives_server")),
            None => Ok(()),
        };
        let status = self
            .server
            .buffers
            .as_ref()
            .and_then(|b| b.answers.as_slice().ok().map(|a| a[STATUS_WORD] as u32))
            .unwrap_or(0);
        if r.is_err() || status != 0 {
            self.server.dirty = true;
        }
        r?;
        if status == STATUS_NOT_RESIDENT {
            return Err(server_error(
                3,
                "the server kernel's grid was not co-resident (start barrier timed out)".into(),
            ));
        }
        Ok(())
    }

    /// Writes the stop command (a new seq) into the mailbox.
    fn send_stop(&mut self) -> Result<()> {
        let seq = self.server.seq.wrapping_add(1);
        self.server.seq = seq;
        if let Some(b) = self.server.buffers.as_mut() {
            let m = b.mailbox.as_mut_slice()?.as_mut_ptr();
            // SAFETY: word 0 of the mailbox, aligned, alive with `self`.
            unsafe {
                AtomicU64::from_ptr(m).store(
                    u64::from(seq) | u64::from(CMD_STOP) << 32,
                    Ordering::Release,
                );
            }
        }
        Ok(())
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

//! GPU timing with CUDA events: record a start and an end on a stream, read the elapsed time
//! after the end event completes. Measures device time, not host overhead.
//!
//! Errors: every fallible call returns [`Error::Driver`] naming the driver call that failed.

use crate::{Error, Result};
use cudarc::driver::{sys, CudaEvent, CudaStream};
use std::sync::Arc;

/// A pair of timing events.
pub struct GpuTimer {
    start: CudaEvent,
    end: CudaEvent,
}

impl GpuTimer {
    /// Creates the events on the stream's context.
    pub fn new(stream: &Arc<CudaStream>) -> Result<Self> {
        let mk = || {
            stream
                .context()
                .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(Error::driver("cuEventCreate"))
        };
        Ok(GpuTimer {
            start: mk()?,
            end: mk()?,
        })
    }

    /// Records the start on `stream`.
    pub fn start(&self, stream: &CudaStream) -> Result<()> {
        self.start
            .record(stream)
            .map_err(Error::driver("cuEventRecord"))
    }

    /// Records the end on `stream`, waits for it, and returns the elapsed seconds.
    pub fn stop(&self, stream: &CudaStream) -> Result<f64> {
        self.end
            .record(stream)
            .map_err(Error::driver("cuEventRecord"))?;
        self.end
            .synchronize()
            .map_err(Error::driver("cuEventSynchronize"))?;
        let ms = self
            .start
            .elapsed_ms(&self.end)
            .map_err(Error::driver("cuEventElapsedTime"))?;
        Ok(f64::from(ms) * 1e-3)
    }
}

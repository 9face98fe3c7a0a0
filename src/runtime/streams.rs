//! A set of streams for work that overlaps (copies in, kernels, copies out), joined by events.
//!
//! Errors: every fallible call returns [`Error::Driver`] naming the driver call that failed.

use super::device::Gpu;
use crate::{Error, Result};
use cudarc::driver::CudaStream;
use std::sync::Arc;

/// `n` non-default streams of one context.
pub struct StreamSet {
    streams: Vec<Arc<CudaStream>>,
}

impl StreamSet {
    /// Creates `n` streams (at least one).
    pub fn new(gpu: &Gpu, n: usize) -> Result<Self> {
        let streams = (0..n.max(1))
            .map(|_| {
                gpu.ctx()
                    .new_stream()
                    .map_err(Error::driver("cuStreamCreate"))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(StreamSet { streams })
    }

    /// Stream `i` (modulo the set's size).
    pub fn get(&self, i: usize) -> &Arc<CudaStream> {
        &self.streams[i % self.streams.len()]
    }

    /// Number of streams.
    pub fn len(&self) -> usize {
        self.streams.len()
    }

    /// Always false: a set has at least one stream.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Makes `waiter` wait for everything issued so far on `on` (an event, no host block).
    pub fn order(&self, waiter: usize, on: usize) -> Result<()> {
        let ev = self
            .get(on)
            .record_event(None)
            .map_err(Error::driver("cuEventRecord"))?;
        self.get(waiter)
            .wait(&ev)
            .map_err(Error::driver("cuStreamWaitEvent"))
    }

    /// Blocks until every stream is idle.
    pub fn sync_all(&self) -> Result<()> {
        for s in &self.streams {
            s.synchronize()
                .map_err(Error::driver("cuStreamSynchronize"))?;
        }
        Ok(())
    }
}

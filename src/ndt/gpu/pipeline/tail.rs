//! The tail of a batch of alignments: once most hypotheses have stopped, the rounds that are
//! left are small and bound by latency (launch, one evaluation's dependent chain, the
//! synchronization), not by the device's throughput. Two measures, each read from the
//! environment when the pipeline is created (unset: the default):
//! - `PTXFLOW_NDT_MERGE_TAIL=n`: a split batch (`split.rs`) runs both groups' remaining
//!   alignments as one group, one launch per round instead of two, once at most `n` of them are
//!   left ([`crate::ndt::SplitLinearize::merge_tail`]; `0`: never);
//! - `PTXFLOW_NDT_TAIL_POINTS=k`: a batch round gives each request at most as many blocks as
//!   leave every thread `k` points (`0`: as many blocks as the points fill, up to the grid's aim),
//!   so a small round runs fewer, fuller blocks;
//! - `PTXFLOW_NDT_TWO_STREAMS` (on by default): group 1 of a split batch runs on a stream of
//!   its own, so the two groups' rounds may overlap on the device (the end of one group's grid with the start of
//!   the other's, and two small latency-bound rounds of the tail side by side). The groups'
//!   records are disjoint (`Region`); the second stream waits for the pipeline's stream when a
//!   batch starts and the pipeline's stream for the second one when it ends, error or not
//!   ([`crate::ndt::SplitLinearize::finish_split`]), so uploads and plain rounds stay ordered
//!   with the batch.
//!
//! The first two change which blocks sum which points for some evaluations of the tail, so
//! records differ from those without them in the last bits, as the round size already decides
//! today; the batch results stay within the CPU's agreement bound (`tests/ndt_gpu_align.rs`).
//! Two streams change nothing in the records. Measured (H100, 256 hypotheses,
//! `gpu-results/s10/ndtb-{1,2}.log`): merging at 16/32/64 and 4 points per thread were no
//! faster (8.49 / 8.65 / 8.78 and 8.57 ms against 8.51; the tail is bound by the host's
//! updates and by one evaluation's latency, ncu: a 375-block tail round 16.9 us at 17%
//! achieved occupancy), so they stay off; two streams with the solver's feed pool 7.23 ms
//! against 8.59 for one stream without it.

use super::round::Region;
use super::GpuDerivativePipeline;
use crate::{Error, Result};
use cudarc::driver::{CudaEvent, CudaStream};
use std::sync::Arc;

/// Default of `PTXFLOW_NDT_MERGE_TAIL` (never merge).
const MERGE_TAIL: usize = 0;
/// Default of `PTXFLOW_NDT_TAIL_POINTS` (no cap).
const TAIL_POINTS: usize = 0;
/// Default of `PTXFLOW_NDT_TWO_STREAMS` (H100, 15 alternating batches of 256 hypotheses in one
/// process, with the solver's feed pool: 7.23 ms against 8.39 on one stream in
/// `gpu-results/s10/ndtb-2.log`, 6.86 against 8.12 in `ndtb-3.log`).
const TWO_STREAMS: bool = true;

/// The settings above, and group 1's stream once made.
#[derive(Debug)]
pub(super) struct TailPolicy {
    pub(super) merge: usize,
    pub(super) points_per_thread: usize,
    two_streams: bool,
    stream1: Option<Arc<CudaStream>>,
    /// Each split group's completion event between rounds, kept for its next round (one
    /// event made per group and pipeline instead of one per round).
    pub(super) events: [Option<CudaEvent>; 2],
}

fn env_usize(name: &str, default: usize, max: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n <= max)
        .unwrap_or(default)
}

impl TailPolicy {
    /// The settings from the environment (values out of range are ignored).
    pub(super) fn from_env() -> TailPolicy {
        TailPolicy {
            merge: env_usize("PTXFLOW_NDT_MERGE_TAIL", MERGE_TAIL, 1 << 16),
            points_per_thread: env_usize("PTXFLOW_NDT_TAIL_POINTS", TAIL_POINTS, 1 << 10),
            two_streams: crate::ndt::gpu::variants::env_switch(
                "PTXFLOW_NDT_TWO_STREAMS",
                TWO_STREAMS,
            ),
            stream1: None,
            events: [None, None],
        }
    }

    /// `per_request` blocks of `block` threads for a batch round whose largest request covers
    /// `max_points`, capped so that every thread has `points_per_thread` points (at least one
    /// block).
    pub(super) fn cap_blocks(&self, per_request: usize, max_points: usize, block: usize) -> usize {
        match self.points_per_thread {
            0 => per_request,
            k => per_request.min(max_points.div_ceil(block * k)).max(1),
        }
    }
}

impl GpuDerivativePipeline {
    /// Merges the two groups of a split batch once at most `n` alignments are left (`0`:
    /// never); takes effect with the next batch. See the module docs.
    pub fn set_merge_tail(&mut self, n: usize) {
        self.tail.merge = n;
    }

    /// Runs group 1 of split batches on a stream of its own (see the module docs); takes
    /// effect with the next batch.
    pub fn set_two_streams(&mut self, on: bool) {
        self.tail.two_streams = on;
    }

    /// The stream that group `group`'s rounds of a split batch run on (the pipeline's stream
    /// unless [`Self::set_two_streams`] gave group 1 its own and a batch made it).
    pub fn group_stream(&self, group: usize) -> &Arc<CudaStream> {
        match (&self.tail.stream1, group) {
            (Some(s), 1) if self.tail.two_streams => s,
            _ => self.gpu.stream(),
        }
    }

    /// The stream of `region`'s rounds.
    pub(super) fn region_stream(&self, region: &Region) -> &Arc<CudaStream> {
        self.group_stream(region.group)
    }

    /// At the start of a split batch: makes group 1's stream when asked for and lets it wait
    /// for everything queued on the pipeline's stream (uploads).
    ///
    /// Errors: driver errors (stream creation, event record and wait).
    pub(super) fn begin_split(&mut self) -> Result<()> {
        if !self.tail.two_streams {
            return Ok(());
        }
        if self.tail.stream1.is_none() {
            let s = self
                .gpu
                .stream()
                .context()
                .new_stream()
                .map_err(Error::driver("cuStreamCreate (NDT split group 1)"))?;
            self.tail.stream1 = Some(s);
        }
        let s1 = self.tail.stream1.as_ref().expect("made above");
        s1.join(self.gpu.stream())
            .map_err(Error::driver("cuStreamWaitEvent (NDT split group 1)"))
    }

    /// At the end of a split batch, finished or failed: the pipeline's stream waits for
    /// whatever group 1's stream still has queued.
    ///
    /// Errors: driver errors (event record and wait).
    pub(super) fn end_split(&mut self) -> Result<()> {
        match &self.tail.stream1 {
            Some(s1) => self
                .gpu
                .stream()
                .join(s1)
                .map_err(Error::driver("cuStreamWaitEvent (NDT split end)")),
            None => Ok(()),
        }
    }

    /// Caps a batch round's blocks per request so that every thread has `k` points (`0`: no
    /// cap); takes effect with the next round. See the module docs.
    pub fn set_tail_points(&mut self, k: usize) {
        self.tail.points_per_thread = k;
    }
}

#[cfg(test)]
mod tests {
    use super::TailPolicy;

    #[test]
    fn the_block_cap_leaves_every_thread_its_points() {
        let policy = |k| TailPolicy {
            merge: 0,
            points_per_thread: k,
            two_streams: false,
            stream1: None,
            events: [None, None],
        };
        let off = policy(0);
        assert_eq!(off.cap_blocks(105, 16_000, 128), 105);
        let four = policy(4);
        assert_eq!(four.cap_blocks(105, 16_000, 128), 32);
        assert_eq!(four.cap_blocks(8, 16_000, 128), 8);
        assert_eq!(four.cap_blocks(3, 10, 128), 1);
    }
}

//! The tail of a batch of alignments: once most hypotheses have stopped, the rounds that are
//! left are small and bound by latency (launch, one evaluation's dependent chain, the
//! synchronization), not by the device's throughput. Two measures, each read from the
//! environment when the pipeline is created (unset: the default):
//! - `PTXFLOW_NDT_MERGE_TAIL=n`: a split batch (`split.rs`) runs both groups' remaining
//!   alignments as one group, one launch per round instead of two, once at most `n` of them are
//!   left ([`crate::ndt::SplitLinearize::merge_tail`]; `0`: never);
//! - `PTXFLOW_NDT_TAIL_POINTS=k`: a batch round gives each request at most as many blocks as
//!   leave every thread `k` points (`0`: as many blocks as the points fill, up to the grid's aim),
//!   so a small round runs fewer, fuller blocks.
//!
//! Both change which blocks sum which points for some evaluations of the tail, so records differ
//! from those without them in the last bits, as the round size already decides today; the
//! batch results stay within the CPU's agreement bound (`tests/ndt_gpu_align.rs`).

use super::GpuDerivativePipeline;

/// Default of `PTXFLOW_NDT_MERGE_TAIL` (never merge).
const MERGE_TAIL: usize = 0;
/// Default of `PTXFLOW_NDT_TAIL_POINTS` (no cap).
const TAIL_POINTS: usize = 0;

/// The two settings above.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct TailPolicy {
    pub(super) merge: usize,
    pub(super) points_per_thread: usize,
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
        let off = TailPolicy {
            merge: 0,
            points_per_thread: 0,
        };
        assert_eq!(off.cap_blocks(105, 16_000, 128), 105);
        let four = TailPolicy {
            points_per_thread: 4,
            ..off
        };
        assert_eq!(four.cap_blocks(105, 16_000, 128), 32);
        assert_eq!(four.cap_blocks(8, 16_000, 128), 8);
        assert_eq!(four.cap_blocks(3, 10, 128), 1);
    }
}

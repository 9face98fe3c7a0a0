//! What a [`super::GpuDerivativePipeline`] is sized for, how its per-round requests and results
//! travel, and the counters that prove what each round cost.

use crate::{Error, Result};

/// Most requests one launch serves (the grid's y dimension).
pub const MAX_REQUESTS_PER_LAUNCH: usize = 65_535;

/// What the pipeline is sized for; uploads beyond it grow the buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuCapacity {
    /// Source points over all uploaded clouds.
    pub points: usize,
    /// Voxels of the target map.
    pub voxels: usize,
    /// Requests per launch (larger batches are split into several launches).
    pub requests: usize,
}

/// Most source points (and voxels) a pipeline holds: indices and hash slot masks are 32-bit.
pub const MAX_POINTS: usize = 1 << 31;

impl GpuCapacity {
    /// Checks the capacity before anything is allocated: requests in `1..=65535`
    /// ([`Error::Input`]), points and voxels at most 2³¹ ([`Error::Capacity`]), so every buffer
    /// size derived from them fits.
    pub fn check(&self) -> Result<()> {
        if !(1..=MAX_REQUESTS_PER_LAUNCH).contains(&self.requests) {
            return Err(Error::input(format!(
                "GPU NDT pipeline: request capacity must lie in 1..={MAX_REQUESTS_PER_LAUNCH}, got {}",
                self.requests
            )));
        }
        for (what, n) in [
            ("NDT source points", self.points),
            ("NDT voxels", self.voxels),
        ] {
            if n > MAX_POINTS {
                return Err(Error::Capacity {
                    what: what.into(),
                    needed: n,
                    capacity: MAX_POINTS,
                });
            }
        }
        Ok(())
    }
}

/// How results travel back (requests always go in the parameters and one copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transfer {
    /// The kernel writes results to mapped host memory.
    Mapped,
    /// Results are copied from a device buffer after the launch.
    Copy,
}

/// Traffic and device operations since creation (or [`super::GpuDerivativePipeline::reset_counters`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PipelineCounters {
    /// Bytes sent host → device (uploads, requests).
    pub bytes_up: u64,
    /// Bytes sent device → host (results).
    pub bytes_down: u64,
    /// Device and pinned-host allocations.
    pub allocations: u64,
    /// Kernel launches.
    pub launches: u64,
    /// Evaluated requests.
    pub requests: u64,
}

//! What a [`super::GpuDerivativePipeline`] is sized for, how its per-round requests and results
//! travel, and the counters that prove what each round cost.

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

//! Pieces shared by the three `ndt_derivatives`-family launches (the ordinary round, the
//! evaluation server and the device solver): the search mode's probe parameters, the kernels'
//! idle timeout and the query of a persistent kernel's stream.

use super::server::ServerTimeouts;
use super::{GpuDerivativePipeline, TargetInfo};
use crate::kernels::ndt::derivatives::{PROBES_DIRECT27, PROBES_DIRECT7};
use crate::ndt::search::NeighbourSearch;
use crate::runtime::Launch;
use crate::{Error, Result};
use cudarc::driver::{sys, CudaStream};

/// The kernel's probe-table start, probe count and search radius (in cells) for `search`.
pub(super) fn probe_args(search: NeighbourSearch) -> (u32, u32, u32) {
    match search {
        NeighbourSearch::Direct1 => (PROBES_DIRECT7, 1u32, 0u32),
        NeighbourSearch::Direct7 => (PROBES_DIRECT7, 7, 0),
        NeighbourSearch::Direct27 => (PROBES_DIRECT27, 27, 0),
        NeighbourSearch::Radius => (PROBES_DIRECT27, 27, 1),
    }
}

/// The persistent kernels' idle timeout in nanoseconds: at most an hour (the kernel doubles it
/// for the blocks that wait on block 0).
pub(super) fn idle_ns(t: &ServerTimeouts) -> u64 {
    t.idle.as_nanos().min(3_600_000_000_000) as u64
}

/// Whether `stream` has no work left (its persistent kernel ended; `None`: no stream, so
/// nothing runs); driver errors of the kernel come back here, named `call`.
pub(super) fn stream_idle(stream: Option<&CudaStream>, call: &'static str) -> Result<bool> {
    let Some(stream) = stream else {
        return Ok(true);
    };
    // SAFETY: the stream handle is alive with `stream` (borrowed for the call).
    match unsafe { sys::cuStreamQuery(stream.cu_stream()) } {
        sys::CUresult::CUDA_SUCCESS => Ok(true),
        sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        e => Err(Error::driver(call)(cudarc::driver::DriverError(e))),
    }
}

/// The first parameters of the ordinary kernel as the evaluation server and the device solver
/// pass them: the whole uploaded buffers (request rows from 0), the search and Gauss scalars,
/// and `answers` (a mapped address) as the results. Held by the caller while it builds the
/// launch (the launch takes the parameters by reference).
pub(super) struct PersistentHead {
    t: TargetInfo,
    answers: u64,
    neg_half_d2: f64,
    neg_d2: f64,
    probe_start: u32,
    probe_count: u32,
    radius: u32,
}

impl PersistentHead {
    pub(super) fn new(t: TargetInfo, search: NeighbourSearch, answers: u64) -> PersistentHead {
        let (probe_start, probe_count, radius) = probe_args(search);
        PersistentHead {
            t,
            answers,
            neg_half_d2: -0.5 * t.gauss.d2,
            neg_d2: -t.gauss.d2,
            probe_start,
            probe_count,
            radius,
        }
    }

    /// Pushes the parameters (points … radius) onto `lb`, in the kernel's order.
    pub(super) fn push<'a>(&'a self, lb: &mut Launch<'a>, p: &'a GpuDerivativePipeline) {
        lb.arg(p.points.slice())
            .arg(p.voxels.slice())
            .arg(p.slots.slice())
            .arg(&self.t.slot_mask)
            .arg(p.requests_dev.slice())
            .arg(p.partials.slice())
            .arg(p.counters_dev.slice())
            .arg(&self.answers)
            .arg(&self.t.inv_resolution)
            .arg(&self.t.radius_sq)
            .arg(&self.neg_half_d2)
            .arg(&self.neg_d2)
            .arg(&self.probe_start)
            .arg(&self.probe_count)
            .arg(&self.radius);
    }
}

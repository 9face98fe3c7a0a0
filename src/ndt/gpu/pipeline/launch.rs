//! Pieces shared by the three `ndt_derivatives`-family launches (the ordinary round, the
//! evaluation server and the device solver): the search mode's probe parameters, the kernels'
//! idle timeout and the query of a persistent kernel's stream.

use super::server::ServerTimeouts;
use crate::kernels::ndt::derivatives::{PROBES_DIRECT27, PROBES_DIRECT7};
use crate::ndt::search::NeighbourSearch;
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

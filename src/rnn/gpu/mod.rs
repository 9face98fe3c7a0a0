//! GPU implementations of the learned-correction kernels. Every type allocates its device
//! buffers once, for the largest problem it was created for; calls only copy and launch, so a
//! steady loop allocates nothing. Host-slice methods upload, launch, synchronise and download;
//! `*_device` methods only enqueue work on a stream the caller orders.

pub mod chain;
pub mod dense;
pub mod gru;
mod gru_cluster;
mod gru_held;
mod gru_launch;
mod gru_shape;
pub mod lowrank;
pub mod rsvd;
mod rsvd_device;
mod rsvd_host;
mod rsvd_launch;

use crate::runtime::{DeviceBuffer, Gpu};
use crate::{Error, Result};
use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaFunction, CudaStream, DeviceRepr, LaunchConfig, ValidAsZeroBits};
use std::sync::Arc;

pub(crate) fn u32_of(what: &str, n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::Capacity {
        what: what.into(),
        needed: n,
        capacity: u32::MAX as usize,
    })
}

pub(crate) fn round_up(n: usize, m: usize) -> usize {
    n.div_ceil(m) * m
}

pub(crate) fn cfg(grid: (u32, u32, u32), block: u32, smem_bytes: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: grid,
        block_dim: (block, 1, 1),
        shared_mem_bytes: smem_bytes,
    }
}

pub(crate) fn zeros<T: DeviceRepr + ValidAsZeroBits>(
    stream: &Arc<CudaStream>,
    n: usize,
    what: &'static str,
) -> Result<DeviceBuffer<T>> {
    DeviceBuffer::zeros(stream, n, what)
}

/// Allows `bytes` of dynamic shared memory (needed above 48 KiB) or says why not.
pub(crate) fn allow_dynamic_smem(
    gpu: &Gpu,
    f: &CudaFunction,
    bytes: u32,
    kernel: &'static str,
) -> Result<()> {
    let limit = gpu.facts().max_shared_per_block_optin;
    if bytes > limit {
        return Err(Error::Capacity {
            what: format!("shared memory of {kernel} (bytes)"),
            needed: bytes as usize,
            capacity: limit as usize,
        });
    }
    f.set_attribute(
        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        bytes as i32,
    )
    .map_err(Error::driver(
        "cuFuncSetAttribute(max dynamic shared memory)",
    ))
}

/// How many blocks of `threads` threads and `smem_bytes` dynamic shared memory can be resident
/// at once on the whole device: the limit of a cooperative launch.
pub(crate) fn cooperative_capacity(
    gpu: &Gpu,
    f: &CudaFunction,
    threads: u32,
    smem_bytes: u32,
) -> Result<u32> {
    let per_sm = f
        .occupancy_max_active_blocks_per_multiprocessor(threads, smem_bytes as usize, None)
        .map_err(Error::driver("cuOccupancyMaxActiveBlocksPerMultiprocessor"))?;
    Ok(per_sm * gpu.facts().sm_count)
}

/// Reads the `status` words of persistent-kernel barriers (`arrive, exit, status, -` per
/// instance) after the stream is synchronised; a set status means a barrier timed out.
pub(crate) fn check_barriers(
    stream: &Arc<CudaStream>,
    bar: &DeviceBuffer<u32>,
    instances: usize,
    kernel: &'static str,
) -> Result<()> {
    let mut words = vec![0u32; 4 * instances];
    let src = bar.slice().slice(0..4 * instances);
    stream
        .memcpy_dtoh(&src, &mut words)
        .map_err(Error::driver("cuMemcpyDtoHAsync"))?;
    stream
        .synchronize()
        .map_err(Error::driver("synchronizing after a persistent kernel"))?;
    for (i, w) in words.chunks(4).enumerate() {
        if w[2] != 0 {
            return Err(Error::Kernel {
                kernel,
                code: w[2],
                detail: format!("grid barrier {i} timed out: the blocks were not all resident (another cooperative kernel running concurrently?)"),
            });
        }
    }
    Ok(())
}

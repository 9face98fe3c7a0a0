//! The f32 copy of the inverse covariances that the mixed-precision derivative kernel reads
//! (`PTXFLOW_NDT_MIXED`, [`crate::kernels::ndt::derivatives::Variant::mixed`]): per voxel
//! `C00 C01 C02 C11 C12 C22` rounded to f32, then the mean split into `μ_hi = f32(μ)` and
//! `μ_lo = f32(μ − μ_hi)` per axis (48 bytes), uploaded beside the f64 records with the dense
//! cell table.

use crate::kernels::ndt::derivatives::mixed::COV32_VALUES;
use crate::ndt::voxel_map::VoxelMap;
use crate::runtime::DeviceBuffer;
use crate::Result;
use cudarc::driver::{CudaStream, DevicePtr};
use std::sync::Arc;

/// `map`'s inverse covariances as the `cov32` table (see the module docs).
pub fn pack_cov32(map: &VoxelMap, out: &mut Vec<f32>) {
    out.clear();
    out.reserve(map.len() * COV32_VALUES);
    for (m, c) in map.means().iter().zip(map.inv_covariances()) {
        out.extend([c[0], c[1], c[2], c[4], c[5], c[8]].map(|v| v as f32));
        let hi = m.map(|v| v as f32);
        out.extend(hi);
        out.extend([0, 1, 2].map(|k| (m[k] - f64::from(hi[k])) as f32));
    }
}

/// The table on the device.
#[derive(Default)]
pub(super) struct Cov32 {
    buf: Option<DeviceBuffer<f32>>,
    ptr: u64,
}

impl Cov32 {
    /// Uploads `map`'s table (growing the buffer when needed); returns the allocations made.
    pub(super) fn upload(&mut self, stream: &Arc<CudaStream>, map: &VoxelMap) -> Result<u64> {
        let mut host = Vec::new();
        pack_cov32(map, &mut host);
        let mut allocations = 0;
        if self.buf.as_ref().is_none_or(|b| b.capacity() < host.len()) {
            self.buf = None;
            self.buf = Some(DeviceBuffer::zeros(
                stream,
                host.len().max(COV32_VALUES),
                "NDT f32 inverse covariances",
            )?);
            allocations = 1;
        }
        let buf = self.buf.as_mut().expect("allocated above");
        buf.upload(stream, &host)?;
        let (ptr, _sync) = buf.slice().device_ptr(stream);
        self.ptr = ptr;
        Ok(allocations)
    }

    /// The table's device address (the kernel's `cov32` argument).
    pub(super) fn ptr(&self) -> &u64 {
        &self.ptr
    }

    /// Device bytes held.
    pub(super) fn bytes(&self) -> usize {
        self.buf.as_ref().map_or(0, |b| b.allocated_bytes())
    }
}

impl super::GpuDerivativePipeline {
    /// Runs rounds of more than one block per SM (batches) on the mixed-precision kernel (or
    /// not), whatever `PTXFLOW_NDT_MIXED` says; takes effect with the next
    /// [`Self::upload_target`] (for same-process comparisons).
    pub fn set_mixed(&mut self, mixed: bool) {
        if self.cells.mixed != Some(mixed) {
            self.cells = super::tuning::DeviceCells::none();
            self.cells.mixed = Some(mixed);
        }
    }

    /// Whether the uploaded target's batch rounds run the mixed-precision kernel.
    pub fn uses_mixed(&self) -> bool {
        self.cells.cov32().is_some()
    }
}

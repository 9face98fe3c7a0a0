//! The padded copy of the voxel records that the batch kernel reads with `v2` loads when built
//! with [`crate::kernels::ndt::derivatives::Variant::wide_records`] (`PTXFLOW_NDT_WIDE_RECORDS=1`):
//! per voxel the nine f64 of [`super::records::pack_voxels`] (mean, inverse covariance), then
//! zeros up to [`WIDE_RECORD_VALUES`] (96 bytes, so every record is 32-byte aligned), uploaded
//! beside the plain records with the dense cell table.

use super::records::VOXEL_VALUES;
use crate::kernels::ndt::derivatives::WIDE_RECORD_VALUES;
use crate::ndt::voxel_map::VoxelMap;
use crate::runtime::DeviceBuffer;
use crate::Result;
use cudarc::driver::{CudaSlice, CudaStream};
use std::sync::Arc;

/// `map`'s records padded to [`WIDE_RECORD_VALUES`] f64 each.
pub fn pack_wide_voxels(map: &VoxelMap, out: &mut Vec<f64>) {
    let mut plain = Vec::new();
    super::records::pack_voxels(map, &mut plain);
    out.clear();
    out.reserve(map.len() * WIDE_RECORD_VALUES);
    for rec in plain.chunks_exact(VOXEL_VALUES) {
        out.extend_from_slice(rec);
        out.extend_from_slice(&[0.0; WIDE_RECORD_VALUES - VOXEL_VALUES]);
    }
}

/// The padded records on the device.
#[derive(Default)]
pub(super) struct WideRecords {
    buf: Option<DeviceBuffer<f64>>,
}

impl WideRecords {
    /// Uploads `map`'s padded records (growing the buffer when needed); returns the
    /// allocations made.
    pub(super) fn upload(&mut self, stream: &Arc<CudaStream>, map: &VoxelMap) -> Result<u64> {
        let mut host = Vec::new();
        pack_wide_voxels(map, &mut host);
        let mut allocations = 0;
        if self.buf.as_ref().is_none_or(|b| b.capacity() < host.len()) {
            self.buf = None;
            self.buf = Some(DeviceBuffer::zeros(
                stream,
                host.len().max(WIDE_RECORD_VALUES),
                "NDT padded voxel records",
            )?);
            allocations = 1;
        }
        let buf = self.buf.as_mut().expect("allocated above");
        buf.upload(stream, &host)?;
        Ok(allocations)
    }

    /// The records (the batch kernel's `voxels` argument), once uploaded.
    pub(super) fn slice(&self) -> Option<&CudaSlice<f64>> {
        self.buf.as_ref().map(|b| b.slice())
    }

    /// Device bytes held.
    pub(super) fn bytes(&self) -> usize {
        self.buf.as_ref().map_or(0, |b| b.allocated_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_records_hold_the_plain_ones_then_zeros() {
        let pts: Vec<[f32; 3]> = (0..40)
            .map(|k| {
                let f = k as f32 * 0.37;
                [f % 3.0, (f * 0.5) % 2.0, (f * 0.25) % 1.5]
            })
            .collect();
        let map = VoxelMap::build(&pts, 1.0).unwrap();
        let (mut plain, mut wide) = (Vec::new(), Vec::new());
        super::super::records::pack_voxels(&map, &mut plain);
        pack_wide_voxels(&map, &mut wide);
        assert_eq!(wide.len(), map.len() * WIDE_RECORD_VALUES);
        for (p, w) in plain
            .chunks_exact(VOXEL_VALUES)
            .zip(wide.chunks_exact(WIDE_RECORD_VALUES))
        {
            assert_eq!(p, &w[..VOXEL_VALUES]);
            assert!(w[VOXEL_VALUES..].iter().all(|&v| v == 0.0));
        }
    }
}

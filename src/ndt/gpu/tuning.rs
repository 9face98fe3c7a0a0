//! Tuning of the derivative pipeline, each measured against the plain kernel on an H100
//! (BENCHMARKS.md; device time of the 256-hypothesis batch by CUDA events, `PTXFLOW_NDT_PHASES`):
//! - the dense cell table (the default, [`VoxelLookup::Dense`]; `PTXFLOW_NDT_LOOKUP=hash` turns it
//!   off): for a map whose voxels fill a small enough box of cells, one `i32` per cell of the box
//!   (the voxel index, or −1), so the kernel finds a probe's voxel with one load instead of a walk
//!   along a hash chain (batch device time 12.2 -> 10.1 ms, Velodyne alignment 305 -> 261 µs).
//!   The kernel's answer for every key is the hash's (keys outside the box have no voxel in
//!   either), so the results are equal bit for bit. The hash is the fallback when the box is too
//!   large;
//! - sources stored sorted by map cell (opt-in, [`sort_from_env`]): batch device time 10.1 ->
//!   9.6 ms, but the sort costs host time at every upload (one alignment: +45 µs);
//! - the kernel built for more resident blocks per SM (opt-in, `PTXFLOW_NDT_MIN_BLOCKS`; 4 blocks
//!   of the dense variant at 128 registers: 10.1 ms, no gain);
//! - compacted hits, shared accumulators, the small-round prefetch and split batches (on by
//!   default since session 7: batch 13.7 -> 8.5 ms) and the other kernel variants: see
//!   [`super::variants`].

use super::variants::{batch_variant, derivative_kernel, variant_from_env, variant_with};
use crate::ndt::voxel_map::VoxelMap;
use crate::runtime::{DeviceBuffer, Gpu, Launch, LoadedKernel};
use crate::Result;
use cudarc::driver::{CudaStream, DevicePtr};
use std::borrow::Cow;
use std::sync::Arc;

/// How the kernel finds the voxel of a cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VoxelLookup {
    /// Probe the CPU's hash table (always available).
    Hash,
    /// The default: one load from the dense cell table when the map's box has at most
    /// [`MAX_DENSE_CELLS`] cells (and at most [`MAX_DENSE_CELLS_PER_VOXEL`] per voxel), else the
    /// hash.
    Dense,
}

impl VoxelLookup {
    /// [`VoxelLookup::Hash`] when the environment variable `PTXFLOW_NDT_LOOKUP` is `hash`, else
    /// [`VoxelLookup::Dense`].
    pub fn from_env() -> VoxelLookup {
        match std::env::var("PTXFLOW_NDT_LOOKUP").as_deref() {
            Ok("hash") => VoxelLookup::Hash,
            _ => VoxelLookup::Dense,
        }
    }
}

/// Whether source clouds are stored on the device sorted by the map cell they lie in (`PTXFLOW_NDT_SORT=1`
/// when a pipeline is created, or [`super::GpuDerivativePipeline::set_sort_sources`]): the 32
/// points of a warp then mostly share their voxels, so fewer lanes idle while others pair (on
/// the Velodyne pair 75% of the probe work is useful instead of 59%). Only the order of the
/// sums changes.
pub fn sort_from_env() -> bool {
    std::env::var("PTXFLOW_NDT_SORT").as_deref() == Ok("1")
}

/// `points` ordered by the cell of side `cell_m` they lie in (z, then y, then x; points
/// outside the cell range last, in their order).
pub fn spatial_order(points: &[[f32; 3]], cell_m: f64) -> Vec<[f32; 3]> {
    let inv = 1.0 / cell_m;
    let mut keyed: Vec<([i32; 3], u32)> = points
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let c = crate::ndt::voxel_grid::cell_of(p.map(f64::from), inv).unwrap_or([i32::MAX; 3]);
            ([c[2], c[1], c[0]], i as u32)
        })
        .collect();
    keyed.sort_unstable();
    keyed.iter().map(|&(_, i)| points[i as usize]).collect()
}

/// The order a source cloud is stored in on the device: as given, or sorted by cell of side
/// `cell_m` when `sort` (see [`sort_from_env`]).
pub(super) fn stored_order(points: &[[f32; 3]], sort: bool, cell_m: f64) -> Cow<'_, [[f32; 3]]> {
    if sort {
        Cow::Owned(spatial_order(points, cell_m))
    } else {
        Cow::Borrowed(points)
    }
}

/// Most cells a dense table may have (64 MiB of `i32`).
pub const MAX_DENSE_CELLS: usize = 1 << 24;
/// Most cells per voxel a dense table may have (sparse maps keep the hash).
pub const MAX_DENSE_CELLS_PER_VOXEL: usize = 512;

/// A map's dense cell table; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DenseCells {
    /// Cell index of entry 0 (the smallest key on each axis).
    pub origin: [i32; 3],
    /// Cells on each axis.
    pub dims: [u32; 3],
    /// `dims[0] · dims[1] · dims[2]` voxel indices (−1: no voxel), x fastest, then y, then z.
    pub table: Vec<i32>,
}

impl DenseCells {
    /// The table of `map`, or `None` when the map is empty or its box is too large (see
    /// [`VoxelLookup::Dense`]).
    pub fn build(map: &VoxelMap) -> Option<DenseCells> {
        let keys = map.keys();
        let first = *keys.first()?;
        let (mut lo, mut hi) = (first, first);
        for k in keys {
            for a in 0..3 {
                lo[a] = lo[a].min(k[a]);
                hi[a] = hi[a].max(k[a]);
            }
        }
        // Keys lie within ±2³⁰, so every extent fits u32 and the product is checked.
        let dims: [u32; 3] =
            std::array::from_fn(|a| (i64::from(hi[a]) - i64::from(lo[a]) + 1) as u32);
        let cells = dims
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d as usize))?;
        if cells > MAX_DENSE_CELLS || cells > MAX_DENSE_CELLS_PER_VOXEL * keys.len() {
            return None;
        }
        let mut table = vec![-1i32; cells];
        for (v, k) in keys.iter().enumerate() {
            let r: [usize; 3] = std::array::from_fn(|a| (k[a] - lo[a]) as usize);
            let at = (r[2] * dims[1] as usize + r[1]) * dims[0] as usize + r[0];
            // Fewer than 2³⁰ voxels (VoxelHash::build's bound), so the index fits i32.
            table[at] = v as i32;
        }
        Some(DenseCells {
            origin: lo,
            dims,
            table,
        })
    }

    /// The voxel of cell `key`, as the kernel reads it (for tests).
    pub fn get(&self, key: [i32; 3]) -> Option<usize> {
        let mut at = 0usize;
        for a in (0..3).rev() {
            let r = (i64::from(key[a]) - i64::from(self.origin[a])) as u64;
            if r >= u64::from(self.dims[a]) {
                return None;
            }
            at = at * self.dims[a] as usize + r as usize;
        }
        usize::try_from(self.table[at]).ok()
    }
}

/// The dense table on the device, the kernel variant that reads it and the arguments that
/// describe it.
pub(super) struct DeviceCells {
    buf: Option<DeviceBuffer<i32>>,
    kernel: Option<LoadedKernel>,
    /// The variant for rounds of at most one block per SM, when it differs.
    small: Option<LoadedKernel>,
    /// `small` is the split variant (half as many points per block).
    small_split: bool,
    args: Option<CellArgs>,
    /// The f32 inverse covariances, when `kernel` is the mixed-precision build.
    cov32: Option<super::mixed::Cov32>,
    /// `PTXFLOW_NDT_MIXED` overridden ([`super::GpuDerivativePipeline::set_mixed`]).
    pub(super) mixed: Option<bool>,
    /// `kernel` computes in another order than the small-round kernels (the mixed build):
    /// every round of a batch then runs it (`pipeline/round.rs`).
    batch_large: bool,
    /// The kernel of every round of a batch of alignments when it is none of the above (the
    /// cross-product build, `variants::batch_variant`).
    batch: Option<LoadedKernel>,
    /// The padded voxel records, when `batch` reads them (`wide.rs`).
    wide: Option<super::wide::WideRecords>,
}

/// The `cells`, `cell_origin_*` and `cell_dims_*` arguments of the dense-table variant.
#[derive(Clone, Copy, Debug)]
pub(super) struct CellArgs {
    ptr: u64,
    origin: [i32; 3],
    dims: [u32; 3],
}

impl CellArgs {
    /// Pushes the seven arguments, in the kernel's order (after the default kernel's).
    pub(super) fn push<'a>(&'a self, lb: &mut Launch<'a>) {
        lb.arg(&self.ptr);
        for o in &self.origin {
            lb.arg(o);
        }
        for d in &self.dims {
            lb.arg(d);
        }
    }
}

impl DeviceCells {
    /// No table (the kernel probes the hash).
    pub(super) fn none() -> DeviceCells {
        DeviceCells {
            buf: None,
            kernel: None,
            small: None,
            small_split: false,
            args: None,
            cov32: None,
            mixed: None,
            batch_large: false,
            batch: None,
            wide: None,
        }
    }

    /// Builds and uploads `map`'s table when `lookup` asks for it and the box is small enough
    /// (loading the dense-table kernel the first time; `direct7`: the pipeline's search, fixed
    /// for its life, is Direct7); otherwise the table is off. Returns the number of device
    /// allocations made.
    pub(super) fn upload(
        &mut self,
        gpu: &Gpu,
        stream: &Arc<CudaStream>,
        map: &VoxelMap,
        lookup: VoxelLookup,
        direct7: bool,
    ) -> Result<u64> {
        self.args = None;
        let table = match lookup {
            VoxelLookup::Dense => DenseCells::build(map),
            VoxelLookup::Hash => None,
        };
        let Some(t) = table else {
            return Ok(0);
        };
        if self.kernel.is_none() {
            let large = variant_with(true, false, self.mixed);
            let small = variant_from_env(true, true);
            self.kernel = Some(derivative_kernel(gpu, large)?);
            if large.mixed {
                self.cov32 = Some(Default::default());
            }
            self.batch_large = large.mixed || large.cross;
            if let Some(v) = batch_variant(large, direct7) {
                self.batch = Some(derivative_kernel(gpu, v)?);
                self.wide = v.wide_records.then(Default::default);
            }
            if small != large {
                self.small = Some(derivative_kernel(gpu, small)?);
                self.small_split = small.split_point;
            }
        }
        let mut allocations = 0;
        if self
            .buf
            .as_ref()
            .is_none_or(|b| b.capacity() < t.table.len())
        {
            self.buf = None;
            self.buf = Some(DeviceBuffer::zeros(
                stream,
                t.table.len(),
                "NDT dense cell table",
            )?);
            allocations = 1;
        }
        let buf = self.buf.as_mut().expect("allocated above");
        buf.upload(stream, &t.table)?;
        let (ptr, _sync) = buf.slice().device_ptr(stream);
        if let Some(c) = &mut self.cov32 {
            allocations += c.upload(stream, map)?;
        }
        if let Some(w) = &mut self.wide {
            allocations += w.upload(stream, map)?;
        }
        self.args = Some(CellArgs {
            ptr,
            origin: t.origin,
            dims: t.dims,
        });
        Ok(allocations)
    }

    /// The dense-table kernels (for any round; for rounds of at most one block per SM, if it
    /// differs) and their extra arguments, when the table is on.
    pub(super) fn active(&self) -> Option<(&LoadedKernel, Option<&LoadedKernel>, CellArgs)> {
        Some((self.kernel.as_ref()?, self.small.as_ref(), self.args?))
    }

    /// Whether the kernel for small rounds is the split variant (a block covers
    /// `SPLIT_POINTS_PER_BLOCK` points per pass instead of `BLOCK`).
    pub(super) fn small_split(&self) -> bool {
        self.small_split && self.small.is_some()
    }

    /// The kernel of every round of a batch (see `batch`), when the table is on.
    pub(super) fn batch_kernel(&self) -> Option<&LoadedKernel> {
        self.args.and(self.batch.as_ref())
    }

    /// Whether every round of a batch runs the kernel for any round (see `batch_large`).
    pub(super) fn batch_large(&self) -> bool {
        self.batch_large && self.args.is_some()
    }

    /// The `cov32` argument of the kernel for any round, when it is the mixed-precision build.
    pub(super) fn cov32(&self) -> Option<&u64> {
        self.cov32.as_ref().map(|c| c.ptr())
    }

    /// The batch kernel's `voxels` argument when it reads the padded records.
    pub(super) fn wide_records(&self) -> Option<&cudarc::driver::CudaSlice<f64>> {
        self.wide.as_ref().and_then(|w| w.slice())
    }

    /// Device bytes held.
    pub(super) fn bytes(&self) -> usize {
        self.wide.as_ref().map_or(0, |w| w.bytes())
            + self.cov32.as_ref().map_or(0, |c| c.bytes())
            + self.buf.as_ref().map_or(0, |b| b.allocated_bytes())
    }
}

impl super::GpuDerivativePipeline {
    /// Chooses how the kernel finds voxels; takes effect with the next [`Self::upload_target`].
    pub fn set_voxel_lookup(&mut self, lookup: VoxelLookup) {
        self.lookup = lookup;
    }

    /// Stores the next uploaded sources sorted by map cell (see [`sort_from_env`]).
    pub fn set_sort_sources(&mut self, sort: bool) {
        self.sort_sources = sort;
    }

    /// Whether the uploaded target is searched through the dense cell table.
    pub fn uses_dense_cells(&self) -> bool {
        self.cells.active().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A map with a 10-point blob in each of `cells` (1 m voxels).
    fn map_of(cells: &[[i32; 3]]) -> VoxelMap {
        let mut pts = Vec::new();
        for c in cells {
            for k in 0..10 {
                let f = 0.1 + 0.08 * k as f32;
                pts.push([
                    c[0] as f32 + f,
                    c[1] as f32 + 0.5 + 0.03 * k as f32,
                    c[2] as f32 + 1.0 - f,
                ]);
            }
        }
        VoxelMap::build(&pts, 1.0).unwrap()
    }

    #[test]
    fn dense_table_answers_as_the_hash_around_negative_keys() {
        let map = map_of(&[[-3, 0, 2], [-1, -2, 2], [0, 0, 0], [2, 1, -1]]);
        let t = DenseCells::build(&map).expect("small box");
        assert_eq!(t.origin, [-3, -2, -1]);
        assert_eq!(t.dims, [6, 4, 4]);
        for x in -5..5 {
            for y in -4..4 {
                for z in -3..5 {
                    assert_eq!(
                        t.get([x, y, z]),
                        map.hash().get([x, y, z]),
                        "({x}, {y}, {z})"
                    );
                }
            }
        }
    }

    #[test]
    fn sparse_maps_keep_the_hash() {
        // Two voxels 2000 cells apart: a 2001-cell box for 2 voxels (over 512 per voxel).
        let far = map_of(&[[0, 0, 0], [2000, 0, 0]]);
        assert!(DenseCells::build(&far).is_none());
        let near = map_of(&[[0, 0, 0], [500, 0, 0]]);
        assert!(DenseCells::build(&near).is_some());
    }

    #[test]
    fn spatial_order_is_a_permutation_grouped_by_cell() {
        let pts = [
            [2.5f32, 0.5, 0.5],
            [0.5, 0.5, 0.5],
            [2.6, 0.4, 0.5],
            [0.2, 0.3, 0.9],
            [f32::NAN, 0.0, 0.0],
            [0.5, 1.5, 0.5],
        ];
        let out = spatial_order(&pts, 1.0);
        let bits = |v: &[[f32; 3]]| {
            let mut b: Vec<[u32; 3]> = v.iter().map(|p| p.map(f32::to_bits)).collect();
            b.sort_unstable();
            b
        };
        assert_eq!(bits(&out), bits(&pts));
        assert_eq!(
            &out[..2],
            &[pts[1], pts[3]],
            "cell (0,0,0) first, in input order"
        );
        assert_eq!(&out[2..4], &[pts[0], pts[2]], "then (2,0,0)");
        assert_eq!(out[4], pts[5]);
        assert!(out[5][0].is_nan(), "points without a cell last");
    }
}

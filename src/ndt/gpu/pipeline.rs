//! [`GpuDerivativePipeline`]: the NDT objective on the GPU behind the [`Linearize`] seam.
//!
//! Every device buffer is allocated when the pipeline is created (or grown by an upload that
//! needs more, between alignments); an evaluation round allocates nothing. Per round it writes
//! the requests (80 bytes each) into mapped host memory, launches `ndt_derivatives` once for all
//! of them, synchronizes, and reads the results (232 bytes each) from mapped host memory: one
//! launch and one synchronization, no copy commands. On a device that cannot map host memory (or
//! with [`Transfer::Copy`]) the same buffers are staged through device copies instead: one
//! upload, the launch and one download per round. [`PipelineCounters`] records what crossed the
//! bus and how often the device was asked to allocate or launch.

use super::mapped::{device_can_map, MappedBuffer};
use super::records::*;
use crate::kernels::ndt::derivatives::{BLOCK, PROBES_DIRECT27, PROBES_DIRECT7, SLOT_VALUES};
use crate::kernels::KernelId;
use crate::ndt::derivatives::GaussConstants;
use crate::ndt::linearize::{Linearization, Linearize, LinearizeRequest};
use crate::ndt::pose::Pose6;
use crate::ndt::search::NeighbourSearch;
use crate::ndt::voxel_map::VoxelMap;
use crate::runtime::{DeviceBuffer, Gpu};
use crate::{Error, Result};
use cudarc::driver::{result as cu, CudaFunction, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg};
use std::sync::Arc;

/// Blocks per SM the grid aims for when a round has enough points (two waves at 4 resident).
const BLOCKS_PER_SM: usize = 8;
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

/// How requests and results travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transfer {
    /// The kernel reads requests from and writes results to mapped host memory.
    Mapped,
    /// Requests and results are copied to and from device buffers around the launch.
    Copy,
}

/// Traffic and device operations since creation (or [`GpuDerivativePipeline::reset_counters`]).
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

struct TargetInfo {
    inv_resolution: f64,
    radius_sq: f64,
    slot_mask: u32,
    gauss: GaussConstants,
}

/// The GPU implementation of [`Linearize`]; see the module docs.
pub struct GpuDerivativePipeline {
    gpu: Arc<Gpu>,
    func: CudaFunction,
    search: NeighbourSearch,
    outlier_ratio: f64,
    transfer: Transfer,
    capacity: GpuCapacity,
    points: DeviceBuffer<f32>,
    voxels: DeviceBuffer<f64>,
    slots: DeviceBuffer<i32>,
    partials: DeviceBuffer<f64>,
    counters_dev: DeviceBuffer<u32>,
    staging: Option<(DeviceBuffer<u64>, DeviceBuffer<f64>)>,
    requests: MappedBuffer<u64>,
    results: MappedBuffer<f64>,
    sources: Vec<(u32, u32)>,
    target: Option<TargetInfo>,
    counters: PipelineCounters,
    scratch: Vec<f64>,
}

/// Hash slots the CPU builds for `voxels` voxels (`VoxelHash::build`'s rule).
fn slots_for(voxels: usize) -> usize {
    (2 * voxels).next_power_of_two().max(16)
}

fn partial_slots(gpu: &Gpu, cap: &GpuCapacity) -> usize {
    let target = gpu.facts().sm_count as usize * BLOCKS_PER_SM;
    cap.requests.max(target.min(cap.points.div_ceil(BLOCK as usize)).max(1))
}

impl GpuDerivativePipeline {
    /// A pipeline on `gpu` sized for `capacity`, scoring with `search` and `outlier_ratio`.
    ///
    /// Errors: [`Error::Input`] for an outlier ratio outside (0, 1) or a request capacity outside
    /// `1..=65535`; [`Error::Capacity`] for more than 2³¹ points; driver errors (allocation, module
    /// load).
    pub fn new(gpu: Arc<Gpu>, capacity: GpuCapacity, search: NeighbourSearch, outlier_ratio: f64) -> Result<Self> {
        GaussConstants::new(1.0, outlier_ratio)?;
        if !(1..=MAX_REQUESTS_PER_LAUNCH).contains(&capacity.requests) {
            return Err(Error::input(format!(
                "GPU NDT pipeline: request capacity must lie in 1..={MAX_REQUESTS_PER_LAUNCH}, got {}",
                capacity.requests
            )));
        }
        check_points(capacity.points)?;
        let func = gpu.function(KernelId::NdtDerivatives)?;
        let s = gpu.stream().clone();
        let slots = partial_slots(&gpu, &capacity);
        let points = DeviceBuffer::zeros(&s, 3 * capacity.points, "NDT source points")?;
        let voxels = DeviceBuffer::zeros(&s, VOXEL_VALUES * capacity.voxels, "NDT voxels")?;
        let hash = DeviceBuffer::zeros(&s, 4 * slots_for(capacity.voxels), "NDT voxel hash")?;
        let partials = DeviceBuffer::zeros(&s, SLOT_VALUES * slots, "NDT block partials")?;
        let counters_dev = DeviceBuffer::zeros(&s, capacity.requests, "NDT request counters")?;
        let requests = MappedBuffer::new(&gpu, REQUEST_WORDS * capacity.requests)?;
        let results = MappedBuffer::new(&gpu, VALUES * capacity.requests)?;
        // Five device buffers and two mapped host buffers.
        let allocations = 7;
        let mut p = GpuDerivativePipeline {
            func,
            search,
            outlier_ratio,
            transfer: Transfer::Mapped,
            capacity,
            points,
            voxels,
            slots: hash,
            partials,
            counters_dev,
            staging: None,
            requests,
            results,
            sources: Vec::new(),
            target: None,
            counters: PipelineCounters { allocations, ..Default::default() },
            scratch: Vec::new(),
            gpu,
        };
        if !device_can_map(&p.gpu) {
            p.set_transfer(Transfer::Copy)?;
        }
        Ok(p)
    }

    /// Opens the default GPU and creates a pipeline on it.
    ///
    /// Errors: [`Error::NoDevice`] without a usable GPU (callers fall back to the CPU), then as
    /// [`GpuDerivativePipeline::new`].
    pub fn open_default(capacity: GpuCapacity, search: NeighbourSearch, outlier_ratio: f64) -> Result<Self> {
        Self::new(Gpu::open_default()?, capacity, search, outlier_ratio)
    }

    /// Switches how requests and results travel ([`Transfer::Copy`] allocates two small device
    /// buffers once). Errors: [`Error::NoDevice`] when asking for [`Transfer::Mapped`] on a
    /// device that cannot map host memory; driver errors.
    pub fn set_transfer(&mut self, transfer: Transfer) -> Result<()> {
        if transfer == Transfer::Mapped && !device_can_map(&self.gpu) {
            return Err(Error::NoDevice { reason: "the device cannot map host memory (zero-copy)".into() });
        }
        if transfer == Transfer::Copy && self.staging.is_none() {
            let s = self.gpu.stream();
            let rq = DeviceBuffer::zeros(s, self.requests.len(), "NDT requests (device copy)")?;
            let rs = DeviceBuffer::zeros(s, self.results.len(), "NDT results (device copy)")?;
            self.counters.allocations += 2;
            self.staging = Some((rq, rs));
        }
        self.transfer = transfer;
        Ok(())
    }

    /// How requests and results travel now.
    pub fn transfer(&self) -> Transfer {
        self.transfer
    }

    /// The device.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Current capacity (grows with uploads that need more).
    pub fn capacity(&self) -> GpuCapacity {
        self.capacity
    }

    /// The neighbour search the kernel uses.
    pub fn search(&self) -> NeighbourSearch {
        self.search
    }

    /// Counters since creation or the last reset.
    pub fn counters(&self) -> PipelineCounters {
        self.counters
    }

    /// Zeroes the counters.
    pub fn reset_counters(&mut self) {
        self.counters = PipelineCounters::default();
    }

    /// Bytes of device memory the pipeline holds.
    pub fn device_bytes(&self) -> usize {
        let staging = self.staging.as_ref().map_or(0, |(a, b)| a.allocated_bytes() + b.allocated_bytes());
        self.points.allocated_bytes()
            + self.voxels.allocated_bytes()
            + self.slots.allocated_bytes()
            + self.partials.allocated_bytes()
            + self.counters_dev.allocated_bytes()
            + staging
    }

    /// Bytes of pinned (mapped) host memory the pipeline holds.
    pub fn pinned_bytes(&self) -> usize {
        self.requests.bytes() + self.results.bytes()
    }

    /// The Gaussian constants of the uploaded target (`None` before [`Self::upload_target`]).
    pub fn gauss(&self) -> Option<GaussConstants> {
        self.target.as_ref().map(|t| t.gauss)
    }

    /// Uploads the target map: voxel records and the CPU's hash table, which the kernel probes
    /// as is. Grows the voxel buffers when the map is larger than the capacity.
    pub fn upload_target(&mut self, map: &VoxelMap) -> Result<()> {
        let gauss = GaussConstants::new(map.resolution_m(), self.outlier_ratio)?;
        let s = self.gpu.stream().clone();
        if map.len() > self.capacity.voxels || map.hash().capacity() > self.slots.capacity() / 4 {
            let voxels = map.len().max(self.capacity.voxels);
            let slots = map.hash().capacity().max(slots_for(voxels));
            self.voxels = DeviceBuffer::zeros(&s, VOXEL_VALUES * voxels, "NDT voxels")?;
            self.slots = DeviceBuffer::zeros(&s, 4 * slots, "NDT voxel hash")?;
            self.counters.allocations += 2;
            self.capacity.voxels = voxels;
        }
        pack_voxels(map, &mut self.scratch);
        self.voxels.upload(&s, &self.scratch)?;
        self.slots.upload(&s, map.hash().slots_flat())?;
        s.synchronize().map_err(Error::driver("uploading the NDT target"))?;
        self.counters.bytes_up += (8 * self.scratch.len() + 4 * map.hash().slots_flat().len()) as u64;
        let capacity = map.hash().capacity();
        let slot_mask = u32::try_from(capacity - 1).map_err(|_| Error::Capacity {
            what: "NDT voxel hash slots".into(),
            needed: capacity,
            capacity: u32::MAX as usize,
        })?;
        let r = map.resolution_m();
        self.target = Some(TargetInfo { inv_resolution: 1.0 / r, radius_sq: r * r, slot_mask, gauss });
        Ok(())
    }

    /// Uploads one source cloud (metres, source frame), replacing any uploaded before; it is
    /// source 0 of the requests.
    pub fn upload_source(&mut self, points: &[[f32; 3]]) -> Result<()> {
        self.upload_sources(&[points])
    }

    /// Uploads several source clouds (source `i` is `clouds[i]`), replacing any uploaded before.
    /// Grows the point buffer (and the block partials) when they need more than the capacity.
    pub fn upload_sources(&mut self, clouds: &[&[[f32; 3]]]) -> Result<()> {
        let total: usize = clouds.iter().map(|c| c.len()).sum();
        check_points(total)?;
        let s = self.gpu.stream().clone();
        if total > self.capacity.points {
            self.points = DeviceBuffer::zeros(&s, 3 * total, "NDT source points")?;
            self.counters.allocations += 1;
            self.capacity.points = total;
            let slots = partial_slots(&self.gpu, &self.capacity);
            if SLOT_VALUES * slots > self.partials.capacity() {
                self.partials = DeviceBuffer::zeros(&s, SLOT_VALUES * slots, "NDT block partials")?;
                self.counters.allocations += 1;
            }
        }
        self.sources.clear();
        let mut first = 0usize;
        for c in clouds {
            let flat = c.as_flattened();
            if !flat.is_empty() {
                let mut dst = self.points.slice_mut().slice_mut(3 * first..3 * first + flat.len());
                s.memcpy_htod(flat, &mut dst).map_err(Error::driver("uploading NDT source points"))?;
            }
            // Both fit u32: check_points bounded the total.
            self.sources.push((first as u32, c.len() as u32));
            first += c.len();
        }
        self.points.set_len(3 * total)?;
        s.synchronize().map_err(Error::driver("uploading NDT source points"))?;
        self.counters.bytes_up += 12 * total as u64;
        Ok(())
    }

    /// Score, gradient and Hessian of uploaded source `source` at `pose` (one round).
    pub fn linearize_pose(&mut self, source: usize, pose: &Pose6) -> Result<Linearization> {
        let mut v = self.linearize(&[LinearizeRequest { source, pose: *pose }])?;
        Ok(v.remove(0))
    }

    /// One launch for `reqs` (at most the request capacity).
    fn round(&mut self, reqs: &[LinearizeRequest], out: &mut Vec<Linearization>) -> Result<()> {
        let t = self.target.as_ref().ok_or_else(|| Error::input("GPU NDT pipeline: upload_target before linearizing"))?;
        let n = reqs.len();
        let mut max_points = 0usize;
        for (k, r) in reqs.iter().enumerate() {
            let &(first, count) = self.sources.get(r.source).ok_or_else(|| {
                Error::input(format!("source index {} out of range ({} sources uploaded)", r.source, self.sources.len()))
            })?;
            max_points = max_points.max(count as usize);
            self.requests.write(REQUEST_WORDS * k, &pack_request(&r.pose, first, count))?;
        }
        // Poison the result slots so a record the kernel did not write cannot pass for one.
        self.results.fill(0, VALUES * n, f64::NAN)?;
        // Host writes to the mapped buffers must be complete before the launch is issued.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);

        let target_blocks = self.gpu.facts().sm_count as usize * BLOCKS_PER_SM;
        let slots = self.partials.capacity() / SLOT_VALUES;
        let per_request = max_points.div_ceil(BLOCK as usize).min(target_blocks / n).min(slots / n).max(1);
        let (probe_start, probe_count, radius) = match self.search {
            NeighbourSearch::Direct1 => (PROBES_DIRECT7, 1u32, 0u32),
            NeighbourSearch::Direct7 => (PROBES_DIRECT7, 7, 0),
            NeighbourSearch::Direct27 => (PROBES_DIRECT27, 27, 0),
            NeighbourSearch::Radius => (PROBES_DIRECT27, 27, 1),
        };
        let s = self.gpu.stream().clone();
        let (requests_ptr, results_ptr) = match (&mut self.staging, self.transfer) {
            (Some((rq, rs)), Transfer::Copy) => {
                let (dst, _sync) = rq.slice_mut().device_ptr_mut(&s);
                // SAFETY: the source is `n` request records inside the mapped buffer (written
                // above, bounds checked by `write`), the destination holds the whole request
                // capacity, and the stream is synchronized before either buffer is reused.
                let src = unsafe { std::slice::from_raw_parts(self.requests.host_ptr(), REQUEST_WORDS * n) };
                unsafe { cu::memcpy_htod_async(dst, src, s.cu_stream()) }.map_err(Error::driver("cuMemcpyHtoDAsync (NDT requests)"))?;
                (dst, rs.slice().device_ptr(&s).0)
            }
            _ => (self.requests.device_ptr(), self.results.device_ptr()),
        };
        let neg_half_d2 = -0.5 * t.gauss.d2;
        let neg_d2 = -t.gauss.d2;
        let cfg = LaunchConfig { grid_dim: (per_request as u32, n as u32, 1), block_dim: (BLOCK, 1, 1), shared_mem_bytes: 0 };
        let mut lb = s.launch_builder(&self.func);
        lb.arg(self.points.slice())
            .arg(self.voxels.slice())
            .arg(self.slots.slice())
            .arg(&t.slot_mask)
            .arg(&requests_ptr)
            .arg(self.partials.slice())
            .arg(self.counters_dev.slice())
            .arg(&results_ptr)
            .arg(&t.inv_resolution)
            .arg(&t.radius_sq)
            .arg(&neg_half_d2)
            .arg(&neg_d2)
            .arg(&probe_start)
            .arg(&probe_count)
            .arg(&radius);
        // SAFETY: the arguments match ndt_derivatives' parameters in order and type. Every
        // request names points inside the uploaded sources (first + count ≤ points uploaded);
        // voxel indices come from the uploaded hash, whose entries index the uploaded voxels;
        // the table has an empty slot (load ≤ 1/2), so probing ends; the grid has n ≤ request
        // capacity rows and n · per_request ≤ partial slots; blocks are exactly BLOCK threads.
        unsafe { lb.launch(cfg) }.map_err(Error::driver("launching ndt_derivatives"))?;
        if let (Some((_, rs)), Transfer::Copy) = (&self.staging, self.transfer) {
            let (src, _sync) = rs.slice().device_ptr(&s);
            // SAFETY: the destination is the first `n` result records of the mapped buffer,
            // which holds the whole request capacity; nothing reads it until the stream is
            // synchronized below.
            let dst = unsafe { std::slice::from_raw_parts_mut(self.results.host_ptr(), VALUES * n) };
            unsafe { cu::memcpy_dtoh_async(dst, src, s.cu_stream()) }.map_err(Error::driver("cuMemcpyDtoHAsync (NDT results)"))?;
        }
        s.synchronize().map_err(Error::driver("running ndt_derivatives"))?;
        self.counters.launches += 1;
        self.counters.requests += n as u64;
        self.counters.bytes_up += (REQUEST_BYTES * n) as u64;
        self.counters.bytes_down += (RESULT_BYTES * n) as u64;
        let mut rec = [0.0f64; VALUES];
        for (k, r) in reqs.iter().enumerate() {
            self.results.read(VALUES * k, &mut rec)?;
            out.push(decode_result(&rec, t.gauss, self.sources[r.source].1 as usize)?);
        }
        Ok(())
    }
}

fn check_points(n: usize) -> Result<()> {
    const MAX: usize = 1 << 31;
    if n > MAX {
        return Err(Error::Capacity { what: "NDT source points".into(), needed: n, capacity: MAX });
    }
    Ok(())
}

impl Linearize for GpuDerivativePipeline {
    fn source_count(&self) -> usize {
        self.sources.len()
    }

    fn source_len(&self, source: usize) -> usize {
        self.sources.get(source).map_or(0, |s| s.1 as usize)
    }

    /// One launch per `capacity.requests` requests (normally one launch for the whole round).
    fn linearize(&mut self, requests: &[LinearizeRequest]) -> Result<Vec<Linearization>> {
        let mut out = Vec::with_capacity(requests.len());
        for chunk in requests.chunks(self.capacity.requests) {
            self.round(chunk, &mut out)?;
        }
        Ok(out)
    }
}

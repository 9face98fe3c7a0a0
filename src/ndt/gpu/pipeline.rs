//! [`GpuDerivativePipeline`]: the NDT objective on the GPU behind the [`Linearize`] seam.
//!
//! Every device buffer is allocated when the pipeline is created (or grown by an upload that
//! needs more, between alignments); an evaluation round allocates nothing. Per round the first
//! request (80 bytes) travels in the kernel's parameters and any further ones in one
//! asynchronous copy; `ndt_derivatives` runs once for all of them and its last blocks write the
//! results (232 bytes each) straight into mapped host memory; then one synchronization. A
//! single alignment therefore costs one launch and one synchronization per iteration, with no
//! copy command. On a device that cannot map host memory (or with [`Transfer::Copy`]) results
//! land in a device buffer and come back with one copy per round. [`PipelineCounters`] records
//! what crossed the bus and how often the device was asked to allocate or launch.

use super::config::{GpuCapacity, PipelineCounters, Transfer};
use super::mapped::{device_can_map, MappedBuffer};
use super::records::*;
use super::tuning::{DeviceCells, VoxelLookup};
use crate::kernels::ndt::derivatives::{SLOT_VALUES, SPLIT_POINTS_PER_BLOCK};
use crate::ndt::derivatives::GaussConstants;
use crate::ndt::linearize::{Linearization, Linearize, LinearizeRequest, SplitLinearize};
use crate::ndt::pose::Pose6;
use crate::ndt::search::NeighbourSearch;
use crate::ndt::voxel_map::VoxelMap;
use crate::runtime::{DeviceBuffer, Gpu, LoadedKernel};
use crate::{Error, Result};
use std::sync::Arc;

mod batch;
mod launch;
mod round;
mod server;
mod solve;
mod split;
mod tail;

pub use batch::{BatchSolveStats, BatchTiming, BATCH_DEVICE_DEFAULT};
pub use server::ServerTimeouts;
pub use solve::{DeviceSolveStats, DEVICE_SOLVE_DEFAULT, DEVICE_SOLVE_OPTS_DEFAULT};

/// What a round needs to know of the uploaded target.
#[derive(Clone, Copy)]
struct TargetInfo {
    inv_resolution: f64,
    radius_sq: f64,
    slot_mask: u32,
    gauss: GaussConstants,
}

/// The GPU implementation of [`Linearize`]; see the module docs.
pub struct GpuDerivativePipeline {
    /// The device solver (`solve/`; first, so it waits for its kernel before the buffers go).
    solve: solve::SolveState,
    gpu: Arc<Gpu>,
    func: LoadedKernel,
    search: NeighbourSearch,
    outlier_ratio: f64,
    transfer: Transfer,
    capacity: GpuCapacity,
    points: DeviceBuffer<f32>,
    voxels: DeviceBuffer<f64>,
    slots: DeviceBuffer<i32>,
    partials: DeviceBuffer<f64>,
    counters_dev: DeviceBuffer<u32>,
    requests_dev: DeviceBuffer<u64>,
    results_dev: Option<DeviceBuffer<f64>>,
    requests: MappedBuffer<u64>,
    results: MappedBuffer<f64>,
    sources: Vec<(u32, u32)>,
    target: Option<TargetInfo>,
    counters: PipelineCounters,
    scratch: Vec<f64>,
    pub(super) lookup: VoxelLookup,
    pub(super) cells: DeviceCells,
    pub(super) sort_sources: bool,
    /// Blocks per SM a round's grid aims for (see [`super::variants::blocks_per_sm_from_env`]).
    blocks_per_sm: usize,
    /// Batches may run as two groups in flight (`split.rs`).
    split: bool,
    /// The block partials hold two groups' grids.
    split_partials: bool,
    /// Each split group's round in flight.
    groups: [Option<split::GroupRound>; 2],
    /// The persistent evaluation server (`server.rs`).
    server: server::ServerState,
    /// A lockstep batch of several alignments is running (between `start_alignment` and
    /// `finish_alignment`): its rounds, like a split batch's, all run the kernel for any round
    /// (`round.rs`), so a batch evaluates every pose with one build.
    lockstep_batch: bool,
    /// How the tail of a batch runs (`tail.rs`).
    tail: tail::TailPolicy,
    /// The batch device solve (`batch/`).
    batch: batch::BatchSolveState,
}

/// Hash slots the CPU builds for `voxels` voxels (`VoxelHash::build`'s rule).
fn slots_for(voxels: usize) -> usize {
    (2 * voxels).next_power_of_two().max(16)
}

/// Partial slots for the grids a round may use: up to `target` blocks in all, each request as
/// many as its points fill. (Counting one request's blocks only left a 256-request round of a
/// 16k-point source with one block per request: 0.6 waves, 18.4 ms instead of 12.6 for the batch.)
fn partial_slots(gpu: &Gpu, cap: &GpuCapacity, blocks_per_sm: usize) -> usize {
    let target = gpu.facts().sm_count as usize * blocks_per_sm;
    // Blocks of the split variant cover half as many points (`SPLIT_POINTS_PER_BLOCK`).
    let per_request = cap.points.div_ceil(SPLIT_POINTS_PER_BLOCK as usize);
    cap.requests
        .max(target.min(cap.requests.saturating_mul(per_request)).max(1))
}

impl GpuDerivativePipeline {
    /// A pipeline on `gpu` sized for `capacity`, scoring with `search` and `outlier_ratio`.
    ///
    /// Errors: [`Error::Input`] for an outlier ratio outside (0, 1) or a request capacity outside
    /// `1..=65535`; [`Error::Capacity`] for more than 2³¹ points; driver errors (allocation, module
    /// load).
    pub fn new(
        gpu: Arc<Gpu>,
        capacity: GpuCapacity,
        search: NeighbourSearch,
        outlier_ratio: f64,
    ) -> Result<Self> {
        GaussConstants::new(1.0, outlier_ratio)?;
        capacity.check()?;
        let func = super::variants::derivative_kernel(
            &gpu,
            super::variants::variant_from_env(false, false),
        )?;
        let s = gpu.stream().clone();
        let blocks_per_sm = super::variants::blocks_per_sm_from_env();
        let split = split::split_from_env();
        let slots = partial_slots(&gpu, &capacity, blocks_per_sm) * if split { 2 } else { 1 };
        let points = DeviceBuffer::zeros(&s, 3 * capacity.points, "NDT source points")?;
        let voxels = DeviceBuffer::zeros(&s, VOXEL_VALUES * capacity.voxels, "NDT voxels")?;
        let hash = DeviceBuffer::zeros(&s, 4 * slots_for(capacity.voxels), "NDT voxel hash")?;
        let partials = DeviceBuffer::zeros(&s, SLOT_VALUES * slots, "NDT block partials")?;
        let counters_dev = DeviceBuffer::zeros(&s, capacity.requests, "NDT request counters")?;
        let requests_dev =
            DeviceBuffer::zeros(&s, REQUEST_WORDS * capacity.requests, "NDT requests")?;
        let requests = MappedBuffer::new(&gpu, REQUEST_WORDS * capacity.requests, false)?;
        let can_map = device_can_map(&gpu);
        let results = MappedBuffer::new(&gpu, VALUES * capacity.requests, can_map)?;
        // Six device buffers and two pinned host buffers.
        let allocations = 8;
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
            requests_dev,
            results_dev: None,
            requests,
            results,
            sources: Vec::new(),
            target: None,
            counters: PipelineCounters {
                allocations,
                ..Default::default()
            },
            scratch: Vec::new(),
            lookup: VoxelLookup::from_env(),
            cells: DeviceCells::none(),
            sort_sources: super::tuning::sort_from_env(),
            blocks_per_sm,
            split,
            split_partials: split,
            groups: [None, None],
            server: server::ServerState::from_env(),
            solve: solve::SolveState::from_env(),
            lockstep_batch: false,
            tail: tail::TailPolicy::from_env(),
            batch: batch::BatchSolveState::from_env(),
            gpu,
        };
        if !can_map {
            p.set_transfer(Transfer::Copy)?;
        }
        Ok(p)
    }

    /// Opens the default GPU and creates a pipeline on it.
    ///
    /// Errors: [`Error::NoDevice`] without a usable GPU (callers fall back to the CPU), then as
    /// [`GpuDerivativePipeline::new`].
    pub fn open_default(
        capacity: GpuCapacity,
        search: NeighbourSearch,
        outlier_ratio: f64,
    ) -> Result<Self> {
        Self::new(Gpu::open_default()?, capacity, search, outlier_ratio)
    }

    /// Switches how results travel ([`Transfer::Copy`] allocates a small device buffer once).
    /// Errors: [`Error::NoDevice`] when asking for [`Transfer::Mapped`] on a device that cannot
    /// map host memory; driver errors.
    pub fn set_transfer(&mut self, transfer: Transfer) -> Result<()> {
        self.stop_server()?;
        if transfer == Transfer::Mapped && self.results.device_ptr().is_none() {
            return Err(Error::NoDevice {
                reason: "the device cannot map host memory (zero-copy)".into(),
            });
        }
        if transfer == Transfer::Copy && self.results_dev.is_none() {
            let rs = DeviceBuffer::zeros(
                self.gpu.stream(),
                self.results.len(),
                "NDT results (device copy)",
            )?;
            self.counters.allocations += 1;
            self.results_dev = Some(rs);
        }
        self.transfer = transfer;
        Ok(())
    }

    /// How results travel now.
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
        let staging = self.results_dev.as_ref().map_or(0, |b| b.allocated_bytes());
        self.points.allocated_bytes()
            + self.requests_dev.allocated_bytes()
            + self.voxels.allocated_bytes()
            + self.slots.allocated_bytes()
            + self.partials.allocated_bytes()
            + self.counters_dev.allocated_bytes()
            + self.cells.bytes()
            + staging
    }

    /// Bytes of pinned host memory the pipeline holds.
    pub fn pinned_bytes(&self) -> usize {
        self.requests.bytes() + self.results.bytes()
    }

    /// The Gaussian constants of the uploaded target (`None` before [`Self::upload_target`]).
    pub fn gauss(&self) -> Option<GaussConstants> {
        self.target.as_ref().map(|t| t.gauss)
    }

    /// Uploads the target map: voxel records and the CPU's hash table, which the kernel probes
    /// as is, and (with [`VoxelLookup::Dense`], the default) the dense cell table, which it then
    /// reads instead. Grows the voxel buffers when the map is larger than the capacity.
    pub fn upload_target(&mut self, map: &VoxelMap) -> Result<()> {
        self.stop_server()?;
        let gauss = GaussConstants::new(map.resolution_m(), self.outlier_ratio)?;
        let s = self.gpu.stream().clone();
        if map.len() > self.capacity.voxels || map.hash().capacity() > self.slots.capacity() / 4 {
            let voxels = map.len().max(self.capacity.voxels);
            GpuCapacity {
                voxels,
                ..self.capacity
            }
            .check()?;
            let slots = map.hash().capacity().max(slots_for(voxels));
            self.voxels = DeviceBuffer::zeros(&s, VOXEL_VALUES * voxels, "NDT voxels")?;
            self.slots = DeviceBuffer::zeros(&s, 4 * slots, "NDT voxel hash")?;
            self.counters.allocations += 2;
            self.capacity.voxels = voxels;
        }
        pack_voxels(map, &mut self.scratch);
        self.voxels.upload(&s, &self.scratch)?;
        self.slots.upload(&s, map.hash().slots_flat())?;
        let direct7 = self.search == NeighbourSearch::Direct7;
        self.counters.allocations += self
            .cells
            .upload(&self.gpu, &s, map, self.lookup, direct7)?;
        s.synchronize()
            .map_err(Error::driver("uploading the NDT target"))?;
        self.counters.bytes_up +=
            (8 * self.scratch.len() + 4 * map.hash().slots_flat().len()) as u64;
        let capacity = map.hash().capacity();
        let slot_mask = u32::try_from(capacity - 1).map_err(|_| Error::Capacity {
            what: "NDT voxel hash slots".into(),
            needed: capacity,
            capacity: u32::MAX as usize,
        })?;
        let r = map.resolution_m();
        self.target = Some(TargetInfo {
            inv_resolution: 1.0 / r,
            radius_sq: r * r,
            slot_mask,
            gauss,
        });
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
        self.stop_server()?;
        let total: usize = clouds.iter().map(|c| c.len()).sum();
        check_points(total)?;
        let s = self.gpu.stream().clone();
        if total > self.capacity.points {
            self.points = DeviceBuffer::zeros(&s, 3 * total, "NDT source points")?;
            self.counters.allocations += 1;
            self.capacity.points = total;
            let groups = if self.split_partials { 2 } else { 1 };
            let slots = groups * partial_slots(&self.gpu, &self.capacity, self.blocks_per_sm);
            if SLOT_VALUES * slots > self.partials.capacity() {
                self.partials = DeviceBuffer::zeros(&s, SLOT_VALUES * slots, "NDT block partials")?;
                self.counters.allocations += 1;
            }
        }
        self.sources.clear();
        let mut first = 0usize;
        let cell_m = self.target.as_ref().map_or(1.0, |t| 1.0 / t.inv_resolution);
        for c in clouds {
            let stored = super::tuning::stored_order(c, self.sort_sources, cell_m);
            let flat = stored.as_flattened();
            if !flat.is_empty() {
                let mut dst = self
                    .points
                    .slice_mut()
                    .slice_mut(3 * first..3 * first + flat.len());
                s.memcpy_htod(flat, &mut dst)
                    .map_err(Error::driver("uploading NDT source points"))?;
            }
            // Both fit u32: check_points bounded the total.
            self.sources.push((first as u32, c.len() as u32));
            first += c.len();
        }
        self.points.set_len(3 * total)?;
        s.synchronize()
            .map_err(Error::driver("uploading NDT source points"))?;
        self.counters.bytes_up += 12 * total as u64;
        Ok(())
    }

    /// Score, gradient and Hessian of uploaded source `source` at `pose` (one round).
    pub fn linearize_pose(&mut self, source: usize, pose: &Pose6) -> Result<Linearization> {
        let mut v = self.linearize(&[LinearizeRequest {
            source,
            pose: *pose,
        }])?;
        Ok(v.remove(0))
    }
}

fn check_points(n: usize) -> Result<()> {
    GpuCapacity {
        points: n,
        voxels: 0,
        requests: 1,
    }
    .check()
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
        if self.server_running() {
            if let [one] = requests {
                return Ok(vec![self.serve_one(one)?]);
            }
            self.stop_server()?;
        }
        let mut out = Vec::with_capacity(requests.len());
        for chunk in requests.chunks(self.capacity.requests) {
            self.round(chunk, &mut out)?;
        }
        Ok(out)
    }

    /// A single alignment runs on the evaluation server when it is enabled (`server.rs`).
    /// A server that cannot start (a cooperative launch the device refuses, say) leaves the
    /// alignment to the ordinary rounds.
    fn start_alignment(&mut self, jobs: usize) -> Result<()> {
        self.lockstep_batch = jobs > 1;
        if jobs == 1 && self.start_server().is_err() {
            self.server_start_failed();
        }
        Ok(())
    }

    fn finish_alignment(&mut self) -> Result<()> {
        self.lockstep_batch = false;
        self.stop_server_quick()
    }

    /// The device solver (`solve/`), when it is on and can take this alignment.
    fn align_whole(
        &mut self,
        source: usize,
        init: &nalgebra::Isometry3<f64>,
        params: &crate::ndt::params::SolverParams,
    ) -> Result<Option<crate::ndt::result::NdtResult>> {
        self.align_device(source, init, params)
    }

    /// The batch device solve (`batch/`), when it is on and can take this batch.
    fn align_batch_whole(
        &mut self,
        jobs: &[crate::ndt::solver::AlignJob],
        params: &crate::ndt::params::SolverParams,
    ) -> Result<Option<Vec<Option<crate::ndt::result::NdtResult>>>> {
        self.align_batch_device(jobs, params)
    }

    fn split(&mut self, jobs: usize) -> Option<&mut dyn SplitLinearize> {
        if self.stop_server().is_err() || !self.can_split(jobs) {
            return None;
        }
        // A batch that failed part way may have left a round behind; its records are rewritten.
        self.groups = [None, None];
        self.begin_split().ok()?;
        Some(self)
    }
}

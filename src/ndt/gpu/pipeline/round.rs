//! One evaluation round of [`GpuDerivativePipeline`]: pack the requests into pinned memory,
//! send them (request 0 in the kernel's parameters, the rest in one asynchronous copy), launch
//! `ndt_derivatives` once, bring the results back (mapped memory, or one copy), synchronize once,
//! decode.

use super::launch::probe_args;
use super::{GpuDerivativePipeline, TargetInfo};
use crate::kernels::ndt::derivatives::{BLOCK, SLOT_VALUES, SPLIT_POINTS_PER_BLOCK};
use crate::ndt::gpu::config::Transfer;
use crate::ndt::gpu::records::*;
use crate::ndt::linearize::{Linearization, LinearizeRequest};
use crate::{Error, Result};
use cudarc::driver::{DevicePtr, LaunchConfig};

/// Where a round's records live: requests and results from request slot `off` on, block
/// partials from slot `partial_off` on (`partial_slots` of them). A plain round uses all of
/// them; the two groups of a split batch (`split.rs`) each use their half, and `group` says
/// which stream the round runs on (`tail.rs`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Region {
    pub(super) off: usize,
    pub(super) partial_off: usize,
    pub(super) partial_slots: usize,
    pub(super) group: usize,
}

/// What packing found out about a round.
struct Packed {
    /// Request 0's record, which travels in the kernel's parameters.
    first: [u64; REQUEST_WORDS],
    /// The most points any request of the round covers (sizes the grid).
    max_points: usize,
}

impl GpuDerivativePipeline {
    /// One launch for `reqs` (at most the request capacity).
    pub(super) fn round(
        &mut self,
        reqs: &[LinearizeRequest],
        out: &mut Vec<Linearization>,
    ) -> Result<()> {
        let t = *self
            .target
            .as_ref()
            .ok_or_else(|| Error::input("GPU NDT pipeline: upload_target before linearizing"))?;
        let region = Region {
            off: 0,
            partial_off: 0,
            partial_slots: self.partials.capacity() / SLOT_VALUES,
            group: 0,
        };
        let n = reqs.len();
        self.start_round(&t, reqs, region, self.lockstep_batch)?;
        self.fetch_results(n)?;
        self.decode(reqs, &t, region.off, out)
    }

    /// Packs, sends and launches one round in `region` without waiting for it; `batch`: the
    /// round belongs to a batch of alignments (see `launch`).
    pub(super) fn start_round(
        &mut self,
        t: &TargetInfo,
        reqs: &[LinearizeRequest],
        region: Region,
        batch: bool,
    ) -> Result<()> {
        let packed = self.pack(reqs, region.off)?;
        let n = reqs.len();
        self.send_requests(&region, n)?;
        self.launch(t, &packed, n, region, batch)?;
        self.counters.launches += 1;
        self.counters.requests += n as u64;
        self.counters.bytes_up += (REQUEST_BYTES * n) as u64;
        self.counters.bytes_down += (RESULT_BYTES * n) as u64;
        Ok(())
    }

    /// Packing: checks every request's source, writes requests 1.. into the pinned request
    /// buffer and poisons the result slots (NaN), so that a record the kernel did not write
    /// cannot pass for one.
    fn pack(&mut self, reqs: &[LinearizeRequest], off: usize) -> Result<Packed> {
        let mut packed = Packed {
            first: [0; REQUEST_WORDS],
            max_points: 0,
        };
        for (k, r) in reqs.iter().enumerate() {
            let &(start, count) = self.sources.get(r.source).ok_or_else(|| {
                Error::input(format!(
                    "source index {} out of range ({} sources uploaded)",
                    r.source,
                    self.sources.len()
                ))
            })?;
            packed.max_points = packed.max_points.max(count as usize);
            let words = pack_request(&r.pose, start, count);
            if k == 0 {
                packed.first = words;
            } else {
                self.requests.write(REQUEST_WORDS * (off + k), &words)?;
            }
        }
        self.results
            .fill(VALUES * off, VALUES * reqs.len(), f64::NAN)?;
        // Host writes to the pinned buffers must be complete before copies and the launch.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(packed)
    }

    /// Transfer up: requests 1..n in one asynchronous copy (request 0 travels in the launch's
    /// parameters).
    fn send_requests(&mut self, region: &Region, n: usize) -> Result<()> {
        let off = region.off;
        if n > 1 {
            let s = self.region_stream(region).clone();
            let range = REQUEST_WORDS * (off + 1)..REQUEST_WORDS * (off + n);
            let mut dst = self.requests_dev.slice_mut().slice_mut(range.clone());
            self.requests.upload(&s, range, &mut dst)?;
        }
        Ok(())
    }

    /// Where the kernel writes the result of request slot `off`: the mapped host buffer, or
    /// the device copy.
    fn results_ptr(&self, off: usize) -> Result<u64> {
        let s = self.gpu.stream();
        let bytes = (RESULT_BYTES * off) as u64;
        match (&self.results_dev, self.transfer, self.results.device_ptr()) {
            (_, Transfer::Mapped, Some(p)) => Ok(p + bytes),
            (Some(rs), _, _) => Ok(rs.slice().device_ptr(s).0 + bytes),
            _ => Err(Error::input(
                "GPU NDT pipeline: no result buffer for the transfer mode",
            )),
        }
    }

    /// One `ndt_derivatives` launch for `n` requests: `n` rows of blocks, as many per request as
    /// its points need, within the block-partial slots and about two waves of the device.
    /// With the mixed-precision build for any round, or a batch kernel (the cross-product
    /// build), every round of a batch (`batch`) runs it, small ones too: split and lockstep
    /// batches then evaluate each pose with the same build.
    fn launch(
        &self,
        t: &TargetInfo,
        packed: &Packed,
        n: usize,
        region: Region,
        batch: bool,
    ) -> Result<()> {
        let target_blocks = self.gpu.facts().sm_count as usize * self.blocks_per_sm;
        let slots = region.partial_slots;
        let per_request = packed
            .max_points
            .div_ceil(BLOCK as usize)
            .min(target_blocks / n)
            .min(slots / n)
            .max(1);
        // A batch round's requests may get fewer, fuller blocks (`tail.rs`).
        let per_request = if batch {
            self.tail
                .cap_blocks(per_request, packed.max_points, BLOCK as usize)
        } else {
            per_request
        };
        let (probe_start, probe_count, radius) = probe_args(self.search);
        let results_ptr = self.results_ptr(region.off)?;
        // The region's records: the kernel indexes them by the launch's request row.
        let requests = self
            .requests_dev
            .slice()
            .slice(REQUEST_WORDS * region.off..);
        let partials = self
            .partials
            .slice()
            .slice(SLOT_VALUES * region.partial_off..SLOT_VALUES * (region.partial_off + slots));
        let counters = self.counters_dev.slice().slice(region.off..);
        let first = &packed.first;
        let r0: [f64; 9] = std::array::from_fn(|k| f64::from_bits(first[k]));
        let (r0_first, r0_count) = (first[9] as u32, (first[9] >> 32) as u32);
        let neg_half_d2 = -0.5 * t.gauss.d2;
        let neg_d2 = -t.gauss.d2;
        let s = self.region_stream(&region);
        let dense = self.cells.active();
        // Every round of a batch runs the batch kernel when there is one (the cross build).
        let batch_kernel = self.cells.batch_kernel().filter(|_| batch);
        // A round of at most one block per SM is bound by one thread's latency, not throughput.
        let small = n * per_request <= self.gpu.facts().sm_count as usize
            && !(batch && self.cells.batch_large())
            && batch_kernel.is_none();
        // `large`: the dense kernel for any round (the one that may be the mixed build).
        let (func, large) = match (&dense, batch_kernel) {
            (Some(_), Some(k)) => (k, false),
            (Some((_, Some(k), _)), None) if small => (*k, false),
            (Some((k, _, _)), None) => (*k, true),
            (None, _) => (&self.func, false),
        };
        // The split variant covers half as many points per block: twice the blocks.
        let per_request = if small && dense.is_some() && self.cells.small_split() {
            packed
                .max_points
                .div_ceil(SPLIT_POINTS_PER_BLOCK as usize)
                .min(target_blocks / n)
                .min(slots / n)
                .max(1)
        } else {
            per_request
        };
        let cfg = LaunchConfig {
            grid_dim: (per_request as u32, n as u32, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut lb = func.launch(s, cfg);
        lb.arg(self.points.slice());
        // The batch kernel built with wide records reads the padded copy.
        match self.cells.wide_records().filter(|_| batch_kernel.is_some()) {
            Some(wide) => lb.arg(wide),
            None => lb.arg(self.voxels.slice()),
        };
        lb.arg(self.slots.slice())
            .arg(&t.slot_mask)
            .arg(&requests)
            .arg(&partials)
            .arg(&counters)
            .arg(&results_ptr)
            .arg(&t.inv_resolution)
            .arg(&t.radius_sq)
            .arg(&neg_half_d2)
            .arg(&neg_d2)
            .arg(&probe_start)
            .arg(&probe_count)
            .arg(&radius);
        for v in &r0 {
            lb.arg(v);
        }
        lb.arg(&r0_first).arg(&r0_count);
        if let Some((_, _, cells)) = &dense {
            cells.push(&mut lb);
        }
        if let Some(cov32) = self.cells.cov32().filter(|_| large) {
            lb.arg(cov32);
        }
        // SAFETY: (argument types and the .reqntid block are checked against ndt_derivatives'
        // contract) every request names points inside the uploaded sources (first + count ≤ points
        // uploaded) and requests 1..n of the region were copied by `send_requests`; voxel
        // indices come from the uploaded hash, whose entries index the uploaded voxels, and the
        // table has an empty slot (load ≤ 1/2), so probing ends; the grid has n rows with
        // off + n ≤ request capacity (requests, counters and results of the region) and n ·
        // per_request ≤ the region's partial slots; blocks are exactly BLOCK threads; when the
        // results are the mapped host buffer the host views the region only after its round was
        // waited for (`fetch_results`, or the group's event in `split.rs`); the mixed build's
        // `cov32` table was uploaded with the dense table and holds one 48-byte record per
        // uploaded voxel, the indices the dense table gives; so do the padded records (96 bytes
        // each) that the batch kernel built with wide records reads.
        unsafe { lb.launch() }?;
        Ok(())
    }

    /// Transfer down: with [`Transfer::Copy`] one copy of the `n` result records into the
    /// pinned buffer (mapped results are already there); either way the round's one
    /// synchronization.
    fn fetch_results(&mut self, n: usize) -> Result<()> {
        let s = self.gpu.stream();
        match (&self.results_dev, self.transfer) {
            (Some(rs), Transfer::Copy) => {
                let src = rs.slice().slice(0..VALUES * n);
                self.results.download_now(s, &src, 0)
            }
            _ => s
                .synchronize()
                .map_err(Error::driver("running ndt_derivatives")),
        }
    }

    /// Decoding: one [`Linearization`] per request from its result record.
    pub(super) fn decode(
        &self,
        reqs: &[LinearizeRequest],
        t: &TargetInfo,
        off: usize,
        out: &mut Vec<Linearization>,
    ) -> Result<()> {
        let mut rec = [0.0f64; VALUES];
        for (k, r) in reqs.iter().enumerate() {
            self.results.read(VALUES * (off + k), &mut rec)?;
            let points = self.sources[r.source].1 as usize;
            out.push(decode_result(&rec, t.gauss, points)?);
        }
        Ok(())
    }
}

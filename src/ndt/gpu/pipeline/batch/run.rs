//! The batch device solve's buffers, launches and the host's loop (see the parent's docs).

use super::super::launch::stream_idle;
use super::super::{GpuDerivativePipeline, TargetInfo};
use super::rounds::SolveArgs;
use crate::kernels::ndt::derivatives::SLOT_VALUES;
use crate::kernels::ndt::solve::batch::BATCH_OUT_WORDS;
use crate::kernels::ndt::solve::{PHASE_START, STATE_WORDS};
use crate::ndt::gpu::mapped::MappedBuffer;
use crate::ndt::gpu::records::{pack_request, REQUEST_WORDS, VALUES};
use crate::ndt::params::SolverParams;
use crate::ndt::pose::isometry_to_pose;
use crate::ndt::solver::AlignJob;
use crate::runtime::DeviceBuffer;
use crate::{Error, Result};
use cudarc::driver::CudaStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A group's device records: solver states, the request table (row 0 unused), the rows'
/// results, block counters and partials, each row's alignment (two tables: this round's and
/// the next), per-round counts (`counts[r]`: rows of round `r`; then per-round finished-block
/// counters), each alignment's points word, and in mapped memory the results and the counts
/// the host reads.
pub(super) struct GroupBuffers {
    pub(super) cap: usize,
    pub(super) rounds: usize,
    pub(super) slots: usize,
    pub(super) state: DeviceBuffer<u64>,
    pub(super) requests: DeviceBuffer<u64>,
    pub(super) results: DeviceBuffer<f64>,
    pub(super) counters: DeviceBuffer<u32>,
    pub(super) partials: DeviceBuffer<f64>,
    pub(super) hyp: DeviceBuffer<u32>,
    pub(super) counts: DeviceBuffer<u32>,
    pub(super) points: DeviceBuffer<u64>,
    pub(super) out: MappedBuffer<u64>,
    pub(super) host_rows: MappedBuffer<u64>,
}

/// What the run leaves: every job's result words (job order) and the rounds per group.
pub(super) struct BatchOut {
    pub(super) words: Vec<u64>,
    pub(super) rounds: Vec<usize>,
    pub(super) timing: Option<super::BatchTiming>,
}

/// The most rounds one alignment can need: a first evaluation, then per iteration at most
/// the line search's evaluations (one without it), plus the empty rounds at a group's end.
/// At most [`ROUND_CAP`]: a batch that needs more fails over to the host solver.
fn max_rounds(p: &SolverParams) -> usize {
    let per_iteration = p.line_search.map_or(1, |l| l.max_evaluations.max(1));
    p.max_iterations
        .saturating_add(2)
        .saturating_mul(per_iteration)
        .saturating_add(4)
        .min(ROUND_CAP)
}

/// The most rounds a batch device solve sizes its per-round words for.
const ROUND_CAP: usize = 1 << 16;

impl GpuDerivativePipeline {
    /// Group buffers for `cap` jobs and `rounds` rounds (kept when big enough).
    fn batch_buffers(&mut self, g: usize, cap: usize, rounds: usize) -> Result<()> {
        let fits = self
            .batch
            .bufs
            .get(g)
            .is_some_and(|b| b.cap >= cap && b.rounds >= rounds);
        if fits {
            return Ok(());
        }
        let s = self.gpu.stream().clone();
        let target = self.gpu.facts().sm_count as usize * self.blocks_per_sm;
        // Room for the host path's blocks per request over `bound` rows plus the empty row.
        let slots = 2 * target.max(cap + 1);
        let can_map = true;
        let b = GroupBuffers {
            cap,
            rounds,
            slots,
            state: DeviceBuffer::zeros(&s, STATE_WORDS * cap, "NDT batch solver states")?,
            requests: DeviceBuffer::zeros(&s, REQUEST_WORDS * (cap + 1), "NDT batch requests")?,
            results: DeviceBuffer::zeros(&s, VALUES * (cap + 1), "NDT batch results")?,
            counters: DeviceBuffer::zeros(&s, cap + 1, "NDT batch counters")?,
            partials: DeviceBuffer::zeros(&s, SLOT_VALUES * slots, "NDT batch partials")?,
            hyp: DeviceBuffer::zeros(&s, 2 * (cap + 1), "NDT batch row alignments")?,
            counts: DeviceBuffer::zeros(&s, 2 * (rounds + 2), "NDT batch round counts")?,
            points: DeviceBuffer::zeros(&s, cap, "NDT batch points words")?,
            out: MappedBuffer::new(&self.gpu, BATCH_OUT_WORDS * cap, can_map)?,
            host_rows: MappedBuffer::new(&self.gpu, rounds + 2, can_map)?,
        };
        self.counters.allocations += 11;
        if g < self.batch.bufs.len() {
            self.batch.bufs[g] = b;
        } else {
            self.batch.bufs.push(b);
        }
        Ok(())
    }

    /// The stream of group `g` (the pipeline's for group 0; the others made once).
    fn batch_stream(&mut self, g: usize) -> Result<Arc<CudaStream>> {
        if g == 0 {
            return Ok(self.gpu.stream().clone());
        }
        while self.batch.streams.len() < g {
            let s = self
                .gpu
                .stream()
                .context()
                .new_stream()
                .map_err(Error::driver("cuStreamCreate (NDT batch group)"))?;
            self.batch.streams.push(s);
        }
        Ok(self.batch.streams[g - 1].clone())
    }

    /// Uploads group `g`'s jobs (its states at their initial poses, round 0's requests).
    fn batch_upload(&mut self, g: usize, jobs: &[AlignJob]) -> Result<()> {
        // The buffer's round words (a batch with fewer rounds keeps larger buffers: the
        // kernel finds the finished counters after all of them).
        let rounds = self.batch.bufs[g].rounds;
        let n = jobs.len();
        let mut state = vec![0u64; STATE_WORDS * n];
        let mut req = vec![0u64; REQUEST_WORDS * (n + 1)];
        let mut hyp = vec![0u32; n + 1];
        let mut points = vec![0u64; n];
        for (k, job) in jobs.iter().enumerate() {
            let pose = isometry_to_pose(&job.init);
            for i in 0..6 {
                state[STATE_WORDS * k + i] = pose[i].to_bits();
            }
            // Phase, iterations, evaluations, eigen-path steps: 0 (PHASE_START).
            state[STATE_WORDS * k + 18] = u64::from(PHASE_START);
            let (first, count) = self.sources[job.source];
            req[REQUEST_WORDS * (k + 1)..REQUEST_WORDS * (k + 2)]
                .copy_from_slice(&pack_request(&pose, first, count));
            hyp[k + 1] = k as u32;
            points[k] = u64::from(first) | u64::from(count) << 32;
        }
        let mut counts = vec![0u32; 2 * (rounds + 2)];
        counts[0] = n as u32;
        let s = self.gpu.stream().clone();
        let b = &mut self.batch.bufs[g];
        b.state.upload(&s, &state)?;
        b.requests.upload(&s, &req)?;
        b.hyp.upload(&s, &hyp)?;
        b.points.upload(&s, &points)?;
        b.counts.upload(&s, &counts)?;
        b.counters.upload(&s, &vec![0u32; n + 1])?;
        b.out.as_mut_slice()?.fill(0);
        b.host_rows.as_mut_slice()?.fill(u64::MAX);
        std::sync::atomic::fence(Ordering::SeqCst);
        Ok(())
    }

    /// Runs every group's chain until each published count is 0; returns the result words.
    pub(super) fn run_batch_device(
        &mut self,
        jobs: &[AlignJob],
        params: &SolverParams,
        t: &TargetInfo,
    ) -> Result<BatchOut> {
        let groups = if jobs.len() >= 2 {
            self.batch.groups
        } else {
            1
        };
        let half = jobs.len().div_ceil(groups);
        let parts: Vec<&[AlignJob]> = jobs.chunks(half).collect();
        let rounds = max_rounds(params);
        let streams: Vec<Arc<CudaStream>> = (0..parts.len())
            .map(|g| self.batch_stream(g))
            .collect::<Result<_>>()?;
        // Whatever the other streams still run (an earlier failed batch) ends before the
        // uploads.
        for s in streams[1..].iter().chain(&self.batch.solve_streams) {
            self.gpu
                .stream()
                .join(s)
                .map_err(Error::driver("cuStreamWaitEvent (NDT batch start)"))?;
        }
        for (g, part) in parts.iter().enumerate() {
            self.batch_buffers(g, part.len(), rounds)?;
            self.batch_upload(g, part)?;
        }
        for s in &streams[1..] {
            s.join(self.gpu.stream())
                .map_err(Error::driver("cuStreamWaitEvent (NDT batch uploads)"))?;
        }
        let sp = SolveArgs::new(params, t);
        self.batch.events.clear();
        let run = self.batch_loop(&parts, &streams, rounds, t, &sp);
        // Every stream ends before the results are read or the buffers reused.
        let mut synced = Ok(());
        for s in streams.iter().chain(&self.batch.solve_streams) {
            if let Err(e) = s.synchronize() {
                synced = Err(Error::driver("cuStreamSynchronize (NDT batch)")(e));
            }
        }
        let launched = run?;
        synced?;
        let timing = self.batch_timing()?;
        let mut words = Vec::with_capacity(BATCH_OUT_WORDS * jobs.len());
        for (g, part) in parts.iter().enumerate() {
            let out = self.batch.bufs[g].out.as_slice()?;
            words.extend_from_slice(&out[..BATCH_OUT_WORDS * part.len()]);
        }
        Ok(BatchOut {
            words,
            rounds: launched,
            timing,
        })
    }

    /// The host's part: launch each group's next round once the count it needs is published.
    fn batch_loop(
        &mut self,
        parts: &[&[AlignJob]],
        streams: &[Arc<CudaStream>],
        rounds: usize,
        t: &TargetInfo,
        sp: &SolveArgs,
    ) -> Result<Vec<usize>> {
        let max_points: Vec<usize> = parts
            .iter()
            .map(|p| {
                p.iter()
                    .map(|j| self.sources[j.source].1 as usize)
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut launched = vec![0usize; parts.len()];
        let mut done = vec![false; parts.len()];
        let lag = self.batch.lag;
        for (g, part) in parts.iter().enumerate() {
            for r in 0..=lag {
                self.batch_round(g, r, part.len(), max_points[g], &streams[g], t, sp)?;
                launched[g] += 1;
            }
        }
        let limit = self.server_timeouts().answer.saturating_mul(4);
        let start = Instant::now();
        let mut next_check = Duration::from_millis(1);
        let mut spins = 0u32;
        while done.iter().any(|d| !d) {
            let mut progress = false;
            for g in 0..parts.len() {
                if done[g] {
                    continue;
                }
                let r = launched[g];
                let word = self.published(g, r - lag)?;
                let Some(c) = word else { continue };
                progress = true;
                if c == 0 {
                    done[g] = true;
                    continue;
                }
                if r + 1 >= rounds {
                    return Err(Error::input(format!(
                        "NDT batch device solve: more than {rounds} rounds"
                    )));
                }
                self.batch_round(g, r, c, max_points[g], &streams[g], t, sp)?;
                launched[g] += 1;
            }
            if progress {
                continue;
            }
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(256) {
                std::hint::spin_loop();
                continue;
            }
            let waited = start.elapsed();
            if waited >= next_check {
                next_check = waited + Duration::from_millis(1);
                for g in 0..parts.len() {
                    let r = launched[g];
                    if !done[g]
                        && stream_idle(Some(&streams[g]), "cuStreamQuery (NDT batch)")?
                        && self.published(g, r - lag)?.is_none()
                    {
                        return Err(Error::input(
                            "NDT batch device solve: a round ended without its count",
                        ));
                    }
                }
            }
            if waited > limit {
                return Err(Error::input(format!(
                    "NDT batch device solve: no progress within {limit:?}"
                )));
            }
        }
        Ok(launched)
    }

    /// The count group `g`'s solver published for round `r` (`None`: not yet).
    fn published(&self, g: usize, r: usize) -> Result<Option<usize>> {
        let b = &self.batch.bufs[g];
        let a = b.host_rows.as_slice()?.as_ptr().cast_mut();
        // SAFETY: word r < rounds + 2 of the mapped counts (alive with `self`), an aligned u64
        // read atomically; the kernel stores the u32 count into its low half.
        let w = unsafe { AtomicU64::from_ptr(a.add(r)) }.load(Ordering::Acquire);
        Ok((w as u32 != u32::MAX).then_some(w as u32 as usize))
    }
}

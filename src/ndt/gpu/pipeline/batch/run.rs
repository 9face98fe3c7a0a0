//! The batch device solve's buffers, launches and the host's loop (see the parent's docs).

use super::super::launch::{probe_args, stream_idle};
use super::super::{GpuDerivativePipeline, TargetInfo};
use crate::kernels::ndt::derivatives::{BLOCK, SLOT_VALUES};
use crate::kernels::ndt::solve::batch::{BATCH_OUT_WORDS, BATCH_THREADS};
use crate::kernels::ndt::solve::{PHASE_START, STATE_WORDS};
use crate::ndt::gpu::mapped::MappedBuffer;
use crate::ndt::gpu::records::{pack_request, REQUEST_WORDS, VALUES};
use crate::ndt::params::SolverParams;
use crate::ndt::pose::isometry_to_pose;
use crate::ndt::solver::AlignJob;
use crate::runtime::DeviceBuffer;
use crate::{Error, Result};
use cudarc::driver::{sys, CudaEvent, CudaStream, DevicePtr, LaunchConfig};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A group's device records: solver states, the request table (row 0 unused), the rows'
/// results, block counters and partials, each row's alignment (two tables: this round's and
/// the next), per-round counts (`counts[r]`: rows of round `r`; then per-round finished-block
/// counters), each alignment's points word, and in mapped memory the results and the counts
/// the host reads.
pub(super) struct GroupBuffers {
    cap: usize,
    rounds: usize,
    slots: usize,
    state: DeviceBuffer<u64>,
    requests: DeviceBuffer<u64>,
    results: DeviceBuffer<f64>,
    counters: DeviceBuffer<u32>,
    partials: DeviceBuffer<f64>,
    hyp: DeviceBuffer<u32>,
    counts: DeviceBuffer<u32>,
    points: DeviceBuffer<u64>,
    out: MappedBuffer<u64>,
    host_rows: MappedBuffer<u64>,
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

    /// Round `r` of group `g` over rows `1..=bound`: the evaluation, then the solver step
    /// (with events around each when timing).
    #[allow(clippy::too_many_arguments)]
    fn batch_round(
        &mut self,
        g: usize,
        r: usize,
        bound: usize,
        max_points: usize,
        stream: &Arc<CudaStream>,
        t: &TargetInfo,
        sp: &SolveArgs,
    ) -> Result<()> {
        let e0 = self.batch_event(stream)?;
        self.batch_eval_round(g, bound, max_points, stream, t)?;
        let e1 = self.batch_event(stream)?;
        let solve_stream = self.batch_solve_stream(g, stream)?;
        self.batch_solve_round(g, r, bound, &solve_stream, sp)?;
        let e2 = self.batch_event(&solve_stream)?;
        if self.batch.priority {
            // The chain's next evaluation follows this step.
            stream
                .join(&solve_stream)
                .map_err(Error::driver("cuStreamWaitEvent (NDT batch chain)"))?;
        }
        self.counters.launches += 2;
        if let (Some(e0), Some(e1), Some(e2)) = (e0, e1, e2) {
            self.batch.events.push((g, bound, [e0, e1, e2]));
        }
        Ok(())
    }

    /// Where group `g`'s solver step runs: the chain's `stream`, or with priority on a
    /// high-priority stream of its own that waits for `stream` (so the step's blocks take the
    /// first free slots ahead of the other chain's pending evaluation blocks).
    fn batch_solve_stream(
        &mut self,
        g: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<Arc<CudaStream>> {
        if !self.batch.priority {
            return Ok(stream.clone());
        }
        while self.batch.solve_streams.len() <= g {
            let (_, greatest) = cudarc::driver::result::stream::get_priority_range()
                .map_err(Error::driver("cuCtxGetStreamPriorityRange (NDT batch)"))?;
            let p = self
                .gpu
                .stream()
                .context()
                .new_stream_with_priority(greatest)
                .map_err(Error::driver("cuStreamCreateWithPriority (NDT batch)"))?;
            self.batch.solve_streams.push(p);
        }
        let p = self.batch.solve_streams[g].clone();
        p.join(stream)
            .map_err(Error::driver("cuStreamWaitEvent (NDT batch solver step)"))?;
        Ok(p)
    }

    /// An event recorded on `stream` now, when timing (`None` otherwise).
    fn batch_event(&self, stream: &Arc<CudaStream>) -> Result<Option<CudaEvent>> {
        if !self.batch.timing {
            return Ok(None);
        }
        let e = stream
            .context()
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(Error::driver("cuEventCreate (NDT batch timing)"))?;
        e.record(stream)
            .map_err(Error::driver("cuEventRecord (NDT batch timing)"))?;
        Ok(Some(e))
    }

    /// Round `r`'s evaluation of group `g` over rows `1..=bound` (row 0 empty).
    fn batch_eval_round(
        &self,
        g: usize,
        bound: usize,
        max_points: usize,
        stream: &Arc<CudaStream>,
        t: &TargetInfo,
    ) -> Result<()> {
        let b = &self.batch.bufs[g];
        let rows = bound + 1;
        let target_blocks = self.gpu.facts().sm_count as usize * self.blocks_per_sm;
        let per_request = max_points
            .div_ceil(BLOCK as usize)
            // The host path's rule for `bound` requests (the empty row 0 comes on top).
            .min(target_blocks / bound.max(1))
            .min(b.slots / rows)
            .max(1);
        let per_request = self
            .tail
            .cap_blocks(per_request, max_points, BLOCK as usize);
        let (Some(func), Some((_, _, cells))) = (self.cells.batch_kernel(), self.cells.active())
        else {
            return Err(Error::input("GPU NDT pipeline: no batch kernel"));
        };
        let (probe_start, probe_count, radius) = probe_args(self.search);
        let ptr = |d: u64| d;
        let requests = ptr(b.requests.slice().device_ptr(stream).0);
        let partials = ptr(b.partials.slice().device_ptr(stream).0);
        let counters = ptr(b.counters.slice().device_ptr(stream).0);
        let results = ptr(b.results.slice().device_ptr(stream).0);
        let neg_half_d2 = -0.5 * t.gauss.d2;
        let neg_d2 = -t.gauss.d2;
        let zero = 0.0f64;
        let none = 0u32;
        let cfg = LaunchConfig {
            grid_dim: (per_request as u32, rows as u32, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut lb = func.launch(stream, cfg);
        lb.arg(self.points.slice());
        match self.cells.wide_records() {
            Some(wide) => lb.arg(wide),
            None => lb.arg(self.voxels.slice()),
        };
        lb.arg(self.slots.slice())
            .arg(&t.slot_mask)
            .arg(&requests)
            .arg(&partials)
            .arg(&counters)
            .arg(&results)
            .arg(&t.inv_resolution)
            .arg(&t.radius_sq)
            .arg(&neg_half_d2)
            .arg(&neg_d2)
            .arg(&probe_start)
            .arg(&probe_count)
            .arg(&radius);
        for _ in 0..9 {
            lb.arg(&zero);
        }
        lb.arg(&none).arg(&none);
        cells.push(&mut lb);
        // SAFETY: as the ordinary round's launch (`round.rs`), with the group's own records:
        // rows 1..=bound of `requests` hold a request of uploaded points or (cleared by the
        // solver) none, row 0 (the parameters) has no points; `rows · per_request ≤ slots`
        // partial slots; `counters` and `results` have `cap + 1 ≥ rows` rows; all in device
        // memory that the group's buffers keep alive (the host synchronizes the stream
        // before it reuses or drops them).
        unsafe { lb.launch() }?;
        Ok(())
    }

    /// Round `r`'s solver step of group `g` over rows `1..=bound` (after its evaluation).
    fn batch_solve_round(
        &self,
        g: usize,
        r: usize,
        bound: usize,
        stream: &Arc<CudaStream>,
        sp: &SolveArgs,
    ) -> Result<()> {
        let b = &self.batch.bufs[g];
        let requests = b.requests.slice().device_ptr(stream).0;
        let results = b.results.slice().device_ptr(stream).0;
        let kernel = self
            .batch
            .kernel
            .as_ref()
            .expect("loaded before the batch runs");
        let counts = b.counts.slice().device_ptr(stream).0;
        let hyp = b.hyp.slice().device_ptr(stream).0;
        let state = b.state.slice().device_ptr(stream).0;
        let points = b.points.slice().device_ptr(stream).0;
        let out = b.out.device_ptr().expect("mapped");
        let host_rows = b.host_rows.device_ptr().expect("mapped") + 8 * (r as u64 + 1);
        let finished_at = counts + 4 * (b.rounds as u64 + 2);
        let rows_now = counts + 4 * r as u64;
        let rows_next = counts + 4 * (r as u64 + 1);
        let finished = finished_at + 4 * r as u64;
        let table = 4 * (b.cap as u64 + 1);
        let hyp_now = hyp + table * (r as u64 % 2);
        let hyp_next = hyp + table * ((r as u64 + 1) % 2);
        let cfg = LaunchConfig {
            grid_dim: (bound as u32, 1, 1),
            block_dim: (BATCH_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut lb = kernel.launch(stream, cfg);
        lb.arg(&state)
            .arg(&results)
            .arg(&rows_now)
            .arg(&hyp_now)
            .arg(&rows_next)
            .arg(&hyp_next)
            .arg(&finished)
            .arg(&host_rows)
            .arg(&requests)
            .arg(&points)
            .arg(&out)
            .arg(&sp.max_iterations)
            .arg(&sp.step_max)
            .arg(&sp.eps_t)
            .arg(&sp.eps_r)
            .arg(&sp.line_search)
            .arg(&sp.mu)
            .arg(&sp.eta)
            .arg(&sp.ls_max)
            .arg(&sp.x_tol)
            .arg(&sp.neg_d1)
            .arg(&sp.scale);
        // SAFETY: `state` holds `cap` states, `results`/`requests` `cap + 1` rows, `hyp` two
        // tables of `cap + 1` rows (the kernel reads rows ≤ counts[r] ≤ cap and appends at most
        // one row per valid row), `counts` `2 (rounds + 2)` words with r + 1 < rounds + 2,
        // `points` and `out` (mapped, read by the host after the stream is synchronized) one
        // entry per job, `host_rows` word r + 1 of `rounds + 2` mapped words (read atomically).
        unsafe { lb.launch() }?;
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

    /// The device times of the rounds just run (events taken; `None` when not timing).
    fn batch_timing(&mut self) -> Result<Option<super::BatchTiming>> {
        let events = std::mem::take(&mut self.batch.events);
        if events.is_empty() {
            return Ok(None);
        }
        let ms = |a: &CudaEvent, b: &CudaEvent| {
            a.elapsed_ms(b)
                .map(|v| f64::from(v) * 1e3)
                .map_err(Error::driver("cuEventElapsedTime (NDT batch timing)"))
        };
        let first = &events[0].2[0];
        let mut t = super::BatchTiming::default();
        let groups = events.iter().map(|e| e.0 + 1).max().unwrap_or(0);
        let mut last_end: Vec<Option<&CudaEvent>> = vec![None; groups];
        for (g, bound, [e0, e1, e2]) in &events {
            let (e, s) = (ms(e0, e1)?, ms(e1, e2)?);
            t.eval_us += e;
            t.solve_us += s;
            t.rounds.push((*g, *bound, e, s));
            if let Some(prev) = last_end[*g] {
                t.between_us += ms(prev, e0)?.max(0.0);
            }
            last_end[*g] = Some(e2);
            t.span_us = t.span_us.max(ms(first, e2)?);
        }
        Ok(Some(t))
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

/// The solver settings as kernel arguments.
pub(super) struct SolveArgs {
    max_iterations: u32,
    step_max: f64,
    eps_t: f64,
    eps_r: f64,
    line_search: u32,
    mu: f64,
    eta: f64,
    ls_max: u32,
    x_tol: f64,
    neg_d1: f64,
    scale: f64,
}

impl SolveArgs {
    fn new(params: &SolverParams, t: &TargetInfo) -> SolveArgs {
        let ls = params.line_search.unwrap_or_default();
        SolveArgs {
            max_iterations: u32::try_from(params.max_iterations).unwrap_or(u32::MAX),
            step_max: params.step_max,
            eps_t: params.translation_epsilon_m,
            eps_r: params.rotation_epsilon_rad,
            line_search: u32::from(params.line_search.is_some()),
            mu: ls.mu,
            eta: ls.eta,
            ls_max: u32::try_from(ls.max_evaluations).unwrap_or(u32::MAX),
            x_tol: ls.x_tolerance,
            neg_d1: -t.gauss.d1,
            scale: t.gauss.d1 * t.gauss.d2,
        }
    }
}

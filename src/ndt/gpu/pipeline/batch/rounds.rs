//! One round of a group's chain: the evaluation launch, the solver step's launch (on the
//! chain's stream, or a high-priority one), optional CUDA events around both, and the times
//! they give (see the parent's docs).

use super::super::launch::probe_args;
use super::super::{GpuDerivativePipeline, TargetInfo};
use crate::kernels::ndt::derivatives::BLOCK;
use crate::kernels::ndt::solve::batch::BATCH_THREADS;
use crate::ndt::params::SolverParams;
use crate::{Error, Result};
use cudarc::driver::{sys, CudaEvent, CudaStream, DevicePtr, LaunchConfig};
use std::sync::Arc;

impl GpuDerivativePipeline {
    /// Round `r` of group `g` over rows `1..=bound`: the evaluation, then the solver step
    /// (with events around each when timing).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn batch_round(
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

    /// The device times of the rounds just run (events taken; `None` when not timing).
    pub(super) fn batch_timing(&mut self) -> Result<Option<super::BatchTiming>> {
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
    pub(super) fn new(params: &SolverParams, t: &TargetInfo) -> SolveArgs {
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

//! The batch device solve: every round of a batch of alignments evaluates on the device and
//! then steps every alignment's Newton / More-Thuente solver on the device too
//! (`ndt_batch_solve`, `kernels::ndt::solve::batch`), so no round hands anything to the host.
//! [`crate::ndt::align_batch`] asks for it first ([`crate::ndt::Linearize::align_batch_whole`])
//! when `PTXFLOW_NDT_BATCH_DEVICE=1` (read when the pipeline is created; default
//! [`BATCH_DEVICE_DEFAULT`]) or [`GpuDerivativePipeline::set_batch_device_solve`] turns it on.
//!
//! The jobs run as groups of consecutive jobs (`PTXFLOW_NDT_BATCH_GROUPS`, 1 to 4, default 2), each a chain of
//! rounds on its own stream: evaluation kernel (the pipeline's batch kernel, rows `1..=bound`,
//! row 0 an empty request in the parameters), then `ndt_batch_solve` (one warp per row), which
//! writes the next round's requests, compacted, into the same table and publishes their count
//! in mapped memory. The host only launches: round `r + 1` of a group once it has seen round
//! `r`'s count (`PTXFLOW_NDT_BATCH_LAG=1`, the default: a bound, counts only fall; the device
//! always has the group's next round queued, and rows beyond the count find no points), or
//! round `r` once it has seen its own count (`=0`: the grid is then the host-solver batch's
//! for the same requests; H100, `gpu-results/s12/ndtb-2.log`: 6.25 ms against 6.05 ms for
//! lag 1, equal results). The other group's rounds fill each
//! chain's gaps. A group ends when a published count is 0. Each chain's solver
//! steps run on a high-priority stream of their own (`PTXFLOW_NDT_BATCH_PRIORITY`, on by
//! default; events order them with the chain's evaluations), so a step's blocks take the first
//! free slots on the SMs ahead of the other chain's pending evaluation blocks (a solver block
//! of 160 registers fits an SM only once one of the five resident evaluation blocks has left).
//!
//! Results equal the host solver's (the host-solver batch, `align_batch` without this) up to
//! the device's own sines and cosines (within an ulp), the eigen path's Jacobi increment (up to
//! rounding) and the rounds' grids (a round's blocks per request follow its bound, so a sum
//! may differ from the host path's in the last bits). Alignments the device hands back
//! (`STOP_HOST`: an angle beyond the device sine's range) run on the host solver afterwards;
//! any failure before results exist runs the whole batch on the host solver.
//!
//! Measured (H100, 256 Velodyne hypotheses, 15 alternating batches in one process,
//! `gpu-results/s12/ndtb-{1,2,3,4}.log`): with the solver steps on high-priority streams 5.90 ms
//! (min 5.88) against 6.05 ms on the chains' own streams and 6.35 ms for the host-solver batch
//! (run 4); on the chains' own streams 6.04 / 6.05 / 6.08 ms against 6.23 / 6.52 / 6.35 ms for
//! the host-solver batch (runs 1-3; lag 0: 6.25 ms; one chain 7.33 ms; three chains 6.36 ms).
//! Phases (CUDA events, `PTXFLOW_NDT_PHASES=batchdev`, on the chains' own streams): device span
//! 6.0 ms for 47 + 44 rounds; per chain 3.8 ms of evaluation kernels (128-row rounds 130-140 us
//! each) and 2.1 ms of solver kernels (65-78 us for 128 rows next to the other chain's
//! evaluation, 26 us alone), 0.15 ms between a chain's rounds; the tail (rounds of at most 32
//! rows, 30 of 91) 1.1 ms. With priority the solver kernels take 36-54 us per 128-row round
//! (3.1 ms summed over both chains instead of 4.2) and the events 0.3 ms. Each chain's
//! evaluations and solver steps alternate, so the solver kernel's latency is what the batch
//! waits for beyond the evaluations.
//! Results: 59 of 256 alignments differ from the host-solver batch (stop, iterations or
//! evaluations, or pose beyond 1 mm / 0.01 deg; 15 beyond the pose bound) where the host
//! solver's own lockstep and split modes differ on 65; best pose 0.5 mm / 0.013 deg from the
//! host's. Synthetic cases: every alignment equal (`tests/ndt_batch_device_gpu.rs`).

mod rounds;
mod run;

use super::GpuDerivativePipeline;
use crate::kernels::ndt::solve::batch::{
    BATCH_OUT_ASSISTS, BATCH_OUT_EVALUATIONS, BATCH_OUT_ITERATIONS, BATCH_OUT_POSE, BATCH_OUT_STOP,
    BATCH_OUT_WORDS,
};
use crate::kernels::KernelId;
use crate::ndt::gpu::mapped::device_can_map;
use crate::ndt::gpu::records::{decode_result, VALUES};
use crate::ndt::gpu::variants::env_switch;
use crate::ndt::params::SolverParams;
use crate::ndt::pose::Pose6;
use crate::ndt::result::NdtResult;
use crate::ndt::solver::AlignJob;
use crate::runtime::LoadedKernel;
use crate::{Error, Result};
use cudarc::driver::CudaStream;
use std::sync::Arc;

/// Default of `PTXFLOW_NDT_BATCH_DEVICE`: on since session 12 (H100, 256 Velodyne hypotheses,
/// 15 alternating batches in one process: 5.90 ms against 6.35 ms for the host-solver batch,
/// `gpu-results/s12/ndtb-4.log`; 6.04-6.08 ms against 6.23-6.52 ms before the priority streams,
/// `ndtb-{1,2,3}.log`; results as close to the host
/// solver's as the host solver's two batch modes are to each other, see
/// `tests/ndt_batch_device_gpu.rs`). `PTXFLOW_NDT_BATCH_DEVICE=0` gives the host-solver batch.
pub const BATCH_DEVICE_DEFAULT: bool = true;

/// Default of `PTXFLOW_NDT_BATCH_GROUPS` (chains in flight, 1 to [`MAX_GROUPS`]).
const GROUPS: usize = 2;
/// The most chains a batch device solve runs.
const MAX_GROUPS: usize = 4;

/// Default of `PTXFLOW_NDT_BATCH_LAG` (see `BatchSolveState::lag`).
const LAG: usize = 1;

/// Default of `PTXFLOW_NDT_BATCH_PRIORITY`: on (H100, 15 alternating batches in one process,
/// `gpu-results/s12/ndtb-4.log`: 5.90 ms against 6.05 ms with the steps on the chains' own
/// streams, 6.35 ms for the host-solver batch; equal results).
const PRIORITY: bool = true;

/// What the last batch device solve did (for tests and phase measurements).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchSolveStats {
    /// Rounds launched per group.
    pub rounds: Vec<usize>,
    /// Evaluations the device ran for alignments it finished.
    pub evaluations: usize,
    /// Newton steps that took the eigen path on the device.
    pub eigen_steps: usize,
    /// Alignments handed back to the host solver.
    pub handed_back: usize,
    /// Device times by CUDA events ([`GpuDerivativePipeline::set_batch_device_timing`]).
    pub timing: Option<BatchTiming>,
}

/// Device times of a batch device solve, summed over both chains' rounds (microseconds).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchTiming {
    /// The evaluation kernels.
    pub eval_us: f64,
    /// The solver kernels.
    pub solve_us: f64,
    /// Between a chain's rounds (the chain's stream idle or waiting for the host's launch).
    pub between_us: f64,
    /// From the first round's start to the last round's end.
    pub span_us: f64,
    /// Every round in launch order: group, rows launched (the bound), evaluation and solver
    /// kernel microseconds.
    pub rounds: Vec<(usize, usize, f64, f64)>,
}

/// The batch device solve's state inside the pipeline.
pub(in crate::ndt::gpu) struct BatchSolveState {
    enabled: bool,
    groups: usize,
    kernel: Option<LoadedKernel>,
    /// The streams of groups 1.. (group 0 runs on the pipeline's), made when first needed.
    streams: Vec<Arc<CudaStream>>,
    bufs: Vec<run::GroupBuffers>,
    stats: Option<BatchSolveStats>,
    /// Rounds the host launches ahead of the counts it has seen: 0 (round `r` once its count
    /// is published: every round's grid is the host-solver batch's for the same requests) or 1
    /// (round `r + 1` from round `r`'s count, a bound: no wait between a chain's rounds, grids
    /// sized for up to the alignments that stopped in the round before). `PTXFLOW_NDT_BATCH_LAG`.
    lag: usize,
    /// Solver steps on high-priority streams (`PTXFLOW_NDT_BATCH_PRIORITY`, on by default).
    priority: bool,
    /// Those streams, one per group, made when first needed.
    solve_streams: Vec<Arc<CudaStream>>,
    /// Events around every round's kernels (`PTXFLOW_NDT_BATCH_TIMING=1`).
    timing: bool,
    events: Vec<(usize, usize, [cudarc::driver::CudaEvent; 3])>,
    /// Why the last batch offered to the device went to the host solver (`None`: it did not).
    fallback: Option<String>,
}

impl BatchSolveState {
    /// Settings from the environment (see the module docs).
    pub(in crate::ndt::gpu) fn from_env() -> BatchSolveState {
        BatchSolveState {
            enabled: env_switch("PTXFLOW_NDT_BATCH_DEVICE", BATCH_DEVICE_DEFAULT),
            groups: std::env::var("PTXFLOW_NDT_BATCH_GROUPS")
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .filter(|g| (1..=MAX_GROUPS).contains(g))
                .unwrap_or(GROUPS),
            kernel: None,
            streams: Vec::new(),
            bufs: Vec::new(),
            stats: None,
            timing: env_switch("PTXFLOW_NDT_BATCH_TIMING", false),
            priority: env_switch("PTXFLOW_NDT_BATCH_PRIORITY", PRIORITY),
            solve_streams: Vec::new(),
            lag: usize::from(env_switch("PTXFLOW_NDT_BATCH_LAG", LAG == 1)),
            events: Vec::new(),
            fallback: None,
        }
    }
}

impl GpuDerivativePipeline {
    /// Runs batches of alignments (more than one job) with the solver on the device (see the
    /// module docs of `pipeline/batch`).
    ///
    /// Errors: [`Error::NoDevice`] when turning it on for a device that cannot map host memory.
    pub fn set_batch_device_solve(&mut self, on: bool) -> Result<()> {
        if on && !device_can_map(&self.gpu) {
            return Err(Error::NoDevice {
                reason: "the NDT batch device solve needs mapped host memory".into(),
            });
        }
        self.batch.enabled = on;
        Ok(())
    }

    /// Whether batches run the device solve.
    pub fn batch_device_solve_enabled(&self) -> bool {
        self.batch.enabled
    }

    /// Runs each round's solver step on a high-priority stream of its chain (the default;
    /// `false`: on the chain's own stream), see `PTXFLOW_NDT_BATCH_PRIORITY` in the module docs.
    pub fn set_batch_device_priority(&mut self, on: bool) {
        self.batch.priority = on;
    }

    /// Rounds launched ahead of the published counts (0 or 1; see the module docs).
    pub fn set_batch_device_lag(&mut self, lag: usize) {
        self.batch.lag = lag.min(1);
    }

    /// Chains in flight for the batch device solve (1 to 4; other values are clamped).
    pub fn set_batch_device_groups(&mut self, groups: usize) {
        self.batch.groups = groups.clamp(1, MAX_GROUPS);
    }

    /// Times every round's kernels of the batch device solve with CUDA events (for phase
    /// measurements: the events cost launch time of their own), see [`BatchTiming`].
    pub fn set_batch_device_timing(&mut self, on: bool) {
        self.batch.timing = on;
    }

    /// What the last batch device solve did (`None` before the first).
    pub fn batch_device_stats(&self) -> Option<&BatchSolveStats> {
        self.batch.stats.as_ref()
    }

    /// Why the last batch offered to the device solve went to the host solver instead.
    pub fn batch_device_fallback(&self) -> Option<&str> {
        self.batch.fallback.as_deref()
    }

    /// The whole batch on the device: one entry per job (`None`: the host solver runs that
    /// job), or `None` for all of them (off, not possible here, or failed before results).
    pub(in crate::ndt::gpu) fn align_batch_device(
        &mut self,
        jobs: &[AlignJob],
        params: &SolverParams,
    ) -> Result<Option<Vec<Option<NdtResult>>>> {
        self.batch.fallback = None;
        if !self.batch.enabled || jobs.len() < 2 {
            return Ok(None);
        }
        match self.try_batch_device(jobs, params) {
            Ok(Ok(r)) => Ok(Some(r)),
            Ok(Err(why)) => {
                self.batch.fallback = Some(why);
                Ok(None)
            }
            Err(e) => {
                // The streams are synchronized by the run (or failed for good); the host
                // solver starts from the jobs again.
                self.batch.fallback = Some(e.to_string());
                Ok(None)
            }
        }
    }

    fn try_batch_device(
        &mut self,
        jobs: &[AlignJob],
        params: &SolverParams,
    ) -> Result<std::result::Result<Vec<Option<NdtResult>>, String>> {
        if self.transfer != super::super::config::Transfer::Mapped {
            return Ok(Err("results are not in mapped memory".into()));
        }
        let Some(t) = self.target else {
            return Err(Error::input(
                "GPU NDT pipeline: upload_target before linearizing",
            ));
        };
        if self.cells.batch_kernel().is_none() {
            return Ok(Err(
                "no batch evaluation kernel (dense table, cross build)".into()
            ));
        }
        for j in jobs {
            if j.source >= self.sources.len() {
                return Err(Error::input(format!(
                    "source index {} out of range ({} sources uploaded)",
                    j.source,
                    self.sources.len()
                )));
            }
        }
        self.stop_server()?;
        if self.batch.kernel.is_none() {
            let k = self.gpu.kernel(KernelId::NdtBatchSolve)?;
            self.batch.kernel = Some(k);
        }
        let outs = self.run_batch_device(jobs, params, &t)?;
        let mut stats = BatchSolveStats {
            rounds: outs.rounds,
            timing: outs.timing,
            ..Default::default()
        };
        let mut results = Vec::with_capacity(jobs.len());
        for (k, job) in jobs.iter().enumerate() {
            let w = &outs.words[BATCH_OUT_WORDS * k..BATCH_OUT_WORDS * (k + 1)];
            let points = self.sources[job.source].1 as usize;
            let evaluations = w[BATCH_OUT_EVALUATIONS] as u32 as usize;
            let code = w[BATCH_OUT_STOP] as u32;
            let Some(stop) = super::solve::stop_reason(code) else {
                stats.handed_back += 1;
                results.push(None);
                continue;
            };
            stats.evaluations += evaluations;
            stats.eigen_steps += w[BATCH_OUT_ASSISTS] as u32 as usize;
            let rec: [f64; VALUES] = std::array::from_fn(|i| f64::from_bits(w[i]));
            let lin = decode_result(&rec, t.gauss, points)?;
            let pose = Pose6::from_fn(|i, _| f64::from_bits(w[BATCH_OUT_POSE + i]));
            results.push(Some(NdtResult::at(
                pose,
                w[BATCH_OUT_ITERATIONS] as u32 as usize,
                evaluations,
                stop,
                lin,
                points,
            )));
        }
        self.counters.requests += stats.evaluations as u64;
        self.batch.stats = Some(stats);
        Ok(Ok(results))
    }
}

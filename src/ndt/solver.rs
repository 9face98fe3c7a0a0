//! Newton iteration on the NDT score with a Moré–Thuente line search and a step cap.
//!
//! Each iteration (Magnusson 2009, alg. 2; PCL's `computeTransformation`) minimises `f = −score`:
//! 1. linearize at the pose `p`: `f`, `∇f = −g`, `∇²f = −H`;
//! 2. Newton increment `Δ = −(∇²f)⁻¹ ∇f`, solved through the symmetric eigen-decomposition of the
//!    6×6 `∇²f` with every eigenvalue replaced by its magnitude (floored at 1e-9 of the largest),
//!    so `Δ` is a descent direction even where the score is not locally concave (a Cholesky
//!    solve when that provably changes nothing, see [`crate::ndt::newton_step`]);
//! 3. stop as converged when `∇²f` is positive definite and `Δ`'s translation and rotation parts
//!    are below their epsilons; else stop at the iteration cap (never "converged").
//!    The score is only piecewise smooth (a point that crosses a voxel face changes its voxel
//!    set), so near the optimum the line search can stall at such a seam with `Δ` still a little
//!    above the epsilons. When the step just taken was below the epsilons (or nothing better was
//!    found), `Δ` within [`STALL_FACTOR`] times the epsilons also counts as converged; a stall
//!    farther away stops with [`StopReason::Stalled`] (iterating on would repeat the same step);
//! 4. search `α ∈ [0, step_max]` along `d = Δ/|Δ|` from `α₀ = min(|Δ|, step_max)` and move to
//!    `p + α d` (with the search off, take `α₀`).
//!
//! The solver is a state machine ([`Newton`]): it names the next pose to evaluate and consumes the
//! [`Linearization`]; [`align_batch`] steps many of them in lockstep through one [`Linearize`].

use crate::ndt::line_search::{LineStep, MoreThuente};
use crate::ndt::linearize::{Linearization, Linearize, LinearizeRequest};
use crate::ndt::newton_step::newton_increment;
use crate::ndt::params::SolverParams;
use crate::ndt::pose::{isometry_to_pose, Pose6};
use crate::ndt::result::{NdtResult, StopReason};
use crate::{Error, Result};
use nalgebra::{Isometry3, Vector6};
use rayon::prelude::*;

mod pool;
mod split;
mod whole;

/// Batches with at least this many alignments use two groups in flight when the linearizer
/// offers them ([`Linearize::split`]).
const SPLIT_MIN: usize = 2 * PARALLEL_FEED_MIN;

/// Rounds with at least this many linearizations update the solver states in parallel (an
/// update may solve a 6×6 eigenproblem, about a microsecond; hundreds per round add up).
const PARALLEL_FEED_MIN: usize = 32;

/// [`PARALLEL_FEED_MIN`], or `PTXFLOW_NDT_PARALLEL_FEED_MIN` when set (an experiment: waking
/// the thread pool costs tens of microseconds, more than a few dozen sequential updates; read
/// per round so one process can compare settings). The results do not depend on it.
fn parallel_feed_min() -> usize {
    std::env::var("PTXFLOW_NDT_PARALLEL_FEED_MIN")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(PARALLEL_FEED_MIN)
}

/// How far the solver may be from the model optimum when the score's discontinuities (points
/// changing voxels) stop the line search, in multiples of the epsilons.
pub const STALL_FACTOR: f64 = 10.0;

/// What the last iteration did, for the convergence test.
enum Progress {
    Start,
    /// Moved by this increment of the 6-vector.
    Moved(Vector6<f64>),
    /// The line search found nothing better than the current pose.
    NoDecrease,
}

#[allow(clippy::large_enum_variant)] // one per alignment, replaced in place; boxing buys nothing
enum Phase {
    /// Waiting for the linearization at the initial pose.
    Start,
    /// Line search along `dir` from the accepted pose.
    Search {
        ls: MoreThuente<Linearization>,
        dir: Vector6<f64>,
    },
    /// Plain capped step: waiting for the linearization at `pending`.
    Step,
    Done(Box<NdtResult>),
}

/// One alignment's Newton iteration as a state machine; see the module docs.
pub struct Newton {
    params: SolverParams,
    source_points: usize,
    pose: Pose6,
    lin: Option<Linearization>,
    pending: Pose6,
    iterations: usize,
    evaluations: usize,
    phase: Phase,
}

impl Newton {
    /// Starts at `init` for a source of `source_points` points.
    pub fn new(init: &Isometry3<f64>, source_points: usize, params: SolverParams) -> Newton {
        let p = isometry_to_pose(init);
        Newton {
            params,
            source_points,
            pose: p,
            lin: None,
            pending: p,
            iterations: 0,
            evaluations: 0,
            phase: Phase::Start,
        }
    }

    /// The pose to evaluate next, or `None` once finished.
    pub fn wants(&self) -> Option<Pose6> {
        match self.phase {
            Phase::Done(_) => None,
            _ => Some(self.pending),
        }
    }

    /// The result once finished.
    pub fn result(&self) -> Option<&NdtResult> {
        match &self.phase {
            Phase::Done(r) => Some(r),
            _ => None,
        }
    }

    /// Feeds the linearization at [`Newton::wants`]'s pose. Ignored once finished.
    pub fn feed(&mut self, lin: Linearization) {
        self.evaluations += 1;
        match std::mem::replace(&mut self.phase, Phase::Start) {
            Phase::Done(r) => self.phase = Phase::Done(r),
            Phase::Start => {
                self.lin = Some(lin);
                self.next_step(Progress::Start);
            }
            Phase::Step => {
                let step = self.pending - self.pose;
                self.pose = self.pending;
                self.lin = Some(lin);
                self.iterations += 1;
                self.next_step(Progress::Moved(step));
            }
            Phase::Search { mut ls, dir } => {
                let (f, g) = (-lin.score, -lin.gradient.dot(&dir));
                match ls.feed(f, g, lin) {
                    LineStep::Trial(a) => {
                        self.pending = self.pose + a * dir;
                        self.phase = Phase::Search { ls, dir };
                    }
                    LineStep::Done(a, best) => {
                        self.lin = Some(best);
                        if a == 0.0 {
                            self.next_step(Progress::NoDecrease);
                        } else {
                            self.pose += a * dir;
                            self.iterations += 1;
                            self.next_step(Progress::Moved(a * dir));
                        }
                    }
                }
            }
        }
    }

    fn next_step(&mut self, progress: Progress) {
        // `lin` is set by every caller before `next_step`.
        let lin = self
            .lin
            .as_ref()
            .expect("Newton: linearization present at the accepted pose");
        if lin.correspondences == 0 {
            return self.finish(StopReason::NoCorrespondences);
        }
        let finite = lin.score.is_finite()
            && lin.gradient.iter().all(|v| v.is_finite())
            && lin.hessian.iter().all(|v| v.is_finite());
        if !finite {
            return self.finish(StopReason::SingularHessian);
        }
        // Δ = −(∇²f)⁻¹ ∇f with ∇f = −g (floored eigenvalue magnitudes; see newton_step).
        let Some((delta, positive_definite)) = newton_increment(&lin.hessian, &lin.gradient) else {
            return self.finish(StopReason::SingularHessian);
        };
        let dt = delta.fixed_rows::<3>(0).norm();
        let dr = delta.fixed_rows::<3>(3).norm();
        let (eps_t, eps_r) = (
            self.params.translation_epsilon_m,
            self.params.rotation_epsilon_rad,
        );
        let stalled = match progress {
            Progress::Start => false,
            Progress::NoDecrease => true,
            Progress::Moved(s) => {
                s.fixed_rows::<3>(0).norm() < eps_t && s.fixed_rows::<3>(3).norm() < eps_r
            }
        };
        let tol = if stalled { STALL_FACTOR } else { 1.0 };
        if positive_definite && dt < tol * eps_t && dr < tol * eps_r {
            return self.finish(StopReason::Converged);
        }
        if stalled {
            return self.finish(StopReason::Stalled);
        }
        if self.iterations >= self.params.max_iterations {
            return self.finish(StopReason::MaxIterations);
        }
        let len = delta.norm();
        if !(len > 0.0 && len.is_finite()) {
            return self.finish(StopReason::Stalled);
        }
        let dir = delta / len;
        let a0 = len.min(self.params.step_max);
        match self.params.line_search {
            None => {
                self.pending = self.pose + a0 * dir;
                self.phase = Phase::Step;
            }
            Some(lsp) => {
                let g0 = -lin.gradient.dot(&dir);
                let f0 = -lin.score;
                let at_zero = self.lin.take().expect("Newton: linearization present");
                let (ls, a) = MoreThuente::start(f0, g0, at_zero, a0, self.params.step_max, lsp);
                self.pending = self.pose + a * dir;
                self.phase = Phase::Search { ls, dir };
            }
        }
    }

    fn finish(&mut self, stop: StopReason) {
        let lin = self
            .lin
            .take()
            .expect("Newton: linearization present when finishing");
        self.phase = Phase::Done(Box::new(NdtResult::at(
            self.pose,
            self.iterations,
            self.evaluations,
            stop,
            lin,
            self.source_points,
        )));
    }
}

/// One alignment of a batch: which source cloud of the [`Linearize`] and where to start.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AlignJob {
    /// Source index in the linearizer.
    pub source: usize,
    /// Initial `t_target_source`.
    pub init: Isometry3<f64>,
}

/// Aligns source `source` of `lin` starting at `init`.
///
/// Errors: [`Error::Input`] for bad solver settings, a non-finite initial pose or a source index
/// out of range; whatever the linearizer returns.
pub fn align<L: Linearize + ?Sized>(
    lin: &mut L,
    source: usize,
    init: &Isometry3<f64>,
    params: &SolverParams,
) -> Result<NdtResult> {
    let mut r = align_batch(
        lin,
        &[AlignJob {
            source,
            init: *init,
        }],
        params,
    )?;
    Ok(r.remove(0))
}

/// Runs all `jobs` in lockstep: each round sends one request per unfinished job in one
/// [`Linearize::linearize`] call (and, for large rounds, updates the solver states on all cores).
/// Results come back in job order and equal those of [`align`].
///
/// Errors: [`Error::Input`] for invalid `params`; any error of `lin` (for example a source index
/// it does not have, or a GPU failure). Not converging is not an error (see [`NdtResult::stop`]).
pub fn align_batch<L: Linearize + ?Sized>(
    lin: &mut L,
    jobs: &[AlignJob],
    params: &SolverParams,
) -> Result<Vec<NdtResult>> {
    params.validate()?;
    let mut states = Vec::with_capacity(jobs.len());
    for job in jobs {
        if job.source >= lin.source_count() {
            return Err(Error::input(format!(
                "align job names source {} but the linearizer holds {}",
                job.source,
                lin.source_count()
            )));
        }
        let m = job.init.to_homogeneous();
        if !m.iter().all(|v| v.is_finite()) {
            return Err(Error::input(format!(
                "align job initial pose is not finite: {m}"
            )));
        }
        states.push(Newton::new(&job.init, lin.source_len(job.source), *params));
    }
    if let [job] = jobs {
        if let Some(r) = lin.align_whole(job.source, &job.init, params)? {
            return Ok(vec![r]);
        }
    }
    if jobs.len() > 1 {
        if let Some(done) = lin.align_batch_whole(jobs, params)? {
            return whole::finish_on_host(lin, jobs, params, done);
        }
    }
    host_batch(lin, jobs, states)
}

/// The host solver's batch: two groups in flight where the linearizer offers them, else
/// lockstep rounds.
fn host_batch<L: Linearize + ?Sized>(
    lin: &mut L,
    jobs: &[AlignJob],
    mut states: Vec<Newton>,
) -> Result<Vec<NdtResult>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let split = if jobs.len() >= SPLIT_MIN {
        lin.split(jobs.len())
    } else {
        None
    };
    match split {
        Some(s) => pool::with_pool(pool::threads_from_env(), |p| {
            split::run(s, &mut states, jobs, p)
        })?,
        None => {
            lin.start_alignment(jobs.len())?;
            let run = lockstep(lin, &mut states, jobs);
            let finish = lin.finish_alignment();
            run?;
            finish?;
        }
    }
    Ok(states
        .into_iter()
        .map(|s| match s.phase {
            Phase::Done(r) => *r,
            // The loop above only ends when no state wants a pose, i.e. all are done.
            _ => unreachable!("align_batch: every job finished"),
        })
        .collect())
}

/// One [`Linearize::linearize`] round after the other until every state is done.
fn lockstep<L: Linearize + ?Sized>(
    lin: &mut L,
    states: &mut [Newton],
    jobs: &[AlignJob],
) -> Result<()> {
    loop {
        let (who, requests) = requests_of(states, jobs);
        if requests.is_empty() {
            return Ok(());
        }
        let out = lin.linearize(&requests)?;
        feed_round(states, who, out)?;
    }
}

/// The requests of every state that wants a pose: their indices and the requests, in order.
fn requests_of(states: &[Newton], jobs: &[AlignJob]) -> (Vec<usize>, Vec<LinearizeRequest>) {
    let mut who = Vec::new();
    let mut requests = Vec::new();
    for (k, s) in states.iter().enumerate() {
        if let Some(pose) = s.wants() {
            who.push(k);
            requests.push(LinearizeRequest {
                source: jobs[k].source,
                pose,
            });
        }
    }
    (who, requests)
}

/// Feeds `out[i]` to `states[who[i]]` (in parallel for large rounds).
fn feed_round(states: &mut [Newton], who: Vec<usize>, out: Vec<Linearization>) -> Result<()> {
    if out.len() != who.len() {
        return Err(Error::Shape {
            what: "linearizations returned by Linearize::linearize".into(),
            expected: who.len().to_string(),
            got: out.len().to_string(),
        });
    }
    if who.len() >= parallel_feed_min() {
        // States are independent, so the parallel update gives the same results.
        let mut fed: Vec<Option<Linearization>> = vec![None; states.len()];
        for (k, l) in who.into_iter().zip(out) {
            fed[k] = Some(l);
        }
        states
            .par_iter_mut()
            .zip(fed.par_iter_mut())
            .for_each(|(s, l)| {
                if let Some(l) = l.take() {
                    s.feed(l);
                }
            });
    } else {
        for (k, l) in who.into_iter().zip(out) {
            states[k].feed(l);
        }
    }
    Ok(())
}

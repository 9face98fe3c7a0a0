//! The whole Newton solve of one alignment on the device (`ndt_align_device`,
//! [`crate::kernels::ndt::derivatives::Variant::solve`]): the evaluation server's kernel
//! (`derivatives/server.rs`) with the host's part moved into the kernel.
//!
//! # What happens per evaluation
//! Every block takes the request record from the relay in device memory (as the server's
//! blocks other than block 0 do), computes its points' sums, reduces them over the block,
//! writes its partial and counts itself. Block 0 then waits until every block has counted
//! ([`REDUCER_BLOCK0`]; or, with the `reducer` parameter at [`REDUCER_LAST`], the block that
//! counts itself last takes over, as in the server), stages the solver state into shared
//! memory while it sums the partials in block order (the server's two levels, so the sums
//! equal the launch-per-round path's bit for bit for the same grid) and keeps them in shared
//! memory. Its warp 0 then runs one step of the host's solver (`ndt::solver::Newton::feed`
//! with `ndt::line_search::MoreThuente` and `ndt::newton_step`) in the host's operation order,
//! so a step fed the same sums gives the same numbers: every lane computes the scalar work,
//! the two Cholesky factorisations run across the lanes (`newton.rs`), lane 0 stores. The state
//! between evaluations lives in the `state` words (`state.rs`). It writes the next request
//! record (the sines and cosines from [`sincos`], within an ulp of the host's `sin_cos`) and
//! releases it through the relay word, or, once the solver stops, writes the result into mapped
//! host memory ([`OUT_POSE`] .. and the accepted sums in words `0..VALUES`), fences at system
//! scope, stores the done word and relays the stop command.
//!
//! # The eigen path
//! A Newton step whose Hessian the Cholesky path cannot take (not positive definite after the
//! shift, but not zero) needs `newton_increment`'s eigen-decomposition. With [`OPT_DEVICE_EIGEN`]
//! (in [`TABLE_OPTS`] since session 11) the solver warp computes it (`eigen/`: cyclic Jacobi,
//! the host's increment up to rounding), so no step leaves the device. Builds without it ask
//! the host during the kernel (`newton.rs`, [`ASSIST_WORD`]: one PCIe round trip and the host's
//! eigen-decomposition, the increment bit for bit the host path's). A pose angle beyond
//! [`sincos::SINCOS_MAX_ARG`], or a host that does not answer, ends the kernel with
//! [`STOP_HOST`]; the host then runs the whole alignment itself. Timeouts and the status word
//! are the server's.
//!
//! # Where the time goes (H100, Velodyne pair, Direct7, 11 evaluations)
//! Session 9 (options 0, then the table's build): kernel start to result 194.8 us, about 10.1 us per
//! evaluation outside the solver and 83.7 us of solver steps; 206.5 us with the launch against
//! 193.2 us on the evaluation server in the same process.
//!
//! Session 10, the profile build ([`profile`], `%clock64` of block 0's thread 0, medians of 300
//! runs, `gpu-results/s10/ndts-2.log`): per evaluation, release to block 0 seeing the request
//! 0.84 us (the other blocks: 0.27 us on average), terms 0.50, points 2.87, block reduction,
//! partial and count 1.6, waiting for the last block 1.0-1.4, final reduction 2.95 (29 loads per
//! thread, each from 32 blocks' slots 256 bytes apart); per Newton step, decode and the two
//! factorisations 2.9 us (the spare lanes divided zeros: the slow `div.rn.f64` / `sqrt.rn.f64`
//! subroutine for the whole warp), the solve 0.5 us or an eigen-path round trip of about
//! 6.9 us, stop tests, direction and line-search start 1.7 us; the line-search feed 1.1 us and
//! the next request 0.7 us per evaluation. The build options below (`Variant::solve_opts`) act
//! on these; with options 188 ([`OPT_SHARED_STATE`], [`OPT_FAST_DIV`], [`OPT_XPOSE_PARTIALS`],
//! [`OPT_SAFE_LANES`], [`OPT_LEAN_FINAL`]; `gpu-results/s10/ndts-3.log`, 300 alternating runs,
//! twice) an alignment takes 175.4 / 173.6 us against 200.1 / 200.9 us on the server and
//! 211.5 / 209.8 us for options 0 (kernel start to result 162.7 / 161.7 us, solver steps 75 us),
//! results bit for bit those of options 0. The final reduction is then 0.95 us and an
//! evaluation about 7.6 us; what remains is the points (2.8 us), the blocks' reductions and
//! count (1.5 us), the stragglers (1.0 us), the eigen-path round trips (4 x ~6.9 us: a PCIe
//! round trip, the host's `SymmetricEigen` and the polls) and the Cholesky steps (decode and
//! factorisations still 2.2 us).
//!
//! Session 11 (`gpu-results/s11/ndts-{1,2,3}.log`, H100, 150-200 alternating runs): the eigen
//! path on the device ([`OPT_DEVICE_EIGEN`]). A device eigen-path step costs about 8.7 us with
//! f64 rotation angles and 7.9 us with f32 ones ([`OPT_EIGEN_F32_ANGLE`]) against 6.6-7.7 us for
//! the host's round trip: one warp's ~5 Jacobi sweeps (25 dependent rounds of shuffles, a
//! rotation and two f64 updates, ~600 cycles each) are slower than the host's `SymmetricEigen`
//! plus PCIe. The build still wins overall: with no host request pending, the stop tests and
//! direction take 1.07 instead of 1.45 us per Newton step, and the cross-product derivatives
//! ([`OPT_CROSS`]) cut the points from 2.87 to 2.64 us and the terms from 0.51 to 0.39 us per
//! evaluation: the table build (3004) 170.5 us against 176.0 us for session 10's (188) in the
//! same process. Tried and measured slower: every lane computing all three rotations of a round
//! (13.3 us per eigen step) and starting each eigen step from the previous one's eigenvectors
//! (the interpreter: 4.9 -> 2.7 sweeps for nearby matrices; Velodyne's eigen-path Hessians
//! are not near enough: 3.57 against 3.47 us per Newton step).

pub mod assist;
pub mod batch;
mod eigen;
mod factor;
mod interpolate;
mod opts;
pub use opts::*;
mod more_thuente;
mod newton;
pub mod profile;
pub mod sincos;
mod state;
use state::*;
mod step;

use crate::kernels::ndt::derivatives::server::CMD_EVALUATE;
use crate::kernels::ndt::derivatives::VALUES;
use crate::ptx::*;

/// Phase: waiting for the evaluation at the initial pose.
pub const PHASE_START: u32 = 0;
/// Phase: a line search along `dir` is under way.
pub const PHASE_SEARCH: u32 = 1;
/// Phase: a plain capped step (no line search) is being evaluated.
pub const PHASE_STEP: u32 = 2;

/// Stop codes in [`OUT_STOP`] (`ndt::StopReason` in declaration order), and [`STOP_HOST`].
pub const STOP_CONVERGED: u32 = 0;
/// `StopReason::MaxIterations`.
pub const STOP_MAX_ITERATIONS: u32 = 1;
/// `StopReason::NoCorrespondences`.
pub const STOP_NO_CORRESPONDENCES: u32 = 2;
/// `StopReason::SingularHessian`.
pub const STOP_SINGULAR: u32 = 3;
/// `StopReason::Stalled`.
pub const STOP_STALLED: u32 = 4;
/// The device cannot go on (eigen path or angle range): the host solves the alignment.
pub const STOP_HOST: u32 = 255;

/// u64 words of the state buffer the host allocates.
pub const STATE_WORDS: usize = 72;

/// Output words in the mapped results (after the server's words): the final pose (6 f64).
pub const OUT_POSE: usize = 40;
/// Iterations (u32).
pub const OUT_ITERATIONS: usize = 46;
/// Evaluations (u32).
pub const OUT_EVALUATIONS: usize = 47;
/// Stop code (u32, [`STOP_CONVERGED`] ..).
pub const OUT_STOP: usize = 48;
/// Nanoseconds of solver steps (thread 0 of the last block, summed over the evaluations).
pub const OUT_SOLVE_NS: usize = 49;
/// Nanoseconds from the kernel's start to the result.
pub const OUT_TOTAL_NS: usize = 50;
/// Eigen-path requests the kernel made (u32).
pub const OUT_ASSISTS: usize = 51;
/// An eigen-path request to the host: the Hessian's upper triangle (21 f64, in result order).
pub const ASSIST_HESSIAN: usize = 52;
/// ... and the gradient (6 f64).
pub const ASSIST_GRADIENT: usize = 73;
/// ... and its word, `first_seq | k << 32` for the launch's k-th request (1, 2, ...), stored
/// after a system fence. The host answers in the mailbox: `Δ` in words 1..7, flags in word 7
/// (bit 0: an increment exists, bit 1: positive definite), then the same word in word 0.
pub const ASSIST_WORD: usize = 79;
/// u64 words of the mapped results the host allocates (the last one, [`assist::ASSIST_CHECK`],
/// for [`OPT_FAST_ASSIST`] builds).
pub const OUT_WORDS: usize = 81;
/// u64 words of the mapped mailbox the host allocates (the last one,
/// [`assist::MAILBOX_CHECK`], for [`OPT_FAST_ASSIST`] builds).
pub const MAILBOX_WORDS: usize = 9;
/// `reducer`: block 0 reduces and solves every evaluation, once every block has counted
/// itself (its SM keeps the solver's code in its instruction cache).
pub const REDUCER_BLOCK0: u32 = 0;
/// `reducer`: the block that counts itself last reduces and solves (the server's rule; the
/// solver's code then runs on a cold SM most of the time).
pub const REDUCER_LAST: u32 = 1;
/// The done word ([`crate::kernels::ndt::derivatives::server::RESULT_SEQ_WORD`]) holds `DONE | first_seq` once the result is written.
pub const DONE: u64 = 1 << 32;

/// The solver's kernel parameters (after the server's).
#[derive(Clone)]
pub struct SolveParams {
    state: Param<U64>,
    init: [Param<F64>; 6],
    max_iterations: Param<U32>,
    step_max: Param<F64>,
    eps_t: Param<F64>,
    eps_r: Param<F64>,
    line_search: Param<U32>,
    mu: Param<F64>,
    eta: Param<F64>,
    ls_max_evals: Param<U32>,
    x_tol: Param<F64>,
    neg_d1: Param<F64>,
    scale: Param<F64>,
    reducer: Param<U32>,
    /// `Variant::solve_opts` (build options, not a kernel parameter).
    opts: u32,
}

impl SolveParams {
    /// Declares `state` ([`STATE_WORDS`] u64 of device memory), the initial pose
    /// `init_0..init_5`, the solver settings (`max_iterations, step_max, eps_t, eps_r,
    /// line_search` (0/1), `mu, eta, ls_max_evals, x_tol`), the decoding factors `neg_d1`
    /// (`−d1`) and `scale` (`d1 · d2`), and `reducer`: [`REDUCER_BLOCK0`] or
    /// [`REDUCER_LAST`]. `opts`: the build options (`Variant::solve_opts`).
    pub fn declare(b: &mut KernelBuilder, opts: u32) -> SolveParams {
        SolveParams {
            state: b.param::<U64>("state"),
            init: std::array::from_fn(|k| b.param::<F64>(&format!("init_{k}"))),
            max_iterations: b.param::<U32>("max_iterations"),
            step_max: b.param::<F64>("step_max"),
            eps_t: b.param::<F64>("eps_t"),
            eps_r: b.param::<F64>("eps_r"),
            line_search: b.param::<U32>("line_search"),
            mu: b.param::<F64>("mu"),
            eta: b.param::<F64>("eta"),
            ls_max_evals: b.param::<U32>("ls_max_evals"),
            x_tol: b.param::<F64>("x_tol"),
            neg_d1: b.param::<F64>("neg_d1"),
            scale: b.param::<F64>("scale"),
            reducer: b.param::<U32>("reducer"),
            opts,
        }
    }
}

/// What the serving loop hands the solver: its parameters, the kernel's first request record
/// (`r0_*`: the host packs the initial pose there) and the shared sums.
pub struct SolveCtx {
    p: SolveParams,
    r0: Vec<Param<F64>>,
    r0_first: Param<U32>,
    r0_count: Param<U32>,
    sums: SharedArray<F64>,
    staged: SharedArray<U64>,
    /// [`profile::OPT_PROFILE`]: the cycle counters.
    prof: Option<SharedArray<U64>>,
}

/// The solver's registers in thread 0 (parameters loaded, pointers converted).
pub(super) struct Regs {
    state: State,
    /// The solver warp's lane, and lane 0 (which stores; the other lanes compute the same
    /// values and share the vector work of the Newton step, `newton.rs`).
    lane: Reg<U32>,
    lane0: Reg<Pred>,
    max_iterations: Reg<U32>,
    step_max: Reg<F64>,
    eps_t: Reg<F64>,
    eps_r: Reg<F64>,
    line_search: Reg<Pred>,
    mu: Reg<F64>,
    eta: Reg<F64>,
    ls_max_evals: Reg<U32>,
    x_tol: Reg<F64>,
    neg_d1: Reg<F64>,
    scale: Reg<F64>,
    yes: Reg<Pred>,
    no: Reg<Pred>,
    sums: SharedArray<F64>,
    /// [`profile::OPT_PROFILE`]'s counters.
    prof: Option<SharedArray<U64>>,
    /// The build options (`Variant::solve_opts`).
    opts: u32,
}

/// One solver step's registers.
pub(super) struct Solver<'a> {
    r: &'a Regs,
    pose: [Reg<F64>; 6],
    dir: [Reg<F64>; 6],
    pending: [Reg<F64>; 6],
    phase: Reg<U32>,
    iters: Reg<U32>,
    evals: Reg<U32>,
    /// Progress for the stall test: 0 start, 1 no decrease, 2 moved by `stepv`.
    kind: Reg<U32>,
    stepv: [Reg<F64>; 6],
    stop: Reg<U32>,
    /// The mapped results, the mailbox, the idle timeout and the launch's token (for the
    /// eigen-path requests to the host).
    out: Reg<U64>,
    mailbox: Reg<U64>,
    idle_ns: Reg<U64>,
    token: Reg<U32>,
}

impl SolveCtx {
    /// The context (declares the shared sums array).
    pub fn new(
        b: &mut KernelBuilder,
        p: SolveParams,
        r0: &[Param<F64>],
        r0_first: &Param<U32>,
        r0_count: &Param<U32>,
    ) -> SolveCtx {
        let prof = (p.opts & profile::OPT_PROFILE != 0)
            .then(|| b.shared_array::<U64>("solve_prof", profile::PROF_WORDS as u32));
        SolveCtx {
            p,
            r0: r0.to_vec(),
            r0_first: r0_first.clone(),
            r0_count: r0_count.clone(),
            sums: b.shared_array::<F64>("solve_sums", 32),
            staged: b.shared_array::<U64>("solve_state", STATE_WORDS as u32),
            prof,
        }
    }

    /// In the block that reduces last, every thread, before the final reduction: threads
    /// `t < STATE_WORDS` copy state word `t` into shared memory (visible to thread 0 after the
    /// reduction's barriers), so the solver step reads no device memory.
    pub fn stage(&self, b: &mut KernelBuilder, tid: Reg<U32>) {
        if self.has(OPT_SHARED_STATE) {
            return;
        }
        let st = b.global_ptr(&self.p.state);
        let mine = b.setp(Cmp::Lt, tid, STATE_WORDS as u32);
        let staged = self.staged.clone();
        b.if_then(mine, |b| {
            let a = b.index_addr(st, tid, 8);
            let v = b.ld::<U64>(Space::Global, a);
            let s = b.shared_index(&staged, tid);
            b.st(Space::Shared, s, v);
        });
    }

    /// Whether the build has option bit `opt` (`Variant::solve_opts`).
    pub fn has(&self, opt: u32) -> bool {
        self.p.opts & opt != 0
    }

    /// Whether the `reducer` parameter asks for the last block to reduce ([`REDUCER_LAST`]).
    pub fn last_block_reduces(&self, b: &mut KernelBuilder) -> Reg<Pred> {
        let m = b.ld_param(&self.p.reducer);
        if self.has(OPT_SHARED_STATE) {
            return b.setp(Cmp::Ne, m, m);
        }
        b.setp(Cmp::Eq, m, REDUCER_LAST)
    }

    /// Where the block that reduces last leaves the [`VALUES`] sums for the solver.
    pub fn sums(&self) -> &SharedArray<F64> {
        &self.sums
    }

    /// `first_point | count << 32`, word 9 of every request record.
    fn points_word(&self, b: &mut KernelBuilder) -> Reg<U64> {
        let f = b.ld_param(&self.r0_first);
        let c = b.ld_param(&self.r0_count);
        b.pack64::<U64>(f, c)
    }

    /// Thread 0 of block 0, before the start barrier: the state at the initial pose and the
    /// first request (the host's record of the initial pose) in the relay, `seq0 + 1`.
    pub fn start(&self, b: &mut KernelBuilder, relay: Reg<U64>, seq0: Reg<U32>) {
        let st = b.global_ptr(&self.p.state);
        let shared = self.has(OPT_SHARED_STATE).then(|| self.staged.clone());
        for (k, p) in self.p.init.iter().enumerate() {
            let v = b.ld_param(p);
            put_f64(b, st, S_POSE + k, v);
            if let Some(sh) = &shared {
                b.st(Space::Shared, sh.at((S_POSE + k) as u32), v);
            }
        }
        for w in [S_PHASE, S_ITERS, S_EVALS, S_SOLVE_NS, S_ASSISTS] {
            b.st(Space::Global, Addr::from(st).off(8 * w as i64), 0u64);
            if let Some(sh) = &shared {
                b.st(Space::Shared, sh.at(w as u32), 0u64);
            }
        }
        let now = b.globaltimer();
        b.st(
            Space::Global,
            Addr::from(st).off(8 * S_START_NS as i64),
            now,
        );
        if let Some(sh) = &shared {
            b.st(Space::Shared, sh.at(S_START_NS as u32), now);
        }
        self.prof_start(b);
        let rec = Addr::from(relay).off(16);
        for (k, p) in self.r0.iter().enumerate() {
            let v = b.ld_param(p);
            b.st(Space::Global, rec.off(8 * k as i64), v);
        }
        let w = self.points_word(b);
        b.st(Space::Global, rec.off(72), w);
        let s1 = b.add(seq0, 1u32);
        let word = b.cvt::<U64, U32>(s1);
        let word = b.or(word, u64::from(CMD_EVALUATE) << 32);
        b.st_relaxed_gpu::<U64>(relay, word);
    }

    fn regs(&self, b: &mut KernelBuilder) -> Regs {
        let p = &self.p;
        let ls = b.ld_param(&p.line_search);
        let yes = b.setp(Cmp::Eq, ls, ls);
        let tid = b.special(Special::TidX);
        let lane = b.and(tid, 31u32);
        let lane0 = b.setp(Cmp::Eq, lane, 0u32);
        Regs {
            state: State {
                global: b.global_ptr(&p.state),
                staged: self.staged.clone(),
                lane0,
                global_too: !self.has(OPT_SHARED_STATE),
            },
            lane,
            lane0,
            max_iterations: b.ld_param(&p.max_iterations),
            step_max: b.ld_param(&p.step_max),
            eps_t: b.ld_param(&p.eps_t),
            eps_r: b.ld_param(&p.eps_r),
            line_search: b.setp(Cmp::Ne, ls, 0u32),
            mu: b.ld_param(&p.mu),
            eta: b.ld_param(&p.eta),
            ls_max_evals: b.ld_param(&p.ls_max_evals),
            x_tol: b.ld_param(&p.x_tol),
            neg_d1: b.ld_param(&p.neg_d1),
            scale: b.ld_param(&p.scale),
            yes,
            no: b.not(yes),
            sums: self.sums.clone(),
            prof: self.prof.clone(),
            opts: p.opts,
        }
    }
}

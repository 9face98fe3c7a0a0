//! `ndt_batch_solve`: one Newton / More-Thuente step for every alignment of a batch round, on
//! the device, so a batch of alignments needs no host hand-over between its rounds.
//!
//! A batch round is one launch of the batch evaluation kernel (`ndt_derivatives_dense_cross7`
//! or whichever kernel the pipeline's batch rounds run) over request rows `1..=rows` (row 0
//! is a request of no points in the kernel's parameters, so no row comes from the host), then
//! one launch of this kernel on the same stream: block `j` (one warp) takes row `j + 1` when
//! `j + 1 <= rows` (`rows` in device memory), the alignment `h = row_hyp[row]` whose pose it
//! was, stages `h`'s solver state ([`STATE_WORDS`] u64 at `state + h · STATE_WORDS · 8`) and
//! the row's sums into shared memory, and runs the single-alignment device solver's step
//! (`Solver::feed`, `next_step`, the eigen path of [`OPT_DEVICE_EIGEN`]: the host's
//! `Newton::feed` in its operation order, see the parent module). An alignment that goes on
//! appends its next request (the sines and cosines from [`sincos`]) at row `1 + atom.add(next_rows, 1)`
//! of the same request table and `h` at that row of `next_hyp`; one that stops writes its
//! result to `out` ([`BATCH_OUT_WORDS`] u64 per alignment: the accepted sums, pose,
//! iterations, evaluations, stop code, eigen-path steps). The state goes back to device
//! memory. The block that counts itself last in `finished` clears the points word of the rows
//! `next_rows + 1 ..= rows` (so a next evaluation launched over up to `rows` rows finds no
//! points there) and publishes `next_rows` in the mapped word `host_rows`, from which the
//! host sizes the round after the next one (a bound: counts only fall).
//!
//! Row order within a round depends on the order of the appends; each row's sums do not
//! (the evaluation kernel sums a row's blocks in block order), so results do not depend on it.
//!
//! Measured (H100, 256 Velodyne hypotheses in two chains of 128, `gpu-results/s12/ndtb-*.log`):
//! 160 registers, 832 bytes of shared memory, no spills; a 128-row launch takes 26 us alone
//! (ncu: one warp per SM, the slowest alignment's step, 4079 of the batch's 6430 steps take
//! the eigen path) and 65-78 us beside the other chain's evaluation kernel (its warp shares
//! the SM's issue slots with about 20 evaluation warps), which puts 2.1 ms of solver steps on
//! each chain's 6.0 ms critical path (evaluations 3.8 ms). Launched on high-priority streams
//! (the pipeline's default) its blocks take the first free slots: 36-54 us per 128-row launch,
//! batch 5.90 ms against 6.05 ms (`ndtb-4.log`).

use super::more_thuente::Done;
use super::state::*;
use super::*;
use crate::kernels::ndt::derivatives::REQUEST_BYTES;

/// Threads of a block: one solver warp per alignment.
pub const BATCH_THREADS: u32 = 32;

/// The build options of the batch solver (the single solver's `OPT_*` that act on a step):
/// Markstein divisions, safe lanes, the eigen path on the device with f32 rotation angles.
pub const BATCH_OPTS: u32 = OPT_FAST_DIV | OPT_SAFE_LANES | OPT_DEVICE_EIGEN | OPT_EIGEN_F32_ANGLE;

/// Words of one alignment's result in `out`: the accepted sums (words `0..VALUES`), then
/// the pose (6 f64) from [`BATCH_OUT_POSE`].
pub const BATCH_OUT_POSE: usize = VALUES;
/// Iterations (u32).
pub const BATCH_OUT_ITERATIONS: usize = VALUES + 6;
/// Evaluations (u32).
pub const BATCH_OUT_EVALUATIONS: usize = VALUES + 7;
/// Stop code (u32, [`STOP_CONVERGED`] .. or [`STOP_HOST`]).
pub const BATCH_OUT_STOP: usize = VALUES + 8;
/// Newton steps that took the eigen path (u32).
pub const BATCH_OUT_ASSISTS: usize = VALUES + 9;
/// u64 words per alignment in `out`.
pub const BATCH_OUT_WORDS: usize = VALUES + 11;

/// Builds `ndt_batch_solve` with [`BATCH_OPTS`].
pub fn build_batch_solve(target: Target) -> Module {
    build_batch_solve_opts(target, BATCH_OPTS)
}

/// Builds `ndt_batch_solve` with the solver build options `opts` (only the bits that act on
/// a step: [`OPT_FAST_DIV`], [`OPT_SAFE_LANES`], [`OPT_DEVICE_EIGEN`] (required: no host
/// answers eigen-path requests here), [`OPT_EIGEN_ALL_LANES`], [`OPT_EIGEN_F32_ANGLE`]).
pub fn build_batch_solve_opts(target: Target, opts: u32) -> Module {
    let opts = opts | OPT_DEVICE_EIGEN;
    let mut b = KernelBuilder::new("ndt_batch_solve");
    b.reqntid(BATCH_THREADS, 1, 1);
    let p_state = b.param::<U64>("state");
    let p_results = b.param::<U64>("results");
    let p_rows = b.param::<U64>("rows");
    let p_hyp = b.param::<U64>("row_hyp");
    let p_next_rows = b.param::<U64>("next_rows");
    let p_next_hyp = b.param::<U64>("next_hyp");
    let p_finished = b.param::<U64>("finished");
    let p_host_rows = b.param::<U64>("host_rows");
    let p_requests = b.param::<U64>("requests");
    let p_points = b.param::<U64>("points");
    let p_out = b.param::<U64>("out");
    let p_max_iterations = b.param::<U32>("max_iterations");
    let p_step_max = b.param::<F64>("step_max");
    let p_eps_t = b.param::<F64>("eps_t");
    let p_eps_r = b.param::<F64>("eps_r");
    let p_line_search = b.param::<U32>("line_search");
    let p_mu = b.param::<F64>("mu");
    let p_eta = b.param::<F64>("eta");
    let p_ls_max = b.param::<U32>("ls_max_evals");
    let p_x_tol = b.param::<F64>("x_tol");
    let p_neg_d1 = b.param::<F64>("neg_d1");
    let p_scale = b.param::<F64>("scale");
    let staged = b.shared_array::<U64>("solve_state", STATE_WORDS as u32);
    let sums = b.shared_array::<F64>("solve_sums", 32);

    let lane = b.special(Special::TidX);
    let lane0 = b.setp(Cmp::Eq, lane, 0u32);
    let blk = b.special(Special::CtaidX);
    let nblk = b.special(Special::NctaidX);
    let row = b.add(blk, 1u32);
    let rows_at = b.global_ptr(&p_rows);
    let rows = b.ld::<U32>(Space::Global, rows_at);
    let requests = b.global_ptr(&p_requests);
    let valid = b.setp(Cmp::Le, row, rows);
    // `valid` is the same in the whole block (one warp).
    b.if_then(valid, |b| {
        b.comment("batch solve: the row's alignment, its state and sums into shared memory");
        let hyp = b.global_ptr(&p_hyp);
        let ha = b.index_addr(hyp, row, 4);
        let h = b.ld::<U32>(Space::Global, ha);
        let state = b.global_ptr(&p_state);
        let st_at = b.index_addr(state, h, (STATE_WORDS * 8) as u32);
        b.for_range(lane, STATE_WORDS as u32, BATCH_THREADS, |b, w, _| {
            let a = b.index_addr(st_at, w, 8);
            let v = b.ld::<U64>(Space::Global, a);
            let s = b.shared_index(&staged, w);
            b.st(Space::Shared, s, v);
        });
        let results = b.global_ptr(&p_results);
        let mine = b.setp(Cmp::Lt, lane, VALUES as u32);
        b.if_then(mine, |b| {
            let k = b.mad(row, VALUES as u32, lane);
            let a = b.index_addr(results, k, 8);
            let v = b.ld::<F64>(Space::Global, a);
            let s = b.shared_index(&sums, lane);
            b.st(Space::Shared, s, v);
        });
        b.bar_sync();
        let ls = b.ld_param(&p_line_search);
        let yes = b.setp(Cmp::Eq, ls, ls);
        let r = Regs {
            state: State {
                global: st_at,
                staged: staged.clone(),
                lane0,
                global_too: false,
            },
            lane,
            lane0,
            max_iterations: b.ld_param(&p_max_iterations),
            step_max: b.ld_param(&p_step_max),
            eps_t: b.ld_param(&p_eps_t),
            eps_r: b.ld_param(&p_eps_r),
            line_search: b.setp(Cmp::Ne, ls, 0u32),
            mu: b.ld_param(&p_mu),
            eta: b.ld_param(&p_eta),
            ls_max_evals: b.ld_param(&p_ls_max),
            x_tol: b.ld_param(&p_x_tol),
            neg_d1: b.ld_param(&p_neg_d1),
            scale: b.ld_param(&p_scale),
            yes,
            no: b.not(yes),
            sums: sums.clone(),
            prof: None,
            opts,
        };
        let io = BatchIo {
            h,
            requests,
            next_rows: b.global_ptr(&p_next_rows),
            next_hyp: b.global_ptr(&p_next_hyp),
            points: b.global_ptr(&p_points),
            out: b.global_ptr(&p_out),
        };
        batch_step(b, &r, &io);
        b.comment("batch solve: the state back to device memory");
        b.bar_sync();
        b.for_range(lane, STATE_WORDS as u32, BATCH_THREADS, |b, w, _| {
            let s = b.shared_index(&staged, w);
            let v = b.ld::<U64>(Space::Shared, s);
            let a = b.index_addr(st_at, w, 8);
            b.st(Space::Global, a, v);
        });
    });
    b.comment("batch solve: count the block; the last one clears the rows no request took");
    let finished = b.global_ptr(&p_finished);
    let next_rows = b.global_ptr(&p_next_rows);
    let host_rows = b.global_ptr(&p_host_rows);
    b.fence_acq_rel(Scope::Gpu);
    b.if_then(lane0, |b| {
        let before = b.atom::<U32>(Space::Global, AtomOp::Add, finished, 1u32);
        let last_index = b.sub(nblk, 1u32);
        let last = b.setp(Cmp::Eq, before, last_index);
        b.if_then(last, |b| {
            b.fence_acq_rel(Scope::Gpu);
            let n = b.ld_relaxed_gpu::<U32>(next_rows);
            let from = b.add(n, 1u32);
            let to = b.add(rows, 1u32);
            b.for_range(from, to, 1u32, |b, k, _| {
                let a: Addr = b.index_addr(requests, k, REQUEST_BYTES as u32).into();
                b.st(Space::Global, a.off(72), 0u64);
            });
            b.fence_acq_rel(Scope::Sys);
            b.st_relaxed_sys::<U32>(host_rows, n);
        });
    });
    Module::single(target, b.finish())
}

/// Where a step's request or result goes.
struct BatchIo {
    /// The alignment.
    h: Reg<U32>,
    requests: Reg<U64>,
    next_rows: Reg<U64>,
    next_hyp: Reg<U64>,
    points: Reg<U64>,
    out: Reg<U64>,
}

/// One solver step of alignment `io.h` with its sums and state staged (the single solver's
/// `SolveCtx::step` with the batch's request and result records instead of the relay and the
/// mapped result).
#[allow(clippy::needless_range_loop)] // k indexes poses and records alike
fn batch_step(b: &mut KernelBuilder, r: &Regs, io: &BatchIo) {
    b.comment("batch solve: one step of the host's Newton / More-Thuente solver");
    let st = r.state.clone();
    let dummy64 = b.mov(0u64);
    let s = Solver {
        r,
        pose: std::array::from_fn(|k| st.ld_f64(b, S_POSE + k)),
        dir: std::array::from_fn(|k| st.ld_f64(b, S_DIR + k)),
        pending: std::array::from_fn(|k| st.ld_f64(b, S_PENDING + k)),
        phase: st.ld_u32(b, S_PHASE),
        iters: st.ld_u32(b, S_ITERS),
        evals: st.ld_u32(b, S_EVALS),
        kind: b.mov(0u32),
        stepv: [(); 6].map(|_| b.mov(0.0f64)),
        stop: b.mov(STOP_HOST),
        // Only the host round trip of the eigen path reads these (not built here).
        out: dummy64,
        mailbox: dummy64,
        idle_ns: dummy64,
        token: b.mov(0u32),
    };
    let e = b.add(s.evals, 1u32);
    b.mov_to(s.evals, e);
    let (next, request, finish, end) = (
        b.label("bsolve_next"),
        b.label("bsolve_request"),
        b.label("bsolve_finish"),
        b.label("bsolve_end"),
    );
    s.start_or_plain_step(b, &next);
    let (f, g) = s.trial_values(b);
    let done = Done {
        a: b.mov(0.0f64),
        use_fed: b.mov(r.yes),
    };
    let (trial_l, done_l) = (b.label("bsolve_trial"), b.label("bsolve_done"));
    let trial = s.feed(b, f, g, &done, &trial_l, &done_l, |b| s.copy_sums_to_lo(b));
    b.place(&trial_l);
    s.move_pending(b, trial);
    b.bra(&request);
    b.place(&done_l);
    s.accept(b, &done);
    b.place(&next);
    s.next_step(b, &finish, &request);

    b.place(&request);
    b.comment("batch solve: the next request record at the next free row");
    let lane0 = r.lane0;
    // Every lane has read the staged words it needs.
    b.warp_sync(u32::MAX);
    b.when(lane0, |b| {
        for (w, v) in [(S_POSE, s.pose), (S_DIR, s.dir), (S_PENDING, s.pending)] {
            for k in 0..6 {
                st.put_next_f64(b, w + k, v[k]);
            }
        }
        st.put_next_u32(b, S_PHASE, s.phase);
        st.put_next_u32(b, S_ITERS, s.iters);
        st.put_next_u32(b, S_EVALS, s.evals);
    });
    let mut rec = s.request_record(b, &finish);
    let pa = b.index_addr(io.points, io.h, 8);
    rec.push(b.ld::<U64>(Space::Global, pa));
    let (requests, next_rows, next_hyp, h) = (io.requests, io.next_rows, io.next_hyp, io.h);
    b.when(lane0, |b| {
        let j = b.atom::<U32>(Space::Global, AtomOp::Add, next_rows, 1u32);
        let row = b.add(j, 1u32);
        let to: Addr = b.index_addr(requests, row, REQUEST_BYTES as u32).into();
        for k in 0..5 {
            b.st_v2::<U64>(
                Space::Global,
                to.off(16 * k as i64),
                [rec[2 * k], rec[2 * k + 1]],
            );
        }
        let ha = b.index_addr(next_hyp, row, 4);
        b.st(Space::Global, ha, h);
    });
    b.bra(&end);

    b.place(&finish);
    b.comment("batch solve: the alignment's result");
    let vals: Vec<Reg<F64>> = (0..VALUES).map(|k| s.sum(b, k)).collect();
    let n = st.ld_u32(b, S_ASSISTS);
    let out = io.out;
    b.when(lane0, |b| {
        let base = b.index_addr(out, h, (BATCH_OUT_WORDS * 8) as u32);
        for (k, v) in vals.iter().enumerate() {
            put_f64(b, base, k, *v);
        }
        for k in 0..6 {
            put_f64(b, base, BATCH_OUT_POSE + k, s.pose[k]);
        }
        put_u32(b, base, BATCH_OUT_ITERATIONS, s.iters);
        put_u32(b, base, BATCH_OUT_EVALUATIONS, s.evals);
        put_u32(b, base, BATCH_OUT_STOP, s.stop);
        put_u32(b, base, BATCH_OUT_ASSISTS, n);
    });
    b.place(&end);
}

//! One step of the device solver (see the parent module's docs): the host's `Newton::feed`
//! flow over the phases, the next request through the relay, or the result and the stop
//! command.

use super::more_thuente::Done;
use super::state::*;
use super::*;
use crate::kernels::ndt::derivatives::server::{CMD_EVALUATE, CMD_STOP, RESULT_SEQ_WORD};

impl SolveCtx {
    /// Warp 0 of the block that reduced last, with the sums in [`SolveCtx::sums`]: one solver
    /// step (every lane computes it, lane 0 stores), then the next request (`seq + 1`) or the result and the stop command. `out` is
    /// the mapped results, `mailbox` the mapped host-to-device words, `token` the launch's
    /// `first_seq`.
    #[allow(clippy::too_many_arguments, clippy::needless_range_loop)] // the serving loop's registers
    pub fn step(
        &self,
        b: &mut KernelBuilder,
        relay: Reg<U64>,
        seq: Reg<U32>,
        out: Reg<U64>,
        mailbox: Reg<U64>,
        idle_ns: Reg<U64>,
        token: Reg<U32>,
    ) {
        b.comment("device solve: one step of the host's Newton / More-Thuente solver");
        let t0 = b.globaltimer();
        let r = self.regs(b);
        profile::stamp(b, &r.prof, r.lane0, profile::P_REDUCED);
        profile::count(b, &r.prof, r.lane0, profile::P_EVALS);
        self.prof_spans(b, r.lane0);
        let st = r.state.clone();
        let s = Solver {
            r: &r,
            pose: std::array::from_fn(|k| st.ld_f64(b, S_POSE + k)),
            dir: std::array::from_fn(|k| st.ld_f64(b, S_DIR + k)),
            pending: std::array::from_fn(|k| st.ld_f64(b, S_PENDING + k)),
            phase: st.ld_u32(b, S_PHASE),
            iters: st.ld_u32(b, S_ITERS),
            evals: st.ld_u32(b, S_EVALS),
            kind: b.mov(0u32),
            stepv: [(); 6].map(|_| b.mov(0.0f64)),
            stop: b.mov(STOP_HOST),
            out,
            mailbox,
            idle_ns,
            token,
        };
        let e = b.add(s.evals, 1u32);
        b.mov_to(s.evals, e);
        let (next, request, finish, end) = (
            b.label("solve_next"),
            b.label("solve_request"),
            b.label("solve_finish"),
            b.label("solve_end"),
        );
        s.start_or_plain_step(b, &next);
        let (f, g) = s.trial_values(b);
        let done = Done {
            a: b.mov(0.0f64),
            use_fed: b.mov(r.yes),
        };
        let (trial_l, done_l) = (b.label("solve_trial"), b.label("solve_done"));
        let trial = s.feed(b, f, g, &done, &trial_l, &done_l, |b| s.copy_sums_to_lo(b));
        b.place(&trial_l);
        profile::stamp(b, &r.prof, r.lane0, profile::P_FEED);
        profile::count(b, &r.prof, r.lane0, profile::P_TRIALS);
        s.move_pending(b, trial);
        b.bra(&request);
        b.place(&done_l);
        s.accept(b, &done);
        b.place(&next);
        profile::stamp(b, &r.prof, r.lane0, profile::P_FEED);
        profile::count(b, &r.prof, r.lane0, profile::P_NEWTON);
        s.next_step(b, &finish, &request);

        b.place(&request);
        profile::stamp(b, &r.prof, r.lane0, profile::P_NEXT);
        b.comment("device solve: the next request record through the relay");
        let lane0 = r.lane0;
        if !st.global_too {
            // Every lane has read the staged words it needs.
            b.warp_sync(u32::MAX);
        }
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
        profile::stamp(b, &r.prof, r.lane0, profile::P_STORE);
        let mut rec = s.request_record(b, &finish);
        rec.push(self.points_word(b));
        let to = Addr::from(relay).off(16);
        b.when(lane0, |b| {
            for k in 0..5 {
                b.st_v2::<U64>(
                    Space::Global,
                    to.off(16 * k as i64),
                    [rec[2 * k], rec[2 * k + 1]],
                );
            }
        });
        let spent = elapsed(b, t0);
        let ns = st.ld_u64(b, S_SOLVE_NS);
        let ns = b.add(ns, spent);
        st.st_u64(b, S_SOLVE_NS, ns);
        self.prof_before_release(b, lane0);
        relay_command(b, lane0, relay, seq, CMD_EVALUATE);
        self.prof_released(b, lane0);
        profile::stamp(b, &r.prof, r.lane0, profile::P_SEND);
        b.bra(&end);

        b.place(&finish);
        b.comment("device solve: the result into mapped memory, then the stop command");
        let vals: Vec<Reg<F64>> = (0..VALUES).map(|k| s.sum(b, k)).collect();
        let n = st.ld_u32(b, S_ASSISTS);
        let spent = elapsed(b, t0);
        let ns = st.ld_u64(b, S_SOLVE_NS);
        let ns = b.add(ns, spent);
        let began = st.ld_u64(b, S_START_NS);
        let total = elapsed(b, began);
        let t = b.cvt::<U64, U32>(token);
        let t = b.or(t, DONE);
        b.when(lane0, |b| {
            for (k, v) in vals.iter().enumerate() {
                put_f64(b, out, k, *v);
            }
            for k in 0..6 {
                put_f64(b, out, OUT_POSE + k, s.pose[k]);
            }
            put_u32(b, out, OUT_ITERATIONS, s.iters);
            put_u32(b, out, OUT_EVALUATIONS, s.evals);
            put_u32(b, out, OUT_STOP, s.stop);
            put_u32(b, out, OUT_ASSISTS, n);
            b.st(
                Space::Global,
                Addr::from(out).off(8 * OUT_SOLVE_NS as i64),
                ns,
            );
            b.st(
                Space::Global,
                Addr::from(out).off(8 * OUT_TOTAL_NS as i64),
                total,
            );
        });
        self.prof_dump(b, lane0, st.global);
        b.fence_acq_rel(Scope::Sys);
        b.when(lane0, |b| {
            b.st_relaxed_sys::<U64>(Addr::from(out).off(8 * RESULT_SEQ_WORD as i64), t)
        });
        relay_command(b, lane0, relay, seq, CMD_STOP);
        b.place(&end);
    }
}
/// `%globaltimer − since`.
fn elapsed(b: &mut KernelBuilder, since: Reg<U64>) -> Reg<U64> {
    let now = b.globaltimer();
    b.sub(now, since)
}

/// Releases `(seq + 1) | cmd << 32` into the relay word.
fn relay_command(
    b: &mut KernelBuilder,
    lane0: Reg<Pred>,
    relay: Reg<U64>,
    seq: Reg<U32>,
    cmd: u32,
) {
    let s1 = b.add(seq, 1u32);
    let w = b.cvt::<U64, U32>(s1);
    let w = b.or(w, u64::from(cmd) << 32);
    b.when(lane0, |b| b.st_release_gpu::<U64>(relay, w));
}

impl Solver<'_> {
    /// The next request's record without its points word: sin and cos of the pending pose's three
    /// angles, then its translation. Angles beyond the f64 sin/cos range stop the alignment with
    /// `STOP_HOST` (the host solver finishes it).
    pub(super) fn request_record(&self, b: &mut KernelBuilder, finish: &Label) -> Vec<Reg<U64>> {
        let mut in_range: Option<Reg<Pred>> = None;
        let mut rec: Vec<Reg<U64>> = Vec::with_capacity(10);
        for k in 3..6 {
            let a = b.abs(self.pending[k]);
            let ok = b.setp(Cmp::Lt, a, sincos::SINCOS_MAX_ARG);
            in_range = Some(match in_range {
                None => ok,
                Some(p) => b.and(p, ok),
            });
            let (sn, cs) = sincos::sincos_f64(b, self.pending[k]);
            rec.push(b.bitcast::<U64, F64>(sn));
            rec.push(b.bitcast::<U64, F64>(cs));
        }
        let far = b.not(in_range.expect("three angles"));
        b.if_then(far, |b| {
            b.mov_to(self.stop, STOP_HOST);
            b.bra(finish);
        });
        for k in 0..3 {
            rec.push(b.bitcast::<U64, F64>(self.pending[k]));
        }
        rec
    }

    /// A fresh alignment goes straight to `next`; a plain Newton step (no line search) takes
    /// the pending pose as the step (kind 2, one more iteration) and goes to `next` too.
    pub(super) fn start_or_plain_step(&self, b: &mut KernelBuilder, next: &Label) {
        let start = b.setp(Cmp::Eq, self.phase, PHASE_START);
        b.bra_if(start, next);
        let plain = b.setp(Cmp::Eq, self.phase, PHASE_STEP);
        b.if_then(plain, |b| {
            for k in 0..6 {
                let d = b.sub(self.pending[k], self.pose[k]);
                b.mov_to(self.stepv[k], d);
                b.mov_to(self.pose[k], self.pending[k]);
            }
            let i = b.add(self.iters, 1u32);
            b.mov_to(self.iters, i);
            b.mov_to(self.kind, 2u32);
            b.bra(next);
        });
    }

    /// The line search at the trial the shared sums describe: φ = −score, φ' = −gradient · dir.
    pub(super) fn trial_values(&self, b: &mut KernelBuilder) -> (Reg<F64>, Reg<F64>) {
        let r = self.r;
        let sc = self.sum(b, crate::kernels::ndt::derivatives::SCORE_INDEX);
        let score = b.mul(r.neg_d1, sc);
        let f = b.neg(score);
        let grad: [Reg<F64>; 6] = std::array::from_fn(|k| {
            let v = self.sum(b, crate::kernels::ndt::derivatives::GRADIENT_INDEX + k);
            b.mul(r.scale, v)
        });
        let gd = newton::dot6(b, &grad, &self.dir);
        let g = b.neg(gd);
        (f, g)
    }

    /// The line search's end: the best end's sums become the accepted linearization when the last
    /// fed trial was not it; then no decrease (kind 1) or the step `a · dir` taken (kind 2).
    pub(super) fn accept(&self, b: &mut KernelBuilder, done: &Done) {
        let from_lo = b.not(done.use_fed);
        b.if_then(from_lo, |b| self.copy_lo_to_sums(b));
        let no_decrease = b.setp(Cmp::Eq, done.a, 0.0f64);
        b.if_else(
            no_decrease,
            |b| b.mov_to(self.kind, 1u32),
            |b| {
                for k in 0..6 {
                    let d = b.mul(done.a, self.dir[k]);
                    b.mov_to(self.stepv[k], d);
                    let p = b.add(self.pose[k], d);
                    b.mov_to(self.pose[k], p);
                }
                let i = b.add(self.iters, 1u32);
                b.mov_to(self.iters, i);
                b.mov_to(self.kind, 2u32);
            },
        );
    }

    /// Sum `k` from shared memory.
    pub(super) fn sum(&self, b: &mut KernelBuilder, k: usize) -> Reg<F64> {
        b.ld::<F64>(Space::Shared, self.r.sums.at(k as u32))
    }

    /// The shared sums into the best-end payload.
    pub(super) fn copy_sums_to_lo(&self, b: &mut KernelBuilder) {
        for k in 0..VALUES {
            let v = self.sum(b, k);
            self.r.state.st_f64(b, S_LO_SUMS + k, v);
        }
    }

    /// The best-end payload into the shared sums (it becomes the accepted linearization).
    pub(super) fn copy_lo_to_sums(&self, b: &mut KernelBuilder) {
        // Every lane has read the fed sums before lane 0 overwrites them (racecheck found the
        // batch solver's copy without this barrier).
        b.warp_sync(u32::MAX);
        for k in 0..VALUES {
            let v = self.r.state.ld_f64(b, S_LO_SUMS + k);
            let a = self.r.sums.at(k as u32);
            b.when(self.r.lane0, |b| b.st(Space::Shared, a, v));
        }
        // The other lanes read them next.
        b.warp_sync(u32::MAX);
    }
}

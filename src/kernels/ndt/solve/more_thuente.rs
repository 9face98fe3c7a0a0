//! The Moré–Thuente line search of the device solver: the host's `ndt::line_search::MoreThuente`
//! (`start` and `feed`) for one thread, with its state in the solver's state words between
//! evaluations. The payload of the best end (the sums at `lo`) is the state's `LO_SUMS` block,
//! which the caller copies when the search says so.

use super::interpolate::{clamp, step, End};
use super::{Regs, Solver, State};
use super::{
    S_BRACKETED, S_F0, S_G0, S_HI_A, S_LO_A, S_LS_EVALS, S_STAGE1, S_STEP_MAX, S_STEP_MIN, S_TRIAL,
    S_WIDTH, S_WIDTH1,
};
use crate::ptx::*;

/// The search state in registers.
pub(super) struct Search {
    f0: Reg<F64>,
    g0: Reg<F64>,
    lo: End,
    hi: End,
    bracketed: Reg<Pred>,
    stage1: Reg<Pred>,
    width: Reg<F64>,
    width1: Reg<F64>,
    step_min: Reg<F64>,
    step_max: Reg<F64>,
    /// The trial step (after `feed`: the next one).
    pub(super) trial: Reg<F64>,
    evals: Reg<U32>,
}

/// Where `feed` leaves: `Done` with the step and whether its payload is the fed sums (else the
/// best end's, in `LO_SUMS`).
pub(super) struct Done {
    pub(super) a: Reg<F64>,
    pub(super) use_fed: Reg<Pred>,
}

impl Search {
    fn load(b: &mut KernelBuilder, st: &State) -> Search {
        let f = |b: &mut KernelBuilder, w: usize| st.ld_f64(b, w);
        let flag = |b: &mut KernelBuilder, w: usize| {
            let v = st.ld_u32(b, w);
            b.setp(Cmp::Ne, v, 0u32)
        };
        Search {
            f0: f(b, S_F0),
            g0: f(b, S_G0),
            lo: End {
                a: f(b, S_LO_A),
                f: f(b, S_LO_A + 1),
                g: f(b, S_LO_A + 2),
            },
            hi: End {
                a: f(b, S_HI_A),
                f: f(b, S_HI_A + 1),
                g: f(b, S_HI_A + 2),
            },
            bracketed: flag(b, S_BRACKETED),
            stage1: flag(b, S_STAGE1),
            width: f(b, S_WIDTH),
            width1: f(b, S_WIDTH1),
            step_min: f(b, S_STEP_MIN),
            step_max: f(b, S_STEP_MAX),
            trial: f(b, S_TRIAL),
            evals: st.ld_u32(b, S_LS_EVALS),
        }
    }

    pub(super) fn store(&self, b: &mut KernelBuilder, st: &State) {
        let vals = [
            (S_F0, self.f0),
            (S_G0, self.g0),
            (S_LO_A, self.lo.a),
            (S_LO_A + 1, self.lo.f),
            (S_LO_A + 2, self.lo.g),
            (S_HI_A, self.hi.a),
            (S_HI_A + 1, self.hi.f),
            (S_HI_A + 2, self.hi.g),
            (S_WIDTH, self.width),
            (S_WIDTH1, self.width1),
            (S_STEP_MIN, self.step_min),
            (S_STEP_MAX, self.step_max),
            (S_TRIAL, self.trial),
        ];
        for (w, v) in vals {
            st.st_f64(b, w, v);
        }
        let br = b.selp(1u32, 0u32, self.bracketed);
        st.st_u32(b, S_BRACKETED, br);
        let s1 = b.selp(1u32, 0u32, self.stage1);
        st.st_u32(b, S_STAGE1, s1);
        st.st_u32(b, S_LS_EVALS, self.evals);
    }

    /// `MoreThuente::start(f0, g0, _, a_init, a_max, p)`: the state, with the first trial in
    /// `trial`.
    pub(super) fn start(
        b: &mut KernelBuilder,
        r: &Regs,
        f0: Reg<F64>,
        g0: Reg<F64>,
        a_init: Reg<F64>,
    ) -> Search {
        let a_max = r.step_max;
        let trial = clamp(b, a_init, 0.0f64, a_max);
        let zero = b.mov(0.0f64);
        let width = b.sub(a_max, 0.0f64);
        let width1 = b.mul(2.0f64, width);
        let four = b.mul(4.0f64, trial);
        let step_max = b.add(trial, four);
        Search {
            f0,
            g0,
            lo: End {
                a: zero,
                f: f0,
                g: g0,
            },
            hi: End {
                a: zero,
                f: f0,
                g: g0,
            },
            bracketed: r.no,
            stage1: r.yes,
            width,
            width1,
            step_min: zero,
            step_max,
            trial,
            evals: b.mov(0u32),
        }
    }
}

impl Solver<'_> {
    /// `MoreThuente::feed(f, g, _)` on the state in `st`: branches to `trial_l` with the next
    /// trial in the returned register (state stored), or to `done_l` with `done` filled. `moved_lo` runs where the best end moved to the fed step (its payload changes).
    #[allow(clippy::too_many_arguments)] // the fed values, the exits and the payload hook
    pub(super) fn feed(
        &self,
        b: &mut KernelBuilder,
        f: Reg<F64>,
        g: Reg<F64>,
        done: &Done,
        trial_l: &Label,
        done_l: &Label,
        moved_lo: impl FnOnce(&mut KernelBuilder),
    ) -> Reg<F64> {
        let r = self.r;
        let st = &r.state;
        let s = Search::load(b, st);
        let ev = b.add(s.evals, 1u32);
        b.mov_to(s.evals, ev);
        let a = b.mov(s.trial);
        let gtest = b.mul(r.mu, s.g0);
        let agt = b.mul(a, gtest);
        let ftest = b.add(s.f0, agt);
        let out_of_evals = b.setp(Cmp::Ge, s.evals, r.ls_max_evals);
        let finish = |b: &mut KernelBuilder, step: Reg<F64>, fed: Reg<Pred>| {
            b.mov_to(done.a, step);
            b.mov_to(done.use_fed, fed);
            b.bra(done_l);
        };
        // A non-finite value: shrink towards the best end.
        let af = b.abs(f);
        let ag = b.abs(g);
        let ff = b.setp(Cmp::Lt, af, f64::INFINITY);
        let gf = b.setp(Cmp::Lt, ag, f64::INFINITY);
        let finite = b.and(ff, gf);
        let shrink = b.label("mt_finite");
        b.bra_if(finite, &shrink);
        {
            let d = b.sub(a, s.lo.a);
            let h = b.mul(0.5f64, d);
            let next = b.add(s.lo.a, h);
            let moved = b.sub(next, s.lo.a);
            let moved = b.abs(moved);
            let aa = b.abs(a);
            let tol = b.mul(r.x_tol, aa);
            let tiny = b.setp(Cmp::Le, moved, tol);
            let give_up = b.or(out_of_evals, tiny);
            b.if_then(give_up, |b| finish(b, s.lo.a, r.no));
            b.mov_to(s.trial, next);
            s.store(b, st);
            b.bra(trial_l);
        }
        b.place(&shrink);
        let decrease = b.setp(Cmp::Le, f, ftest);
        let ng0 = b.neg(s.g0);
        let curv = b.mul(r.eta, ng0);
        let flat = b.setp(Cmp::Le, ag, curv);
        let wolfe = b.and(decrease, flat);
        b.if_then(wolfe, |b| finish(b, a, r.yes));
        let below_min = b.setp(Cmp::Le, a, s.step_min);
        let above_max = b.setp(Cmp::Ge, a, s.step_max);
        let outside = b.or(below_min, above_max);
        let rounding = b.and(s.bracketed, outside);
        let span = b.sub(s.step_max, s.step_min);
        let xw = b.mul(r.x_tol, s.step_max);
        let thin = b.setp(Cmp::Le, span, xw);
        let narrow = b.and(s.bracketed, thin);
        let is_max = b.setp(Cmp::Eq, a, r.step_max);
        let g_le = b.setp(Cmp::Le, g, gtest);
        let at_max = b.and(is_max, decrease);
        let at_max = b.and(at_max, g_le);
        b.if_then(at_max, |b| finish(b, a, r.yes));
        let is_min = b.setp(Cmp::Eq, a, 0.0f64);
        let f_gt = b.setp(Cmp::Gt, f, ftest);
        let g_ge = b.setp(Cmp::Ge, g, gtest);
        let worse = b.or(f_gt, g_ge);
        let at_min = b.and(is_min, worse);
        let stop = b.or(rounding, narrow);
        let stop = b.or(stop, at_min);
        let stop = b.or(stop, out_of_evals);
        b.if_then(stop, |b| {
            let better = b.setp(Cmp::Lt, f, s.lo.f);
            let step = b.selp(a, s.lo.a, better);
            finish(b, step, better)
        });
        let m = b.min(r.mu, r.eta);
        let mg = b.mul(m, s.g0);
        let g_ok = b.setp(Cmp::Ge, g, mg);
        let leave = b.and(s.stage1, decrease);
        let leave = b.and(leave, g_ok);
        let s1 = b.not(leave);
        let s1 = b.and(s.stage1, s1);
        b.mov_to(s.stage1, s1);
        let t = End { a, f, g };
        let low = b.setp(Cmp::Le, f, s.lo.f);
        let psi = b.and(s.stage1, low);
        let psi = b.and(psi, f_gt);
        // First stage: step on ψ (φ shifted by the sufficient-decrease line); otherwise the
        // ends as they are (selected, so the values are untouched bit for bit).
        let shift = |b: &mut KernelBuilder, e: End, sign: f64| {
            let ag = b.mul(e.a, gtest);
            let (f2, g2) = if sign < 0.0 {
                (b.sub(e.f, ag), b.sub(e.g, gtest))
            } else {
                (b.add(e.f, ag), b.add(e.g, gtest))
            };
            End {
                a: b.mov(e.a),
                f: b.selp(f2, e.f, psi),
                g: b.selp(g2, e.g, psi),
            }
        };
        let lo_m = shift(b, s.lo, -1.0);
        let hi_m = shift(b, s.hi, -1.0);
        let t_m = shift(b, t, -1.0);
        let lo_m = End::copy(b, lo_m);
        let hi_m = End::copy(b, hi_m);
        let (next, moved) = step(
            b,
            lo_m,
            hi_m,
            t_m,
            s.bracketed,
            s.step_min,
            s.step_max,
            r.yes,
        );
        let lo_u = shift(b, lo_m, 1.0);
        let hi_u = shift(b, hi_m, 1.0);
        s.lo.set(b, lo_u);
        s.hi.set(b, hi_u);
        b.mov_to(s.trial, next);
        b.if_then(moved, moved_lo);
        b.if_else(
            s.bracketed,
            |b| {
                let d = b.sub(s.hi.a, s.lo.a);
                let w = b.abs(d);
                let lim = b.mul(0.66f64, s.width1);
                let wide = b.setp(Cmp::Ge, w, lim);
                b.if_then(wide, |b| {
                    let h = b.mul(0.5f64, d);
                    let mid = b.add(s.lo.a, h);
                    b.mov_to(s.trial, mid);
                });
                b.mov_to(s.width1, s.width);
                b.mov_to(s.width, w);
                let lo_a = b.min(s.lo.a, s.hi.a);
                let hi_a = b.max(s.lo.a, s.hi.a);
                b.mov_to(s.step_min, lo_a);
                b.mov_to(s.step_max, hi_a);
            },
            |b| {
                let d = b.sub(s.trial, s.lo.a);
                let d1 = b.mul(1.1f64, d);
                let d4 = b.mul(4.0f64, d);
                let lo_s = b.add(s.trial, d1);
                let hi_s = b.add(s.trial, d4);
                b.mov_to(s.step_min, lo_s);
                b.mov_to(s.step_max, hi_s);
            },
        );
        let tr = clamp(b, s.trial, 0.0f64, r.step_max);
        b.mov_to(s.trial, tr);
        let le = b.setp(Cmp::Le, s.trial, s.step_min);
        let ge = b.setp(Cmp::Ge, s.trial, s.step_max);
        let span = b.sub(s.step_max, s.step_min);
        let xw = b.mul(r.x_tol, s.step_max);
        let thin = b.setp(Cmp::Le, span, xw);
        let any = b.or(le, ge);
        let any = b.or(any, thin);
        let stuck = b.and(s.bracketed, any);
        let at = b.abs(s.trial);
        let tf = b.setp(Cmp::Lt, at, f64::INFINITY);
        let nf = b.not(tf);
        let end = b.or(stuck, nf);
        b.if_then(end, |b| finish(b, s.lo.a, r.no));
        s.store(b, st);
        b.bra(trial_l);
        s.trial
    }
}

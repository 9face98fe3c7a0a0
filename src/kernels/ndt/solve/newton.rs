//! The device solver's Newton step at the accepted pose: the host's `Newton::next_step` and
//! `newton_step::newton_increment` (Cholesky path) for one thread, operation for operation.
//!
//! The host takes the Cholesky solve when the shifted matrix `−H − τ I` (`τ = 1e-9 ‖−H‖_∞`) and
//! `−H` both have Cholesky factors, and the symmetric eigen-decomposition otherwise. The device
//! does the first (nalgebra's left-looking factorisation and triangular solves, same order of
//! operations) and, for a zero Hessian, the eigen path's answer (singular); anything else takes
//! the eigen path on the device (`super::OPT_DEVICE_EIGEN`, `eigen/`) or, in builds without it,
//! asks the host, which is spinning on the result anyway ([`Solver::assist`]: the Hessian
//! and gradient out, the host's `newton_increment` back, one PCIe round trip and a host
//! eigen-decomposition, so the increment is the host path's bit for bit). A host that does not
//! answer within the idle timeout ends the kernel with [`super::STOP_HOST`].

use super::{put_f64, Regs, Solver, PHASE_SEARCH, PHASE_STEP, STOP_CONVERGED};
use super::{ASSIST_GRADIENT, ASSIST_HESSIAN, ASSIST_WORD, STOP_HOST, S_ASSISTS};
use super::{STOP_MAX_ITERATIONS, STOP_NO_CORRESPONDENCES, STOP_SINGULAR, STOP_STALLED};
use crate::kernels::ndt::derivatives::{hessian_index, COUNT_INDEX, GRADIENT_INDEX, SCORE_INDEX};
use crate::kernels::ndt::solve::factor::{at, cholesky_pair, solve, Lower};
use crate::kernels::ndt::solve::more_thuente::Search;
use crate::ptx::*;

/// `EIGEN_FLOOR` of `ndt::newton_step`.
const EIGEN_FLOOR: f64 = 1e-9;
/// `STALL_FACTOR` of `ndt::solver`.
const STALL_FACTOR: f64 = 10.0;

/// `sqrt(x0² + x1² + x2²)` as nalgebra's 3-vector norm adds them.
fn norm3(b: &mut KernelBuilder, x: &[Reg<F64>]) -> Reg<F64> {
    let sq: Vec<Reg<F64>> = x.iter().map(|v| b.mul(*v, *v)).collect();
    let s = b.add(sq[0], sq[1]);
    let s = b.add(s, sq[2]);
    b.sqrt(s)
}

/// `Σ a_k b_k` from 0, in order (nalgebra's dot of 6-vectors).
pub(super) fn dot6(b: &mut KernelBuilder, x: &[Reg<F64>; 6], y: &[Reg<F64>; 6]) -> Reg<F64> {
    let mut acc = b.mov(0.0f64);
    for k in 0..6 {
        let p = b.mul(x[k], y[k]);
        acc = b.add(acc, p);
    }
    acc
}

/// `|x| < ∞` (false for NaN).
fn finite(b: &mut KernelBuilder, x: Reg<F64>) -> Reg<Pred> {
    let a = b.abs(x);
    b.setp(Cmp::Lt, a, f64::INFINITY)
}

impl Solver<'_> {
    /// The decoded score, gradient and Hessian (upper triangle, `h[hessian_index(i, j)]`) of
    /// the sums in shared memory.
    pub(super) fn decode(&self, b: &mut KernelBuilder) -> (Reg<F64>, [Reg<F64>; 6], Vec<Reg<F64>>) {
        let r = self.r;
        let s = self.sum(b, SCORE_INDEX);
        let score = b.mul(r.neg_d1, s);
        let grad: [Reg<F64>; 6] = std::array::from_fn(|k| {
            let v = self.sum(b, GRADIENT_INDEX + k);
            b.mul(r.scale, v)
        });
        let mut h = vec![score; 28];
        for i in 0..6 {
            for j in i..6 {
                let v = self.sum(b, hessian_index(i, j));
                h[hessian_index(i, j)] = b.mul(r.scale, v);
            }
        }
        (score, grad, h)
    }

    /// `next_step` with the accepted linearization in the shared sums, the pose in `self.pose`
    /// and the progress in `self.kind` / `self.stepv`. Ends by branching to `finish` (stop code
    /// in `self.stop`) or to `request` (next pose in `self.pending`, phase and search stored).
    pub(super) fn next_step(&self, b: &mut KernelBuilder, finish: &Label, request: &Label) {
        let r: &Regs = self.r;
        let stop_with = |b: &mut KernelBuilder, p: Reg<Pred>, code: u32| {
            b.if_then(p, |b| {
                b.mov_to(self.stop, code);
                b.bra(finish);
            });
        };
        let count = self.sum(b, COUNT_INDEX);
        let none = b.setp(Cmp::Eq, count, 0.0f64);
        stop_with(b, none, STOP_NO_CORRESPONDENCES);
        let (score, grad, h) = self.decode(b);
        let mut ok = finite(b, score);
        for v in grad.iter().chain(h[7..28].iter()) {
            let f = finite(b, *v);
            ok = b.and(ok, f);
        }
        let bad = b.not(ok);
        stop_with(b, bad, STOP_SINGULAR);
        // a = −H (lower triangle), its row-sum norm.
        let mut a: Lower = [[None; 6]; 6];
        for i in 0..6 {
            for j in 0..=i {
                a[i][j] = Some(b.neg(h[hessian_index(j, i)]));
            }
        }
        let mut norm = b.mov(0.0f64);
        for i in 0..6 {
            let mut s = b.mov(-0.0f64);
            for j in 0..6 {
                let v = if j <= i { at(&a, i, j) } else { at(&a, j, i) };
                let av = b.abs(v);
                s = b.add(s, av);
            }
            norm = b.max(norm, s);
        }
        // A zero −H: every eigenvalue is 0, the host's eigen path finds it singular.
        let zero = b.setp(Cmp::Eq, norm, 0.0f64);
        stop_with(b, zero, STOP_SINGULAR);
        let tau = b.mul(EIGEN_FLOOR, norm);
        let safe = r.opts & super::OPT_SAFE_LANES != 0;
        let (l, ok1, ok2) = cholesky_pair(b, &a, tau, r.lane, r.yes, safe);
        super::profile::stamp(b, &r.prof, r.lane0, super::profile::P_CHOL);
        let nf = finite(b, norm);
        let ok = b.and(ok1, ok2);
        let ok = b.and(ok, nf);
        let delta: [Reg<F64>; 6] = [(); 6].map(|_| b.reg::<F64>());
        let pd = b.mov(r.yes);
        b.if_else(
            ok,
            |b| {
                let d = solve(b, &l, &grad, r.opts & super::OPT_FAST_DIV != 0);
                for k in 0..6 {
                    b.mov_to(delta[k], d[k]);
                }
            },
            |b| {
                if r.opts & super::OPT_DEVICE_EIGEN != 0 {
                    // S_ASSISTS then counts the eigen-path steps taken on the device.
                    let n = r.state.ld_u32(b, S_ASSISTS);
                    let n = b.add(n, 1u32);
                    r.state.st_u32(b, S_ASSISTS, n);
                    let e = super::eigen::newton_eigen(
                        b,
                        &a,
                        &grad,
                        r.lane,
                        r.opts & super::OPT_EIGEN_ALL_LANES != 0,
                        r.opts & super::OPT_EIGEN_F32_ANGLE != 0,
                    );
                    b.if_then(e.singular, |b| {
                        b.mov_to(self.stop, STOP_SINGULAR);
                        b.bra(finish);
                    });
                    for (d, v) in delta.iter().zip(e.delta.iter()) {
                        b.mov_to(*d, *v);
                    }
                    b.mov_to(pd, e.pd);
                } else {
                    self.assist(b, &h, &grad, &delta, pd, finish)
                }
            },
        );
        super::profile::stamp(b, &r.prof, r.lane0, super::profile::P_SOLVE);
        let dt = norm3(b, &delta[..3]);
        let dr = norm3(b, &delta[3..]);
        // Stalled: no decrease (kind 1), or a step below the epsilons (kind 2).
        let st_t = norm3(b, &self.stepv[..3]);
        let st_r = norm3(b, &self.stepv[3..]);
        let small_t = b.setp(Cmp::Lt, st_t, r.eps_t);
        let small_r = b.setp(Cmp::Lt, st_r, r.eps_r);
        let small = b.and(small_t, small_r);
        let moved = b.setp(Cmp::Eq, self.kind, 2u32);
        let no_decrease = b.setp(Cmp::Eq, self.kind, 1u32);
        let small = b.and(moved, small);
        let stalled = b.or(no_decrease, small);
        let tol = b.selp(STALL_FACTOR, 1.0f64, stalled);
        let tt = b.mul(tol, r.eps_t);
        let tr = b.mul(tol, r.eps_r);
        let ct = b.setp(Cmp::Lt, dt, tt);
        let cr = b.setp(Cmp::Lt, dr, tr);
        let converged = b.and(ct, cr);
        let converged = b.and(converged, pd);
        stop_with(b, converged, STOP_CONVERGED);
        stop_with(b, stalled, STOP_STALLED);
        let capped = b.setp(Cmp::Ge, self.iters, r.max_iterations);
        stop_with(b, capped, STOP_MAX_ITERATIONS);
        let mut sq = b.mov(0.0f64);
        for d in delta.iter() {
            let p = b.mul(*d, *d);
            sq = b.add(sq, p);
        }
        let len = b.sqrt(sq);
        let pos = b.setp(Cmp::Gt, len, 0.0f64);
        let lf = finite(b, len);
        let good = b.and(pos, lf);
        let bad = b.not(good);
        stop_with(b, bad, STOP_STALLED);
        // dir = Δ / |Δ|: lane k divides entry k, then every lane takes all six.
        let li = b.and(r.lane, 7u32);
        // (OPT_SAFE_LANES: spare lanes divide len by itself.)
        let mine = if safe { b.mov(len) } else { b.mov(0.0f64) };
        for (k, d) in delta.iter().enumerate() {
            let is = b.setp(Cmp::Eq, li, k as u32);
            b.when(is, |b| b.mov_to(mine, *d));
        }
        let q = b.div(mine, len);
        for k in 0..6 {
            let d = b.shfl(Shfl::Idx, q, k as u32);
            b.mov_to(self.dir[k], d);
        }
        let a0 = b.min(len, r.step_max);
        b.if_else(
            r.line_search,
            |b| {
                let g = dot6(b, &grad, &self.dir);
                let g0 = b.neg(g);
                let f0 = b.neg(score);
                self.copy_sums_to_lo(b);
                let s = Search::start(b, r, f0, g0, a0);
                s.store(b, &r.state);
                self.move_pending(b, s.trial);
                b.mov_to(self.phase, PHASE_SEARCH);
            },
            |b| {
                self.move_pending(b, a0);
                b.mov_to(self.phase, PHASE_STEP);
            },
        );
        b.bra(request);
    }

    /// The host's `newton_increment(H, g)` for a Hessian the Cholesky path cannot take: `h`
    /// (upper triangle at `hessian_index`) and `grad` into the mapped results, a system fence,
    /// the request word `token | k << 32` (k counts the launch's requests); then thread 0
    /// polls the mailbox's word 0 until the host releases the same word after `Δ` (words 1..7)
    /// and its flags (word 7: bit 0 an increment exists, bit 1 positive definite). Without an
    /// increment the solver stops as singular (the host's answer); without an answer within
    /// the idle timeout the kernel hands the alignment back.
    #[allow(clippy::needless_range_loop)] // k indexes the Hessian layout and the outputs
    fn assist(
        &self,
        b: &mut KernelBuilder,
        h: &[Reg<F64>],
        grad: &[Reg<F64>; 6],
        delta: &[Reg<F64>; 6],
        pd: Reg<Pred>,
        finish: &Label,
    ) {
        let r = self.r;
        let out = self.out;
        b.comment("device solve: the eigen path on the host (a PCIe round trip)");
        let n = r.state.ld_u32(b, S_ASSISTS);
        let n = b.add(n, 1u32);
        r.state.st_u32(b, S_ASSISTS, n);
        let t = b.cvt::<U64, U32>(self.token);
        let k = b.cvt::<U64, U32>(n);
        let k = b.shl(k, 32u32);
        let word = b.or(t, k);
        if r.opts & super::OPT_FAST_ASSIST != 0 {
            return self.fast_assist(b, h, grad, delta, pd, finish, word);
        }
        b.when(r.lane0, |b| {
            for i in 0..6 {
                for j in i..6 {
                    let k = hessian_index(i, j);
                    put_f64(b, out, ASSIST_HESSIAN + k - 7, h[k]);
                }
                put_f64(b, out, ASSIST_GRADIENT + i, grad[i]);
            }
        });
        b.fence_acq_rel(Scope::Sys);
        b.when(r.lane0, |b| {
            b.st_relaxed_sys::<U64>(Addr::from(out).off(8 * ASSIST_WORD as i64), word)
        });
        let start = b.globaltimer();
        let mb = self.mailbox;
        let idle = self.idle_ns;
        b.loop_forever(|b, got, _| {
            let w = b.ld_relaxed_sys::<U64>(mb);
            let seen = b.setp(Cmp::Eq, w, word);
            b.bra_if(seen, got);
            let now = b.globaltimer();
            let waited = b.sub(now, start);
            let late = b.setp(Cmp::Gt, waited, idle);
            b.if_then(late, |b| {
                b.mov_to(self.stop, STOP_HOST);
                b.bra(finish);
            });
        });
        b.fence_acq_rel(Scope::Sys);
        let mba = Addr::from(mb);
        for k in 0..6 {
            let v = b.ld::<F64>(Space::Global, mba.off(8 * (1 + k as i64)));
            b.mov_to(delta[k], v);
        }
        let flags = b.ld::<U32>(Space::Global, mba.off(56));
        let some = b.and(flags, 1u32);
        let none = b.setp(Cmp::Eq, some, 0u32);
        b.if_then(none, |b| {
            b.mov_to(self.stop, STOP_SINGULAR);
            b.bra(finish);
        });
        let p = b.and(flags, 2u32);
        let p = b.setp(Cmp::Ne, p, 0u32);
        b.mov_to(pd, p);
    }

    /// `pending = pose + a · dir`.
    pub(super) fn move_pending(&self, b: &mut KernelBuilder, a: Reg<F64>) {
        for k in 0..6 {
            let s = b.mul(a, self.dir[k]);
            let p = b.add(self.pose[k], s);
            b.mov_to(self.pending[k], p);
        }
    }
}

//! The per-pair sums of one point against this thread's Gaussians, unguarded or guarded (see the
//! module docs of [`super`]).

use super::{Pair, PointCtx};
use crate::kernels::gaussian::common::*;
use crate::ptx::*;

/// Adds one point's pairs with this thread's Gaussians to the Gaussians' sums and to `ctx.pc`.
/// `guarded`: a pair beyond the cutoff (e' = 0) has w and y replaced by 0 (`selp`), so s' = 0
/// and it adds exactly 0 even where w, y or s' would overflow (0 * inf); live pairs of a flagged
/// Gaussian take w = a v and y = v sigma^2 / a from the compensated solve's v (a branch: lanes
/// without one skip it).
pub(super) fn pair_sums<T: KFloat>(b: &mut KernelBuilder, ctx: &PointCtx<'_, T>, guarded: bool) {
    let zero = T::imm(0.0);
    for (q, o) in ctx.own.iter().enumerate() {
        let p = match ctx.pairs {
            Some(pairs) => Pair {
                w: pairs[q].w,
                y: pairs[q].y,
                e: pairs[q].e,
            },
            None => {
                let (w, y, t) = o.g.solve(b, ctx.x);
                let e = ctx.exp.eval(b, t);
                Pair { w, y, e }
            }
        };
        let (w, y) = if guarded {
            let live = b.setp(Cmp::Ne, p.e, zero);
            let w_out = p.w.map(|v| b.mov(v));
            let y_out = p.y.map(|v| b.mov(v));
            if let (Some(on), Some(comp)) = (o.comp_on, ctx.comp) {
                let go = b.and(on, live);
                b.if_then(go, |b| {
                    let src = b.index_addr(ctx.prep, o.j, PREP_STRIDE * T::BYTES);
                    let pr = load_prepared::<T>(b, Space::GlobalNc, src.into());
                    let plain = GaussRegs::from_prepared(&pr);
                    let at = b.index_addr(comp, o.j, COMP_STRIDE * T::BYTES);
                    let lo = b.ld_v4::<T>(Space::GlobalNc, Addr::from(at));
                    let hi = b.ld_v4::<T>(Space::GlobalNc, Addr::from(at).off(16));
                    let vc = solve_compensated(
                        b,
                        &plain,
                        [lo[0], lo[1], lo[2]],
                        [hi[0], hi[1], hi[2]],
                        ctx.x,
                    );
                    let (wc, yc) = o.g.compensated_w_y(
                        b,
                        vc,
                        [lo[0], lo[1], lo[2]],
                        [hi[0], hi[1], hi[2]],
                        [pr[6], pr[7], pr[8]],
                    );
                    for k in 0..3 {
                        b.mov_to(w_out[k], wc[k]);
                        b.mov_to(y_out[k], yc[k]);
                    }
                });
            }
            (
                w_out.map(|v| b.selp(v, zero, live)),
                y_out.map(|v| b.selp(v, zero, live)),
            )
        } else {
            (p.w, p.y)
        };
        let ge = b.mul(ctx.g, p.e);
        let s = o.g.back_solve(b, y);
        let gs = s.map(|sk| b.mul(ge, sk));
        let a = &o.acc;
        for k in 0..3 {
            let t = b.add(a[k], gs[k]);
            b.mov_to(a[k], t);
        }
        // (a, b) = 00 10 11 20 21 22 -> gradient slots 3..9.
        for (slot, (ra, cb)) in GS_W_SLOTS.into_iter().enumerate() {
            let t = b.fma(gs[ra], w[cb], a[3 + slot]);
            b.mov_to(a[3 + slot], t);
        }
        let t = b.add(a[9], ge);
        b.mov_to(a[9], t);
        for (&gk, &pk) in gs.iter().zip(&ctx.pc) {
            let t = b.fma(o.g.weight_norm(), gk, pk);
            b.mov_to(pk, t);
        }
    }
}

/// (a, b) of the sums gs_a w_b in gradient slots 3..9 (the lower triangle, row by row).
pub(super) const GS_W_SLOTS: [(usize, usize); 6] = [(0, 0), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2)];

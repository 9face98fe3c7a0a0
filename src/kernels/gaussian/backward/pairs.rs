//! The per-pair sums of one point against this thread's Gaussians, unguarded or guarded (see the
//! module docs of [`super`]).

use super::PointCtx;
use crate::kernels::gaussian::common::*;
use crate::kernels::gaussian::scaled::*;
use crate::ptx::*;

/// Adds one point's pairs with this thread's Gaussians to the Gaussians' sums and to `ctx.pc`.
/// `guarded`: a pair beyond the cutoff (e' = 0) has v' replaced by 0 (`selp`), so s' = 0 and it
/// adds exactly 0 even where v' or s' would overflow (0 * inf); live pairs of a flagged Gaussian
/// take v from the compensated solve (a branch: lanes without one skip it).
pub(super) fn pair_sums<T: KFloat>(b: &mut KernelBuilder, ctx: &PointCtx<'_, T>, guarded: bool) {
    let zero = T::imm(0.0);
    for (o, &(v, e)) in ctx.own.iter().zip(ctx.pairs) {
        let v = if guarded {
            let live = b.setp(Cmp::Ne, e, zero);
            if let (Some(on), Some(comp)) = (o.comp_on, ctx.comp) {
                let go = b.and(on, live);
                let v_out = v.map(|vk| b.mov(vk));
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
                    for k in 0..3 {
                        let scaled = b.mul(vc[k], T::imm(sigma()));
                        b.mov_to(v_out[k], scaled);
                    }
                });
                v_out.map(|vk| b.selp(vk, zero, live))
            } else {
                v.map(|vk| b.selp(vk, zero, live))
            }
        } else {
            v
        };
        let ge = b.mul(ctx.g, e);
        let s = back_solve_scaled(b, &o.g, v);
        let gs = s.map(|sk| b.mul(ge, sk));
        let a = &o.acc;
        for k in 0..3 {
            let t = b.add(a[k], gs[k]);
            b.mov_to(a[k], t);
        }
        // (a, b) = 00 10 11 20 21 22 -> gradient slots 3..9.
        for (slot, (ra, cb)) in [(0usize, 0usize), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2)]
            .into_iter()
            .enumerate()
        {
            let t = b.fma(gs[ra], v[cb], a[3 + slot]);
            b.mov_to(a[3 + slot], t);
        }
        let t = b.add(a[9], ge);
        b.mov_to(a[9], t);
        for (&gk, &pk) in gs.iter().zip(&ctx.pc) {
            let t = b.fma(o.g.weight_norm, gk, pk);
            b.mov_to(pk, t);
        }
    }
}

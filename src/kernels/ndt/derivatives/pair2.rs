//! Two pairs per step of the compacted pair loop ([`super::Variant::pair2`]): a thread loads the
//! records of its next two hits, computes both pairs' `x' − μ`, `C d`, `q` and `e` side by side
//! (two independent dependency chains, the exponential's Horner chain above all, instead of one),
//! then adds the first pair's terms to the point's sums and then the second's, each under its own
//! predicate (radius mode, exponent range, and whether a second hit exists). Every operation and
//! every addition is [`super::point::pair_terms`]'s in the same order, so records stay
//! bit-identical.

use super::point::PairSums;
use super::{Ctx, UPPER_PAIRS};
use crate::kernels::ndt::fp64::{exp_f64, EXP_MAX_ARG, EXP_MIN_ARG};
use crate::ptx::*;

/// One pair's terms before they are added.
struct Terms {
    /// Radius mode rejects the pair (false outside radius mode).
    far: Reg<Pred>,
    /// The exponent is in range.
    ok: Reg<Pred>,
    e: Reg<F64>,
    cd: [Reg<F64>; 3],
    /// The inverse covariance as a full matrix (row-major) from the record.
    c: [Reg<F64>; 9],
}

/// The compacted hits `col + [0, end)` (a column of [`super::DENSE_GROUP`] voxel indices,
/// `stride` bytes apart) paired with the transformed point `xt`, two per step.
pub(super) fn pairs(
    b: &mut KernelBuilder,
    cx: &Ctx,
    sums: &PairSums,
    xt: [Reg<F64>; 3],
    col: Reg<U32>,
    end: Reg<U32>,
    stride: u32,
) {
    b.comment("pairs, two per step: both records, both chains, then the sums in hit order");
    b.for_range(0u32, end, 2 * stride, |b, off, _| {
        let slot = b.add(col, off);
        let v1 = b.ld::<S32>(Space::Shared, slot);
        let next = b.add(off, stride);
        let has2 = b.setp(Cmp::Lt, next, end);
        // Without a second hit the first record stands in (its terms are not added).
        let v2 = b.mov(v1);
        b.guarded(has2, false, |b| {
            let a = Addr::from(slot).off(i64::from(stride));
            let got = b.ld::<S32>(Space::Shared, a);
            b.mov_to(v2, got);
        });
        let w1 = super::wide::load_record(b, cx, v1);
        let w2 = super::wide::load_record(b, cx, v2);
        let d1 = [0, 1, 2].map(|k| b.sub(xt[k], w1[k]));
        let d2 = [0, 1, 2].map(|k| b.sub(xt[k], w2[k]));
        // Radius mode: the CPU's `(p−μ)² summed left to right > r²` test, bit for bit (a uniform
        // branch around it; outside radius mode `far` stays false).
        let far1 = b.mov(cx.radius);
        let far2 = b.mov(cx.radius);
        let near = b.label("radius2_ok");
        b.bra_uni_unless(cx.radius, &near);
        for (d, far) in [(d1, far1), (d2, far2)] {
            let dd0 = b.mul(d[0], d[0]);
            let dd1 = b.mul(d[1], d[1]);
            let dd2 = b.mul(d[2], d[2]);
            let dd = b.add(dd0, dd1);
            let dd = b.add(dd, dd2);
            let f = b.setp(Cmp::Gt, dd, cx.radius_sq);
            b.mov_to(far, f);
        }
        b.place(&near);
        let t1 = terms(b, cx, &w1, d1, far1);
        let t2 = terms(b, cx, &w2, d2, far2);
        add(b, cx, sums, &t1, None);
        add(b, cx, sums, &t2, Some(has2));
    });
}

/// `C d`, `q`, the exponent test and `e` of one pair (as `pair_terms`).
fn terms(
    b: &mut KernelBuilder,
    cx: &Ctx,
    w: &[Reg<F64>; 9],
    d: [Reg<F64>; 3],
    far: Reg<Pred>,
) -> Terms {
    let c = [w[3], w[4], w[5], w[4], w[6], w[7], w[5], w[7], w[8]];
    let cd: [Reg<F64>; 3] = std::array::from_fn(|r| {
        let t = b.mul(c[3 * r], d[0]);
        let t = b.fma(c[3 * r + 1], d[1], t);
        b.fma(c[3 * r + 2], d[2], t)
    });
    let qf = b.mul(d[0], cd[0]);
    let qf = b.fma(d[1], cd[1], qf);
    let qf = b.fma(d[2], cd[2], qf);
    let arg = b.mul(cx.neg_half_d2, qf);
    let lo = b.setp(Cmp::Ge, arg, EXP_MIN_ARG);
    let hi = b.setp(Cmp::Le, arg, EXP_MAX_ARG);
    let ok = b.and(lo, hi);
    // Out of range the exponent bits wrap: the value is not used then.
    let e = exp_f64(b, arg);
    Terms { far, ok, e, cd, c }
}

/// Adds one pair's terms to the point's sums where the pair counts (`valid`: a second hit).
fn add(b: &mut KernelBuilder, cx: &Ctx, sums: &PairSums, t: &Terms, valid: Option<Reg<Pred>>) {
    let near = b.not(t.far);
    let pairs = match valid {
        None => near,
        Some(v) => b.and(near, v),
    };
    b.guarded(pairs, false, |b| b.mov_to(sums.found, 1u32));
    let adds = b.and(pairs, t.ok);
    b.guarded(adds, false, |b| {
        let s = b.add(sums.e_sum, t.e);
        b.mov_to(sums.e_sum, s);
        let ecd = t.cd.map(|v| b.mul(t.e, v));
        for (gk, ek) in sums.g.iter().zip(ecd) {
            let s = b.add(*gk, ek);
            b.mov_to(*gk, s);
        }
        let tt = ecd.map(|v| b.mul(v, cx.neg_d2));
        for (m, (i, j)) in UPPER_PAIRS.into_iter().enumerate() {
            let s = b.fma(t.e, t.c[3 * i + j], sums.q[m]);
            let s = b.fma(tt[i], t.cd[j], s);
            b.mov_to(sums.q[m], s);
        }
    });
}

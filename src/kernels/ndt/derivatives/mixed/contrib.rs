//! The mixed build's paired-point contributions in f32 from the cross products of the parent
//! module's docs, each added to its sum.

use super::super::vec3::{self, cross, dot};
use super::super::{hessian_index, Ctx, ACC_STRIDE, GRADIENT_INDEX, SCORE_INDEX, UPPER_PAIRS};
use super::{MixedRegs, Sums32};
use crate::ptx::*;

type V3 = vec3::V3<F32>;

/// A paired point's 28 contributions in f32 (see the module docs), each added to its sum.
pub(super) fn add_point(
    b: &mut KernelBuilder,
    cx: &Ctx,
    mx: &MixedRegs,
    r: [Reg<F32>; 3],
    s: &Sums32,
) {
    b.comment("mixed paired point: contributions in f32");
    let c1 = b.add(cx.count, 1u32);
    b.mov_to(cx.count, c1);
    let acc = |b: &mut KernelBuilder, idx: usize, v: Option<Reg<F32>>| {
        let Some(v) = v else { return };
        if let Some(a) = &mx.acc32 {
            let sum = b.add(a[idx], v);
            b.mov_to(a[idx], sum);
            return;
        }
        let w = b.cvt::<F64, F32>(v);
        match cx.acc_shared {
            Some(col) => {
                let a = Addr::from(col).off(idx as i64 * ACC_STRIDE);
                let old = b.ld::<F64>(Space::Shared, a.clone());
                let sum = b.add(old, w);
                b.st(Space::Shared, a, sum);
            }
            None => {
                let sum = b.add(cx.acc[idx], w);
                b.mov_to(cx.acc[idx], sum);
            }
        }
    };
    let some = |v: [Reg<F32>; 3]| v.map(Some);
    let (g, q) = (some(s.g), s.q);
    let rv = some(r);
    let ub: V3 = [None, Some(mx.ub[0]), Some(mx.ub[1])];
    let uc: V3 = some(mx.uc);
    // j_a = e_x × r = (0, −r_z, r_y) without arithmetic.
    let nrz = b.neg(r[2]);
    let ja: V3 = [None, Some(nrz), Some(r[1])];
    let jb = cross(b, &ub, &rv);
    let jc = cross(b, &uc, &rv);
    let j = [ja, jb, jc];
    match (s.e64, mx.score_acc) {
        (Some(e), Some(a)) => {
            let sum = b.add(a, e);
            b.mov_to(a, sum);
        }
        (Some(e), None) => match cx.acc_shared {
            Some(col) => {
                let a = Addr::from(col).off(SCORE_INDEX as i64 * ACC_STRIDE);
                let old = b.ld::<F64>(Space::Shared, a.clone());
                let sum = b.add(old, e);
                b.st(Space::Shared, a, sum);
            }
            None => {
                let sum = b.add(cx.acc[SCORE_INDEX], e);
                b.mov_to(cx.acc[SCORE_INDEX], sum);
            }
        },
        (None, _) => acc(b, SCORE_INDEX, Some(s.e_sum)),
    }
    for (k, gk) in g.iter().enumerate() {
        acc(b, GRADIENT_INDEX + k, *gk);
    }
    for (k, jk) in j.iter().enumerate() {
        let v = dot(b, jk, &g);
        acc(b, GRADIENT_INDEX + 3 + k, v);
    }
    for (m, (i, jj)) in UPPER_PAIRS.into_iter().enumerate() {
        acc(b, hessian_index(i, jj), Some(q[m]));
    }
    let qm = [q[0], q[1], q[2], q[1], q[3], q[4], q[2], q[4], q[5]];
    // Q j_k: rows of Q times j_k.
    let qj: [V3; 3] = std::array::from_fn(|k| {
        std::array::from_fn(|row| {
            let qr: V3 = [
                Some(qm[3 * row]),
                Some(qm[3 * row + 1]),
                Some(qm[3 * row + 2]),
            ];
            dot(b, &qr, &j[k])
        })
    });
    for (k, qjk) in qj.iter().enumerate() {
        for (row, v) in qjk.iter().enumerate() {
            let v = v.unwrap_or_else(|| b.mov(0.0f32));
            acc(b, hessian_index(row, 3 + k), Some(v));
        }
    }
    b.comment("mixed angular Hessian block: j_k . (Q j_l) + j_l . (G x u_k)");
    // v_k = G × u_k; v_a = G × e_x = (0, G_z, −G_y).
    let ngy = b.neg(s.g[1]);
    let v: [V3; 3] = [
        [None, Some(s.g[2]), Some(ngy)],
        cross(b, &g, &ub),
        cross(b, &g, &uc),
    ];
    for (k, l) in UPPER_PAIRS {
        let a = dot(b, &j[k], &qj[l]);
        let c = dot(b, &j[l], &v[k]);
        let total = match (a, c) {
            (Some(a), Some(c)) => Some(b.add(a, c)),
            (a, c) => a.or(c),
        };
        let total = total.unwrap_or_else(|| b.mov(0.0f32));
        acc(b, hessian_index(3 + k, 3 + l), Some(total));
    }
}

//! Step 2's paired-point contributions with the angular derivatives as cross products
//! ([`super::Variant::cross`]), in f64: `j_a = e_x × r`, `j_b = u_b × r`, `j_c = u_c × r` with
//! `r = x' − t = R x`, `u_b = (0, cos a, sin a)`, `u_c = (sin b, −sin a cos b, cos a cos b)`, and
//! `h_kl · G = j_l · (G × u_k)` (the identities are derived in `mixed/mod.rs`). Thread 0 stores
//! `u_b`, `u_c` instead of the nine derivative matrices, and a paired point needs no matrix
//! from shared memory. The same quantities as [`super::point`]'s `add_point` in another
//! operation order: records differ from the matrix form in the last bits only.

use super::point::PairSums;
use super::vec3::{self, cross, dot};
use super::{hessian_index, Ctx, ACC_STRIDE, GRADIENT_INDEX, SCORE_INDEX, UPPER_PAIRS};
use crate::ptx::*;

/// The shared array thread 0 fills: `u_b[1], u_b[2], u_c[0], u_c[1], u_c[2]`.
pub(super) struct Cross {
    u: SharedArray<F64>,
}

/// Per-thread registers, loaded once per request after the barrier, or (`late`,
/// [`super::Variant::late_loads`]) the shared array, read by each paired point.
pub(crate) struct CrossRegs {
    ub: [Reg<F64>; 2],
    uc: [Reg<F64>; 3],
    late: Option<SharedArray<F64>>,
}

impl Cross {
    pub(super) fn declare(b: &mut KernelBuilder) -> Cross {
        Cross {
            u: b.shared_array::<F64>("cross_u", 5),
        }
    }

    /// Thread 0: `u_b`, `u_c` from the request's `sin a, cos a, sin b, cos b, ...` in `w`.
    pub(super) fn store(&self, b: &mut KernelBuilder, w: &[Reg<F64>]) {
        let (sa, ca, sb, cb) = (w[0], w[1], w[2], w[3]);
        let sacb = b.mul(sa, cb);
        let uc1 = b.neg(sacb);
        let uc2 = b.mul(ca, cb);
        for (k, v) in [ca, sa, sb, uc1, uc2].into_iter().enumerate() {
            b.st(Space::Shared, self.u.at(k as u32), v);
        }
    }

    pub(super) fn regs(&self, b: &mut KernelBuilder, late: bool) -> CrossRegs {
        if late {
            // Placeholders: every paired point loads its own copies (`CrossRegs::get`).
            let z = b.mov(0.0f64);
            return CrossRegs {
                ub: [z; 2],
                uc: [z; 3],
                late: Some(self.u.clone()),
            };
        }
        let mut ld = |k: u32| b.ld::<F64>(Space::Shared, self.u.at(k));
        CrossRegs {
            ub: [ld(0), ld(1)],
            uc: [ld(2), ld(3), ld(4)],
            late: None,
        }
    }
}

impl CrossRegs {
    /// `u_b[1..3]` and `u_c`: the registers, or loads from shared memory when `late`.
    fn get(&self, b: &mut KernelBuilder) -> ([Reg<F64>; 2], [Reg<F64>; 3]) {
        match &self.late {
            None => (self.ub, self.uc),
            Some(u) => {
                let mut ld = |k: u32| b.ld::<F64>(Space::Shared, u.at(k));
                ([ld(0), ld(1)], [ld(2), ld(3), ld(4)])
            }
        }
    }
}

type V3 = vec3::V3<F64>;

/// A paired point's score, gradient and Hessian contributions (`E`, `G`, `Q` of its pairs, `r`
/// the rotated point `x' − t`).
pub(super) fn add_point(
    b: &mut KernelBuilder,
    cx: &Ctx,
    cr: &CrossRegs,
    r: [Reg<F64>; 3],
    sums: &PairSums,
) {
    b.comment("paired point (cross products): score, gradient and Hessian contributions");
    let c1 = b.add(cx.count, 1u32);
    b.mov_to(cx.count, c1);
    // With `acc_pairs`, values wait for their pair's partner (`wide.rs`).
    let paired = std::cell::RefCell::new(
        cx.acc_shared
            .filter(|_| cx.acc_pairs)
            .map(super::wide::PairedAcc::new),
    );
    let acc = |b: &mut KernelBuilder, idx: usize, v: Reg<F64>| match cx.acc_shared {
        Some(_) if cx.acc_pairs => {
            let mut p = paired.borrow_mut();
            p.as_mut().expect("pair layout").add(b, idx, v);
        }
        Some(col) => {
            let a = Addr::from(col).off(idx as i64 * ACC_STRIDE);
            let old = b.ld::<F64>(Space::Shared, a.clone());
            let s = b.add(old, v);
            b.st(Space::Shared, a, s);
        }
        None => {
            let s = b.add(cx.acc[idx], v);
            b.mov_to(cx.acc[idx], s);
        }
    };
    let (g, q) = (sums.g.map(Some), sums.q);
    let rv: V3 = r.map(Some);
    let (cub, cuc) = cr.get(b);
    let ub: V3 = [None, Some(cub[0]), Some(cub[1])];
    let uc: V3 = cuc.map(Some);
    let nrz = b.neg(r[2]);
    let j: [V3; 3] = [
        [None, Some(nrz), Some(r[1])],
        cross(b, &ub, &rv),
        cross(b, &uc, &rv),
    ];
    acc(b, SCORE_INDEX, sums.e_sum);
    for k in 0..3 {
        acc(b, GRADIENT_INDEX + k, sums.g[k]);
    }
    for (k, jk) in j.iter().enumerate() {
        let v = dot(b, jk, &g).unwrap_or_else(|| b.mov(0.0f64));
        acc(b, GRADIENT_INDEX + 3 + k, v);
    }
    for (m, (i, jj)) in UPPER_PAIRS.into_iter().enumerate() {
        acc(b, hessian_index(i, jj), q[m]);
    }
    let qm = [q[0], q[1], q[2], q[1], q[3], q[4], q[2], q[4], q[5]];
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
            let v = v.unwrap_or_else(|| b.mov(0.0f64));
            acc(b, hessian_index(row, 3 + k), v);
        }
    }
    b.comment("angular Hessian block (cross products): j_k . (Q j_l) + j_l . (G x u_k)");
    let ngy = b.neg(sums.g[1]);
    let v: [V3; 3] = [
        [None, Some(sums.g[2]), Some(ngy)],
        cross(b, &g, &ub),
        cross(b, &g, &uc),
    ];
    for (k, l) in UPPER_PAIRS {
        let a = dot(b, &j[k], &qj[l]);
        let c = dot(b, &j[l], &v[k]);
        let total = match (a, c) {
            (Some(a), Some(c)) => b.add(a, c),
            (Some(v), None) | (None, Some(v)) => v,
            (None, None) => b.mov(0.0f64),
        };
        acc(b, hessian_index(3 + k, 3 + l), total);
    }
    if let Some(p) = paired.into_inner() {
        p.finish();
    }
}

//! The `R_total` update of `rnn_orth` (block 0, passes after the first): `R_total <- R R_total`
//! in shared memory, k ascending with fma, as `crate::rnn::cholqr::matmul` (see `orth`).

use super::{LD, WIDTH};
use crate::ptx::*;

const WW: u32 = WIDTH * WIDTH;

/// The factorisation's shared arrays: U (`lcol`), E (`erow`), R's diagonal and row scales.
#[derive(Clone, Copy)]
pub struct Factors<'a> {
    /// `U = D L^T` by rows (R's upper part once scaled).
    pub lcol: &'a SharedArray<F64>,
    /// `E = L^{-1}` by rows (free after D: the previous product is staged here).
    pub erow: &'a SharedArray<F64>,
    /// R's diagonal `sqrt(d_i)`.
    pub rdiag: &'a SharedArray<F64>,
    /// R's row scales `1 / sqrt(d_i)`.
    pub rscale: &'a SharedArray<F64>,
}

/// Block 0 after pass p >= 1 (D is done, so U's and E's shared arrays are free):
/// `rt[p % 2] = R_p rt[(p - 1) % 2]` with R_p formed in place of U (its zero lower part is never
/// written), the previous product staged in E's array; `out_ij = sum_k R_ik T_kj`, k ascending
/// (fma), as `crate::rnn::cholqr::matmul`.
pub fn total_r(
    b: &mut KernelBuilder,
    pass: Reg<U32>,
    rt: Reg<U64>,
    tid: Reg<U32>,
    factors: &Factors<'_>,
) {
    let Factors {
        lcol,
        erow,
        rdiag,
        rscale,
    } = *factors;
    let prev = b.sub(pass, 1u32);
    let prev = b.and(prev, 1u32);
    let src = b.mul(prev, WW);
    let dst = b.sub(WW, src);
    b.bar_sync();
    for q in 0..9u32 {
        let e = b.add(tid, 256 * q);
        let i = b.div(e, WIDTH);
        let k = b.rem(e, WIDTH);
        let ti = b.add(src, e);
        let ta = b.index_addr(rt, ti, 8);
        let t = b.ld::<F64>(Space::Global, ta);
        let se = b.mad(i, LD, k);
        let ea = b.shared_index(erow, se);
        b.st(Space::Shared, ea, t);
        let rda = b.shared_index(rdiag, i);
        let rd = b.ld::<F64>(Space::Shared, rda);
        let rsa = b.shared_index(rscale, i);
        let rsc = b.ld::<F64>(Space::Shared, rsa);
        let ua = b.shared_index(lcol, se);
        let u = b.ld::<F64>(Space::Shared, ua);
        let scaled = b.mul(u, rsc);
        let above = b.setp(Cmp::Gt, k, i);
        let v = b.selp(scaled, u, above);
        let on = b.setp(Cmp::Eq, k, i);
        let v = b.selp(rd, v, on);
        b.st(Space::Shared, ua, v);
    }
    b.bar_sync();
    let rows: Vec<Reg<U32>> = (0..9u32)
        .map(|q| {
            let e = b.add(tid, 256 * q);
            let i = b.div(e, WIDTH);
            b.mul(i, LD)
        })
        .collect();
    let cols: Vec<Reg<U32>> = (0..9u32)
        .map(|q| {
            let e = b.add(tid, 256 * q);
            b.rem(e, WIDTH)
        })
        .collect();
    let acc: Vec<Reg<F64>> = (0..9).map(|_| b.mov(0.0f64)).collect();
    b.for_range(0u32, WIDTH, 1u32, |b, k, _| {
        let krow = b.mul(k, LD);
        for q in 0..9 {
            let ri = b.add(rows[q], k);
            let ra = b.shared_index(lcol, ri);
            let r = b.ld::<F64>(Space::Shared, ra);
            let ti = b.add(krow, cols[q]);
            let ta = b.shared_index(erow, ti);
            let t = b.ld::<F64>(Space::Shared, ta);
            let nv = b.fma(r, t, acc[q]);
            b.mov_to(acc[q], nv);
        }
    });
    for (q, v) in acc.iter().enumerate() {
        let e = b.add(tid, 256 * q as u32);
        let di = b.add(dst, e);
        let da = b.index_addr(rt, di, 8);
        b.st(Space::Global, da, *v);
    }
    b.bar_sync();
}

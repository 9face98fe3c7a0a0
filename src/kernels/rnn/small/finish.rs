//! `rnn_small_eig`'s finish: the k largest eigenvalues, S, the Gram route's check and the
//! packed factors (see the module notes of `super` and `crate::rnn::jacobi`).

use super::abi::{
    EIGEN_MIN_RATIO, EIGEN_ORTHO_TOL, OUT_DEFECT, OUT_ROUNDS, OUT_STATUS, OUT_SWEEPS, SMALL_CHECK,
    SMALL_OK, SMALL_RATIO,
};
use super::{block_any, Ids, Smem, LDA, THREADS, W};
use crate::ptx::*;

/// Columns of C per thread (threads `0..5 x 48` hold row t % 48, columns t / 48 + 5 u).
const CGROUPS: u32 = 5;
const CPER: u32 = W.div_ceil(CGROUPS);

/// One column of C a thread sums: (column j, in range, `ord[j]`, accumulator).
type CCol = (Reg<U32>, Reg<Pred>, Reg<U32>, Reg<F64>);
/// One entry of D a thread sums: (row a, column b, in range, `ord[b]`, accumulator).
type DItem = (Reg<U32>, Reg<U32>, Reg<Pred>, Reg<U32>, Reg<F64>);

/// The finish's inputs and outputs.
pub(super) struct Io {
    pub gram: Reg<U64>,
    pub zw: Reg<U64>,
    pub out: Reg<U64>,
    pub l: Reg<U32>,
    pub k: Reg<U32>,
    pub status: Reg<U32>,
    pub sweeps: Reg<U32>,
    pub rounds: Reg<U32>,
}

fn sh_f64(b: &mut KernelBuilder, arr: &SharedArray<F64>, i: Reg<U32>) -> Reg<F64> {
    let a = b.shared_index(arr, i);
    b.ld::<F64>(Space::Shared, a)
}

fn sh_u32(b: &mut KernelBuilder, arr: &SharedArray<U32>, i: Reg<U32>) -> Reg<U32> {
    let a = b.shared_index(arr, i);
    b.ld::<U32>(Space::Shared, a)
}

/// `ord[j]` when `on`, else 0 (entries of `ord` at or beyond l are never written).
fn order_or_zero(b: &mut KernelBuilder, sm: &Smem, j: Reg<U32>, on: Reg<Pred>) -> Reg<U32> {
    let o = b.mov(0u32);
    let a = b.shared_index(&sm.ord, j);
    b.guarded(on, false, |b| {
        let x = b.ld::<U32>(Space::Shared, a);
        b.mov_to(o, x);
    });
    o
}

/// Everything after the sweeps; thread 0 writes status, sweeps, the check's value and the
/// rounds.
pub(super) fn finish(b: &mut KernelBuilder, sm: &Smem, ids: &Ids, io: Io) {
    let Io {
        gram,
        zw,
        out,
        l,
        k,
        status,
        sweeps,
        rounds,
    } = io;
    let tid = ids.tid;
    let defect = b.mov(0.0f64);
    let ok = b.setp(Cmp::Eq, status, SMALL_OK);
    b.if_then(ok, |b| {
        b.comment("eigenvalues, their descending ranks (ties in index order), the ratio test");
        let mine = b.setp(Cmp::Lt, tid, l);
        b.if_then(mine, |b| {
            let d = b.mul(tid, LDA + 1);
            let x = sh_f64(b, &sm.a, d);
            let a = b.shared_index(&sm.dv, tid);
            b.st(Space::Shared, a, x);
        });
        b.bar_sync();
        b.if_then(mine, |b| {
            let x = sh_f64(b, &sm.dv, tid);
            let rank = b.mov(0u32);
            b.for_range(0u32, l, 1u32, |b, j, _| {
                let y = sh_f64(b, &sm.dv, j);
                let gt = b.setp(Cmp::Gt, y, x);
                let eq = b.setp(Cmp::Eq, y, x);
                let before = b.setp(Cmp::Lt, j, tid);
                let tie = b.and(eq, before);
                let ahead = b.or(gt, tie);
                let one = b.selp(1u32, 0u32, ahead);
                let nr = b.add(rank, one);
                b.mov_to(rank, nr);
            });
            let a = b.shared_index(&sm.ord, rank);
            b.st(Space::Shared, a, tid);
        });
        b.bar_sync();
        let z = b.mov(0u32);
        let o0 = sh_u32(b, &sm.ord, z);
        let top = sh_f64(b, &sm.dv, o0);
        let km = b.sub(k, 1u32);
        let ok_ = sh_u32(b, &sm.ord, km);
        let kth = sh_f64(b, &sm.dv, ok_);
        let pos = b.setp(Cmp::Gt, top, 0.0f64);
        let fin = b.setp(Cmp::Lt, top, f64::INFINITY);
        let floor = b.mul(top, EIGEN_MIN_RATIO * EIGEN_MIN_RATIO);
        let above = b.setp(Cmp::Ge, kth, floor);
        let good = b.and(pos, fin);
        let good = b.and(good, above);
        let st = b.selp(SMALL_OK, SMALL_RATIO, good);
        b.mov_to(status, st);
    });
    let ok = b.setp(Cmp::Eq, status, SMALL_OK);
    b.if_then(ok, |b| {
        b.comment("S and 1 / S");
        let mine = b.setp(Cmp::Lt, tid, k);
        b.if_then(mine, |b| {
            let o = sh_u32(b, &sm.ord, tid);
            let x = sh_f64(b, &sm.dv, o);
            let s = b.sqrt(x);
            let inv = b.rcp(s);
            let a = b.shared_index(&sm.sv, tid);
            b.st(Space::Shared, a, s);
            let a = b.shared_index(&sm.inv, tid);
            b.st(Space::Shared, a, inv);
        });
        b.bar_sync();
        b.comment("C = G Z Sigma^-1 into a (C[j][i]): row t % 48, columns t / 48 + 5 u");
        let i = b.rem(tid, W);
        let g5 = b.div(tid, W);
        let in_rows = b.setp(Cmp::Lt, tid, CGROUPS * W);
        let il = b.setp(Cmp::Lt, i, l);
        let act = b.and(in_rows, il);
        let cols: Vec<CCol> = (0..CPER)
            .map(|u| {
                let j = b.add(g5, CGROUPS * u);
                let on = b.setp(Cmp::Lt, j, k);
                let on = b.and(on, act);
                let o = order_or_zero(b, sm, j, on);
                (j, on, o, b.mov(0.0f64))
            })
            .collect();
        b.if_then(act, |b| {
            b.for_range(0u32, l, 1u32, |b, c, _| {
                let hi = b.max(i, c);
                let lo = b.min(i, c);
                let e = b.mad(hi, W, lo);
                let ga = b.index_addr(gram, e, 8);
                let g = b.ld::<F64>(Space::Global, ga);
                let row = b.mul(c, W);
                for &(_, _, o, acc) in &cols {
                    let vi = b.add(row, o);
                    let z = sh_f64(b, &sm.v, vi);
                    let n = b.fma(g, z, acc);
                    b.mov_to(acc, n);
                }
            });
            for &(j, on, _, acc) in &cols {
                b.if_then(on, |b| {
                    let inv = sh_f64(b, &sm.inv, j);
                    let cv = b.mul(acc, inv);
                    let e = b.mad(j, LDA, i);
                    let a = b.shared_index(&sm.a, e);
                    b.st(Space::Shared, a, cv);
                });
            }
        });
        b.bar_sync();
        b.comment("D = C^T Z Sigma^-1 over a <= b < k; the defect max |D - I|");
        let items: Vec<DItem> = (0..(W * W).div_ceil(THREADS))
            .map(|q| {
                let e = b.add(tid, THREADS * q);
                let ra = b.div(e, W);
                let cb = b.rem(e, W);
                let up = b.setp(Cmp::Le, ra, cb);
                let bk = b.setp(Cmp::Lt, cb, k);
                let on = b.and(up, bk);
                let o = order_or_zero(b, sm, cb, on);
                (ra, cb, on, o, b.mov(0.0f64))
            })
            .collect();
        b.for_range(0u32, l, 1u32, |b, i, _| {
            let row = b.mul(i, W);
            for &(ra, _, _, o, acc) in &items {
                let ci = b.mad(ra, LDA, i);
                let cv = sh_f64(b, &sm.a, ci);
                let vi = b.add(row, o);
                let z = sh_f64(b, &sm.v, vi);
                let n = b.fma(cv, z, acc);
                b.mov_to(acc, n);
            }
        });
        let mx = b.mov(0.0f64);
        let nan = b.mov(0u32);
        for &(ra, cb, on, _, acc) in &items {
            b.if_then(on, |b| {
                let inv = sh_f64(b, &sm.inv, cb);
                let d = b.mul(acc, inv);
                let dg = b.setp(Cmp::Eq, ra, cb);
                let one = b.selp(1.0f64, 0.0f64, dg);
                let d = b.sub(d, one);
                let d = b.abs(d);
                let isn = b.setp(Cmp::Nan, d, d);
                let w = b.selp(1u32, 0u32, isn);
                let nw = b.or(nan, w);
                b.mov_to(nan, nw);
                let nm = b.max(mx, d);
                b.mov_to(mx, nm);
            });
        }
        let worst = b.block_reduce(mx, Reduce::Max);
        let nanp = b.setp(Cmp::Ne, nan, 0u32);
        let any_nan = block_any(b, nanp, sm, ids, 0);
        let over = b.setp(Cmp::Gt, worst, EIGEN_ORTHO_TOL);
        let bad = b.or(over, any_nan);
        let st = b.selp(SMALL_CHECK, SMALL_OK, bad);
        b.mov_to(status, st);
        b.mov_to(defect, worst);
        b.comment("the packed factors Z_k and Z_k Sigma_k^-1, and S");
        for q in 0..(W * W).div_ceil(THREADS) {
            let e = b.add(tid, THREADS * q);
            let i = b.div(e, W);
            let j = b.rem(e, W);
            let il = b.setp(Cmp::Lt, i, l);
            let jk = b.setp(Cmp::Lt, j, k);
            let on = b.and(il, jk);
            let o = order_or_zero(b, sm, j, on);
            let (z, x) = (b.mov(0.0f64), b.mov(0.0f64));
            b.if_then(on, |b| {
                let vi = b.mad(i, W, o);
                let zv = sh_f64(b, &sm.v, vi);
                let inv = sh_f64(b, &sm.inv, j);
                let xv = b.mul(zv, inv);
                b.mov_to(z, zv);
                b.mov_to(x, xv);
            });
            let za = b.index_addr(zw, e, 8);
            b.st(Space::Global, za, z);
            let e2 = b.add(e, W * W);
            let xa = b.index_addr(zw, e2, 8);
            b.st(Space::Global, xa, x);
        }
        let mine = b.setp(Cmp::Lt, tid, k);
        b.if_then(mine, |b| {
            let s = sh_f64(b, &sm.sv, tid);
            let oa = b.index_addr(out, tid, 8);
            b.st(Space::Global, oa, s);
        });
    });
    b.comment("thread 0: status, sweeps, the check's value");
    let t0 = b.setp(Cmp::Eq, tid, 0u32);
    b.if_then(t0, |b| {
        let sf = b.cvt::<F64, U32>(status);
        let wf = b.cvt::<F64, U32>(sweeps);
        let rf = b.cvt::<F64, U32>(rounds);
        for (slot, v) in [
            (OUT_STATUS, sf),
            (OUT_SWEEPS, wf),
            (OUT_DEFECT, defect),
            (OUT_ROUNDS, rf),
        ] {
            let a = b.add(out, u64::from(8 * slot));
            b.st(Space::Global, a, v);
        }
    });
}

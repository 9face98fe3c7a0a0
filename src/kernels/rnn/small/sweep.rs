//! `rnn_small_eig`'s Jacobi sweeps (see the module notes of `super`).

use super::abi::{JACOBI_MAX_SWEEPS, JACOBI_TOL2, SMALL_NO_CONVERGENCE};
use super::{block_any, rot, Ids, Smem, LDA, PAIRS, ROUND_FLAG, THREADS, W};
use crate::ptx::*;

/// Whether `apq^2 > JACOBI_TOL2 max(app aqq, 0)` (the mirror's `big`).
fn big(b: &mut KernelBuilder, app: Reg<F64>, aqq: Reg<F64>, apq: Reg<F64>) -> Reg<Pred> {
    let pr = b.mul(app, aqq);
    let pm = b.max(pr, 0.0f64);
    let th = b.mul(pm, JACOBI_TOL2);
    let sq = b.mul(apq, apq);
    b.setp(Cmp::Gt, sq, th)
}

/// `arr[i][j]`'s shared address, rows `ld` apart (`LDA` for `a`, W for `v`).
fn at(
    b: &mut KernelBuilder,
    arr: &SharedArray<F64>,
    ld: u32,
    i: Reg<U32>,
    j: Reg<U32>,
) -> Reg<U32> {
    let e = b.mad(i, ld, j);
    b.shared_index(arr, e)
}

fn ld_at(b: &mut KernelBuilder, arr: &SharedArray<F64>, i: Reg<U32>, j: Reg<U32>) -> Reg<F64> {
    let a = at(b, arr, LDA, i, j);
    b.ld::<F64>(Space::Shared, a)
}

/// Block `idx` of the upper block triangle (numbered by rows of the lower one: row Q holds
/// P = 0..=Q): `(P, Q)`, P <= Q.
fn decode(b: &mut KernelBuilder, idx: Reg<U32>) -> (Reg<U32>, Reg<U32>) {
    let rem = b.mov(idx);
    let r = b.mov(0u32);
    for i in 0..PAIRS {
        let ge = b.setp(Cmp::Ge, rem, i + 1);
        let less = b.sub(rem, i + 1);
        let nr = b.selp(less, rem, ge);
        b.mov_to(rem, nr);
        let r1 = b.add(r, 1u32);
        let nr = b.selp(r1, r, ge);
        b.mov_to(r, nr);
    }
    (rem, r)
}

/// One pair's rotation parameters from shared memory.
struct Rot {
    p: Reg<U32>,
    q: Reg<U32>,
    c: Reg<F64>,
    s: Reg<F64>,
    t: Reg<F64>,
    on: Reg<Pred>,
}

fn load_rot(b: &mut KernelBuilder, sm: &Smem, pair: Reg<U32>) -> Rot {
    let a = b.shared_index(&sm.rp, pair);
    let p = b.ld::<U32>(Space::Shared, a);
    let a = b.shared_index(&sm.rq, pair);
    let q = b.ld::<U32>(Space::Shared, a);
    let a = b.shared_index(&sm.rc, pair);
    let c = b.ld::<F64>(Space::Shared, a);
    let a = b.shared_index(&sm.rs, pair);
    let s = b.ld::<F64>(Space::Shared, a);
    let a = b.shared_index(&sm.rt, pair);
    let t = b.ld::<F64>(Space::Shared, a);
    let a = b.shared_index(&sm.ron, pair);
    let on = b.ld::<U32>(Space::Shared, a);
    let on = b.setp(Cmp::Ne, on, 0u32);
    Rot { p, q, c, s, t, on }
}

/// Phase R for pair `kk` of round `round`: `(p, q)` by the circle ordering, the rotation (or
/// the identity) into the shared rotation arrays.
fn phase_r(
    b: &mut KernelBuilder,
    sm: &Smem,
    kk: Reg<U32>,
    round: Reg<U32>,
    m: Reg<U32>,
) -> Reg<Pred> {
    let x = b.add(round, kk);
    let xm = b.sub(x, m);
    let wrap = b.setp(Cmp::Ge, x, m);
    let px = b.selp(xm, x, wrap);
    let y = b.add(round, m);
    let y = b.sub(y, kk);
    let ym = b.sub(y, m);
    let wrap = b.setp(Cmp::Ge, y, m);
    let qy = b.selp(ym, y, wrap);
    let first = b.setp(Cmp::Eq, kk, 0u32);
    let p = b.selp(round, px, first);
    let q = b.selp(m, qy, first);
    let app = ld_at(b, &sm.a, p, p);
    let aqq = ld_at(b, &sm.a, q, q);
    let apq = ld_at(b, &sm.a, p, q);
    let on = big(b, app, aqq, apq);
    let (c, s, t) = (b.mov(1.0f64), b.mov(0.0f64), b.mov(0.0f64));
    b.if_then(on, |b| {
        // The mirror's `rotation`: r = sqrt(d^2 + e^2), w = |d| + r, c = sqrt(w / 2r),
        // t = sign(d) e / w, s = t c.
        let d = b.sub(aqq, app);
        let e = b.mul(apq, 2.0f64);
        let ee = b.mul(e, e);
        let dd = b.fma(d, d, ee);
        let r = b.sqrt(dd);
        let ad = b.abs(d);
        let w = b.add(ad, r);
        let r2 = b.mul(r, 2.0f64);
        let q = b.div(w, r2);
        let cv = b.sqrt(q);
        let te = b.div(e, w);
        let nte = b.neg(te);
        let pos = b.setp(Cmp::Ge, d, 0.0f64);
        let tv = b.selp(te, nte, pos);
        let sv = b.mul(tv, cv);
        b.mov_to(c, cv);
        b.mov_to(s, sv);
        b.mov_to(t, tv);
    });
    let onw = b.selp(1u32, 0u32, on);
    for (arr, v) in [(&sm.rp, p), (&sm.rq, q), (&sm.ron, onw)] {
        let a = b.shared_index(arr, kk);
        b.st(Space::Shared, a, v);
    }
    for (arr, v) in [(&sm.rc, c), (&sm.rs, s), (&sm.rt, t)] {
        let a = b.shared_index(arr, kk);
        b.st(Space::Shared, a, v);
    }
    on
}

/// Phase U for block (P, Q): the diagonal block of a rotated pair, or `J_P^T M J_Q` written
/// with its mirror when either pair rotates.
fn update_block(b: &mut KernelBuilder, sm: &Smem, bp: Reg<U32>, bq: Reg<U32>) {
    // Both pairs' rotations load at once (Q's is P's again on the diagonal).
    let r1 = load_rot(b, sm, bp);
    let r2 = load_rot(b, sm, bq);
    let diag = b.setp(Cmp::Eq, bp, bq);
    b.if_else(
        diag,
        |b| {
            b.if_then(r1.on, |b| {
                let (p, q) = (r1.p, r1.q);
                let pq = at(b, &sm.a, LDA, p, q);
                let qp = at(b, &sm.a, LDA, q, p);
                let pp = at(b, &sm.a, LDA, p, p);
                let qq = at(b, &sm.a, LDA, q, q);
                let apq = b.ld::<F64>(Space::Shared, pq);
                let app = b.ld::<F64>(Space::Shared, pp);
                let aqq = b.ld::<F64>(Space::Shared, qq);
                let nt = b.neg(r1.t);
                let np = b.fma(nt, apq, app);
                let nq = b.fma(r1.t, apq, aqq);
                b.st(Space::Shared, pp, np);
                b.st(Space::Shared, qq, nq);
                b.st(Space::Shared, pq, 0.0f64);
                b.st(Space::Shared, qp, 0.0f64);
            });
        },
        |b| {
            let either = b.or(r1.on, r2.on);
            b.if_then(either, |b| {
                let idx = [(r1.p, r2.p), (r1.p, r2.q), (r1.q, r2.p), (r1.q, r2.q)];
                let addr: Vec<Reg<U32>> =
                    idx.iter().map(|&(i, j)| at(b, &sm.a, LDA, i, j)).collect();
                let mirror: Vec<Reg<U32>> =
                    idx.iter().map(|&(i, j)| at(b, &sm.a, LDA, j, i)).collect();
                let m: Vec<Reg<F64>> = addr
                    .iter()
                    .map(|&x| b.ld::<F64>(Space::Shared, x))
                    .collect();
                let (r11, r21) = rot(b, r1.c, r1.s, m[0], m[2]);
                let (r12, r22) = rot(b, r1.c, r1.s, m[1], m[3]);
                let (n11, n12) = rot(b, r2.c, r2.s, r11, r12);
                let (n21, n22) = rot(b, r2.c, r2.s, r21, r22);
                for (i, v) in [n11, n12, n21, n22].into_iter().enumerate() {
                    b.st(Space::Shared, addr[i], v);
                    b.st(Space::Shared, mirror[i], v);
                }
            });
        },
    );
}

/// The sweeps: runs until no pair of the leading `l x l` block is above the threshold, or sets
/// `status` to [`SMALL_NO_CONVERGENCE`] after [`JACOBI_MAX_SWEEPS`]. Counts sweeps in `sweeps` and
/// the rounds in which some pair rotated in `rounds`.
pub(super) fn sweeps(
    b: &mut KernelBuilder,
    sm: &Smem,
    ids: &Ids,
    l: Reg<U32>,
    status: Reg<U32>,
    (sweeps, rounds): (Reg<U32>, Reg<U32>),
) {
    let tid = ids.tid;
    let odd = b.and(l, 1u32);
    let ne = b.add(l, odd);
    let m = b.sub(ne, 1u32);
    let np = b.shr(ne, 1u32);
    let np1 = b.add(np, 1u32);
    let nblocks = b.mul(np, np1);
    let nblocks = b.shr(nblocks, 1u32);
    b.comment("this thread's two blocks of the upper block triangle");
    let mut blocks = Vec::new();
    for h in 0..2u32 {
        let idx = b.add(tid, THREADS * h);
        let valid = b.setp(Cmp::Lt, idx, nblocks);
        let (bp, bq) = decode(b, idx);
        blocks.push((valid, bp, bq));
    }
    b.loop_forever(|b, brk, _| {
        b.comment("convergence: is any pair above the threshold?");
        let anyb = b.mov(0u32);
        for q in 0..(W * W).div_ceil(THREADS) {
            let e = b.add(tid, THREADS * q);
            let i = b.div(e, W);
            let j = b.rem(e, W);
            let up = b.setp(Cmp::Lt, i, j);
            let jl = b.setp(Cmp::Lt, j, l);
            let live = b.and(up, jl);
            b.if_then(live, |b| {
                let aii = ld_at(b, &sm.a, i, i);
                let ajj = ld_at(b, &sm.a, j, j);
                let aij = ld_at(b, &sm.a, i, j);
                let on = big(b, aii, ajj, aij);
                let w = b.selp(1u32, 0u32, on);
                let o = b.or(anyb, w);
                b.mov_to(anyb, o);
            });
        }
        let anyp = b.setp(Cmp::Ne, anyb, 0u32);
        let any = block_any(b, anyp, sm, ids, 0);
        b.bra_unless(any, brk);
        let maxed = b.setp(Cmp::Ge, sweeps, JACOBI_MAX_SWEEPS);
        b.if_then(maxed, |b| {
            b.mov_to(status, SMALL_NO_CONVERGENCE);
            b.bra(brk);
        });
        let ns = b.add(sweeps, 1u32);
        b.mov_to(sweeps, ns);
        b.for_range(0u32, m, 1u32, |b, round, _| {
            let next = b.label("round_next");
            b.comment("R: the round's rotations (warp 0), and whether any pair rotates");
            let w0 = b.setp(Cmp::Eq, ids.warp, 0u32);
            let parity = b.and(round, 1u32);
            let slot = b.add(parity, ROUND_FLAG);
            let flag = b.shared_index(&sm.flags, slot);
            b.if_then(w0, |b| {
                let rl = b.setp(Cmp::Lt, tid, np);
                let on = b.mov(0u32);
                b.if_then(rl, |b| {
                    let r = phase_r(b, sm, tid, round, m);
                    let w = b.selp(1u32, 0u32, r);
                    b.mov_to(on, w);
                });
                let onp = b.setp(Cmp::Ne, on, 0u32);
                let any = b.vote_any(onp);
                let word = b.selp(1u32, 0u32, any);
                let first = b.setp(Cmp::Eq, ids.lane, 0u32);
                b.guarded(first, false, |b| b.st(Space::Shared, flag, word));
            });
            b.bar_sync();
            // A round without rotations skips U and its barrier: nobody reads this round's
            // rotations, nobody writes `a`, and the flag alternates between two words.
            let word = b.ld::<U32>(Space::Shared, flag);
            let go = b.setp(Cmp::Ne, word, 0u32);
            b.bra_unless(go, &next);
            let nr = b.add(rounds, 1u32);
            b.mov_to(rounds, nr);
            b.comment("U: the blocks of A, then the columns of V");
            for &(valid, bp, bq) in &blocks {
                b.if_then(valid, |b| update_block(b, sm, bp, bq));
            }
            let vl = b.setp(Cmp::Lt, ids.lane, np);
            b.if_then(vl, |b| {
                let r = load_rot(b, sm, ids.lane);
                b.if_then(r.on, |b| {
                    for j in 0..W / 8 {
                        let row = b.add(ids.warp, 8 * j);
                        let pa = at(b, &sm.v, W, row, r.p);
                        let qa = at(b, &sm.v, W, row, r.q);
                        let x = b.ld::<F64>(Space::Shared, pa);
                        let y = b.ld::<F64>(Space::Shared, qa);
                        let (nx, ny) = rot(b, r.c, r.s, x, y);
                        b.st(Space::Shared, pa, nx);
                        b.st(Space::Shared, qa, ny);
                    }
                });
            });
            b.bar_sync();
            b.place(&next);
        });
    });
}

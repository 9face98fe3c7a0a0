//! `rnn_lowrank_correct`: `out = pred + U diag(S) V^T x` per batch row, without forming the
//! `m x n` product.
//!
//! Shapes (row-major f32): `pred`, `out`: `batch x m`; `x`: `batch x n`; `ut` = U^T: `k x m`;
//! `s`: k; `vt` = V^T: `k x n`; k <= [`MAX_RANK`]. `out` may alias `pred`.
//!
//! Launch: one block of [`BLOCK`] threads per batch row. Phase 1: warp w computes
//! `t[j] = s[j] * sum_c vt[j][c] x[c]` for j = w, w + 8, ...: lane l accumulates c = l, l + 32, ...
//! with fma, then an xor-shuffle tree sums the lanes; lane 0 writes `t[j]` to shared memory.
//! Barrier. Phase 2: thread i (striding by the block) computes `acc = sum_j ut[j][i] t[j]` (fma,
//! j ascending; `ut` rows are read coalesced) and writes `pred[i] + acc`.

use crate::ptx::*;

/// Threads per block.
pub const BLOCK: u32 = 256;
/// Largest rank the kernel takes (size of its shared vector).
pub const MAX_RANK: u32 = 256;

/// Builds the module.
pub fn build(target: Target) -> Module {
    let mut b = KernelBuilder::new("rnn_lowrank_correct");
    b.reqntid(BLOCK, 1, 1);
    let pred = b.param::<U64>("pred");
    let x = b.param::<U64>("x");
    let ut = b.param::<U64>("ut");
    let s = b.param::<U64>("s");
    let vt = b.param::<U64>("vt");
    let out = b.param::<U64>("out");
    let m = b.param::<U32>("m");
    let n = b.param::<U32>("n");
    let k = b.param::<U32>("k");
    let (pred, x, ut) = (b.global_ptr(&pred), b.global_ptr(&x), b.global_ptr(&ut));
    let (s, vt, out) = (b.global_ptr(&s), b.global_ptr(&vt), b.global_ptr(&out));
    let (m, n, k) = (b.ld_param(&m), b.ld_param(&n), b.ld_param(&k));
    let t_sh = b.shared_array::<F32>("t", MAX_RANK);
    let tid = b.special(Special::TidX);
    let row = b.special(Special::CtaidX);
    let lane = b.and(tid, 31u32);
    let warp = b.shr(tid, 5u32);
    let xrow = b.mul(row, n);
    b.for_range(warp, k, BLOCK / 32, |b, j, _| {
        let part = b.mov(0.0f32);
        let vrow = b.mul(j, n);
        b.for_range(lane, n, 32u32, |b, c, _| {
            let vi = b.add(vrow, c);
            let va = b.index_addr(vt, vi, 4);
            let v = b.ld::<F32>(Space::GlobalNc, va);
            let xi = b.add(xrow, c);
            let xa = b.index_addr(x, xi, 4);
            let xv = b.ld::<F32>(Space::GlobalNc, xa);
            let p = b.fma(v, xv, part);
            b.mov_to(part, p);
        });
        let total = b.warp_sum(part);
        let lane0 = b.setp(Cmp::Eq, lane, 0u32);
        b.if_then(lane0, |b| {
            let sa = b.index_addr(s, j, 4);
            let sv = b.ld::<F32>(Space::GlobalNc, sa);
            let tv = b.mul(sv, total);
            let slot = b.shared_index(&t_sh, j);
            b.st(Space::Shared, slot, tv);
        });
    });
    b.bar_sync();
    let prow = b.mul(row, m);
    b.for_range(tid, m, BLOCK, |b, i, _| {
        let acc = b.mov(0.0f32);
        b.for_range(0u32, k, 1u32, |b, j, _| {
            let ui = b.mad(j, m, i);
            let ua = b.index_addr(ut, ui, 4);
            let u = b.ld::<F32>(Space::GlobalNc, ua);
            let slot = b.shared_index(&t_sh, j);
            let tv = b.ld::<F32>(Space::Shared, slot);
            let a = b.fma(u, tv, acc);
            b.mov_to(acc, a);
        });
        let pi = b.add(prow, i);
        let pa = b.index_addr(pred, pi, 4);
        let p = b.ld::<F32>(Space::Global, pa);
        let v = b.add(p, acc);
        let oa = b.index_addr(out, pi, 4);
        b.st(Space::Global, oa, v);
    });
    Module::single(target, b.finish())
}

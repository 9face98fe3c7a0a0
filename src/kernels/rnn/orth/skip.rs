//! `rnn_orth_skip`'s a-posteriori check (see `orth`'s module notes): whether a pass after the
//! first runs its factorisation and apply, and the `R_total` carry when it does not.

use super::{SKIP_TOL, WIDTH, WW};
use crate::ptx::*;

/// The skip variant's check after B of pass `pass`: counts the entries of the leading `l x l`
/// block of `gram` with `!(|G_ik - delta_ik| <= SKIP_TOL)` (NaN counts) in a shared counter and
/// returns "run C and D" (the first pass, or any such entry). When a later pass is skipped, block
/// 0 copies `R_total` from slot `(pass - 1) % 2` into slot `pass % 2`, where C and D would have
/// left it.
#[allow(clippy::too_many_arguments)] // the kernel's registers the check reads
pub(super) fn skip_check(
    b: &mut KernelBuilder,
    cnt: &Option<SharedArray<U32>>,
    gram: Reg<U64>,
    rt: Reg<U64>,
    tid: Reg<U32>,
    blk: Reg<U32>,
    pass: Reg<U32>,
    l: Reg<U32>,
) -> Reg<Pred> {
    let cnt = cnt.as_ref().expect("the skip variant declares its counter");
    let t0 = b.setp(Cmp::Eq, tid, 0u32);
    b.if_then(t0, |b| b.st(Space::Shared, cnt.at(0), 0u32));
    b.bar_sync();
    let bad = b.mov(0u32);
    for q in 0..9u32 {
        let e = b.add(tid, 256 * q);
        let i = b.div(e, WIDTH);
        let k = b.rem(e, WIDTH);
        let ga = b.index_addr(gram, e, 8);
        let g = b.ld::<F64>(Space::Global, ga);
        let diag = b.setp(Cmp::Eq, i, k);
        let want = b.selp(1.0f64, 0.0f64, diag);
        let d = b.sub(g, want);
        let d = b.abs(d);
        let ok = b.setp(Cmp::Le, d, SKIP_TOL);
        let li = b.setp(Cmp::Lt, i, l);
        let lk = b.setp(Cmp::Lt, k, l);
        let live = b.and(li, lk);
        let nok = b.not(ok);
        let fail = b.and(live, nok);
        let one = b.selp(1u32, 0u32, fail);
        let nb = b.or(bad, one);
        b.mov_to(bad, nb);
    }
    let any = b.setp(Cmp::Ne, bad, 0u32);
    b.if_then(any, |b| {
        let _ = b.atom(Space::Shared, AtomOp::Add, cnt.at(0), 1u32);
    });
    b.bar_sync();
    let n = b.ld::<U32>(Space::Shared, cnt.at(0));
    let first = b.setp(Cmp::Eq, pass, 0u32);
    let failed = b.setp(Cmp::Ne, n, 0u32);
    let go = b.or(first, failed);
    let skipping = b.not(go);
    let blk0 = b.setp(Cmp::Eq, blk, 0u32);
    let copy = b.and(skipping, blk0);
    b.if_then(copy, |b| {
        let odd = b.and(pass, 1u32);
        let dst = b.mul(odd, WW);
        let even = b.xor(odd, 1u32);
        let src = b.mul(even, WW);
        for q in 0..9u32 {
            let e = b.add(tid, 256 * q);
            let se = b.add(src, e);
            let sa = b.index_addr(rt, se, 8);
            let v = b.ld::<F64>(Space::Global, sa);
            let de = b.add(dst, e);
            let da = b.index_addr(rt, de, 8);
            b.st(Space::Global, da, v);
        }
    });
    go
}

//! Match extension for `lz4_compress`: from a found match (position `p0`, candidate `c0`), the
//! forward run (compared from `p0 + 4` up to the limit `P - 5`) and the backward run (down to the
//! anchor and to page byte 0), 32 lanes comparing one byte each per step and a ballot finding
//! the first mismatch. The first step does 16 bytes of both directions at once.

use super::Page;
use crate::kernels::lz4::warp::lowest_bit;
use crate::ptx::*;

/// Extends the match `p0`/`c0` forward (from `p0 + 4` to at most `limit`) and backward (down to
/// `anchor`, and `c0` down to 0); returns `(end, back)`. One 32-lane step does the first 16
/// bytes of both (lanes 0..16 forward, 16..32 backward); longer runs continue 32 bytes a step.
pub(super) fn extend(
    b: &mut KernelBuilder,
    pc: &Page,
    p0: Reg<U32>,
    c0: Reg<U32>,
    anchor: Reg<U32>,
    limit: Reg<U32>,
) -> (Reg<U32>, Reg<U32>) {
    b.comment("extend: 16 bytes forward and 16 backward in one 32-lane step");
    let lane = pc.ln.lane;
    let dist = b.sub(p0, c0);
    let room = b.sub(p0, anchor);
    let max_back = b.min(room, c0);
    // Lanes 0..16 compare page[p0 + 4 + i] with page[c0 + 4 + i], lanes 16..32 page[p0 - k] with
    // page[c0 - k] for k = lane - 15: both are `a` and `a - dist` with a per-lane step.
    let pa = b.add(pc.spage, p0);
    let a = b.add(pa, pc.ext_step);
    let s = b.sub(a, dist);
    let lim_b = b.add(max_back, 1u32);
    let x = b.selp(a, pc.ext_k, pc.ext_fwd);
    let bound = b.selp(pc.ext_limit, lim_b, pc.ext_fwd);
    let inside = b.setp(Cmp::Lt, x, bound);
    let cb = b.sub(pa, dist);
    let mm = mismatch_step(b, inside, a, s);
    let fm = b.or(mm, 0xffff_0000u32);
    let fwd_n = lowest_bit(b, fm);
    let bm = b.shr(mm, 16u32);
    let bm = b.or(bm, 0x1_0000u32);
    let back = lowest_bit(b, bm);
    let end = b.add(p0, 4u32);
    let end = b.add(end, fwd_n);
    // Runs longer than 16 bytes either way (rare on text) continue 32 bytes a step.
    let fwd_more = b.setp(Cmp::Eq, fwd_n, 16u32);
    let bwd_more = b.setp(Cmp::Eq, back, 16u32);
    let more = b.or(fwd_more, bwd_more);
    let ext_done = b.label("ext_done");
    b.bra_uni_unless(more, &ext_done);
    let fwd_done = b.label("fwd_done");
    b.bra_uni_unless(fwd_more, &fwd_done);
    b.comment("extend forward, 32 bytes a step");
    b.loop_with(LoopBranch::Uniform, |b, fwd_end, _| {
        let e = b.add(end, lane);
        let inside = b.setp(Cmp::Lt, e, limit);
        let a = b.add(pc.spage, e);
        let s = b.sub(a, dist);
        let stop = mismatch_step(b, inside, a, s);
        let k = lowest_bit(b, stop);
        let any = b.setp(Cmp::Ne, stop, 0u32);
        let adv = b.selp(k, 32u32, any);
        let e2 = b.add(end, adv);
        b.mov_to(end, e2);
        b.bra_uni_if(any, fwd_end);
    });
    b.place(&fwd_done);
    b.bra_uni_unless(bwd_more, &ext_done);
    b.comment("extend backward, 32 bytes a step");
    b.loop_with(LoopBranch::Uniform, |b, bwd_end, _| {
        let k = b.add(back, lane);
        let k = b.add(k, 1u32);
        let inside = b.setp(Cmp::Le, k, max_back);
        let a = b.sub(pa, k);
        let s = b.sub(cb, k);
        let stop = mismatch_step(b, inside, a, s);
        let j = lowest_bit(b, stop);
        let any = b.setp(Cmp::Ne, stop, 0u32);
        let adv = b.selp(j, 32u32, any);
        let nb = b.add(back, adv);
        b.mov_to(back, nb);
        b.bra_uni_if(any, bwd_end);
    });
    b.place(&ext_done);
    (end, back)
}

/// One 32-lane compare step of the shared bytes at `a` and `s`: the ballot of lanes that are
/// outside the range or differ.
fn mismatch_step(b: &mut KernelBuilder, inside: Reg<Pred>, a: Reg<U32>, s: Reg<U32>) -> Reg<U32> {
    let x = b.mov(0u32);
    let y = b.mov(256u32);
    b.when(inside, |b| {
        let t = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, a);
        b.mov_to(x, t);
        let u = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, s);
        b.mov_to(y, u);
    });
    let differ = b.setp(Cmp::Ne, x, y);
    b.ballot(differ)
}

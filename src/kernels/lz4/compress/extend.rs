//! Match extension for `lz4_compress`: from a found match (position `p0`, candidate `c0`), the
//! forward run (compared from `p0 + 4` up to the limit `P - 5`) and the backward run (down to the
//! anchor and to page byte 0), 32 lanes comparing one byte each per step and a ballot finding
//! the first mismatch. The first step does 16 bytes of both directions at once.

use super::{load_byte_where, Page};
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
    let dist = b.sub(p0, c0);
    let room = b.sub(p0, anchor);
    let max_back = b.min(room, c0);
    // Lanes 0..16 compare page[p0 + 4 + i] with page[c0 + 4 + i], lanes 16..32 page[p0 - k] with
    // page[c0 - k] for k = lane - 15: both are `here` and `here - dist` with a per-lane step.
    let pos_addr = b.add(pc.spage, p0);
    let here = b.add(pos_addr, pc.ext_step);
    let there = b.sub(here, dist);
    let back_bound = b.add(max_back, 1u32);
    let reach = b.selp(here, pc.ext_k, pc.ext_fwd);
    let bound = b.selp(pc.ext_limit, back_bound, pc.ext_fwd);
    let inside = b.setp(Cmp::Lt, reach, bound);
    let cand_addr = b.sub(pos_addr, dist);
    let mismatch = mismatch_step(b, pc, inside, here, there);
    let fwd_mask = b.or(mismatch, 0xffff_0000u32);
    let fwd_n = lowest_bit(b, fwd_mask);
    let bwd_mask = b.shr(mismatch, 16u32);
    let bwd_mask = b.or(bwd_mask, 0x1_0000u32);
    let back = lowest_bit(b, bwd_mask);
    let end = b.add(p0, 4u32);
    let end = b.add(end, fwd_n);
    // Runs longer than 16 bytes either way (rare on text) continue 32 bytes a step.
    let fwd_more = b.setp(Cmp::Eq, fwd_n, 16u32);
    let bwd_more = b.setp(Cmp::Eq, back, 16u32);
    let more = b.or(fwd_more, bwd_more);
    let ext_done = b.label("ext_done");
    b.bra_uni_unless(more, &ext_done);
    let run = Run {
        pos_addr,
        cand_addr,
        dist,
        max_back,
        limit,
    };
    extend_more(b, pc, run, end, back, fwd_more, bwd_more, &ext_done);
    b.place(&ext_done);
    (end, back)
}

/// Extends the match `p0` (at distance `dist`) like [`extend`], with the first step's loads
/// unpredicated: forward lanes read at most 7 bytes past the page (inside the stage's slack),
/// backward lanes at most 16 bytes before the page and its candidate (inside the warp's hash
/// table); lanes past either bound are cut off by a stop bit ORed into the ballot.
#[allow(clippy::too_many_arguments)]
pub(super) fn extend_bits(
    b: &mut KernelBuilder,
    pc: &Page,
    p0: Reg<U32>,
    dist: Reg<U32>,
    anchor: Reg<U32>,
    limit: Reg<U32>,
) -> (Reg<U32>, Reg<U32>) {
    b.comment("extend (stop bits): 16 bytes forward and 16 backward in one 32-lane step");
    let c0 = b.sub(p0, dist);
    let pos_addr = b.add(pc.spage, p0);
    let here = b.add(pos_addr, pc.ext_step);
    let there = b.sub(here, dist);
    let here_byte = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, here);
    let there_byte = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, there);
    let differ = b.setp(Cmp::Ne, here_byte, there_byte);
    let mismatch = b.ballot(differ);
    // Forward lanes run backwards (lane 15 - i compares byte p0 + 4 + i): shifted up by 16,
    // the first mismatch is the leading-zero count; stop bits at i = limit - 4 - p0 (the first
    // byte past the limit, >= 3) and at i = 16.
    let fwd_lanes = b.sub(limit, p0);
    let fwd_lanes = b.sub(fwd_lanes, 4u32);
    let fwd_stop = b.shr(0x8000_0000u32, fwd_lanes);
    let fwd_mask = b.shl(mismatch, 16u32);
    let fwd_mask = b.or(fwd_mask, fwd_stop);
    let fwd_mask = b.or(fwd_mask, 0x8000u32);
    let fwd_n = b.clz(fwd_mask);
    // Backward lane 32 - k compares distance k: the leading-zero count of the upper half is the
    // run; stop bits at k = max_back + 1 and at k = 17.
    let room = b.sub(p0, anchor);
    let max_back = b.min(room, c0);
    let bwd_stop = b.shr(0x8000_0000u32, max_back);
    let bwd_mask = b.and(mismatch, 0xffff_0000u32);
    let bwd_mask = b.or(bwd_mask, bwd_stop);
    let bwd_mask = b.or(bwd_mask, 0x8000u32);
    let back = b.clz(bwd_mask);
    let end = b.add(p0, 4u32);
    let end = b.add(end, fwd_n);
    let either = b.or(fwd_n, back);
    let more = b.setp(Cmp::Ge, either, 16u32);
    let ext_done = b.label("ext_done");
    b.bra_uni_unless(more, &ext_done);
    let fwd_more = b.setp(Cmp::Eq, fwd_n, 16u32);
    let bwd_more = b.setp(Cmp::Eq, back, 16u32);
    let cand_addr = b.sub(pos_addr, dist);
    let run = Run {
        pos_addr,
        cand_addr,
        dist,
        max_back,
        limit,
    };
    extend_more(b, pc, run, end, back, fwd_more, bwd_more, &ext_done);
    b.place(&ext_done);
    (end, back)
}

/// [`extend_bits`] with fewer uniform instructions ([`Variant::tight`](super::Variant)):
/// returns `(end, seq_start)` (`seq_start = p0 - back`), and the "longer than 16" test looks at
/// the masks, so the fast way uses each leading-zero count in one addition only (ptxas folds
/// `31 - flo` into it). The slow way counts again (`| 1` keeps the counts apart from the fast
/// way's).
pub(super) fn extend_tight(
    b: &mut KernelBuilder,
    pc: &Page,
    p0: Reg<U32>,
    dist: Reg<U32>,
    anchor: Reg<U32>,
    limit: Reg<U32>,
) -> (Reg<U32>, Reg<U32>) {
    let (end, seq_start, _) = extend_tight_code(b, pc, p0, dist, anchor, limit, false);
    (end, seq_start)
}

/// [`extend_tight`], also returning (with `code`) the match length minus 4 (the token's code:
/// `fwd_n + back` on the fast way, one addition).
pub(super) fn extend_tight_code(
    b: &mut KernelBuilder,
    pc: &Page,
    p0: Reg<U32>,
    dist: Reg<U32>,
    anchor: Reg<U32>,
    limit: Reg<U32>,
    code: bool,
) -> (Reg<U32>, Reg<U32>, Option<Reg<U32>>) {
    b.comment("extend (tight): 16 bytes forward and 16 backward in one 32-lane step");
    let c0 = b.sub(p0, dist);
    let pos_addr = b.add(pc.spage, p0);
    let here = b.add(pos_addr, pc.ext_step);
    let there = b.sub(here, dist);
    let here_byte = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, here);
    let there_byte = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, there);
    let differ = b.setp(Cmp::Ne, here_byte, there_byte);
    let mismatch = b.ballot(differ);
    let fwd_lanes = b.sub(limit, p0);
    let fwd_lanes = b.sub(fwd_lanes, 4u32);
    let fwd_stop = b.shr(0x8000_0000u32, fwd_lanes);
    let fwd_mask = b.shl(mismatch, 16u32);
    let fwd_mask = b.or(fwd_mask, fwd_stop);
    let fwd_mask = b.or(fwd_mask, 0x8000u32);
    let room = b.sub(p0, anchor);
    let max_back = b.min(room, c0);
    let bwd_stop = b.shr(0x8000_0000u32, max_back);
    let bwd_mask = b.and(mismatch, 0xffff_0000u32);
    let bwd_mask = b.or(bwd_mask, bwd_stop);
    let bwd_mask = b.or(bwd_mask, 0x8000u32);
    let fwd_n = b.clz(fwd_mask);
    let end = b.add(p0, 4u32);
    let end = b.add(end, fwd_n);
    let back = b.clz(bwd_mask);
    let seq_start = b.sub(p0, back);
    let ml4 = code.then(|| b.add(fwd_n, back));
    // A run of 16 either way leaves its mask below bit 16 (the stop bit 15).
    let low = b.min(fwd_mask, bwd_mask);
    let more = b.setp(Cmp::Lt, low, 0x1_0000u32);
    let ext_done = b.label("ext_done");
    b.bra_uni_unless(more, &ext_done);
    let fwd_more = b.setp(Cmp::Lt, fwd_mask, 0x1_0000u32);
    let bwd_more = b.setp(Cmp::Lt, bwd_mask, 0x1_0000u32);
    let f1 = b.or(fwd_mask, 1u32);
    let fwd_n = b.clz(f1);
    let slow_end = b.add(p0, 4u32);
    let slow_end = b.add(slow_end, fwd_n);
    let b1 = b.or(bwd_mask, 1u32);
    let slow_back = b.clz(b1);
    let cand_addr = b.sub(pos_addr, dist);
    let run = Run {
        pos_addr,
        cand_addr,
        dist,
        max_back,
        limit,
    };
    let slow_done = b.label("slow_done");
    extend_more(
        b, pc, run, slow_end, slow_back, fwd_more, bwd_more, &slow_done,
    );
    b.place(&slow_done);
    b.mov_to(end, slow_end);
    let slow_start = b.sub(p0, slow_back);
    b.mov_to(seq_start, slow_start);
    if let Some(ml4) = ml4 {
        let len = b.sub(slow_end, slow_start);
        let len4 = b.sub(len, 4u32);
        b.mov_to(ml4, len4);
    }
    b.place(&ext_done);
    (end, seq_start, ml4)
}

/// A match whose first step found no end in one direction.
#[derive(Clone, Copy)]
struct Run {
    /// Shared addresses of the match position and of its candidate.
    pos_addr: Reg<U32>,
    cand_addr: Reg<U32>,
    dist: Reg<U32>,
    /// The backward run's bound (bytes) and the forward one's (page position).
    max_back: Reg<U32>,
    limit: Reg<U32>,
}

/// The steps after the first: forward while `fwd_more`, then backward while `bwd_more`, 32
/// bytes a step, advancing `end` and `back`.
#[allow(clippy::too_many_arguments)]
fn extend_more(
    b: &mut KernelBuilder,
    pc: &Page,
    run: Run,
    end: Reg<U32>,
    back: Reg<U32>,
    fwd_more: Reg<Pred>,
    bwd_more: Reg<Pred>,
    ext_done: &Label,
) {
    let lane = pc.ln.lane;
    let Run {
        pos_addr,
        cand_addr,
        dist,
        max_back,
        limit,
    } = run;
    let fwd_done = b.label("fwd_done");
    b.bra_uni_unless(fwd_more, &fwd_done);
    b.comment("extend forward, 32 bytes a step");
    b.loop_with(LoopBranch::Uniform, |b, fwd_end, _| {
        let at = b.add(end, lane);
        let inside = b.setp(Cmp::Lt, at, limit);
        let here = b.add(pc.spage, at);
        let there = b.sub(here, dist);
        let stop = mismatch_step(b, pc, inside, here, there);
        let first_diff = lowest_bit(b, stop);
        let any = b.setp(Cmp::Ne, stop, 0u32);
        let advance = b.selp(first_diff, 32u32, any);
        let next_end = b.add(end, advance);
        b.mov_to(end, next_end);
        b.bra_uni_if(any, fwd_end);
    });
    b.place(&fwd_done);
    b.bra_uni_unless(bwd_more, ext_done);
    b.comment("extend backward, 32 bytes a step");
    b.loop_with(LoopBranch::Uniform, |b, bwd_end, _| {
        let k = b.add(back, lane);
        let k = b.add(k, 1u32);
        let inside = b.setp(Cmp::Le, k, max_back);
        let here = b.sub(pos_addr, k);
        let there = b.sub(cand_addr, k);
        let stop = mismatch_step(b, pc, inside, here, there);
        let first_diff = lowest_bit(b, stop);
        let any = b.setp(Cmp::Ne, stop, 0u32);
        let advance = b.selp(first_diff, 32u32, any);
        let next_back = b.add(back, advance);
        b.mov_to(back, next_back);
        b.bra_uni_if(any, bwd_end);
    });
}

/// One 32-lane compare step of the shared bytes at `here` and `there`: the ballot of lanes that
/// are outside the range or differ (outside lanes compare 0 with 256).
fn mismatch_step(
    b: &mut KernelBuilder,
    pc: &Page,
    inside: Reg<Pred>,
    here: Reg<U32>,
    there: Reg<U32>,
) -> Reg<U32> {
    let here_byte = b.mov(0u32);
    let there_byte = b.mov(256u32);
    if pc.variant.merge {
        load_byte_where(b, pc, inside, here_byte, here);
        load_byte_where(b, pc, inside, there_byte, there);
    } else {
        b.when(inside, |b| {
            let loaded = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, here);
            b.mov_to(here_byte, loaded);
            let loaded = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, there);
            b.mov_to(there_byte, loaded);
        });
    }
    let differ = b.setp(Cmp::Ne, here_byte, there_byte);
    b.ballot(differ)
}

//! [`Variant::direct`](super::Variant) (issue 17, session 12): the match step of a solo window
//! with lane runs ([`lane_ext`](super::lane_ext)) in fewer operations.
//!
//! Each lane packs its runs as positions relative to the window ([`lane_runs_direct`]): `dist |
//! (lane + 8 - min(bwd, cand)) << 16 | (lane + 2 + fwd + 64 * long) << 24`, i.e. the sequence
//! start before the anchor bound (plus 8) and the match end minus 2 (the lane inserted at the
//! match's end, plus 64 when the match may go on). A match then takes `end - 2` with one shift,
//! the sequence start as `max(base + start - 8, anchor)`, and the short sequence's bytes from
//! the shuffled word itself (the offset's two bytes by `prmt`, whatever the bits above them).
//! The "may go on" flag is not tested on the way of a short sequence: it makes the match length
//! at least 60, so such a match fails the short sequence's test and the other way checks it
//! (the 32-lane extension), then takes the general emission choice.

use super::emit::{emit_sequence_then, emit_short_lean};
use super::extend::extend_tight;
use super::window::Window;
use super::{Match, Page};
use crate::kernels::lz4::warp::bcast;
use crate::ptx::*;

/// The packed word of [`Variant::direct`](super::Variant) from a lane's runs (see the module
/// docs): `fwd`, `bwd` (0..=4 each), `long` (either run reached 4), the candidate `cand` and the
/// distance `dist`.
pub(super) fn lane_runs_direct(
    b: &mut KernelBuilder,
    pc: &Page,
    fwd: Reg<U32>,
    bwd: Reg<U32>,
    long: Reg<Pred>,
    cand: Reg<U32>,
    dist: Reg<U32>,
) -> Reg<U32> {
    let lane = pc.ln.lane;
    let bwd = b.min(bwd, cand);
    let lane8 = b.add(lane, 8u32);
    let start = b.sub(lane8, bwd);
    let flag = b.selp(64u32 + 2, 2u32, long);
    let end_m2 = b.add(lane, fwd);
    let end_m2 = b.add(end_m2, flag);
    let packed = b.mad(start, 1u32 << 16, dist);
    b.mad(end_m2, 1u32 << 24, packed)
}

/// The window's state a match changes (`inserted`, `live`, `next_base`) for a match ending at
/// `end` (`end_m2` = `end - 2 - base`) found at the lowest lane of `matched` (`below` =
/// `matched - 1`): the lanes of `live` up to that lane and the lane `end - 2` join `inserted`
/// (`inserted` lies below `live`, which holds the match's lane), `live` starts at `end`.
pub(super) fn after_match(
    b: &mut KernelBuilder,
    w: &Window,
    matched: Reg<U32>,
    below: Reg<U32>,
    end: Reg<U32>,
    end_m2: Reg<U32>,
) {
    let upto = b.xor(matched, below);
    let tested = b.and(w.live, upto);
    // No lane when `end - 2` lies past the window (`bmsk.clamp` from bit 32 on is 0).
    let bit_m2 = b.bmsk(end_m2, 1u32);
    let ins = b.or(w.inserted, tested);
    let ins = b.or(ins, bit_m2);
    b.mov_to(w.inserted, ins);
    // -(1 << rel) = !0 << rel (0 from rel = 32 on, as bit_m2 * 4 wraps to 0).
    let next_live = b.mul(bit_m2, 0xffff_fffcu32);
    b.mov_to(w.live, next_live);
    let outside = b.setp(Cmp::Ge, end_m2, 30u32);
    b.when(outside, |b| b.mov_to(w.next_base, end));
}

/// One match of a solo window with lane runs packed by [`lane_runs_direct`], at the lowest lane
/// of `matched` (the loop's register, which `next` updates); `next` emits the next lookup (beside
/// each emission). With `again` (the loop's first instruction after its test, and its exit) a
/// short sequence branches on to the next match itself.
pub(super) fn match_step_direct(
    b: &mut KernelBuilder,
    pc: &Page,
    w: &Window,
    matched: Reg<U32>,
    packed: Reg<U32>,
    next: &mut dyn FnMut(&mut KernelBuilder),
    again: Option<(&Label, &Label)>,
) {
    b.comment("match (direct): the lane's packed sequence start and end");
    let below = b.sub(matched, 1u32);
    let not_m = b.not(matched);
    let under = b.and(not_m, below);
    let first = b.popc(under);
    let v = bcast(b, packed, first);
    let end_m2 = b.shr(v, 24u32);
    let start = b.bfe(v, 16u32, 8u32);
    let start = b.add(w.base, start);
    let start = b.sub(start, 8u32);
    let seq_start = b.max(start, w.anchor);
    let end = b.add(w.base, end_m2);
    let end = b.add(end, 2u32);
    let lit = b.sub(seq_start, w.anchor);
    let ml4 = b.sub(end, seq_start);
    let ml4 = b.sub(ml4, 4u32);
    // A flagged end makes ml4 >= 60: such matches go the other way.
    let few = b.setp(Cmp::Lt, lit, 15u32);
    let short_m = b.setp(Cmp::Lt, ml4, 15u32);
    let need = b.add(pc.out, lit);
    let need = b.add(need, 9u32);
    let room = b.setp(Cmp::Lt, need, pc.p_len);
    let short = b.and(few, short_m);
    let short = b.and(short, room);
    let other = b.label("direct_other");
    let done = b.label("direct_done");
    b.bra_uni_unless(short, &other);
    after_match(b, w, matched, below, end, end_m2);
    // The shuffled word as the offset: the short sequence takes its bytes 0 and 1 by `prmt`.
    let m = Match {
        offset: v,
        len: ml4,
        minus4: true,
    };
    emit_short_lean(b, pc, w.anchor, lit, m);
    next(b);
    b.mov_to(w.anchor, end);
    if let Some((again, exit)) = again {
        // [`Variant::fastloop`](super::Variant): straight to the next match (or out).
        let found = b.setp(Cmp::Ne, matched, 0u32);
        b.bra_uni_if(found, again);
        b.bra_uni(exit);
    } else {
        b.bra_uni(&done);
    }

    b.place(&other);
    b.comment("match (direct): longer runs, or not a short sequence");
    let dist = b.and(v, 0xffffu32);
    let long = b.setp(Cmp::Ge, v, 0x4000_0000u32);
    let checked = b.label("direct_checked");
    b.bra_uni_unless(long, &checked);
    let p0 = b.add(w.base, first);
    let (end_slow, start_slow) = extend_tight(b, pc, p0, dist, w.anchor, w.limit);
    b.mov_to(end, end_slow);
    b.mov_to(seq_start, start_slow);
    let rel = b.sub(end_slow, w.base);
    let rel_m2 = b.sub(rel, 2u32);
    b.mov_to(end_m2, rel_m2);
    b.place(&checked);
    let lit = b.sub(seq_start, w.anchor);
    let ml4 = b.sub(end, seq_start);
    let ml4 = b.sub(ml4, 4u32);
    after_match(b, w, matched, below, end, end_m2);
    let m = Match {
        offset: dist,
        len: ml4,
        minus4: true,
    };
    emit_sequence_then(b, pc, w.anchor, lit, Some(m), next);
    b.mov_to(w.anchor, end);
    b.place(&done);
}

//! [`Variant::lanes`](super::Variant) (issue 17, session 10): in a solo window (every lane's
//! candidate is its table entry, see [`parse_masks`](super::parse_masks)) each lane extends its
//! own candidate once, before the window's matches are taken, so that a match costs one shuffle
//! and a few uniform operations instead of a 32-lane compare step.
//!
//! Per lane (position `p`, candidate `c`, distance `d = p - c`): `fwd` = equal bytes of
//! `page[p+4..p+8]` and `page[c+4..c+8]` from the first on (0..=4, the trailing-zero bytes of
//! the XOR of the two words), `bwd` = equal bytes of `page[p-4..p]` and `page[c-4..c]` from the
//! last down (0..=4, the leading-zero bytes). The lane packs `d | (lane + 4 + fwd + 64 * long) <<
//! 16 | bwd << 29` (with [`Variant::packmin`](super::Variant): `d | min(bwd, c) << 16 |
//! (lane + 4 + fwd + 64 * long) << 25`), `long` when either run reached 4 bytes (the match may go
//! on: such a match takes the 32-lane extension, [`extend_bits`]). Bytes read before `p` or `c` may lie before the page
//! (in the warp's table) and bytes after `p + 8` past it (in the stage's slack): the backward run
//! is bounded by the anchor and by `c` at the match, and a forward run of 4 takes the checked
//! path, so such bytes never count.

use super::extend::{extend_bits, extend_tight};
use super::Page;
use crate::kernels::lz4::warp::bcast;
use crate::ptx::*;

/// The words 4 bytes after and 4 bytes before shared address `addr` (any alignment; its aligned
/// words are loaded again: keeping them from the window's start costs registers ptxas does not
/// have at 72).
pub(super) fn next_prev(b: &mut KernelBuilder, addr: Reg<U32>) -> (Reg<U32>, Reg<U32>) {
    let aligned = b.and(addr, !3u32);
    let a = Addr::from(aligned);
    let lo0 = b.ld::<U32>(Space::Shared, a.off(-4));
    let lo = b.ld::<U32>(Space::Shared, aligned);
    let hi = b.ld::<U32>(Space::Shared, a.off(4));
    let hi2 = b.ld::<U32>(Space::Shared, a.off(8));
    let next = b.prmt_f4e(hi, hi2, addr);
    let prev = b.prmt_f4e(lo0, lo, addr);
    (next, prev)
}

/// Each lane's packed runs (see the module docs) for its position at shared address `p_addr`,
/// its candidate at `c_addr` (page position `cand`) and its distance `dist`.
pub(super) fn lane_runs(
    b: &mut KernelBuilder,
    pc: &Page,
    p_addr: Reg<U32>,
    c_addr: Reg<U32>,
    cand: Reg<U32>,
    dist: Reg<U32>,
) -> Reg<U32> {
    b.comment("lanes: each lane's forward and backward runs (4 bytes each way), packed");
    let p_words = next_prev(b, p_addr);
    let c_words = next_prev(b, c_addr);
    runs_of_words(b, pc, p_words, c_words, cand, dist)
}

/// [`lane_runs`] from the words after and before the position (`p_words`) and the candidate
/// (`c_words`), as [`next_prev`] gives them.
pub(super) fn runs_of_words(
    b: &mut KernelBuilder,
    pc: &Page,
    (p_next, p_prev): (Reg<U32>, Reg<U32>),
    (c_next, c_prev): (Reg<U32>, Reg<U32>),
    cand: Reg<U32>,
    dist: Reg<U32>,
) -> Reg<U32> {
    let xf = b.xor(p_next, c_next);
    let xb = b.xor(p_prev, c_prev);
    let rf = b.brev(xf);
    let fwd_bits = b.clz(rf);
    let fwd = b.shr(fwd_bits, 3u32);
    let bwd_bits = b.clz(xb);
    let bwd = b.shr(bwd_bits, 3u32);
    // Either run of 4: the match may be longer, so it takes the checked extension (64 added
    // to the end, at most 39 otherwise, flags it).
    let f_all = b.setp(Cmp::Eq, xf, 0u32);
    let b_all = b.setp(Cmp::Eq, xb, 0u32);
    let long = b.or(f_all, b_all);
    let flag = b.selp(64u32, 0u32, long);
    if pc.variant.direct_solo() {
        return super::direct::lane_runs_direct(b, pc, fwd, bwd, long, cand, dist);
    }
    let end_rel = b.add(pc.ln.lane, fwd);
    let end_rel = b.add(end_rel, flag);
    let end_rel = b.add(end_rel, 4u32);
    if pc.variant.packmin {
        // `dist | min(bwd, cand) << 16 | end_rel << 25`: the backward run already bounded by
        // the candidate's position, the end (and the flag, bit 31) one shift away.
        let bwd = b.min(bwd, cand);
        let packed = b.mad(bwd, 1u32 << 16, dist);
        return b.mad(end_rel, 1u32 << 25, packed);
    }
    let packed = b.mad(end_rel, 1u32 << 16, dist);
    b.mad(bwd, 1u32 << 29, packed)
}

/// The match at window lane `first` from the lanes' packed runs: `(distance, position, end,
/// sequence start)`, the last two as [`extend_bits`] (or with `tight` [`extend_tight`]) gives
/// them, which runs when the lane's flag is set.
pub(super) fn extend_lanes(
    b: &mut KernelBuilder,
    pc: &Page,
    packed: Reg<U32>,
    first: Reg<U32>,
    base: Reg<U32>,
    anchor: Reg<U32>,
    limit: Reg<U32>,
) -> (Reg<U32>, Reg<U32>, Reg<U32>, Reg<U32>) {
    b.comment("lanes: the match from its lane's packed runs");
    let v = bcast(b, packed, first);
    let p0 = b.add(base, first);
    let dist = b.and(v, 0xffffu32);
    let (rel, end, seq_start) = if pc.variant.packmin {
        let rel = b.shr(v, 25u32);
        let end = b.add(base, rel);
        let bwd = b.shr(v, 16u32);
        let bwd = b.and(bwd, 7u32);
        let room = b.sub(p0, anchor);
        let back = b.min(bwd, room);
        (rel, end, b.sub(p0, back))
    } else {
        let rel = b.shr(v, 16u32);
        let rel = b.and(rel, 0x7fu32);
        let end = b.add(base, rel);
        let bwd = b.shr(v, 29u32);
        let room = b.sub(p0, anchor);
        let c0 = b.sub(p0, dist);
        let max_back = b.min(room, c0);
        let back = b.min(bwd, max_back);
        (rel, end, b.sub(p0, back))
    };
    let long = b.setp(Cmp::Ge, rel, 64u32);
    let done = b.label("lanes_done");
    b.bra_uni_unless(long, &done);
    let (end_slow, start_slow) = if pc.variant.tight {
        extend_tight(b, pc, p0, dist, anchor, limit)
    } else {
        let (end_slow, back_slow) = extend_bits(b, pc, p0, dist, anchor, limit);
        (end_slow, b.sub(p0, back_slow))
    };
    b.mov_to(end, end_slow);
    b.mov_to(seq_start, start_slow);
    b.place(&done);
    (dist, p0, end, seq_start)
}

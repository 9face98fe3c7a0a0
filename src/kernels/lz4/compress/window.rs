//! One match of the window parse with candidate masks ([`parse_masks`](super::parse_masks)):
//! the window's uniform state, and the match step (extension, inserts, emission).

use super::direct::after_match;
use super::emit::{emit_sequence, emit_sequence_then};
use super::extend::{extend, extend_bits, extend_tight_code};
use super::lane_ext::extend_lanes;
use super::{Match, Page};
use crate::kernels::lz4::warp::{bcast, lowest_bit};
use crate::ptx::*;

/// The window's uniform state the match steps update.
pub(super) struct Window {
    pub(super) base: Reg<U32>,
    pub(super) anchor: Reg<U32>,
    pub(super) limit: Reg<U32>,
    /// Lanes in the table by now (below the live ones).
    pub(super) inserted: Reg<U32>,
    /// Lanes from the last match's end on (tested in order from there).
    pub(super) live: Reg<U32>,
    /// Where the next window starts (the end of a match reaching past this one).
    pub(super) next_base: Reg<U32>,
    pub(super) window_end: Label,
}

/// One match at the lowest lane of `matched` (`known` = `inserted | live`; `dist` gives each
/// lane's candidate distance): extend, mark the inserts, emit; leaves for the window's end when
/// the match reaches past the window, else falls through with `live` from its end. With
/// `next_lookup` ([`Variant::pipe`](super::Variant)) the next lookup is emitted beside the
/// sequence and a match past the window leaves through it (finding nothing).
#[allow(clippy::too_many_arguments)]
pub(super) fn match_step(
    b: &mut KernelBuilder,
    pc: &Page,
    w: &Window,
    matched: Reg<U32>,
    known: Reg<U32>,
    dist: impl FnOnce(&mut KernelBuilder) -> Reg<U32>,
    next_lookup: Option<&mut dyn FnMut(&mut KernelBuilder)>,
    lanes: Option<Reg<U32>>,
) {
    b.comment("match at the first matching lane: extend, mark inserts, emit");
    let (first, below) = if pc.variant.tight {
        let below = b.sub(matched, 1u32);
        let not_m = b.not(matched);
        let under = b.and(not_m, below);
        (b.popc(under), Some(below))
    } else {
        (lowest_bit(b, matched), None)
    };
    // The token's code, where the extension gives it (`direct`).
    let mut ml4 = None;
    let (match_dist, match_pos, end, back) = if let Some(packed) = lanes {
        let (d, p, end, start) = extend_lanes(b, pc, packed, first, w.base, w.anchor, w.limit);
        (d, p, end, Start::At(start))
    } else {
        let dist = dist(b);
        let match_dist = bcast(b, dist, first);
        let match_pos = b.add(w.base, first);
        if pc.variant.tight {
            let direct = pc.variant.direct_solo() && next_lookup.is_some();
            let (end, seq_start, code) =
                extend_tight_code(b, pc, match_pos, match_dist, w.anchor, w.limit, direct);
            ml4 = code;
            (match_dist, match_pos, end, Start::At(seq_start))
        } else {
            let (end, back) = byte_extend(b, pc, w, match_pos, match_dist);
            (match_dist, match_pos, end, Start::Back(back))
        }
    };
    let seq_start = match back {
        Start::At(s) => s,
        Start::Back(back) => b.sub(match_pos, back),
    };
    if pc.variant.direct_solo() && next_lookup.is_some() {
        let Some(next_lookup) = next_lookup else {
            return;
        };
        // Session 12's bookkeeping (`direct`): the length as the token's code, the window's
        // masks from `end - 2` by `bmsk`.
        let lit = b.sub(seq_start, w.anchor);
        let ml4 = match ml4 {
            Some(ml4) => ml4,
            None => {
                let ml = b.sub(end, seq_start);
                b.sub(ml, 4u32)
            }
        };
        let end_m2 = b.sub(end, w.base);
        let end_m2 = b.sub(end_m2, 2u32);
        let below = match below {
            Some(below) => below,
            None => b.sub(matched, 1u32),
        };
        after_match(b, w, matched, below, end, end_m2);
        let m = Match {
            offset: match_dist,
            len: ml4,
            minus4: true,
        };
        emit_sequence_then(b, pc, w.anchor, lit, Some(m), next_lookup);
        b.mov_to(w.anchor, end);
        return;
    }
    let lit = b.sub(seq_start, w.anchor);
    let ml = b.sub(end, seq_start);
    // The lanes known so far up to `first` (`matched ^ (matched - 1)`: the bits up to its
    // lowest) and the lane `end - 2` (none when it lies past the window: shl by 32 or more
    // gives 0) are in the table from here on.
    let below = match below {
        Some(below) => below,
        None => b.sub(matched, 1u32),
    };
    let upto = b.xor(matched, below);
    let tested = b.and(known, upto);
    let rel = b.sub(end, w.base);
    let rel_m2 = b.sub(rel, 2u32);
    let bit_m2 = b.shl(1u32, rel_m2);
    let ins = b.or(tested, bit_m2);
    b.mov_to(w.inserted, ins);
    let m = Match::new(match_dist, ml);
    if let Some(next_lookup) = next_lookup {
        // Pipelined: `live` is empty past the window (shl by 32 or more gives 0), so the next
        // lookup, emitted beside the sequence, finds nothing and the loop ends there.
        let next_live = if pc.variant.tight {
            // -(1 << rel) = !0 << rel (0 from rel = 32 on, as bit_m2 * 4 wraps to 0).
            b.mul(bit_m2, 0xffff_fffcu32)
        } else {
            b.shl(u32::MAX, rel)
        };
        b.mov_to(w.live, next_live);
        let outside = b.setp(Cmp::Ge, rel, 32u32);
        b.when(outside, |b| b.mov_to(w.next_base, end));
        emit_sequence_then(b, pc, w.anchor, lit, Some(m), next_lookup);
        b.mov_to(w.anchor, end);
        return;
    }
    emit_sequence(b, pc, w.anchor, lit, Some(m));
    b.mov_to(w.anchor, end);
    let outside = b.setp(Cmp::Ge, rel, 32u32);
    b.when(outside, |b| b.mov_to(w.next_base, end));
    b.bra_uni_if(outside, &w.window_end);
    let next_live = b.shl(u32::MAX, rel);
    b.mov_to(w.live, next_live);
}

/// Where a match's sequence starts: given, or `back` bytes before the match position.
enum Start {
    At(Reg<U32>),
    Back(Reg<U32>),
}

/// The 32-lane extension of the match at `match_pos` (distance `match_dist`): `(end, back)`.
fn byte_extend(
    b: &mut KernelBuilder,
    pc: &Page,
    w: &Window,
    match_pos: Reg<U32>,
    match_dist: Reg<U32>,
) -> (Reg<U32>, Reg<U32>) {
    if pc.variant.bits {
        extend_bits(b, pc, match_pos, match_dist, w.anchor, w.limit)
    } else {
        let match_cand = b.sub(match_pos, match_dist);
        extend(b, pc, match_pos, match_cand, w.anchor, w.limit)
    }
}

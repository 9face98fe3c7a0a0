//! Byte movement for `lz4_decompress`, all 32 lanes a step: literals from the staged block and
//! whole short sequences (literals and match) in one step; pages out and matches are in
//! [`page`](super::page), shared with the half-warp decoders.

use super::checks::Parse;
use super::page::copy_match;
use super::{Dec, Lengths, Sequence};
use crate::kernels::lz4::warp::for_each_lane_item;
use crate::ptx::*;

/// Copies `lit` literals from the shared address `src` (in the staged block) to page byte `op`,
/// 32 a step.
pub(super) fn copy_literals(
    b: &mut KernelBuilder,
    d: &Dec,
    src: Reg<U32>,
    op: Reg<U32>,
    lit: Reg<U32>,
) {
    let dst = b.add(d.ob, op);
    for_each_lane_item(b, d.ln.lane, lit, 0, |b, i, inside| {
        let s = b.add(src, i);
        let t = b.add(dst, i);
        b.when(inside, |b| {
            let v = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, s);
            b.st_narrow(Space::Shared, Narrow::U8, t, v);
        });
    });
    b.warp_sync(FULL_MASK);
}

/// Copies a checked sequence. When literals and match fit 32 bytes (always so for
/// `Lengths::Short`) and the match source lies wholly before the literals, one step does both
/// (lanes below `lit` copy literals, the next `ml` lanes match bytes; every lane loads before any
/// stores).
pub(super) fn copy_sequence(b: &mut KernelBuilder, d: &Dec, seq: &Sequence, lengths: Lengths) {
    let Sequence {
        lit_src,
        op,
        lit,
        offset,
        ml,
    } = *seq;
    b.comment("copy the sequence: literals and match in one step when they fit and are apart");
    let span = b.add(lit, ml);
    if lengths == Lengths::ShortApart {
        one_step_copy(b, d, seq, span);
        return;
    }
    let apart = b.setp(Cmp::Ge, offset, span);
    let one_step = match lengths {
        Lengths::Short | Lengths::ShortApart => apart,
        Lengths::Any => {
            let fits = b.setp(Cmp::Le, span, 32u32);
            b.and(fits, apart)
        }
    };
    let general = b.label("general_copy");
    let copied = b.label("copied");
    b.bra_uni_unless(one_step, &general);
    one_step_copy(b, d, seq, span);
    b.bra_uni(&copied);
    b.place(&general);
    b.comment("copy the literals, then the match, each in steps of their own");
    copy_literals(b, d, lit_src, op, lit);
    let mop = b.add(op, lit);
    copy_match(b, &d.page(), mop, offset, ml);
    b.place(&copied);
}

/// Literals and match of `span` <= 32 bytes, the match source wholly before the literals, in one
/// step: lanes below `lit` copy literals, the next `ml` lanes match bytes; every lane loads
/// before any stores.
fn one_step_copy(b: &mut KernelBuilder, d: &Dec, seq: &Sequence, span: Reg<U32>) {
    let Sequence {
        lit_src,
        op,
        lit,
        offset,
        ..
    } = *seq;
    let lane = d.ln.lane;
    let is_lit = b.setp(Cmp::Lt, lane, lit);
    let from_lit = b.add(lit_src, lane);
    // `Variant::one_step` keeps no `ob + lane` register (fewer live across the loop).
    let dst = if d.variant.one_step {
        let at = b.add(d.ob, op);
        b.add(at, lane)
    } else {
        b.add(d.ob_lane, op)
    };
    let from_match = b.sub(dst, offset);
    let src = b.selp(from_lit, from_match, is_lit);
    let inside = b.setp(Cmp::Lt, lane, span);
    b.when(inside, |b| {
        let v = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, src);
        b.st_narrow(Space::Shared, Narrow::U8, dst, v);
    });
    b.warp_sync(FULL_MASK);
}

//! Byte movement for `lz4_decompress`, all 32 lanes a step: raw pages and rebuilt pages out to
//! global memory, literals from the staged block, matches from the page rebuilt so far, and whole
//! short sequences (literals and match) in one step.

use super::{Dec, Lengths, Sequence};
use crate::kernels::lz4::warp::{for_each_lane_item, ld_shared_u32_unaligned};
use crate::ptx::*;

/// Copies a raw page from the (unaligned) stage to `dst`: aligned words, then the tail bytes.
pub(super) fn copy_raw_out(b: &mut KernelBuilder, d: &Dec, dst: Reg<U64>) {
    let words = b.shr(d.orig, 2u32);
    for_each_lane_item(b, d.ln.lane, words, 2, |b, wb, inside| {
        let a = b.add(d.ib, wb);
        let g = b.index_addr(dst, wb, 1);
        b.when(inside, |b| {
            let v = ld_shared_u32_unaligned(b, a);
            b.st(Space::Global, g, v);
        });
    });
    copy_tail_out(b, d, d.ib, dst, d.orig, 4);
}

/// Copies the `len` rebuilt bytes from the page buffer to `dst`: 16-byte chunks, then the tail.
pub(super) fn copy_page_out(b: &mut KernelBuilder, d: &Dec, dst: Reg<U64>, len: Reg<U32>) {
    b.warp_sync(FULL_MASK);
    let chunks = b.shr(len, 4u32);
    for_each_lane_item(b, d.ln.lane, chunks, 4, |b, kb, inside| {
        let s = b.add(d.ob, kb);
        let g = b.index_addr(dst, kb, 1);
        b.when(inside, |b| {
            let v = b.ld_v4::<U32>(Space::Shared, s);
            b.st_v4::<U32>(Space::Global, g, v);
        });
    });
    copy_tail_out(b, d, d.ob, dst, len, 16);
}

/// Copies the last `len % unit` of `len` bytes from the shared address `from` to `dst` (after
/// the whole units copied before), one byte per lane; `unit` is a power of two up to 32.
fn copy_tail_out(
    b: &mut KernelBuilder,
    d: &Dec,
    from: Reg<U32>,
    dst: Reg<U64>,
    len: Reg<U32>,
    unit: u32,
) {
    let tail_at = b.and(len, !(unit - 1));
    let tail = b.and(len, unit - 1);
    let in_tail = b.setp(Cmp::Lt, d.ln.lane, tail);
    let k = b.add(tail_at, d.ln.lane);
    let a = b.add(from, k);
    let g = b.index_addr(dst, k, 1);
    b.when(in_tail, |b| {
        let v = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, a);
        b.st_narrow(Space::Global, Narrow::U8, g, v);
    });
}

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

/// Copies `len` bytes to `op` from `offset` bytes back in the page buffer. Steps of
/// `min(distance, 32)` bytes: the distance starts at `offset` and doubles while below 32 (the
/// source stays put), so a step never reads a byte it has not yet written and the period holds.
pub(super) fn copy_match(
    b: &mut KernelBuilder,
    d: &Dec,
    op: Reg<U32>,
    offset: Reg<U32>,
    len: Reg<U32>,
) {
    let lane = d.ln.lane;
    let src = b.sub(op, offset);
    let dst = b.mov(op);
    let left = b.mov(len);
    b.loop_with(LoopBranch::Uniform, |b, copied, _| {
        let none = b.setp(Cmp::Eq, left, 0u32);
        b.bra_uni_if(none, copied);
        let dist = b.sub(dst, src);
        let chunk = b.min(dist, 32u32);
        let chunk = b.min(chunk, left);
        let inside = b.setp(Cmp::Lt, lane, chunk);
        let from = b.add(d.ob, src);
        let from = b.add(from, lane);
        let to = b.add(d.ob, dst);
        let to = b.add(to, lane);
        b.when(inside, |b| {
            let v = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, from);
            b.st_narrow(Space::Shared, Narrow::U8, to, v);
        });
        let next_dst = b.add(dst, chunk);
        b.mov_to(dst, next_dst);
        let next_left = b.sub(left, chunk);
        b.mov_to(left, next_left);
        let wide = b.setp(Cmp::Ge, dist, 32u32);
        let advance = b.selp(chunk, 0u32, wide);
        let next_src = b.add(src, advance);
        b.mov_to(src, next_src);
        b.warp_sync(FULL_MASK);
    });
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
    copy_match(b, d, mop, offset, ml);
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

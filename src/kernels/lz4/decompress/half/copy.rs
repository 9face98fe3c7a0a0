//! Byte movement for the half-warp decoders: pages out to global memory, literals and matches
//! within the page buffer, the common sequence's copy steps.

use super::{for_each_item, Half};
use crate::ptx::*;

/// Copies a raw page from the (unaligned) stage to `dst`: words, then the tail bytes.
pub(super) fn copy_raw_out(b: &mut KernelBuilder, h: &Half, dst: Reg<U64>) {
    let words = b.shr(h.orig, 2u32);
    for_each_item(b, h, words, 2, |b, wb, inside| {
        let a = b.add(h.ib, wb);
        let g = b.index_addr(dst, wb, 1);
        b.when(inside, |b| {
            // Two aligned words and a byte permute (may read up to 4 bytes past the page: slack).
            let aligned = b.and(a, !3u32);
            let shift = b.and(a, 3u32);
            let w0 = b.ld::<U32>(Space::Shared, aligned);
            let w1 = b.ld::<U32>(Space::Shared, Addr::from(aligned).off(4));
            let sel = b.mad(shift, 0x1111u32, 0x3210u32);
            let v = b.prmt(w0, w1, sel);
            b.st(Space::Global, g, v);
        });
    });
    copy_tail_out(b, h, h.ib, dst, h.orig, 4);
}

/// Copies the `len` rebuilt bytes to `dst`: 16-byte chunks, then the tail.
pub(super) fn copy_page_out(b: &mut KernelBuilder, h: &Half, dst: Reg<U64>, len: Reg<U32>) {
    h.sync(b);
    let chunks = b.shr(len, 4u32);
    for_each_item(b, h, chunks, 4, |b, kb, inside| {
        let s = b.add(h.ob, kb);
        let g = b.index_addr(dst, kb, 1);
        b.when(inside, |b| {
            let v = b.ld_v4::<U32>(Space::Shared, s);
            b.st_v4::<U32>(Space::Global, g, v);
        });
    });
    copy_tail_out(b, h, h.ob, dst, len, 16);
}

/// Copies the last `len % unit` bytes (`unit` a power of two up to 16) from `from` to `dst`: one
/// step when the group has `unit` lanes or more, else steps of the group's width.
fn copy_tail_out(
    b: &mut KernelBuilder,
    h: &Half,
    from: Reg<U32>,
    dst: Reg<U64>,
    len: Reg<U32>,
    unit: u32,
) {
    let tail_at = b.and(len, !(unit - 1));
    let tail = b.and(len, unit - 1);
    let copy_byte = |b: &mut KernelBuilder, i: Reg<U32>, inside: Reg<Pred>| {
        let k = b.add(tail_at, i);
        let a = b.add(from, k);
        let g = b.index_addr(dst, k, 1);
        b.when(inside, |b| {
            let v = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, a);
            b.st_narrow(Space::Global, Narrow::U8, g, v);
        });
    };
    if unit <= h.width {
        let inside = b.setp(Cmp::Lt, h.sub, tail);
        copy_byte(b, h.sub, inside);
    } else {
        for_each_item(b, h, tail, 0, copy_byte);
    }
}

/// Copies `len` bytes from shared `src` to shared `dst` (`src >= dst` or apart), 16 a step.
pub(super) fn copy_forward(
    b: &mut KernelBuilder,
    h: &Half,
    src: Reg<U32>,
    dst: Reg<U32>,
    len: Reg<U32>,
) {
    for_each_item(b, h, len, 0, |b, i, inside| {
        let s = b.add(src, i);
        let t = b.add(dst, i);
        b.when(inside, |b| {
            let v = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, s);
            b.st_narrow(Space::Shared, Narrow::U8, t, v);
        });
        // A later step may read what this one wrote (a match of a short offset).
        h.sync(b);
    });
}

/// Copies the match of `len` bytes to page byte `op` from `offset` back: steps of
/// `min(distance, 16)` bytes, the distance doubling from `offset` while below 16 (the source
/// stays put), so no step reads a byte not yet written.
pub(super) fn copy_match(
    b: &mut KernelBuilder,
    h: &Half,
    op: Reg<U32>,
    offset: Reg<U32>,
    len: Reg<U32>,
) {
    let src = b.sub(op, offset);
    let dst = b.mov(op);
    let left = b.mov(len);
    b.loop_with(LoopBranch::Divergent, |b, copied, _| {
        let none = b.setp(Cmp::Eq, left, 0u32);
        b.bra_if(none, copied);
        let dist = b.sub(dst, src);
        let chunk = b.min(dist, h.width);
        let chunk = b.min(chunk, left);
        let inside = b.setp(Cmp::Lt, h.sub, chunk);
        let from = b.add(h.ob, src);
        let from = b.add(from, h.sub);
        let to = b.add(h.ob, dst);
        let to = b.add(to, h.sub);
        b.when(inside, |b| {
            let v = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, from);
            b.st_narrow(Space::Shared, Narrow::U8, to, v);
        });
        let next_dst = b.add(dst, chunk);
        b.mov_to(dst, next_dst);
        let next_left = b.sub(left, chunk);
        b.mov_to(left, next_left);
        let wide = b.setp(Cmp::Ge, dist, h.width);
        let advance = b.selp(chunk, 0u32, wide);
        let next_src = b.add(src, advance);
        b.mov_to(src, next_src);
        h.sync(b);
    });
}

/// One step of the common sequence's copy: lane `sub + first` of the `span` bytes takes a
/// literal (below `lit`) or a match byte (the match lies wholly before the literals).
#[allow(clippy::too_many_arguments)]
pub(super) fn short_copy_step(
    b: &mut KernelBuilder,
    h: &Half,
    first: u32,
    lit_src: Reg<U32>,
    op_addr: Reg<U32>,
    lit: Reg<U32>,
    offset: Reg<U32>,
    span: Reg<U32>,
) {
    let k = if first == 0 {
        h.sub
    } else {
        b.add(h.sub, first)
    };
    let is_lit = b.setp(Cmp::Lt, k, lit);
    let from_lit = b.add(lit_src, k);
    let dst = b.add(op_addr, k);
    let from_match = b.sub(dst, offset);
    let src = b.selp(from_lit, from_match, is_lit);
    let inside = b.setp(Cmp::Lt, k, span);
    b.when(inside, |b| {
        let v = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, src);
        b.st_narrow(Space::Shared, Narrow::U8, dst, v);
    });
}

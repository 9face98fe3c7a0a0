//! Sequence emission for `lz4_compress`: one LZ4 sequence (token, literal length, literals,
//! offset, match length) written by the 32 lanes of a warp into its global scratch, each lane
//! computing the byte at its position. Short sequences (fewer than 15 literals, a match shorter
//! than 19 bytes: one token, the literals, two offset bytes, at most 17 bytes) take a one-step
//! path; others compute their 255-chained length bytes and loop 32 bytes a step.
//!
//! Before writing, the block is checked against the page length: if the bytes so far, this
//! sequence and what must follow it (a token and 5 literals after a match) reach `P`, the page
//! cannot compress and the code branches to the raw path.

use super::{load_byte_where, Match, Page};
use crate::ptx::*;

/// Extra length bytes of a length field holding `n` (0 when `n < 15`), and the last such byte.
fn length_bytes(b: &mut KernelBuilder, n: Reg<U32>) -> (Reg<U32>, Reg<U32>) {
    let long = b.setp(Cmp::Ge, n, 15u32);
    let rest = b.sub(n, 15u32);
    // rest / 255 for any u32 (exact: 0x80808081 = ceil(2^39 / 255)).
    let q = b.mul_hi(rest, 0x8080_8081u32);
    let q = b.shr(q, 7u32);
    let q1 = b.add(q, 1u32);
    let count = b.selp(q1, 0u32, long);
    let k = b.mul(q, 255u32);
    let last = b.sub(rest, k);
    (count, last)
}

/// Branches to the raw path unless the block so far, a sequence of `seq_len` bytes and the
/// `after` bytes that must follow it stay shorter than the page.
fn raw_unless_shorter(b: &mut KernelBuilder, pc: &Page, seq_len: Reg<U32>, after: u32) {
    let need = b.add(pc.out, seq_len);
    let need = b.add(need, after);
    let too_long = b.setp(Cmp::Ge, need, pc.p_len);
    b.bra_uni_if(too_long, &pc.raw);
}

/// Appends one sequence (`lit` literals from `anchor`, then the match `(offset, length)` unless
/// it is the last sequence) to the warp's scratch at `out`; branches to the raw label when the
/// block can no longer be shorter than the page.
pub(super) fn emit_sequence(
    b: &mut KernelBuilder,
    pc: &Page,
    anchor: Reg<U32>,
    lit: Reg<U32>,
    matched: Option<Match>,
) {
    emit_sequence_then(b, pc, anchor, lit, matched, &mut |_| {});
}

/// [`emit_sequence`], with `then` emitted at the end of each way through it (so that code which
/// does not depend on the emission shares a basic block with it, and the scheduler can overlap
/// the two).
pub(super) fn emit_sequence_then(
    b: &mut KernelBuilder,
    pc: &Page,
    anchor: Reg<U32>,
    lit: Reg<U32>,
    matched: Option<Match>,
    then: &mut dyn FnMut(&mut KernelBuilder),
) {
    b.comment("emit a sequence into scratch (raw if the block can no longer be shorter)");
    let general = b.label("emit_general");
    let done = b.label("emit_done");
    if let Some(m) = matched {
        // A match shorter than 19 bytes (its code below 15).
        let short_limit = if m.minus4 { 15u32 } else { 19 };
        let few = b.setp(Cmp::Lt, lit, 15u32);
        let short_m = b.setp(Cmp::Lt, m.len, short_limit);
        let short = b.and(few, short_m);
        let short = if pc.variant.lean {
            // The raw check joins the choice: a short sequence that may reach the page length
            // goes the general way, which checks it.
            let need = b.add(pc.out, lit);
            let need = b.add(need, 9u32);
            let room = b.setp(Cmp::Lt, need, pc.p_len);
            b.and(short, room)
        } else {
            short
        };
        if pc.variant.medium {
            let medium = b.label("emit_medium");
            b.bra_uni_unless(short, &medium);
            emit_short(b, pc, anchor, lit, m);
            then(b);
            b.bra_uni(&done);
            b.place(&medium);
            // 15..=269 literals (one length byte), a match shorter than 19, room for the
            // lit + 4 bytes and the 6 after them: else the general way (which checks).
            let lit_rest = b.sub(lit, 15u32);
            let one_byte = b.setp(Cmp::Lt, lit_rest, 255u32);
            let short_m = b.setp(Cmp::Lt, m.len, short_limit);
            let need = b.add(pc.out, lit);
            let need = b.add(need, 10u32);
            let room = b.setp(Cmp::Lt, need, pc.p_len);
            let ok = b.and(one_byte, short_m);
            let ok = b.and(ok, room);
            b.bra_uni_unless(ok, &general);
            emit_medium(b, pc, anchor, lit, m);
            then(b);
            b.bra_uni(&done);
        } else {
            b.bra_uni_unless(short, &general);
            emit_short(b, pc, anchor, lit, m);
            then(b);
            b.bra_uni(&done);
        }
    }
    b.place(&general);
    emit_general(b, pc, anchor, lit, matched);
    then(b);
    b.place(&done);
}

/// A sequence of at most 17 bytes in one step: lane 0 the token, lanes `1..=lit` the literals,
/// the next two the offset.
fn emit_short(b: &mut KernelBuilder, pc: &Page, anchor: Reg<U32>, lit: Reg<U32>, m: Match) {
    if pc.variant.lean {
        emit_short_lean(b, pc, anchor, lit, m);
        return;
    }
    let Match {
        offset, len: ml, ..
    } = m;
    let lane = pc.ln.lane;
    let seq_len = b.add(lit, 3u32);
    raw_unless_shorter(b, pc, seq_len, 6);
    let token_hi = b.shl(lit, 4u32);
    let code = b.sub(ml, 4u32);
    let byte = b.or(token_hi, code);
    let in_lit = b.setp(Cmp::Lt, pc.lane_m1, lit);
    let src = b.add(pc.spage_lane_m1, anchor);
    b.when(in_lit, |b| {
        let lit_byte = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, src);
        b.mov_to(byte, lit_byte);
    });
    // Lanes lit + 1 and lit + 2 hold the offset, low byte first.
    let lit_plus1 = b.add(lit, 1u32);
    let off_rel = b.sub(lane, lit_plus1);
    let is_off = b.setp(Cmp::Lt, off_rel, 2u32);
    let off_shift = b.shl(off_rel, 3u32);
    let off_byte = b.shr(offset, off_shift);
    let off_byte = b.and(off_byte, 255u32);
    let byte_or_off = b.selp(off_byte, byte, is_off);
    let in_seq = b.setp(Cmp::Lt, lane, seq_len);
    let dst_byte = b.index_addr(pc.scratch_lane, pc.out, 1);
    b.when(in_seq, |b| {
        b.st_narrow(Space::Global, Narrow::U8, dst_byte, byte_or_off)
    });
    let out_end = b.add(pc.out, seq_len);
    b.mov_to(pc.out, out_end);
}

/// [`emit_short`] in fewer instructions: no raw check (`emit_sequence` sends sequences whose
/// `lit + 3` bytes and the 6 that must follow could reach `P` the general way), the token by one
/// multiply-add, offset bytes stored untruncated (`st.u8` keeps the low byte).
pub(super) fn emit_short_lean(
    b: &mut KernelBuilder,
    pc: &Page,
    anchor: Reg<U32>,
    lit: Reg<U32>,
    m: Match,
) {
    let Match {
        offset,
        len: ml,
        minus4,
    } = m;
    let token = b.mad(lit, 16u32, ml);
    let byte = if minus4 { token } else { b.sub(token, 4u32) };
    let in_lit = b.setp(Cmp::Lt, pc.lane_m1, lit);
    let src = b.add(pc.spage_lane_m1, anchor);
    load_byte_where(b, pc, in_lit, byte, src);
    // Lanes lit + 1 and lit + 2 hold the offset, low byte first.
    let off_rel = b.sub(pc.lane_m1, lit);
    let is_off = b.setp(Cmp::Lt, off_rel, 2u32);
    let off_byte = if pc.variant.tight {
        // Selector nibble 0 or 1: byte 0 or 1 of the offset (other lanes do not use it).
        b.prmt(offset, 0u32, off_rel)
    } else {
        let off_shift = b.shl(off_rel, 3u32);
        b.shr(offset, off_shift)
    };
    let byte_or_off = b.selp(off_byte, byte, is_off);
    let (in_seq, seq_len) = if minus4 {
        // Lanes up to lit + 2: off_rel < 2 as a signed number.
        let off_rel_s = b.bitcast::<S32, U32>(off_rel);
        (b.setp(Cmp::Lt, off_rel_s, 2i32), None)
    } else {
        let seq_len = b.add(lit, 3u32);
        (b.setp(Cmp::Lt, pc.ln.lane, seq_len), Some(seq_len))
    };
    let dst_byte = b.index_addr(pc.scratch_lane, pc.out, 1);
    b.when(in_seq, |b| {
        b.st_narrow(Space::Global, Narrow::U8, dst_byte, byte_or_off)
    });
    let out_end = match seq_len {
        Some(seq_len) => b.add(pc.out, seq_len),
        None => {
            let out_lit = b.add(pc.out, lit);
            b.add(out_lit, 3u32)
        }
    };
    b.mov_to(pc.out, out_end);
}

/// A sequence of 15..=269 literals (one length byte) and a match shorter than 19 bytes
/// ([`Variant::medium`](super::Variant)), 32 bytes a step: the token, `lit - 15`, the literals,
/// the offset (no raw check: `emit_sequence` sends only sequences that leave room).
fn emit_medium(b: &mut KernelBuilder, pc: &Page, anchor: Reg<U32>, lit: Reg<U32>, m: Match) {
    let Match {
        offset,
        len: ml,
        minus4,
    } = m;
    // 0xf0 | (ml - 4) with ml - 4 < 15.
    let token = b.add(ml, if minus4 { 0xf0u32 } else { 0xec });
    let lit_rest = b.sub(lit, 15u32);
    let seq_len = b.add(lit, 4u32);
    let lit_src = b.add(pc.spage_lane_m1, anchor);
    let lit_src = b.sub(lit_src, 1u32);
    let lit_end = b.add(lit, 2u32);
    let dst = b.index_addr(pc.scratch_lane, pc.out, 1);
    let lane = pc.ln.lane;
    b.for_range_with(LoopBranch::Uniform, 0u32, seq_len, 32u32, |b, base, _| {
        let j = b.add(base, lane);
        let first = b.setp(Cmp::Eq, j, 0u32);
        let byte = b.selp(token, lit_rest, first);
        let lit_rel = b.sub(j, 2u32);
        let in_lit = b.setp(Cmp::Lt, lit_rel, lit);
        let src = b.add(lit_src, base);
        load_byte_where(b, pc, in_lit, byte, src);
        let off_rel = b.sub(j, lit_end);
        let is_off = b.setp(Cmp::Lt, off_rel, 2u32);
        // Selector nibble 0 or 1: byte 0 or 1 of the offset.
        let off_byte = b.prmt(offset, 0u32, off_rel);
        let byte = b.selp(off_byte, byte, is_off);
        let in_seq = b.setp(Cmp::Lt, j, seq_len);
        let d = b.index_addr(dst, base, 1);
        b.when(in_seq, |b| b.st_narrow(Space::Global, Narrow::U8, d, byte));
    });
    let out_end = b.add(pc.out, seq_len);
    b.mov_to(pc.out, out_end);
}

/// Any sequence, 32 bytes per step, one per lane.
fn emit_general(
    b: &mut KernelBuilder,
    pc: &Page,
    anchor: Reg<U32>,
    lit: Reg<U32>,
    matched: Option<Match>,
) {
    let lane = pc.ln.lane;
    let lit15 = b.min(lit, 15u32);
    let token_hi = b.shl(lit15, 4u32);
    let (lit_len_bytes, lit_len_last) = length_bytes(b, lit);
    let lit_start = b.add(lit_len_bytes, 1u32);
    let lit_end = b.add(lit_start, lit);
    let (token, seq_len, after, match_fields) = match matched {
        Some(Match {
            offset,
            len: ml,
            minus4,
        }) => {
            let code = if minus4 { ml } else { b.sub(ml, 4u32) };
            let c15 = b.min(code, 15u32);
            let token = b.or(token_hi, c15);
            let (match_len_bytes, match_len_last) = length_bytes(b, code);
            let offset_end = b.add(lit_end, 2u32);
            let seq_len = b.add(offset_end, match_len_bytes);
            (
                token,
                seq_len,
                6u32,
                Some((offset, match_len_bytes, match_len_last)),
            )
        }
        None => (token_hi, lit_end, 0u32, None),
    };
    // The token and 5 literals of the last sequence always follow a match.
    raw_unless_shorter(b, pc, seq_len, after);
    let lit_src = b.add(pc.spage, anchor);
    let lit_src = b.sub(lit_src, lit_start);
    let dst = b.index_addr(pc.scratch, pc.out, 1);
    b.for_range_with(LoopBranch::Uniform, 0u32, seq_len, 32u32, |b, base, _| {
        let seq_byte = b.add(base, lane);
        let byte = b.mov(token);
        let seq_byte_m1 = b.sub(seq_byte, 1u32);
        let in_ll = b.setp(Cmp::Lt, seq_byte_m1, lit_len_bytes);
        let is_last = b.setp(Cmp::Eq, seq_byte, lit_len_bytes);
        let len_byte = b.selp(lit_len_last, 255u32, is_last);
        let with_len = b.selp(len_byte, byte, in_ll);
        b.mov_to(byte, with_len);
        let lit_rel = b.sub(seq_byte, lit_start);
        let in_lit = b.setp(Cmp::Lt, lit_rel, lit);
        let src = b.add(lit_src, seq_byte);
        load_byte_where(b, pc, in_lit, byte, src);
        if let Some((offset, match_len_bytes, match_len_last)) = match_fields {
            let off_lo = b.and(offset, 255u32);
            let off_hi = b.shr(offset, 8u32);
            let at_lo = b.setp(Cmp::Eq, seq_byte, lit_end);
            let with_off_lo = b.selp(off_lo, byte, at_lo);
            let hi_at = b.add(lit_end, 1u32);
            let at_hi = b.setp(Cmp::Eq, seq_byte, hi_at);
            let with_off_hi = b.selp(off_hi, with_off_lo, at_hi);
            let match_len_at = b.add(lit_end, 2u32);
            let match_len_rel = b.sub(seq_byte, match_len_at);
            let in_match_len = b.setp(Cmp::Lt, match_len_rel, match_len_bytes);
            let last_at = b.sub(seq_len, 1u32);
            let is_mlast = b.setp(Cmp::Eq, seq_byte, last_at);
            let match_len_byte = b.selp(match_len_last, 255u32, is_mlast);
            let with_match_len = b.selp(match_len_byte, with_off_hi, in_match_len);
            b.mov_to(byte, with_match_len);
        }
        let in_seq = b.setp(Cmp::Lt, seq_byte, seq_len);
        let dst_byte = b.index_addr(dst, seq_byte, 1);
        b.when(in_seq, |b| {
            b.st_narrow(Space::Global, Narrow::U8, dst_byte, byte)
        });
    });
    let out_end = b.add(pc.out, seq_len);
    b.mov_to(pc.out, out_end);
}

//! `lz4_decompress`: rebuilds pages from stored LZ4 blocks (or raw pages), one warp per page,
//! checking every read and write, so corrupt input gives a status code for that page and never
//! an access outside the page's block, its shared buffers or its output slot.
//!
//! Launch: 1-D grid, blocks of 32..=[`MAX_BLOCK`] threads (whole warps), dynamic shared memory
//! `warps_per_block * decompress_shared_per_warp(page_bytes)`; warps stride over the pages.
//!
//! Parameters: `packed` (stored pages), `packed_bytes` (readable bytes of `packed`; only its
//! 16-byte-aligned prefix is used), `entries` (4 u32 per page: byte offset in `packed`, stored
//! bytes, original bytes, kind: bit 0 = raw page, bit 1 = the original length is only an upper
//! bound, as for blocks of a frame), `n_pages`, `page_bytes` (a multiple of 1024, at most 65536),
//! `output` (page `k` at `k * page_bytes`), `status` (one word per page: the
//! [`status`] code in bits 0..8, the bytes produced in bits 8..32).
//!
//! Per page, a warp checks the entry (sizes at most `page_bytes`, the block inside `packed`, a raw
//! page as long as the original), copies the block to the end of its shared buffer (the page
//! plus LZ4's in-place margin, so twice as many warps fit an SM as with separate input and output
//! buffers) with 16-byte loads from the aligned address below it, then either copies a raw page
//! out (aligned words assembled with a byte permute) or decodes: every lane follows the same
//! parse (the token and offset loads are broadcasts), lanes copy literals 32 bytes per step, and
//! matches 32 bytes per step, or, for an offset below 32, in doubling steps that never read a byte
//! not yet written. Every length is checked against the block end and the original length before
//! it is used, and every match must end before the block bytes not yet read (the page is rebuilt
//! in place over the consumed block; a valid block never reaches them). The common sequence (both
//! lengths below 15) checks all of this with one branch and re-parses step by step only when a
//! check fails; it loads the next token before copying (the copy cannot reach it), so the token's
//! load latency overlaps the copy, and keeps the literal position as a shared address (the decode
//! loop is issue-bound: ncu shows ~0.8 issued warps per scheduler). The page is then written out
//! with 16-byte stores and lane 0 writes its status.

use super::copy::{copy_literals, copy_page_out, copy_raw_out, copy_sequence};
use super::{bcast, lowest_bit, status, ubra_if, ubra_unless, ufor, uloop, Lanes};
use crate::ptx::*;

/// Most threads per block (8 warps).
pub const MAX_BLOCK: u32 = 256;

/// Registers of the page being decoded.
pub(super) struct Dec {
    pub(super) ln: Lanes,
    pub(super) ib: Reg<U32>,
    pub(super) ob: Reg<U32>,
    pub(super) stored: Reg<U32>,
    pub(super) orig: Reg<U32>,
    pub(super) code: Reg<U32>,
    /// The original length is an upper bound (fewer bytes are fine).
    pub(super) bounded: Reg<Pred>,
    /// `ob + lane`.
    pub(super) ob_lane: Reg<U32>,
    pub(super) fail: Label,
}

/// Builds the module.
pub fn build(target: Target) -> Module {
    let mut b = KernelBuilder::new("lz4_decompress");
    b.maxntid(MAX_BLOCK, 1, 1);
    let packed = b.param::<U64>("packed");
    let packed_bytes = b.param::<U32>("packed_bytes");
    let entries = b.param::<U64>("entries");
    let n_pages = b.param::<U32>("n_pages");
    let page_bytes = b.param::<U32>("page_bytes");
    let output = b.param::<U64>("output");
    let status_p = b.param::<U64>("status");
    let packed = b.global_ptr(&packed);
    let packed_bytes = b.ld_param(&packed_bytes);
    let entries = b.global_ptr(&entries);
    let n_pages = b.ld_param(&n_pages);
    let page_bytes = b.ld_param(&page_bytes);
    let output = b.global_ptr(&output);
    let status_p = b.global_ptr(&status_p);
    let smem = b.dynamic_shared::<U32>("lz4d_smem");

    let ln = Lanes::new(&mut b);
    let tid = b.special(Special::TidX);
    let warp = b.shr(tid, 5u32);
    let ntid = b.special(Special::NtidX);
    let warps = b.shr(ntid, 5u32);
    let cta = b.special(Special::CtaidX);
    let ncta = b.special(Special::NctaidX);
    let gwarp = b.mad(cta, warps, warp);
    let all_warps = b.mul(ncta, warps);
    // margin = round16((page_bytes >> 8) + 32) + 32, as `inplace_margin`.
    let m = b.shr(page_bytes, 8u32);
    let m = b.add(m, 47u32);
    let m = b.and(m, !15u32);
    let margin = b.add(m, 32u32);
    let per_warp = b.add(page_bytes, margin);
    let sbase = b.shared_base(&smem);
    let ob = b.mad(warp, per_warp, sbase);
    let region_end = b.add(ob, per_warp);
    let ob_lane = b.add(ob, ln.lane);
    let bound = b.and(packed_bytes, !15u32);
    let lane0 = b.setp(Cmp::Eq, ln.lane, 0u32);

    ufor(&mut b, gwarp, n_pages, all_warps, |b, pg, _| {
        let ea = b.index_addr(entries, pg, 16);
        let [off, stored, orig, kind] = b.ld_v4::<U32>(Space::GlobalNc, ea);
        // Status code and bytes produced are set on each way out (not here), so neither is live
        // across the decode loop.
        let code = b.reg::<U32>();
        let produced = b.reg::<U32>();
        let fail = b.label("fail");
        let done = b.label("page_done");
        let raw_bit = b.and(kind, 1u32);
        let is_raw = b.setp(Cmp::Ne, raw_bit, 0u32);
        let bound_bit = b.and(kind, 2u32);
        let bounded = b.setp(Cmp::Ne, bound_bit, 0u32);
        // Entry checks: sizes within a page, the block inside `packed`, raw pages whole.
        let big_orig = b.setp(Cmp::Gt, orig, page_bytes);
        let big_stored = b.setp(Cmp::Gt, stored, page_bytes);
        let outside = b.setp(Cmp::Gt, stored, bound);
        let room = b.sub(bound, stored);
        let past = b.setp(Cmp::Gt, off, room);
        let raw_len = b.setp(Cmp::Ne, stored, orig);
        let raw_bad = b.and(is_raw, raw_len);
        let bad = b.or(big_orig, big_stored);
        let bad = b.or(bad, outside);
        let bad = b.or(bad, raw_bad);
        let bad = b.or(bad, past);
        let d = Dec {
            ln,
            ib: ob,
            ob,
            stored,
            orig,
            code,
            bounded,
            ob_lane,
            fail: fail.clone(),
        };
        fail_if(b, &d, bad, status::BAD_ENTRY);
        // Stage the block at the end of the buffer (the page is rebuilt from its start, in
        // place): 16-byte chunks from the aligned address at or below it.
        let delta = b.and(off, 15u32);
        let abase = b.sub(off, delta);
        let span = b.add(delta, stored);
        let span = b.add(span, 15u32);
        let chunks = b.shr(span, 4u32);
        let staged = b.shl(chunks, 4u32);
        let staged = b.add(staged, 16u32);
        let stage = b.sub(region_end, staged);
        let src = b.index_addr(packed, abase, 1);
        ufor(b, 0u32, chunks, 32u32, |b, base, _| {
            let k = b.add(base, ln.lane);
            let inside = b.setp(Cmp::Lt, k, chunks);
            let kb = b.shl(k, 4u32);
            let g = b.index_addr(src, kb, 1);
            let s = b.add(stage, kb);
            b.guarded(inside, false, |b| {
                let v = b.ld_v4::<U32>(Space::GlobalNc, g);
                b.st_v4::<U32>(Space::Shared, s, v);
            });
        });
        b.warp_sync(FULL_MASK);
        let ib = b.add(stage, delta);
        let d = Dec { ib, ..d };
        let block = b.label("block");
        ubra_unless(b, is_raw, &block);
        let dst = b.mad_wide(pg, page_bytes, output);
        copy_raw_out(b, &d, dst);
        b.mov_to(produced, orig);
        b.mov_to(code, status::OK);
        b.bra_uni(&done);
        b.place(&block);
        let op = decode(b, &d);
        let dst = b.mad_wide(pg, page_bytes, output);
        copy_page_out(b, &d, dst, op);
        b.mov_to(produced, op);
        b.mov_to(code, status::OK);
        b.bra_uni(&done);
        b.place(&fail);
        b.mov_to(produced, 0u32);
        b.place(&done);
        let sa = b.index_addr(status_p, pg, 4);
        let len_bits = b.shl(produced, 8u32);
        let word = b.or(code, len_bits);
        b.guarded(lane0, false, |b| b.st(Space::Global, sa, word));
        // The next page's staging overwrites buffers this page's lanes read.
        b.warp_sync(FULL_MASK);
    });
    Module::single(target, b.finish())
}

/// Sets the status to `code` and leaves the page when `bad` (warp-uniform) holds. The status is
/// written only on the way out, so the hot path carries no conditional moves.
fn fail_if(b: &mut KernelBuilder, d: &Dec, bad: Reg<Pred>, code: u32) {
    let ok = b.label("ok");
    ubra_unless(b, bad, &ok);
    b.mov_to(d.code, code);
    b.bra_uni(&d.fail);
    b.place(&ok);
}

/// Reads the 255-chained rest of a length field at `ip` (advancing it), 32 bytes per step;
/// fails past the block end or once the length exceeds the original page length.
fn read_length(b: &mut KernelBuilder, d: &Dec, ip: Reg<U32>) -> Reg<U32> {
    let n = b.mov(0u32);
    uloop(b, |b, got, _| {
        let i = b.add(ip, d.ln.lane);
        let inside = b.setp(Cmp::Lt, i, d.stored);
        // Lanes past the block end read byte 0 instead (a safe address) and count as outside.
        let a = b.add(d.ib, i);
        let a = b.selp(a, d.ib, inside);
        let t = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, a);
        let v = b.selp(t, 0u32, inside);
        let not255 = b.setp(Cmp::Ne, v, 255u32);
        let term = b.and(inside, not255);
        let tm = b.ballot(term);
        let out_lanes = b.not(inside);
        let om = b.ballot(out_lanes);
        let has_term = b.setp(Cmp::Ne, tm, 0u32);
        let k = lowest_bit(b, tm);
        let bk = bcast(b, v, k);
        let k255 = b.mul(k, 255u32);
        let add = b.add(k255, bk);
        let add = b.selp(add, 255u32 * 32, has_term);
        let step = b.add(k, 1u32);
        let step = b.selp(step, 32u32, has_term);
        let n2 = b.add(n, add);
        b.mov_to(n, n2);
        let ip2 = b.add(ip, step);
        b.mov_to(ip, ip2);
        let too_big = b.setp(Cmp::Gt, n, d.orig);
        fail_if(b, d, too_big, status::OUTPUT_OVERFLOW);
        ubra_if(b, has_term, got);
        // No terminating byte: lanes past the block end mean it is truncated.
        let ran_out = b.setp(Cmp::Ne, om, 0u32);
        fail_if(b, d, ran_out, status::TRUNCATED);
    });
    n
}

/// The decode loop of one block from the stage into the page buffer; returns the bytes produced
/// (falls through when the page decoded to its original length, or at most that when bounded),
/// branches to the fail label otherwise.
///
/// A sequence whose literals and match fit 32 bytes, with the match source wholly before the
/// literals, is copied in one step (lanes below `lit` copy literals, the next `ml` lanes match
/// bytes); others copy literals and then the match in steps of their own.
fn decode(b: &mut KernelBuilder, d: &Dec) -> Reg<U32> {
    let op = b.mov(0u32);
    let empty = b.setp(Cmp::Eq, d.stored, 0u32);
    fail_if(b, d, empty, status::TRUNCATED);
    // Loop-carried: the token (loaded while the previous sequence is copied, its latency off
    // the critical path) and the shared address of the byte after it.
    let tok = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, d.ib);
    let lit_addr = b.add(d.ib, 1u32);
    let iend = b.add(d.ib, d.stored);
    let fast = Fast {
        iend2: b.sub(iend, 2u32),
        unread_bias: b.sub(2u32, d.ob),
    };
    uloop(b, |b, block_end, next_seq| {
        let lit = b.shr(tok, 4u32);
        let mcode = b.and(tok, 15u32);
        let slow = b.label("slow_seq");
        fast_sequence(
            b,
            d,
            &fast,
            [lit_addr, op, tok, lit, mcode],
            &slow,
            next_seq,
        );
        b.place(&slow);
        // Block index of the byte after the token (a fresh register: read_length advances it).
        let ip = b.sub(lit_addr, d.ib);
        let long_lit = b.setp(Cmp::Eq, lit, 15u32);
        let short_lit = b.label("short_lit");
        ubra_unless(b, long_lit, &short_lit);
        let extra = read_length(b, d, ip);
        let l2 = b.add(lit, extra);
        b.mov_to(lit, l2);
        b.place(&short_lit);
        // Literals inside the block and the page (the code is worked out only on failure).
        let left_in = b.sub(d.stored, ip);
        let left_out = b.sub(d.orig, op);
        let room = b.min(left_in, left_out);
        let bad = b.setp(Cmp::Gt, lit, room);
        let lits_ok = b.label("lits_ok");
        ubra_unless(b, bad, &lits_ok);
        let past_end = b.setp(Cmp::Gt, lit, left_in);
        let code = b.selp(status::TRUNCATED, status::OUTPUT_OVERFLOW, past_end);
        b.mov_to(d.code, code);
        b.bra_uni(&d.fail);
        b.place(&lits_ok);
        let lit_src = b.add(d.ib, ip);
        let lit_end = b.add(ip, lit);
        let last = b.setp(Cmp::Eq, lit_end, d.stored);
        let not_last = b.label("not_last");
        ubra_unless(b, last, &not_last);
        copy_literals(b, d, lit_src, op, lit);
        let op2 = b.add(op, lit);
        b.mov_to(op, op2);
        b.bra_uni(block_end);
        b.place(&not_last);
        // The match: two offset bytes and at least one more token must follow.
        let left_in = b.sub(d.stored, lit_end);
        let no_room = b.setp(Cmp::Lt, left_in, 3u32);
        fail_if(b, d, no_room, status::TRUNCATED);
        let oa = b.add(d.ib, lit_end);
        let lo = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, oa);
        let hi = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, Addr::from(oa).off(1));
        let hi = b.shl(hi, 8u32);
        let offset = b.or(lo, hi);
        let ip3 = b.add(lit_end, 2u32);
        b.mov_to(ip, ip3);
        let ml = b.add(mcode, 4u32);
        let long_ml = b.setp(Cmp::Eq, mcode, 15u32);
        let short_ml = b.label("short_ml");
        ubra_unless(b, long_ml, &short_ml);
        let extra = read_length(b, d, ip);
        let m2 = b.add(ml, extra);
        b.mov_to(ml, m2);
        // The length bytes must leave a token after them too.
        let no_token = b.setp(Cmp::Ge, ip, d.stored);
        fail_if(b, d, no_token, status::TRUNCATED);
        b.place(&short_ml);
        let mop = b.add(op, lit);
        // offset - 1 >= mop catches both a zero offset and one reaching before the page.
        let off1 = b.sub(offset, 1u32);
        let reach = b.setp(Cmp::Ge, off1, mop);
        let left_out = b.sub(d.orig, mop);
        let overflow = b.setp(Cmp::Gt, ml, left_out);
        let bad = b.or(reach, overflow);
        let match_ok = b.label("match_ok");
        ubra_unless(b, bad, &match_ok);
        let zero = b.setp(Cmp::Eq, offset, 0u32);
        let code = b.selp(status::OFFSET_BEFORE_START, status::OUTPUT_OVERFLOW, reach);
        let code = b.selp(status::ZERO_OFFSET, code, zero);
        b.mov_to(d.code, code);
        b.bra_uni(&d.fail);
        b.place(&match_ok);
        // In place: the match must end before the block bytes still to be read (the page may
        // be written up to the page index of block byte `ip`).
        let m_end = b.add(mop, ml);
        let next_addr = b.add(d.ib, ip);
        let unread = b.sub(next_addr, d.ob);
        let clobber = b.setp(Cmp::Gt, m_end, unread);
        fail_if(b, d, clobber, status::MARGIN);
        // A token follows (checked above); the copy below leaves it intact (clobber check).
        let next_tok = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, next_addr);
        b.mov_to(tok, next_tok);
        let next_lit = b.add(next_addr, 1u32);
        b.mov_to(lit_addr, next_lit);
        copy_sequence(b, d, lit_src, op, lit, offset, ml, false);
        let span = b.add(lit, ml);
        let op3 = b.add(op, span);
        b.mov_to(op, op3);
    });
    let short = b.setp(Cmp::Ne, op, d.orig);
    let exact = b.not(d.bounded);
    let short = b.and(short, exact);
    fail_if(b, d, short, status::WRONG_LENGTH);
    op
}

/// Per-page constants of the fast path: `ib + stored - 2` (a sequence whose offset starts at or
/// past it leaves no room for the offset and a further token) and `2 - ob` (added to the offset's
/// address it gives the page index of the next token's block byte, below which the output must
/// stay: the in-place bound).
struct Fast {
    iend2: Reg<U32>,
    unread_bias: Reg<U32>,
}

/// The common sequence (literal and match lengths below 15, not the last one) with all its
/// checks folded into one branch: falls through to `slow` (the step-by-step parse of the same
/// token, which then finds the failing check in order) unless every check holds; otherwise
/// loads the next token, copies the sequence, advances `lit_addr` and `op` and continues.
fn fast_sequence(
    b: &mut KernelBuilder,
    d: &Dec,
    f: &Fast,
    [lit_addr, op, tok, lit, mcode]: [Reg<U32>; 5],
    slow: &Label,
    next: &Label,
) {
    let lit_short = b.setp(Cmp::Lt, lit, 15u32);
    let ml_short = b.setp(Cmp::Lt, mcode, 15u32);
    let short = b.and(lit_short, ml_short);
    ubra_unless(b, short, slow);
    // The offset's address; at most 16 bytes past the block: inside the stage's slack, read
    // but unused on failure.
    let oa = b.add(lit_addr, lit);
    let lo = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, oa);
    let hi = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, Addr::from(oa).off(1));
    let offset = b.mad(hi, 256u32, lo);
    let ml = b.add(mcode, 4u32);
    let mop = b.add(op, lit);
    let m_end = b.add(mop, ml);
    // Offset bytes and a further token inside the block; the output inside the page; the
    // offset inside the page and not zero; the output below the unread block bytes.
    let bad = b.setp(Cmp::Ge, oa, f.iend2);
    let over = b.setp(Cmp::Gt, m_end, d.orig);
    let bad = b.or(bad, over);
    let off1 = b.sub(offset, 1u32);
    let reach = b.setp(Cmp::Ge, off1, mop);
    let bad = b.or(bad, reach);
    let unread = b.add(oa, f.unread_bias);
    let clobber = b.setp(Cmp::Gt, m_end, unread);
    let bad = b.or(bad, clobber);
    ubra_if(b, bad, slow);
    let next_tok = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, Addr::from(oa).off(2));
    let lit_src = b.mov(lit_addr);
    let next_lit = b.add(oa, 3u32);
    b.mov_to(lit_addr, next_lit);
    copy_sequence(b, d, lit_src, op, lit, offset, ml, true);
    b.mov_to(tok, next_tok);
    b.mov_to(op, m_end);
    b.bra_uni(next);
}

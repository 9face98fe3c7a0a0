//! The step-by-step sequence parse and its checks, shared by the warp decoder
//! ([`decode`](super::decode)) and the half-warp decoders ([`half`](super::half)): written once
//! over [`Page`](super::page::Page), the registers both contexts have, with branches warp-uniform (`bra.uni`) in
//! the warp decoder and plain `bra` in the half-warp ones, where the halves diverge.

use super::page::Page;
use crate::kernels::lz4::status;
use crate::ptx::*;

/// A decoder context: its [`Page`] and its reader of 255-chained length bytes.
pub(super) trait Parse {
    fn page(&self) -> Page<'_>;
    /// Reads the 255-chained rest of a length field at block index `ip` (advancing it); fails
    /// past the block end or once the length exceeds the original page length.
    fn read_length(&self, b: &mut KernelBuilder, ip: Reg<U32>) -> Reg<U32>;
}

/// The decode loop's state when a token takes the step-by-step parse.
pub(super) struct Slow<'a> {
    /// The token's literal count (extended in place) and match-length code.
    pub lit: Reg<U32>,
    pub mcode: Reg<U32>,
    /// Page bytes produced so far; the shared address of the byte after the token.
    pub op: Reg<U32>,
    pub lit_addr: Reg<U32>,
    /// Where the decode loop ends (after the last sequence's literals).
    pub block_end: &'a Label,
}

/// A checked sequence of the step-by-step parse: `lit` literals at the shared address
/// `lit_src`, then `ml` bytes from `offset` back to page byte `mop` (ending at `m_end`); the
/// next token (`next_tok`) lies at the shared address `next_addr`.
pub(super) struct Checked {
    pub lit_src: Reg<U32>,
    pub lit: Reg<U32>,
    pub offset: Reg<U32>,
    pub ml: Reg<U32>,
    pub mop: Reg<U32>,
    pub m_end: Reg<U32>,
    pub next_addr: Reg<U32>,
    pub next_tok: Reg<U32>,
}

/// The step-by-step parse of one sequence (the fast paths' fallback, which finds the failing
/// check in order): literal length, literal checks, then either the block's last literals
/// (`copy_last` copies them from their shared address, then the loop ends at `s.block_end`) or
/// the match's offset, length and checks, up to loading the next token. The caller copies the
/// [`Checked`] sequence and advances its cursor.
pub(super) fn slow_sequence<P: Parse>(
    b: &mut KernelBuilder,
    ctx: &P,
    s: Slow,
    copy_last: impl FnOnce(&mut KernelBuilder, Reg<U32>),
) -> Checked {
    let pg = ctx.page();
    let Slow {
        lit,
        mcode,
        op,
        lit_addr,
        block_end,
    } = s;
    b.comment("sequence, step by step: literal length, literals");
    // Block index of the byte after the token (a fresh register: read_length advances it).
    let ip = b.sub(lit_addr, pg.ib);
    let long_lit = b.setp(Cmp::Eq, lit, 15u32);
    let short_lit = b.label("short_lit");
    pg.bra_unless(b, long_lit, &short_lit);
    let extra = ctx.read_length(b, ip);
    let full_lit = b.add(lit, extra);
    b.mov_to(lit, full_lit);
    b.place(&short_lit);
    // Literals inside the block and the page (the code is worked out only on failure).
    let left_in = b.sub(pg.stored, ip);
    let left_out = b.sub(pg.orig, op);
    let room = b.min(left_in, left_out);
    let bad = b.setp(Cmp::Gt, lit, room);
    let lits_ok = b.label("lits_ok");
    pg.bra_unless(b, bad, &lits_ok);
    let past_end = b.setp(Cmp::Gt, lit, left_in);
    let code = b.selp(status::TRUNCATED, status::OUTPUT_OVERFLOW, past_end);
    b.mov_to(pg.code, code);
    pg.bra(b, pg.fail);
    b.place(&lits_ok);
    let lit_src = b.add(pg.ib, ip);
    let lit_end = b.add(ip, lit);
    let last = b.setp(Cmp::Eq, lit_end, pg.stored);
    let not_last = b.label("not_last");
    pg.bra_unless(b, last, &not_last);
    copy_last(b, lit_src);
    let op_after_lits = b.add(op, lit);
    b.mov_to(op, op_after_lits);
    pg.bra(b, block_end);
    b.place(&not_last);
    b.comment("match: offset, length, checks, copy");
    // The match: two offset bytes and at least one more token must follow.
    let left_in = b.sub(pg.stored, lit_end);
    let no_room = b.setp(Cmp::Lt, left_in, 3u32);
    pg.fail_if(b, no_room, status::TRUNCATED);
    let offset_addr = b.add(pg.ib, lit_end);
    let offset_lo = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, offset_addr);
    let offset_hi = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, Addr::from(offset_addr).off(1));
    let offset_hi = b.shl(offset_hi, 8u32);
    let offset = b.or(offset_lo, offset_hi);
    let after_offset = b.add(lit_end, 2u32);
    b.mov_to(ip, after_offset);
    let ml = b.add(mcode, 4u32);
    let long_ml = b.setp(Cmp::Eq, mcode, 15u32);
    let short_ml = b.label("short_ml");
    pg.bra_unless(b, long_ml, &short_ml);
    let extra = ctx.read_length(b, ip);
    let full_ml = b.add(ml, extra);
    b.mov_to(ml, full_ml);
    // The length bytes must leave a token after them too.
    let no_token = b.setp(Cmp::Ge, ip, pg.stored);
    pg.fail_if(b, no_token, status::TRUNCATED);
    b.place(&short_ml);
    let mop = b.add(op, lit);
    // offset - 1 >= mop catches both a zero offset and one reaching before the page.
    let off1 = b.sub(offset, 1u32);
    let reach = b.setp(Cmp::Ge, off1, mop);
    let left_out = b.sub(pg.orig, mop);
    let overflow = b.setp(Cmp::Gt, ml, left_out);
    let bad = b.or(reach, overflow);
    let match_ok = b.label("match_ok");
    pg.bra_unless(b, bad, &match_ok);
    let zero = b.setp(Cmp::Eq, offset, 0u32);
    let code = b.selp(status::OFFSET_BEFORE_START, status::OUTPUT_OVERFLOW, reach);
    let code = b.selp(status::ZERO_OFFSET, code, zero);
    b.mov_to(pg.code, code);
    pg.bra(b, pg.fail);
    b.place(&match_ok);
    // In place: the match must end before the block bytes still to be read (the page may
    // be written up to the page index of block byte `ip`).
    let m_end = b.add(mop, ml);
    let next_addr = b.add(pg.ib, ip);
    let unread = b.sub(next_addr, pg.ob);
    let clobber = b.setp(Cmp::Gt, m_end, unread);
    pg.fail_if(b, clobber, status::MARGIN);
    // A token follows (checked above); the copy leaves it intact (clobber check).
    let next_tok = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, next_addr);
    Checked {
        lit_src,
        lit,
        offset,
        ml,
        mop,
        m_end,
        next_addr,
        next_tok,
    }
}

/// The end of the decode loop: the page must have its original length (at most that when
/// `bounded`).
pub(super) fn end_of_block(b: &mut KernelBuilder, pg: &Page, op: Reg<U32>) {
    b.comment("end of block: the page must have its original length");
    let short = b.setp(Cmp::Ne, op, pg.orig);
    let exact = b.not(pg.bounded);
    let short = b.and(short, exact);
    pg.fail_if(b, short, status::WRONG_LENGTH);
}

/// The decode loop's registers set up before its first pass (see [`begin`]).
pub(super) struct Start {
    /// Page bytes produced so far.
    pub op: Reg<U32>,
    /// Loop-carried: the token (loaded while the previous sequence is copied, its latency off
    /// the critical path) and the shared address of the byte after it.
    pub tok: Reg<U32>,
    pub lit_addr: Reg<U32>,
    /// `ib + stored - 2`: a sequence whose offset starts at or past it leaves no room for the
    /// offset and a further token.
    pub iend2: Reg<U32>,
    /// `2 - ob`: added to the offset's address it gives the page index of the next token's
    /// block byte, below which the output must stay (the in-place bound).
    pub unread_bias: Reg<U32>,
}

/// The start of the decode loop (after `comment`): an empty block fails, the first token loads.
pub(super) fn begin(b: &mut KernelBuilder, pg: &Page, comment: &str) -> Start {
    b.comment(comment);
    let op = b.mov(0u32);
    let empty = b.setp(Cmp::Eq, pg.stored, 0u32);
    pg.fail_if(b, empty, status::TRUNCATED);
    let tok = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, pg.ib);
    let lit_addr = b.add(pg.ib, 1u32);
    let iend = b.add(pg.ib, pg.stored);
    let iend2 = b.sub(iend, 2u32);
    let unread_bias = b.sub(2u32, pg.ob);
    Start {
        op,
        tok,
        lit_addr,
        iend2,
        unread_bias,
    }
}

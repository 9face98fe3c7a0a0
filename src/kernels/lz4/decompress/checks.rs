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

/// Which sequences a fast path takes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Path {
    /// Literal and match lengths below 15.
    Short,
    /// A literal run of 15..=269 (the token's 15 and one length byte below 255), a match length
    /// below 15 (`Variant::medium`).
    Medium,
}

/// What a fast path starts from: the token's fields, the decode loop's cursor (page bytes
/// produced, the shared address of the byte after the token) and the per-page constants of
/// [`Start`].
#[derive(Clone, Copy)]
pub(super) struct FastIn {
    pub lit: Reg<U32>,
    pub mcode: Reg<U32>,
    pub op: Reg<U32>,
    pub lit_addr: Reg<U32>,
    pub iend2: Reg<U32>,
    pub unread_bias: Reg<U32>,
}

/// A fast sequence parsed (see [`fast_checks`]): `lit` literals at `lit_src`, the offset (read
/// at `offset_addr`), `ml` match bytes ending at page byte `m_end`; `bad` folds the common
/// checks, `ext_bad` the medium path's length byte of 255.
pub(super) struct FastSeq {
    pub lit: Reg<U32>,
    pub lit_src: Reg<U32>,
    pub offset_addr: Reg<U32>,
    pub offset: Reg<U32>,
    pub ml: Reg<U32>,
    pub m_end: Reg<U32>,
    pub bad: Reg<Pred>,
    pub ext_bad: Option<Reg<Pred>>,
}

/// The start of a fast sequence: branches to `slow` (the step-by-step parse of the same token,
/// which then finds the failing check in order) unless the token takes `path`, then parses the
/// sequence and folds its common checks into one predicate. The caller adds its own checks and
/// branches to `slow` on them (the checks do not branch).
pub(super) fn fast_checks(
    b: &mut KernelBuilder,
    pg: &Page,
    s: FastIn,
    path: Path,
    slow: &Label,
) -> FastSeq {
    let FastIn {
        lit,
        mcode,
        op,
        lit_addr,
        iend2,
        unread_bias,
    } = s;
    let (lit, lit_src, offset_addr, read_at, ext_bad) = match path {
        Path::Short => {
            let lit_short = b.setp(Cmp::Lt, lit, 15u32);
            let ml_short = b.setp(Cmp::Lt, mcode, 15u32);
            let short = b.and(lit_short, ml_short);
            pg.bra_unless(b, short, slow);
            // The offset's address; at most 16 bytes past the block: inside the stage's slack,
            // read but unused on failure.
            let offset_addr = b.add(lit_addr, lit);
            (lit, lit_addr, offset_addr, offset_addr, None)
        }
        Path::Medium => {
            let lit_long = b.setp(Cmp::Eq, lit, 15u32);
            let ml_short = b.setp(Cmp::Lt, mcode, 15u32);
            let medium = b.and(lit_long, ml_short);
            pg.bra_unless(b, medium, slow);
            // The length byte: at most the block's end (the token lies inside the block).
            let ext = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, lit_addr);
            let ext_bad = b.setp(Cmp::Eq, ext, 255u32);
            let lit = b.add(ext, 15u32);
            let lit_src = b.add(lit_addr, 1u32);
            let offset_addr = b.add(lit_src, lit);
            // Loads stay inside the stage and its slack: the medium path's offset may lie far
            // past the block, so its reads are clamped to the block end (and the page then
            // fails the checks).
            let read_at = b.min(offset_addr, iend2);
            (lit, lit_src, offset_addr, read_at, Some(ext_bad))
        }
    };
    let offset_lo = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, read_at);
    let offset_hi = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, Addr::from(read_at).off(1));
    let offset = b.mad(offset_hi, 256u32, offset_lo);
    let ml = b.add(mcode, 4u32);
    let mop = b.add(op, lit);
    let m_end = b.add(mop, ml);
    // Offset bytes and a further token inside the block; the output inside the page; the
    // offset inside the page and not zero; the output below the unread block bytes.
    let bad = b.setp(Cmp::Ge, offset_addr, iend2);
    let over = b.setp(Cmp::Gt, m_end, pg.orig);
    let bad = b.or(bad, over);
    let off1 = b.sub(offset, 1u32);
    let reach = b.setp(Cmp::Ge, off1, mop);
    let bad = b.or(bad, reach);
    let unread = b.add(offset_addr, unread_bias);
    let clobber = b.setp(Cmp::Gt, m_end, unread);
    let bad = b.or(bad, clobber);
    FastSeq {
        lit,
        lit_src,
        offset_addr,
        offset,
        ml,
        m_end,
        bad,
        ext_bad,
    }
}

/// After a fast sequence's checks: loads the next token (after the offset) and moves the cursor's
/// `lit_addr` past it; returns the token and a copy of the literals' address (`lit_addr` itself
/// on the short path, which the move overwrites).
pub(super) fn fast_advance(
    b: &mut KernelBuilder,
    seq: &FastSeq,
    lit_addr: Reg<U32>,
) -> (Reg<U32>, Reg<U32>) {
    let next_tok = b.ld_narrow::<U32>(
        Space::Shared,
        Narrow::U8,
        Addr::from(seq.offset_addr).off(2),
    );
    let lit_src = b.mov(seq.lit_src);
    let next_lit = b.add(seq.offset_addr, 3u32);
    b.mov_to(lit_addr, next_lit);
    (next_tok, lit_src)
}

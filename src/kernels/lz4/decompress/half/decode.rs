//! The decode loop of the half-warp decoders (see the [folder docs](super)): the common and
//! medium sequences with their checks folded into one branch each, the step-by-step parse.

use super::super::checks::{
    begin, end_of_block, fast_advance, fast_checks, slow_sequence, Checked, FastIn, FastSeq, Parse,
    Path, Slow, Start,
};
use super::super::page::{copy_match, Page};
use super::copy::{copy_forward, short_copy_step};
use super::Half;
use crate::kernels::lz4::status;
use crate::ptx::*;

impl Parse for Half {
    fn page(&self) -> Page<'_> {
        Page {
            stored: self.stored,
            orig: self.orig,
            ib: self.ib,
            ob: self.ob,
            code: self.code,
            bounded: self.bounded,
            fail: &self.fail,
            lane: self.sub,
            width: self.width,
            mask: Some(self.mask),
            uniform: false,
        }
    }

    /// A byte a step.
    fn read_length(&self, b: &mut KernelBuilder, ip: Reg<U32>) -> Reg<U32> {
        read_length(b, self, ip)
    }
}

/// Reads the 255-chained rest of a length field at block index `ip` (advancing it), a byte a
/// step; fails past the block end or once the length exceeds the original page length.
fn read_length(b: &mut KernelBuilder, h: &Half, ip: Reg<U32>) -> Reg<U32> {
    let n = b.mov(0u32);
    b.loop_with(LoopBranch::Divergent, |b, got, _| {
        let out = b.setp(Cmp::Ge, ip, h.stored);
        h.fail_if(b, out, status::TRUNCATED);
        let a = b.add(h.ib, ip);
        let byte = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, a);
        let next_ip = b.add(ip, 1u32);
        b.mov_to(ip, next_ip);
        let next_n = b.add(n, byte);
        b.mov_to(n, next_n);
        let too_big = b.setp(Cmp::Gt, n, h.orig);
        h.fail_if(b, too_big, status::OUTPUT_OVERFLOW);
        let term = b.setp(Cmp::Ne, byte, 255u32);
        b.bra_if(term, got);
    });
    n
}

/// The decode loop's carried registers and two per-page constants: `iend2` = `ib + stored - 2`
/// (an offset starting at or past it leaves no room for the offset and a further token),
/// `unread_bias` = `2 - ob` (added to the offset's address: the page index of the next token).
struct Cursor {
    tok: Reg<U32>,
    lit_addr: Reg<U32>,
    op: Reg<U32>,
    iend2: Reg<U32>,
    unread_bias: Reg<U32>,
}

/// A fast sequence with all checks folded into one branch (to `slow`, which re-parses the same
/// token step by step); the match must lie wholly before the literals, so every 16-byte step
/// of the copy is independent. Ends at `join`.
#[allow(clippy::too_many_arguments)]
fn fast_sequence(
    b: &mut KernelBuilder,
    h: &Half,
    cur: &Cursor,
    lit: Reg<U32>,
    mcode: Reg<U32>,
    path: Path,
    slow: &Label,
    join: &Label,
) {
    let Cursor {
        tok,
        lit_addr,
        op,
        iend2,
        unread_bias,
    } = *cur;
    let input = FastIn {
        lit,
        mcode,
        op,
        lit_addr,
        iend2,
        unread_bias,
    };
    let seq = fast_checks(b, &h.page(), input, path, slow);
    let FastSeq {
        lit,
        offset,
        ml,
        m_end,
        bad,
        ext_bad,
        ..
    } = seq;
    // The match must lie wholly before the literals (every copy step independent).
    let span = b.add(lit, ml);
    let overlap = b.setp(Cmp::Lt, offset, span);
    let bad = b.or(bad, overlap);
    let bad = match ext_bad {
        Some(e) => b.or(bad, e),
        None => bad,
    };
    b.bra_if(bad, slow);
    let (next_tok, lit_src) = fast_advance(b, &seq, lit_addr);
    let op_addr = b.add(h.ob, op);
    match path {
        Path::Short if h.width == 16 => {
            // At most 32 bytes: one step, and a second when this half needs it.
            short_copy_step(b, h, 0, lit_src, op_addr, lit, offset, span);
            let second = b.label("second_done");
            let long = b.setp(Cmp::Gt, span, h.width);
            b.bra_unless(long, &second);
            short_copy_step(b, h, h.width, lit_src, op_addr, lit, offset, span);
            b.place(&second);
        }
        _ => {
            b.for_range_with(LoopBranch::Divergent, 0u32, span, h.width, |b, first, _| {
                let k = b.add(h.sub, first);
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
            });
        }
    }
    b.mov_to(tok, next_tok);
    b.mov_to(op, m_end);
    // Both ways of a pass meet at its end (the copy's sync), so halves that part here rejoin
    // every pass.
    b.bra(join);
}

/// The decode loop of one block; returns the bytes produced (falls through when the page
/// decoded to its original length, or at most that when bounded), branches to the fail label
/// otherwise.
pub(super) fn decode(b: &mut KernelBuilder, h: &Half) -> Reg<U32> {
    let pg = h.page();
    let Start {
        op,
        tok,
        lit_addr,
        iend2,
        unread_bias,
    } = begin(
        b,
        &pg,
        "decode the block in place, one sequence a pass (per half)",
    );
    b.loop_with(LoopBranch::Divergent, |b, block_end, _| {
        b.comment("common sequence: both lengths below 15, all checks in one branch");
        let lit = b.shr(tok, 4u32);
        let mcode = b.and(tok, 15u32);
        let slow = b.label("slow_seq");
        let join = b.label("seq_done");
        let cur = Cursor {
            tok,
            lit_addr,
            op,
            iend2,
            unread_bias,
        };
        if h.medium {
            let medium = b.label("medium_seq");
            fast_sequence(b, h, &cur, lit, mcode, Path::Short, &medium, &join);
            b.place(&medium);
            fast_sequence(b, h, &cur, lit, mcode, Path::Medium, &slow, &join);
        } else {
            fast_sequence(b, h, &cur, lit, mcode, Path::Short, &slow, &join);
        }

        b.place(&slow);
        let slow = Slow {
            lit,
            mcode,
            op,
            lit_addr,
            block_end,
        };
        let copy_last = |b: &mut KernelBuilder, lit_src| {
            let op_addr = b.add(h.ob, op);
            copy_forward(b, h, lit_src, op_addr, lit);
        };
        let Checked {
            lit_src,
            lit,
            offset,
            ml,
            mop,
            m_end,
            next_addr,
            next_tok,
        } = slow_sequence(b, h, slow, copy_last);
        let next_lit = b.add(next_addr, 1u32);
        b.comment("copy the literals, then the match");
        let op_addr = b.add(h.ob, op);
        copy_forward(b, h, lit_src, op_addr, lit);
        copy_match(b, &pg, mop, offset, ml);
        b.mov_to(tok, next_tok);
        b.mov_to(lit_addr, next_lit);
        b.mov_to(op, m_end);
        b.place(&join);
        h.sync(b);
    });
    end_of_block(b, &pg, op);
    op
}

//! The decode loop of `lz4_decompress` (see the [folder docs](super)): the common sequence with
//! its checks folded into one branch, and the step-by-step parse that finds the failing check.

use super::checks::{
    begin, end_of_block, fast_advance, fast_checks, slow_sequence, Checked, FastIn, FastSeq, Parse,
    Path, Slow, Start,
};
use super::copy::{copy_literals, copy_sequence};
use super::page::Page;
use super::{Dec, Lengths, Sequence};
use crate::kernels::lz4::status;
use crate::kernels::lz4::warp::{bcast, lowest_bit};
use crate::ptx::*;

impl Parse for Dec {
    fn page(&self) -> Page<'_> {
        Page {
            stored: self.stored,
            orig: self.orig,
            ib: self.ib,
            ob: self.ob,
            code: self.code,
            bounded: self.bounded,
            fail: &self.fail,
            lane: self.ln.lane,
            width: 32,
            mask: None,
            uniform: true,
        }
    }

    /// 32 bytes per step.
    fn read_length(&self, b: &mut KernelBuilder, ip: Reg<U32>) -> Reg<U32> {
        read_length(b, self, ip)
    }
}

/// Reads the 255-chained rest of a length field at `ip` (advancing it), 32 bytes per step;
/// fails past the block end or once the length exceeds the original page length.
fn read_length(b: &mut KernelBuilder, d: &Dec, ip: Reg<U32>) -> Reg<U32> {
    b.comment("length bytes (255-chained), 32 a step");
    let n = b.mov(0u32);
    b.loop_with(LoopBranch::Uniform, |b, got, _| {
        let i = b.add(ip, d.ln.lane);
        let inside = b.setp(Cmp::Lt, i, d.stored);
        // Lanes past the block end read byte 0 instead (a safe address) and count as outside.
        let byte_addr = b.add(d.ib, i);
        let byte_addr = b.selp(byte_addr, d.ib, inside);
        let loaded = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, byte_addr);
        let byte = b.selp(loaded, 0u32, inside);
        let not255 = b.setp(Cmp::Ne, byte, 255u32);
        let term = b.and(inside, not255);
        let term_mask = b.ballot(term);
        let out_lanes = b.not(inside);
        let out_mask = b.ballot(out_lanes);
        let has_term = b.setp(Cmp::Ne, term_mask, 0u32);
        let first_term = lowest_bit(b, term_mask);
        let term_byte = bcast(b, byte, first_term);
        let full_bytes = b.mul(first_term, 255u32);
        let added = b.add(full_bytes, term_byte);
        let added = b.selp(added, 255u32 * 32, has_term);
        let step = b.add(first_term, 1u32);
        let step = b.selp(step, 32u32, has_term);
        let next_n = b.add(n, added);
        b.mov_to(n, next_n);
        let next_ip = b.add(ip, step);
        b.mov_to(ip, next_ip);
        let too_big = b.setp(Cmp::Gt, n, d.orig);
        d.fail_if(b, too_big, status::OUTPUT_OVERFLOW);
        b.bra_uni_if(has_term, got);
        // No terminating byte: lanes past the block end mean it is truncated.
        let ran_out = b.setp(Cmp::Ne, out_mask, 0u32);
        d.fail_if(b, ran_out, status::TRUNCATED);
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
pub(super) fn decode(b: &mut KernelBuilder, d: &Dec) -> Reg<U32> {
    let pg = d.page();
    let Start {
        op,
        tok,
        lit_addr,
        iend2,
        unread_bias,
    } = begin(b, &pg, "decode the block in place, one sequence a pass");
    let cur = Cursor { op, tok, lit_addr };
    b.loop_with(LoopBranch::Uniform, |b, block_end, next_seq| {
        b.comment("sequence: the common case with all checks in one branch");
        let lit = b.shr(tok, 4u32);
        let mcode = b.and(tok, 15u32);
        let slow = b.label("slow_seq");
        let fast = Fast {
            iend2,
            unread_bias,
            slow: &slow,
            next: next_seq,
        };
        if d.variant.medium {
            let medium = b.label("medium_seq");
            let to_medium = Fast {
                slow: &medium,
                ..fast
            };
            fast_sequence(b, d, &to_medium, &cur, Token { lit, mcode }, Path::Short);
            b.place(&medium);
            fast_sequence(b, d, &fast, &cur, Token { lit, mcode }, Path::Medium);
        } else {
            fast_sequence(b, d, &fast, &cur, Token { lit, mcode }, Path::Short);
        }
        b.place(&slow);
        let slow = Slow {
            lit,
            mcode,
            op,
            lit_addr,
            block_end,
        };
        let Checked {
            lit_src,
            lit,
            offset,
            ml,
            next_addr,
            next_tok,
            ..
        } = slow_sequence(b, d, slow, |b, lit_src| {
            copy_literals(b, d, lit_src, op, lit)
        });
        b.mov_to(tok, next_tok);
        let next_lit = b.add(next_addr, 1u32);
        b.mov_to(lit_addr, next_lit);
        let seq = Sequence {
            lit_src,
            op,
            lit,
            offset,
            ml,
        };
        copy_sequence(b, d, &seq, Lengths::Any);
        let span = b.add(lit, ml);
        let op_after_seq = b.add(op, span);
        b.mov_to(op, op_after_seq);
    });
    end_of_block(b, &pg, op);
    op
}

/// The decode loop's carried registers: page bytes produced so far, the next token (loaded while
/// the previous sequence is copied, its latency off the critical path) and the shared address of
/// the byte after it.
#[derive(Clone, Copy)]
struct Cursor {
    op: Reg<U32>,
    tok: Reg<U32>,
    lit_addr: Reg<U32>,
}

/// A token's two fields: the literal count and the match-length code (both 0..=15).
struct Token {
    lit: Reg<U32>,
    mcode: Reg<U32>,
}

/// The fast path's per-page constants and its two ways out. `iend2` = `ib + stored - 2` (a
/// sequence whose offset starts at or past it leaves no room for the offset and a further
/// token); `unread_bias` = `2 - ob` (added to the offset's address it gives the page index of the
/// next token's block byte, below which the output must stay: the in-place bound).
#[derive(Clone, Copy)]
struct Fast<'a> {
    iend2: Reg<U32>,
    unread_bias: Reg<U32>,
    /// The step-by-step parse of the same token.
    slow: &'a Label,
    /// The next sequence (the top of the decode loop).
    next: &'a Label,
}

/// A fast sequence (see [`Path`]; never the last one) with all its checks folded into one
/// branch: falls through to `f.slow` (the step-by-step parse of the same token, which then finds
/// the failing check in order) unless every check holds; otherwise loads the next token, copies
/// the sequence, advances the cursor and continues at `f.next`.
fn fast_sequence(b: &mut KernelBuilder, d: &Dec, f: &Fast, cur: &Cursor, token: Token, path: Path) {
    let Cursor { op, tok, lit_addr } = *cur;
    let Token { lit, mcode } = token;
    let (slow, next) = (f.slow, f.next);
    let input = FastIn {
        lit,
        mcode,
        op,
        lit_addr,
        iend2: f.iend2,
        unread_bias: f.unread_bias,
    };
    let seq = fast_checks(b, &d.page(), input, path, slow);
    let FastSeq {
        lit,
        offset,
        ml,
        m_end,
        bad,
        ext_bad,
        ..
    } = seq;
    let bad = match ext_bad {
        Some(e) => b.or(bad, e),
        None => bad,
    };
    // `Variant::one_step`: a match overlapping its literals or itself takes the slow path.
    let one_step = path == Path::Short && d.variant.one_step;
    let bad = if one_step {
        let span = b.add(lit, ml);
        let overlap = b.setp(Cmp::Lt, offset, span);
        b.or(bad, overlap)
    } else {
        bad
    };
    b.bra_uni_if(bad, slow);
    let (next_tok, lit_src) = fast_advance(b, &seq, lit_addr);
    let seq = Sequence {
        lit_src,
        op,
        lit,
        offset,
        ml,
    };
    let lengths = match path {
        Path::Short if one_step => Lengths::ShortApart,
        Path::Short => Lengths::Short,
        Path::Medium => Lengths::Any,
    };
    copy_sequence(b, d, &seq, lengths);
    b.mov_to(tok, next_tok);
    b.mov_to(op, m_end);
    b.bra_uni(next);
}

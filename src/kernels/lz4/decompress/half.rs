//! `Variant::halves`: `lz4_decompress` with two pages per warp, one per half-warp of 16 lanes.
//!
//! The one-warp-per-page decoder is bound by issue slots: every lane follows the same parse, so
//! each sequence costs its ~35 scalar instructions once per warp while its copy uses at most a
//! few lanes (sequences of dickens average 10 bytes). Here each half-warp decodes a page of its
//! own: the parse of two pages shares each instruction, copies take 16 bytes a step. The halves
//! branch independently (plain `bra`: a half may take the step-by-step parse while the other
//! takes the common path); they use no shuffles or ballots (the 255-chained lengths are read
//! byte by byte), and synchronize their shared-memory copies with `bar.warp.sync` over their own
//! 16 lanes.
//!
//! Checks, their order and their codes are those of the warp decoder (`decode.rs`), with two
//! differences in which code a corrupt page gets (never in whether it fails): a 255-chained
//! length running past the block end reports `TRUNCATED` (the warp decoder, adding 32 bytes of
//! 255 at a time, may report `OUTPUT_OVERFLOW` first), and the common sequence's match must lie
//! wholly before its literals (`Variant::one_step`).
//!
//! Launch: as `lz4_decompress`, with `warps_per_block * 2 * decompress_shared_per_warp` bytes of
//! dynamic shared memory; warps stride over page pairs (pages `2k` and `2k + 1`).

use crate::kernels::lz4::status;
use crate::ptx::*;

/// Most threads per block (5 warps: what 48 KiB of 4 KiB-page buffers hold, 10 pages).
pub const MAX_BLOCK: u32 = 160;
/// Register bound per thread (see `build`).
const MAX_REGS: u32 = 64;

/// Per-half registers of the page being decoded.
struct Half {
    /// Lanes per page (16, or 8 for `Variant::quarters`).
    width: u32,
    /// Lane index within the group (0..width).
    sub: Reg<U32>,
    /// The half is lanes 16..32.
    /// The half's lanes (`0xffff` or `0xffff0000`).
    mask: Reg<U32>,
    /// Shared address of the page buffer and of the staged block.
    ob: Reg<U32>,
    ib: Reg<U32>,
    stored: Reg<U32>,
    orig: Reg<U32>,
    bounded: Reg<Pred>,
    code: Reg<U32>,
    fail: Label,
    /// `Variant::medium`: a second fast path for one-byte literal lengths.
    medium: bool,
}

impl Half {
    /// `bar.warp.sync` over this half's lanes.
    fn sync(&self, b: &mut KernelBuilder) {
        b.instr(format!("bar.warp.sync {}", self.mask));
    }

    /// Sets the status to `code` and leaves the page when `bad`.
    fn fail_if(&self, b: &mut KernelBuilder, bad: Reg<Pred>, code: u32) {
        let ok = b.label("ok");
        b.bra_unless(bad, &ok);
        b.mov_to(self.code, code);
        b.bra(&self.fail);
        b.place(&ok);
    }
}

/// A loop over `count` items, 16 a pass: lane `sub` takes item `base + sub` when below `count`;
/// `body` gets the item scaled by `1 << shift`.
fn for_each_item(
    b: &mut KernelBuilder,
    h: &Half,
    count: Reg<U32>,
    shift: u32,
    body: impl FnOnce(&mut KernelBuilder, Reg<U32>, Reg<Pred>),
) {
    b.for_range_with(LoopBranch::Divergent, 0u32, count, h.width, |b, base, _| {
        let item = b.add(base, h.sub);
        let inside = b.setp(Cmp::Lt, item, count);
        let offset = if shift == 0 { item } else { b.shl(item, shift) };
        body(b, offset, inside);
    });
}

/// Builds the module.
pub(super) fn build(
    target: Target,
    entry: &str,
    max_regs: Option<u32>,
    medium: bool,
    width: u32,
) -> Module {
    assert!(width == 16 || width == 8, "16 or 8 lanes per page");
    let groups = 32 / width;
    let mut b = KernelBuilder::new(entry);
    b.maxntid(MAX_BLOCK, 1, 1);
    // Shared memory bounds an SM to 26 such warps, which 64 registers a thread still allow; ptxas
    // left to itself keeps 48 and spills on some targets.
    b.maxnreg(max_regs.unwrap_or(MAX_REGS));
    let packed = b.param::<U64>("packed");
    let packed_bytes = b.param::<U32>("packed_bytes");
    let entries = b.param::<U64>("entries");
    let n_pages = b.param::<U32>("n_pages");
    let page_bytes = b.param::<U32>("page_bytes");
    let output = b.param::<U64>("output");
    let status_p = b.param::<U64>("status");
    b.comment("parameters");
    let packed = b.global_ptr(&packed);
    let packed_bytes = b.ld_param(&packed_bytes);
    let entries = b.global_ptr(&entries);
    let n_pages = b.ld_param(&n_pages);
    let page_bytes = b.ld_param(&page_bytes);
    let output = b.global_ptr(&output);
    let status_p = b.global_ptr(&status_p);
    let smem = b.dynamic_shared::<U32>("lz4d_smem");

    b.comment("per-half layout: two page buffers per warp, each the page plus the margin");
    let tid = b.special(Special::TidX);
    let lane = b.and(tid, 31u32);
    let sub = b.and(tid, width - 1);
    let half = b.shr(lane, width.trailing_zeros());
    let shift = b.shl(half, width.trailing_zeros());
    let mask = b.shl((1u32 << width) - 1, shift);
    let warp = b.shr(tid, 5u32);
    let ntid = b.special(Special::NtidX);
    let warps = b.shr(ntid, 5u32);
    let cta = b.special(Special::CtaidX);
    let ncta = b.special(Special::NctaidX);
    let grid_warp = b.mad(cta, warps, warp);
    let all_warps = b.mul(ncta, warps);
    // margin = round16((page_bytes >> 8) + 32) + 32, as `inplace_margin`.
    let m = b.shr(page_bytes, 8u32);
    let m = b.add(m, 47u32);
    let m = b.and(m, !15u32);
    let margin = b.add(m, 32u32);
    let per_page = b.add(page_bytes, margin);
    let per_warp = b.shl(per_page, groups.trailing_zeros());
    let smem_base = b.shared_base(&smem);
    let warp_base = b.mad(warp, per_warp, smem_base);
    let ob = b.mad(half, per_page, warp_base);
    let region_end = b.add(ob, per_page);
    let bound = b.and(packed_bytes, !15u32);
    let leader = b.setp(Cmp::Eq, sub, 0u32);
    let n_pairs = b.add(n_pages, groups - 1);
    let n_pairs = b.shr(n_pairs, groups.trailing_zeros());

    b.for_range_with(
        LoopBranch::Divergent,
        grid_warp,
        n_pairs,
        all_warps,
        |b, pair, _| {
            b.comment("page pair loop: page 2k in lanes 0..16, 2k + 1 in lanes 16..32");
            let page = b.mad(pair, groups, half);
            let skip = b.label("no_page");
            let none = b.setp(Cmp::Ge, page, n_pages);
            b.bra_if(none, &skip);
            let entry_addr = b.index_addr(entries, page, 16);
            let [off, stored, orig, kind] = b.ld_v4::<U32>(Space::GlobalNc, entry_addr);
            let code = b.reg::<U32>();
            let produced = b.reg::<U32>();
            let fail = b.label("fail");
            let done = b.label("page_done");
            let raw_bit = b.and(kind, 1u32);
            let is_raw = b.setp(Cmp::Ne, raw_bit, 0u32);
            let bound_bit = b.and(kind, 2u32);
            let bounded = b.setp(Cmp::Ne, bound_bit, 0u32);
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
            let h = Half {
                width,
                sub,
                mask,
                ob,
                ib: ob,
                stored,
                orig,
                bounded,
                code,
                fail: fail.clone(),
                medium,
            };
            h.fail_if(b, bad, status::BAD_ENTRY);
            b.comment("stage the block at the end of the buffer (16-byte chunks, 16 lanes)");
            let misalign = b.and(off, 15u32);
            let aligned_off = b.sub(off, misalign);
            let span = b.add(misalign, stored);
            let span = b.add(span, 15u32);
            let chunks = b.shr(span, 4u32);
            let staged = b.shl(chunks, 4u32);
            let staged = b.add(staged, 16u32);
            let stage = b.sub(region_end, staged);
            let src = b.index_addr(packed, aligned_off, 1);
            for_each_item(b, &h, chunks, 4, |b, kb, inside| {
                let src_chunk = b.index_addr(src, kb, 1);
                let s = b.add(stage, kb);
                b.when(inside, |b| {
                    let v = b.ld_v4::<U32>(Space::GlobalNc, src_chunk);
                    b.st_v4::<U32>(Space::Shared, s, v);
                });
            });
            h.sync(b);
            let ib = b.add(stage, misalign);
            let h = Half { ib, ..h };
            let dst = b.mad_wide(page, page_bytes, output);
            let block = b.label("block");
            b.bra_unless(is_raw, &block);
            b.comment("raw page: copy it out");
            copy_raw_out(b, &h, dst);
            b.mov_to(produced, orig);
            b.mov_to(code, status::OK);
            b.bra(&done);
            b.place(&block);
            let op = decode(b, &h);
            b.comment("write the rebuilt page out");
            copy_page_out(b, &h, dst, op);
            b.mov_to(produced, op);
            b.mov_to(code, status::OK);
            b.bra(&done);
            b.place(&fail);
            b.mov_to(produced, 0u32);
            b.place(&done);
            let status_addr = b.index_addr(status_p, page, 4);
            let len_bits = b.shl(produced, 8u32);
            let word = b.or(code, len_bits);
            b.when(leader, |b| b.st(Space::Global, status_addr, word));
            // The next pair's staging overwrites buffers this page's lanes read.
            h.sync(b);
            b.place(&skip);
        },
    );
    Module::single(target, b.finish())
}

/// Copies a raw page from the (unaligned) stage to `dst`: words, then the tail bytes.
fn copy_raw_out(b: &mut KernelBuilder, h: &Half, dst: Reg<U64>) {
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
fn copy_page_out(b: &mut KernelBuilder, h: &Half, dst: Reg<U64>, len: Reg<U32>) {
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

/// Copies `len` bytes from shared `src` to shared `dst` (`src >= dst` or apart), 16 a step.
fn copy_forward(b: &mut KernelBuilder, h: &Half, src: Reg<U32>, dst: Reg<U32>, len: Reg<U32>) {
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
fn copy_match(b: &mut KernelBuilder, h: &Half, op: Reg<U32>, offset: Reg<U32>, len: Reg<U32>) {
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
fn short_copy_step(
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

/// Which sequences a fast path takes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Path {
    /// Literal and match lengths below 15.
    Short,
    /// A literal run of one length byte (15..=269 literals), a match length below 15.
    Medium,
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
    let (lit, lit_src, offset_addr, read_at, ext_bad) = match path {
        Path::Short => {
            let lit_short = b.setp(Cmp::Lt, lit, 15u32);
            let ml_short = b.setp(Cmp::Lt, mcode, 15u32);
            let short = b.and(lit_short, ml_short);
            b.bra_unless(short, slow);
            // At most 16 bytes past the block: inside the stage's slack, read but unused on
            // failure.
            let offset_addr = b.add(lit_addr, lit);
            (lit, lit_addr, offset_addr, offset_addr, None)
        }
        Path::Medium => {
            let lit_long = b.setp(Cmp::Eq, lit, 15u32);
            let ml_short = b.setp(Cmp::Lt, mcode, 15u32);
            let medium = b.and(lit_long, ml_short);
            b.bra_unless(medium, slow);
            // The length byte lies at most at the block end (the token is inside the block).
            let ext = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, lit_addr);
            let ext_bad = b.setp(Cmp::Eq, ext, 255u32);
            let lit = b.add(ext, 15u32);
            let lit_src = b.add(lit_addr, 1u32);
            let offset_addr = b.add(lit_src, lit);
            // The offset may lie far past the block: its reads are clamped (the checks fail).
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
    let bad = b.setp(Cmp::Ge, offset_addr, iend2);
    let over = b.setp(Cmp::Gt, m_end, h.orig);
    let bad = b.or(bad, over);
    let off1 = b.sub(offset, 1u32);
    let reach = b.setp(Cmp::Ge, off1, mop);
    let bad = b.or(bad, reach);
    let unread = b.add(offset_addr, unread_bias);
    let clobber = b.setp(Cmp::Gt, m_end, unread);
    let bad = b.or(bad, clobber);
    let span = b.add(lit, ml);
    let overlap = b.setp(Cmp::Lt, offset, span);
    let bad = b.or(bad, overlap);
    let bad = match ext_bad {
        Some(e) => b.or(bad, e),
        None => bad,
    };
    b.bra_if(bad, slow);
    let next_tok = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, Addr::from(offset_addr).off(2));
    let lit_src = b.mov(lit_src);
    let next_lit = b.add(offset_addr, 3u32);
    b.mov_to(lit_addr, next_lit);
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
fn decode(b: &mut KernelBuilder, h: &Half) -> Reg<U32> {
    b.comment("decode the block in place, one sequence a pass (per half)");
    let op = b.mov(0u32);
    let empty = b.setp(Cmp::Eq, h.stored, 0u32);
    h.fail_if(b, empty, status::TRUNCATED);
    let tok = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, h.ib);
    let lit_addr = b.add(h.ib, 1u32);
    let iend = b.add(h.ib, h.stored);
    let iend2 = b.sub(iend, 2u32);
    let unread_bias = b.sub(2u32, h.ob);
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
        b.comment("sequence, step by step: literal length, literals");
        let ip = b.sub(lit_addr, h.ib);
        let long_lit = b.setp(Cmp::Eq, lit, 15u32);
        let short_lit = b.label("short_lit");
        b.bra_unless(long_lit, &short_lit);
        let extra = read_length(b, h, ip);
        let full_lit = b.add(lit, extra);
        b.mov_to(lit, full_lit);
        b.place(&short_lit);
        let left_in = b.sub(h.stored, ip);
        let left_out = b.sub(h.orig, op);
        let room = b.min(left_in, left_out);
        let bad = b.setp(Cmp::Gt, lit, room);
        let lits_ok = b.label("lits_ok");
        b.bra_unless(bad, &lits_ok);
        let past_end = b.setp(Cmp::Gt, lit, left_in);
        let code = b.selp(status::TRUNCATED, status::OUTPUT_OVERFLOW, past_end);
        b.mov_to(h.code, code);
        b.bra(&h.fail);
        b.place(&lits_ok);
        let lit_src = b.add(h.ib, ip);
        let lit_end = b.add(ip, lit);
        let last = b.setp(Cmp::Eq, lit_end, h.stored);
        let not_last = b.label("not_last");
        b.bra_unless(last, &not_last);
        let op_addr = b.add(h.ob, op);
        copy_forward(b, h, lit_src, op_addr, lit);
        let op_after_lits = b.add(op, lit);
        b.mov_to(op, op_after_lits);
        b.bra(block_end);
        b.place(&not_last);
        b.comment("match: offset, length, checks, copy");
        let left_in = b.sub(h.stored, lit_end);
        let no_room = b.setp(Cmp::Lt, left_in, 3u32);
        h.fail_if(b, no_room, status::TRUNCATED);
        let offset_addr = b.add(h.ib, lit_end);
        let offset_lo = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, offset_addr);
        let offset_hi =
            b.ld_narrow::<U32>(Space::Shared, Narrow::U8, Addr::from(offset_addr).off(1));
        let offset_hi = b.shl(offset_hi, 8u32);
        let offset = b.or(offset_lo, offset_hi);
        let after_offset = b.add(lit_end, 2u32);
        b.mov_to(ip, after_offset);
        let ml = b.add(mcode, 4u32);
        let long_ml = b.setp(Cmp::Eq, mcode, 15u32);
        let short_ml = b.label("short_ml");
        b.bra_unless(long_ml, &short_ml);
        let extra = read_length(b, h, ip);
        let full_ml = b.add(ml, extra);
        b.mov_to(ml, full_ml);
        let no_token = b.setp(Cmp::Ge, ip, h.stored);
        h.fail_if(b, no_token, status::TRUNCATED);
        b.place(&short_ml);
        let mop = b.add(op, lit);
        let off1 = b.sub(offset, 1u32);
        let reach = b.setp(Cmp::Ge, off1, mop);
        let left_out = b.sub(h.orig, mop);
        let overflow = b.setp(Cmp::Gt, ml, left_out);
        let bad = b.or(reach, overflow);
        let match_ok = b.label("match_ok");
        b.bra_unless(bad, &match_ok);
        let zero = b.setp(Cmp::Eq, offset, 0u32);
        let code = b.selp(status::OFFSET_BEFORE_START, status::OUTPUT_OVERFLOW, reach);
        let code = b.selp(status::ZERO_OFFSET, code, zero);
        b.mov_to(h.code, code);
        b.bra(&h.fail);
        b.place(&match_ok);
        let m_end = b.add(mop, ml);
        let next_addr = b.add(h.ib, ip);
        let unread = b.sub(next_addr, h.ob);
        let clobber = b.setp(Cmp::Gt, m_end, unread);
        h.fail_if(b, clobber, status::MARGIN);
        let next_tok = b.ld_narrow::<U32>(Space::Shared, Narrow::U8, next_addr);
        let next_lit = b.add(next_addr, 1u32);
        b.comment("copy the literals, then the match");
        let op_addr = b.add(h.ob, op);
        copy_forward(b, h, lit_src, op_addr, lit);
        copy_match(b, h, mop, offset, ml);
        b.mov_to(tok, next_tok);
        b.mov_to(lit_addr, next_lit);
        b.mov_to(op, m_end);
        b.place(&join);
        h.sync(b);
    });
    b.comment("end of block: the page must have its original length");
    let short = b.setp(Cmp::Ne, op, h.orig);
    let exact = b.not(h.bounded);
    let short = b.and(short, exact);
    h.fail_if(b, short, status::WRONG_LENGTH);
    op
}

//! `Variant::halves` (the table's `lz4_decompress`, with `Variant::medium`): two pages per warp,
//! one per half-warp of 16 lanes; `Variant::quarters`: four pages per warp, 8 lanes each.
//!
//! The one-warp-per-page decoder is bound by issue slots: every lane follows the same parse, so
//! each sequence costs its ~35 scalar instructions once per warp while its copy uses at most a
//! few lanes (sequences of dickens average 10 bytes). Here each half-warp decodes a page of its
//! own: the parse of two pages shares each instruction, copies take 16 bytes a step. The halves
//! branch independently (plain `bra`: a half may take the step-by-step parse while the other
//! takes the common path); they use no shuffles or ballots (the 255-chained lengths are read
//! byte by byte), and synchronize their shared-memory copies with `bar.warp.sync` over their own
//! 16 lanes. Both ways through a sequence (the common path, the step-by-step parse) meet at the
//! end of the pass, where ptxas puts the reconvergence point, so halves that part rejoin at every
//! sequence (a back branch from the common path alone would let one half run on by itself).
//!
//! Checks, their order and their codes are those of the warp decoder (`decode.rs`), except that
//! a 255-chained length running past the block end reports `TRUNCATED` (the warp decoder, adding
//! 32 bytes of 255 at a time, may report `OUTPUT_OVERFLOW` first): the same pages fail. The
//! common sequence's match must lie wholly before its literals (as `Variant::one_step`), so
//! every 16-byte step of its copy is independent; others take the step-by-step parse.
//!
//! Launch: blocks of whole warps up to [`MAX_BLOCK`] threads, `warps_per_block * groups *
//! decompress_shared_per_page` bytes of dynamic shared memory (`groups` = 32 / lanes per page);
//! warps stride over page groups (pages `groups * k ..`).
//!
//! Files: this one (the entry: layout, page-group loop, entry checks, staging, the ways out),
//! `decode` (the decode loop: the common and medium sequences, the step-by-step parse), `copy`
//! (byte moves). Children use the `Half` registers and helpers here.
//!
//! Measured (session 8, H200, dickens 4 KiB pages): with the medium path and one warp per page
//! pair over the whole grid 261.7 GB/s against 170.3 for the one-warp kernel; ncu: 0.84 G
//! instructions against 1.28 G, issue slots 79% busy, occupancy 38.5% of 40.6% (shared memory
//! holds 26 warps, 52 pages, an SM).

mod copy;
mod decode;

use super::checks::Parse;
use super::entry::{entry_checks, inplace_margin, params, stage_block, Checks, Params};
use super::page::{copy_page_out, copy_raw_out};
use crate::kernels::lz4::status;
use crate::ptx::*;
use decode::decode;

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
        self.page().sync(b);
    }

    /// Sets the status to `code` and leaves the page when `bad`.
    fn fail_if(&self, b: &mut KernelBuilder, bad: Reg<Pred>, code: u32) {
        self.page().fail_if(b, bad, code);
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
    h.page().for_each_item(b, count, shift, body);
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
    let Params {
        packed,
        packed_bytes,
        entries,
        n_pages,
        page_bytes,
        output,
        status_p,
        smem,
    } = params(&mut b);

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
    let margin = inplace_margin(&mut b, page_bytes);
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
            let Checks {
                is_raw,
                bounded,
                bad,
            } = entry_checks(b, [off, stored, orig, kind], page_bytes, bound);
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
            let ib = stage_block(b, &h.page(), packed, off, region_end);
            let h = Half { ib, ..h };
            let dst = b.mad_wide(page, page_bytes, output);
            let block = b.label("block");
            b.bra_unless(is_raw, &block);
            b.comment("raw page: copy it out");
            copy_raw_out(b, &h.page(), dst);
            b.mov_to(produced, orig);
            b.mov_to(code, status::OK);
            b.bra(&done);
            b.place(&block);
            let op = decode(b, &h);
            b.comment("write the rebuilt page out");
            copy_page_out(b, &h.page(), dst, op);
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

//! The `lz4_decompress` entry (see the [folder docs](super)): parameters, per-warp shared layout,
//! the page loop, entry checks, staging of the block, and the raw and decoded ways out of a page.

use super::checks::Parse;
use super::decode::decode;
use super::entry::{entry_checks, inplace_margin, params, stage_block, Checks, Params};
use super::page::{copy_page_out, copy_raw_out};
use super::{Dec, Variant, WARP_MAX_BLOCK};
use crate::kernels::lz4::status;
use crate::kernels::lz4::warp::Lanes;
use crate::ptx::*;

/// Builds the table's `lz4_decompress` ([`Variant::TABLE`]).
pub fn build(target: Target) -> Module {
    build_variant(target, Variant::TABLE)
}

/// Builds the table's `lz4_decompress_wide` ([`Variant::WIDE`]).
pub fn build_wide(target: Target) -> Module {
    build_named(target, Variant::WIDE, "lz4_decompress_wide")
}

/// Builds the module of `variant` with the entry `lz4_decompress`.
pub fn build_variant(target: Target, variant: Variant) -> Module {
    build_named(target, variant, "lz4_decompress")
}

fn build_named(target: Target, variant: Variant, entry: &str) -> Module {
    if variant.lanes_per_page() < 32 {
        let width = variant.lanes_per_page();
        return super::half::build(target, entry, variant.max_regs, variant.medium, width);
    }
    let mut b = KernelBuilder::new(entry);
    b.maxntid(WARP_MAX_BLOCK, 1, 1);
    if let Some(n) = variant.max_regs {
        b.maxnreg(n);
    }
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

    b.comment("per-warp layout: the page buffer plus the in-place margin (shared); lane constants");
    let ln = Lanes::new(&mut b);
    let tid = b.special(Special::TidX);
    let warp = b.shr(tid, 5u32);
    let ntid = b.special(Special::NtidX);
    let warps = b.shr(ntid, 5u32);
    let cta = b.special(Special::CtaidX);
    let ncta = b.special(Special::NctaidX);
    let grid_warp = b.mad(cta, warps, warp);
    let all_warps = b.mul(ncta, warps);
    let margin = inplace_margin(&mut b, page_bytes);
    let per_warp = b.add(page_bytes, margin);
    let smem_base = b.shared_base(&smem);
    let ob = b.mad(warp, per_warp, smem_base);
    let region_end = b.add(ob, per_warp);
    let ob_lane = b.add(ob, ln.lane);
    let bound = b.and(packed_bytes, !15u32);
    let lane0 = b.setp(Cmp::Eq, ln.lane, 0u32);

    b.for_range_with(
        LoopBranch::Uniform,
        grid_warp,
        n_pages,
        all_warps,
        |b, page, _| {
            b.comment("page loop (warps stride over the pages): read and check the entry");
            let entry_addr = b.index_addr(entries, page, 16);
            let [off, stored, orig, kind] = b.ld_v4::<U32>(Space::GlobalNc, entry_addr);
            // Status code and bytes produced are set on each way out (not here), so neither is live
            // across the decode loop.
            let code = b.reg::<U32>();
            let produced = b.reg::<U32>();
            let fail = b.label("fail");
            let done = b.label("page_done");
            let Checks {
                is_raw,
                bounded,
                bad,
            } = entry_checks(b, [off, stored, orig, kind], page_bytes, bound);
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
                variant,
            };
            d.fail_if(b, bad, status::BAD_ENTRY);
            b.comment("stage the block at the end of the buffer (16-byte chunks)");
            let ib = stage_block(b, &d.page(), packed, off, region_end);
            let d = Dec { ib, ..d };
            let block = b.label("block");
            b.bra_uni_unless(is_raw, &block);
            b.comment("raw page: copy it out");
            let dst = b.mad_wide(page, page_bytes, output);
            copy_raw_out(b, &d.page(), dst);
            b.mov_to(produced, orig);
            b.mov_to(code, status::OK);
            b.bra_uni(&done);
            b.place(&block);
            let op = decode(b, &d);
            b.comment("write the rebuilt page out");
            let dst = b.mad_wide(page, page_bytes, output);
            copy_page_out(b, &d.page(), dst, op);
            b.mov_to(produced, op);
            b.mov_to(code, status::OK);
            b.bra_uni(&done);
            b.place(&fail);
            b.mov_to(produced, 0u32);
            b.place(&done);
            b.comment("status word: code | bytes produced << 8");
            let status_addr = b.index_addr(status_p, page, 4);
            let len_bits = b.shl(produced, 8u32);
            let word = b.or(code, len_bits);
            b.when(lane0, |b| b.st(Space::Global, status_addr, word));
            // The next page's staging overwrites buffers this page's lanes read.
            b.warp_sync(FULL_MASK);
        },
    );
    Module::single(target, b.finish())
}

//! The `lz4_compress` entry (see the [folder docs](super)): parameters, per-warp shared layout,
//! the page loop, the table reset, and the all-zero, parsed and raw ways out of a page.

use super::emit::emit_sequence;
use super::page_io::{finish, stage};
use super::parse::parse_page;
use super::parse_masks::parse_page_masks;
use super::{Match, Page, Stored, Variant, MAX_REGS};
use crate::kernels::lz4::warp::{bcast, Lanes};
use crate::kernels::lz4::{MAX_TABLE_BYTES, STAGE_SLACK_BYTES};
use crate::ptx::*;

/// Builds the table's module ([`Variant::TABLE`]).
pub fn build(target: Target) -> Module {
    build_variant(target, Variant::TABLE)
}

/// Builds the module of `variant` (entry `lz4_compress` whatever the variant).
pub fn build_variant(target: Target, variant: Variant) -> Module {
    let mut b = KernelBuilder::new("lz4_compress");
    b.maxntid(variant.max_block(), 1, 1);
    b.maxnreg(variant.max_regs.unwrap_or(MAX_REGS));
    let input = b.param::<U64>("input");
    let input_bytes = b.param::<U32>("input_bytes");
    let page_bytes = b.param::<U32>("page_bytes");
    let n_pages = b.param::<U32>("n_pages");
    let scratch = b.param::<U64>("scratch");
    let packed = b.param::<U64>("packed");
    let info = b.param::<U64>("info");
    b.comment("parameters");
    let input = b.global_ptr(&input);
    let input_bytes = b.ld_param(&input_bytes);
    let page_bytes = b.ld_param(&page_bytes);
    let n_pages = b.ld_param(&n_pages);
    let scratch = b.global_ptr(&scratch);
    let packed = b.global_ptr(&packed);
    let info = b.global_ptr(&info);
    let smem = b.dynamic_shared::<U32>("lz4c_smem");

    b.comment(
        "per-warp layout: hash table, staged page (shared), scratch (global); lane constants",
    );
    let ln = Lanes::new(&mut b);
    let tid = b.special(Special::TidX);
    let warp = b.shr(tid, 5u32);
    let ntid = b.special(Special::NtidX);
    let warps = b.shr(ntid, 5u32);
    let cta = b.special(Special::CtaidX);
    let grid_warp = b.mad(cta, warps, warp);
    let halvings = table_halvings(&mut b, page_bytes, variant.small);
    let warp_table = b.shr(MAX_TABLE_BYTES, halvings);
    let per_warp = b.add(page_bytes, warp_table);
    let per_warp = b.add(per_warp, STAGE_SLACK_BYTES);
    let smem_base = b.shared_base(&smem);
    let table = b.mad(warp, per_warp, smem_base);
    let spage = b.add(table, warp_table);
    let scratch = b.mad_wide(grid_warp, page_bytes, scratch);
    let lane0 = b.setp(Cmp::Eq, ln.lane, 0u32);
    let zero = b.mov(0u32);
    let stage_steps = b.shr(page_bytes, 9u32);
    let ext_fwd = b.setp(Cmp::Lt, ln.lane, 16u32);
    let fwd_step = b.add(ln.lane, 4u32);
    let ext_k = b.sub(ln.lane, 15u32);
    let bwd_step = b.sub(15u32, ln.lane);
    let ext_step = if variant.bits {
        // Lanes 0..16 compare bytes 15 - lane, 16..32 go back 32 - lane: the first mismatch
        // either way is a leading-zero count (see `extend_bits`).
        let fwd = b.sub(19u32, ln.lane);
        let bwd = b.sub(ln.lane, 32u32);
        b.selp(fwd, bwd, ext_fwd)
    } else {
        b.selp(fwd_step, bwd_step, ext_fwd)
    };
    let lane_m1 = b.sub(ln.lane, 1u32);
    let spage_lane_m1 = b.add(spage, lane_m1);
    let scratch_lane = b.index_addr(scratch, ln.lane, 1);

    b.loop_with(LoopBranch::Uniform, |b, all_done, _| {
        b.comment("page loop: lane 0 takes the next page from the counter info[0]");
        let page = b.mov(0u32);
        b.when(lane0, |b| {
            let taken = b.atom::<U32>(Space::Global, AtomOp::Add, info, 1u32);
            b.mov_to(page, taken);
        });
        let page = bcast(b, page, 0u32);
        let finished = b.setp(Cmp::Ge, page, n_pages);
        b.bra_uni_if(finished, all_done);
        let start = b.mul(page, page_bytes);
        let avail = b.max(input_bytes, start);
        let avail = b.sub(avail, start);
        let p_len = b.min(avail, page_bytes);
        let src = b.mad_wide(page, page_bytes, input);
        b.comment("stage the page in shared memory (16-byte loads), OR-ing its bytes");
        let nonzero = stage(b, &ln, src, spage, p_len, stage_steps, variant.merge);
        b.comment("clear this page's hash table (2, 4 or 8 KiB)");
        // This page's table: 2 KiB always, 4 KiB unless halved twice, 8 KiB unless halved.
        let halvings = table_halvings(b, p_len, variant.small);
        let hash_shift = b.add(halvings, 20u32);
        let table_lane = b.mad(ln.lane, 16u32, table);
        let half4 = b.setp(Cmp::Ne, halvings, 2u32);
        let whole8 = b.setp(Cmp::Eq, halvings, 0u32);
        for i in 0..16u32 {
            let a = Addr::from(table_lane).off(512 * i as i64);
            match i {
                0..4 => b.st_v4::<U32>(Space::Shared, a, [zero; 4]),
                4..8 => b.when(half4, |b| b.st_v4::<U32>(Space::Shared, a, [zero; 4])),
                _ => b.when(whole8, |b| b.st_v4::<U32>(Space::Shared, a, [zero; 4])),
            }
        }
        b.warp_sync(FULL_MASK);

        let raw = b.label("raw");
        let commit = b.label("commit");
        let out = b.mov(0u32);
        let last_match_end = b.sub(p_len, 5u32);
        let ext_limit = b.add(spage, last_match_end);
        let pc = Page {
            ln,
            lane0,
            index: page,
            info,
            packed,
            table,
            spage,
            scratch,
            p_len,
            hash_shift,
            out,
            raw: raw.clone(),
            ext_fwd,
            ext_step,
            ext_k,
            ext_limit,
            lane_m1,
            spage_lane_m1,
            scratch_lane,
            variant,
        };
        b.comment("pages under 13 bytes are stored raw; all-zero pages skip the parse");
        let short = b.setp(Cmp::Lt, p_len, 13u32);
        b.bra_uni_if(short, &raw);
        let parse = b.label("parse");
        b.bra_uni_if(nonzero, &parse);
        b.comment("all-zero page: 1 literal, an offset-1 match to P - 5, 5 literals");
        // All-zero page: the parse would give 1 literal, an offset-1 match to P - 5, 5 literals.
        let one = b.mov(1u32);
        let ml = b.sub(p_len, 6u32);
        emit_sequence(b, &pc, zero, one, Some(Match::new(one, ml)));
        let tail = b.sub(p_len, 5u32);
        let five = b.mov(5u32);
        emit_sequence(b, &pc, tail, five, None);
        b.bra_uni(&commit);
        b.place(&parse);
        if variant.masks {
            parse_page_masks(b, &pc);
        } else {
            parse_page(b, &pc);
        }
        b.place(&commit);
        b.comment("store the LZ4 block");
        finish(b, &pc, Stored::Block);
        let next = b.label("next_page");
        b.bra_uni(&next);
        b.place(&raw);
        b.comment("store the page raw (it does not compress)");
        b.mov_to(out, p_len);
        finish(b, &pc, Stored::Raw);
        b.place(&next);
    });
    Module::single(target, b.finish())
}

/// `table_halvings` of a length in a register: `(len <= 4096) + (len <= 2048)` (with `small`,
/// [`Variant::small`]: one more, at most 2).
fn table_halvings(b: &mut KernelBuilder, len: Reg<U32>, small: bool) -> Reg<U32> {
    let le4 = b.setp(Cmp::Le, len, 4096u32);
    let le2 = b.setp(Cmp::Le, len, 2048u32);
    let h4 = b.selp(1u32, 0u32, le4);
    let h2 = b.selp(1u32, 0u32, le2);
    let h = b.add(h4, h2);
    if small {
        let h = b.add(h, 1u32);
        b.min(h, 2u32)
    } else {
        h
    }
}

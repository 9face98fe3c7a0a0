//! `lz4_compress`: stores pages as LZ4 blocks, one warp per page, by the specification in
//! `crate::lz4::block_encode` (byte-identical to `compress_page`).
//!
//! Launch: 1-D grid, blocks of 32..=[`MAX_BLOCK`] threads (whole warps), dynamic shared memory
//! `warps_per_block * compress_shared_per_warp(page_bytes)`. Warps take pages from a counter
//! (`info[0]`, zeroed by the host with `info[1]` before the launch), so any grid size works.
//!
//! Parameters: `input` (the batch, pages back to back, 16-byte aligned), `input_bytes`,
//! `page_bytes` (a multiple of 1024, at most 65536), `n_pages` (= ceil(input_bytes/page_bytes)),
//! `scratch` (`page_bytes` per warp of the grid), `packed` (capacity `n_pages * page_bytes`), `info`
//! (u32 words: `[0]` page counter, `[1]` bytes allocated in `packed`, `[2..4]` unused, then per
//! page `[4 + 2k]` = stored bytes | [`RAW_FLAG`](super::RAW_FLAG), `[5 + 2k]` = byte offset of the
//! page in `packed`, a multiple of 16).
//!
//! Shared memory per warp: the u16 hash table sized for `page_bytes` (`2^L` entries, `L` = 10, 11
//! or 12 as the spec's `hash_log`), then the staged page and 16 bytes of slack.
//!
//! Per page, a warp: copies the page into its shared stage with 16-byte loads, OR-ing all bytes;
//! zeroes the `2^L` entries of the page's table (`L` from its own length; 4, 8 or 16 vector stores
//! per lane); takes the all-zero or short
//! (`P < 13`, raw) fast path, or parses windows of 32 positions: lane `i` hashes position
//! `cursor + i` (two aligned shared words and a byte permute), `match.any` on the hash gives each
//! lane its highest earlier peer, else the table entry is the candidate; a ballot of valid lanes
//! picks the first; inserts are made by the highest lane of each hash group among the inserting
//! lanes (no atomics); forward and backward extension compare 32 bytes per step (byte loads and
//! a ballot); lanes write each sequence cooperatively, 32 bytes per step, into the warp's global
//! scratch. Once the bytes written plus those that must follow reach `P`, the page is stored raw.
//! Finally lane 0 reserves the stored size (rounded up to 16) in `packed` with one atomic, and
//! the warp copies the block (or the raw page) there with 16-byte stores.

use super::emit::emit_sequence;
use super::extend::extend;
use super::page_io::{finish, stage};
use super::{
    bcast, highest_bit, ld_shared_u32_unaligned, lowest_bit, ubra_if, ubra_unless, uloop, Lanes,
    MAX_TABLE_BYTES, STAGE_SLACK_BYTES,
};
use crate::ptx::*;

/// Most threads per block (5 warps: what 1 KiB pages fit in 48 KiB; a larger bound makes ptxas
/// cap registers at 80 and spill).
pub const MAX_BLOCK: u32 = 160;
/// Register bound per thread. ptxas alone takes 88 (sm_90), which lets an SM quarter hold 5
/// warps; at 72 (ptxas then uses 70, no spills; 80 or 64 spill) it holds 7, and with the 8 KiB
/// table of 4 KiB pages shared memory holds 27 warps per SM instead of 20.
pub const MAX_REGS: u32 = 72;
/// Words before the per-page entries in `info`.
pub const INFO_HEADER_WORDS: u32 = 4;
/// Fibonacci hash multiplier of the spec.
const HASH_MULTIPLIER: u32 = 2_654_435_761;

/// What the per-page code needs: addresses, lane constants and loop-carried registers.
pub(super) struct Page {
    pub(super) ln: Lanes,
    pub(super) table: Reg<U32>,
    pub(super) spage: Reg<U32>,
    pub(super) scratch: Reg<U64>,
    pub(super) p_len: Reg<U32>,
    /// `32 - L`: the hash's right shift for this page's table of `2^L` buckets.
    pub(super) hash_shift: Reg<U32>,
    /// Bytes of the block written to scratch so far (warp-uniform).
    pub(super) out: Reg<U32>,
    pub(super) raw: Label,
    /// Combined extension step: lane < 16, its byte step (4 + lane, or 15 - lane backwards),
    /// its backward distance (lane - 15), and the forward limit as a shared address.
    pub(super) ext_fwd: Reg<Pred>,
    pub(super) ext_step: Reg<U32>,
    pub(super) ext_k: Reg<U32>,
    pub(super) ext_limit: Reg<U32>,
    /// `lane - 1`, `spage + lane - 1` and `scratch + lane`: per-lane bases of sequence bytes.
    pub(super) lane_m1: Reg<U32>,
    pub(super) spage_lane_m1: Reg<U32>,
    pub(super) scratch_lane: Reg<U64>,
}

/// Builds the module.
pub fn build(target: Target) -> Module {
    let mut b = KernelBuilder::new("lz4_compress");
    b.maxntid(MAX_BLOCK, 1, 1);
    b.maxnreg(MAX_REGS);
    let input = b.param::<U64>("input");
    let input_bytes = b.param::<U32>("input_bytes");
    let page_bytes = b.param::<U32>("page_bytes");
    let n_pages = b.param::<U32>("n_pages");
    let scratch = b.param::<U64>("scratch");
    let packed = b.param::<U64>("packed");
    let info = b.param::<U64>("info");
    let input = b.global_ptr(&input);
    let input_bytes = b.ld_param(&input_bytes);
    let page_bytes = b.ld_param(&page_bytes);
    let n_pages = b.ld_param(&n_pages);
    let scratch = b.global_ptr(&scratch);
    let packed = b.global_ptr(&packed);
    let info = b.global_ptr(&info);
    let smem = b.dynamic_shared::<U32>("lz4c_smem");

    let ln = Lanes::new(&mut b);
    let tid = b.special(Special::TidX);
    let warp = b.shr(tid, 5u32);
    let ntid = b.special(Special::NtidX);
    let warps = b.shr(ntid, 5u32);
    let cta = b.special(Special::CtaidX);
    let gwarp = b.mad(cta, warps, warp);
    let halvings = table_halvings(&mut b, page_bytes);
    let warp_table = b.shr(MAX_TABLE_BYTES, halvings);
    let per_warp = b.add(page_bytes, warp_table);
    let per_warp = b.add(per_warp, STAGE_SLACK_BYTES);
    let sbase = b.shared_base(&smem);
    let table = b.mad(warp, per_warp, sbase);
    let spage = b.add(table, warp_table);
    let scratch = b.mad_wide(gwarp, page_bytes, scratch);
    let lane0 = b.setp(Cmp::Eq, ln.lane, 0u32);
    let zero = b.mov(0u32);
    let stage_steps = b.shr(page_bytes, 9u32);
    let ext_fwd = b.setp(Cmp::Lt, ln.lane, 16u32);
    let fwd_step = b.add(ln.lane, 4u32);
    let ext_k = b.sub(ln.lane, 15u32);
    let bwd_step = b.sub(15u32, ln.lane);
    let ext_step = b.selp(fwd_step, bwd_step, ext_fwd);
    let lane_m1 = b.sub(ln.lane, 1u32);
    let spage_lane_m1 = b.add(spage, lane_m1);
    let scratch_lane = b.index_addr(scratch, ln.lane, 1);

    uloop(&mut b, |b, all_done, _| {
        let pg = b.mov(0u32);
        b.guarded(lane0, false, |b| {
            let t = b.atom::<U32>(Space::Global, AtomOp::Add, info, 1u32);
            b.mov_to(pg, t);
        });
        let pg = bcast(b, pg, 0u32);
        let finished = b.setp(Cmp::Ge, pg, n_pages);
        ubra_if(b, finished, all_done);
        let start = b.mul(pg, page_bytes);
        let avail = b.max(input_bytes, start);
        let avail = b.sub(avail, start);
        let p_len = b.min(avail, page_bytes);
        let src = b.mad_wide(pg, page_bytes, input);
        let nonzero = stage(b, &ln, src, spage, p_len, stage_steps);
        // This page's table: 2 KiB always, 4 KiB unless halved twice, 8 KiB unless halved.
        let halvings = table_halvings(b, p_len);
        let hash_shift = b.add(halvings, 20u32);
        let tl = b.mad(ln.lane, 16u32, table);
        let half4 = b.setp(Cmp::Ne, halvings, 2u32);
        let whole8 = b.setp(Cmp::Eq, halvings, 0u32);
        for i in 0..16u32 {
            let a = Addr::from(tl).off(512 * i as i64);
            match i {
                0..4 => b.st_v4::<U32>(Space::Shared, a, [zero; 4]),
                4..8 => b.guarded(half4, false, |b| {
                    b.st_v4::<U32>(Space::Shared, a, [zero; 4])
                }),
                _ => b.guarded(whole8, false, |b| {
                    b.st_v4::<U32>(Space::Shared, a, [zero; 4])
                }),
            }
        }
        b.warp_sync(FULL_MASK);

        let raw = b.label("raw");
        let commit = b.label("commit");
        let out = b.mov(0u32);
        let lim = b.sub(p_len, 5u32);
        let ext_limit = b.add(spage, lim);
        let pc = Page {
            ln,
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
        };
        let short = b.setp(Cmp::Lt, p_len, 13u32);
        ubra_if(b, short, &raw);
        let parse = b.label("parse");
        ubra_if(b, nonzero, &parse);
        // All-zero page: the parse would give 1 literal, an offset-1 match to P - 5, 5 literals.
        let one = b.mov(1u32);
        let ml = b.sub(p_len, 6u32);
        emit_sequence(b, &pc, zero, one, Some((one, ml)));
        let tail = b.sub(p_len, 5u32);
        let five = b.mov(5u32);
        emit_sequence(b, &pc, tail, five, None);
        b.bra_uni(&commit);
        b.place(&parse);
        parse_page(b, &pc);
        b.place(&commit);
        finish(b, &pc, lane0, info, pg, packed, scratch, false);
        let next = b.label("next_page");
        b.bra_uni(&next);
        b.place(&raw);
        b.mov_to(out, p_len);
        finish(b, &pc, lane0, info, pg, packed, scratch, true);
        b.place(&next);
    });
    Module::single(target, b.finish())
}

/// `table_halvings` of a length in a register: `(len <= 4096) + (len <= 2048)`.
fn table_halvings(b: &mut KernelBuilder, len: Reg<U32>) -> Reg<U32> {
    let le4 = b.setp(Cmp::Le, len, 4096u32);
    let le2 = b.setp(Cmp::Le, len, 2048u32);
    let h4 = b.selp(1u32, 0u32, le4);
    let h2 = b.selp(1u32, 0u32, le2);
    b.add(h4, h2)
}

/// Hash bucket (already scaled to a byte offset in the table) of the 4 bytes `v`.
fn bucket_offset(b: &mut KernelBuilder, v: Reg<U32>, hash_shift: Reg<U32>) -> Reg<U32> {
    let m = b.mul(v, HASH_MULTIPLIER);
    let h = b.shr(m, hash_shift);
    b.shl(h, 1u32)
}

/// The window loop of the spec; falls through after writing the final sequence.
///
/// After a match ending at `end` inside the window, the lanes from `end` on stay: their hashes
/// and match groups are unchanged, so only their lookups are repeated (peers restricted to those
/// lanes, the table re-read). This gives the same parse as fresh windows from `end`, since any
/// split into windows yields the sequential greedy parse (see the spec).
fn parse_page(b: &mut KernelBuilder, pc: &Page) {
    let ln = pc.ln;
    let base = b.mov(0u32);
    let anchor = b.mov(0u32);
    let last_start = b.sub(pc.p_len, 12u32);
    let limit = b.sub(pc.p_len, 5u32);
    let hash_end = b.sub(pc.p_len, 4u32);
    let lane0 = b.setp(Cmp::Eq, ln.lane, 0u32);
    uloop(b, |b, windows_done, next_window| {
        let over = b.setp(Cmp::Gt, base, last_start);
        ubra_if(b, over, windows_done);
        let p = b.add(base, ln.lane);
        let active = b.setp(Cmp::Le, p, last_start);
        // Every hashable position gets its true hash (needed for the end - 2 insert below).
        let q = b.min(p, hash_end);
        let qa = b.add(pc.spage, q);
        let v = ld_shared_u32_unaligned(b, qa);
        let hoff = bucket_offset(b, v, pc.hash_shift);
        let grp = b.match_any(hoff);
        let active_mask = b.ballot(active);
        let taddr = b.add(pc.table, hoff);
        let pos1 = b.add(p, 1u32);
        let first_live = b.mov(0u32);
        uloop(b, |b, no_match, _| {
            let live = b.shl(u32::MAX, first_live);
            let earlier = b.and(grp, ln.lt);
            let earlier = b.and(earlier, live);
            let has_peer = b.setp(Cmp::Ne, earlier, 0u32);
            let peer = highest_bit(b, earlier);
            let entry = b.ld_narrow::<U32>(Space::Shared, Narrow::U16, taddr);
            let c_peer = b.add(base, peer);
            let c_table = b.sub(entry, 1u32);
            let c = b.selp(c_peer, c_table, has_peer);
            let in_table = b.setp(Cmp::Ne, entry, 0u32);
            let have = b.or(has_peer, in_table);
            // Only live, active lanes look up (idle lanes may have idle peers past the end).
            let live_me = b.setp(Cmp::Ge, ln.lane, first_live);
            let have = b.and(have, live_me);
            let have = b.and(have, active);
            let cq = b.selp(c, q, have);
            let ca = b.add(pc.spage, cq);
            let cv = ld_shared_u32_unaligned(b, ca);
            // Insert rule, prepared off the critical path: this lane writes when it inserts
            // (live, active, at most f) and the next higher inserting lane of its hash group, if
            // any, lies beyond f.
            let act_live = b.and(active_mask, live);
            let group = b.and(grp, act_live);
            let above = b.and(group, ln.gt);
            let next_up = lowest_bit(b, above);
            let may_write = b.and(live_me, active);
            let same = b.setp(Cmp::Eq, cv, v);
            let valid = b.and(same, have);
            let m = b.ballot(valid);
            // Every lookup of this (sub-)window reads the table before any insert of it.
            b.warp_sync(FULL_MASK);
            let found = b.setp(Cmp::Ne, m, 0u32);
            let f = lowest_bit(b, m);
            // Lanes up to f insert, or every live active lane when none matched (f = 32, taken
            // as 31: all lanes, and a writer needs no inserting lane above it at all).
            let f_ins = b.min(f, 31u32);
            let upto = b.setp(Cmp::Le, ln.lane, f_ins);
            let last_of_group = b.setp(Cmp::Gt, next_up, f_ins);
            let writer = b.and(upto, last_of_group);
            let writer = b.and(writer, may_write);
            b.guarded(writer, false, |b| {
                b.st_narrow(Space::Shared, Narrow::U16, taddr, pos1)
            });
            ubra_unless(b, found, no_match);

            let p0 = b.add(base, f);
            let c0 = bcast(b, c, f);
            let (end, back) = extend(b, pc, p0, c0, anchor, limit);
            let ps = b.sub(p0, back);
            let lit = b.sub(ps, anchor);
            let ml = b.sub(end, ps);
            let dist = b.sub(p0, c0);
            // Insert end - 2 after the lane inserts (it is the larger position); its hash is a
            // lane's when it lies in this window. Done before the emission, which does not
            // touch the table, so the two overlap.
            b.warp_sync(FULL_MASK);
            let e2 = b.sub(end, 2u32);
            let rel2 = b.sub(e2, base);
            let h2 = b.shfl(Shfl::Idx, hoff, rel2);
            let far = b.setp(Cmp::Ge, rel2, 32u32);
            let have_h2 = b.label("have_h2");
            ubra_unless(b, far, &have_h2);
            let ea = b.add(pc.spage, e2);
            let ev = ld_shared_u32_unaligned(b, ea);
            let eh = bucket_offset(b, ev, pc.hash_shift);
            b.mov_to(h2, eh);
            b.place(&have_h2);
            let et = b.add(pc.table, h2);
            let e1 = b.sub(end, 1u32);
            b.guarded(lane0, false, |b| {
                b.st_narrow(Space::Shared, Narrow::U16, et, e1)
            });
            emit_sequence(b, pc, anchor, lit, Some((dist, ml)));
            b.mov_to(anchor, end);
            b.warp_sync(FULL_MASK);
            let rel = b.sub(end, base);
            let outside = b.setp(Cmp::Ge, rel, 32u32);
            b.guarded(outside, false, |b| b.mov_to(base, end));
            ubra_if(b, outside, next_window);
            b.mov_to(first_live, rel);
        });
        let nb = b.add(base, 32u32);
        b.mov_to(base, nb);
        b.warp_sync(FULL_MASK);
    });
    let lit = b.sub(pc.p_len, anchor);
    emit_sequence(b, pc, anchor, lit, None);
}

//! The window parse of `lz4_compress` (see the [folder docs](super)): hashes, match groups, table
//! lookups and inserts of 32 positions at a time, then extension and emission of each match.

use super::emit::emit_sequence;
use super::extend::extend;
use super::{Page, HASH_MULTIPLIER};
use crate::kernels::lz4::warp::{bcast, highest_bit, ld_shared_u32_unaligned, lowest_bit};
use crate::ptx::*;

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
pub(super) fn parse_page(b: &mut KernelBuilder, pc: &Page) {
    let ln = pc.ln;
    let base = b.mov(0u32);
    let anchor = b.mov(0u32);
    let last_start = b.sub(pc.p_len, 12u32);
    let limit = b.sub(pc.p_len, 5u32);
    let hash_end = b.sub(pc.p_len, 4u32);
    let lane0 = b.setp(Cmp::Eq, ln.lane, 0u32);
    b.loop_with(LoopBranch::Uniform, |b, windows_done, next_window| {
        let over = b.setp(Cmp::Gt, base, last_start);
        b.bra_uni_if(over, windows_done);
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
        b.loop_with(LoopBranch::Uniform, |b, no_match, _| {
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
            b.bra_uni_unless(found, no_match);

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
            b.bra_uni_unless(far, &have_h2);
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
            b.bra_uni_if(outside, next_window);
            b.mov_to(first_live, rel);
        });
        let nb = b.add(base, 32u32);
        b.mov_to(base, nb);
        b.warp_sync(FULL_MASK);
    });
    let lit = b.sub(pc.p_len, anchor);
    emit_sequence(b, pc, anchor, lit, None);
}

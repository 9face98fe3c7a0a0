//! The window parse of `lz4_compress` (see the [folder docs](super)) of session 8's build
//! (`PTXFLOW_LZ4_COMPRESS=reread`; the table's build is [`parse_masks`](super::parse_masks)):
//! hashes, match groups, table lookups and inserts of 32 positions at a time, then extension and
//! emission of each match.

use super::emit::emit_sequence;
use super::extend::extend;
use super::{Match, Page, HASH_MULTIPLIER};
use crate::kernels::lz4::warp::{bcast, highest_bit, ld_shared_u32_unaligned, lowest_bit};
use crate::ptx::*;

/// Hash bucket (already scaled to a byte offset in the table) of the 4 bytes `word`.
fn bucket_offset(b: &mut KernelBuilder, word: Reg<U32>, hash_shift: Reg<U32>) -> Reg<U32> {
    let product = b.mul(word, HASH_MULTIPLIER);
    let hash = b.shr(product, hash_shift);
    b.shl(hash, 1u32)
}

/// The window loop of the spec; falls through after writing the final sequence.
///
/// After a match ending at `end` inside the window, the lanes from `end` on stay: their hashes
/// and match groups are unchanged, so only their lookups are repeated (peers restricted to those
/// lanes, the table re-read). This gives the same parse as fresh windows from `end`, since any
/// split into windows yields the sequential greedy parse (see the spec).
pub(super) fn parse_page(b: &mut KernelBuilder, pc: &Page) {
    b.comment("parse: windows of 32 positions from the page start");
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
        b.comment("window: hash 32 positions, group equal hashes (match.any)");
        let pos = b.add(base, ln.lane);
        let active = b.setp(Cmp::Le, pos, last_start);
        // Every hashable position gets its true hash (needed for the end - 2 insert below).
        let hash_pos = b.min(pos, hash_end);
        let hash_addr = b.add(pc.spage, hash_pos);
        let word = ld_shared_u32_unaligned(b, hash_addr);
        let bucket = bucket_offset(b, word, pc.hash_shift);
        let group_mask = b.match_any(bucket);
        let active_mask = b.ballot(active);
        let slot = b.add(pc.table, bucket);
        let pos_plus1 = b.add(pos, 1u32);
        let first_live = b.mov(0u32);
        b.loop_with(LoopBranch::Uniform, |b, no_match, _| {
            b.comment("lookup: peer or table candidate per lane, ballot of matches, table inserts");
            let live = b.shl(u32::MAX, first_live);
            let earlier = b.and(group_mask, ln.lt);
            let earlier = b.and(earlier, live);
            let has_peer = b.setp(Cmp::Ne, earlier, 0u32);
            let peer = highest_bit(b, earlier);
            let entry = b.ld_narrow::<U32>(Space::Shared, Narrow::U16, slot);
            let cand_peer = b.add(base, peer);
            let cand_table = b.sub(entry, 1u32);
            let cand = b.selp(cand_peer, cand_table, has_peer);
            let in_table = b.setp(Cmp::Ne, entry, 0u32);
            let have = b.or(has_peer, in_table);
            // Only live, active lanes look up (idle lanes may have idle peers past the end).
            let live_me = b.setp(Cmp::Ge, ln.lane, first_live);
            let have = b.and(have, live_me);
            let have = b.and(have, active);
            let cand_read = b.selp(cand, hash_pos, have);
            let cand_addr = b.add(pc.spage, cand_read);
            let cand_word = ld_shared_u32_unaligned(b, cand_addr);
            // Insert rule, prepared off the critical path: this lane writes when it inserts
            // (live, active, at most `first`) and the next higher inserting lane of its hash
            // group, if any, lies beyond `first`.
            let act_live = b.and(active_mask, live);
            let group = b.and(group_mask, act_live);
            let above = b.and(group, ln.gt);
            let next_up = lowest_bit(b, above);
            let may_write = b.and(live_me, active);
            let same = b.setp(Cmp::Eq, cand_word, word);
            let valid = b.and(same, have);
            let matched_mask = b.ballot(valid);
            // Every lookup of this (sub-)window reads the table before any insert of it.
            b.warp_sync(FULL_MASK);
            let found = b.setp(Cmp::Ne, matched_mask, 0u32);
            let first = lowest_bit(b, matched_mask);
            // Lanes up to `first` insert, or every live active lane when none matched (`first` =
            // 32, taken as 31: all lanes, and a writer needs no inserting lane above it at all).
            let last_inserter = b.min(first, 31u32);
            let upto = b.setp(Cmp::Le, ln.lane, last_inserter);
            let last_of_group = b.setp(Cmp::Gt, next_up, last_inserter);
            let writer = b.and(upto, last_of_group);
            let writer = b.and(writer, may_write);
            b.when(writer, |b| {
                b.st_narrow(Space::Shared, Narrow::U16, slot, pos_plus1)
            });
            b.bra_uni_unless(found, no_match);

            b.comment(
                "match at the first matching lane: extend, insert end - 2, emit the sequence",
            );
            let match_pos = b.add(base, first);
            let match_cand = bcast(b, cand, first);
            let (end, back) = extend(b, pc, match_pos, match_cand, anchor, limit);
            let seq_start = b.sub(match_pos, back);
            let lit = b.sub(seq_start, anchor);
            let ml = b.sub(end, seq_start);
            let dist = b.sub(match_pos, match_cand);
            // Insert end - 2 after the lane inserts (it is the larger position); its hash is a
            // lane's when it lies in this window. Done before the emission, which does not
            // touch the table, so the two overlap.
            b.warp_sync(FULL_MASK);
            let end_m2 = b.sub(end, 2u32);
            let end_m2_lane = b.sub(end_m2, base);
            let end_m2_bucket = b.shfl(Shfl::Idx, bucket, end_m2_lane);
            let far = b.setp(Cmp::Ge, end_m2_lane, 32u32);
            let have_h2 = b.label("have_h2");
            b.bra_uni_unless(far, &have_h2);
            let end_m2_addr = b.add(pc.spage, end_m2);
            let end_m2_word = ld_shared_u32_unaligned(b, end_m2_addr);
            let end_m2_hash = bucket_offset(b, end_m2_word, pc.hash_shift);
            b.mov_to(end_m2_bucket, end_m2_hash);
            b.place(&have_h2);
            let end_m2_slot = b.add(pc.table, end_m2_bucket);
            let end_m1 = b.sub(end, 1u32);
            b.when(lane0, |b| {
                b.st_narrow(Space::Shared, Narrow::U16, end_m2_slot, end_m1)
            });
            emit_sequence(b, pc, anchor, lit, Some(Match::new(dist, ml)));
            b.mov_to(anchor, end);
            b.warp_sync(FULL_MASK);
            let rel = b.sub(end, base);
            let outside = b.setp(Cmp::Ge, rel, 32u32);
            b.when(outside, |b| b.mov_to(base, end));
            b.bra_uni_if(outside, next_window);
            b.mov_to(first_live, rel);
        });
        let next_base = b.add(base, 32u32);
        b.mov_to(base, next_base);
        b.warp_sync(FULL_MASK);
    });
    b.comment("last sequence: the literals after the last match");
    let lit = b.sub(pc.p_len, anchor);
    emit_sequence(b, pc, anchor, lit, None);
}

//! The window parse of `lz4_compress` with candidate masks (issue 17, session 9): the same parse
//! as [`parse`](super::parse) (the spec's sequential greedy parse, byte for byte), with the
//! table read once per window instead of once per match.
//!
//! Per window each lane reads its table entry once, and checks that candidate's 4 bytes once.
//! Which window positions are in the table by the time lane `j` is tested is a warp-uniform mask
//! (`inserted`: the positions tested before the last match, and its `end - 2`; the lanes from
//! the last match's end on are tested in order): lane `j`'s sequential candidate is the highest
//! lane of its hash group below `j` in `inserted | live`, whose 4 bytes are a shuffle away, or
//! else the entry read at the window's start. A match thus costs one ballot and a few mask
//! operations instead of a table read, a dependent candidate read and the insert rule. The table
//! is written once at the window's end: the highest inserted lane of each hash group, then the
//! `end - 2` of a match reaching past the window (a larger position than every lane's).
//!
//! The [`Variant`](super::Variant) switches shape the loop: `solo` (a window where no lane has an
//! earlier peer takes a loop whose candidates are the entries, checked by one ballot), `pipe`
//! (the next lookup is emitted beside each sequence's emission, in one basic block), `probe`
//! (`match.any` only where shared atomics on the entries show two lanes in one bucket: it stalls
//! less on `match.any` but executes more instructions, and measured slower), `trim` (fewer
//! instructions per window).

use super::direct::match_step_direct;
use super::emit::emit_sequence;
use super::lane_ext::{lane_runs, next_prev, runs_of_words};
use super::table::{bucket_key, ld_word, probe_groups, slot_of};
use super::window::{match_step, Window};
use super::Page;
use crate::ptx::*;

/// The window loop of the spec with candidate masks; falls through after writing the final
/// sequence.
pub(super) fn parse_page_masks(b: &mut KernelBuilder, pc: &Page) {
    b.comment("parse (candidate masks): windows of 32 positions from the page start");
    let ln = pc.ln;
    let lane = ln.lane;
    let base = b.mov(0u32);
    let anchor = b.mov(0u32);
    let last_start = b.sub(pc.p_len, 12u32);
    let limit = b.sub(pc.p_len, 5u32);
    let hash_end = b.sub(pc.p_len, 4u32);
    let lane0 = b.setp(Cmp::Eq, lane, 0u32);
    let lane_bit = b.shl(1u32, lane);
    // Entries of pages up to 32 KiB leave bit 15 free for the probe's marks.
    let probe_ok = pc
        .variant
        .probe
        .then(|| b.setp(Cmp::Le, pc.p_len, 32768u32));
    b.loop_with(LoopBranch::Uniform, |b, windows_done, _| {
        let over = b.setp(Cmp::Gt, base, last_start);
        b.bra_uni_if(over, windows_done);
        b.comment("window: hash 32 positions, group equal hashes, read each lane's entry once");
        let pos = b.add(base, lane);
        let active = b.setp(Cmp::Le, pos, last_start);
        let active_mask = b.ballot(active);
        // Every hashable position gets its true hash (needed for the end - 2 insert).
        let hash_pos = b.min(pos, hash_end);
        let hash_addr = b.add(pc.spage, hash_pos);
        let word = ld_word(b, pc, hash_addr);
        let bucket = bucket_key(b, pc, word);
        let group = if pc.variant.probe {
            b.mov(lane_bit)
        } else {
            b.match_any(bucket)
        };
        let slot = slot_of(b, pc, bucket);
        let entry = b.ld_narrow::<U32>(Space::Shared, Narrow::U16, slot);
        if let Some(probe_ok) = probe_ok {
            probe_groups(b, bucket, slot, group, probe_ok);
        }
        let in_table = b.setp(Cmp::Ne, entry, 0u32);
        let table_cand = b.sub(entry, 1u32);
        // With `trim` an empty entry reads the byte before the stage (the warp's table): its
        // word is replaced below.
        let table_read = if pc.variant.trim {
            table_cand
        } else {
            b.selp(table_cand, hash_pos, in_table)
        };
        let table_addr = b.add(pc.spage, table_read);
        let entry_word = ld_word(b, pc, table_addr);
        // An empty entry never matches: its word is the complement of this lane's.
        let not_word = b.not(word);
        // With `keyed` the lookups' word (empty entries replaced) is made after the solo
        // branch: a solo window tests `in_table` in its ballot instead.
        let keyed = pc.variant.keyed_windows();
        let table_word = if keyed {
            entry_word
        } else {
            b.selp(entry_word, not_word, in_table)
        };
        let table_dist = b.sub(pos, table_cand);
        // match.any is slow: its first use comes after the table reads.
        let group_lt = b.and(group, ln.lt);
        let inserted = b.mov(0u32);
        let live = b.mov(u32::MAX);
        let next_base = b.add(base, 32u32);
        let window_end = b.label("window_end");
        let w = Window {
            base,
            anchor,
            limit,
            inserted,
            live,
            next_base,
            window_end: window_end.clone(),
        };
        let solo = pc.variant.solo.then(|| {
            // No lane has an earlier peer in its bucket (most windows of text): every lane's
            // candidate is its entry, whatever the mask, so one ballot serves every match.
            let (solo, no_more) = (b.label("solo"), b.label("no_more"));
            let lonely = b.setp(Cmp::Eq, group_lt, 0u32);
            let all_lonely = b.vote_all(lonely);
            b.bra_uni_if(all_lonely, &solo);
            let pairs = pc.variant.pairs.then(|| {
                // Every lane's earlier peer (at most one) holds another word: a hash collision,
                // never a candidate, so the lane's candidate is its entry until the peer is in
                // the table, and never valid after (the solo loop with those lanes masked).
                let pairs = b.label("pairs");
                let z = b.clz(group_lt);
                let peer = b.sub(31u32, z);
                let peer_word = b.shfl(Shfl::Idx, word, peer);
                let other = b.setp(Cmp::Ne, peer_word, word);
                let below = b.sub(group_lt, 1u32);
                let two = b.and(group_lt, below);
                let single = b.setp(Cmp::Eq, two, 0u32);
                let collision = b.and(single, other);
                let ok = b.or(collision, lonely);
                let all_ok = b.vote_all(ok);
                b.bra_uni_if(all_ok, &pairs);
                pairs
            });
            (solo, no_more, pairs)
        });
        if keyed {
            // (a solo or pairs window tests `in_table` itself)
            b.when_not(in_table, |b| b.mov_to(entry_word, not_word));
        }
        // The lookup: each lane's candidate is its highest earlier peer in the lanes in the
        // table by its turn (`inserted | live`), else its entry; returns the lowest lanes'
        // ballot of valid candidates, `z` (31 - peer) and "has a peer".
        let lookup = move |b: &mut KernelBuilder| {
            b.comment("lookup: peer in the inserted or live lanes, else the window's entry");
            let known = b.or(inserted, live);
            let peers = b.and(known, group_lt);
            let has_peer = b.setp(Cmp::Ne, peers, 0u32);
            let z = b.clz(peers);
            let peer = b.sub(31u32, z);
            let peer_word = b.shfl(Shfl::Idx, word, peer);
            let cand_word = b.selp(peer_word, table_word, has_peer);
            let same = b.setp(Cmp::Eq, cand_word, word);
            let matched = b.ballot(same);
            let matched = b.and(matched, live);
            let matched = b.and(matched, active_mask);
            (matched, z, has_peer, known)
        };
        // lane - peer, with peer = 31 - z.
        let peer_dist = move |b: &mut KernelBuilder, z: Reg<U32>, has_peer: Reg<Pred>| {
            let peer_dist = b.add(lane, z);
            let peer_dist = b.sub(peer_dist, 31u32);
            b.selp(peer_dist, table_dist, has_peer)
        };
        if pc.variant.peer_runs() {
            // Each lane's packed runs for its entry's candidate and for its highest earlier
            // peer; a lookup picks the one of the candidate it found.
            let z_hi = b.clz(group_lt);
            let p_words = next_prev(b, hash_addr);
            let c_words = next_prev(b, table_addr);
            let v_entry = runs_of_words(b, pc, p_words, c_words, table_cand, table_dist);
            let q_hi = b.sub(31u32, z_hi);
            let peer_pos = b.add(base, q_hi);
            // Lanes past the page's last word (the last window) share its word, so they are
            // each other's peers: their peers' words are read at most there.
            let peer_pos = b.min(peer_pos, hash_end);
            let peer_addr = b.add(pc.spage, peer_pos);
            let peer_gap = b.add(lane, z_hi);
            let peer_gap = b.sub(peer_gap, 31u32);
            let c_words = next_prev(b, peer_addr);
            let v_peer = runs_of_words(b, pc, p_words, c_words, peer_pos, peer_gap);
            // A lower peer than the highest: its distance with the "may go on" flag, so the
            // match takes the 32-lane extension.
            let packed = move |b: &mut KernelBuilder, z: Reg<U32>, has_peer: Reg<Pred>| {
                let gap = b.add(lane, z);
                let other = b.add(gap, 0x4000_0000u32 - 31);
                // The peer found is the highest earlier one: z == z_hi, i.e. the peers known
                // hold group_lt's top bit (z_hi is not kept: registers).
                let known = b.or(inserted, live);
                let peers = b.and(known, group_lt);
                let rest = b.xor(group_lt, peers);
                let highest = b.setp(Cmp::Lt, rest, peers);
                let v = b.selp(v_peer, other, highest);
                b.selp(v, v_entry, has_peer)
            };
            let (m0, z0, p0, _) = lookup(b);
            let m_reg = b.mov(m0);
            let v0 = packed(b, z0, p0);
            let v_reg = b.mov(v0);
            b.loop_with(LoopBranch::Uniform, |b, no_match, _| {
                let found = b.setp(Cmp::Ne, m_reg, 0u32);
                b.bra_uni_unless(found, no_match);
                let again = pc.variant.fastloop.then(|| b.label("peer_match"));
                if let Some(again) = &again {
                    b.place(again);
                }
                let mut next = |b: &mut KernelBuilder| {
                    let (m, z, p, _) = lookup(b);
                    b.mov_to(m_reg, m);
                    let v = packed(b, z, p);
                    b.mov_to(v_reg, v);
                };
                let again = again.as_ref().map(|again| (again, no_match));
                match_step_direct(b, pc, &w, m_reg, v_reg, &mut next, again);
            });
        } else if pc.variant.pipe {
            let (m0, z0, p0, _) = lookup(b);
            let (m_reg, z_reg, p_reg) = (b.mov(m0), b.mov(z0), b.mov(p0));
            b.loop_with(LoopBranch::Uniform, |b, no_match, _| {
                let found = b.setp(Cmp::Ne, m_reg, 0u32);
                b.bra_uni_unless(found, no_match);
                let known = b.or(inserted, live);
                let mut next = |b: &mut KernelBuilder| {
                    let (m, z, p, _) = lookup(b);
                    b.mov_to(m_reg, m);
                    b.mov_to(z_reg, z);
                    b.mov_to(p_reg, p);
                };
                match_step(
                    b,
                    pc,
                    &w,
                    m_reg,
                    known,
                    |b| peer_dist(b, z_reg, p_reg),
                    Some(&mut next),
                    None,
                );
            });
        } else {
            b.loop_with(LoopBranch::Uniform, |b, no_match, _| {
                let (matched, z, has_peer, known) = lookup(b);
                let found = b.setp(Cmp::Ne, matched, 0u32);
                b.bra_uni_unless(found, no_match);
                match_step(
                    b,
                    pc,
                    &w,
                    matched,
                    known,
                    |b| peer_dist(b, z, has_peer),
                    None,
                    None,
                );
            });
        }
        if let Some((solo, no_more, pairs)) = &solo {
            for (label, masked) in [(Some(solo), false), (pairs.as_ref(), true)] {
                let Some(label) = label else { continue };
                b.bra_uni(no_more);
                b.place(label);
                if masked {
                    b.comment("pairs window: the entries' ballot, lanes with a known peer masked");
                } else {
                    b.comment("solo window: the entries' ballot, once");
                }
                let same = if keyed {
                    // The entry's own word, and the entry in the table (one fused compare).
                    let same = b.setp(Cmp::Eq, entry_word, word);
                    b.and(same, in_table)
                } else {
                    b.setp(Cmp::Eq, table_word, word)
                };
                let valid = b.ballot(same);
                let valid = b.and(valid, active_mask);
                // The live lanes with a valid entry (and, masked, no earlier peer in the table).
                let open = move |b: &mut KernelBuilder| {
                    let m = b.and(valid, live);
                    if !masked {
                        return m;
                    }
                    let known = b.or(inserted, live);
                    let mine = b.and(group_lt, known);
                    let has = b.setp(Cmp::Ne, mine, 0u32);
                    let blocked = b.ballot(has);
                    let free = b.not(blocked);
                    b.and(m, free)
                };
                let direct = pc.variant.direct_solo();
                let solo_loop = |b: &mut KernelBuilder, runs: Option<Reg<U32>>| {
                    if pc.variant.pipe {
                        let m0 = open(b);
                        let m_reg = b.mov(m0);
                        b.loop_with(LoopBranch::Uniform, |b, no_match, _| {
                            let found = b.setp(Cmp::Ne, m_reg, 0u32);
                            b.bra_uni_unless(found, no_match);
                            let mut next = |b: &mut KernelBuilder| {
                                let m = open(b);
                                b.mov_to(m_reg, m);
                            };
                            if let (Some(runs), true) = (runs, direct) {
                                let again = pc.variant.fastloop.then(|| b.label("solo_match"));
                                if let Some(again) = &again {
                                    b.place(again);
                                }
                                let again = again.as_ref().map(|again| (again, no_match));
                                match_step_direct(b, pc, &w, m_reg, runs, &mut next, again);
                                return;
                            }
                            let known = b.or(inserted, live);
                            match_step(
                                b,
                                pc,
                                &w,
                                m_reg,
                                known,
                                |_| table_dist,
                                Some(&mut next),
                                runs,
                            );
                        });
                    } else {
                        b.loop_with(LoopBranch::Uniform, |b, no_match, _| {
                            let matched = open(b);
                            let found = b.setp(Cmp::Ne, matched, 0u32);
                            b.bra_uni_unless(found, no_match);
                            let known = b.or(inserted, live);
                            match_step(b, pc, &w, matched, known, |_| table_dist, None, runs);
                        });
                    }
                };
                match pc.variant.lanes {
                    0 => solo_loop(b, None),
                    1 => {
                        let runs = lane_runs(b, pc, hash_addr, table_addr, table_cand, table_dist);
                        solo_loop(b, Some(runs));
                    }
                    lanes => {
                        // Windows with few candidates keep the 32-lane extension per match.
                        let plain = b.label("solo_plain");
                        let n_valid = b.popc(valid);
                        let few = b.setp(Cmp::Lt, n_valid, lanes);
                        b.bra_uni_if(few, &plain);
                        let runs = lane_runs(b, pc, hash_addr, table_addr, table_cand, table_dist);
                        solo_loop(b, Some(runs));
                        b.bra_uni(no_more);
                        b.place(&plain);
                        solo_loop(b, None);
                    }
                }
            }
            b.place(no_more);
        }
        // No further match in the window: every live position was tested.
        let tested = b.and(live, active_mask);
        let ins = b.or(inserted, tested);
        b.mov_to(inserted, ins);
        b.place(&window_end);
        b.comment("window end: the highest inserted lane of each hash group writes its entry");
        // Every lookup of this window read the table before these writes.
        b.warp_sync(FULL_MASK);
        let writer = if pc.variant.trim {
            // The inserted lanes of this lane's group from this lane up are this lane alone.
            let ge = b.not(ln.lt);
            let mine = b.and(group, inserted);
            let mine = b.and(mine, ge);
            b.setp(Cmp::Eq, mine, lane_bit)
        } else {
            let mine = b.and(inserted, lane_bit);
            let is_inserted = b.setp(Cmp::Ne, mine, 0u32);
            let above = b.and(group, inserted);
            let above = b.and(above, ln.gt);
            let top = b.setp(Cmp::Eq, above, 0u32);
            b.and(is_inserted, top)
        };
        let pos_plus1 = b.add(pos, 1u32);
        b.when(writer, |b| {
            b.st_narrow(Space::Shared, Narrow::U16, slot, pos_plus1)
        });
        // A match that ended past the window inserts its end - 2 after the lanes.
        let span = b.sub(next_base, base);
        let far = b.setp(Cmp::Ge, span, 34u32);
        let near = b.label("near_end");
        b.bra_uni_unless(far, &near);
        b.warp_sync(FULL_MASK);
        let end_m2 = b.sub(next_base, 2u32);
        let end_m2_addr = b.add(pc.spage, end_m2);
        let end_m2_word = ld_word(b, pc, end_m2_addr);
        let end_m2_bucket = bucket_key(b, pc, end_m2_word);
        let end_m2_slot = slot_of(b, pc, end_m2_bucket);
        let end_m1 = b.sub(next_base, 1u32);
        b.when(lane0, |b| {
            b.st_narrow(Space::Shared, Narrow::U16, end_m2_slot, end_m1)
        });
        b.place(&near);
        b.mov_to(base, next_base);
        b.warp_sync(FULL_MASK);
    });
    b.comment("last sequence: the literals after the last match");
    let lit = b.sub(pc.p_len, anchor);
    emit_sequence(b, pc, anchor, lit, None);
}

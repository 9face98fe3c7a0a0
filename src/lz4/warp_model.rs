//! A literal, lane-by-lane simulation of the GPU kernel's parse (one warp of 32 lanes per page),
//! following the specification in [`super::block_encode`] step by step: 32 lookups against the
//! table as it was before the window, in-window candidates by comparing lane hashes (the kernel's
//! `match.any.sync`), the first valid lane by a ballot, inserts as "largest position per bucket
//! wins" (the kernel's `atom.max`, order-independent), forward extension 32 bytes per step (a
//! ballot of byte compares), backward extension byte by byte (one lane).
//!
//! It exists to pin down the warp formulation: tests assert that it produces exactly the bytes of
//! the sequential [`PageEncoder`](super::PageEncoder). It is slow; do not use it to compress.

use super::block_encode::{emit_sequence, hash_at, hash_log, read_u32};
use super::{LAST_LITERALS, MAX_PAGE_BYTES, MFLIMIT, MIN_MATCH};
use crate::{Error, Result};

/// Lanes of a warp, and positions per window.
pub const WARP_LANES: usize = 32;

/// Encodes `page` the way the warp kernel does (no raw fallback, no all-zero shortcut: the parse
/// itself must give the canonical all-zero block). Fails with [`Error::Input`] above 64 KiB.
pub fn encode_block_warp(page: &[u8]) -> Result<Vec<u8>> {
    let n = page.len();
    if n > MAX_PAGE_BYTES {
        return Err(Error::input(format!("page of {n} bytes exceeds 64 KiB")));
    }
    let mut out = Vec::new();
    let log = hash_log(n);
    let mut table = vec![0u16; 1 << log];
    let (mut cursor, mut anchor) = (0usize, 0usize);
    while cursor + MFLIMIT <= n {
        // Lane-private registers.
        let mut active = [false; WARP_LANES];
        let mut hash = [0usize; WARP_LANES];
        let mut cand = [None::<usize>; WARP_LANES];
        for lane in 0..WARP_LANES {
            let p = cursor + lane;
            active[lane] = p + MFLIMIT <= n;
            if active[lane] {
                hash[lane] = hash_at(page, p, log);
            }
        }
        // Lookups: all lanes read the table before anyone writes (no insert is visible yet).
        for lane in (0..WARP_LANES).filter(|&l| active[l]) {
            let peers = (0..lane)
                .filter(|&j| active[j] && hash[j] == hash[lane])
                .max();
            let c = match peers {
                Some(j) => Some(cursor + j),
                None => (table[hash[lane]] as usize).checked_sub(1),
            };
            let p = cursor + lane;
            cand[lane] = c.filter(|&c| read_u32(page, c) == read_u32(page, p));
        }
        // Ballot of valid lanes; the lowest wins.
        let first = (0..WARP_LANES).find(|&l| cand[l].is_some());
        let inserted_lanes = first.map_or(WARP_LANES, |f| f + 1);
        // Inserts: the largest position per bucket wins, whatever order lanes land in. Going
        // through the lanes backwards here shows the result does not rely on write order.
        for lane in (0..inserted_lanes).rev().filter(|&l| active[l]) {
            let slot = &mut table[hash[lane]];
            *slot = (*slot).max((cursor + lane + 1) as u16);
        }
        let Some(f) = first else {
            cursor += WARP_LANES;
            continue;
        };
        let (mut p, mut c) = (cursor + f, cand[f].expect("lane f has a valid candidate"));
        // Forward: each step compares 32 bytes (one per lane) and stops at the first mismatch.
        let limit = n - LAST_LITERALS;
        let mut end = p + MIN_MATCH;
        'extend: while end < limit {
            for lane in 0..WARP_LANES {
                let e = end + lane;
                if e >= limit || page[e] != page[e - (p - c)] {
                    end = e;
                    break 'extend;
                }
            }
            end += WARP_LANES;
        }
        while p > anchor && c > 0 && page[p - 1] == page[c - 1] {
            p -= 1;
            c -= 1;
        }
        emit_sequence(&mut out, &page[anchor..p], Some(((p - c) as u16, end - p)));
        let slot = &mut table[hash_at(page, end - 2, log)];
        *slot = (*slot).max((end - 1) as u16);
        cursor = end;
        anchor = end;
    }
    emit_sequence(&mut out, &page[anchor..], None);
    Ok(out)
}

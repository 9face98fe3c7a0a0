//! CPU reference encoder of one page into one LZ4 block. This comment is the specification that the
//! GPU kernel (one warp of 32 lanes per page) follows; both must produce byte-identical blocks.
//!
//! # Specification (version 2)
//!
//! Input: a page of `P` bytes, `0 <= P <= 65536` (full pages are `page_bytes`, a multiple of 1024 in
//! 1 KiB..=64 KiB; the last page of an input may be shorter and is encoded by the same rules with
//! `P` = its length). All positions are byte indices into the page; nothing outside it is read.
//!
//! * `u32(p)` = the 4 bytes at `p..p+4`, little endian.
//! * `hash(p) = (u32(p) * 2654435761 mod 2^32) >> (32 - L)` with `L = hash_log(P)`: 10 for
//!   `P <= 2048`, 11 for `P <= 4096`, else 12 (about one bucket per two positions, at most 4096).
//! * Table: `2^L` entries of u16 holding `position + 1` (0 = empty), all zero at the start of every
//!   page. Positions are < 65531, so `position + 1` fits.
//! * A position `p` may start a match only if `p + 12 <= P` (MFLIMIT); a match ends (exclusive) at
//!   most at `P - 5` (the last 5 bytes are always literals, LAST_LITERALS). Matches are >= 4 bytes.
//!
//! Parse, in windows of 32 positions: `cursor = anchor = 0`; while `cursor + 12 <= P`:
//!
//! 1. Lane `i` in 0..32 owns `p = cursor + i` if `p + 12 <= P` (else the lane is idle). Its
//!    candidate `c` is the largest *earlier active lane of this window* with the same `hash(p)`
//!    (warp: `match.any.sync` on the hash, masked to lower lanes, highest bit), or else
//!    `table[hash(p)] - 1` from the table as it was BEFORE this window (no insert of this window is
//!    visible to a lookup). The candidate is valid if it exists and `u32(c) == u32(p)`; `c < p`.
//! 2. `f` = the smallest lane with a valid candidate.
//! 3. No such lane: insert every active lane (`table[hash(p)] = p + 1`; where several lanes share a
//!    bucket, the largest position wins: on the GPU the highest lane of each `match.any` group
//!    among the inserting lanes writes, so no atomics are needed), `cursor += 32`, next window.
//! 4. Lane `f` found (`p = cursor + f`, `c`):
//!    * forward: `end` = the largest `e <= P - 5` with `page[p..e] == page[c..c + (e - p)]`
//!      (comparing byte by byte from `p + 4`; source and destination may overlap);
//!    * backward: while `p > anchor && c > 0 && page[p-1] == page[c-1]`: `p -= 1, c -= 1`;
//!    * emit the sequence: literals `page[anchor..p]`, offset `p - c` (1..=65535), match length
//!      `end - p`;
//!    * insert lanes `0..=f` of the window, i.e. positions `cursor..=cursor + f` whatever the
//!      backward extension did (largest position wins, as above), then insert position `end - 2`
//!      (always hashable: `end - 2 + 4 <= P - 3`; and larger than every lane position);
//!    * `cursor = anchor = end`, next window.
//!
//! After the loop one last sequence holds the literals `page[anchor..P]` and no match.
//!
//! Because the in-window candidate makes a lookup see exactly the positions inserted before it,
//! this parse equals a sequential greedy LZ4 parse that tests every position once, inserting it
//! after its lookup; [`encode_block`] is written that way, and [`super::warp_model`] simulates the
//! 32-lane windows literally (tests assert both agree byte for byte).
//!
//! Differences from the first draft of the algorithm, with the reasons (ratio on 4 KiB pages of
//! the corpus; draft -> version 1): the backward extension (dickens 1.301 -> 1.318, nci 3.583 ->
//! 3.621) and the in-window candidate (nci 3.621 -> 3.664, xml 2.608 -> 2.641): without it, a
//! repeat less than 32 bytes away is never found, since its source was not yet in the table. With
//! both, an all-zero page parses as 1 literal, one offset-1 match up to `P - 5`, and 5 literals.
//! Version 2 sizes the table to the page (version 1: always 4096 buckets): the GPU keeps one
//! table per warp in shared memory, and halving it for 4 KiB pages lets an SM hold more page
//! warps, for a small loss (2 MiB prefixes, 4 KiB pages: dickens 1.315 -> 1.305, xml 2.638 ->
//! 2.622, nci 3.601 -> 3.598; lz4_flex 1.312, 2.635, 3.599).
//!
//! Encoding of a sequence (standard LZ4 block format): token `min(lit,15) << 4 | min(ml-4,15)`;
//! if `lit >= 15` the rest `lit - 15` as bytes of 255 followed by one byte < 255; the literals;
//! then (not in the last sequence) the offset as u16 little endian and, if `ml - 4 >= 15`, the rest
//! `ml - 19` the same way as the literal length.
//!
//! Fast paths (part of the spec, same output): an all-zero page with `P >= 13` is written directly
//! as the block above. A page whose block would be `>= P` bytes is stored raw (the page bytes
//! themselves, flagged [`PageKind::Raw`]); pages with `P < 13` are therefore always raw, and an
//! empty page is a raw page of 0 bytes.

use super::{PageKind, LAST_LITERALS, MAX_PAGE_BYTES, MFLIMIT, MIN_MATCH};
use crate::{Error, Result};

/// log2 of the largest number of hash buckets (pages above 4 KiB).
pub const MAX_HASH_LOG: u32 = 12;
/// Largest number of hash buckets (u16 entries) of the per-page table.
pub const HASH_ENTRIES: usize = 1 << MAX_HASH_LOG;

/// log2 of the hash buckets of a page of `page_len` bytes: 10 up to 2 KiB, 11 up to 4 KiB, else
/// 12 (the spec's `L`).
#[inline]
pub fn hash_log(page_len: usize) -> u32 {
    MAX_HASH_LOG - (page_len <= 4096) as u32 - (page_len <= 2048) as u32
}
/// Multiplier of the Fibonacci hash of 4 bytes.
pub const HASH_MULTIPLIER: u32 = 2_654_435_761;

/// The 4 bytes at `p`, little endian. Callers guarantee `p + 4 <= page.len()`.
#[inline]
pub(crate) fn read_u32(page: &[u8], p: usize) -> u32 {
    u32::from_le_bytes(page[p..p + 4].try_into().expect("4-byte slice"))
}

/// The spec's hash of position `p` for a table of `2^log` buckets (bucket index < `2^log`).
#[inline]
pub(crate) fn hash_at(page: &[u8], p: usize, log: u32) -> usize {
    (read_u32(page, p).wrapping_mul(HASH_MULTIPLIER) >> (32 - log)) as usize
}

/// Writes the 255-chained continuation of a length field.
fn write_len_rest(out: &mut Vec<u8>, mut rest: usize) {
    while rest >= 255 {
        out.push(255);
        rest -= 255;
    }
    out.push(rest as u8);
}

/// Appends one sequence: `literals`, then `(offset, match_len)` unless it is the last sequence.
pub(crate) fn emit_sequence(out: &mut Vec<u8>, literals: &[u8], matched: Option<(u16, usize)>) {
    let lit = literals.len();
    let ml_code = matched.map_or(0, |(_, len)| len - MIN_MATCH);
    out.push(((lit.min(15) as u8) << 4) | ml_code.min(15) as u8);
    if lit >= 15 {
        write_len_rest(out, lit - 15);
    }
    out.extend_from_slice(literals);
    if let Some((offset, _)) = matched {
        out.extend_from_slice(&offset.to_le_bytes());
        if ml_code >= 15 {
            write_len_rest(out, ml_code - 15);
        }
    }
}

/// Length of the common run of `page[a..]` and `page[b..]` (`b < a`), stopping at `limit` for `a`.
#[inline]
fn common_run(page: &[u8], b: usize, a: usize, limit: usize) -> usize {
    let mut n = 0;
    // 8 bytes at a time: the first differing byte is the lowest set byte of the XOR.
    while a + n + 8 <= limit {
        let x = u64::from_le_bytes(page[a + n..a + n + 8].try_into().expect("8-byte slice"));
        let y = u64::from_le_bytes(page[b + n..b + n + 8].try_into().expect("8-byte slice"));
        let diff = x ^ y;
        if diff != 0 {
            return n + (diff.trailing_zeros() / 8) as usize;
        }
        n += 8;
    }
    while a + n < limit && page[a + n] == page[b + n] {
        n += 1;
    }
    n
}

/// Encoder state reused across pages (the hash table), so a page costs no allocation.
pub struct PageEncoder {
    table: Box<[u16; HASH_ENTRIES]>,
}

impl Default for PageEncoder {
    fn default() -> Self {
        Self::new()
    }
}

impl PageEncoder {
    /// A fresh encoder (8 KiB table, of which a page uses `2^hash_log(P)` entries).
    pub fn new() -> Self {
        PageEncoder {
            table: Box::new([0; HASH_ENTRIES]),
        }
    }

    /// Appends the LZ4 block of `page` to `out` by the spec above, WITHOUT the raw fallback (the
    /// block may be longer than the page). Fails with [`Error::Input`] if the page exceeds 64 KiB.
    pub fn encode_block(&mut self, page: &[u8], out: &mut Vec<u8>) -> Result<()> {
        let n = page.len();
        if n > MAX_PAGE_BYTES {
            return Err(Error::input(format!(
                "LZ4 page of {n} bytes exceeds the 64 KiB limit of 16-bit offsets"
            )));
        }
        // OR-folding 64-byte chunks vectorises, unlike a byte-wise early exit.
        if n > MFLIMIT
            && page
                .chunks(64)
                .all(|c| c.iter().fold(0, |a, &b| a | b) == 0)
        {
            // The parse below yields exactly this; writing it directly skips the scan.
            emit_sequence(out, &page[..1], Some((1, n - LAST_LITERALS - 1)));
            emit_sequence(out, &page[n - LAST_LITERALS..], None);
            return Ok(());
        }
        let log = hash_log(n);
        let table = &mut self.table[..1 << log];
        table.fill(0);
        let mut anchor = 0;
        let mut p = 0;
        while p + MFLIMIT <= n {
            let h = hash_at(page, p, log);
            let entry = table[h] as usize;
            table[h] = (p + 1) as u16;
            if entry == 0 || read_u32(page, entry - 1) != read_u32(page, p) {
                p += 1;
                continue;
            }
            let c = entry - 1;
            let limit = n - LAST_LITERALS;
            let end = p + MIN_MATCH + common_run(page, c + MIN_MATCH, p + MIN_MATCH, limit);
            let (mut s, mut m) = (p, c);
            while s > anchor && m > 0 && page[s - 1] == page[m - 1] {
                s -= 1;
                m -= 1;
            }
            emit_sequence(out, &page[anchor..s], Some(((s - m) as u16, end - s)));
            table[hash_at(page, end - 2, log)] = (end - 1) as u16;
            p = end;
            anchor = end;
        }
        emit_sequence(out, &page[anchor..], None);
        Ok(())
    }

    /// Appends the stored form of `page` to `out`: its LZ4 block, or the page itself when the
    /// block would not be shorter ([`PageKind::Raw`]). Never appends more than `page.len()` bytes.
    /// Fails with [`Error::Input`] if the page exceeds 64 KiB.
    pub fn compress_page(&mut self, page: &[u8], out: &mut Vec<u8>) -> Result<PageKind> {
        let start = out.len();
        self.encode_block(page, out)?;
        if out.len() - start >= page.len() {
            out.truncate(start);
            out.extend_from_slice(page);
            return Ok(PageKind::Raw);
        }
        Ok(PageKind::Compressed)
    }
}

/// One-shot [`PageEncoder::encode_block`] into a new vector.
pub fn encode_block(page: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(page.len() + page.len() / 255 + 16);
    PageEncoder::new().encode_block(page, &mut out)?;
    Ok(out)
}

/// One-shot [`PageEncoder::compress_page`] into a new vector.
pub fn compress_page(page: &[u8]) -> Result<(Vec<u8>, PageKind)> {
    let mut out = Vec::with_capacity(page.len() + page.len() / 255 + 16);
    let kind = PageEncoder::new().compress_page(page, &mut out)?;
    Ok((out, kind))
}

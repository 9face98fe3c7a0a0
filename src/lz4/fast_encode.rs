//! A fast single-thread LZ4 block encoder for the CPU path of the command line: a greedy scan
//! with one hash table of 4-byte sequences, no match search beyond the last position seen, and a
//! step that grows over incompressible stretches. Its blocks are valid LZ4 (any decoder reads
//! them) but are not the GPU kernel's bytes: [`PageEncoder`](super::PageEncoder) stays the
//! reference the GPU reproduces; this one exists to make `--device cpu` as fast as `lz4 -1`.
//!
//! Format rules kept: a match is at least [`MIN_MATCH`] long, starts at least [`MFLIMIT`] bytes
//! before the end of the page and ends at least [`LAST_LITERALS`] bytes before it; the last
//! sequence is literals only; offsets are 1..=65535 (pages are at most 64 KiB).
//!
//! The table is not cleared between pages: a stale entry is only a candidate position, used when
//! it lies before the current position and its 4 bytes match, which makes it a valid match.

use super::{PageKind, LAST_LITERALS, MFLIMIT, MIN_MATCH};

const HASH_BITS: u32 = 12;

/// The encoder's hash table (reuse it across pages).
pub struct FastEncoder {
    table: Box<[u32; 1 << HASH_BITS]>,
}

impl Default for FastEncoder {
    fn default() -> Self {
        Self::new()
    }
}

#[inline(always)]
fn read_u32(s: &[u8], i: usize) -> u32 {
    let b = &s[i..i + 4];
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

#[inline(always)]
fn hash(seq: u32) -> usize {
    (seq.wrapping_mul(2_654_435_761) >> (32 - HASH_BITS)) as usize
}

/// Bytes equal at `a..` and `b..` (`a < b`), not reaching `end`.
#[inline]
fn common(s: &[u8], mut a: usize, mut b: usize, end: usize) -> usize {
    let start = b;
    while b + 8 <= end {
        let x = u64::from_le_bytes(s[a..a + 8].try_into().expect("8 bytes"))
            ^ u64::from_le_bytes(s[b..b + 8].try_into().expect("8 bytes"));
        if x != 0 {
            return b - start + (x.trailing_zeros() / 8) as usize;
        }
        a += 8;
        b += 8;
    }
    while b < end && s[a] == s[b] {
        a += 1;
        b += 1;
    }
    b - start
}

fn push_len(out: &mut Vec<u8>, mut n: usize) {
    while n >= 255 {
        out.push(255);
        n -= 255;
    }
    out.push(n as u8);
}

fn sequence(out: &mut Vec<u8>, literals: &[u8], offset: usize, match_len: usize) {
    let lit = literals.len();
    let ml = match_len - MIN_MATCH;
    out.push(((lit.min(15) as u8) << 4) | ml.min(15) as u8);
    if lit >= 15 {
        push_len(out, lit - 15);
    }
    out.extend_from_slice(literals);
    out.extend_from_slice(&(offset as u16).to_le_bytes());
    if ml >= 15 {
        push_len(out, ml - 15);
    }
}

fn last_literals(out: &mut Vec<u8>, literals: &[u8]) {
    let lit = literals.len();
    out.push((lit.min(15) as u8) << 4);
    if lit >= 15 {
        push_len(out, lit - 15);
    }
    out.extend_from_slice(literals);
}

impl FastEncoder {
    /// A fresh encoder.
    pub fn new() -> Self {
        FastEncoder {
            table: Box::new([0; 1 << HASH_BITS]),
        }
    }

    /// Stores `page` (at most 64 KiB) into `out` (cleared first): an LZ4 block when that is
    /// shorter than the page, else the page itself ([`PageKind::Raw`]).
    pub fn compress_page(&mut self, page: &[u8], out: &mut Vec<u8>) -> PageKind {
        out.clear();
        let n = page.len();
        debug_assert!(n <= super::MAX_PAGE_BYTES);
        if n > MFLIMIT {
            let last_start = n - MFLIMIT;
            let match_end = n - LAST_LITERALS;
            let (mut anchor, mut i) = (0usize, 1usize);
            let mut misses = 0usize;
            while i <= last_start {
                let seq = read_u32(page, i);
                let h = hash(seq);
                let cand = self.table[h] as usize;
                self.table[h] = i as u32;
                if cand < i && read_u32(page, cand) == seq {
                    let len = MIN_MATCH + common(page, cand + 4, i + 4, match_end);
                    sequence(out, &page[anchor..i], i - cand, len);
                    i += len;
                    anchor = i;
                    misses = 0;
                    if i - 2 <= last_start {
                        self.table[hash(read_u32(page, i - 2))] = (i - 2) as u32;
                    }
                    if out.len() >= n {
                        break;
                    }
                } else {
                    misses += 1;
                    i += 1 + (misses >> 6);
                }
            }
            if out.len() < n {
                last_literals(out, &page[anchor..]);
            }
        }
        if out.is_empty() || out.len() >= n {
            out.clear();
            out.extend_from_slice(page);
            return PageKind::Raw;
        }
        PageKind::Compressed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lz4::decode_block_append;
    use crate::rng::Rng;

    fn round_trip(enc: &mut FastEncoder, page: &[u8]) -> usize {
        let mut out = Vec::new();
        match enc.compress_page(page, &mut out) {
            PageKind::Raw => assert_eq!(out, page),
            PageKind::Compressed => {
                assert!(out.len() < page.len());
                crate::lz4::rules::check_block_rules(&out, page.len())
                    .unwrap_or_else(|e| panic!("block of {} B breaks a rule: {e}", page.len()));
                let mut back = Vec::new();
                decode_block_append(&out, &mut back, 0, page.len()).unwrap();
                assert!(back == page, "{} B page decodes to other bytes", page.len());
            }
        }
        out.len()
    }

    #[test]
    fn pages_round_trip_and_keep_the_format_rules() {
        let mut enc = FastEncoder::new();
        let mut rng = Rng::new(11);
        for len in [0, 1, 5, 12, 13, 14, 17, 20, 100, 1024, 4095, 4096, 65536] {
            let text: Vec<u8> = (0..len).map(|i| b"abcab cabca "[i % 12]).collect();
            let zeros = vec![0u8; len];
            let random: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            let mixed: Vec<u8> = (0..len)
                .map(|i| {
                    if (i / 64) % 2 == 0 {
                        7
                    } else {
                        rng.next_u64() as u8
                    }
                })
                .collect();
            for page in [&text, &zeros, &random, &mixed] {
                round_trip(&mut enc, page);
            }
        }
        for _ in 0..2000 {
            let len = (rng.next_u64() % 5000) as usize;
            let alphabet = 1 + (rng.next_u64() % 6) as u8;
            let page: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8 % alphabet).collect();
            round_trip(&mut enc, &page);
        }
    }
}

//! Parses a block into its sequences and checks the rules of the LZ4 block format that a decoder
//! does not enforce but every conforming encoder must follow (so that the reference decoder's fast
//! paths stay in bounds):
//!
//! - the last sequence holds only literals, and the last 5 bytes of the output are literals
//!   (every match ends at most at `len - 5`);
//! - every match starts at least 12 bytes before the end (`start + 12 <= len`);
//! - offsets are non-zero and reach no further back than the start of the block;
//! - lengths use the canonical 255-chain (no field says 15 and then adds a needless zero chain of
//!   255s; a continuation is present exactly when the nibble is 15).
//!
//! Used by tests of the CPU encoder and, later, of the GPU kernel.

use super::{corrupt, LAST_LITERALS, MFLIMIT, MIN_MATCH};
use crate::Result;

/// One sequence of a block: `literal_bytes` literals, then (unless last) a match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sequence {
    /// Output position where the literals start.
    pub position: usize,
    /// Number of literal bytes.
    pub literal_bytes: usize,
    /// Index in the block where the literal bytes are stored.
    pub literal_offset: usize,
    /// `(offset, match_bytes)`, absent in the last sequence.
    pub matched: Option<(usize, usize)>,
}

fn read_rest(block: &[u8], i: &mut usize) -> Result<usize> {
    let mut n = 0usize;
    loop {
        let b = *block.get(*i).ok_or_else(|| corrupt("length runs past the block end"))?;
        *i += 1;
        n = n.checked_add(b as usize).ok_or_else(|| corrupt("length overflows"))?;
        if b != 255 {
            return Ok(n);
        }
    }
}

/// Splits a block into its sequences (no rule checks beyond well-formedness).
/// Fails with [`Error::Corrupt`](crate::Error::Corrupt) on a truncated or empty block.
pub fn sequences(block: &[u8]) -> Result<Vec<Sequence>> {
    if block.is_empty() {
        return Err(corrupt("empty block"));
    }
    let mut seqs = Vec::new();
    let mut i = 0;
    let mut position = 0usize;
    while i < block.len() {
        let token = block[i];
        i += 1;
        let mut lit = (token >> 4) as usize;
        if lit == 15 {
            lit += read_rest(block, &mut i)?;
        }
        if lit > block.len() - i {
            return Err(corrupt("literals run past the block end"));
        }
        let literal_offset = i;
        i += lit;
        if i == block.len() {
            seqs.push(Sequence { position, literal_bytes: lit, literal_offset, matched: None });
            return Ok(seqs);
        }
        if block.len() - i < 2 {
            return Err(corrupt("block truncated inside an offset"));
        }
        let offset = u16::from_le_bytes([block[i], block[i + 1]]) as usize;
        i += 2;
        let mut len = (token & 15) as usize + MIN_MATCH;
        if token & 15 == 15 {
            len += read_rest(block, &mut i)?;
        }
        seqs.push(Sequence {
            position,
            literal_bytes: lit,
            literal_offset,
            matched: Some((offset, len)),
        });
        position += lit + len;
    }
    Err(corrupt("block ends after a match"))
}

/// Checks every rule listed at the top of this file for a block meant to decode to `page_bytes`.
/// Fails with [`Error::Corrupt`](crate::Error::Corrupt) naming the first violated rule.
pub fn check_block_rules(block: &[u8], page_bytes: usize) -> Result<()> {
    let seqs = sequences(block)?;
    let mut total = 0usize;
    for (k, s) in seqs.iter().enumerate() {
        total += s.literal_bytes;
        if let Some((offset, len)) = s.matched {
            let start = s.position + s.literal_bytes;
            if offset == 0 || offset > start {
                return Err(corrupt(format!("sequence {k}: offset {offset} invalid at {start}")));
            }
            if start + MFLIMIT > page_bytes {
                return Err(corrupt(format!(
                    "sequence {k}: match starts at {start}, less than {MFLIMIT} bytes before the end {page_bytes}"
                )));
            }
            if start + len + LAST_LITERALS > page_bytes {
                return Err(corrupt(format!(
                    "sequence {k}: match ends at {}, inside the last {LAST_LITERALS} bytes of {page_bytes}",
                    start + len
                )));
            }
            total += len;
        }
    }
    if total != page_bytes {
        return Err(corrupt(format!("block holds {total} bytes, expected {page_bytes}")));
    }
    check_canonical_lengths(block)
}

/// The encoder writes each length as the nibble plus exactly `n / 255` bytes of 255 and one final
/// byte; a block is canonical iff re-encoding its parsed sequences gives back the same bytes.
fn check_canonical_lengths(block: &[u8]) -> Result<()> {
    let mut re = Vec::with_capacity(block.len());
    for s in sequences(block)? {
        let literals = &block[s.literal_offset..s.literal_offset + s.literal_bytes];
        super::block_encode::emit_sequence(&mut re, literals, s.matched.map(|(o, l)| (o as u16, l)));
    }
    if re != block {
        return Err(corrupt("non-canonical length encoding"));
    }
    Ok(())
}

//! Parses a block into its sequences and checks the rules of the LZ4 block format that a decoder
//! does not enforce but every conforming encoder must follow (so that the reference decoder's fast
//! paths stay in bounds):
//!
//! - the last sequence holds only literals, and the last 5 bytes of the output are literals
//!   (every match ends at most at `len - 5`);
//! - every match starts at least 12 bytes before the end (`start + 12 <= len`);
//! - offsets are non-zero and reach no further back than the start of the block;
//! - the block decodes to exactly the page length.
//!
//! (Length fields need no check: a continuation follows exactly a nibble of 15 and ends at the
//! first byte < 255, so every parseable length has one encoding.)
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
        let b = *block
            .get(*i)
            .ok_or_else(|| corrupt("length runs past the block end"))?;
        *i += 1;
        n = n
            .checked_add(b as usize)
            .ok_or_else(|| corrupt("length overflows"))?;
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
            seqs.push(Sequence {
                position,
                literal_bytes: lit,
                literal_offset,
                matched: None,
            });
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
                return Err(corrupt(format!(
                    "sequence {k}: offset {offset} invalid at {start}"
                )));
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
        return Err(corrupt(format!(
            "block holds {total} bytes, expected {page_bytes}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-made block: `lits` literals of b'a', a match (offset, len), then `tail` literals.
    fn block(lits: usize, offset: u16, len: usize, tail: usize) -> Vec<u8> {
        let mut b = Vec::new();
        let a = vec![b'a'; lits.max(tail)];
        crate::lz4::block_encode::emit_sequence(&mut b, &a[..lits], Some((offset, len)));
        crate::lz4::block_encode::emit_sequence(&mut b, &a[..tail], None);
        b
    }

    #[test]
    fn accepts_valid_and_names_each_violation() {
        assert!(check_block_rules(&block(1, 1, 20, 5), 26).is_ok());
        let err = |b: &[u8], n| check_block_rules(b, n).unwrap_err().to_string();
        assert!(err(&block(1, 1, 22, 3), 26).contains("last 5"));
        assert!(err(&block(15, 1, 4, 5), 24).contains("12 bytes"));
        assert!(err(&block(1, 2, 20, 5), 26).contains("offset"));
        assert!(err(&block(1, 1, 20, 5), 27).contains("expected 27"));
    }
}

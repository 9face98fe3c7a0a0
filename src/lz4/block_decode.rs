//! Bounds-checked decoder of the LZ4 block format. Every length and offset is checked against the
//! input, the output limit and the history before it is used, so corrupt input yields
//! [`Error::Corrupt`](crate::Error::Corrupt), never a panic, an out-of-bounds access or an
//! allocation beyond the caller's limit.
//!
//! A block is a series of sequences: token (high nibble literal length, low nibble match length
//! minus 4; 15 means "more bytes follow": bytes of 255 and a final byte < 255 are added), the
//! literals, then a little-endian u16 offset (non-zero, reaching back into the output) and the
//! extra match length bytes. The last sequence stops after its literals, at the end of the block.

use super::{corrupt, MIN_MATCH};
use crate::Result;

/// Reads the 255-chained continuation of a length field at `*i`; fails past `cap` (the output
/// limit: no valid length is larger) or at the end of the block.
fn read_len_rest(block: &[u8], i: &mut usize, cap: usize, what: &str) -> Result<usize> {
    let mut n = 0usize;
    loop {
        let b = *block
            .get(*i)
            .ok_or_else(|| corrupt(format!("{what} length runs past the end of the block")))?;
        *i += 1;
        n += b as usize;
        if n > cap {
            return Err(corrupt(format!("{what} length exceeds the output limit of {cap} bytes")));
        }
        if b != 255 {
            return Ok(n);
        }
    }
}

/// Appends `len` bytes copied from `offset` bytes back (the regions may overlap: a short offset
/// repeats a pattern). Callers have checked `offset <= out.len()`.
fn copy_match(out: &mut Vec<u8>, offset: usize, len: usize) {
    let mut src = out.len() - offset;
    let mut left = len;
    while left > 0 {
        // out[src..] grows as we append, so each copy may be as long as everything after `src`.
        let chunk = left.min(out.len() - src);
        out.extend_from_within(src..src + chunk);
        src += chunk;
        left -= chunk;
    }
}

/// Decodes `block`, appending its output to `out`, and returns the number of bytes appended.
///
/// Matches may copy from `out[history_start..]`: pass `history_start = out.len()` for an
/// independent block, or an earlier index to allow references into preceding output (linked
/// blocks of a frame, at most 64 KiB back). The block may produce at most `max_output_bytes`.
/// Fails with [`Error::Corrupt`](crate::Error::Corrupt) on an empty or truncated block, a zero
/// offset, an offset reaching before `history_start`, or output beyond the limit; on failure `out`
/// holds a partial result.
pub fn decode_block_append(
    block: &[u8],
    out: &mut Vec<u8>,
    history_start: usize,
    max_output_bytes: usize,
) -> Result<usize> {
    if history_start > out.len() {
        return Err(crate::Error::input(format!(
            "history start {history_start} is past the {} bytes of output",
            out.len()
        )));
    }
    if block.is_empty() {
        return Err(corrupt("empty LZ4 block (a block holds at least one token)"));
    }
    let start = out.len();
    let limit = start + max_output_bytes;
    out.reserve(max_output_bytes.min(block.len().saturating_mul(255)));
    let mut i = 0;
    loop {
        let token = *block
            .get(i)
            .ok_or_else(|| corrupt("block ends after a match (the last sequence must be literals)"))?;
        i += 1;
        let mut lit = (token >> 4) as usize;
        if lit == 15 {
            lit += read_len_rest(block, &mut i, max_output_bytes, "literal")?;
        }
        if lit > block.len() - i {
            return Err(corrupt(format!(
                "{lit} literals at block byte {i} run past the block end ({} bytes)",
                block.len()
            )));
        }
        if lit > limit - out.len() {
            return Err(corrupt(format!(
                "literals overflow the output limit of {max_output_bytes} bytes"
            )));
        }
        out.extend_from_slice(&block[i..i + lit]);
        i += lit;
        if i == block.len() {
            return Ok(out.len() - start);
        }
        if block.len() - i < 2 {
            return Err(corrupt("block truncated inside a match offset"));
        }
        let offset = u16::from_le_bytes([block[i], block[i + 1]]) as usize;
        i += 2;
        if offset == 0 {
            return Err(corrupt(format!("zero match offset at block byte {}", i - 2)));
        }
        if offset > out.len() - history_start {
            return Err(corrupt(format!(
                "match offset {offset} reaches before the start of the available history ({} bytes)",
                out.len() - history_start
            )));
        }
        let mut len = (token & 15) as usize + MIN_MATCH;
        if token & 15 == 15 {
            len += read_len_rest(block, &mut i, max_output_bytes, "match")?;
        }
        if len > limit - out.len() {
            return Err(corrupt(format!(
                "match overflows the output limit of {max_output_bytes} bytes"
            )));
        }
        copy_match(out, offset, len);
    }
}

/// Decodes an independent block that must produce exactly `expected_bytes` bytes.
/// Fails with [`Error::Corrupt`](crate::Error::Corrupt) on any corruption or a length mismatch.
pub fn decode_block(block: &[u8], expected_bytes: usize) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(expected_bytes);
    let got = decode_block_append(block, &mut out, 0, expected_bytes)?;
    if got != expected_bytes {
        return Err(corrupt(format!(
            "block decodes to {got} bytes, expected {expected_bytes}"
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_match_repeats_pattern() {
        // "ab" then offset 2, match length 4+3 = 7, then 5 literal bytes "xxxxx".
        let block = [0x23, b'a', b'b', 2, 0, 0x50, b'x', b'x', b'x', b'x', b'x'];
        let out = decode_block(&block, 14).unwrap();
        assert_eq!(out, b"ababababaxxxxx");
    }

    #[test]
    fn rejects_bad_offsets_and_truncation() {
        assert!(decode_block(&[0x10, b'a', 0, 0, 0x00], 5).is_err()); // zero offset
        assert!(decode_block(&[0x10, b'a', 2, 0, 0x00], 5).is_err()); // before history
        assert!(decode_block(&[0x10, b'a', 1], 5).is_err()); // truncated offset
        assert!(decode_block(&[0x10, b'a', 1, 0], 5).is_err()); // ends after a match
        assert!(decode_block(&[0xF0, 255, 255], 5).is_err()); // length runs off the end
        assert!(decode_block(&[], 0).is_err());
        assert_eq!(decode_block(&[0x00], 0).unwrap(), Vec::<u8>::new());
    }
}

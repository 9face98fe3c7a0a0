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
            return Err(corrupt(format!(
                "{what} length exceeds the output limit of {cap} bytes"
            )));
        }
        if b != 255 {
            return Ok(n);
        }
    }
}

/// Writes `len` bytes at `buf[at..]` copied from `offset` bytes back; the regions may overlap (a
/// short offset repeats a pattern). Callers have checked `offset <= at` and `at + len <= buf.len()`.
#[inline]
fn copy_match(buf: &mut [u8], at: usize, offset: usize, len: usize) {
    let src = at - offset;
    if offset >= len {
        buf.copy_within(src..src + len, at);
        return;
    }
    // Copying `buf[src..dst]` to `dst` keeps the period as long as `dst - src` is a multiple of
    // `offset`, which holds since it starts at `offset` and doubles; only the last copy is partial.
    let mut dst = at;
    while dst < at + len {
        let chunk = (dst - src).min(at + len - dst);
        buf.copy_within(src..src + chunk, dst);
        dst += chunk;
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
    let start = out.len();
    // No block of n bytes expands beyond 255 * n bytes, so small blocks do not zero-fill a
    // large limit.
    let limit = max_output_bytes.min(block.len().saturating_mul(255));
    out.resize(start + limit, 0);
    let mut at = start;
    let result = decode_into(
        block,
        &mut out[..start + limit],
        &mut at,
        history_start,
        max_output_bytes,
    );
    out.truncate(at);
    result.map(|()| at - start)
}

/// Decodes one independent block into the start of `buf` (whose length is the output limit)
/// and returns the bytes produced. `buf` need not be zeroed: the decoder reads only bytes it
/// wrote. Fails like [`decode_block_append`].
pub fn decode_block_into(block: &[u8], buf: &mut [u8]) -> Result<usize> {
    let mut at = 0;
    let max = buf.len();
    decode_into(block, buf, &mut at, 0, max)?;
    Ok(at)
}

/// The decode loop over a fixed output buffer: `buf[..*at]` is history and output so far,
/// `buf.len()` the limit; `*at` advances as bytes are produced.
fn decode_into(
    block: &[u8],
    buf: &mut [u8],
    at: &mut usize,
    history_start: usize,
    max_output_bytes: usize,
) -> Result<()> {
    if block.is_empty() {
        return Err(corrupt(
            "empty LZ4 block (a block holds at least one token)",
        ));
    }
    let mut o = *at;
    let mut i = 0;
    let result = loop {
        let Some(&token) = block.get(i) else {
            break Err(corrupt(
                "block ends after a match (the last sequence must be literals)",
            ));
        };
        i += 1;
        let mut lit = (token >> 4) as usize;
        if lit == 15 {
            match read_len_rest(block, &mut i, max_output_bytes, "literal") {
                Ok(n) => lit += n,
                Err(e) => break Err(e),
            }
        }
        if lit > block.len() - i {
            break Err(corrupt(format!(
                "{lit} literals at block byte {i} run past the block end ({} bytes)",
                block.len()
            )));
        }
        if lit > buf.len() - o {
            break Err(corrupt(format!(
                "literals overflow the output limit of {max_output_bytes} bytes"
            )));
        }
        if lit <= 16 && block.len() - i >= 16 && buf.len() - o >= 16 {
            // Fixed 16-byte copy (two moves); the bytes past `lit` are overwritten or truncated.
            buf[o..o + 16].copy_from_slice(&block[i..i + 16]);
        } else {
            buf[o..o + lit].copy_from_slice(&block[i..i + lit]);
        }
        o += lit;
        i += lit;
        if i == block.len() {
            break Ok(());
        }
        if block.len() - i < 2 {
            break Err(corrupt("block truncated inside a match offset"));
        }
        let offset = u16::from_le_bytes([block[i], block[i + 1]]) as usize;
        i += 2;
        if offset == 0 {
            break Err(corrupt(format!(
                "zero match offset at block byte {}",
                i - 2
            )));
        }
        if offset > o - history_start {
            break Err(corrupt(format!(
                "match offset {offset} reaches before the start of the available history ({} bytes)",
                o - history_start
            )));
        }
        let mut len = (token & 15) as usize + MIN_MATCH;
        if token & 15 == 15 {
            match read_len_rest(block, &mut i, max_output_bytes, "match") {
                Ok(n) => len += n,
                Err(e) => break Err(e),
            }
        }
        if len > buf.len() - o {
            break Err(corrupt(format!(
                "match overflows the output limit of {max_output_bytes} bytes"
            )));
        }
        if len <= 16 && offset >= 16 && buf.len() - o >= 16 {
            // Source and the 16-byte destination do not overlap; extra bytes are scratch.
            let mut tmp = [0u8; 16];
            tmp.copy_from_slice(&buf[o - offset..o - offset + 16]);
            buf[o..o + 16].copy_from_slice(&tmp);
        } else {
            copy_match(buf, o, offset, len);
        }
        o += len;
    };
    *at = o;
    result
}

/// Decodes an independent block that must produce exactly `expected_bytes` bytes.
/// Fails with [`Error::Corrupt`](crate::Error::Corrupt) on any corruption or a length mismatch.
pub fn decode_block(block: &[u8], expected_bytes: usize) -> Result<Vec<u8>> {
    // `expected_bytes` is the caller's claim: reserve only what the block can expand to.
    let mut out = Vec::with_capacity(expected_bytes.min(block.len().saturating_mul(255)));
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

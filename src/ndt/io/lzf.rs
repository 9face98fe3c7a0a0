//! LZF decompression (the codec of PCD `binary_compressed`).
//!
//! An LZF stream is a sequence of chunks, each starting with a control byte `c`:
//! - `c < 32`: a literal run; the next `c + 1` bytes are copied to the output;
//! - `c >= 32`: a back reference; length `L = c >> 5` (when `L == 7`, the next byte is added to it),
//!   then offset `O = ((c & 31) << 8) + next byte + 1`; `L + 2` bytes are copied from `O` bytes back
//!   in the output, one at a time, so a reference may overlap the bytes it produces (run-length).
//!
//! Written from the format description; every bound is checked so corrupt input gives an error.

/// The largest output one input byte can give: a 3-byte back reference copies 7 + 255 + 2 bytes.
pub const MAX_EXPANSION: usize = 88;

/// Decompresses `input` into exactly `expected_len` bytes.
///
/// Fails with a message (the caller adds the file name) when the stream reads past its end,
/// refers before the start of the output, or does not produce exactly `expected_len` bytes.
pub fn decompress(input: &[u8], expected_len: usize) -> Result<Vec<u8>, String> {
    // `expected_len` comes from a file header: reserve only what `input` could expand to.
    let mut out: Vec<u8> =
        Vec::with_capacity(expected_len.min(input.len().saturating_mul(MAX_EXPANSION)));
    let mut i = 0usize;
    while i < input.len() {
        let ctrl = input[i] as usize;
        i += 1;
        if ctrl < 32 {
            let run = ctrl + 1;
            let end = i + run;
            if end > input.len() {
                return Err(format!(
                    "LZF literal run of {run} bytes at input byte {} runs past the end",
                    i - 1
                ));
            }
            if out.len() + run > expected_len {
                return Err(format!(
                    "LZF output exceeds the declared {expected_len} bytes"
                ));
            }
            out.extend_from_slice(&input[i..end]);
            i = end;
        } else {
            let mut len = ctrl >> 5;
            if len == 7 {
                let extra = *input
                    .get(i)
                    .ok_or("LZF stream ends inside a back reference")?;
                len += extra as usize;
                i += 1;
            }
            let low = *input
                .get(i)
                .ok_or("LZF stream ends inside a back reference")?;
            i += 1;
            let offset = ((ctrl & 31) << 8) + low as usize + 1;
            if offset > out.len() {
                return Err(format!(
                    "LZF back reference {offset} bytes back at output byte {} points before the start",
                    out.len()
                ));
            }
            let count = len + 2;
            if out.len() + count > expected_len {
                return Err(format!(
                    "LZF output exceeds the declared {expected_len} bytes"
                ));
            }
            let start = out.len() - offset;
            for k in 0..count {
                let b = out[start + k];
                out.push(b);
            }
        }
    }
    if out.len() != expected_len {
        return Err(format!(
            "LZF stream gives {} bytes, header declares {expected_len}",
            out.len()
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::decompress;

    #[test]
    fn literal_and_overlapping_reference() {
        // "abc" literal, then a back reference of length 7 at offset 3 → "abcabcabca".
        let stream = [2u8, b'a', b'b', b'c', (5 << 5) as u8, 2];
        assert_eq!(decompress(&stream, 10).unwrap(), b"abcabcabca");
    }

    #[test]
    fn long_reference_uses_extra_length_byte() {
        // One literal 'x', then length 7 + 3 = 10 (+2 = 12 bytes) at offset 1.
        let stream = [0u8, b'x', (7 << 5) as u8, 3, 0];
        assert_eq!(decompress(&stream, 13).unwrap(), vec![b'x'; 13]);
    }

    #[test]
    fn corrupt_streams_are_errors() {
        assert!(decompress(&[5, b'a'], 6).is_err(), "truncated literal");
        assert!(
            decompress(&[(1 << 5) as u8, 0], 3).is_err(),
            "reference before start"
        );
        assert!(decompress(&[0, b'a'], 2).is_err(), "short output");
        assert!(
            decompress(&[0, b'a', (7 << 5) as u8], 20).is_err(),
            "missing length byte"
        );
    }
}

//! Reads LZ4 data in the formats the `lz4` tool writes: concatenated frames (independent or linked
//! blocks, optional block and content checksums, optional content size, any block maximum),
//! skippable frames (skipped), and legacy frames (`lz4 -l`). Dictionary frames are refused.
//! Streams from a reader to a writer; memory is bounded by the block maximum (4 MiB) plus 64 KiB
//! of history for linked blocks, never by sizes read from the input.

use super::frame_header::{
    is_skippable_magic, FrameHeader, FRAME_MAGIC, LEGACY_BLOCK_BYTES, LEGACY_MAGIC,
    UNCOMPRESSED_BIT,
};
use super::xxh32::{xxh32, Xxh32};
use super::{corrupt, decode_block_append};
use crate::{Error, Result};
use std::io::{ErrorKind, Read, Write};
use std::path::Path;

/// How far back a linked block may reference (bytes).
const HISTORY_BYTES: usize = 64 * 1024;

/// Counters of a decode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecodeStats {
    /// Compressed bytes consumed.
    pub input_bytes: u64,
    /// Decompressed bytes written.
    pub output_bytes: u64,
    /// Frames read (skippable ones included).
    pub frames: u64,
    /// Data blocks read.
    pub blocks: u64,
}

struct Io<'a> {
    input: &'a mut dyn Read,
    in_name: &'a Path,
    output: &'a mut dyn Write,
    out_name: &'a Path,
    stats: DecodeStats,
}

impl Io<'_> {
    /// Fills `buf` as far as the input allows; returns the bytes read (short only at end of input).
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize> {
        let mut n = 0;
        while n < buf.len() {
            match self.input.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(Error::Io {
                        path: self.in_name.to_path_buf(),
                        source,
                    })
                }
            }
        }
        self.stats.input_bytes += n as u64;
        Ok(n)
    }

    fn read_exact(&mut self, buf: &mut [u8], what: &str) -> Result<()> {
        let at = self.stats.input_bytes;
        if self.fill(buf)? < buf.len() {
            return Err(corrupt(format!(
                "input truncated inside {what} (at byte {at})"
            )));
        }
        Ok(())
    }

    fn read_u32(&mut self, what: &str) -> Result<u32> {
        let mut b = [0; 4];
        self.read_exact(&mut b, what)?;
        Ok(u32::from_le_bytes(b))
    }

    /// A u32, or None at a clean end of input.
    fn read_u32_or_end(&mut self, what: &str) -> Result<Option<u32>> {
        let mut b = [0; 4];
        match self.fill(&mut b)? {
            0 => Ok(None),
            4 => Ok(Some(u32::from_le_bytes(b))),
            _ => Err(corrupt(format!("input truncated inside {what}"))),
        }
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.output.write_all(bytes).map_err(|source| Error::Io {
            path: self.out_name.to_path_buf(),
            source,
        })?;
        self.stats.output_bytes += bytes.len() as u64;
        Ok(())
    }
}

/// Decodes every frame of `input` into `output`, calling `progress` after each block.
/// Fails with [`Error::Corrupt`] (its text starting with `in_name`) on malformed, truncated or
/// checksum-failing input (including an input with no frame at all), [`Error::Input`] for a
/// dictionary frame, and [`Error::Io`] (with `in_name` or `out_name`) when reading or writing
/// fails. Output written before an error stays written. Memory is bounded by the block maximum,
/// never by a size read from the input.
pub fn decode_frames(
    input: &mut dyn Read,
    in_name: &Path,
    output: &mut dyn Write,
    out_name: &Path,
    progress: &mut dyn FnMut(&DecodeStats),
) -> Result<DecodeStats> {
    decode_all(input, in_name, output, out_name, progress).map_err(|e| name_corrupt(in_name, e))
}

/// Prefixes the text of an [`Error::Corrupt`] with the input's name; other errors pass as they are.
pub(crate) fn name_corrupt(name: &Path, e: Error) -> Error {
    match e {
        Error::Corrupt { what } => Error::Corrupt {
            what: format!("{}: {what}", name.display()),
        },
        e => e,
    }
}

fn decode_all(
    input: &mut dyn Read,
    in_name: &Path,
    output: &mut dyn Write,
    out_name: &Path,
    progress: &mut dyn FnMut(&DecodeStats),
) -> Result<DecodeStats> {
    let mut io = Io {
        input,
        in_name,
        output,
        out_name,
        stats: DecodeStats::default(),
    };
    let mut next_magic = None;
    loop {
        let magic = match next_magic.take() {
            Some(m) => m,
            None => match io.read_u32_or_end("a magic number")? {
                Some(m) => m,
                None => break,
            },
        };
        match magic {
            FRAME_MAGIC => decode_frame(&mut io, progress)?,
            LEGACY_MAGIC => next_magic = decode_legacy(&mut io, progress)?,
            m if is_skippable_magic(m) => {
                let len = io.read_u32("a skippable frame size")? as usize;
                let mut skip = vec![0u8; len.min(1 << 16)];
                let mut left = len;
                while left > 0 {
                    let k = left.min(skip.len());
                    let got = io.fill(&mut skip[..k])?;
                    if got < k {
                        return Err(corrupt(format!(
                            "skippable frame size {len} bytes runs past the end of the input \
                             ({} bytes of it present)",
                            len - left + got
                        )));
                    }
                    left -= k;
                }
            }
            m => {
                return Err(corrupt(format!(
                    "unknown magic number {m:#010x} at byte {} (not LZ4 data)",
                    io.stats.input_bytes - 4
                )))
            }
        }
        io.stats.frames += 1;
    }
    if io.stats.frames == 0 {
        return Err(corrupt("empty input: no LZ4 frame"));
    }
    io.output.flush().map_err(|source| Error::Io {
        path: out_name.to_path_buf(),
        source,
    })?;
    Ok(io.stats)
}

fn decode_frame(io: &mut Io<'_>, progress: &mut dyn FnMut(&DecodeStats)) -> Result<()> {
    let mut desc = [0u8; 15];
    io.read_exact(&mut desc[..1], "a frame header")?;
    let len = FrameHeader::descriptor_len(desc[0]);
    io.read_exact(&mut desc[1..len], "a frame header")?;
    let header = FrameHeader::parse(&desc[..len])?;
    if let Some(id) = header.dict_id {
        return Err(Error::input(format!(
            "frame was compressed with dictionary {id:#010x}; dictionaries are not supported"
        )));
    }
    let mut block = Vec::new();
    // Linked blocks: the last HISTORY_BYTES of output, then the block being decoded.
    let mut window: Vec<u8> = Vec::new();
    let mut hash = Xxh32::new(0);
    let mut frame_bytes = 0u64;
    loop {
        let word = io.read_u32("a block size")?;
        if word == 0 {
            break;
        }
        let raw = word & UNCOMPRESSED_BIT != 0;
        let size = (word & !UNCOMPRESSED_BIT) as usize;
        if size > header.block_max_bytes {
            return Err(corrupt(format!(
                "block size {size} bytes (at byte {}) exceeds the frame header's block maximum {}",
                io.stats.input_bytes - 4,
                header.block_max_bytes
            )));
        }
        block.resize(size, 0);
        io.read_exact(&mut block, "a block")?;
        if header.block_checksum {
            let stored = io.read_u32("a block checksum")?;
            if stored != xxh32(&block, 0) {
                return Err(corrupt(format!(
                    "block {} checksum mismatch",
                    io.stats.blocks
                )));
            }
        }
        if header.block_independent {
            window.clear();
        } else if window.len() > HISTORY_BYTES {
            window.drain(..window.len() - HISTORY_BYTES);
        }
        let start = window.len();
        if raw {
            window.extend_from_slice(&block);
        } else {
            decode_block_append(&block, &mut window, 0, header.block_max_bytes)?;
        }
        frame_bytes += (window.len() - start) as u64;
        if header
            .content_size
            .is_some_and(|declared| frame_bytes > declared)
        {
            return Err(corrupt(format!(
                "frame holds more than the {declared} bytes its header's content size declares",
                declared = header.content_size.unwrap_or_default()
            )));
        }
        hash.update(&window[start..]);
        io.write(&window[start..])?;
        io.stats.blocks += 1;
        progress(&io.stats);
    }
    if header.content_checksum {
        let stored = io.read_u32("the content checksum")?;
        if stored != hash.digest() {
            return Err(corrupt(format!(
                "content checksum mismatch: stored {stored:#010x}, computed {:#010x}",
                hash.digest()
            )));
        }
    }
    if let Some(declared) = header.content_size {
        if declared != frame_bytes {
            return Err(corrupt(format!(
                "frame declares {declared} bytes of content but holds {frame_bytes}"
            )));
        }
    }
    Ok(())
}

/// Decodes legacy blocks until the end of input or the next magic number, which it returns.
fn decode_legacy(io: &mut Io<'_>, progress: &mut dyn FnMut(&DecodeStats)) -> Result<Option<u32>> {
    let bound = LEGACY_BLOCK_BYTES + LEGACY_BLOCK_BYTES / 255 + 16;
    let mut block = Vec::new();
    let mut out = Vec::new();
    loop {
        let Some(word) = io.read_u32_or_end("a legacy block size")? else {
            return Ok(None);
        };
        if word == FRAME_MAGIC || word == LEGACY_MAGIC || is_skippable_magic(word) {
            return Ok(Some(word));
        }
        let size = word as usize;
        if size > bound {
            return Err(corrupt(format!(
                "legacy block size {size} bytes (at byte {}) exceeds the bound {bound}",
                io.stats.input_bytes - 4
            )));
        }
        block.resize(size, 0);
        io.read_exact(&mut block, "a legacy block")?;
        out.clear();
        decode_block_append(&block, &mut out, 0, LEGACY_BLOCK_BYTES)?;
        io.write(&out)?;
        io.stats.blocks += 1;
        progress(&io.stats);
    }
}

/// Decodes all frames of `data` in memory. Fails like [`decode_frames`].
pub fn decompress_frame(data: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(data.len().saturating_mul(2));
    let mut input = data;
    let name = Path::new("<memory>");
    decode_frames(&mut input, name, &mut out, name, &mut |_| {})?;
    Ok(out)
}

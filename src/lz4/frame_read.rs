//! Reads LZ4 data in the formats the `lz4` tool writes: concatenated frames (independent or linked
//! blocks, optional block and content checksums, optional content size, any block maximum),
//! skippable frames (skipped), and legacy frames (`lz4 -l`). Dictionary frames are refused.
//! Streams from a reader to a writer; memory is bounded by the block maximum (4 MiB) plus 64 KiB
//! of history for linked blocks, never by sizes read from the input.

use super::frame_header::{is_skippable_magic, FRAME_MAGIC, LEGACY_BLOCK_BYTES, LEGACY_MAGIC};
use super::frame_input::{
    check_content_growth, check_frame_end, name_corrupt, refuse_dictionary, ByteReader, LegacyNext,
};
use super::xxh32::Xxh32;
use super::{corrupt, decode_block_append};
use crate::{Error, Result};
use std::io::{Read, Write};
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
    src: ByteReader<&'a mut dyn Read>,
    output: &'a mut dyn Write,
    out_name: &'a Path,
    stats: DecodeStats,
}

impl Io<'_> {
    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.output.write_all(bytes).map_err(|source| Error::Io {
            path: self.out_name.to_path_buf(),
            source,
        })?;
        self.stats.output_bytes += bytes.len() as u64;
        Ok(())
    }

    /// Counts a block and reports the counters.
    fn block_done(&mut self, progress: &mut dyn FnMut(&DecodeStats)) {
        self.stats.blocks += 1;
        self.stats.input_bytes = self.src.bytes;
        progress(&self.stats);
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

fn decode_all(
    input: &mut dyn Read,
    in_name: &Path,
    output: &mut dyn Write,
    out_name: &Path,
    progress: &mut dyn FnMut(&DecodeStats),
) -> Result<DecodeStats> {
    let mut io = Io {
        src: ByteReader::new(input, in_name),
        output,
        out_name,
        stats: DecodeStats::default(),
    };
    let mut next_magic = None;
    loop {
        let magic = match next_magic.take() {
            Some(m) => m,
            None => match io.src.read_u32_or_end("a magic number")? {
                Some(m) => m,
                None => break,
            },
        };
        match magic {
            FRAME_MAGIC => decode_frame(&mut io, progress)?,
            LEGACY_MAGIC => next_magic = decode_legacy(&mut io, progress)?,
            m if is_skippable_magic(m) => io.src.skip_skippable()?,
            m => return Err(io.src.unknown_magic(m)),
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
    io.stats.input_bytes = io.src.bytes;
    Ok(io.stats)
}

fn decode_frame(io: &mut Io<'_>, progress: &mut dyn FnMut(&DecodeStats)) -> Result<()> {
    let header = io.src.frame_header()?;
    refuse_dictionary(&header)?;
    let mut block = Vec::new();
    // Linked blocks: the last HISTORY_BYTES of output, then the block being decoded.
    let mut window: Vec<u8> = Vec::new();
    let mut hash = Xxh32::new(0);
    let mut frame_bytes = 0u64;
    while let Some((size, raw)) = io.src.block_size(&header)? {
        block.resize(size, 0);
        io.src.read_exact(&mut block, "a block")?;
        if header.block_checksum {
            io.src.block_checksum(&block, io.stats.blocks)?;
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
        check_content_growth(header.content_size, frame_bytes)?;
        hash.update(&window[start..]);
        io.write(&window[start..])?;
        io.block_done(progress);
    }
    let stored = if header.content_checksum {
        Some(io.src.read_u32("the content checksum")?)
    } else {
        None
    };
    check_frame_end(stored, hash.digest(), header.content_size, frame_bytes)
}

/// Decodes legacy blocks until the end of input or the next magic number, which it returns.
fn decode_legacy(io: &mut Io<'_>, progress: &mut dyn FnMut(&DecodeStats)) -> Result<Option<u32>> {
    let mut block = Vec::new();
    let mut out = Vec::new();
    loop {
        let size = match io.src.legacy_next()? {
            LegacyNext::End => return Ok(None),
            LegacyNext::Magic(m) => return Ok(Some(m)),
            LegacyNext::Block(size) => size,
        };
        block.resize(size, 0);
        io.src.read_exact(&mut block, "a legacy block")?;
        out.clear();
        decode_block_append(&block, &mut out, 0, LEGACY_BLOCK_BYTES)?;
        io.write(&out)?;
        io.block_done(progress);
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

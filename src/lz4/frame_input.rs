//! What the three LZ4 frame readers share ([`decode_frames`](super::decode_frames),
//! [`FrameDecoder`](super::FrameDecoder) and the GPU frame stream): a byte reader that counts
//! what it consumed, and the parsing and checking of the fields whose sizes come from the
//! input (frame headers, block sizes, skippable frames, legacy blocks, checksums, content size).
//! Every size read from the input is checked here before it drives a read or an allocation:
//! a block is at most the frame header's block maximum, a legacy block at most its bound, a
//! skippable frame is skipped through a 64 KiB buffer, and a declared content size is only
//! compared, never allocated. Errors name the field and the numbers; the readers prefix the
//! input's name ([`name_corrupt`]).

use super::corrupt;
use super::frame_header::{
    is_skippable_magic, FrameHeader, FRAME_MAGIC, LEGACY_BLOCK_BYTES, LEGACY_MAGIC,
    UNCOMPRESSED_BIT,
};
use super::xxh32::xxh32;
use crate::{Error, Result};
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

/// Largest stored legacy block: the worst-case LZ4 expansion of an 8 MiB block.
pub(crate) const LEGACY_BOUND: usize = LEGACY_BLOCK_BYTES + LEGACY_BLOCK_BYTES / 255 + 16;

/// A reader of LZ4 input, named in its I/O errors, counting the bytes consumed.
pub(crate) struct ByteReader<R> {
    input: R,
    name: PathBuf,
    /// Bytes consumed so far.
    pub(crate) bytes: u64,
}

/// What a legacy frame holds next.
pub(crate) enum LegacyNext {
    /// The end of the input.
    End,
    /// The magic number of the next frame.
    Magic(u32),
    /// A block of this many stored bytes (checked against [`LEGACY_BOUND`]).
    Block(usize),
}

impl<R: Read> ByteReader<R> {
    pub(crate) fn new(input: R, name: &Path) -> Self {
        ByteReader {
            input,
            name: name.to_path_buf(),
            bytes: 0,
        }
    }

    /// The input's name.
    pub(crate) fn name(&self) -> &Path {
        &self.name
    }

    /// Fills `buf` as far as the input allows; returns the bytes read (short only at end of input).
    pub(crate) fn fill(&mut self, buf: &mut [u8]) -> Result<usize> {
        let n = fill_from(&mut self.input, buf, &self.name)?;
        self.bytes += n as u64;
        Ok(n)
    }

    pub(crate) fn read_exact(&mut self, buf: &mut [u8], what: &str) -> Result<()> {
        let at = self.bytes;
        if self.fill(buf)? < buf.len() {
            return Err(corrupt(format!(
                "input truncated inside {what} (at byte {at})"
            )));
        }
        Ok(())
    }

    pub(crate) fn read_u32(&mut self, what: &str) -> Result<u32> {
        let mut b = [0; 4];
        self.read_exact(&mut b, what)?;
        Ok(u32::from_le_bytes(b))
    }

    /// A u32, or None at a clean end of input.
    pub(crate) fn read_u32_or_end(&mut self, what: &str) -> Result<Option<u32>> {
        let mut b = [0; 4];
        match self.fill(&mut b)? {
            0 => Ok(None),
            4 => Ok(Some(u32::from_le_bytes(b))),
            _ => Err(corrupt(format!("input truncated inside {what}"))),
        }
    }

    /// The error for a magic number no reader knows (just read).
    pub(crate) fn unknown_magic(&self, magic: u32) -> Error {
        corrupt(format!(
            "unknown magic number {magic:#010x} at byte {} (not LZ4 data)",
            self.bytes - 4
        ))
    }

    /// The frame descriptor after [`FRAME_MAGIC`], checked ([`FrameHeader::parse`]). A dictionary
    /// id is returned, not refused: see [`refuse_dictionary`].
    pub(crate) fn frame_header(&mut self) -> Result<FrameHeader> {
        let mut desc = [0u8; 15];
        self.read_exact(&mut desc[..1], "a frame header")?;
        let len = FrameHeader::descriptor_len(desc[0]);
        self.read_exact(&mut desc[1..len], "a frame header")?;
        FrameHeader::parse(&desc[..len])
    }

    /// Skips a skippable frame after its magic: reads its size and that many bytes, 64 KiB at a
    /// time, whatever the size says.
    pub(crate) fn skip_skippable(&mut self) -> Result<()> {
        let len = self.read_u32("a skippable frame size")? as usize;
        let mut skip = vec![0u8; len.min(1 << 16)];
        let mut left = len;
        while left > 0 {
            let k = left.min(skip.len());
            let got = self.fill(&mut skip[..k])?;
            if got < k {
                return Err(corrupt(format!(
                    "skippable frame size {len} bytes runs past the end of the input \
                     ({} bytes of it present)",
                    len - left + got
                )));
            }
            left -= k;
        }
        Ok(())
    }

    /// The next block's (stored bytes, stored raw) of a frame with `header`, checked against its
    /// block maximum; None at the end mark.
    pub(crate) fn block_size(&mut self, header: &FrameHeader) -> Result<Option<(usize, bool)>> {
        let word = self.read_u32("a block size")?;
        if word == 0 {
            return Ok(None);
        }
        let size = (word & !UNCOMPRESSED_BIT) as usize;
        if size > header.block_max_bytes {
            return Err(corrupt(format!(
                "block size {size} bytes (at byte {}) exceeds the frame header's block maximum {}",
                self.bytes - 4,
                header.block_max_bytes
            )));
        }
        Ok(Some((size, word & UNCOMPRESSED_BIT != 0)))
    }

    /// Reads a block's checksum and checks it against `block`, block number `index`.
    pub(crate) fn block_checksum(&mut self, block: &[u8], index: u64) -> Result<()> {
        let stored = self.read_u32("a block checksum")?;
        if stored != xxh32(block, 0) {
            return Err(corrupt(format!("block {index} checksum mismatch")));
        }
        Ok(())
    }

    /// The next item of a legacy frame: its end, the next frame's magic, or a checked block size.
    pub(crate) fn legacy_next(&mut self) -> Result<LegacyNext> {
        let Some(word) = self.read_u32_or_end("a legacy block size")? else {
            return Ok(LegacyNext::End);
        };
        if word == FRAME_MAGIC || word == LEGACY_MAGIC || is_skippable_magic(word) {
            return Ok(LegacyNext::Magic(word));
        }
        let size = word as usize;
        if size > LEGACY_BOUND {
            return Err(corrupt(format!(
                "legacy block size {size} bytes (at byte {}) exceeds the bound {LEGACY_BOUND}",
                self.bytes - 4
            )));
        }
        Ok(LegacyNext::Block(size))
    }
}

/// Fills `buf` from `input` (named `name` in I/O errors) as far as it allows, retrying
/// interrupted reads; returns the bytes read (short only at end of input).
pub(crate) fn fill_from(input: &mut impl Read, buf: &mut [u8], name: &Path) -> Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(source) => {
                return Err(Error::Io {
                    path: name.to_path_buf(),
                    source,
                })
            }
        }
    }
    Ok(n)
}

/// Refuses a frame compressed with a dictionary ([`Error::Input`]).
pub(crate) fn refuse_dictionary(header: &FrameHeader) -> Result<()> {
    match header.dict_id {
        Some(id) => Err(Error::input(format!(
            "frame was compressed with dictionary {id:#010x}; dictionaries are not supported"
        ))),
        None => Ok(()),
    }
}

/// Fails once a frame has decoded to more than its header's content size (if it declares one).
pub(crate) fn check_content_growth(content_size: Option<u64>, frame_bytes: u64) -> Result<()> {
    match content_size {
        Some(declared) if frame_bytes > declared => Err(corrupt(format!(
            "frame holds more than the {declared} bytes its header's content size declares"
        ))),
        _ => Ok(()),
    }
}

/// The checks at a frame's end: the stored content checksum (if any) against `computed`, then
/// the declared content size (if any) against the `frame_bytes` it held.
pub(crate) fn check_frame_end(
    stored: Option<u32>,
    computed: u32,
    content_size: Option<u64>,
    frame_bytes: u64,
) -> Result<()> {
    if let Some(stored) = stored {
        if stored != computed {
            return Err(corrupt(format!(
                "content checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
            )));
        }
    }
    if let Some(declared) = content_size {
        if declared != frame_bytes {
            return Err(corrupt(format!(
                "frame declares {declared} bytes of content but holds {frame_bytes}"
            )));
        }
    }
    Ok(())
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

//! [`FrameDecoder`]: LZ4 frames decoded a batch of blocks at a time, the blocks of a batch in
//! parallel (independent blocks and legacy frames; linked blocks one after another), pulled
//! through [`std::io::Read`] or [`FrameDecoder::next_batch`]. Reads what
//! [`decode_frames`](super::decode_frames) reads (concatenated, skippable, legacy frames; block
//! and content checksums), with the same checks and errors. Memory: one batch of input
//! (about 8 MiB, or 64 blocks of a frame's block maximum) and its output.

use super::block_decode::decode_block_into;
use super::frame_header::{
    is_skippable_magic, FrameHeader, FRAME_MAGIC, LEGACY_BLOCK_BYTES, LEGACY_MAGIC,
};
use super::frame_input::{
    check_content_growth, check_frame_end, name_corrupt, refuse_dictionary, ByteReader, LegacyNext,
};
use super::par::par_concat;
use super::xxh32::Xxh32;
use super::{corrupt, decode_block_append, DecodeStats};
use crate::{Error, Result};
use rayon::prelude::*;
use std::io::Read;
use std::path::Path;

/// Compressed bytes gathered per batch (at least one block).
const BATCH_INPUT_BYTES: usize = 1 << 20;
/// Output buffers per batch are at most this large (blocks times the block maximum), so a batch
/// of 64 KiB-maximum blocks holds at most 256 blocks (only what a block decodes to is touched).
const BATCH_OUTPUT_BYTES: usize = 16 << 20;
/// Legacy blocks (8 MiB each) per batch.
const LEGACY_BATCH_BLOCKS: usize = 4;
/// How far back a linked block may reference (bytes).
const HISTORY_BYTES: usize = 64 * 1024;

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Magic,
    Frame,
    Legacy,
    End,
}

/// Pull-style, parallel LZ4 decoder over any reader; `Send` when the reader is.
pub struct FrameDecoder<R: Read> {
    src: ByteReader<R>,
    state: State,
    next_magic: Option<u32>,
    header: Option<FrameHeader>,
    hash: Xxh32,
    frame_bytes: u64,
    blocks: Vec<u8>,
    spans: Vec<(usize, usize, bool)>,
    /// Per block of a batch: a buffer of the block maximum and the bytes it decoded to.
    parts: Vec<(Vec<u8>, usize)>,
    window: Vec<u8>,
    out: Vec<u8>,
    at: usize,
    stats: DecodeStats,
}

impl<R: Read> FrameDecoder<R> {
    /// A decoder of `input` (named `<reader>` in I/O errors).
    pub fn new(input: R) -> Self {
        Self::named(input, Path::new("<reader>"))
    }

    /// A decoder of `input`, named `name` in I/O errors.
    pub fn named(input: R, name: &Path) -> Self {
        FrameDecoder {
            src: ByteReader::new(input, name),
            state: State::Magic,
            next_magic: None,
            header: None,
            hash: Xxh32::new(0),
            frame_bytes: 0,
            blocks: Vec::new(),
            spans: Vec::new(),
            parts: Vec::new(),
            window: Vec::new(),
            out: Vec::new(),
            at: 0,
            stats: DecodeStats::default(),
        }
    }

    /// Swaps the last batch's bytes (from [`FrameDecoder::next_batch`]) with `spare`, so the
    /// caller can keep them (e.g. hand them to a writer thread) without a copy; `spare` becomes
    /// the next batch's buffer.
    pub fn take_batch(&mut self, spare: &mut Vec<u8>) {
        std::mem::swap(&mut self.out, spare);
        self.out.clear();
        self.at = 0;
    }

    /// Counters so far (`output_bytes`: bytes decoded, whether read out yet or not).
    pub fn stats(&self) -> DecodeStats {
        DecodeStats {
            input_bytes: self.src.bytes,
            ..self.stats
        }
    }

    /// Appends one block of `size` stored bytes to the batch.
    fn take_block(&mut self, size: usize, raw: bool, what: &str) -> Result<()> {
        let start = self.blocks.len();
        self.blocks.resize(start + size, 0);
        self.src.read_exact(&mut self.blocks[start..], what)?;
        self.spans.push((start, size, raw));
        Ok(())
    }

    /// Decodes the next batch of blocks; `Ok(None)` at the end of the input. The slice holds the
    /// batch's decoded bytes, in order. Fails like [`decode_frames`](super::decode_frames).
    pub fn next_batch(&mut self) -> Result<Option<&[u8]>> {
        match self.batch() {
            Ok(true) => Ok(Some(&self.out)),
            Ok(false) => Ok(None),
            Err(e) => Err(name_corrupt(self.src.name(), e)),
        }
    }

    /// Decodes the next batch into `out`; false at the end of the input.
    fn batch(&mut self) -> Result<bool> {
        self.blocks.clear();
        self.spans.clear();
        self.out.clear();
        self.at = 0;
        loop {
            match self.state {
                State::End => return Ok(false),
                State::Magic => self.magic()?,
                State::Frame => {
                    if self.frame_batch()? {
                        return Ok(true);
                    }
                }
                State::Legacy => {
                    if self.legacy_batch()? {
                        return Ok(true);
                    }
                }
            }
        }
    }

    fn magic(&mut self) -> Result<()> {
        let magic = match self.next_magic.take() {
            Some(m) => m,
            None => match self.src.read_u32_or_end("a magic number")? {
                Some(m) => m,
                None if self.stats.frames == 0 => return Err(corrupt("empty input: no LZ4 frame")),
                None => {
                    self.state = State::End;
                    return Ok(());
                }
            },
        };
        match magic {
            FRAME_MAGIC => {
                let header = self.src.frame_header()?;
                refuse_dictionary(&header)?;
                self.header = Some(header);
                self.hash = Xxh32::new(0);
                self.frame_bytes = 0;
                self.window.clear();
                self.state = State::Frame;
            }
            LEGACY_MAGIC => self.state = State::Legacy,
            m if is_skippable_magic(m) => {
                self.src.skip_skippable()?;
                self.stats.frames += 1;
            }
            m => return Err(self.src.unknown_magic(m)),
        }
        Ok(())
    }

    /// Reads and decodes up to a batch of the current frame's blocks; true if it produced any.
    fn frame_batch(&mut self) -> Result<bool> {
        let header = self.header.expect("inside a frame");
        let mut ended = false;
        let most = (BATCH_OUTPUT_BYTES / header.block_max_bytes).max(1);
        // At least a block per worker, so large blocks (the `lz4` tool's 4 MiB) still decode
        // in parallel.
        let least = rayon::current_num_threads().min(most);
        while (self.blocks.len() < BATCH_INPUT_BYTES || self.spans.len() < least)
            && self.spans.len() < most
        {
            let Some((size, raw)) = self.src.block_size(&header)? else {
                ended = true;
                break;
            };
            self.take_block(size, raw, "a block")?;
            if header.block_checksum {
                let (at, len, _) = *self.spans.last().expect("pushed above");
                let index = self.stats.blocks + self.spans.len() as u64 - 1;
                self.src.block_checksum(&self.blocks[at..at + len], index)?;
            }
        }
        if header.block_independent {
            self.decode_independent(header.block_max_bytes)?;
        } else {
            self.decode_linked(header.block_max_bytes)?;
        }
        self.frame_bytes += self.out.len() as u64;
        check_content_growth(header.content_size, self.frame_bytes)?;
        self.hash.update(&self.out);
        if ended {
            let stored = if header.content_checksum {
                Some(self.src.read_u32("the content checksum")?)
            } else {
                None
            };
            check_frame_end(
                stored,
                self.hash.digest(),
                header.content_size,
                self.frame_bytes,
            )?;
            self.stats.frames += 1;
            self.state = State::Magic;
        }
        Ok(!self.out.is_empty())
    }

    /// Decodes the batch's blocks in parallel into `out`.
    fn decode_independent(&mut self, max: usize) -> Result<()> {
        let n = self.spans.len();
        if self.parts.len() < n {
            self.parts.resize_with(n, || (Vec::new(), 0));
        }
        let blocks = &self.blocks;
        self.parts[..n]
            .par_iter_mut()
            .zip(self.spans.par_iter())
            .try_for_each(|((part, used), &(at, len, raw))| {
                let block = &blocks[at..at + len];
                // Each part is zeroed once per block maximum; later blocks overwrite it.
                if part.len() != max {
                    part.clear();
                    part.resize(max, 0);
                }
                *used = if raw {
                    part[..len].copy_from_slice(block);
                    len
                } else {
                    decode_block_into(block, part)?
                };
                Ok::<(), Error>(())
            })?;
        self.stats.blocks += n as u64;
        let slices: Vec<&[u8]> = self.parts[..n].iter().map(|(p, u)| &p[..*u]).collect();
        par_concat(&mut self.out, &slices);
        self.stats.output_bytes += self.out.len() as u64;
        Ok(())
    }

    /// Decodes linked blocks one after another (each may reference the 64 KiB before it).
    fn decode_linked(&mut self, max: usize) -> Result<()> {
        for &(at, len, raw) in &self.spans {
            if self.window.len() > HISTORY_BYTES {
                self.window.drain(..self.window.len() - HISTORY_BYTES);
            }
            let start = self.window.len();
            let block = &self.blocks[at..at + len];
            if raw {
                self.window.extend_from_slice(block);
            } else {
                decode_block_append(block, &mut self.window, 0, max)?;
            }
            self.out.extend_from_slice(&self.window[start..]);
            self.stats.output_bytes += (self.window.len() - start) as u64;
            self.stats.blocks += 1;
        }
        Ok(())
    }

    /// Reads and decodes a batch of legacy blocks; true if it produced any.
    fn legacy_batch(&mut self) -> Result<bool> {
        while self.blocks.len() < BATCH_INPUT_BYTES && self.spans.len() < LEGACY_BATCH_BLOCKS {
            match self.src.legacy_next()? {
                LegacyNext::Block(size) => self.take_block(size, false, "a legacy block")?,
                next => {
                    if let LegacyNext::Magic(m) = next {
                        self.next_magic = Some(m);
                    }
                    self.stats.frames += 1;
                    self.state = State::Magic;
                    break;
                }
            }
        }
        self.decode_independent(LEGACY_BLOCK_BYTES)?;
        Ok(!self.out.is_empty())
    }
}

impl<R: Read> Read for FrameDecoder<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.out.len() {
            if self.next_batch().map_err(std::io::Error::other)?.is_none() {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.out.len() - self.at);
        buf[..n].copy_from_slice(&self.out[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

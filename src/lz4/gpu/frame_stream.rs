//! Streaming LZ4 frame decoding through the decompression ring: a parser reads block after block
//! from any reader straight into a slot's pinned buffer (while the host checks and writes the
//! previous batch), the device decodes each block in bounded mode, and the sink puts the blocks
//! back in order, checks every frame's content checksum and size, and hands the bytes on.
//! Memory is the ring plus a batch of output, whatever the input size.
//!
//! The device takes frames with independent blocks of at most 64 KiB (what ptxflow writes).
//! Each block gets an output bound of 4 KiB, ptxflow's default page size; a block stored in
//! more bytes than that, or that decodes to more (a frame written with larger pages), is decoded
//! on the host from the staged bytes. Anything else (linked blocks, larger blocks,
//! legacy frames, dictionaries) is [`Unsuitable`](FrameStreamError::Unsuitable): the caller
//! decodes the input on the CPU instead.

use super::codec::GpuPageCodec;
use super::device_failure;
use super::stage::{DecodeStage, DecodedBatch};
use crate::kernels::lz4::status::{self, KIND_BOUNDED, KIND_RAW};
use crate::lz4::frame_header::{is_skippable_magic, FrameHeader, FRAME_MAGIC, LEGACY_MAGIC};
use crate::lz4::frame_input::{check_content_growth, check_frame_end, name_corrupt, ByteReader};
use crate::lz4::par::par_concat;
use crate::lz4::xxh32::Xxh32;
use crate::lz4::{corrupt, decode_block_append, DecodeStats, MAX_PAGE_BYTES, PAGE_GRANULE_BYTES};
use crate::{Error, Result};
use std::collections::VecDeque;
use std::io::Read;
use std::path::Path;
use std::sync::Mutex;

/// Why a streaming GPU decode stopped.
#[derive(Debug)]
pub enum FrameStreamError {
    /// The input needs the CPU decoder (see the module docs); nothing was handed on from the
    /// frame that needs it, but earlier frames may have been.
    Unsuitable(String),
    /// Any other error (corrupt input, I/O, device).
    Failed(Error),
}

impl From<Error> for FrameStreamError {
    fn from(e: Error) -> Self {
        FrameStreamError::Failed(e)
    }
}

/// A frame's end, as the parser met it: what the sink checks.
struct FrameEnd {
    checksum: Option<u32>,
    content_size: Option<u64>,
}

/// What the parser tells the sink about one batch.
#[derive(Default)]
struct BatchMeta {
    /// Frames that end in this batch: (blocks of the batch before the end, the checks).
    ends: Vec<(usize, FrameEnd)>,
    /// Per block: `None` for the device, else `(stored bytes, raw)` of a block the host takes
    /// (stored bytes above the bound, which the kernel refuses as an entry).
    host: Vec<Option<(usize, bool)>>,
    /// The declared content size of the frame still open after the batch, if it declares one.
    open_content_size: Option<u64>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Magic,
    Blocks,
    End,
}

struct Parser<'r> {
    src: ByteReader<&'r mut (dyn Read + Send)>,
    state: State,
    header: Option<FrameHeader>,
    stats: DecodeStats,
    unsuitable: Option<String>,
}

impl Parser<'_> {
    fn unsuitable(&mut self, why: &str) -> Result<()> {
        self.unsuitable = Some(why.to_string());
        Err(Error::input(why.to_string()))
    }

    fn magic(&mut self) -> Result<()> {
        let magic = match self.src.read_u32_or_end("a magic number")? {
            None if self.stats.frames == 0 => return Err(corrupt("empty input: no LZ4 frame")),
            None => {
                self.state = State::End;
                return Ok(());
            }
            Some(m) => m,
        };
        match magic {
            FRAME_MAGIC => {
                let h = self.src.frame_header()?;
                if h.dict_id.is_some() || !h.block_independent || h.block_max_bytes > MAX_PAGE_BYTES
                {
                    return self.unsuitable(
                        "frames with linked blocks, blocks above 64 KiB or dictionaries",
                    );
                }
                self.header = Some(h);
                self.state = State::Blocks;
            }
            m if is_skippable_magic(m) => {
                self.src.skip_skippable()?;
                self.stats.frames += 1;
            }
            LEGACY_MAGIC => return self.unsuitable("legacy frames"),
            m => return Err(self.src.unknown_magic(m)),
        }
        Ok(())
    }

    /// Stages blocks into `st` until it is full or the input ends; returns (blocks, bytes).
    fn stage(
        &mut self,
        st: DecodeStage<'_>,
        bound: usize,
        meta: &mut BatchMeta,
    ) -> Result<(usize, usize)> {
        let (mut pages, mut at) = (0usize, 0usize);
        let room = st.entries.len() / 4;
        while pages < room {
            match self.state {
                State::End => break,
                State::Magic => self.magic()?,
                State::Blocks => {
                    let h = self.header.expect("inside a frame");
                    if at + h.block_max_bytes > st.packed.len() {
                        break;
                    }
                    let Some((size, raw)) = self.src.block_size(&h)? else {
                        let checksum = if h.content_checksum {
                            Some(self.src.read_u32("the content checksum")?)
                        } else {
                            None
                        };
                        meta.ends.push((
                            pages,
                            FrameEnd {
                                checksum,
                                content_size: h.content_size,
                            },
                        ));
                        self.stats.frames += 1;
                        self.state = State::Magic;
                        continue;
                    };
                    self.src
                        .read_exact(&mut st.packed[at..at + size], "a block")?;
                    if h.block_checksum {
                        self.src
                            .block_checksum(&st.packed[at..at + size], self.stats.blocks)?;
                    }
                    let host = size > bound;
                    let words = match (host, raw) {
                        (true, _) => [at as u32, 0, 0, KIND_RAW],
                        (false, true) => [at as u32, size as u32, size as u32, KIND_RAW],
                        (false, false) => [at as u32, size as u32, bound as u32, KIND_BOUNDED],
                    };
                    st.entries[4 * pages..4 * pages + 4].copy_from_slice(&words);
                    meta.host.push(host.then_some((size, raw)));
                    pages += 1;
                    at += size;
                    self.stats.blocks += 1;
                }
            }
        }
        if self.state == State::Blocks {
            meta.open_content_size = self.header.and_then(|h| h.content_size);
        }
        Ok((pages, at))
    }
}

/// The sink's side: blocks back in order, per-frame checks, bytes handed on.
struct Checker<'o> {
    hash: Xxh32,
    frame_bytes: u64,
    output_bytes: u64,
    blocks: u64,
    bound: usize,
    max_block: usize,
    parts: Vec<Vec<u8>>,
    out: Vec<u8>,
    emit: &'o mut (dyn FnMut(&[u8]) -> Result<()> + Send),
}

impl Checker<'_> {
    fn consume(&mut self, meta: BatchMeta, d: Option<&DecodedBatch<'_>>) -> Result<()> {
        let pages = meta.host.len();
        let mut host_parts = 0;
        // The bytes of each block: the device's output, or a host decode of the staged block.
        let mut slices: Vec<(usize, usize, bool)> = Vec::with_capacity(pages);
        if let Some(d) = d {
            for k in 0..pages {
                let w = d.status[k];
                let code = w & status::CODE_MASK;
                let over = matches!(code, status::OUTPUT_OVERFLOW | status::MARGIN);
                let host = meta.host[k];
                if host.is_some() || over {
                    let at = d.entries[4 * k] as usize;
                    let (stored, raw) = host.unwrap_or((d.entries[4 * k + 1] as usize, false));
                    if self.parts.len() <= host_parts {
                        self.parts.push(Vec::new());
                    }
                    let part = &mut self.parts[host_parts];
                    part.clear();
                    let block = &d.packed[at..at + stored];
                    if raw {
                        part.extend_from_slice(block);
                    } else {
                        decode_block_append(block, part, 0, self.max_block)?;
                    }
                    slices.push((host_parts, part.len(), true));
                    host_parts += 1;
                } else if code != status::OK {
                    return Err(corrupt(format!(
                        "block {}: {} (GPU status {code})",
                        self.blocks + k as u64,
                        status::describe(code)
                    )));
                } else {
                    slices.push((k * self.bound, (w >> status::LEN_SHIFT) as usize, false));
                }
            }
        }
        let views: Vec<&[u8]> = slices
            .iter()
            .map(|&(at, len, host)| match (host, d) {
                (true, _) => &self.parts[at][..len],
                (false, Some(d)) => &d.out[at..at + len],
                (false, None) => &[][..],
            })
            .collect();
        par_concat(&mut self.out, &views);
        // Per-frame checks at each end mark, over the blocks before it.
        let mut offsets = Vec::with_capacity(pages + 1);
        offsets.push(0usize);
        for v in &views {
            offsets.push(offsets.last().expect("non-empty") + v.len());
        }
        let mut from = 0;
        for (before, end) in &meta.ends {
            let seg = &self.out[offsets[from]..offsets[*before]];
            self.hash.update(seg);
            self.frame_bytes += seg.len() as u64;
            check_frame_end(
                end.checksum,
                self.hash.digest(),
                end.content_size,
                self.frame_bytes,
            )?;
            self.hash = Xxh32::new(0);
            self.frame_bytes = 0;
            from = *before;
        }
        let seg = &self.out[offsets[from]..];
        self.hash.update(seg);
        self.frame_bytes += seg.len() as u64;
        // An open frame past its declared size fails before its bytes are handed on.
        check_content_growth(meta.open_content_size, self.frame_bytes)?;
        self.output_bytes += self.out.len() as u64;
        self.blocks += pages as u64;
        (self.emit)(&self.out)
    }
}

impl GpuPageCodec {
    /// Decodes every LZ4 frame of `input` (named `in_name` in errors) on the GPU, handing the
    /// decoded bytes to `emit` in order, a batch at a time; returns the counters. See the module
    /// docs for what the device takes; for anything else, and when the codec runs on the CPU,
    /// this returns [`FrameStreamError::Unsuitable`] before handing on any byte of that frame.
    pub fn decode_frames_stream(
        &mut self,
        input: &mut (dyn Read + Send),
        in_name: &Path,
        emit: &mut (dyn FnMut(&[u8]) -> Result<()> + Send),
    ) -> std::result::Result<DecodeStats, FrameStreamError> {
        if let Some(why) = self.fallback_reason() {
            return Err(FrameStreamError::Unsuitable(why.to_string()));
        }
        let mut parser = Parser {
            src: ByteReader::new(input, in_name),
            state: State::Magic,
            header: None,
            stats: DecodeStats::default(),
            unsuitable: None,
        };
        let bound = PAGE_GRANULE_BYTES * 4;
        let mut checker = Checker {
            hash: Xxh32::new(0),
            frame_bytes: 0,
            output_bytes: 0,
            blocks: 0,
            bound,
            max_block: MAX_PAGE_BYTES,
            parts: Vec::new(),
            out: Vec::new(),
            emit,
        };
        let metas = Mutex::new(VecDeque::<BatchMeta>::new());
        let ring = self.decode_ring(bound)?;
        let r = ring.decompress_stream(
            |st| {
                let mut meta = BatchMeta::default();
                let r = parser.stage(st, bound, &mut meta);
                metas.lock().expect("no panics while held").push_back(meta);
                r
            },
            |d| {
                let meta = metas
                    .lock()
                    .expect("no panics while held")
                    .pop_front()
                    .expect("one meta per staged batch");
                checker.consume(meta, Some(d))
            },
        );
        if let Err(e) = r {
            if let Some(why) = parser.unsuitable.take() {
                return Err(FrameStreamError::Unsuitable(why));
            }
            if device_failure(&e) {
                self.retire(&e);
            }
            return Err(name_corrupt(in_name, e).into());
        }
        // A last batch of end marks only (no blocks) still has frames to check.
        for meta in metas.into_inner().expect("no panics while held") {
            checker
                .consume(meta, None)
                .map_err(|e| name_corrupt(in_name, e))?;
        }
        let mut stats = parser.stats;
        stats.input_bytes = parser.src.bytes;
        stats.output_bytes = checker.output_bytes;
        Ok(stats)
    }
}

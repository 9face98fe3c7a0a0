//! Writes an LZ4 frame with one independent block per page: header (block independence, content
//! checksum, optional content size, block maximum 64 KiB), one block per page (raw pages as
//! uncompressed blocks, size high bit set), the end mark, and the content xxHash32.
//! Pages are compressed through any [`PageStream`], CPU or GPU.

use super::frame_header::{FrameHeader, UNCOMPRESSED_BIT};
use super::xxh32::Xxh32;
use super::{check_page_bytes, CodecPath, CompressedPage, CpuPageStream, PageKind, PageStream};
use super::{DEFAULT_PAGE_BYTES, MAX_PAGE_BYTES};
use crate::{Error, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// What to write in the frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameOptions {
    /// Page (block) size (bytes): a multiple of 1024 in 1 KiB..=64 KiB.
    pub page_bytes: usize,
    /// Declared decompressed size; [`FrameEncoder::finish`] fails if the input differs.
    pub content_size: Option<u64>,
    /// Follow every block with its xxHash32.
    pub block_checksum: bool,
}

impl FrameOptions {
    /// The frame header of a page frame with these options: independent blocks of at most
    /// 64 KiB, a content checksum, no dictionary.
    pub fn header(&self) -> FrameHeader {
        FrameHeader {
            block_independent: true,
            block_checksum: self.block_checksum,
            content_size: self.content_size,
            content_checksum: true,
            dict_id: None,
            block_max_bytes: MAX_PAGE_BYTES,
        }
    }
}

impl Default for FrameOptions {
    fn default() -> Self {
        FrameOptions {
            page_bytes: DEFAULT_PAGE_BYTES,
            content_size: None,
            block_checksum: false,
        }
    }
}

/// Counters of a written frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameStats {
    /// Bytes consumed (uncompressed).
    pub input_bytes: u64,
    /// Bytes of the frame written, header to checksum.
    pub output_bytes: u64,
    /// Pages written.
    pub pages: u64,
    /// Pages stored uncompressed.
    pub raw_pages: u64,
}

/// The page stream an encoder uses: borrowed from the caller, or its own.
enum StreamRef<'s> {
    Borrowed(&'s mut (dyn PageStream + Send)),
    Owned(Box<dyn PageStream + Send>),
}

impl StreamRef<'_> {
    fn get(&mut self) -> &mut (dyn PageStream + Send) {
        match self {
            StreamRef::Borrowed(s) => &mut **s,
            StreamRef::Owned(s) => &mut **s,
        }
    }

    fn get_ref(&self) -> &(dyn PageStream + Send) {
        match self {
            StreamRef::Borrowed(s) => &**s,
            StreamRef::Owned(s) => &**s,
        }
    }
}

/// Streams bytes into an LZ4 frame: cuts pages, pushes them to a [`PageStream`], and writes the
/// compressed pages in order as they come back (popping when the stream is full).
///
/// It implements [`std::io::Write`] (bytes go into the frame; `flush` flushes what was written
/// so far, not the page being cut) and is `Send` when `W` is. [`FrameEncoder::finish`] ends the
/// frame; dropping the encoder without it leaves the frame incomplete. For a stream of its own
/// (CPU or GPU) and no path, use [`FrameEncoder::owned`]:
///
/// ```
/// use ptxflow::lz4::{decompress_frame, CpuPageStream, FrameEncoder, FrameOptions};
/// use std::io::Write;
/// let stream = Box::new(CpuPageStream::new(4096, 64)?);
/// let mut enc = FrameEncoder::owned(Vec::new(), stream, FrameOptions::default())?;
/// enc.write_all(b"hello, hello, hello, hello")?;
/// let (frame, _stats) = enc.finish()?;
/// assert_eq!(decompress_frame(&frame)?, b"hello, hello, hello, hello");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct FrameEncoder<'s, W: Write> {
    out: W,
    out_name: PathBuf,
    stream: StreamRef<'s>,
    options: FrameOptions,
    partial: Vec<u8>,
    popped: CompressedPage,
    content_hash: Xxh32,
    stats: FrameStats,
}

impl<'s, W: Write> FrameEncoder<'s, W> {
    /// Writes the frame header to `out` (`out_name` is used in I/O error messages). Fails with
    /// [`Error::Input`] if the stream's page size differs from `options.page_bytes` or is invalid,
    /// and [`Error::Io`] if writing fails.
    pub fn new(
        out: W,
        out_name: &Path,
        stream: &'s mut (dyn PageStream + Send),
        options: FrameOptions,
    ) -> Result<Self> {
        Self::with_stream(out, out_name, StreamRef::Borrowed(stream), options)
    }

    fn with_stream(
        out: W,
        out_name: &Path,
        stream: StreamRef<'s>,
        options: FrameOptions,
    ) -> Result<Self> {
        check_page_bytes(options.page_bytes)?;
        let s = stream.get_ref();
        if s.page_bytes() != options.page_bytes || s.pending() != 0 {
            return Err(Error::input(format!(
                "page stream of {}-byte pages ({} pending) cannot write a frame of {}-byte pages",
                s.page_bytes(),
                s.pending(),
                options.page_bytes
            )));
        }
        let header = options.header();
        let mut enc = FrameEncoder {
            out,
            out_name: out_name.to_path_buf(),
            stream,
            options,
            partial: Vec::with_capacity(options.page_bytes),
            popped: CompressedPage::default(),
            content_hash: Xxh32::new(0),
            stats: FrameStats::default(),
        };
        enc.write_out(&header.to_bytes()?)?;
        Ok(enc)
    }

    /// The path the pages are compressed on.
    pub fn path(&self) -> CodecPath {
        self.stream.get_ref().path()
    }

    /// Counters so far (pages still in flight are not yet counted as written).
    pub fn stats(&self) -> FrameStats {
        self.stats
    }

    fn write_out(&mut self, bytes: &[u8]) -> Result<()> {
        self.out.write_all(bytes).map_err(|source| Error::Io {
            path: self.out_name.clone(),
            source,
        })?;
        self.stats.output_bytes += bytes.len() as u64;
        Ok(())
    }

    /// Pops one page from the stream and writes it as a block; false if none was pending.
    fn drain_one(&mut self) -> Result<bool> {
        let mut page = std::mem::take(&mut self.popped);
        let got = self.stream.get().pop_page(&mut page)?;
        if got {
            let raw = page.kind == PageKind::Raw;
            let size = page.bytes.len() as u32 | if raw { UNCOMPRESSED_BIT } else { 0 };
            self.write_out(&size.to_le_bytes())?;
            self.write_out(&page.bytes)?;
            if self.options.block_checksum {
                let sum = super::xxh32::xxh32(&page.bytes, 0);
                self.write_out(&sum.to_le_bytes())?;
            }
            self.stats.pages += 1;
            self.stats.raw_pages += raw as u64;
        }
        self.popped = page;
        Ok(got)
    }

    fn push(&mut self, page: &[u8]) -> Result<()> {
        while self.stream.get().free_slots() == 0 {
            if !self.drain_one()? {
                return Err(Error::input(
                    "page stream has no free slot and nothing pending",
                ));
            }
        }
        self.stream.get().push_page(page)
    }

    /// Consumes `data` (any length; pages are cut across calls).
    pub fn write(&mut self, mut data: &[u8]) -> Result<()> {
        self.content_hash.update(data);
        self.stats.input_bytes += data.len() as u64;
        let page_bytes = self.options.page_bytes;
        if !self.partial.is_empty() {
            let take = (page_bytes - self.partial.len()).min(data.len());
            self.partial.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.partial.len() < page_bytes {
                return Ok(());
            }
            let page = std::mem::take(&mut self.partial);
            self.push(&page)?;
            self.partial = page;
            self.partial.clear();
        }
        let mut pages = data.chunks_exact(page_bytes);
        for page in &mut pages {
            self.push(page)?;
        }
        self.partial.extend_from_slice(pages.remainder());
        Ok(())
    }

    /// Pushes the short last page, writes every pending page, the end mark and the content
    /// checksum, flushes, and returns the writer and counters. Fails with [`Error::Input`] if a
    /// declared content size differs from the bytes written.
    pub fn finish(mut self) -> Result<(W, FrameStats)> {
        if let Some(declared) = self.options.content_size {
            if declared != self.stats.input_bytes {
                return Err(Error::input(format!(
                    "frame declared {declared} bytes of content but {} were written",
                    self.stats.input_bytes
                )));
            }
        }
        if !self.partial.is_empty() {
            let page = std::mem::take(&mut self.partial);
            self.push(&page)?;
        }
        while self.drain_one()? {}
        self.write_out(&0u32.to_le_bytes())?;
        let sum = self.content_hash.digest();
        self.write_out(&sum.to_le_bytes())?;
        self.out.flush().map_err(|source| Error::Io {
            path: self.out_name.clone(),
            source,
        })?;
        Ok((self.out, self.stats))
    }
}

impl<W: Write> FrameEncoder<'static, W> {
    /// An encoder that owns its page stream (e.g. from
    /// [`open_page_stream`](super::gpu::open_page_stream)) and writes to any writer: nothing
    /// borrowed, so it can live in a struct or move to another thread. I/O errors name
    /// `<writer>`. Fails like [`FrameEncoder::new`].
    pub fn owned(
        out: W,
        stream: Box<dyn PageStream + Send>,
        options: FrameOptions,
    ) -> Result<Self> {
        Self::with_stream(
            out,
            Path::new("<writer>"),
            StreamRef::Owned(stream),
            options,
        )
    }
}

impl<W: Write> Write for FrameEncoder<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        FrameEncoder::write(self, buf).map_err(std::io::Error::other)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// Compresses `input` into one LZ4 frame in memory on the CPU (content size declared).
/// Fails with [`Error::Input`] for a bad page size.
pub fn compress_frame(input: &[u8], page_bytes: usize) -> Result<Vec<u8>> {
    let mut stream = CpuPageStream::new(page_bytes, 256)?;
    let options = FrameOptions {
        page_bytes,
        content_size: Some(input.len() as u64),
        block_checksum: false,
    };
    let out = Vec::with_capacity(input.len() / 2 + 64);
    let mut enc = FrameEncoder::new(out, Path::new("<memory>"), &mut stream, options)?;
    enc.write(input)?;
    Ok(enc.finish()?.0)
}

/// Lays frame blocks out in `buf` (replacing its contents), with every core: per block its size
/// word (high bit set for a raw block), its stored bytes, and with `block_checksum` its xxHash32.
pub(crate) fn lay_out_blocks(blocks: &[(&[u8], bool)], block_checksum: bool, buf: &mut Vec<u8>) {
    use rayon::prelude::*;
    use std::mem::MaybeUninit;
    let extra = 4 + 4 * block_checksum as usize;
    let total: usize = blocks.iter().map(|b| b.0.len() + extra).sum();
    buf.clear();
    buf.reserve(total);
    let mut rest = &mut buf.spare_capacity_mut()[..total];
    let mut parts = Vec::with_capacity(blocks.len());
    for b in blocks {
        let (p, r) = std::mem::take(&mut rest).split_at_mut(b.0.len() + extra);
        parts.push(p);
        rest = r;
    }
    let put = |d: &mut [MaybeUninit<u8>], s: &[u8]| {
        for (d, &s) in d.iter_mut().zip(s) {
            d.write(s);
        }
    };
    parts
        .into_par_iter()
        .zip(blocks.par_iter())
        .for_each(|(p, &(stored, raw))| {
            let n = stored.len();
            let size = n as u32 | if raw { UNCOMPRESSED_BIT } else { 0 };
            put(&mut p[..4], &size.to_le_bytes());
            put(&mut p[4..4 + n], stored);
            if block_checksum {
                put(
                    &mut p[4 + n..],
                    &super::xxh32::xxh32(stored, 0).to_le_bytes(),
                );
            }
        });
    // SAFETY: the parts cover the first `total` spare bytes exactly, and each was written above.
    unsafe { buf.set_len(total) };
}

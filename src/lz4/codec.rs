//! The page-compressor seam: callers compress pages through a trait, so a GPU implementation can
//! replace the CPU one and say which path ran.
//!
//! - [`PageCodec`]: whole batches (`compress_pages` / `decompress_pages`), simplest to call.
//! - [`PageStream`]: a ring of page slots for pipelined compression. The caller pushes pages while
//!   [`PageStream::free_slots`] is non-zero (backpressure: when it is 0, pop first) and pops
//!   compressed pages in push order. A GPU stream copies pushed pages into a pinned ring, launches
//!   a kernel per filled batch and returns from `pop_page` once that batch's event completes; the
//!   CPU stream compresses all queued pages (in parallel with rayon) when the oldest is popped.
//!
//! Pages are `page_bytes` long except possibly the last one of an input, which may be shorter
//! (and is encoded by the same algorithm with P = its length).

use super::block_encode::PageEncoder;
use super::fast_encode::FastEncoder;
use super::{check_page_bytes, corrupt, decode_block_append, PageKind};
use crate::{Error, Result};
use rayon::prelude::*;
use std::collections::VecDeque;

/// Which implementation compressed the pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodecPath {
    /// The CPU reference encoder ([`PageEncoder`]).
    Cpu,
    /// The GPU kernel (same bytes as the CPU path).
    Gpu,
}

impl std::fmt::Display for CodecPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CodecPath::Cpu => "CPU",
            CodecPath::Gpu => "GPU",
        })
    }
}

/// Where one page lives inside [`CompressedPages::data`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageEntry {
    /// Byte offset of the stored page in `data`.
    pub offset: usize,
    /// Stored bytes (block length, or the page length when raw).
    pub stored_bytes: usize,
    /// Bytes of the page before compression.
    pub original_bytes: usize,
    /// Block or raw.
    pub kind: PageKind,
}

/// The stored pages of one input, in order, packed back to back in one buffer (the layout a GPU
/// batch comes back in).
#[derive(Clone, Debug)]
pub struct CompressedPages {
    /// Page size the input was cut with (bytes).
    pub page_bytes: usize,
    /// All stored pages in order; the GPU path leaves up to 15 bytes of padding between pages
    /// (it keeps the kernel's 16-byte alignment), so reach pages through `pages`.
    pub data: Vec<u8>,
    /// One entry per page, in input order.
    pub pages: Vec<PageEntry>,
    /// Which implementation produced them.
    pub path: CodecPath,
}

impl CompressedPages {
    /// The stored bytes and kind of page `i`; panics if `i >= self.pages.len()` (caller bug).
    pub fn page(&self, i: usize) -> (&[u8], PageKind) {
        let e = self.pages[i];
        (&self.data[e.offset..e.offset + e.stored_bytes], e.kind)
    }

    /// Total bytes before compression.
    pub fn original_bytes(&self) -> usize {
        self.pages.iter().map(|e| e.original_bytes).sum()
    }

    /// Total stored bytes (without any framing or alignment padding between pages).
    pub fn stored_bytes(&self) -> usize {
        self.pages.iter().map(|e| e.stored_bytes).sum()
    }
}

/// One stored page as popped from a [`PageStream`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompressedPage {
    /// The block, or the page itself when raw.
    pub bytes: Vec<u8>,
    /// Block or raw (a default-constructed value is an empty raw page).
    pub kind: PageKind,
    /// Bytes of the page before compression.
    pub original_bytes: usize,
}

/// Batch page compression.
pub trait PageCodec {
    /// The implementation that runs.
    fn path(&self) -> CodecPath;

    /// Cuts `input` into pages of `page_bytes` (last one possibly shorter) and stores each.
    /// Fails with [`Error::Input`] for a bad page size (see [`check_page_bytes`]).
    fn compress_pages(&mut self, input: &[u8], page_bytes: usize) -> Result<CompressedPages>;

    /// Appends the original bytes of every page to `out`. Fails with [`Error::Corrupt`] if a
    /// block is corrupt or decodes to the wrong length.
    fn decompress_pages(&mut self, pages: &CompressedPages, out: &mut Vec<u8>) -> Result<()>;
}

/// Stores a batch of pages in parallel with [`FastEncoder`] (valid LZ4, not the GPU's bytes).
fn compress_batch_fast(pages: &[&[u8]]) -> Vec<CompressedPage> {
    pages
        .par_iter()
        .map_init(FastEncoder::new, |enc, page| {
            let mut bytes = Vec::with_capacity(page.len());
            let kind = enc.compress_page(page, &mut bytes);
            CompressedPage {
                bytes,
                kind,
                original_bytes: page.len(),
            }
        })
        .collect()
}

/// Stores a batch of pages in parallel; one encoder (hash table) per rayon worker.
fn compress_batch(pages: &[&[u8]]) -> Result<Vec<CompressedPage>> {
    pages
        .par_iter()
        .map_init(PageEncoder::new, |enc, page| {
            let mut bytes = Vec::with_capacity(page.len());
            let kind = enc.compress_page(page, &mut bytes)?;
            Ok(CompressedPage {
                bytes,
                kind,
                original_bytes: page.len(),
            })
        })
        .collect()
}

/// Appends the original bytes of one stored page to `out`.
pub fn decompress_page(
    stored: &[u8],
    kind: PageKind,
    original_bytes: usize,
    out: &mut Vec<u8>,
) -> Result<()> {
    match kind {
        PageKind::Raw if stored.len() != original_bytes => Err(corrupt(format!(
            "raw page holds {} bytes, expected {original_bytes}",
            stored.len()
        ))),
        PageKind::Raw => {
            out.extend_from_slice(stored);
            Ok(())
        }
        PageKind::Compressed => {
            let start = out.len();
            let got = decode_block_append(stored, out, start, original_bytes)?;
            if got != original_bytes {
                return Err(corrupt(format!(
                    "page decodes to {got} bytes, expected {original_bytes}"
                )));
            }
            Ok(())
        }
    }
}

/// The CPU implementation of [`PageCodec`] (parallel over pages with rayon).
#[derive(Debug, Default)]
pub struct CpuPageCodec;

impl PageCodec for CpuPageCodec {
    fn path(&self) -> CodecPath {
        CodecPath::Cpu
    }

    fn compress_pages(&mut self, input: &[u8], page_bytes: usize) -> Result<CompressedPages> {
        check_page_bytes(page_bytes)?;
        let pages: Vec<&[u8]> = input.chunks(page_bytes).collect();
        let stored = compress_batch(&pages)?;
        let mut data = Vec::with_capacity(stored.iter().map(|p| p.bytes.len()).sum());
        let mut entries = Vec::with_capacity(stored.len());
        for p in stored {
            entries.push(PageEntry {
                offset: data.len(),
                stored_bytes: p.bytes.len(),
                original_bytes: p.original_bytes,
                kind: p.kind,
            });
            data.extend_from_slice(&p.bytes);
        }
        Ok(CompressedPages {
            page_bytes,
            data,
            pages: entries,
            path: CodecPath::Cpu,
        })
    }

    fn decompress_pages(&mut self, pages: &CompressedPages, out: &mut Vec<u8>) -> Result<()> {
        for e in &pages.pages {
            let stored = pages
                .data
                .get(e.offset..e.offset + e.stored_bytes)
                .ok_or_else(|| corrupt("page entry points outside the data buffer"))?;
            decompress_page(stored, e.kind, e.original_bytes, out)?;
        }
        Ok(())
    }
}

/// Pipelined page compression through a bounded ring of page slots.
pub trait PageStream {
    /// The implementation that runs.
    fn path(&self) -> CodecPath;

    /// Length of a full page (bytes).
    fn page_bytes(&self) -> usize;

    /// Slots free for [`PageStream::push_page`] now; 0 means pop before pushing more.
    fn free_slots(&self) -> usize;

    /// Pages pushed and not yet popped.
    fn pending(&self) -> usize;

    /// Queues one page: `page_bytes` long, or shorter (non-empty) for the last page of the input,
    /// after which nothing more may be pushed until every pending page was popped (then the stream
    /// takes the next input, e.g. the next frame). Fails with [`Error::Capacity`] when no slot is
    /// free and [`Error::Input`] for an empty, oversized or post-final page.
    fn push_page(&mut self, page: &[u8]) -> Result<()>;

    /// Writes the oldest pending page, compressed, into `out` and returns true; false when nothing
    /// is pending. May wait for the batch holding that page to finish.
    fn pop_page(&mut self, out: &mut CompressedPage) -> Result<bool>;
}

/// The CPU implementation of [`PageStream`]: pushed pages are staged; the first pop compresses
/// all staged pages as one parallel batch.
#[derive(Debug)]
pub struct CpuPageStream {
    page_bytes: usize,
    slots: usize,
    staged: Vec<u8>,
    staged_lens: Vec<usize>,
    done: VecDeque<CompressedPage>,
    closed: bool,
    fast: bool,
}

impl CpuPageStream {
    /// A stream of `slots` page slots (>= 1) of `page_bytes` each. Fails with [`Error::Input`]
    /// for a bad page size or zero slots, [`Error::Input`] / [`Error::Capacity`] when
    /// `page_bytes x slots` overflows or cannot be reserved.
    pub fn new(page_bytes: usize, slots: usize) -> Result<Self> {
        check_page_bytes(page_bytes)?;
        if slots == 0 {
            return Err(Error::input("a page stream needs at least one slot"));
        }
        Ok(CpuPageStream {
            page_bytes,
            slots,
            staged: crate::size::vec_with_capacity(
                "LZ4 page stream staging",
                crate::size::product("LZ4 page stream (page bytes x slots)", &[page_bytes, slots])?,
            )?,
            staged_lens: Vec::with_capacity(slots),
            done: VecDeque::with_capacity(slots),
            closed: false,
            fast: false,
        })
    }

    /// Like [`CpuPageStream::new`], but pages are stored by the fast greedy
    /// [`FastEncoder`]: valid LZ4 that any decoder reads, several times faster than the
    /// reference encoder, but not byte-identical to the GPU kernel's pages.
    pub fn new_fast(page_bytes: usize, slots: usize) -> Result<Self> {
        let mut s = Self::new(page_bytes, slots)?;
        s.fast = true;
        Ok(s)
    }
}

impl PageStream for CpuPageStream {
    fn path(&self) -> CodecPath {
        CodecPath::Cpu
    }

    fn page_bytes(&self) -> usize {
        self.page_bytes
    }

    fn free_slots(&self) -> usize {
        self.slots - self.pending()
    }

    fn pending(&self) -> usize {
        self.staged_lens.len() + self.done.len()
    }

    fn push_page(&mut self, page: &[u8]) -> Result<()> {
        if self.closed && self.pending() > 0 {
            return Err(Error::input("page pushed after a short (final) page"));
        }
        if page.is_empty() || page.len() > self.page_bytes {
            return Err(Error::input(format!(
                "page of {} bytes pushed to a stream of {}-byte pages",
                page.len(),
                self.page_bytes
            )));
        }
        if self.free_slots() == 0 {
            return Err(Error::Capacity {
                what: "LZ4 page stream slots".into(),
                needed: self.slots + 1,
                capacity: self.slots,
            });
        }
        self.closed = page.len() < self.page_bytes;
        self.staged.extend_from_slice(page);
        self.staged_lens.push(page.len());
        Ok(())
    }

    fn pop_page(&mut self, out: &mut CompressedPage) -> Result<bool> {
        if self.done.is_empty() && !self.staged_lens.is_empty() {
            let mut pages = Vec::with_capacity(self.staged_lens.len());
            let mut at = 0;
            for &len in &self.staged_lens {
                pages.push(&self.staged[at..at + len]);
                at += len;
            }
            if self.fast {
                self.done.extend(compress_batch_fast(&pages));
            } else {
                self.done.extend(compress_batch(&pages)?);
            }
            self.staged.clear();
            self.staged_lens.clear();
        }
        match self.done.pop_front() {
            Some(page) => {
                *out = page;
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

//! What the host and the LZ4 kernels agree on, as plain functions (no CUDA): launch geometry,
//! the compress kernel's `info` words, and the decompress kernel's per-page entries. The GPU
//! pipeline and the PTX-interpreter tests both use them, so the tests check the real contract.

use crate::kernels::lz4::compress::{self, INFO_HEADER_WORDS};
use crate::kernels::lz4::decompress;
use crate::kernels::lz4::{decompress_shared_per_warp, status, RAW_FLAG};
use crate::lz4::{PageEntry, PageKind};
use crate::{Error, Result};

/// Dynamic shared memory a block may use without the opt-in attribute (bytes).
const DEFAULT_SHARED_LIMIT: u32 = 48 << 10;
/// Shared memory the driver reserves per resident block (bytes).
const SHARED_RESERVED_PER_BLOCK: u32 = 1 << 10;

/// Grid, block and dynamic shared memory of one launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Blocks in the grid.
    pub blocks: u32,
    /// Warps per block (one page per warp).
    pub warps_per_block: u32,
    /// Dynamic shared memory per block (bytes).
    pub shared_bytes: u32,
}

impl Geometry {
    /// Threads per block.
    pub fn threads(&self) -> u32 {
        self.warps_per_block * 32
    }

    /// Warps in the whole grid.
    pub fn warps(&self) -> u32 {
        self.blocks * self.warps_per_block
    }
}

/// Registers of one SM quarter (an SM has 4, each with its own scheduler and register file).
const QUARTER_REGISTERS: u32 = 16384;

/// What bounds how many blocks an SM holds: its shared memory (bytes) and the kernel's
/// registers per thread (0 when unknown).
#[derive(Clone, Copy, Debug)]
pub struct SmLimits {
    /// Shared memory one SM offers blocks, bytes.
    pub shared_bytes: u32,
    /// The kernel's registers per thread (0 when unknown).
    pub regs_per_thread: u32,
}

/// Warps one SM holds at most (sm_75 has 32, later ones 48 or 64; the hardware caps the rest).
const SM_MAX_WARPS: u32 = 64;

/// Blocks of `wpb` warps (of `per_warp` shared bytes each) that one SM holds at once: shared
/// memory and registers both bound it. Registers are allocated per warp in units of 256 from the
/// file of the quarter the warp runs on, so an SM holds 4 times what one quarter holds (ncu's
/// "Block Limit Registers" on an H100: 20 one-warp blocks at 88 registers, not 65536 / 2816 = 23;
/// 5 blocks of 7 warps at 47, not 6).
fn blocks_per_sm(per_warp: u32, wpb: u32, sm: SmLimits) -> u32 {
    let by_shared = sm.shared_bytes / (wpb * per_warp + SHARED_RESERVED_PER_BLOCK);
    let warp_regs = (sm.regs_per_thread * 32).div_ceil(256) * 256;
    let by_regs = QUARTER_REGISTERS
        .checked_div(warp_regs)
        .map_or(u32::MAX, |q| 4 * q / wpb);
    by_shared.min(by_regs).min(SM_MAX_WARPS / wpb).clamp(1, 32)
}

/// Shapes a launch of warps needing `per_warp` shared bytes each over `n_pages` pages on a
/// device of `sm_count` SMs: the warps per block (at least one, at most `max_warps`, within the
/// default 48 KiB) that let an SM hold the most warps (the larger block on a tie), and no more
/// blocks than the SMs hold at once.
fn geometry(
    per_warp: u32,
    max_warps: u32,
    n_pages: usize,
    sm_count: u32,
    sm: SmLimits,
) -> Geometry {
    geometry_capped(
        per_warp,
        max_warps,
        DEFAULT_SHARED_LIMIT,
        n_pages,
        sm_count,
        sm,
    )
}

/// [`geometry`] with blocks of at most `cap` shared bytes.
fn geometry_capped(
    per_warp: u32,
    max_warps: u32,
    cap: u32,
    n_pages: usize,
    sm_count: u32,
    sm: SmLimits,
) -> Geometry {
    let top = (cap / per_warp).clamp(1, max_warps);
    let wpb = (1..=top)
        .rev()
        .max_by_key(|&w| (w * blocks_per_sm(per_warp, w, sm), w))
        .unwrap_or(1);
    let per_sm = blocks_per_sm(per_warp, wpb, sm);
    let wanted = n_pages.div_ceil(wpb as usize).max(1);
    let blocks = wanted.min((sm_count.max(1) * per_sm) as usize) as u32;
    Geometry {
        blocks,
        warps_per_block: wpb,
        shared_bytes: wpb * per_warp,
    }
}

/// Launch shape of `lz4_compress` (warps take pages from a counter, so a full device is enough).
pub fn compress_geometry(
    page_bytes: usize,
    n_pages: usize,
    sm_count: u32,
    sm: SmLimits,
) -> Geometry {
    compress_geometry_for(compress::Variant::TABLE, page_bytes, n_pages, sm_count, sm)
}

/// [`compress_geometry`] of the build `variant`: its shared memory per warp and block bound
/// ([`Variant::wide`](compress::Variant::wide) blocks may use more than the default 48 KiB).
pub fn compress_geometry_for(
    variant: compress::Variant,
    page_bytes: usize,
    n_pages: usize,
    sm_count: u32,
    sm: SmLimits,
) -> Geometry {
    let per_warp = variant.shared_per_warp(page_bytes as u32);
    let narrow = geometry(per_warp, compress::MAX_BLOCK / 32, n_pages, sm_count, sm);
    if !variant.wide {
        return narrow;
    }
    let cap = sm.shared_bytes.saturating_sub(SHARED_RESERVED_PER_BLOCK);
    let max_warps = variant.max_block() / 32;
    let wide = geometry_capped(per_warp, max_warps, cap, n_pages, sm_count, sm);
    // Wide blocks put more pages on each SM: only a launch that fills every SM gains from them
    // (a small one would crowd its pages onto a few SMs).
    let full = sm_count.max(1) * blocks_per_sm(per_warp, wide.warps_per_block, sm);
    if wide.blocks >= full && wide.warps() > narrow.warps() {
        wide
    } else {
        narrow
    }
}

/// Launch shape of `lz4_decompress` (warps stride over the pages).
pub fn decompress_geometry(
    page_bytes: usize,
    n_pages: usize,
    sm_count: u32,
    sm: SmLimits,
) -> Geometry {
    geometry(
        decompress_shared_per_warp(page_bytes as u32),
        decompress::MAX_BLOCK / 32,
        n_pages,
        sm_count,
        sm,
    )
}

/// Words of the compress kernel's `info` buffer for `n_pages` pages.
pub fn info_words(n_pages: usize) -> usize {
    INFO_HEADER_WORDS as usize + 2 * n_pages
}

/// Bytes of `packed` the compress kernel used (its allocation counter), from the info words.
pub fn packed_used(info: &[u32]) -> usize {
    info.get(1).copied().unwrap_or(0) as usize
}

/// Lengths of the pages of a batch of `input_bytes` cut into `page_bytes` pages.
pub fn page_lengths(input_bytes: usize, page_bytes: usize) -> impl Iterator<Item = usize> {
    let n = input_bytes.div_ceil(page_bytes);
    (0..n).map(move |k| (input_bytes - k * page_bytes).min(page_bytes))
}

/// Reads the per-page words the compress kernel wrote for pages of lengths `lens`: where each
/// stored page lies in `packed` and how it is stored. Checks every word against the page lengths
/// and the bytes used, so a broken kernel result is an [`Error::Kernel`], never a bad slice.
pub fn read_compress_info(info: &[u32], lens: &[usize]) -> Result<Vec<PageEntry>> {
    let bad = |detail: String| Error::Kernel {
        kernel: "lz4_compress",
        code: 0,
        detail,
    };
    if info.len() < info_words(lens.len()) {
        return Err(bad(format!(
            "info holds {} words for {} pages",
            info.len(),
            lens.len()
        )));
    }
    let used = packed_used(info);
    let mut out = Vec::with_capacity(lens.len());
    for (k, &len) in lens.iter().enumerate() {
        let word = info[INFO_HEADER_WORDS as usize + 2 * k];
        let offset = info[INFO_HEADER_WORDS as usize + 2 * k + 1] as usize;
        let raw = word & RAW_FLAG != 0;
        let stored = (word & !RAW_FLAG) as usize;
        let kind = if raw {
            PageKind::Raw
        } else {
            PageKind::Compressed
        };
        let consistent = if raw { stored == len } else { stored < len };
        if !consistent || !offset.is_multiple_of(16) || offset + stored > used {
            return Err(bad(format!(
                "page {k} of {len} B: stored {stored} B ({kind:?}) at {offset} of {used} used bytes"
            )));
        }
        out.push(PageEntry {
            offset,
            stored_bytes: stored,
            original_bytes: len,
            kind,
        });
    }
    Ok(out)
}

/// The decompress kernel's entry words (offset, stored, original, kind) of `pages`, checking
/// that offsets fit 32 bits and each page fits `page_bytes` (else [`Error::Corrupt`]).
pub fn decompress_entries(pages: &[PageEntry], page_bytes: usize) -> Result<Vec<u32>> {
    let mut words = Vec::with_capacity(4 * pages.len());
    for (k, e) in pages.iter().enumerate() {
        let fits = e.original_bytes <= page_bytes && e.stored_bytes <= page_bytes;
        let offset = u32::try_from(e.offset).ok().filter(|_| fits).ok_or_else(|| Error::Corrupt {
            what: format!("page {k}: entry (offset {}, {} stored, {} original bytes) does not fit {page_bytes}-byte pages", e.offset, e.stored_bytes, e.original_bytes),
        })?;
        words.extend_from_slice(&[
            offset,
            e.stored_bytes as u32,
            e.original_bytes as u32,
            (e.kind == PageKind::Raw) as u32,
        ]);
    }
    Ok(words)
}

/// The first failing page of a decompress status array as an [`Error::Corrupt`].
pub fn check_decompress_status(status_words: &[u32]) -> Result<()> {
    match status_words
        .iter()
        .position(|&s| s & status::CODE_MASK != status::OK)
    {
        None => Ok(()),
        Some(k) => {
            let code = status_words[k] & status::CODE_MASK;
            Err(Error::Corrupt {
                what: format!("page {k}: {} (GPU status {code})", status::describe(code)),
            })
        }
    }
}

/// Bytes page `k` produced, from its status word.
pub fn produced_bytes(status_word: u32) -> usize {
    (status_word >> status::LEN_SHIFT) as usize
}

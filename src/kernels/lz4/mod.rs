//! LZ4 page kernels (one warp per page) and what host and kernels agree on: per-page metadata
//! words, status codes, shared-memory layout per warp, and small warp helpers the kernels share.
//!
//! - [`compress`]: `lz4_compress`, the spec of `crate::lz4::block_encode` on 32 lanes (its folder:
//!   the kernel, the window parse, match extension, sequence emission, page in and block out);
//! - [`decompress`]: `lz4_decompress` (two pages per warp) and `lz4_decompress_wide` (one page
//!   per warp, for pages above 32 KiB), bounds-checked block decoders (its folder: the kernels,
//!   the decode loops, byte moves);
//! - `warp`: lane constants and bit helpers both kernels use.
//!
//! `lz4_compress` and `lz4_decompress_wide` keep every branch warp-uniform (conditions come from
//! ballots, shuffles or values all lanes compute alike); per-lane differences are expressed only
//! by predication. This keeps the warp converged and lets the tests' lock-step interpreter run
//! the PTX as written. `lz4_decompress` branches per half-warp (each half its own page); the
//! interpreter runs it with divergence allowed.

pub mod compress;
pub mod decompress;
mod warp;

/// Bit 31 of a page's metadata word: the page is stored raw (its bytes as they are).
pub const RAW_FLAG: u32 = 1 << 31;
/// Bytes of the largest hash table (4096 u16 entries, pages above 4 KiB).
pub const MAX_TABLE_BYTES: u32 = 8192;
/// Slack after each staged page in shared memory: 16-byte chunk reads may run past its end.
pub const STAGE_SLACK_BYTES: u32 = 16;

/// Halvings of the largest table for a page of `page_len` bytes: 2 up to 2 KiB, 1 up to 4 KiB,
/// else 0 (the spec's `12 - hash_log(P)`, see `crate::lz4::block_encode`).
pub fn table_halvings(page_len: u32) -> u32 {
    (page_len <= 4096) as u32 + (page_len <= 2048) as u32
}

/// Bytes of the hash table of a page of `page_len` bytes (2, 4 or 8 KiB).
pub fn table_bytes(page_len: u32) -> u32 {
    MAX_TABLE_BYTES >> table_halvings(page_len)
}

/// Dynamic shared memory one compress warp uses: the hash table of a full page, the staged page
/// and slack (bytes).
pub fn compress_shared_per_warp(page_bytes: u32) -> u32 {
    table_bytes(page_bytes) + page_bytes + STAGE_SLACK_BYTES
}

/// Bytes by which a decompress warp's buffer exceeds the page: LZ4's in-place margin
/// (`(block >> 8) + 32`, with the page as the largest block) rounded up to 16, plus 16 for the
/// alignment of the staged block and 16 of slack after it (unaligned word reads of a raw page
/// may read 4 bytes past its end).
pub fn inplace_margin(page_bytes: u32) -> u32 {
    ((page_bytes >> 8) + 32).next_multiple_of(16) + 32
}

/// Dynamic shared memory a decompress build uses per page in flight: one buffer of the page
/// plus the in-place margin; the block is staged at its end and the page rebuilt from its start
/// (bytes).
pub fn decompress_shared_per_page(page_bytes: u32) -> u32 {
    page_bytes + inplace_margin(page_bytes)
}

/// Dynamic shared memory one warp of the table's `lz4_decompress` uses: a page buffer per
/// half-warp (bytes).
pub fn decompress_shared_per_warp(page_bytes: u32) -> u32 {
    decompress::Variant::TABLE.pages_per_warp() * decompress_shared_per_page(page_bytes)
}

/// Per-page status codes written by `lz4_decompress` in bits 0..8 of its status words (bits
/// 8..32 hold the bytes produced).
pub mod status {
    /// Bits of a status word that hold the code.
    pub const CODE_MASK: u32 = 0xFF;
    /// Shift of the produced-bytes field of a status word.
    pub const LEN_SHIFT: u32 = 8;
    /// Entry kind bit: the page is stored raw.
    pub const KIND_RAW: u32 = 1;
    /// Entry kind bit: the original length is an upper bound (blocks of a frame).
    pub const KIND_BOUNDED: u32 = 2;

    /// The page decoded to exactly its original length.
    pub const OK: u32 = 0;
    /// The page's entry is inconsistent (offset/length outside the data, sizes above the page).
    pub const BAD_ENTRY: u32 = 1;
    /// A length, literal run or offset runs past the end of the block (or the block is empty).
    pub const TRUNCATED: u32 = 2;
    /// A match offset of zero.
    pub const ZERO_OFFSET: u32 = 3;
    /// A match offset reaching before the start of the page.
    pub const OFFSET_BEFORE_START: u32 = 4;
    /// Literals or a match would write past the page's original length.
    pub const OUTPUT_OVERFLOW: u32 = 5;
    /// The block ended before producing the page's original length.
    pub const WRONG_LENGTH: u32 = 6;
    /// The output would overwrite block bytes not yet read: the block expands faster than any
    /// valid block of at most the original length can (LZ4's in-place margin), so it is corrupt
    /// or, with a bounded original length, longer than that bound.
    pub const MARGIN: u32 = 7;

    /// Words for a status code (host error messages).
    pub fn describe(code: u32) -> &'static str {
        match code {
            OK => "decoded",
            BAD_ENTRY => "page entry outside the data or larger than a page",
            TRUNCATED => "block truncated (a length, literals or an offset run past its end)",
            ZERO_OFFSET => "zero match offset",
            OFFSET_BEFORE_START => "match offset reaches before the start of the page",
            OUTPUT_OVERFLOW => "block writes past the page's original length",
            WRONG_LENGTH => "block decodes to fewer bytes than the page's original length",
            MARGIN => "block expands faster than a valid block can (in-place margin exceeded)",
            _ => "unknown status code",
        }
    }
}

//! LZ4 page compression: the input is cut into independent pages (default 4 KiB), each page
//! becomes one LZ4 block (or is stored raw when that is not smaller), and pages travel in the
//! standard LZ4 frame format, which the `lz4` command line tool reads.
//!
//! - [`block_encode`]: the CPU reference encoder; its `//!` is the algorithm's specification, which
//!   the GPU kernel reproduces byte for byte; [`warp_model`] simulates its 32-lane windows.
//! - [`block_decode`]: a bounds-checked block decoder; [`rules`]: a checker of the format's rules.
//! - [`codec`]: the page-compressor seam ([`PageCodec`] in batches, [`PageStream`] as a ring).
//! - [`frame_write`], [`frame_read`], [`frame_reader`], [`frame_header`]: the LZ4 frame format
//!   (the readers share `frame_input`: byte reading and the checks of sizes read from the input);
//!   [`xxh32`]: its hash.

pub mod block_decode;
pub mod block_encode;
pub mod codec;
mod copy_loop;
pub mod fast_encode;
pub mod files;
pub mod frame_header;
mod frame_input;
pub mod frame_read;
pub mod frame_reader;
pub mod frame_write;
pub mod gpu;
pub mod par;
pub mod rules;
pub mod warp_model;
pub mod xxh32;

pub use block_decode::{decode_block, decode_block_append};
pub use block_encode::{compress_page, encode_block, PageEncoder};
pub use codec::{
    CodecPath, CompressedPage, CompressedPages, CpuPageCodec, CpuPageStream, PageCodec, PageEntry,
    PageStream,
};
pub use fast_encode::FastEncoder;
pub use frame_read::{decode_frames, decompress_frame, DecodeStats};
pub use frame_reader::FrameDecoder;
pub use frame_write::{compress_frame, FrameEncoder, FrameOptions, FrameStats};

use crate::{Error, Result};

/// Shortest match the format can express (bytes).
pub const MIN_MATCH: usize = 4;
/// A match may start only at a position `p` with `p + MFLIMIT <= page length`.
pub const MFLIMIT: usize = 12;
/// The last `LAST_LITERALS` bytes of a block are always literals.
pub const LAST_LITERALS: usize = 5;
/// Largest page: offsets are 16-bit, and the frame's smallest block maximum is 64 KiB.
pub const MAX_PAGE_BYTES: usize = 65536;
/// Smallest configurable page size, and the granularity of page sizes (bytes).
pub const PAGE_GRANULE_BYTES: usize = 1024;
/// Default page size (bytes).
pub const DEFAULT_PAGE_BYTES: usize = 4096;

/// How a page is stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PageKind {
    /// An LZ4 block, strictly shorter than the page.
    Compressed,
    /// The page bytes themselves (the block would not have been shorter).
    #[default]
    Raw,
}

/// Checks a configured page size: a multiple of 1024 in 1 KiB..=64 KiB, else [`Error::Input`].
pub fn check_page_bytes(page_bytes: usize) -> Result<()> {
    if page_bytes == 0
        || !page_bytes.is_multiple_of(PAGE_GRANULE_BYTES)
        || page_bytes > MAX_PAGE_BYTES
    {
        return Err(Error::input(format!(
            "LZ4 page size must be a multiple of 1024 bytes in 1 KiB..=64 KiB, got {page_bytes} bytes"
        )));
    }
    Ok(())
}

/// Shorthand for an [`Error::Corrupt`].
pub(crate) fn corrupt(what: impl Into<String>) -> Error {
    Error::Corrupt { what: what.into() }
}

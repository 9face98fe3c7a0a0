//! `lz4_decompress` and `lz4_decompress_wide`: rebuild pages from stored LZ4 blocks (or raw
//! pages), checking every read and write, so corrupt input gives a status code for that page and
//! never an access outside the page's block, its shared buffers or its output slot.
//!
//! Two builds of one contract ([`Variant`]): `lz4_decompress` ([`Variant::TABLE`], `half.rs`)
//! decodes two pages per warp, one per half-warp, for pages up to [`HALVES_MAX_PAGE`];
//! `lz4_decompress_wide` ([`Variant::WIDE`], the files below) one page per warp, for larger pages
//! (two 64 KiB page buffers per warp would leave an SM one warp).
//!
//! Launch: 1-D grid, blocks of whole warps up to [`Variant::max_block`] threads, dynamic shared
//! memory `warps_per_block * pages_per_warp * decompress_shared_per_page(page_bytes)` (for the
//! table build, `warps_per_block * decompress_shared_per_warp(page_bytes)`); warps stride over
//! the pages (groups of `pages_per_warp`), so any grid size works.
//!
//! Parameters: `packed` (stored pages), `packed_bytes` (readable bytes of `packed`; only its
//! 16-byte-aligned prefix is used), `entries` (4 u32 per page: byte offset in `packed`, stored
//! bytes, original bytes, kind: bit 0 = raw page, bit 1 = the original length is only an upper
//! bound, as for blocks of a frame), `n_pages`, `page_bytes` (a multiple of 1024, at most 65536),
//! `output` (page `k` at `k * page_bytes`), `status` (one word per page: the
//! [`status`](super::status) code in bits 0..8, the bytes produced in bits 8..32).
//!
//! The one-warp build, per page: a warp checks the entry (sizes at most `page_bytes`, the block inside `packed`, a raw
//! page as long as the original), copies the block to the end of its shared buffer (the page
//! plus LZ4's in-place margin, so twice as many warps fit an SM as with separate input and output
//! buffers) with 16-byte loads from the aligned address below it, then either copies a raw page
//! out (aligned words assembled with a byte permute) or decodes: every lane follows the same
//! parse (the token and offset loads are broadcasts), lanes copy literals 32 bytes per step, and
//! matches 32 bytes per step, or, for an offset below 32, in doubling steps that never read a byte
//! not yet written. Every length is checked against the block end and the original length before
//! it is used, and every match must end before the block bytes not yet read (the page is rebuilt
//! in place over the consumed block; a valid block never reaches them). The common sequence (both
//! lengths below 15) checks all of this with one branch and re-parses step by step only when a
//! check fails; it loads the next token before copying (the copy cannot reach it), so the token's
//! load latency overlaps the copy, and keeps the literal position as a shared address (the decode
//! loop is issue-bound: ncu shows ~0.8 issued warps per scheduler). The page is then written out
//! with 16-byte stores and lane 0 writes its status.
//!
//! Files: `kernel` (the entry: page loop, entry checks, staging, the raw and decoded ways out),
//! `decode` (the decode loop: the common sequence in one step, the step-by-step parse), `copy`
//! (byte moves). They share the page's registers `Dec` and the constants here; imports run
//! from the kernel down to the helpers, and from every file up to this one.

mod checks;
mod copy;
mod decode;
mod entry;
mod half;
mod kernel;
mod page;

pub use kernel::{build, build_variant, build_wide};

use super::warp::Lanes;
use crate::ptx::*;
use checks::Parse;

/// Design variants of `lz4_decompress` (issue 17's experiments; built at run time, the table's
/// kernel is `Variant::default()`). Every variant decodes exactly what the default decodes and
/// fails on exactly the same pages with the same codes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Variant {
    /// A second fast path for tokens whose literal run takes one length byte (15..=269
    /// literals) and whose match needs none, before the step-by-step parse.
    pub medium: bool,
    /// The common sequence's match must lie wholly before its literals (else the step-by-step
    /// parse copies it), so its copy is always one step without a branch.
    pub one_step: bool,
    /// `.maxnreg` (none: ptxas chooses).
    pub max_regs: Option<u32>,
    /// Two pages per warp, one per half-warp (see `half.rs`; of the other switches `medium` and
    /// `max_regs` apply, the common copy is always one step). Launches need twice the shared
    /// memory per warp ([`Variant::pages_per_warp`]).
    pub halves: bool,
    /// Four pages per warp, one per 8 lanes (as `halves`, which it overrides).
    pub quarters: bool,
}

impl Variant {
    /// The build of the table's `lz4_decompress` (issue 17, session 8: dickens 4 KiB pages on an
    /// H200, `benches/lz4_kernels.rs`, one process: 261.7 GB/s over the whole grid against 170.3
    /// for session 7's one-warp kernel; ncu: 35% fewer instructions, issue slots 79% busy).
    pub const TABLE: Variant = Variant {
        medium: true,
        one_step: false,
        max_regs: None,
        halves: true,
        quarters: false,
    };

    /// The build of the table's `lz4_decompress_wide`: one warp per page, the common copy in
    /// one step (225.0 GB/s on 4 KiB pages over the whole grid, measured as above).
    pub const WIDE: Variant = Variant {
        medium: false,
        one_step: true,
        max_regs: None,
        halves: false,
        quarters: false,
    };

    /// Lanes that decode one page: 32, 16 (`halves`) or 8 (`quarters`). Below 32 the lane groups
    /// branch on their own (the warp's branches are not uniform).
    pub fn lanes_per_page(&self) -> u32 {
        if self.quarters {
            8
        } else if self.halves {
            16
        } else {
            32
        }
    }

    /// Most threads per block of this variant.
    pub fn max_block(&self) -> u32 {
        if self.lanes_per_page() < 32 {
            half::MAX_BLOCK
        } else {
            WARP_MAX_BLOCK
        }
    }

    /// Pages one warp decodes at a time.
    pub fn pages_per_warp(&self) -> u32 {
        32 / self.lanes_per_page()
    }
}

/// Most threads per block of the one-warp-per-page builds (8 warps).
pub const WARP_MAX_BLOCK: u32 = 256;
/// Most threads per block of the table build `lz4_decompress` (see [`Variant::max_block`]).
pub const MAX_BLOCK: u32 = half::MAX_BLOCK;
/// Largest page the table build `lz4_decompress` is used for; larger pages go to
/// `lz4_decompress_wide` (at 64 KiB two page buffers per warp leave an SM one warp, two pages,
/// where one buffer per warp gives three).
pub const HALVES_MAX_PAGE: u32 = 32 << 10;

/// Registers of the page being decoded.
struct Dec {
    ln: Lanes,
    ib: Reg<U32>,
    ob: Reg<U32>,
    stored: Reg<U32>,
    orig: Reg<U32>,
    code: Reg<U32>,
    /// The original length is an upper bound (fewer bytes are fine).
    bounded: Reg<Pred>,
    /// `ob + lane`.
    ob_lane: Reg<U32>,
    fail: Label,
    variant: Variant,
}

/// A checked sequence to copy: `lit` literals from the shared address `lit_src` to page byte
/// `op`, then `ml` bytes from `offset` back.
#[derive(Clone, Copy)]
struct Sequence {
    lit_src: Reg<U32>,
    op: Reg<U32>,
    lit: Reg<U32>,
    offset: Reg<U32>,
    ml: Reg<U32>,
}

/// What the caller of `copy::copy_sequence` knows of the sequence's lengths.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lengths {
    /// Literals below 15 and a match below 19 bytes: both fit 32 bytes together.
    Short,
    /// As `Short`, and the match source lies wholly before the literals (checked).
    ShortApart,
    /// Any lengths.
    Any,
}

impl Dec {
    /// Sets the status to `code` and leaves the page when `bad` (warp-uniform) holds. The status
    /// is written only on the way out, so the hot path carries no conditional moves.
    fn fail_if(&self, b: &mut KernelBuilder, bad: Reg<Pred>, code: u32) {
        self.page().fail_if(b, bad, code);
    }
}

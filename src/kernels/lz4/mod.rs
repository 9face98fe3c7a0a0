//! LZ4 page kernels (one warp per page) and what host and kernels agree on: per-page metadata
//! words, status codes, shared-memory layout per warp, and small warp helpers the kernels share.
//!
//! - [`compress`]: `lz4_compress`, the spec of `crate::lz4::block_encode` on 32 lanes (with
//!   `extend`: match extension, and `emit`: sequence writing);
//! - [`decompress`]: `lz4_decompress`, a bounds-checked block decoder (with `copy`: byte moves).
//!
//! Both kernels keep every branch warp-uniform (conditions come from ballots, shuffles or values
//! all lanes compute alike); per-lane differences are expressed only by predication. This keeps
//! the warp converged and lets the tests' lock-step interpreter run the PTX as written.

pub mod compress;
mod copy;
pub mod decompress;
mod emit;
mod extend;
mod page_io;

use crate::ptx::*;

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

/// Dynamic shared memory one decompress warp uses: one buffer of the page plus the in-place
/// margin; the block is staged at its end and the page rebuilt from its start (bytes).
pub fn decompress_shared_per_warp(page_bytes: u32) -> u32 {
    page_bytes + inplace_margin(page_bytes)
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

/// Per-lane constants of a warp: lane index and the masks of lower / higher lanes.
#[derive(Clone, Copy)]
pub(crate) struct Lanes {
    pub lane: Reg<U32>,
    /// Bits of the lanes below this one.
    pub lt: Reg<U32>,
    /// Bits of the lanes above this one.
    pub gt: Reg<U32>,
}

impl Lanes {
    pub(crate) fn new(b: &mut KernelBuilder) -> Lanes {
        let tid = b.special(Special::TidX);
        let lane = b.and(tid, 31u32);
        let bit = b.shl(1u32, lane);
        let lt = b.sub(bit, 1u32);
        let le = b.or(lt, bit);
        let gt = b.not(le);
        Lanes { lane, lt, gt }
    }
}

/// Index of the lowest set bit of `m` (32 when `m == 0`): `clz(brev(m))`.
pub(crate) fn lowest_bit(b: &mut KernelBuilder, m: Reg<U32>) -> Reg<U32> {
    let r = b.brev(m);
    b.clz(r)
}

/// Index of the highest set bit of a non-zero `m`: `31 - clz(m)`.
pub(crate) fn highest_bit(b: &mut KernelBuilder, m: Reg<U32>) -> Reg<U32> {
    let z = b.clz(m);
    b.sub(31u32, z)
}

/// The 4 bytes at shared address `addr` (any alignment), little endian: two aligned words and a
/// byte permute. Reads the aligned words covering `addr..addr+8` rounded down to 4.
pub(crate) fn ld_shared_u32_unaligned(b: &mut KernelBuilder, addr: Reg<U32>) -> Reg<U32> {
    let aligned = b.and(addr, !3u32);
    let shift = b.and(addr, 3u32);
    let lo = b.ld::<U32>(Space::Shared, aligned);
    let hi = b.ld::<U32>(Space::Shared, Addr::from(aligned).off(4));
    // Selector nibbles s, s+1, s+2, s+3 pick bytes s.. of the 8-byte pair {hi, lo}.
    let sel = b.mad(shift, 0x1111u32, 0x3210u32);
    b.prmt(lo, hi, sel)
}

/// Broadcasts lane `src`'s value to every lane.
pub(crate) fn bcast(b: &mut KernelBuilder, v: Reg<U32>, src: impl Operand<U32>) -> Reg<U32> {
    b.shfl(Shfl::Idx, v, src)
}

// Warp-uniform control flow. Every branch of these kernels is taken by all 32 lanes or none (the
// tests' lock-step interpreter checks it), so they are emitted as `bra.uni`: ptxas then needs no
// divergence handling around the warp-synchronous instructions (fewer registers, no spills).

/// `@p bra.uni label`.
pub(crate) fn ubra_if(b: &mut KernelBuilder, p: Reg<Pred>, label: &Label) {
    b.guarded(p, false, |b| b.bra_uni(label));
}

/// `@!p bra.uni label`.
pub(crate) fn ubra_unless(b: &mut KernelBuilder, p: Reg<Pred>, label: &Label) {
    b.guarded(p, true, |b| b.bra_uni(label));
}

/// A uniform loop: the body gets the break and continue labels, as `loop_forever`.
pub(crate) fn uloop(b: &mut KernelBuilder, body: impl FnOnce(&mut KernelBuilder, &Label, &Label)) {
    let top = b.label("uloop");
    let exit = b.label("uloop_end");
    b.place(&top);
    body(b, &exit, &top);
    b.bra_uni(&top);
    b.place(&exit);
}

/// A uniform `for i in (start..end).step_by(step)`, as `for_range`.
pub(crate) fn ufor(
    b: &mut KernelBuilder,
    start: impl Operand<U32>,
    end: impl Operand<U32>,
    step: impl Operand<U32>,
    body: impl FnOnce(&mut KernelBuilder, Reg<U32>, &Label),
) {
    let i = b.mov::<U32>(start);
    let end_r = b.mov::<U32>(end);
    let step_r = b.mov::<U32>(step);
    let top = b.label("ufor");
    let exit = b.label("ufor_end");
    b.place(&top);
    let done = b.setp(Cmp::Ge, i, end_r);
    ubra_if(b, done, &exit);
    body(b, i, &exit);
    let next = b.add(i, step_r);
    b.mov_to(i, next);
    b.bra_uni(&top);
    b.place(&exit);
}

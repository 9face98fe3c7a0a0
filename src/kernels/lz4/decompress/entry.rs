//! The kernel and page-loop set-up shared by the warp and half-warp decoders: the parameters,
//! the in-place margin, the entry checks, and staging the block at the end of the page buffer.

use super::page::Page;
use crate::ptx::*;

/// The kernel's parameters (loaded) and its dynamic shared memory.
pub(super) struct Params {
    pub packed: Reg<U64>,
    pub packed_bytes: Reg<U32>,
    pub entries: Reg<U64>,
    pub n_pages: Reg<U32>,
    pub page_bytes: Reg<U32>,
    pub output: Reg<U64>,
    pub status_p: Reg<U64>,
    pub smem: SharedArray<U32>,
}

/// Declares and loads the parameters (`packed`, `packed_bytes`, `entries`, `n_pages`,
/// `page_bytes`, `output`, `status`) and declares the dynamic shared memory.
pub(super) fn params(b: &mut KernelBuilder) -> Params {
    let packed = b.param::<U64>("packed");
    let packed_bytes = b.param::<U32>("packed_bytes");
    let entries = b.param::<U64>("entries");
    let n_pages = b.param::<U32>("n_pages");
    let page_bytes = b.param::<U32>("page_bytes");
    let output = b.param::<U64>("output");
    let status_p = b.param::<U64>("status");
    b.comment("parameters");
    let packed = b.global_ptr(&packed);
    let packed_bytes = b.ld_param(&packed_bytes);
    let entries = b.global_ptr(&entries);
    let n_pages = b.ld_param(&n_pages);
    let page_bytes = b.ld_param(&page_bytes);
    let output = b.global_ptr(&output);
    let status_p = b.global_ptr(&status_p);
    let smem = b.dynamic_shared::<U32>("lz4d_smem");
    Params {
        packed,
        packed_bytes,
        entries,
        n_pages,
        page_bytes,
        output,
        status_p,
        smem,
    }
}

/// The in-place margin after a page buffer: `round16((page_bytes >> 8) + 32) + 32`, as
/// `inplace_margin`.
pub(super) fn inplace_margin(b: &mut KernelBuilder, page_bytes: Reg<U32>) -> Reg<U32> {
    let m = b.shr(page_bytes, 8u32);
    let m = b.add(m, 47u32);
    let m = b.and(m, !15u32);
    b.add(m, 32u32)
}

/// A page entry's flags and checks (see [`entry_checks`]).
pub(super) struct Checks {
    /// The page is stored raw (bit 0 of `kind`).
    pub is_raw: Reg<Pred>,
    /// The original length is an upper bound (bit 1 of `kind`).
    pub bounded: Reg<Pred>,
    /// The entry fails its checks.
    pub bad: Reg<Pred>,
}

/// The flags of an entry `[off, stored, orig, kind]` and its checks: sizes within a page, the
/// block inside `packed` (`bound` = its length rounded down to 16), raw pages whole.
pub(super) fn entry_checks(
    b: &mut KernelBuilder,
    [off, stored, orig, kind]: [Reg<U32>; 4],
    page_bytes: Reg<U32>,
    bound: Reg<U32>,
) -> Checks {
    let raw_bit = b.and(kind, 1u32);
    let is_raw = b.setp(Cmp::Ne, raw_bit, 0u32);
    let bound_bit = b.and(kind, 2u32);
    let bounded = b.setp(Cmp::Ne, bound_bit, 0u32);
    let big_orig = b.setp(Cmp::Gt, orig, page_bytes);
    let big_stored = b.setp(Cmp::Gt, stored, page_bytes);
    let outside = b.setp(Cmp::Gt, stored, bound);
    let room = b.sub(bound, stored);
    let past = b.setp(Cmp::Gt, off, room);
    let raw_len = b.setp(Cmp::Ne, stored, orig);
    let raw_bad = b.and(is_raw, raw_len);
    let bad = b.or(big_orig, big_stored);
    let bad = b.or(bad, outside);
    let bad = b.or(bad, raw_bad);
    let bad = b.or(bad, past);
    Checks {
        is_raw,
        bounded,
        bad,
    }
}

/// Stages the block of `stored` bytes at `packed + off` at the end of the page buffer (ending at
/// `region_end`; the page is rebuilt from its start, in place): 16-byte chunks from the aligned
/// address at or below it. Returns the block's shared address.
pub(super) fn stage_block(
    b: &mut KernelBuilder,
    pg: &Page,
    packed: Reg<U64>,
    off: Reg<U32>,
    region_end: Reg<U32>,
) -> Reg<U32> {
    let misalign = b.and(off, 15u32);
    let aligned_off = b.sub(off, misalign);
    let span = b.add(misalign, pg.stored);
    let span = b.add(span, 15u32);
    let chunks = b.shr(span, 4u32);
    let staged = b.shl(chunks, 4u32);
    let staged = b.add(staged, 16u32);
    let stage = b.sub(region_end, staged);
    let src = b.index_addr(packed, aligned_off, 1);
    pg.for_each_item(b, chunks, 4, |b, kb, inside| {
        let src_chunk = b.index_addr(src, kb, 1);
        let s = b.add(stage, kb);
        b.when(inside, |b| {
            let v = b.ld_v4::<U32>(Space::GlobalNc, src_chunk);
            b.st_v4::<U32>(Space::Shared, s, v);
        });
    });
    pg.sync(b);
    b.add(stage, misalign)
}

//! Table helpers of the window parse ([`parse_masks`](super::parse_masks)): the hash bucket of a
//! word and its slot in the warp's table, the `probe` build's bucket sharing test, and the
//! unaligned word reads of the stage.

use super::{Page, HASH_MULTIPLIER};
use crate::kernels::lz4::warp::{ld_shared_u32_f4e, ld_shared_u32_unaligned};
use crate::ptx::*;

/// Hash bucket (already scaled to a byte offset in the table) of the 4 bytes `word`.
fn bucket_offset(b: &mut KernelBuilder, word: Reg<U32>, hash_shift: Reg<U32>) -> Reg<U32> {
    let product = b.mul(word, HASH_MULTIPLIER);
    let hash = b.shr(product, hash_shift);
    b.shl(hash, 1u32)
}

/// With [`Variant::probe`](super::Variant): `group` (this lane alone on entry) becomes the
/// `match.any` mask of equal buckets only when two lanes share one: each lane ORs bit 15 into its
/// entry with an atomic (the old value shows whether an earlier lane did), then clears it again.
/// Entries must all be read before (they are: the caller loaded them); pages above 32 KiB, whose
/// entries may use bit 15, always take `match.any`.
pub(super) fn probe_groups(
    b: &mut KernelBuilder,
    bucket: Reg<U32>,
    slot: Reg<U32>,
    group: Reg<U32>,
    probe_ok: Reg<Pred>,
) {
    b.comment("probe: does any bucket hold two lanes? (bit 15 of the entries, atomics)");
    let alone = b.label("alone");
    let shared_bucket = b.label("shared_bucket");
    b.bra_uni_unless(probe_ok, &shared_bucket);
    b.warp_sync(FULL_MASK);
    let word_addr = b.and(slot, !3u32);
    let half = b.and(slot, 2u32);
    let shift = b.shl(half, 3u32);
    let mark = b.shl(0x8000u32, shift);
    let old = b.atom::<U32>(Space::Shared, AtomOp::Or, word_addr, mark);
    let seen = b.and(old, mark);
    let dup = b.setp(Cmp::Ne, seen, 0u32);
    let any_dup = b.vote_any(dup);
    b.warp_sync(FULL_MASK);
    let unmark = b.not(mark);
    b.atom::<U32>(Space::Shared, AtomOp::And, word_addr, unmark);
    b.warp_sync(FULL_MASK);
    b.bra_uni_unless(any_dup, &alone);
    b.place(&shared_bucket);
    let g = b.match_any(bucket);
    b.mov_to(group, g);
    b.place(&alone);
}

/// The value lanes group by (`match.any`) for the 4 bytes `word`: the bucket's byte offset, or
/// with [`Variant::keyed`](super::Variant) the hash itself (see [`slot_of`]).
pub(super) fn bucket_key(b: &mut KernelBuilder, pc: &Page, word: Reg<U32>) -> Reg<U32> {
    if pc.variant.keyed_windows() {
        let product = b.mul(word, HASH_MULTIPLIER);
        b.shr(product, pc.hash_shift)
    } else {
        bucket_offset(b, word, pc.hash_shift)
    }
}

/// The table slot (shared address) of a [`bucket_key`].
pub(super) fn slot_of(b: &mut KernelBuilder, pc: &Page, key: Reg<U32>) -> Reg<U32> {
    if pc.variant.keyed_windows() {
        b.mad(key, 2u32, pc.table)
    } else {
        b.add(pc.table, key)
    }
}

/// The 4 bytes at shared address `addr` (any alignment).
pub(super) fn ld_word(b: &mut KernelBuilder, pc: &Page, addr: Reg<U32>) -> Reg<U32> {
    if pc.variant.f4e {
        ld_shared_u32_f4e(b, addr)
    } else {
        ld_shared_u32_unaligned(b, addr)
    }
}

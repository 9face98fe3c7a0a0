//! Warp helpers both LZ4 kernels share: lane constants, lowest/highest set bit, unaligned shared
//! word reads, broadcasts, and the loop that hands a warp's lanes 32 items a pass.
//!
//! Both kernels keep every branch warp-uniform (conditions come from ballots, shuffles or values
//! all lanes compute alike) and emit it as `bra.uni` (the builder's `bra_uni_if` and
//! `LoopBranch::Uniform` loops): ptxas then needs no divergence handling around the
//! warp-synchronous instructions (fewer registers, no spills), and the tests' lock-step
//! interpreter checks that every branch is taken by all 32 lanes or none.

use crate::ptx::*;

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

/// [`ld_shared_u32_unaligned`] with the address itself as the `prmt.f4e` selector (no selector
/// arithmetic).
pub(crate) fn ld_shared_u32_f4e(b: &mut KernelBuilder, addr: Reg<U32>) -> Reg<U32> {
    let aligned = b.and(addr, !3u32);
    let lo = b.ld::<U32>(Space::Shared, aligned);
    let hi = b.ld::<U32>(Space::Shared, Addr::from(aligned).off(4));
    b.prmt_f4e(lo, hi, addr)
}

/// Broadcasts lane `src`'s value to every lane.
pub(crate) fn bcast(b: &mut KernelBuilder, v: Reg<U32>, src: impl Operand<U32>) -> Reg<U32> {
    b.shfl(Shfl::Idx, v, src)
}

/// A uniform loop over `count` items, 32 a pass: lane `lane` takes item `base + lane`, `inside`
/// when it is below `count`. `body` gets the item scaled to bytes (`item << shift`; the item
/// itself when `shift` is 0) and `inside`, on which it predicates its accesses.
pub(crate) fn for_each_lane_item(
    b: &mut KernelBuilder,
    lane: Reg<U32>,
    count: Reg<U32>,
    shift: u32,
    body: impl FnOnce(&mut KernelBuilder, Reg<U32>, Reg<Pred>),
) {
    b.for_range_with(LoopBranch::Uniform, 0u32, count, 32u32, |b, base, _| {
        let item = b.add(base, lane);
        let inside = b.setp(Cmp::Lt, item, count);
        let offset = if shift == 0 { item } else { b.shl(item, shift) };
        body(b, offset, inside);
    });
}

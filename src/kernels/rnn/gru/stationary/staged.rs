//! Held weights staged through shared memory (`rnn_gru_held48w`, `rnn_gru_held48sw`; see
//! `held`'s notes): the block's gate rows of W_ih and W_hh are copied with coalesced 16-byte
//! `cp.async` (consecutive threads, consecutive chunks of a row) into padded rows, and each lane
//! then reads its held values from there. The direct loads of `matvec::hold_rows` give every
//! 16-byte load of a warp its own 128-byte line (16 lanes read 16 rows at one column); measured
//! on an H100, the prologue that issues them takes ~3 us for 72 KiB per SM.
//!
//! Same registers, same values: the states are bit-identical to the kernels without staging.

use super::matvec::Held;
use super::Lane;
use crate::kernels::rnn::gru::{Ctx, THREADS};
use crate::ptx::*;

/// Row stride (floats) of the staged W_hh rows (H = 256): 4 floats of padding put the 8 lanes of
/// a quarter-warp, which read 8 consecutive rows at one column, in 8 different bank groups.
pub const WHH_STRIDE: u32 = 260;
/// Row stride (floats) of the staged W_ih rows (Ip = 128), padded as [`WHH_STRIDE`].
pub const WIH_STRIDE: u32 = 132;

/// Shared floats of the staged rows for lane rows q < `qs` (16 qs rows of each matrix).
pub fn floats(qs: u32) -> u32 {
    16 * qs * (WHH_STRIDE + WIH_STRIDE)
}

/// `cp.async` of the block's 3J gate rows of one matrix (`k` floats a row: 256 or 128) into
/// shared offset `dst`, row stride `stride`: thread i copies 16-byte chunks i, i + 256, ...
/// (`row_elem(lr)`: element index of local row lr's first weight). Not committed or awaited.
pub(super) fn stage(
    b: &mut KernelBuilder,
    c: &Ctx<'_>,
    dst: Reg<U32>,
    stride: u32,
    k: u32,
    base: Reg<U64>,
    row_elem: &dyn Fn(&mut KernelBuilder, Reg<U32>) -> Reg<U32>,
) {
    let per_row = k / 4;
    let n = b.mul(c.r3, per_row);
    b.for_range(c.tid, n, THREADS, |b, i, _| {
        let r = b.shr(i, per_row.trailing_zeros());
        let c4 = b.and(i, per_row - 1);
        let c4 = b.shl(c4, 2u32);
        let e = row_elem(b, r);
        let e = b.add(e, c4);
        let src = b.index_addr(base, e, 4);
        let si = b.mad(r, stride, dst);
        let si = b.add(si, c4);
        let sa = b.shared_index(c.smem, si);
        b.cp_async_16(sa, src);
    });
}

/// The lane's held rows `g + 16 q` (q < `qs`) over its K slice `slot ks .. + ks` read from the
/// staged rows at `src` (row stride `stride`): the registers of `matvec::hold_rows`.
pub(super) fn hold(
    b: &mut KernelBuilder,
    c: &Ctx<'_>,
    ks: u32,
    qs: u32,
    lane: &Lane,
    src: Reg<U32>,
    stride: u32,
) -> Held {
    let last = b.sub(c.r3, 1u32);
    let k0 = b.mul(lane.slot, ks);
    let mut w = Vec::with_capacity((ks * qs) as usize / 4);
    for q in 0..qs {
        let lr = b.add(lane.g, 16 * q);
        let lr = b.min(lr, last);
        let e = b.mad(lr, stride, src);
        let e = b.add(e, k0);
        let a: Addr = b.shared_index(c.smem, e).into();
        for m in 0..ks / 4 {
            w.push(b.ld_v4::<F32>(Space::Shared, a.off(16 * i64::from(m))));
        }
    }
    Held { ks, qs, w }
}

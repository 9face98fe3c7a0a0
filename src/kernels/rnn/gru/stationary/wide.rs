//! W_ih held by four of the eight warps only (`rnn_gru_held48s`, see `held`'s notes): the
//! "upper" warps 2, 3, 6, 7 (`warp & 2`), which share two of the SM's four schedulers (warp w
//! issues from scheduler w % 4), so that the "lower" warps 0, 1, 4, 5 (cells, gather) have the
//! other two to themselves. A warp's index in its group is `u = 2 (warp >> 2) + (warp & 1)`,
//! a thread's `32 u + lane`. Upper half-warp `hw = 2 u + half` holds rows `g + 16 q`
//! (g = lane % 16, q < `qs`) over the K-block `16 hw .. + 16` of the padded input (Ip = 128:
//! 8 blocks), four float4 per row.
//!
//! `partials` writes the same scratch values as `matvec::partials` with W_ih held by all eight
//! warps (KS = 8): there, warp w's two half-warps sum k `16 w .. + 8` and `16 w + 8 .. + 16`
//! (each an fma chain from 0 in ascending k) and one shuffle adds the two; here one lane keeps
//! both chains and adds them (f32 addition of two values is commutative). Slot `hw` here is
//! slot `w` there, so the slot sums (`held::gi_sums`), gi and every state are bit-identical.

use super::matvec::{hold_rows, Held};
use super::{Lane, ROW_STRIDE};
use crate::kernels::rnn::gru::Ctx;
use crate::ptx::*;

/// Floats of a K-block (one half-warp's slice of the input).
const KB: u32 = 16;

/// A thread's role: upper (`warp & 2`) or lower, its index `32 u + lane` in its group, and (upper
/// warps) the lane's K-block (as a [`Lane`] whose `slot` is `hw` and whose `warp` is `u`).
pub(super) struct Upper {
    pub on: Reg<Pred>,
    pub local: Reg<U32>,
    pub lane: Lane,
}

impl Upper {
    pub fn new(b: &mut KernelBuilder, c: &Ctx<'_>, lane: &Lane) -> Upper {
        let bit = b.and(c.warp, 2u32);
        let on = b.setp(Cmp::Ne, bit, 0u32);
        let hi = b.shr(c.warp, 2u32);
        let odd = b.and(c.warp, 1u32);
        let u = b.mad(hi, 2u32, odd);
        let local = b.mad(u, 32u32, c.lane);
        let slot = b.mad(u, 2u32, lane.half);
        Upper {
            on,
            local,
            lane: Lane {
                slot,
                g: lane.g,
                warp: u,
                half: lane.half,
            },
        }
    }
}

/// Loads the upper warps' W_ih rows (the loads only in warps 4..8; the registers are not read
/// in the others).
pub(super) fn hold(b: &mut KernelBuilder, c: &Ctx<'_>, up: &Upper, qs: u32) -> Held {
    let mut held = None;
    b.if_then(up.on, |b| {
        held = Some(hold_rows(b, KB, qs, &up.lane, c.p.w_ih, c.r3, &|b, lr| {
            c.w_ih_row(b, lr)
        }));
    });
    held.expect("the if_then closure runs")
}

/// Partial sums of `W_ih x` of `rows` (a multiple of 4) x rows at shared offset `src` (stride
/// Ip = 128) into the scratch at `scratch` (slot `hw`, rows `x ROW_STRIDE`, unit `g + 16 q`);
/// upper warps only, no barrier inside.
pub(super) fn partials(
    b: &mut KernelBuilder,
    smem: &SharedArray<F32>,
    held: &Held,
    up: &Upper,
    src: Reg<U32>,
    rows: Reg<U32>,
    scratch: Reg<U32>,
) {
    let qs = held.qs as usize;
    let lane = &up.lane;
    let k0 = b.shl(lane.slot, 4u32);
    let src0 = b.add(src, k0);
    let stride = b.mul(rows, ROW_STRIDE);
    let s0 = b.mad(lane.slot, stride, scratch);
    let s0 = b.add(s0, lane.g);
    b.for_range(0u32, rows, 4u32, |b, r0, _| {
        // acc[sub][row][q]: sub 0 sums k 16 hw .. + 8, sub 1 the next 8.
        let acc: Vec<Vec<Reg<F32>>> = (0..2 * 4)
            .map(|_| (0..qs).map(|_| b.mov(0.0f32)).collect())
            .collect();
        let first = b.mad(r0, 128u32, src0);
        let a0: Addr = b.shared_index(smem, first).into();
        for m in 0..(KB / 4) as usize {
            let sub = m / 2;
            for bb in 0..4usize {
                let off = 16 * m as i64 + 512 * bb as i64;
                let h = b.ld_v4::<F32>(Space::Shared, a0.off(off));
                for (i, &hv) in h.iter().enumerate() {
                    for (q, &a) in acc[sub * 4 + bb].iter().enumerate() {
                        let w = held.w[q * (KB / 4) as usize + m][i];
                        let s = b.fma(hv, w, a);
                        b.mov_to(a, s);
                    }
                }
            }
        }
        let si = b.mad(r0, ROW_STRIDE, s0);
        let sa: Addr = b.shared_index(smem, si).into();
        for bb in 0..4usize {
            for (q, (&lo, &hi)) in acc[bb].iter().zip(&acc[4 + bb]).enumerate() {
                let v = b.add(lo, hi);
                let off = 4 * (bb as i64 * i64::from(ROW_STRIDE) + 16 * q as i64);
                b.st(Space::Shared, sa.off(off), v);
            }
        }
    });
}

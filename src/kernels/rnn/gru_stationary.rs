//! The GRU rollout's weight-stationary path (`stationary != 0`; the host picks it when H = 256,
//! Ip = 128, a block owns at most 64 gate rows (3J <= 64) and gi of every step fits in shared
//! memory). The block's weights live in registers, so shared memory only feeds the broadcast
//! operand, and no lane reduction is needed.
//!
//! Mat-vec `out[b][r] = sum_k src[b][k] w[r][k]` (K = 16 KS): lane l of warp w holds rows
//! `g + 16 q` (g = l % 16, q < 4; rows past 3J repeat the last row and are never read) over the
//! k slice `slot KS .. + KS`, `slot = 2 w + l / 16` (16 slots cover K). Per 4 batch rows it loads
//! `src[b][slot KS + 4m ..]` (one 16-byte shared load, the same address for the 16 lanes of a
//! half-warp: a broadcast) and does 64 fmas per float4, k ascending per output; the 16 partial
//! sums go to `scratch[slot][b][row]` (slot stride `rows 64 + 16` floats so the two half-warps
//! write different banks). A reader sums the 16 slots in slot order (deterministic).
//! Per SM and step this is 2 fmas per shared register loaded (4 with the half-warp broadcast
//! pairing), against 24 fmas per 10 loaded plus a 27-shuffle reduction in `gru_tile::matvec`.
//!
//! Flow: the prologue stages x of every step and h0, holds W_ih (KS = 8) and computes
//! `gi = W_ih x + b_ih` for all steps (a pass per step: partials, bar.sync, sums, bar.sync),
//! then holds W_hh (KS = 16, 64 registers) for the whole rollout. Step t: partials of
//! `W_hh h`; bar.sync; the cell (`gru_rollout::cell`) sums the 16 slots of its 3 gate rows;
//! bar.sync; exchange and transform as in the shared-memory path.
//! Shared layout (floats): h `Bg x H` | gi `C Bg x 3J` | x stage `C Bg x Ip` | scratch
//! [`scratch_floats`]`(Bg)`, with C >= T.

use super::gru_exchange::{gather, transform, Exchange};
use super::gru_rollout::{cell, Ctx, THREADS};
use super::gru_tile::copy_rows;
use crate::ptx::*;

/// Weight rows a lane group covers (16 lanes x 4 rows).
pub const ROWS: u32 = 64;
/// K slices: 8 warps x 2 half-warps.
pub const SLOTS: u32 = 16;

/// Scratch floats for `bg` source rows.
pub fn scratch_floats(bg: u32) -> u32 {
    SLOTS * (bg * ROWS + 16)
}

/// Shared floats of the stationary path for `bg` rows, `j` units, `c >= T` steps of gi.
pub fn smem_floats(bg: u32, ip: u32, h: u32, j: u32, c: u32) -> u32 {
    bg * h + c * bg * (3 * j + ip) + scratch_floats(bg)
}

/// A lane's place in the mat-vec.
struct Lane {
    slot: Reg<U32>,
    g: Reg<U32>,
}

/// Registers holding a lane's weights: `w[q * KS/4 + m]` is rows `g + 16 q`, k `slot KS + 4m ..`.
struct Held {
    ks: u32,
    w: Vec<[Reg<F32>; 4]>,
}

/// Loads the lane's weights from global memory: `row_elem(lr)` is the element index of local
/// row lr's first weight, `k` the row length.
fn hold(b: &mut KernelBuilder, ks: u32, lane: &Lane, base: Reg<U64>, r3: Reg<U32>, row_elem: &dyn Fn(&mut KernelBuilder, Reg<U32>) -> Reg<U32>) -> Held {
    let last = b.sub(r3, 1u32);
    let k0 = b.mul(lane.slot, ks);
    let mut w = Vec::with_capacity((ks as usize / 4) * 4);
    for q in 0..4u32 {
        let lr = b.add(lane.g, 16 * q);
        let lr = b.min(lr, last);
        let e = row_elem(b, lr);
        let e = b.add(e, k0);
        let a: Addr = b.index_addr(base, e, 4).into();
        for m in 0..ks / 4 {
            w.push(b.ld_v4::<F32>(Space::GlobalNc, a.off(16 * i64::from(m))));
        }
    }
    Held { ks, w }
}

/// Partial sums of `rows` (a multiple of 4) source rows at shared offset `src` (row stride `k`
/// floats) into the scratch at `scratch` (see the module notes). No barrier inside.
#[allow(clippy::too_many_arguments)]
fn partials(b: &mut KernelBuilder, smem: &SharedArray<F32>, held: &Held, lane: &Lane, src: Reg<U32>, k: Reg<U32>, rows: Reg<U32>, scratch: Reg<U32>) {
    let ks = held.ks;
    let k0 = b.mul(lane.slot, ks);
    let src0 = b.add(src, k0);
    let stride = b.mad(rows, ROWS, 16u32);
    let s0 = b.mad(lane.slot, stride, scratch);
    let s0 = b.add(s0, lane.g);
    let kbytes = b.shl(k, 2u32);
    b.for_range(0u32, rows, 4u32, |b, r0, _| {
        let acc: Vec<Reg<F32>> = (0..16).map(|_| b.mov(0.0f32)).collect();
        let first = b.mad(r0, k, src0);
        let a0 = b.shared_index(smem, first);
        let mut rowa = Vec::with_capacity(4);
        let mut a = a0;
        for bb in 0..4 {
            if bb > 0 {
                a = b.add(a, kbytes);
            }
            rowa.push(Addr::from(a));
        }
        // One float4 of one row at a time keeps the live set at 64 + 16 + 4 values.
        for m in 0..ks / 4 {
            for (bb, a) in rowa.iter().enumerate() {
                let h = b.ld_v4::<F32>(Space::Shared, a.off(16 * i64::from(m)));
                for (i, &hv) in h.iter().enumerate() {
                    for q in 0..4 {
                        let w = held.w[(q * (ks / 4) + m) as usize][i];
                        let s = b.fma(hv, w, acc[bb * 4 + q as usize]);
                        b.mov_to(acc[bb * 4 + q as usize], s);
                    }
                }
            }
        }
        let si = b.mad(r0, ROWS, s0);
        let sa: Addr = b.shared_index(smem, si).into();
        for bb in 0..4u32 {
            for q in 0..4u32 {
                b.st(Space::Shared, sa.off(4 * i64::from(bb * ROWS + 16 * q)), acc[(bb * 4 + q) as usize]);
            }
        }
    });
}

/// The 16-slot sum of output (row, lr) of the last [`partials`] over `rows` rows.
pub(super) fn sum(b: &mut KernelBuilder, smem: &SharedArray<F32>, scratch: Reg<U32>, rows: Reg<U32>, row: Reg<U32>, lr: Reg<U32>) -> Reg<F32> {
    let stride = b.mad(rows, ROWS, 16u32);
    let sbytes = b.shl(stride, 2u32);
    let i = b.mad(row, ROWS, scratch);
    let i = b.add(i, lr);
    let a = b.shared_index(smem, i);
    let total = b.ld::<F32>(Space::Shared, a);
    let mut a = a;
    for _ in 1..SLOTS {
        a = b.add(a, sbytes);
        let v = b.ld::<F32>(Space::Shared, a);
        let s = b.add(total, v);
        b.mov_to(total, s);
    }
    total
}

/// The whole rollout on the stationary path (all threads; the caller does the exit accounting).
pub(super) fn rollout(b: &mut KernelBuilder, c: &Ctx<'_>) {
    let p = c.p;
    let smem = c.smem;
    let zero = b.mov(0u32);
    let o_gi = b.mul(p.bg, p.h);
    let cbg = b.mul(p.chunk, p.bg);
    let o_x = b.mad(cbg, c.r3, o_gi);
    let o_s = b.mad(cbg, p.ip, o_x);
    let half = b.shr(c.lane, 4u32);
    let lane = Lane { slot: b.mad(c.warp, 2u32, half), g: b.and(c.lane, 15u32) };
    copy_rows(b, smem, zero, c.rows, p.h, c.tid, p.h0, &|b, r| {
        let er = b.mad(c.e, p.bp, c.row0);
        let er = b.add(er, r);
        b.mul(er, p.h)
    }, true);
    let xrows = b.mul(p.steps, c.rows);
    copy_rows(b, smem, o_x, xrows, p.ip, c.tid, p.x, &|b, q| {
        let step = b.div(q, c.rows);
        let r = b.rem(q, c.rows);
        let xr = b.mad(step, p.bp, c.row0);
        let xr = b.add(xr, r);
        b.mad(xr, p.ip, c.e_x)
    }, true);
    // gi of every step, W_ih held (KS = 8).
    let wih = hold(b, 8, &lane, p.w_ih, c.r3, &|b, lr| {
        let gr = c.grow(b, lr);
        b.mad(gr, p.ip, c.e_wih)
    });
    b.bar_sync();
    let outs = b.mul(c.rows, c.r3);
    b.for_range(0u32, p.steps, 1u32, |b, t, _| {
        let tx = b.mul(t, c.rows);
        let src = b.mad(tx, p.ip, o_x);
        partials(b, smem, &wih, &lane, src, p.ip, c.rows, o_s);
        b.bar_sync();
        b.for_range(c.tid, outs, THREADS, |b, o, _| {
            let row = b.div(o, c.r3);
            let lr = b.rem(o, c.r3);
            let v = sum(b, smem, o_s, c.rows, row, lr);
            let gr = c.grow(b, lr);
            let bi = b.add(gr, c.e_h3);
            let ba = b.index_addr(p.b_ih, bi, 4);
            let bv = b.ld::<F32>(Space::GlobalNc, ba);
            let v = b.add(v, bv);
            let gi = b.mad(tx, c.r3, o);
            let gi = b.add(gi, o_gi);
            let ga = b.shared_index(smem, gi);
            b.st(Space::Shared, ga, v);
        });
        b.bar_sync();
    });
    // W_hh held (KS = 16) for the whole rollout.
    let whh = hold(b, 16, &lane, p.w_hh, c.r3, &|b, lr| {
        let gr = c.grow(b, lr);
        b.mad(gr, p.h, c.e_whh)
    });
    let ex = Exchange { p, smem, o_h: zero, e: c.e, et: c.et, row0: c.row0, rows: c.rows, j0: c.j0, j1: c.j1, tid: c.tid, lane: c.lane, warp: c.warp, epoch: c.epoch };
    b.for_range(0u32, p.steps, 1u32, |b, t, _| {
        partials(b, smem, &whh, &lane, zero, p.h, c.rows, o_s);
        b.bar_sync();
        let cells = b.mul(c.rows, c.j);
        b.for_range(c.tid, cells, THREADS, |b, idx, _| {
            let row = b.div(idx, c.j);
            let jj = b.rem(idx, c.j);
            let gh = |b: &mut KernelBuilder, lr: Reg<U32>| sum(b, smem, o_s, c.rows, row, lr);
            cell(b, &ex, smem, c, t, t, row, jj, o_gi, &gh);
        });
        b.bar_sync();
        gather(b, &ex, t, 2);
        b.bar_sync();
        let xf = b.or(p.ln, p.drop);
        b.if_then(xf, |b| {
            transform(b, &ex, t);
            b.bar_sync();
        });
    });
}

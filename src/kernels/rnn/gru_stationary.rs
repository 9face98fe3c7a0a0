//! The GRU rollout's weight-stationary path (`stationary != 0`; the host picks it when H = 256,
//! Ip = 128, a block owns at most 64 gate rows (3J <= 64) and gi of every step fits in shared
//! memory). The block's weights live in registers, so shared memory only feeds the broadcast
//! operand, and no lane reduction is needed.
//!
//! Mat-vec `out[b][r] = sum_k src[b][k] w[r][k]` (K = 16 KS): lane l of warp w holds rows
//! `g + 16 q` (g = l % 16, q < 4; rows past 3J repeat the last row and are never read) over the
//! k slice `slot KS .. + KS`, `slot = 2 w + l / 16` (16 slots cover K). Per 4 batch rows it loads
//! `src[b][slot KS + 4m ..]` (one 16-byte shared load, the same address for the 16 lanes of a
//! half-warp: a broadcast) and does 64 fmas per float4, k ascending per output. The upper
//! half-warp takes the 4 rows in the order 2 3 0 1, so one `shfl.xor 16` per kept value adds the
//! two half-warps' K slices (8 shuffles, 8 stores, no select): the lower half keeps rows 0 1, the
//! upper rows 2 3, and the sums go to `scratch[w][b][row]` (row stride [`ROW_STRIDE`] = 72 so the
//! two halves, 2 rows apart, write different banks). A reader sums the 8 warp slots in order
//! (deterministic). Per SM and step this is 2 fmas per shared register loaded (4 with the
//! half-warp broadcast pairing), against 24 fmas per 10 loaded plus a 27-shuffle reduction in
//! `gru_tile::matvec`.
//!
//! Flow: the prologue holds W_ih (KS = 8), stages x of every step and h0, and computes
//! `gi = W_ih x + b_ih` for all steps, two steps per pass (partials of 2 Bg source rows,
//! bar.sync, sums, bar.sync), then holds W_hh (KS = 16, 64 registers) for the whole rollout
//! (its loads are issued before the last pass's sums).
//! Step t: partials of `W_hh h`; bar.sync; the cell (`gru_rollout::cell`) sums the 8 slots of its
//! 3 gate rows and writes h' to `hx` and over its own h element in shared memory; the gather
//! follows without a barrier (it skips the block's own units, and a cell only reads its own
//! element of h); bar.sync; transform as in the shared-memory path.
//! Clock stamps for benchmarks: [`STAMPS`].
//! Shared layout (floats): h `Bg x H` | gi `C Bg x 3J` | x stage `C Bg x Ip` | scratch
//! [`scratch_floats`]`(Bg)`, with C >= T.

use super::gru_exchange::{gather, transform, Exchange};
use super::gru_rollout::{cell, Ctx, P, THREADS};
use super::gru_tile::copy_rows;
use crate::ptx::*;

/// Clock stamps of the weight-stationary path when `stamps` is non-zero (thread 0 of block 0,
/// `%clock64` after the barrier that ends each phase): [0] start, [1] x, h0 staged (W_ih loads
/// issued), [2] the projection but the last pass's sums, [3] W_hh loads issued and the last
/// sums, then per step t < 16 at `4 + 3 t + i`: i = 0 mat-vec, 1 cell (thread 0's, no barrier),
/// 2 exchange (and transform).
pub const STAMPS: u32 = 4 + 3 * 16;

/// Writes `%clock64` to `stamps[idx]` when stamping (idx < [`STAMPS`]; others are dropped).
fn stamp(b: &mut KernelBuilder, p: &P, idx: Reg<U32>) {
    let ok = b.setp(Cmp::Lt, idx, STAMPS);
    let on = b.and(p.stamping, ok);
    b.if_then(on, |b| {
        let t = b.clock64();
        let base = b.ld_param(&p.stamps);
        let base = b.to_global(base);
        let a = b.index_addr(base, idx, 8);
        b.st(Space::Global, a, t);
    });
}

/// Weight rows a lane group covers (16 lanes x 4 rows).
pub const ROWS: u32 = 64;
/// Scratch slots: one per warp (its two half-warps' K slices are added by a shuffle first).
pub const SLOTS: u32 = 8;
/// Scratch floats per source row: 72 puts a warp's two half-warps (2 rows apart) in different
/// banks.
pub const ROW_STRIDE: u32 = 72;

/// Scratch floats for up to `2 bg` source rows (the prologue does two steps per pass).
pub fn scratch_floats(bg: u32) -> u32 {
    SLOTS * 2 * bg * ROW_STRIDE
}

/// Shared floats of the stationary path for `bg` rows, `j` units, `c >= T` steps of gi.
pub fn smem_floats(bg: u32, ip: u32, h: u32, j: u32, c: u32) -> u32 {
    bg * h + c * bg * (3 * j + ip) + scratch_floats(bg)
}

/// A lane's place in the mat-vec: K slice `slot = 2 warp + half`, rows `g + 16 q`.
struct Lane {
    slot: Reg<U32>,
    g: Reg<U32>,
    warp: Reg<U32>,
    half: Reg<U32>,
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

/// Partial sums of `rows` (a multiple of 4, at most `2 Bg`) source rows at shared offset `src`
/// (row stride `k` floats) into the scratch at `scratch` (see the module notes). No barrier
/// inside.
#[allow(clippy::too_many_arguments)]
fn partials(b: &mut KernelBuilder, smem: &SharedArray<F32>, held: &Held, lane: &Lane, src: Reg<U32>, k: Reg<U32>, rows: Reg<U32>, scratch: Reg<U32>) {
    let ks = held.ks;
    let k0 = b.mul(lane.slot, ks);
    let src0 = b.add(src, k0);
    // Slot (warp) stride rows x ROW_STRIDE; the lane stores rows r0 + 2 half + i, units g + 16 q.
    let stride = b.mul(rows, ROW_STRIDE);
    let s0 = b.mad(lane.warp, stride, scratch);
    let s0 = b.add(s0, lane.g);
    let h2 = b.shl(lane.half, 1u32);
    let s0 = b.mad(h2, ROW_STRIDE, s0);
    let kbytes = b.shl(k, 2u32);
    // The upper half-warp takes its 4 source rows in the order 2 3 0 1, so that accumulators
    // 0..8 of both halves are the rows it keeps and 8..16 the rows its partner keeps.
    let hoff = b.mul(h2, kbytes);
    b.for_range(0u32, rows, 4u32, |b, r0, _| {
        let acc: Vec<Reg<F32>> = (0..16).map(|_| b.mov(0.0f32)).collect();
        let first = b.mad(r0, k, src0);
        let a0 = b.shared_index(smem, first);
        let ra = b.add(a0, hoff);
        let rb = b.add(ra, kbytes);
        let k2 = b.shl(kbytes, 1u32);
        let rc = b.add(a0, k2);
        let rc = b.sub(rc, hoff);
        let rd = b.add(rc, kbytes);
        let rowa = [Addr::from(ra), Addr::from(rb), Addr::from(rc), Addr::from(rd)];
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
        // Both K slices of the warp: keep + partner's copy (slot 2w's value first is not needed:
        // f32 addition of two values is commutative).
        let si = b.mad(r0, ROW_STRIDE, s0);
        let sa: Addr = b.shared_index(smem, si).into();
        for n in 0..8u32 {
            let recv = b.shfl(Shfl::Xor, acc[8 + n as usize], 16u32);
            let v = b.add(acc[n as usize], recv);
            let (i, q) = (n / 4, n % 4);
            b.st(Space::Shared, sa.off(4 * i64::from(i * ROW_STRIDE + 16 * q)), v);
        }
    });
}

/// The 8-slot sum of output (row, lr) of the last [`partials`] over `rows` rows.
pub(super) fn sum(b: &mut KernelBuilder, smem: &SharedArray<F32>, scratch: Reg<U32>, rows: Reg<U32>, row: Reg<U32>, lr: Reg<U32>) -> Reg<F32> {
    let stride = b.mul(rows, ROW_STRIDE);
    let sbytes = b.shl(stride, 2u32);
    let i = b.mad(row, ROW_STRIDE, scratch);
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
    let lane = Lane { slot: b.mad(c.warp, 2u32, half), g: b.and(c.lane, 15u32), warp: c.warp, half };
    let at = |b: &mut KernelBuilder, i: u32| {
        let idx = b.mov(i);
        stamp(b, p, idx);
    };
    at(b, 0);
    // W_ih held (KS = 8) first: its loads are in flight while x and h0 are staged.
    let wih = hold(b, 8, &lane, p.w_ih, c.r3, &|b, lr| {
        let gr = c.grow(b, lr);
        b.mad(gr, p.ip, c.e_wih)
    });
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
    b.bar_sync();
    at(b, 1);
    // gi of every step, two steps per pass (the scratch holds 2 Bg source rows): partials,
    // bar.sync, sums, bar.sync; the last pass's sums come after W_hh's loads are issued.
    let rows_of = |b: &mut KernelBuilder, t: Reg<U32>| {
        let left = b.sub(p.steps, t);
        let ns = b.min(left, 2u32);
        b.mul(ns, c.rows)
    };
    let sums = |b: &mut KernelBuilder, t: Reg<U32>| {
        let prows = rows_of(b, t);
        let tx = b.mul(t, c.rows);
        let outs = b.mul(prows, c.r3);
        b.for_range(c.tid, outs, THREADS, |b, o, _| {
            let row = b.div(o, c.r3);
            let lr = b.rem(o, c.r3);
            let v = sum(b, smem, o_s, prows, row, lr);
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
    };
    b.for_range(0u32, p.steps, 2u32, |b, t, _| {
        let prows = rows_of(b, t);
        let tx = b.mul(t, c.rows);
        let src = b.mad(tx, p.ip, o_x);
        partials(b, smem, &wih, &lane, src, p.ip, prows, o_s);
        b.bar_sync();
        let t2 = b.add(t, 2u32);
        let more = b.setp(Cmp::Lt, t2, p.steps);
        b.if_then(more, |b| sums(b, t));
    });
    at(b, 2);
    // W_hh held (KS = 16) for the whole rollout.
    let whh = hold(b, 16, &lane, p.w_hh, c.r3, &|b, lr| {
        let gr = c.grow(b, lr);
        b.mad(gr, p.h, c.e_whh)
    });
    let last = b.sub(p.steps, 1u32);
    let last = b.shr(last, 1u32);
    let last = b.shl(last, 1u32);
    sums(b, last);
    at(b, 3);
    let ex = Exchange { p, smem, o_h: zero, e: c.e, et: c.et, row0: c.row0, rows: c.rows, j0: c.j0, j1: c.j1, tid: c.tid, lane: c.lane, warp: c.warp, epoch: c.epoch };
    b.for_range(0u32, p.steps, 1u32, |b, t, _| {
        let sidx = b.mad(t, 3u32, 4u32);
        partials(b, smem, &whh, &lane, zero, p.h, c.rows, o_s);
        b.bar_sync();
        stamp(b, p, sidx);
        let cells = b.mul(c.rows, c.j);
        b.for_range(c.tid, cells, THREADS, |b, idx, _| {
            let row = b.div(idx, c.j);
            let jj = b.rem(idx, c.j);
            let gh = |b: &mut KernelBuilder, lr: Reg<U32>| sum(b, smem, o_s, c.rows, row, lr);
            cell(b, &ex, smem, c, t, t, row, jj, o_gi, &gh, true);
        });
        let s1 = b.add(sidx, 1u32);
        stamp(b, p, s1);
        gather(b, &ex, t, 2, true);
        b.bar_sync();
        let xf = b.or(p.ln, p.drop);
        b.if_then(xf, |b| {
            transform(b, &ex, t);
            b.bar_sync();
        });
        let s2 = b.add(sidx, 2u32);
        stamp(b, p, s2);
    });
}

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
//! then holds W_hh (KS = 16, 48 registers) for the whole rollout. Step t: partials of
//! `W_hh h`; bar.sync; the cell (`gru_rollout::cell`) sums the 16 slots of its 3 gate rows;
//! bar.sync; exchange and transform as in the shared-memory path.
//! W_hh rows 48.. (only blocks with more than 16 units have them) do not fit in registers next to
//! the exchange's loads in flight: they are read from shared memory (the dead x stage) instead.
//! Shared layout (floats): h `Bg x H` | gi `C Bg x 3J` | x stage `C Bg x Ip`, at least
//! `16 (H + 4)` | scratch [`scratch_floats`]`(Bg)`, with C >= T.

use super::gru_exchange::{gather, transform, Exchange, IN_FLIGHT};
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

/// Shared floats of the stationary path for `bg` rows, `j` units, `c >= T` steps of gi (u64: the
/// host checks any step count against the limit before converting).
pub fn smem_floats(bg: u64, ip: u64, h: u64, j: u64, c: u64) -> u64 {
    bg * h + c * bg * 3 * j + (c * bg * ip).max(16 * (h + 4)) + u64::from(scratch_floats(bg as u32))
}

/// A lane's place in the mat-vec.
struct Lane {
    slot: Reg<U32>,
    g: Reg<U32>,
}

/// Registers holding a lane's weights: `w[q * KS/4 + m]` is rows `g + 16 q` (q < `qs`), k
/// `slot KS + 4m ..`.
struct Held {
    ks: u32,
    qs: u32,
    w: Vec<[Reg<F32>; 4]>,
}

/// Loads the lane's weights from global memory: `row_elem(lr)` is the element index of local
/// row lr's first weight, `k` the row length.
fn hold(b: &mut KernelBuilder, ks: u32, qs: u32, lane: &Lane, base: Reg<U64>, r3: Reg<U32>, row_elem: &dyn Fn(&mut KernelBuilder, Reg<U32>) -> Reg<U32>) -> Held {
    let last = b.sub(r3, 1u32);
    let k0 = b.mul(lane.slot, ks);
    let mut w = Vec::with_capacity((ks * qs) as usize / 4);
    for q in 0..qs {
        let lr = b.add(lane.g, 16 * q);
        let lr = b.min(lr, last);
        let e = row_elem(b, lr);
        let e = b.add(e, k0);
        let a: Addr = b.index_addr(base, e, 4).into();
        for m in 0..ks / 4 {
            w.push(b.ld_v4::<F32>(Space::GlobalNc, a.off(16 * i64::from(m))));
        }
    }
    Held { ks, qs, w }
}

/// Partial sums of `rows` (a multiple of 4) source rows at shared offset `src` (row stride `k`
/// floats) into the scratch at `scratch` (see the module notes). Rows `g + 16 q` for q from
/// `held.qs` to 3 come from shared memory at `w_rest` (row stride `k + 4`) when given, and
/// are skipped otherwise. No barrier inside.
#[allow(clippy::too_many_arguments)]
fn partials(b: &mut KernelBuilder, smem: &SharedArray<F32>, held: &Held, w_rest: Option<Reg<U32>>, lane: &Lane, src: Reg<U32>, k: Reg<U32>, rows: Reg<U32>, scratch: Reg<U32>) {
    let ks = held.ks;
    let qn = if w_rest.is_some() { 4 } else { held.qs };
    let k0 = b.mul(lane.slot, ks);
    // The lane's shared weight row (only q = 3 is ever shared: rows 48 + g).
    let rest: Option<Addr> = w_rest.map(|o| {
        let kp = b.add(k, 4u32);
        let i = b.mad(lane.g, kp, o);
        let i = b.add(i, k0);
        b.shared_index(smem, i).into()
    });
    assert!(w_rest.is_none() || held.qs == 3, "only the fourth row group is read from shared memory");
    let src0 = b.add(src, k0);
    let stride = b.mad(rows, ROWS, 16u32);
    let s0 = b.mad(lane.slot, stride, scratch);
    let s0 = b.add(s0, lane.g);
    let kbytes = b.shl(k, 2u32);
    b.for_range(0u32, rows, 4u32, |b, r0, _| {
        let acc: Vec<Reg<F32>> = (0..4 * qn).map(|_| b.mov(0.0f32)).collect();
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
        // One float4 of one row at a time keeps the live set small (held weights + 16 + 8).
        for m in 0..ks / 4 {
            let w3 = rest.as_ref().map(|a| b.ld_v4::<F32>(Space::Shared, a.off(16 * i64::from(m))));
            for (bb, a) in rowa.iter().enumerate() {
                let h = b.ld_v4::<F32>(Space::Shared, a.off(16 * i64::from(m)));
                for (i, &hv) in h.iter().enumerate() {
                    for q in 0..qn {
                        let w = if q < held.qs { held.w[(q * (ks / 4) + m) as usize][i] } else { w3.expect("qn > qs only with shared rows")[i] };
                        let j = bb * qn as usize + q as usize;
                        let s = b.fma(hv, w, acc[j]);
                        b.mov_to(acc[j], s);
                    }
                }
            }
        }
        let si = b.mad(r0, ROWS, s0);
        let sa: Addr = b.shared_index(smem, si).into();
        for bb in 0..4u32 {
            for q in 0..qn {
                b.st(Space::Shared, sa.off(4 * i64::from(bb * ROWS + 16 * q)), acc[(bb * qn + q) as usize]);
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
    // The x stage is dead after the prologue; it then holds the 16 weight rows 48.. of W_hh
    // that do not fit in registers (row stride H + 4: conflict-free lane reads).
    let xs = b.mul(cbg, p.ip);
    let hp = b.add(p.h, 4u32);
    let w3 = b.shl(hp, 4u32);
    let xs = b.max(xs, w3);
    let o_s = b.add(o_x, xs);
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
    let wih = hold(b, 8, 4, &lane, p.w_ih, c.r3, &|b, lr| {
        let gr = c.grow(b, lr);
        b.mad(gr, p.ip, c.e_wih)
    });
    b.bar_sync();
    let outs = b.mul(c.rows, c.r3);
    b.for_range(0u32, p.steps, 1u32, |b, t, _| {
        let tx = b.mul(t, c.rows);
        let src = b.mad(tx, p.ip, o_x);
        partials(b, smem, &wih, None, &lane, src, p.ip, c.rows, o_s);
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
    // W_hh rows g, g + 16, g + 32 held (KS = 16, 48 registers) for the whole rollout; rows
    // 48.. (blocks with more than 16 units) read from shared memory, which leaves registers for
    // the exchange to keep 4 pairs in flight.
    let big = b.setp(Cmp::Gt, c.r3, 48u32);
    b.if_then(big, |b| copy_rest(b, c, o_x));
    let whh = hold(b, 16, 3, &lane, p.w_hh, c.r3, &|b, lr| {
        let gr = c.grow(b, lr);
        b.mad(gr, p.h, c.e_whh)
    });
    let ex = Exchange { p, smem, o_h: zero, e: c.e, et: c.et, row0: c.row0, rows: c.rows, j0: c.j0, j1: c.j1, tid: c.tid, lane: c.lane, warp: c.warp, epoch: c.epoch };
    b.bar_sync();
    b.for_range(0u32, p.steps, 1u32, |b, t, _| {
        b.if_else(big, |b| partials(b, smem, &whh, Some(o_x), &lane, zero, p.h, c.rows, o_s), |b| partials(b, smem, &whh, None, &lane, zero, p.h, c.rows, o_s));
        b.bar_sync();
        let cells = b.mul(c.rows, c.j);
        b.for_range(c.tid, cells, THREADS, |b, idx, _| {
            let row = b.div(idx, c.j);
            let jj = b.rem(idx, c.j);
            let gh = |b: &mut KernelBuilder, lr: Reg<U32>| sum(b, smem, o_s, c.rows, row, lr);
            cell(b, &ex, smem, c, t, t, row, jj, o_gi, &gh);
        });
        b.bar_sync();
        gather(b, &ex, t, IN_FLIGHT);
        b.bar_sync();
        let xf = b.or(p.ln, p.drop);
        b.if_then(xf, |b| {
            transform(b, &ex, t);
            b.bar_sync();
        });
    });
}

/// Copies W_hh rows 48 .. 64 of the block (clamped to its last row) to shared offset `dst`,
/// row stride H + 4; H = 256 (host-checked): 4 float4 per thread, all loads in flight together.
fn copy_rest(b: &mut KernelBuilder, c: &Ctx<'_>, dst: Reg<U32>) {
    let p = c.p;
    let last = b.sub(c.r3, 1u32);
    let k4 = b.shr(p.h, 2u32);
    let total = b.shl(k4, 4u32);
    let hp = b.add(p.h, 4u32);
    let mut pending = Vec::with_capacity(4);
    for u in 0..4u32 {
        let idx = b.add(c.tid, THREADS * u);
        let live = b.setp(Cmp::Lt, idx, total);
        let i = b.div(idx, k4);
        let col = b.rem(idx, k4);
        let col = b.shl(col, 2u32);
        let lr = b.add(i, 48u32);
        let lr = b.min(lr, last);
        let gr = c.grow(b, lr);
        let ge = b.mad(gr, p.h, c.e_whh);
        let ge = b.add(ge, col);
        let ga = b.index_addr(p.w_hh, ge, 4);
        let si = b.mad(i, hp, dst);
        let si = b.add(si, col);
        let sa = b.shared_index(c.smem, si);
        let mut v = None;
        b.guarded(live, false, |b| v = Some(b.ld_v4::<F32>(Space::GlobalNc, ga)));
        pending.push((v.expect("the closure always runs"), live, sa));
    }
    for (v, live, sa) in pending {
        b.guarded(live, false, |b| b.st_v4(Space::Shared, sa, v));
    }
}

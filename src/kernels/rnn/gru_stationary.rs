//! The GRU rollout's weight-stationary path (`stationary != 0`; the host picks it when H = 256,
//! Ip = 128, a block owns at most 64 gate rows (3J <= 64) and its shared layout fits). W_hh
//! lives in registers, so shared memory only feeds the mat-vec's broadcast operand and no lane
//! reduction is needed.
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
//! Two modes for `gi = W_ih x + b_ih` (`gru_project`), chosen by the host through `chunk`:
//! - precompute (`chunk` = max steps, when x and gi of every step fit in shared memory): before
//!   step 0, with W_ih held in 32 registers (the same lane layout, KS = 8) and x of every step
//!   staged, `partials` and the 8-slot sums give gi of every step (FMA-bound, no shared W_ih
//!   traffic); the steps then only read it. Measured on an H100, the per-step projection was
//!   the largest part of a step after the exchange.
//! - per step (`chunk` = 0): W_ih in shared memory (row stride [`WIH_STRIDE`]); step 0's gi in
//!   the prologue, gi of step t + 1 during step t, split between the warps without cells (they
//!   start during the cells) and the cell warps (`project_split`); x of step t + 2 is prefetched
//!   to L1 at the top of step t and copied to shared memory after the gather. gi and x are
//!   double-buffered by step parity: a buffer is rewritten only after the barrier that follows
//!   its last read.
//!
//! Flow: the prologue stages h0 and, per mode, x and gi (above), then issues the loads of W_hh
//! (KS = 16, 64 registers held for the whole rollout). Step t: partials of `W_hh h`; bar.sync;
//! the cell (`gru_rollout::cell`) sums the 8 slots of its 3 gate rows and writes h' to `hx` and
//! over its own h element in shared memory; (per-step mode: gi of step t + 1); the gather (it
//! skips the block's own units, and a cell only reads its own element of h); bar.sync; transform
//! as in the shared-memory path. Clock stamps for benchmarks: [`STAMPS`].
//! Shared layout (floats): h `Bg x H` | gi `nb Bg x 3J` | W_ih `3J x WIH_STRIDE` (per-step mode
//! only) | x `nb Bg x Ip` | scratch [`scratch_floats`]`(Bg)`, nb = 2 or max(chunk, 2) (buffer s
//! of gi and x starts `s x rows` rows in).

use super::gru_exchange::{gather, transform, Exchange, Gather};
use super::gru_project::{
    copy_x, precompute, precompute_sums, prefetch_x, project, project_split, stage_x,
};
use super::gru_rollout::{cell, reciprocal, Ctx, P, THREADS};
use super::gru_tile::{copy_rows, copy_rows_to};
use crate::ptx::*;

/// Clock stamps of the weight-stationary path when `stamps` is non-zero (thread 0 of block 0,
/// `%clock64`): `[0]` start, `[1]` staged and gi computed (of every step, or of step 0), `[2]` W_hh
/// loads issued, `[3]` after the barrier, then per step t < 16 at `4 + 3 t + i`: i = 0 mat-vec,
/// 1 cell (thread 0's, no barrier), 2 gi of step t + 1 (per-step mode), exchange (and
/// transform).
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

/// Scratch floats for up to `bg` source rows.
pub fn scratch_floats(bg: u32) -> u32 {
    SLOTS * bg * ROW_STRIDE
}

/// Shared row stride of the held W_ih (floats, Ip = 128 plus 4): the 8 lanes of a quarter-warp
/// read 8 consecutive rows' float4s in 8 different bank groups.
pub const WIH_STRIDE: u32 = 132;

/// Shared floats of the stationary path for `bg` rows, `j` units and `c` (the kernel's `chunk`):
/// 0 for gi per step (2 gi and x buffers and W_ih), otherwise gi of every step computed first
/// (max(c, 2) buffers of gi and x, c >= steps, no W_ih, scratch for 2 Bg rows). `Ip` must be
/// 128.
pub fn smem_floats(bg: u32, ip: u32, h: u32, j: u32, c: u32) -> u32 {
    let (nb, wih, sc) = if c == 0 {
        (2, 3 * j * WIH_STRIDE, scratch_floats(bg))
    } else {
        (c.max(2), 0, scratch_floats(2 * bg))
    };
    bg * h + nb * bg * 3 * j + wih + nb * bg * ip + sc
}

/// A lane's place in the mat-vec: K slice `slot = 2 warp + half`, rows `g + 16 q`.
pub(super) struct Lane {
    pub slot: Reg<U32>,
    pub g: Reg<U32>,
    pub warp: Reg<U32>,
    pub half: Reg<U32>,
}

/// Registers holding a lane's weights: `w[q * KS/4 + m]` is rows `g + 16 q`, k `slot KS + 4m ..`.
pub(super) struct Held {
    pub ks: u32,
    pub w: Vec<[Reg<F32>; 4]>,
}

/// Loads the lane's weights from global memory: `row_elem(lr)` is the element index of local
/// row lr's first weight, `k` the row length.
pub(super) fn hold(
    b: &mut KernelBuilder,
    ks: u32,
    lane: &Lane,
    base: Reg<U64>,
    r3: Reg<U32>,
    row_elem: &dyn Fn(&mut KernelBuilder, Reg<U32>) -> Reg<U32>,
) -> Held {
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

/// Partial sums of `rows` (a multiple of 4, at most `Bg`) source rows at shared offset `src`
/// (row stride `k` floats) into the scratch at `scratch` (see the module notes). No barrier
/// inside.
#[allow(clippy::too_many_arguments)]
pub(super) fn partials(
    b: &mut KernelBuilder,
    smem: &SharedArray<F32>,
    held: &Held,
    lane: &Lane,
    src: Reg<U32>,
    k: Reg<U32>,
    rows: Reg<U32>,
    scratch: Reg<U32>,
) {
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
        let rowa = [
            Addr::from(ra),
            Addr::from(rb),
            Addr::from(rc),
            Addr::from(rd),
        ];
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
            b.st(
                Space::Shared,
                sa.off(4 * i64::from(i * ROW_STRIDE + 16 * q)),
                v,
            );
        }
    });
}

/// The 8-slot sum of output (row, lr) of the last [`partials`] over `rows` rows.
pub(super) fn sum(
    b: &mut KernelBuilder,
    smem: &SharedArray<F32>,
    scratch: Reg<U32>,
    rows: Reg<U32>,
    row: Reg<U32>,
    lr: Reg<U32>,
) -> Reg<F32> {
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

/// Offsets (floats) of the stationary path's shared regions.
pub(super) struct Layout {
    pub gi: Reg<U32>,
    pub w: Reg<U32>,
    pub x: Reg<U32>,
    pub scratch: Reg<U32>,
    /// Floats of one x buffer (`rows x Ip`).
    pub xbuf: Reg<U32>,
}

/// The shared layout (computed where it is used: the step loop has no registers to keep it),
/// per [`smem_floats`]'s two modes.
pub(super) fn layout(b: &mut KernelBuilder, c: &Ctx<'_>) -> Layout {
    let p = c.p;
    // nb = max(chunk, 2) buffers; W_ih only when chunk = 0 (arithmetic, no predicate).
    let nb = b.max(p.chunk, 2u32);
    let gi = b.mul(p.bg, p.h);
    let nbg = b.mul(nb, p.bg);
    let w = b.mad(nbg, c.r3, gi);
    let one = b.min(p.chunk, 1u32);
    let keep = b.sub(1u32, one);
    let wih = b.mul(c.r3, WIH_STRIDE);
    let wih = b.mul(wih, keep);
    let x = b.add(w, wih);
    let scratch = b.mad(nbg, p.ip, x);
    let xbuf = b.mul(c.rows, p.ip);
    Layout {
        gi,
        w,
        x,
        scratch,
        xbuf,
    }
}

/// `a && !n`.
fn and_not(b: &mut KernelBuilder, a: Reg<Pred>, n: Reg<Pred>) -> Reg<Pred> {
    let nn = b.not(n);
    b.and(a, nn)
}

/// Whether gi of every step is computed before step 0 (`chunk != 0`).
pub(super) fn precomputed(b: &mut KernelBuilder, p: &P) -> Reg<Pred> {
    b.setp(Cmp::Ne, p.chunk, 0u32)
}

/// The whole rollout on the stationary path (all threads; the caller does the exit accounting).
pub(super) fn rollout(b: &mut KernelBuilder, c: &Ctx<'_>) {
    let p = c.p;
    let smem = c.smem;
    let zero = b.mov(0u32);
    let lay = layout(b, c);
    let half = b.shr(c.lane, 4u32);
    let lane = Lane {
        slot: b.mad(c.warp, 2u32, half),
        g: b.and(c.lane, 15u32),
        warp: c.warp,
        half,
    };
    let at = |b: &mut KernelBuilder, i: u32| {
        let idx = b.mov(i);
        stamp(b, p, idx);
    };
    at(b, 0);
    let pre = precomputed(b, p);
    copy_rows(
        b,
        smem,
        zero,
        c.rows,
        p.h,
        c.tid,
        p.h0,
        &|b, r| {
            let er = b.mad(c.e, p.bp, c.row0);
            let er = b.add(er, r);
            b.mul(er, p.h)
        },
        true,
    );
    // Precompute mode: the last phase of gi's sums waits for W_hh's loads to be issued.
    let last = b.mov(0u32);
    b.if_else(
        pre,
        |b| {
            let l = precompute(b, c, &lane);
            b.mov_to(last, l);
        },
        |b| {
            let stride = b.mov(WIH_STRIDE);
            copy_rows_to(
                b,
                smem,
                lay.w,
                stride,
                c.r3,
                p.ip,
                c.tid,
                p.w_ih,
                &|b, lr| {
                    let gr = c.grow(b, lr);
                    b.mad(gr, p.ip, c.e_wih)
                },
                true,
            );
            stage_x(b, c, 2);
            b.bar_sync();
            project(b, c, zero);
        },
    );
    at(b, 1);
    // W_hh held (KS = 16) for the whole rollout (its loads are in flight until step 0's mat-vec).
    let whh = hold(b, 16, &lane, p.w_hh, c.r3, &|b, lr| {
        let gr = c.grow(b, lr);
        b.mad(gr, p.h, c.e_whh)
    });
    b.if_then(pre, |b| precompute_sums(b, c, last));
    at(b, 2);
    b.bar_sync();
    at(b, 3);
    let ex = Exchange { c, o_h: zero };
    // idx / J by `gru_rollout::reciprocal`: idx J < 2^16 (idx < 32 rows x J, J <= 21).
    let magic = reciprocal(b, c.j, 16);
    // Steps t whose gather is needed: t + 1 < steps, or every step with layer norm or dropout.
    let gather_until = {
        let xf = b.or(p.ln, p.drop);
        let extra = b.selp(1u32, 0u32, xf);
        b.add(p.steps, extra)
    };
    b.for_range(0u32, p.steps, 1u32, |b, t, _| {
        let sidx = b.mad(t, 3u32, 4u32);
        {
            let t2 = b.add(t, 2u32);
            let more2 = b.setp(Cmp::Lt, t2, p.steps);
            let pre = precomputed(b, p);
            let more2 = and_not(b, more2, pre);
            prefetch_x(b, c, t2, more2);
        }
        let lay = layout(b, c);
        partials(b, smem, &whh, &lane, zero, p.h, c.rows, lay.scratch);
        b.bar_sync();
        stamp(b, p, sidx);
        // The cells take the first ceil(cells / 32) warps; in per-step mode gi of step t + 1
        // (buffer (t + 1) % 2, last read by step t - 1's cell) is then split between the other
        // warps, which start at once, and the cell warps (`project_split`).
        let cells = b.mul(c.rows, c.j);
        b.for_range(c.tid, cells, THREADS, |b, idx, _| {
            let row = b.mul(idx, magic);
            let row = b.shr(row, 16u32);
            let jj = b.mul(row, c.j);
            let jj = b.sub(idx, jj);
            let gh =
                |b: &mut KernelBuilder, lr: Reg<U32>| sum(b, smem, lay.scratch, c.rows, row, lr);
            let pre = precomputed(b, p);
            let parity = b.and(t, 1u32);
            let tc = b.selp(t, parity, pre);
            cell(b, &ex, smem, c, t, tc, row, jj, lay.gi, &gh, true);
        });
        let s1 = b.add(sidx, 1u32);
        stamp(b, p, s1);
        let t1 = b.add(t, 1u32);
        let t2 = b.add(t, 2u32);
        let pre = precomputed(b, p);
        let more1 = b.setp(Cmp::Lt, t1, p.steps);
        let more1 = and_not(b, more1, pre);
        let more2 = b.setp(Cmp::Lt, t2, p.steps);
        let more2 = and_not(b, more2, pre);
        let c31 = b.add(cells, 31u32);
        let cw = b.shr(c31, 5u32);
        let cw = b.min(cw, THREADS / 32);
        b.if_then(more1, |b| project_split(b, c, t1, cw));
        // The last step's h is only gathered for layer norm or dropout (whole rows).
        let need = b.setp(Cmp::Lt, t1, gather_until);
        gather(
            b,
            &ex,
            t,
            &Gather {
                in_flight: 2,
                skip_own: true,
                half_h: Some(128),
                on: Some(need),
            },
        );
        // x of step t + 2 (prefetched at the top of the step) into buffer t % 2, last read by
        // step t - 1's projection.
        copy_x(b, c, t2, more2);
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

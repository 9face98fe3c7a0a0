//! The cluster kernels' prologue after W_hh's loads (see `cluster`'s notes): h0 into h buffer 0
//! and gi of every step, `Full` (`stationary`'s precompute with x of every step staged, by
//! register copies or `cp.async`) or `Streamed` (x one step at a time through two buffers).

use super::super::matvec::{hold_rows, partials, sum, Held, Sources};
use super::super::project::{precompute_sums, precompute_with, stage_x};
use super::super::Lane;
use super::{cluster_layout, mode_bit, Variant, QS, STAGE_ASYNC};
use crate::kernels::rnn::gru::tile::{copy_rows, RowCopy};
use crate::kernels::rnn::gru::{reciprocal, Ctx, THREADS};
use crate::ptx::*;

/// W_hh's loads (rows q < 3, KS = 16: held for the whole rollout, returned), h0 and gi of every
/// step, ending with a block barrier (the caller's cluster barrier follows). `Full` issues
/// W_hh's loads first; `Streamed` after W_ih's and the first copies, so that what gi needs
/// first arrives first and W_hh streams in during the projection.
pub(super) fn run(
    b: &mut KernelBuilder,
    c: &Ctx<'_>,
    v: Variant,
    lane: &Lane,
    mode: &Param<U32>,
) -> Held {
    match v {
        Variant::Full => {
            let whh = hold_whh(b, c, lane);
            full(b, c, lane, mode);
            whh
        }
        Variant::Streamed => streamed(b, c, lane),
    }
}

/// Issues the loads of the lane's W_hh weights (`matvec::hold_rows`, KS = 16, q < 3).
fn hold_whh(b: &mut KernelBuilder, c: &Ctx<'_>, lane: &Lane) -> Held {
    b.comment("load W_hh into registers (rows g + 16 q, q < 3: 3J = 48), held throughout");
    hold_rows(b, 16, QS, lane, c.p.w_hh, c.r3, &|b, lr| c.w_hh_row(b, lr))
}

/// `Full`: `stationary`'s precompute (phases of two steps) with h0 and x by register copies or,
/// with [`STAGE_ASYNC`], `cp.async` in flight together with W_ih's loads.
fn full(b: &mut KernelBuilder, c: &Ctx<'_>, lane: &Lane, mode: &Param<U32>) {
    let p = c.p;
    let last = b.mov(0u32);
    let async_staging = mode_bit(b, mode, STAGE_ASYNC);
    b.if_else(
        async_staging,
        |b| {
            let l = precompute_with(b, c, lane, QS, &|b| {
                let lay = cluster_layout(b, c, Variant::Full);
                copy_h0_async(b, c);
                let zero = b.mov(0u32);
                copy_x_async(b, c, zero, p.steps, lay.x);
                prefetch_biases(b, c);
                b.cp_async_wait_all();
            });
            b.mov_to(last, l);
        },
        |b| {
            let h0_row = |b: &mut KernelBuilder, r| c.h0_row(b, r);
            let zero = b.mov(0u32);
            copy_rows(
                b,
                c.tid,
                &RowCopy {
                    smem: c.smem,
                    dst: zero,
                    dst_stride: None,
                    rows: c.rows,
                    k: p.h,
                    src: p.h0,
                    row_elem: &h0_row,
                },
            );
            let l = precompute_with(b, c, lane, QS, &|b| stage_x(b, c, c.p.steps));
            b.mov_to(last, l);
        },
    );
    precompute_sums(b, c, last);
}

/// `Streamed`: W_ih held (rows q < 3, KS = 8); h0, x of step 0 and the biases' lines staged;
/// W_hh's loads issued; then per step s: x of step s + 1 copied into the other buffer (`cp.async`; that buffer was
/// last read by step s - 1's partials, before the barrier that followed them), partials of
/// `W_ih x_s` into the scratch, barrier, gi of step s (slot sums + b_ih), wait for the copy,
/// barrier.
fn streamed(b: &mut KernelBuilder, c: &Ctx<'_>, lane: &Lane) -> Held {
    let (p, smem) = (c.p, c.smem);
    b.comment("streamed: W_ih into registers, h0 and x of step 0 by cp.async");
    let wih = hold_rows(b, 8, QS, lane, p.w_ih, c.r3, &|b, lr| c.w_ih_row(b, lr));
    copy_h0_async(b, c);
    let lay = cluster_layout(b, c, Variant::Streamed);
    let zero = b.mov(0u32);
    let one = b.mov(1u32);
    copy_x_async(b, c, zero, one, lay.x);
    prefetch_biases(b, c);
    let whh = hold_whh(b, c, lane);
    b.cp_async_wait_all();
    b.bar_sync();
    b.comment("streamed: gi of step s, x of step s + 1 in flight");
    b.for_range(0u32, p.steps, 1u32, |b, s, _| {
        let lay = cluster_layout(b, c, Variant::Streamed);
        let s1 = b.add(s, 1u32);
        let more = b.setp(Cmp::Lt, s1, p.steps);
        b.if_then(more, |b| {
            let nb = b.and(s1, 1u32);
            let dst = b.mad(nb, lay.xbuf, lay.x);
            let one = b.mov(1u32);
            copy_x_async(b, c, s1, one, dst);
        });
        let sb = b.and(s, 1u32);
        let src = b.mad(sb, lay.xbuf, lay.x);
        let from = Sources {
            src,
            k: p.ip,
            rows: c.rows,
            scratch: lay.scratch,
        };
        partials(b, smem, &wih, lane, &from);
        b.bar_sync();
        step_sums(b, c, s);
        b.cp_async_wait_all();
        b.bar_sync();
    });
    whh
}

/// gi of step `s` from the scratch: row q, gate row lr = its 8 slot sums in order plus b_ih
/// (all threads; no barrier inside).
fn step_sums(b: &mut KernelBuilder, c: &Ctx<'_>, s: Reg<U32>) {
    let smem = c.smem;
    let lay = cluster_layout(b, c, Variant::Streamed);
    let outs = b.mul(c.rows, c.r3);
    let q0 = b.mul(s, c.rows);
    // idx / 3J by `gru::reciprocal`: idx 3J < 2^20 (idx < 32 x 48).
    let magic = reciprocal(b, c.r3, 20);
    b.for_range(c.tid, outs, THREADS, |b, idx, _| {
        let q = b.mul(idx, magic);
        let q = b.shr(q, 20u32);
        let lr = b.mul(q, c.r3);
        let lr = b.sub(idx, lr);
        let v = sum(b, smem, lay.scratch, c.rows, q, lr);
        let ba = c.b_ih_addr(b, lr);
        let bias = b.ld::<F32>(Space::GlobalNc, ba);
        let g = b.add(v, bias);
        let gi = b.add(q0, q);
        let gi = b.mad(gi, c.r3, lr);
        let gi = b.add(gi, lay.gi);
        let ga = b.shared_index(smem, gi);
        b.st(Space::Shared, ga, g);
    });
}

/// h0's rows (H = 256: 64 float4 each) into h buffer 0 with `cp.async` (not awaited).
pub(in crate::kernels::rnn::gru::stationary) fn copy_h0_async(b: &mut KernelBuilder, c: &Ctx<'_>) {
    let (p, smem) = (c.p, c.smem);
    let n = b.shl(c.rows, 6u32);
    b.for_range(c.tid, n, THREADS, |b, i, _| {
        let r = b.shr(i, 6u32);
        let c4 = b.and(i, 63u32);
        let c4 = b.shl(c4, 2u32);
        let e = c.h0_row(b, r);
        let e = b.add(e, c4);
        let src = b.index_addr(p.h0, e, 4);
        let si = b.mad(r, p.h, c4);
        let dst = b.shared_index(smem, si);
        b.cp_async_16(dst, src);
    });
}

/// x of steps `first ..` (`steps` of them) for the block's rows, row q = step rows + r at shared
/// `dst + q Ip` (Ip = 128: 32 float4 a row), with `cp.async` (not awaited).
pub(in crate::kernels::rnn::gru::stationary) fn copy_x_async(
    b: &mut KernelBuilder,
    c: &Ctx<'_>,
    first: Reg<U32>,
    steps: Reg<U32>,
    dst: Reg<U32>,
) {
    let (p, smem) = (c.p, c.smem);
    let xrows = b.mul(steps, c.rows);
    let n = b.shl(xrows, 5u32);
    b.for_range(c.tid, n, THREADS, |b, i, _| {
        let q = b.shr(i, 5u32);
        let c4 = b.and(i, 31u32);
        let c4 = b.shl(c4, 2u32);
        let step = b.div(q, c.rows);
        let r = b.rem(q, c.rows);
        let step = b.add(step, first);
        let xr = b.mad(step, p.batch_pad, c.row0);
        let xr = b.add(xr, r);
        let e = b.mad(xr, p.ip, c.x_base);
        let e = b.add(e, c4);
        let src = b.index_addr(p.x, e, 4);
        let si = b.mad(q, p.ip, dst);
        let si = b.add(si, c4);
        let sa = b.shared_index(smem, si);
        b.cp_async_16(sa, src);
    });
}

/// Threads 0..3: the lines of b_ih of gates r, z, n and of b_hh of gate n (units j0 .., 16
/// floats, 64-byte aligned) into L1, for the gi sums and the cells.
fn prefetch_biases(b: &mut KernelBuilder, c: &Ctx<'_>) {
    let p = c.p;
    let few = b.setp(Cmp::Lt, c.tid, 4u32);
    b.if_then(few, |b| {
        let q = b.min(c.tid, 2u32);
        let e = b.mad(q, p.h, c.j0);
        let e = b.add(e, c.bias_base);
        let is_hh = b.setp(Cmp::Eq, c.tid, 3u32);
        let base = b.selp(p.b_hh, p.b_ih, is_hh);
        let a = b.index_addr(base, e, 4);
        b.prefetch_l1(a);
    });
}

//! `rnn_gru_cluster` (sm_90): the weight-stationary rollout (W_hh in registers, gi of every
//! step computed first; see `stationary`'s notes) with the per-step exchange of h' in
//! distributed shared memory instead of tagged words in global memory. The S = 16 unit slices of
//! one (member, batch group) are one thread-block cluster (launched with a cluster dimension of
//! 16, non-portable size); blocks of different clusters never communicate, so neither a
//! cooperative launch nor the epoch accounting is needed (`gru::Accounting::None`).
//!
//! h lives in two shared buffers: step t reads h_t from buffer `t % 2` and writes h_{t+1} to
//! buffer `(t + 1) % 2`, its own units with a plain shared store and every other block's copy
//! through distributed shared memory. The cell threads of a row's 4 consecutive units (a lane
//! quad, J = 16) gather the 4 values with shuffles; quad lane i sends them (16 bytes) to the
//! blocks of rank `i + 4k` (k < 4) other than its own. Two exchanges (`exchange` parameter):
//! - 0, mbarrier: `st.async` that completes 16 bytes on the destination's mbarrier of that
//!   buffer (`M_b`, b = buffer). A block arms `M_b` with the bytes it will receive (rows x (H - J)
//!   x 4) one exchange ahead, and every thread waits for the phase by parity (h_n is use
//!   `(n - 1) / 2` of `M_{n % 2}`) before the block barrier that ends the step. No cluster-wide
//!   barrier per step: a block waits only for its own bytes. Reuse is safe without one: a
//!   producer writes buffer b for h_{n+2} only after it has all of h_{n+1}, which includes this
//!   block's units of h_{n+1}, computed after this block's mat-vec read h_n from buffer b and
//!   after this block's wait on h_n's phase completed (so the arm for h_{n+2} follows it).
//! - 1, cluster barrier: `st.shared::cluster`, then `barrier.cluster.arrive` (release) and
//!   `wait` (acquire) of every thread, which also serves as the block barrier.
//!
//! The exchange of the last step is skipped unless layer norm or dropout need whole rows (each
//! block then normalises the same rows identically in its own copy).
//!
//! Prologue: h0 into buffer 0; thread 0 initialises both mbarriers (count 1), fences the inits
//! to the cluster and arms the first two exchanges; gi of every step and W_hh's loads as in
//! `stationary::kernel`; a cluster barrier (every block's mbarriers initialised before any
//! remote write). With the mbarrier exchange, a last cluster barrier keeps every block alive
//! until the cluster's writes have landed. Shared layout: `stationary`'s (precompute mode) then
//! h buffer 1 (`Bg x H`) and the two mbarriers (16-byte aligned), see [`smem_floats`].

use super::matvec::{hold_rows, partials, sum, Sources};
use super::project::{precompute_sums, precompute_with, stage_x};
use super::{layout, scratch_floats, Lane, Stamps};
use crate::kernels::rnn::barrier::give_up_when_late;
use crate::kernels::rnn::gru::cell::{new_h, CellAt, NewH};
use crate::kernels::rnn::gru::exchange::transform;
use crate::kernels::rnn::gru::tile::{copy_rows, RowCopy};
use crate::kernels::rnn::gru::{kernel_with, reciprocal, Accounting, Ctx, Exchange, P, THREADS};
use crate::ptx::*;

/// Blocks per cluster: the unit slices of one (member, batch group).
pub const CLUSTER: u32 = 16;

/// Lane row groups of the held weights: 3J = 48 = 3 x 16 gate rows (J = 256 / 16).
const QS: u32 = 3;

/// Shared floats: `stationary::smem_floats` in precompute mode (`c` >= 1 steps), then h buffer
/// 1 and two mbarriers (4 floats, 16-byte aligned).
pub fn smem_floats(bg: u32, ip: u32, h: u32, j: u32, c: u32) -> u32 {
    let base = super::smem_floats(bg, ip, h, j, c.max(1));
    (base + bg * h).next_multiple_of(4) + 4
}

/// Builds the module (sm_90: clusters).
pub fn build(target: Target) -> Module {
    kernel_with(target, "rnn_gru_cluster", Accounting::None, |b, c| {
        let mode = b.param::<U32>("exchange");
        let stamps = Stamps::declare(b, c);
        rollout(b, c, &stamps, &mode)
    })
}

/// Offsets (floats) of h buffer 1 and of the mbarriers (after `stationary`'s layout).
fn extra(b: &mut KernelBuilder, c: &Ctx<'_>) -> (Reg<U32>, Reg<U32>) {
    let lay = layout(b, c);
    let rows2 = b.shl(c.p.group_rows, 1u32);
    let sc = b.mul(rows2, scratch_floats(1));
    let h1 = b.add(lay.scratch, sc);
    let hb = b.mul(c.p.group_rows, c.p.h);
    let end = b.add(h1, hb);
    let end = b.add(end, 3u32);
    let mb = b.and(end, !3u32);
    (h1, mb)
}

/// Shared address of mbarrier `which` (0 or 1, a register).
fn mbarrier(b: &mut KernelBuilder, c: &Ctx<'_>, which: Reg<U32>) -> Reg<U32> {
    let (_, mb) = extra(b, c);
    let a = b.shared_index(c.smem, mb);
    b.mad(which, 8u32, a)
}

/// The index of the last exchanged state: h_{steps - 1}, or h_steps with layer norm or dropout.
fn last_exchanged(b: &mut KernelBuilder, p: &P) -> Reg<U32> {
    let transformed = b.or(p.ln, p.drop);
    let extra = b.selp(1u32, 0u32, transformed);
    let s = b.add(p.steps, extra);
    b.sub(s, 1u32)
}

/// Bytes one exchange brings into this block: rows x (H - J) floats.
fn expected_bytes(b: &mut KernelBuilder, c: &Ctx<'_>) -> Reg<U32> {
    let others = b.sub(c.p.h, c.j);
    let n = b.mul(c.rows, others);
    b.shl(n, 2u32)
}

/// Arms mbarrier `which` for h_`n` when `n` <= the last exchanged state (thread 0 only).
fn arm(b: &mut KernelBuilder, c: &Ctx<'_>, which: Reg<U32>, n: Reg<U32>) {
    let last = last_exchanged(b, c.p);
    let due = b.setp(Cmp::Le, n, last);
    b.if_then(due, |b| {
        let m = mbarrier(b, c, which);
        let bytes = expected_bytes(b, c);
        b.mbarrier_arrive_expect_tx(m, bytes);
    });
}

/// Bit of the `exchange` parameter: the cluster-barrier exchange (else st.async + mbarrier).
pub const EXCHANGE_BARRIER: u32 = 1;
/// Bit of the `exchange` parameter: stage h0 and x with `cp.async` (every copy in flight at
/// once, while W_ih's loads are) and prefetch the biases to L1 (else h0 by register copies
/// before W_ih's loads, x after them).
pub const STAGE_ASYNC: u32 = 2;

/// Whether this launch uses the cluster-barrier exchange.
fn barrier_mode(b: &mut KernelBuilder, mode: &Param<U32>) -> Reg<Pred> {
    let m = b.ld_param(mode);
    let m = b.and(m, EXCHANGE_BARRIER);
    b.setp(Cmp::Ne, m, 0u32)
}

/// The staging of [`STAGE_ASYNC`] (all threads; H = 256 and Ip = 128): h0's rows into h buffer
/// 0 and x of every step into the x buffers with `cp.async` (16 bytes each), the lines of the
/// block's b_ih (3 gate segments of 16 floats) and b_hh (n gate) prefetched to L1, then this
/// thread's copies awaited (the caller's block barrier follows).
fn stage_async(b: &mut KernelBuilder, c: &Ctx<'_>) {
    let (p, smem) = (c.p, c.smem);
    let lay = layout(b, c);
    // h0: rows x 64 float4 (H = 256).
    let n_h = b.shl(c.rows, 6u32);
    b.for_range(c.tid, n_h, THREADS, |b, i, _| {
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
    // x: steps x rows rows of 32 float4 (Ip = 128), row q = step rows + r at x + q Ip.
    let xrows = b.mul(p.steps, c.rows);
    let n_x = b.shl(xrows, 5u32);
    b.for_range(c.tid, n_x, THREADS, |b, i, _| {
        let q = b.shr(i, 5u32);
        let c4 = b.and(i, 31u32);
        let c4 = b.shl(c4, 2u32);
        let step = b.div(q, c.rows);
        let r = b.rem(q, c.rows);
        let xr = b.mad(step, p.batch_pad, c.row0);
        let xr = b.add(xr, r);
        let e = b.mad(xr, p.ip, c.x_base);
        let e = b.add(e, c4);
        let src = b.index_addr(p.x, e, 4);
        let si = b.mad(q, p.ip, lay.x);
        let si = b.add(si, c4);
        let dst = b.shared_index(smem, si);
        b.cp_async_16(dst, src);
    });
    // Threads 0..3: b_ih of gates r, z, n and b_hh of gate n (units j0 .., 64-byte aligned).
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
    b.cp_async_wait_all();
}

/// The whole rollout (all threads).
fn rollout(b: &mut KernelBuilder, c: &Ctx<'_>, stamps: &Stamps, mode: &Param<U32>) {
    let p = c.p;
    let smem = c.smem;
    b.comment("prologue: the lane's place in the mat-vec");
    let zero = b.mov(0u32);
    let half = b.shr(c.lane, 4u32);
    let lane = Lane {
        slot: b.mad(c.warp, 2u32, half),
        g: b.and(c.lane, 15u32),
        warp: c.warp,
        half,
    };
    let at = |b: &mut KernelBuilder, i: u32| {
        let idx = b.mov(i);
        stamps.write(b, idx);
    };
    at(b, 0);
    b.comment("thread 0: both mbarriers, fenced to the cluster; arm h_1 (M_1) and h_2 (M_0)");
    let thread0 = b.setp(Cmp::Eq, c.tid, 0u32);
    b.if_then(thread0, |b| {
        for which in 0..2u32 {
            let w = b.mov(which);
            let m = mbarrier(b, c, w);
            b.mbarrier_init(m, 1u32);
        }
        b.fence_mbarrier_init();
        for (which, n) in [(1u32, 1u32), (0, 2)] {
            let w = b.mov(which);
            let n = b.mov(n);
            arm(b, c, w, n);
        }
    });
    b.comment("load W_hh into registers first (rows g + 16 q, q < 3: 3J = 48), held throughout");
    let whh = hold_rows(b, 16, QS, &lane, p.w_hh, c.r3, &|b, lr| c.w_hh_row(b, lr));
    b.comment("h0 into h buffer 0, gi of every step (W_ih in registers)");
    let last = b.mov(0u32);
    let async_staging = {
        let m = b.ld_param(mode);
        let m = b.and(m, STAGE_ASYNC);
        b.setp(Cmp::Ne, m, 0u32)
    };
    b.if_else(
        async_staging,
        |b| {
            let l = precompute_with(b, c, &lane, QS, &|b| stage_async(b, c));
            b.mov_to(last, l);
        },
        |b| {
            let h0_row = |b: &mut KernelBuilder, r| c.h0_row(b, r);
            copy_rows(
                b,
                c.tid,
                &RowCopy {
                    smem,
                    dst: zero,
                    dst_stride: None,
                    rows: c.rows,
                    k: p.h,
                    src: p.h0,
                    row_elem: &h0_row,
                },
            );
            let l = precompute_with(b, c, &lane, QS, &|b| stage_x(b, c, c.p.steps));
            b.mov_to(last, l);
        },
    );
    at(b, 1);
    precompute_sums(b, c, last);
    at(b, 2);
    b.comment("cluster barrier: every block's mbarriers are initialised before remote writes");
    b.cluster_arrive();
    b.cluster_wait();
    at(b, 3);
    // idx / J by `gru::reciprocal`: idx J < 2^16 (idx < 32 rows x J, J = 16).
    let magic = reciprocal(b, c.j, 16);
    b.for_range(0u32, p.steps, 1u32, |b, t, _| {
        b.comment("step t, 1: partial sums of W_hh h_t (h buffer t % 2)");
        let (h1, _) = extra(b, c);
        let cur = b.and(t, 1u32);
        let src = b.mul(cur, h1);
        let lay = layout(b, c);
        let from = Sources {
            src,
            k: p.h,
            rows: c.rows,
            scratch: lay.scratch,
        };
        partials(b, smem, &whh, &lane, &from);
        b.bar_sync();
        let stamp_at = b.mad(t, 3u32, 4u32);
        stamps.write(b, stamp_at);
        b.comment("step t, 2: cells; h' to buffer (t + 1) % 2 here and in the other blocks");
        let cells = b.mul(c.rows, c.j);
        b.for_range(c.tid, cells, THREADS, |b, idx, _| {
            let row = b.mul(idx, magic);
            let row = b.shr(row, 16u32);
            let jj = b.mul(row, c.j);
            let jj = b.sub(idx, jj);
            let lay = layout(b, c);
            let (h1, _) = extra(b, c);
            let cur = b.and(t, 1u32);
            let src = b.mul(cur, h1);
            let gh =
                |b: &mut KernelBuilder, lr: Reg<U32>| sum(b, smem, lay.scratch, c.rows, row, lr);
            let ex = Exchange { c, o_h: src };
            let at = CellAt {
                t,
                gi_step: t,
                row,
                jj,
            };
            let NewH { h: hn, unit, .. } = new_h(b, &ex, &at, lay.gi, &gh);
            // Element (row, unit) of the other buffer.
            let nxt = b.xor(cur, 1u32);
            let dst = b.mul(nxt, h1);
            let hi = b.mad(row, p.h, unit);
            let hi = b.add(hi, dst);
            let ha = b.shared_index(smem, hi);
            b.st(Space::Shared, ha, hn);
            let transformed = b.or(p.ln, p.drop);
            let raw = b.not(transformed);
            b.if_then(raw, |b| {
                let wi = ex.word_index(b, t, row);
                let wi = b.add(wi, unit);
                let oa = b.index_addr(p.out, wi, 4);
                b.st(Space::Global, oa, hn);
            });
            let t1 = b.add(t, 1u32);
            let last = last_exchanged(b, p);
            let send = b.setp(Cmp::Le, t1, last);
            b.if_then(send, |b| {
                send_quad(b, c, mode, hn, ha, nxt);
            });
        });
        let stamp_at = b.mad(t, 3u32, 5u32);
        stamps.write(b, stamp_at);
        b.comment("step t, 3: wait for the other blocks' h' (when exchanged)");
        let t1 = b.add(t, 1u32);
        let last = last_exchanged(b, p);
        let need = b.setp(Cmp::Le, t1, last);
        let by_barrier = barrier_mode(b, mode);
        let cluster_sync = b.and(need, by_barrier);
        let no_cluster_sync = b.not(cluster_sync);
        b.if_then(cluster_sync, |b| {
            b.cluster_arrive();
            b.cluster_wait();
        });
        b.if_then(no_cluster_sync, |b| {
            let by_mbarrier = b.not(by_barrier);
            let wait = b.and(need, by_mbarrier);
            b.if_then(wait, |b| wait_exchange(b, c, t));
            b.bar_sync();
        });
        let transformed = b.or(p.ln, p.drop);
        b.comment("step t, 4: layer norm and dropout (h buffer (t + 1) % 2)");
        b.if_then(transformed, |b| {
            let (h1, _) = extra(b, c);
            let nxt = b.and(t, 1u32);
            let nxt = b.xor(nxt, 1u32);
            let o_h = b.mul(nxt, h1);
            let ex = Exchange { c, o_h };
            transform(b, &ex, t);
            b.bar_sync();
        });
        let stamp_at = b.mad(t, 3u32, 6u32);
        stamps.write(b, stamp_at);
    });
    b.comment("mbarrier exchange: stay until every block's writes have landed");
    let by_barrier = barrier_mode(b, mode);
    let by_mbarrier = b.not(by_barrier);
    b.if_then(by_mbarrier, |b| {
        b.cluster_arrive();
        b.cluster_wait();
    });
}

/// Sends h' of this lane's quad (4 consecutive units of one row, at shared address `ha` of
/// this lane's own element in buffer `nxt`) to the other blocks of the cluster: quad lane i
/// sends to ranks i, i + 4, ... (all lanes of the warp take part in the shuffles).
fn send_quad(
    b: &mut KernelBuilder,
    c: &Ctx<'_>,
    mode: &Param<U32>,
    hn: Reg<F32>,
    ha: Reg<U32>,
    nxt: Reg<U32>,
) {
    let bits = b.bitcast::<U32, F32>(hn);
    let base = b.and(c.lane, !3u32);
    let v: Vec<Reg<U32>> = (0..4u32)
        .map(|i| {
            let src = b.add(base, i);
            b.shfl(Shfl::Idx, bits, src)
        })
        .collect();
    let v = [v[0], v[1], v[2], v[3]];
    // The quad's first element: 4 floats below this lane's by its place in the quad.
    let qi = b.and(c.lane, 3u32);
    let back = b.shl(qi, 2u32);
    let first = b.sub(ha, back);
    let mine = b.cluster_ctarank();
    let m = mbarrier(b, c, nxt);
    let by_barrier = barrier_mode(b, mode);
    b.for_range(qi, c.p.slices, 4u32, |b, rank, _| {
        let other = b.setp(Cmp::Ne, rank, mine);
        b.if_then(other, |b| {
            let dst = b.mapa(first, rank);
            b.if_else(
                by_barrier,
                |b| b.st_cluster_v4(dst, v),
                |b| {
                    let rm = b.mapa(m, rank);
                    b.st_async_v4(dst, v, rm);
                },
            );
        });
    });
}

/// Waits (every thread) until h_{t+1} has fully arrived in this block (phase `(t >> 1) & 1` of
/// mbarrier `(t + 1) % 2`), then thread 0 arms that mbarrier for h_{t+3}. A wait longer than
/// `barrier::TIMEOUT_CYCLES` sets the member's status word and goes on (never a hang).
fn wait_exchange(b: &mut KernelBuilder, c: &Ctx<'_>, t: Reg<U32>) {
    let t1 = b.add(t, 1u32);
    let which = b.and(t1, 1u32);
    let m = mbarrier(b, c, which);
    let parity = b.shr(t, 1u32);
    let parity = b.and(parity, 1u32);
    let state_bytes = b.mul_wide(c.e, 16u32);
    let status = b.add(c.p.state, state_bytes);
    let status = b.add(status, 8u64);
    let start = b.clock64();
    b.loop_forever(|b, brk, _| {
        let done = b.mbarrier_try_wait_parity(m, parity);
        b.bra_if(done, brk);
        give_up_when_late(b, start, status, brk);
    });
    let thread0 = b.setp(Cmp::Eq, c.tid, 0u32);
    b.if_then(thread0, |b| {
        let n = b.add(t, 3u32);
        arm(b, c, which, n);
    });
}

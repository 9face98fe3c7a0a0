//! The cluster kernels' exchange of h' (see `cluster`'s notes): the mbarriers (address, arming
//! with the expected bytes, waiting for a phase) and the sends of a lane quad.

use super::{cluster_layout, mode_bit, Variant, EXCHANGE_BARRIER};
use crate::kernels::rnn::barrier::give_up_when_late;
use crate::kernels::rnn::gru::{Ctx, P, THREADS};
use crate::ptx::*;

/// Shared address of mbarrier `which` (0 or 1, a register).
pub(super) fn mbarrier(
    b: &mut KernelBuilder,
    c: &Ctx<'_>,
    v: Variant,
    which: Reg<U32>,
) -> Reg<U32> {
    let lay = cluster_layout(b, c, v);
    let a = b.shared_index(c.smem, lay.mbar);
    b.mad(which, 8u32, a)
}

/// The index of the last exchanged state: h_{steps - 1}, or h_steps with layer norm or dropout.
pub(super) fn last_exchanged(b: &mut KernelBuilder, p: &P) -> Reg<U32> {
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
pub(super) fn arm(b: &mut KernelBuilder, c: &Ctx<'_>, v: Variant, which: Reg<U32>, n: Reg<U32>) {
    let last = last_exchanged(b, c.p);
    let due = b.setp(Cmp::Le, n, last);
    b.if_then(due, |b| {
        let m = mbarrier(b, c, v, which);
        let bytes = expected_bytes(b, c);
        b.mbarrier_arrive_expect_tx(m, bytes);
    });
}

/// Thread 0: both mbarriers (count 1), fenced to the cluster; h_1 (M_1) and h_2 (M_0) armed.
pub(super) fn init(b: &mut KernelBuilder, c: &Ctx<'_>, v: Variant) {
    let thread0 = b.setp(Cmp::Eq, c.tid, 0u32);
    b.if_then(thread0, |b| {
        for which in 0..2u32 {
            let w = b.mov(which);
            let m = mbarrier(b, c, v, w);
            b.mbarrier_init(m, 1u32);
        }
        b.fence_mbarrier_init();
        for (which, n) in [(1u32, 1u32), (0, 2)] {
            let w = b.mov(which);
            let n = b.mov(n);
            arm(b, c, v, w, n);
        }
    });
}

/// Sends h' of this lane's quad (4 consecutive units of one row, at shared address `ha` of
/// this lane's own element in buffer `nxt`) to the other blocks of the cluster: quad lane i
/// sends to ranks i, i + 4, ... (all lanes of the warp take part in the shuffles).
pub(super) fn send_quad(
    b: &mut KernelBuilder,
    c: &Ctx<'_>,
    v: Variant,
    mode: &Param<U32>,
    hn: Reg<F32>,
    ha: Reg<U32>,
    nxt: Reg<U32>,
) {
    let bits = b.bitcast::<U32, F32>(hn);
    let base = b.and(c.lane, !3u32);
    let vals: Vec<Reg<U32>> = (0..4u32)
        .map(|i| {
            let src = b.add(base, i);
            b.shfl(Shfl::Idx, bits, src)
        })
        .collect();
    let vals = [vals[0], vals[1], vals[2], vals[3]];
    // The quad's first element: 4 bytes below this lane's per place in the quad.
    let qi = b.and(c.lane, 3u32);
    let back = b.shl(qi, 2u32);
    let first = b.sub(ha, back);
    let mine = b.cluster_ctarank();
    let m = mbarrier(b, c, v, nxt);
    let by_barrier = mode_bit(b, mode, EXCHANGE_BARRIER);
    b.for_range(qi, c.p.slices, 4u32, |b, rank, _| {
        let other = b.setp(Cmp::Ne, rank, mine);
        b.if_then(other, |b| {
            let dst = b.mapa(first, rank);
            b.if_else(
                by_barrier,
                |b| b.st_cluster_v4(dst, vals),
                |b| {
                    let rm = b.mapa(m, rank);
                    b.st_async_v4(dst, vals, rm);
                },
            );
        });
    });
}

/// [`SEND_SPREAD`](super::SEND_SPREAD)'s sends of step `t` (all threads, after a block barrier
/// that follows the cells): pair `i` is chunk `i % chunks` (`chunks` = rows x J / 4 16-byte
/// pieces of the block's units of h_{t+1}) to the `i / chunks`-th other block of the cluster.
pub(super) fn send_all(
    b: &mut KernelBuilder,
    c: &Ctx<'_>,
    v: Variant,
    mode: &Param<U32>,
    t: Reg<U32>,
) {
    let p = c.p;
    let quads = b.shr(c.j, 2u32);
    let chunks = b.mul(c.rows, quads);
    let others = b.sub(p.slices, 1u32);
    let pairs = b.mul(chunks, others);
    let mine = b.cluster_ctarank();
    let t1 = b.add(t, 1u32);
    let nxt = b.and(t1, 1u32);
    let by_barrier = mode_bit(b, mode, EXCHANGE_BARRIER);
    b.for_range(c.tid, pairs, THREADS, |b, i, _| {
        let d = b.div(i, chunks);
        let k = b.rem(i, chunks);
        let skip = b.setp(Cmp::Ge, d, mine);
        let step = b.selp(1u32, 0u32, skip);
        let rank = b.add(d, step);
        let row = b.div(k, quads);
        let q = b.rem(k, quads);
        let lay = cluster_layout(b, c, v);
        let off = b.mul(nxt, lay.h1);
        let e = b.mad(row, p.h, c.j0);
        let e = b.mad(q, 4u32, e);
        let e = b.add(e, off);
        let a = b.shared_index(c.smem, e);
        let vals = b.ld_v4::<U32>(Space::Shared, a);
        let dst = b.mapa(a, rank);
        b.if_else(
            by_barrier,
            |b| b.st_cluster_v4(dst, vals),
            |b| {
                let m = mbarrier(b, c, v, nxt);
                let rm = b.mapa(m, rank);
                b.st_async_v4(dst, vals, rm);
            },
        );
    });
}

/// Waits (every thread) until h_{t+1} has fully arrived in this block (phase `(t >> 1) & 1` of
/// mbarrier `(t + 1) % 2`), then thread 0 arms that mbarrier for h_{t+3}. A wait longer than
/// `barrier::TIMEOUT_CYCLES` sets the member's status word and goes on (never a hang).
pub(super) fn wait(b: &mut KernelBuilder, c: &Ctx<'_>, v: Variant, t: Reg<U32>) {
    let t1 = b.add(t, 1u32);
    let which = b.and(t1, 1u32);
    let m = mbarrier(b, c, v, which);
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
        arm(b, c, v, which, n);
    });
}

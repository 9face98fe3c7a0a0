//! The cluster kernels' body (see `cluster`'s notes): the prologue's order and the step loop.

use super::super::matvec::{partials, sum, Sources};
use super::super::{Lane, Stamps};
use super::exchange::{self, last_exchanged, send_all, send_quad};
use super::{cluster_layout, mode_bit, prologue, Variant, EXCHANGE_BARRIER, SEND_SPREAD};
use crate::kernels::rnn::gru::cell::{new_h, CellAt, NewH};
use crate::kernels::rnn::gru::exchange::transform;
use crate::kernels::rnn::gru::{kernel_with, reciprocal, Accounting, Ctx, Exchange, THREADS};
use crate::ptx::*;

/// Builds the module of `variant` as entry `name` (sm_90: clusters).
pub(super) fn build(target: Target, name: &str, v: Variant) -> Module {
    kernel_with(target, name, Accounting::None, |b, c| {
        let mode = b.param::<U32>("exchange");
        let stamps = Stamps::declare(b, c);
        rollout(b, c, &stamps, &mode, v)
    })
}

/// The whole rollout (all threads).
fn rollout(b: &mut KernelBuilder, c: &Ctx<'_>, stamps: &Stamps, mode: &Param<U32>, v: Variant) {
    let p = c.p;
    let smem = c.smem;
    b.comment("prologue: the lane's place in the mat-vec");
    let lane = Lane::new(b, c);
    let at = |b: &mut KernelBuilder, i: u32| stamps.at(b, i);
    stamps.write_block(b, 0);
    at(b, 0);
    b.comment("thread 0: both mbarriers, fenced to the cluster; arm h_1 (M_1) and h_2 (M_0)");
    exchange::init(b, c, v);
    at(b, 1);
    b.comment("W_hh's loads, h0 into h buffer 0, gi of every step (W_ih in registers)");
    let whh = prologue::run(b, c, v, &lane, mode);
    at(b, 2);
    b.comment("cluster barrier: every block's mbarriers are initialised before remote writes");
    b.cluster_arrive();
    b.cluster_wait();
    at(b, 3);
    // idx / J by `gru::reciprocal`: idx J < 2^16 (idx < 32 rows x J, J = 16).
    let magic = reciprocal(b, c.j, 16);
    b.for_range(0u32, p.steps, 1u32, |b, t, _| {
        b.comment("step t, 1: partial sums of W_hh h_t (h buffer t % 2)");
        let lay = cluster_layout(b, c, v);
        let cur = b.and(t, 1u32);
        let src = b.mul(cur, lay.h1);
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
            let lay = cluster_layout(b, c, v);
            let cur = b.and(t, 1u32);
            let src = b.mul(cur, lay.h1);
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
            let dst = b.mul(nxt, lay.h1);
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
            let by_quads = mode_bit(b, mode, SEND_SPREAD);
            let by_quads = b.not(by_quads);
            let send = b.and(send, by_quads);
            b.if_then(send, |b| {
                send_quad(b, c, v, mode, hn, ha, nxt);
            });
        });
        let stamp_at = b.mad(t, 3u32, 5u32);
        stamps.write(b, stamp_at);
        b.comment("step t, 3: wait for the other blocks' h' (when exchanged)");
        let t1 = b.add(t, 1u32);
        let last = last_exchanged(b, p);
        let need = b.setp(Cmp::Le, t1, last);
        let spread = mode_bit(b, mode, SEND_SPREAD);
        let spread = b.and(need, spread);
        b.if_then(spread, |b| {
            b.bar_sync();
            send_all(b, c, v, mode, t);
        });
        let by_barrier = mode_bit(b, mode, EXCHANGE_BARRIER);
        let cluster_sync = b.and(need, by_barrier);
        let no_cluster_sync = b.not(cluster_sync);
        b.if_then(cluster_sync, |b| {
            b.cluster_arrive();
            b.cluster_wait();
        });
        b.if_then(no_cluster_sync, |b| {
            let by_mbarrier = b.not(by_barrier);
            let wait = b.and(need, by_mbarrier);
            b.if_then(wait, |b| exchange::wait(b, c, v, t));
            b.bar_sync();
        });
        let transformed = b.or(p.ln, p.drop);
        b.comment("step t, 4: layer norm and dropout (h buffer (t + 1) % 2)");
        b.if_then(transformed, |b| {
            let lay = cluster_layout(b, c, v);
            let nxt = b.and(t, 1u32);
            let nxt = b.xor(nxt, 1u32);
            let o_h = b.mul(nxt, lay.h1);
            let ex = Exchange { c, o_h };
            transform(b, &ex, t);
            b.bar_sync();
        });
        let stamp_at = b.mad(t, 3u32, 6u32);
        stamps.write(b, stamp_at);
    });
    b.comment("mbarrier exchange: stay until every block's writes have landed");
    let by_barrier = mode_bit(b, mode, EXCHANGE_BARRIER);
    let by_mbarrier = b.not(by_barrier);
    b.if_then(by_mbarrier, |b| {
        b.cluster_arrive();
        b.cluster_wait();
    });
    stamps.write_block(b, 1);
}

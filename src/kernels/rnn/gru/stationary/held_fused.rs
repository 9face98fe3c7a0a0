//! The fused step loop of `rnn_gru_held48swxf` (`held`'s notes; without layer norm and dropout,
//! which take `held_step`'s loop): no block-wide gather and no barrier after it. Each warp polls
//! the exchange words of its own K slice only (units `32 w .. + 32` of the block's rows: the two
//! half-warps' slots of the W_hh mat-vec) at the top of the step, stores them over its slice of
//! the shared h and goes on with its partials as soon as they are there (`bar.warp.sync` orders
//! the lanes' stores before the reads). The slice is written and read by that warp only, so no
//! other barrier is needed; a cell keeps its own h in a register (h0 from the staged rows), so
//! the cells never read the shared h. The W_hh scratch alternates by step parity (the second
//! one over the staged weights, free once they are held): the partials of step t + 1 may start
//! before a slower warp's cells of step t have read the sums of step t.
//!
//! Per step t: (t > 0: each warp's gather of step t - 1's states); partials of `W_hh h` into
//! scratch t % 2; `cp.async` wait; bar.sync; upper warps: (gi sums of t + 1,) partials of
//! `W_ih x_{t+2}`, x of step t + 3; lower warps: cells (h' to the exchange words and `out`),
//! gi sums of t + 1. Same sums in the same order: states bit-identical to `rnn_gru_held48sw`.
//! Stamps as there, with `[6 + 3 t]` thread 0's gather of step t's states done (at the top of
//! step t + 1).

use super::held_gi::{copy_x_step, gi_sums, layout};
use super::held_step::Env;
use super::matvec::{partials, sum, Sources};
use super::STAMPS;
use crate::kernels::rnn::barrier::give_up_when_late;
use crate::kernels::rnn::gru::cell::{cell_in_register, CellAt};
use crate::kernels::rnn::gru::{reciprocal, Exchange, THREADS};
use crate::ptx::*;

/// The fused step loop (all threads, split roles; `second`: shared offset of the second W_hh
/// scratch).
pub(super) fn fused_steps(b: &mut KernelBuilder, env: &Env<'_>, second: Reg<U32>) {
    let Env {
        c,
        stamps,
        lane,
        up,
        whh,
        threads,
        tid,
        gi_upper,
        lazy_x,
        zero,
        ..
    } = *env;
    let u = up.expect("the fused loop runs with split roles");
    let (p, smem) = (c.p, c.smem);
    let ex = Exchange { c, o_h: zero };
    // idx / J by `gru::reciprocal`: idx J < 2^16 (idx < 32 rows x J, J <= 21).
    let magic = reciprocal(b, c.j, 16);
    // Lower thread `tid` < rows J owns cell tid (at most 128 cells: one each).
    let cells = b.mul(c.rows, c.j);
    let lower = b.not(u.on);
    let has = b.setp(Cmp::Lt, tid, cells);
    let is_cell = b.and(lower, has);
    let place = |b: &mut KernelBuilder| {
        let row = b.mul(tid, magic);
        let row = b.shr(row, 16u32);
        let jj = b.mul(row, c.j);
        (row, b.sub(tid, jj))
    };
    b.comment("the cell's h0 into its register");
    let h = b.mov(0.0f32);
    b.if_then(is_cell, |b| {
        let (row, jj) = place(b);
        let unit = b.add(c.j0, jj);
        let hi = b.mad(row, p.h, unit);
        let ha = b.shared_index(smem, hi);
        let v = b.ld::<F32>(Space::Shared, ha);
        b.mov_to(h, v);
    });
    b.for_range(0u32, p.steps, 1u32, |b, t, _| {
        let odd = b.and(t, 1u32);
        let odd = b.setp(Cmp::Ne, odd, 0u32);
        let later = b.setp(Cmp::Gt, t, 0u32);
        b.if_then(later, |b| {
            b.comment("step t, 0: this warp's K slice of step t - 1's states");
            let tp = b.sub(t, 1u32);
            gather_slice(b, &ex, tp);
            let stamp_at = b.mad(tp, 3u32, 6u32);
            stamps.write(b, stamp_at);
        });
        b.comment("step t, 1: partial sums of W_hh h (scratch of step parity)");
        let lay = layout(b, c);
        let sh = b.selp(second, lay.sh, odd);
        let from = Sources {
            src: zero,
            k: p.h,
            rows: c.rows,
            scratch: sh,
        };
        partials(b, smem, whh, lane, &from);
        b.cp_async_wait_all();
        b.bar_sync();
        let stamp_at = b.mad(t, 3u32, 4u32);
        stamps.write(b, stamp_at);
        let t1 = b.add(t, 1u32);
        let more = b.setp(Cmp::Lt, t1, p.steps);
        b.if_else(
            u.on,
            |b| {
                if gi_upper {
                    b.if_then(more, |b| gi_sums(b, c, t1, threads, tid));
                }
                b.comment("step t (upper warps): partials of W_ih x_{t+2}");
                let t2 = b.add(t, 2u32);
                let more2 = b.setp(Cmp::Lt, t2, p.steps);
                b.if_then(more2, |b| env.xp(b, t2));
                if lazy_x {
                    b.comment("step t (upper warps): copy x of step t + 3");
                    let t3 = b.add(t, 3u32);
                    let more3 = b.setp(Cmp::Lt, t3, p.steps);
                    b.if_then(more3, |b| copy_x_step(b, c, t3, THREADS / 2, tid));
                    b.cp_async_commit_group();
                }
                let idx = b.add(t, STAMPS - 16);
                stamps.write_for(b, idx, tid);
            },
            |b| {
                b.comment("step t, 2: the cell (gh slot sums, gates, h' to hx and out)");
                b.if_then(is_cell, |b| {
                    let (row, jj) = place(b);
                    let lay = layout(b, c);
                    let sh = b.selp(second, lay.sh, odd);
                    let gh =
                        |b: &mut KernelBuilder, lr: Reg<U32>| sum(b, smem, sh, c.rows, row, lr);
                    let at = CellAt {
                        t,
                        gi_step: b.and(t, 1u32),
                        row,
                        jj,
                    };
                    cell_in_register(b, &ex, &at, lay.gi, &gh, h);
                });
                let stamp_at = b.mad(t, 3u32, 5u32);
                stamps.write(b, stamp_at);
                if !gi_upper {
                    b.comment("step t: gi of step t + 1");
                    b.if_then(more, |b| gi_sums(b, c, t1, threads, tid));
                }
            },
        );
    });
    let last = b.mad(p.steps, 3u32, 3u32);
    stamps.write(b, last);
}

/// Warp w's K slice of the states of step `t` (units `32 w .. + 32` of the block's rows) from
/// the tagged exchange words into the shared h: lane l polls rows `l / 8 + 4 i`, units
/// `32 w + 4 (l % 8) ..+ 4` (two 16-byte loads of two single-copy atomic words each) until all
/// four carry this step's tag, then stores them; `bar.warp.sync` before the partials read them.
fn gather_slice(b: &mut KernelBuilder, ex: &Exchange<'_>, t: Reg<U32>) {
    let p = ex.p;
    let tag = b.add(ex.epoch, t);
    let tag = b.add(tag, 1u32);
    let r0 = b.shr(ex.lane, 3u32);
    let ul = b.and(ex.lane, 7u32);
    let ul = b.shl(ul, 2u32);
    let unit = b.shl(ex.warp, 5u32);
    let unit = b.add(unit, ul);
    let state_bytes = b.mul_wide(ex.e, 16u32);
    let status = b.add(p.state, state_bytes);
    let status = b.add(status, 8u64);
    let start = b.clock64();
    b.for_range(r0, ex.rows, 4u32, |b, row, _| {
        let wi = ex.word_index(b, t, row);
        let wi = b.add(wi, unit);
        let a: Addr = b.index_addr(p.hx, wi, 8).into();
        let halves = [a.clone(), a.off(16)];
        let w = [[b.mov(0u64), b.mov(0u64)], [b.mov(0u64), b.mov(0u64)]];
        for (ws, at) in w.iter().zip(&halves) {
            b.ld_relaxed_gpu_v2_to(*ws, at.clone());
        }
        b.loop_forever(|b, brk, _| {
            let mut all = None;
            let mut fresh = Vec::with_capacity(2);
            for ws in &w {
                let (_, t0) = b.unpack64(ws[0]);
                let (_, t1) = b.unpack64(ws[1]);
                let ok0 = b.setp(Cmp::Eq, t0, tag);
                let ok1 = b.setp(Cmp::Eq, t1, tag);
                let ok = b.and(ok0, ok1);
                all = Some(match all {
                    None => ok,
                    Some(x) => b.and(x, ok),
                });
                fresh.push(ok);
            }
            b.bra_if(all.expect("two loads"), brk);
            give_up_when_late(b, start, status, brk);
            for ((ws, at), ok) in w.iter().zip(&halves).zip(fresh) {
                b.guarded(ok, true, |b| b.ld_relaxed_gpu_v2_to(*ws, at.clone()));
            }
        });
        let mut v = Vec::with_capacity(4);
        for &x in w.iter().flatten() {
            v.push(b.unpack64(x).0);
        }
        let hi = b.mad(row, p.h, unit);
        let hi = b.add(hi, ex.o_h);
        let sa = b.shared_index(ex.smem, hi);
        b.st_v4::<U32>(Space::Shared, sa, [v[0], v[1], v[2], v[3]]);
    });
    b.warp_sync(0xffff_ffff);
}

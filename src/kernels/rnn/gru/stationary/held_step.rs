//! The held kernels' step loop (`held`; the module notes there): the mat-vec, the cells, gi of
//! the next step, the partials of `W_ih x` two steps ahead and the gather, per step.

use super::held_gi::{copy_x_step, gi_sums, layout, x_partials, x_partials_wide};
use super::matvec::{partials, sum, Held, Sources};
use super::wide::Upper;
use super::{Lane, Stamps, STAMPS};
use crate::kernels::rnn::gru::cell::{cell, CellAt, NewState};
use crate::kernels::rnn::gru::exchange::{gather_by, transform, Gather};
use crate::kernels::rnn::gru::{reciprocal, Ctx, Exchange, THREADS};
use crate::ptx::*;

/// What the step loops read: the block's registers (with the launch's epoch), the held weights,
/// the roles and the schedules (`held`'s `How`).
pub(super) struct Env<'a> {
    pub c: &'a Ctx<'a>,
    pub stamps: &'a Stamps,
    pub lane: &'a Lane,
    /// The upper warps (split roles), or none (every warp takes every role).
    pub up: Option<&'a Upper>,
    pub whh: &'a Held,
    pub wih: &'a Held,
    pub qs: u32,
    /// Threads that take the cells, gi sums and gather, and the calling thread's index among them.
    pub threads: u32,
    pub tid: Reg<U32>,
    pub gi_upper: bool,
    pub lazy_x: bool,
    pub probe: bool,
    /// The gi sums of the lower threads with a cell between the gather's first poll loads and
    /// their check (they poll right after their cell); the others take theirs before the gather.
    pub overlap: bool,
    /// Without split roles: the partials of `W_ih x_{t+2}` between the gather's first poll
    /// loads and their check (every thread has a first pass: rows >= 4, 128 pairs a row).
    pub partials_in_gather: bool,
    /// A register holding 0.
    pub zero: Reg<U32>,
}

impl Env<'_> {
    /// Partials of `W_ih x_s`: every warp, or the upper warps only.
    pub fn xp(&self, b: &mut KernelBuilder, s: Reg<U32>) {
        match self.up {
            None => x_partials(b, self.c, self.wih, self.lane, s),
            Some(u) => b.if_then(u.on, |b| x_partials_wide(b, self.c, self.wih, u, s)),
        }
    }
}

/// The step loop (all threads; after the prologue's last barrier).
pub(super) fn steps(b: &mut KernelBuilder, env: &Env<'_>) {
    let Env {
        c,
        stamps,
        lane,
        up,
        whh,
        wih,
        qs,
        threads,
        tid,
        gi_upper,
        lazy_x,
        probe: how_probe,
        overlap,
        partials_in_gather,
        zero,
    } = *env;
    let (p, smem) = (c.p, c.smem);
    let split = up.is_some();
    let xp = |b: &mut KernelBuilder, s: Reg<U32>| env.xp(b, s);
    let ex = Exchange { c, o_h: zero };
    // idx / J by `gru::reciprocal`: idx J < 2^16 (idx < 32 rows x J, J <= 21).
    let magic = reciprocal(b, c.j, 16);
    b.for_range(0u32, p.steps, 1u32, |b, t, _| {
        b.comment("step t, 1: partial sums of W_hh h");
        let lay = layout(b, c);
        let from = Sources {
            src: zero,
            k: p.h,
            rows: c.rows,
            scratch: lay.sh,
        };
        partials(b, smem, whh, lane, &from);
        // x of steps 1 .. (group 2) has landed before this barrier (a no-op after step 0):
        // the barrier publishes it for the partials of W_ih x_{t+1}.
        b.cp_async_wait_all();
        b.bar_sync();
        let stamp_at = b.mad(t, 3u32, 4u32);
        stamps.write(b, stamp_at);
        // Cells, gi of step t + 1 and the gather (all threads, or the lower warps while the
        // upper ones take the partials of W_ih x_{t+2}).
        let state = |b: &mut KernelBuilder| {
            b.comment("step t, 2: cells (gh slot sums, gates, h' to hx and shared h)");
            let cells = b.mul(c.rows, c.j);
            b.for_range(tid, cells, threads, |b, idx, _| {
                let row = b.mul(idx, magic);
                let row = b.shr(row, 16u32);
                let jj = b.mul(row, c.j);
                let jj = b.sub(idx, jj);
                let lay = layout(b, c);
                let gh =
                    |b: &mut KernelBuilder, lr: Reg<U32>| sum(b, smem, lay.sh, c.rows, row, lr);
                let at = CellAt {
                    t,
                    gi_step: b.and(t, 1u32),
                    row,
                    jj,
                };
                cell(b, &ex, &at, lay.gi, &gh, NewState::AlsoShared);
            });
            let stamp_at = b.mad(t, 3u32, 5u32);
            stamps.write(b, stamp_at);
            b.comment(if gi_upper {
                "step t: (gi of step t + 1 by the upper warps)"
            } else if split {
                "step t: gi of step t + 1 (threads without cells first)"
            } else {
                "step t: gi of step t + 1 (threads without cells first), partials of W_ih x_{t+2}"
            });
            let t1 = b.add(t, 1u32);
            // With `overlap`, the gi sums run inside the gather (`between`).
            let gi_next = |b: &mut KernelBuilder| {
                let more = b.setp(Cmp::Lt, t1, p.steps);
                b.if_then(more, |b| gi_sums(b, c, t1, threads, tid));
            };
            // `overlap`: whether the calling thread has a cell (the lower threads tid < rows J).
            let with_cell = |b: &mut KernelBuilder| {
                let cells = b.mul(c.rows, c.j);
                b.setp(Cmp::Lt, tid, cells)
            };
            if !gi_upper && !overlap {
                gi_next(b);
            } else if !gi_upper {
                let has = with_cell(b);
                let none = b.not(has);
                b.if_then(none, gi_next);
            }
            let gi_in_gather = |b: &mut KernelBuilder| {
                let has = with_cell(b);
                b.if_then(has, gi_next);
            };
            let xp_next = |b: &mut KernelBuilder| {
                let t2 = b.add(t, 2u32);
                let more2 = b.setp(Cmp::Lt, t2, p.steps);
                b.if_then(more2, |b| xp(b, t2));
            };
            if !split && !partials_in_gather {
                xp_next(b);
            }
            b.comment("step t, 3: gather the other blocks' h' (tagged words)");
            let gather_until = {
                let transformed = b.or(p.ln, p.drop);
                let extra = b.selp(1u32, 0u32, transformed);
                b.add(p.steps, extra)
            };
            let need = b.setp(Cmp::Lt, t1, gather_until);
            // The tuned kernels: thread 0's gather timings and rounds (`super::PROBES`).
            let probe = |b: &mut KernelBuilder, clocks: [Reg<U64>; 3], rounds: Reg<U32>| {
                let at = b.mad(t, 4u32, STAMPS);
                for (i, v) in clocks.into_iter().enumerate() {
                    let idx = b.add(at, i as u32);
                    stamps.write_value(b, idx, v);
                }
                let idx = b.add(at, 3u32);
                let r = b.cvt::<U64, U32>(rounds);
                stamps.write_value(b, idx, r);
            };
            let how = Gather {
                // One round of polls for Bg = 4 (held48; held48s: 4 of 128 threads' pairs) and
                // Bg = 16 (held64) at 256 threads (held64s: two rounds).
                in_flight: if qs == 3 { 4 } else { 8 },
                skip_own: true,
                half_h: Some(128),
                on: Some(need),
                probe: if how_probe { Some(&probe) } else { None },
                between: if overlap && !gi_upper {
                    Some(&gi_in_gather)
                } else if partials_in_gather {
                    Some(&xp_next)
                } else {
                    None
                },
            };
            gather_by(b, &ex, t, &how, threads, tid);
        };
        match &up {
            None => state(b),
            Some(u) => b.if_else(
                u.on,
                |b| {
                    if gi_upper {
                        b.comment("step t, 2-3 (upper warps): gi of step t + 1");
                        let t1 = b.add(t, 1u32);
                        let more = b.setp(Cmp::Lt, t1, p.steps);
                        b.if_then(more, |b| gi_sums(b, c, t1, threads, tid));
                    }
                    b.comment("step t, 2-3 (upper warps): partials of W_ih x_{t+2}");
                    let t2 = b.add(t, 2u32);
                    let more2 = b.setp(Cmp::Lt, t2, p.steps);
                    b.if_then(more2, |b| x_partials_wide(b, c, wih, u, t2));
                    if lazy_x {
                        b.comment("step t (upper warps): copy x of step t + 3");
                        let t3 = b.add(t, 3u32);
                        let more3 = b.setp(Cmp::Lt, t3, p.steps);
                        b.if_then(more3, |b| copy_x_step(b, c, t3, THREADS / 2, tid));
                        b.cp_async_commit_group();
                    }
                    // Thread 64's stamp (the first upper thread) at `STAMPS - 16 + t` (t < 16):
                    // the upper warps' end.
                    let idx = b.add(t, STAMPS - 16);
                    stamps.write_for(b, idx, tid);
                },
                state,
            ),
        }
        b.bar_sync();
        let transformed = b.or(p.ln, p.drop);
        b.comment("step t, 4: layer norm and dropout");
        b.if_then(transformed, |b| {
            transform(b, &ex, t);
            b.bar_sync();
        });
        let stamp_at = b.mad(t, 3u32, 6u32);
        stamps.write(b, stamp_at);
    });
}

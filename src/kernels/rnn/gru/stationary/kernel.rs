//! `rnn_gru_stationary`: the GRU rollout with W_hh in registers (H = 256, padded input 128; ABI
//! and steps in `gru`'s module notes, this path's in `stationary`'s): the prologue and the step
//! loop.

use super::matvec::{hold, partials, sum, Sources};
use super::project::{
    copy_x, precompute, precompute_sums, prefetch_x, project, project_split, stage_x,
};
use super::{and_not, layout, precomputed, Lane, Stamps, WIH_STRIDE};
use crate::kernels::rnn::gru::cell::{cell, CellAt, NewState};
use crate::kernels::rnn::gru::exchange::{gather, transform, Gather};
use crate::kernels::rnn::gru::tile::{copy_rows, RowCopy};
use crate::kernels::rnn::gru::{kernel, reciprocal, Ctx, Exchange, THREADS};
use crate::ptx::*;

/// Builds the module.
pub fn build(target: Target) -> Module {
    kernel(target, "rnn_gru_stationary", |b, c| {
        let stamps = Stamps::declare(b, c);
        rollout(b, c, &stamps)
    })
}

/// The whole rollout (all threads; after `gru::block_context`).
fn rollout(b: &mut KernelBuilder, c: &Ctx<'_>, stamps: &Stamps) {
    let p = c.p;
    let smem = c.smem;
    b.comment("prologue: shared layout, the lane's place in the mat-vec");
    let zero = b.mov(0u32);
    let lay = layout(b, c);
    let lane = Lane::new(b, c);
    let at = |b: &mut KernelBuilder, i: u32| stamps.at(b, i);
    at(b, 0);
    let pre = precomputed(b, p);
    b.comment("stage h0");
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
    b.comment("gi: of every step (precompute mode) or of step 0 (per-step mode)");
    // Precompute mode: the last phase of gi's sums waits for W_hh's loads to be issued.
    let last = b.mov(0u32);
    b.if_else(
        pre,
        |b| {
            let l = precompute(b, c, &lane);
            b.mov_to(last, l);
        },
        |b| {
            b.comment("per-step mode: stage W_ih and x of steps 0 and 1, then gi of step 0");
            let w_ih_row = |b: &mut KernelBuilder, lr| c.w_ih_row(b, lr);
            let wih = RowCopy {
                smem,
                dst: lay.w,
                dst_stride: Some(b.mov(WIH_STRIDE)),
                rows: c.r3,
                k: p.ip,
                src: p.w_ih,
                row_elem: &w_ih_row,
            };
            copy_rows(b, c.tid, &wih);
            stage_x(b, c, 2);
            b.bar_sync();
            project(b, c, zero);
        },
    );
    at(b, 1);
    b.comment("load W_hh into registers (held for the whole rollout)");
    // W_hh held (KS = 16) for the whole rollout (its loads are in flight until step 0's mat-vec).
    let whh = hold(b, 16, &lane, p.w_hh, c.r3, &|b, lr| c.w_hh_row(b, lr));
    b.comment("precompute mode: the last phase's gi sums");
    b.if_then(pre, |b| precompute_sums(b, c, last));
    at(b, 2);
    b.bar_sync();
    at(b, 3);
    let ex = Exchange { c, o_h: zero };
    // idx / J by `gru::reciprocal`: idx J < 2^16 (idx < 32 rows x J, J <= 21).
    let magic = reciprocal(b, c.j, 16);
    b.for_range(0u32, p.steps, 1u32, |b, t, _| {
        b.comment("step t: prefetch x of step t + 2 (per-step mode)");
        {
            let t2 = b.add(t, 2u32);
            let copy_x_next = b.setp(Cmp::Lt, t2, p.steps);
            let pre = precomputed(b, p);
            let copy_x_next = and_not(b, copy_x_next, pre);
            prefetch_x(b, c, t2, copy_x_next);
        }
        b.comment("step t, 1: partial sums of W_hh h");
        let lay = layout(b, c);
        let from = Sources {
            src: zero,
            k: p.h,
            rows: c.rows,
            scratch: lay.scratch,
        };
        partials(b, smem, &whh, &lane, &from);
        b.bar_sync();
        // Stamp 4 + 3 t + i (i = 0 mat-vec, 1 cell, 2 exchange), its index formed where it is
        // written: no register is free to keep it across the step.
        let stamp_at = b.mad(t, 3u32, 4u32);
        stamps.write(b, stamp_at);
        b.comment("step t, 2: cells (slot sums, gates, h' to hx and shared h)");
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
            let gi_step = b.selp(t, parity, pre);
            let at = CellAt {
                t,
                gi_step,
                row,
                jj,
            };
            cell(b, &ex, &at, lay.gi, &gh, NewState::AlsoShared);
        });
        let stamp_at = b.mad(t, 3u32, 5u32);
        stamps.write(b, stamp_at);
        let t1 = b.add(t, 1u32);
        let t2 = b.add(t, 2u32);
        let pre = precomputed(b, p);
        let project_next = b.setp(Cmp::Lt, t1, p.steps);
        let project_next = and_not(b, project_next, pre);
        let copy_x_next = b.setp(Cmp::Lt, t2, p.steps);
        let copy_x_next = and_not(b, copy_x_next, pre);
        let cells_up = b.add(cells, 31u32);
        let cell_warps = b.shr(cells_up, 5u32);
        let cell_warps = b.min(cell_warps, THREADS / 32);
        b.comment("step t: gi of step t + 1 (per-step mode)");
        b.if_then(project_next, |b| project_split(b, c, t1, cell_warps));
        // The last step's h is only gathered for layer norm or dropout (whole rows).
        b.comment("step t, 3: gather the other blocks' h' (tagged words)");
        // Steps t whose gather is needed: t + 1 < steps, or every step with layer norm or
        // dropout (computed here: no register is free to keep it across the step loop).
        let gather_until = {
            let transformed = b.or(p.ln, p.drop);
            let extra = b.selp(1u32, 0u32, transformed);
            b.add(p.steps, extra)
        };
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
                probe: None,
                between: None,
            },
        );
        // x of step t + 2 (prefetched at the top of the step) into buffer t % 2, last read by
        // step t - 1's projection.
        b.comment("step t: x of step t + 2 into shared memory (per-step mode)");
        copy_x(b, c, t2, copy_x_next);
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

//! `rnn_gru_stationary48`: `rnn_gru_stationary` (same ABI and steps, see `stationary`'s notes)
//! for blocks of at most 16 units (3J <= 48 gate rows) in precompute mode only (`chunk` != 0:
//! gi of every step before step 0). Its lanes hold W_ih's and W_hh's rows `g + 16 q` for q < 3
//! only (`matvec::hold_rows`): a quarter fewer held registers and fmas than the 64 rows (q < 4)
//! of `rnn_gru_stationary`, whose spare lane rows repeat the last real row when 3J = 48.

use super::matvec::{hold_rows, partials, sum, Sources};
use super::project::{precompute_sums, precompute_with, stage_x};
use super::{layout, Lane, Stamps};
use crate::kernels::rnn::gru::cell::{cell, CellAt, NewState};
use crate::kernels::rnn::gru::exchange::{gather, transform, Gather};
use crate::kernels::rnn::gru::tile::{copy_rows, RowCopy};
use crate::kernels::rnn::gru::{kernel, reciprocal, Ctx, Exchange, THREADS};
use crate::ptx::*;

/// Lane row groups of the held weights (3 x 16 = 48 gate rows).
const QS: u32 = 3;

/// Builds the module.
pub fn build(target: Target) -> Module {
    kernel(target, "rnn_gru_stationary48", |b, c| {
        let stamps = Stamps::declare(b, c);
        rollout(b, c, &stamps)
    })
}

/// The whole rollout (all threads; after `gru::block_context`); stamps as `rnn_gru_stationary`'s.
fn rollout(b: &mut KernelBuilder, c: &Ctx<'_>, stamps: &Stamps) {
    let (p, smem) = (c.p, c.smem);
    b.comment("prologue: the lane's place in the mat-vec");
    let zero = b.mov(0u32);
    let lane = Lane::new(b, c);
    let at = |b: &mut KernelBuilder, i: u32| stamps.at(b, i);
    at(b, 0);
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
    b.comment("gi of every step (W_ih's rows q < 3 in registers)");
    let last = precompute_with(b, c, &lane, QS, &|b| stage_x(b, c, c.p.steps));
    at(b, 1);
    b.comment("load W_hh into registers (rows q < 3, held for the whole rollout)");
    let whh = hold_rows(b, 16, QS, &lane, p.w_hh, c.r3, &|b, lr| c.w_hh_row(b, lr));
    precompute_sums(b, c, last);
    at(b, 2);
    b.bar_sync();
    at(b, 3);
    let ex = Exchange { c, o_h: zero };
    // idx / J by `gru::reciprocal`: idx J < 2^16 (idx < 32 rows x J, J <= 16).
    let magic = reciprocal(b, c.j, 16);
    b.for_range(0u32, p.steps, 1u32, |b, t, _| {
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
        let stamp_at = b.mad(t, 3u32, 4u32);
        stamps.write(b, stamp_at);
        b.comment("step t, 2: cells (slot sums, gates, h' to hx and shared h)");
        let cells = b.mul(c.rows, c.j);
        b.for_range(c.tid, cells, THREADS, |b, idx, _| {
            let row = b.mul(idx, magic);
            let row = b.shr(row, 16u32);
            let jj = b.mul(row, c.j);
            let jj = b.sub(idx, jj);
            let gh =
                |b: &mut KernelBuilder, lr: Reg<U32>| sum(b, smem, lay.scratch, c.rows, row, lr);
            let at = CellAt {
                t,
                gi_step: t,
                row,
                jj,
            };
            cell(b, &ex, &at, lay.gi, &gh, NewState::AlsoShared);
        });
        let stamp_at = b.mad(t, 3u32, 5u32);
        stamps.write(b, stamp_at);
        b.comment("step t, 3: gather the other blocks' h' (tagged words)");
        let t1 = b.add(t, 1u32);
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

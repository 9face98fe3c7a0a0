//! `rnn_gru_shared`: the GRU rollout with its weights in shared memory (ABI and steps in `gru`'s
//! module notes): any H and padded input width (multiples of 128).
//!
//! A block keeps its 3J rows of W_hh and W_ih in shared memory (local row `3 jj + q` is gate q of
//! unit j0 + jj), its rows of h, and `gi = W_ih x + b_ih` for C steps at once (`chunk`; it does
//! not depend on h: computed before step 0, and for steps t + 1 .. t + 1 + C between step t's
//! cell and its exchange, where it fills the wait). Step 1's mat-vec is `tile::matvec`; a
//! bar.sync separates the cell from the exchange.
//!
//! Shared layout (floats): W_hh `3J x H` | W_ih `3J x Ip` | x stage `C Bg x Ip` | gi
//! `C Bg x 3J` | h `Bg x H` | gh `Bg x 3J` ([`smem_floats`]).

use super::cell::{cell, CellAt, NewState};
use super::exchange::{gather, transform, Gather, IN_FLIGHT};
use super::tile::{copy_rows, matvec, MatVec, RowCopy};
use super::{kernel, Ctx, Exchange, THREADS};
use crate::ptx::*;

/// Dynamic shared memory of one block in floats, for `bg` rows, at most `j` units, `c` steps of gi:
/// W_hh and W_ih rows (`3J (H + Ip)`), the x stage and gi (`C Bg (Ip + 3J)`), h and gh
/// (`Bg (H + 3J)`).
pub fn smem_floats(bg: u32, ip: u32, h: u32, j: u32, c: u32) -> u32 {
    3 * j * (h + ip) + c * bg * (ip + 3 * j) + bg * (h + 3 * j)
}

/// Builds the module.
pub fn build(target: Target) -> Module {
    kernel(target, "rnn_gru_shared", rollout)
}

/// The whole rollout (all threads; after `gru::block_context`).
fn rollout(b: &mut KernelBuilder, c: &Ctx<'_>) {
    let p = c.p;
    let smem = c.smem;
    let (tid, lane, warp, rows, r3) = (c.tid, c.lane, c.warp, c.rows, c.r3);
    b.comment("stage W_hh, W_ih and h0 rows in shared memory");
    // Shared layout (floats).
    let o_wih = b.mul(r3, p.h);
    let o_x = b.mad(r3, p.ip, o_wih);
    let chunk_rows = b.mul(p.chunk, p.group_rows);
    let o_gi = b.mad(chunk_rows, p.ip, o_x);
    let o_h = b.mad(chunk_rows, r3, o_gi);
    let o_gh = b.mad(p.group_rows, p.h, o_h);
    let zero = b.mov(0u32);
    let w_hh_row = |b: &mut KernelBuilder, lr| c.w_hh_row(b, lr);
    copy_rows(
        b,
        tid,
        &RowCopy {
            smem,
            dst: zero,
            dst_stride: None,
            rows: r3,
            k: p.h,
            src: p.w_hh,
            row_elem: &w_hh_row,
        },
    );
    let w_ih_row = |b: &mut KernelBuilder, lr| c.w_ih_row(b, lr);
    copy_rows(
        b,
        tid,
        &RowCopy {
            smem,
            dst: o_wih,
            dst_stride: None,
            rows: r3,
            k: p.ip,
            src: p.w_ih,
            row_elem: &w_ih_row,
        },
    );
    let h0_row = |b: &mut KernelBuilder, r| c.h0_row(b, r);
    copy_rows(
        b,
        tid,
        &RowCopy {
            smem,
            dst: o_h,
            dst_stride: None,
            rows,
            k: p.h,
            src: p.h0,
            row_elem: &h0_row,
        },
    );
    let bias_ih = |b: &mut KernelBuilder, lr: Reg<U32>| c.b_ih_addr(b, lr);
    let ex = Exchange { c, o_h };

    // gi for steps t .. t + C (staged x rows: (step, row) pairs in order).
    let project = |b: &mut KernelBuilder, t: Reg<U32>| {
        b.comment("gi of the next C steps: stage x, then W_ih x + b_ih");
        let todo = b.sub(p.steps, t);
        let steps_now = b.min(todo, p.chunk);
        let xrows = b.mul(steps_now, rows);
        let x_row = |b: &mut KernelBuilder, q| {
            let step = b.div(q, rows);
            let r = b.rem(q, rows);
            let ts = b.add(t, step);
            let xr = b.mad(ts, p.batch_pad, c.row0);
            let xr = b.add(xr, r);
            b.mad(xr, p.ip, c.x_base)
        };
        copy_rows(
            b,
            tid,
            &RowCopy {
                smem,
                dst: o_x,
                dst_stride: None,
                rows: xrows,
                k: p.ip,
                src: p.x,
                row_elem: &x_row,
            },
        );
        b.bar_sync();
        let mv = MatVec {
            smem,
            src: o_x,
            w: o_wih,
            out: o_gi,
            k: p.ip,
            rows: xrows,
            wrows: r3,
            bias: Some(&bias_ih),
        };
        matvec(b, &mv, lane, warp);
    };
    project(b, zero);
    b.bar_sync();

    b.for_range(0u32, p.steps, 1u32, |b, t, _| {
        b.comment("step t, 1: gh = W_hh h");
        let gi_step = b.rem(t, p.chunk);
        let mv = MatVec {
            smem,
            src: o_h,
            w: zero,
            out: o_gh,
            k: p.h,
            rows,
            wrows: r3,
            bias: None,
        };
        matvec(b, &mv, lane, warp);
        b.bar_sync();
        b.comment("step t, 2: cells (gates, h' to hx and out)");
        let cells = b.mul(rows, c.j);
        b.for_range(tid, cells, THREADS, |b, idx, _| {
            let row = b.div(idx, c.j);
            let jj = b.rem(idx, c.j);
            let gh_row = b.mad(row, r3, o_gh);
            let gh = |b: &mut KernelBuilder, lr: Reg<U32>| {
                let i = b.add(gh_row, lr);
                let a = b.shared_index(smem, i);
                b.ld::<F32>(Space::Shared, a)
            };
            let at = CellAt {
                t,
                gi_step,
                row,
                jj,
            };
            cell(b, &ex, &at, o_gi, &gh, NewState::ExchangeOnly);
        });
        b.bar_sync();
        b.comment("step t: gi of the next chunk at a chunk boundary");
        // The next chunk's gi (gi of this step is consumed) fills the wait for the other blocks.
        let t1 = b.add(t, 1u32);
        let more = b.setp(Cmp::Lt, t1, p.steps);
        let next_slot = b.rem(t1, p.chunk);
        let boundary = b.setp(Cmp::Eq, next_slot, 0u32);
        let next = b.and(more, boundary);
        b.if_then(next, |b| project(b, t1));
        b.comment("step t, 3: gather the group's h' (tagged words)");
        // The last step's h is only gathered for layer norm or dropout (whole rows).
        let transformed = b.or(p.ln, p.drop);
        let need = b.or(more, transformed);
        gather(
            b,
            &ex,
            t,
            &Gather {
                in_flight: IN_FLIGHT,
                skip_own: false,
                half_h: None,
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
    });
}

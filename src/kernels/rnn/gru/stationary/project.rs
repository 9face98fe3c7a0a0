//! The weight-stationary GRU path's input projection `gi = W_ih x + b_ih` (see
//! `stationary`'s notes): per step from W_ih in shared memory, split between warps, with x
//! streamed into shared memory, or for every step before step 0 from W_ih in registers.

use super::matvec::{hold_rows, partials, sum, Sources};
use super::{layout, Lane, WIH_STRIDE};
use crate::kernels::rnn::gru::tile::{copy_rows, RowCopy};
use crate::kernels::rnn::gru::{reciprocal, Ctx, THREADS};
use crate::ptx::*;

/// `gi[s][row][lr] = b_ih[lr] + sum_k W_ih[lr][k] x[s][row][k]` of step s (x buffer `s % 2` to
/// gi buffer `s % 2`), Ip = 128; no barrier inside. Lane l of warp w: local gate row
/// `r = 8 w + l % 8` (rows past 3J repeat the last and are not stored), k slice `kq = l / 8`
/// (k = 4 kq + 16 m + i, m < 8: the slices' float4s interleave, so a warp's 4 x addresses sit
/// in different banks). Per 4 batch rows: 4 accumulators, one float4 of W_ih (a quarter-warp
/// reads 8 rows, conflict-free with [`WIH_STRIDE`]) per 4 float4 of x (one address per
/// quarter-warp: broadcasts), then a transposing butterfly over the slices (xor 16 keeps 2
/// rows, xor 8 keeps 1; 3 shuffles) leaves lane l with row `rb + kq`. 8 accumulators (fewer
/// W_ih loads) spill next to the 64 held weights. Fixed order, so the result is deterministic.
pub(super) fn project(b: &mut KernelBuilder, c: &Ctx<'_>, s: Reg<U32>) {
    // Chunks of 8 gate rows: warp w takes chunks w, w + 8, ... below ceil(3J / 8).
    let r7 = b.add(c.r3, 7u32);
    let chunks = b.shr(r7, 3u32);
    b.for_range(c.warp, chunks, THREADS / 32, |b, chunk, _| {
        project_rows(b, c, s, chunk)
    });
}

/// [`project`]'s work for gate rows `8 chunk ..` (one warp).
fn project_rows(b: &mut KernelBuilder, c: &Ctx<'_>, s: Reg<U32>, chunk: Reg<U32>) {
    let (p, smem) = (c.p, c.smem);
    let lay = layout(b, c);
    let kq = b.shr(c.lane, 3u32);
    let rr = b.and(c.lane, 7u32);
    let r = b.mad(chunk, 8u32, rr);
    let lastr = b.sub(c.r3, 1u32);
    let rc = b.min(r, lastr);
    let keep_r = b.setp(Cmp::Lt, r, c.r3);
    let sb = b.and(s, 1u32);
    let kq4 = b.shl(kq, 2u32);
    let xb = b.mad(sb, lay.xbuf, lay.x);
    let xb = b.add(xb, kq4);
    let wi = b.mad(rc, WIH_STRIDE, lay.w);
    let wi = b.add(wi, kq4);
    let wa: Addr = b.shared_index(smem, wi).into();
    let girow = b.mul(sb, c.rows);
    let b1 = b.and(kq, 2u32);
    let b1 = b.setp(Cmp::Ne, b1, 0u32);
    let b0 = b.and(kq, 1u32);
    let b0 = b.setp(Cmp::Ne, b0, 0u32);
    // Groups of 4 batch rows (rows is a multiple of 4): accumulator i holds row rb + i, at one
    // address register plus constant offsets.
    b.for_range(0u32, c.rows, 4u32, |b, rb, _| {
        let acc: Vec<Reg<F32>> = (0..4).map(|_| b.mov(0.0f32)).collect();
        let xi = b.mad(rb, p.ip, xb);
        let xa: Addr = b.shared_index(smem, xi).into();
        for m in 0..8i64 {
            let w = b.ld_v4::<F32>(Space::Shared, wa.off(64 * m));
            for (i, &ai) in acc.iter().enumerate() {
                let xv = b.ld_v4::<F32>(Space::Shared, xa.off(64 * m + 512 * i as i64));
                for e in 0..4 {
                    let v = b.fma(xv[e], w[e], ai);
                    b.mov_to(ai, v);
                }
            }
        }
        let ba = c.b_ih_addr(b, rc);
        let bias = b.ld::<F32>(Space::GlobalNc, ba);
        // Slices kq and kq ^ 2 swap halves (xor 16), then kq and kq ^ 1 (xor 8): lane ends
        // with row rb + kq.
        let v: Vec<Reg<F32>> = (0..2)
            .map(|i| {
                let keep = b.selp(acc[2 + i], acc[i], b1);
                let send = b.selp(acc[i], acc[2 + i], b1);
                let recv = b.shfl(Shfl::Xor, send, 16u32);
                b.add(keep, recv)
            })
            .collect();
        let keep = b.selp(v[1], v[0], b0);
        let send = b.selp(v[0], v[1], b0);
        let recv = b.shfl(Shfl::Xor, send, 8u32);
        let sum = b.add(keep, recv);
        let g = b.add(sum, bias);
        let row = b.add(rb, kq);
        let gi = b.add(girow, row);
        let gi = b.mad(gi, c.r3, r);
        let gi = b.add(gi, lay.gi);
        let ga = b.shared_index(smem, gi);
        b.guarded(keep_r, false, |b| b.st(Space::Shared, ga, g));
    });
}

/// Element index of x of step `ts`, the block's first row (the rows are contiguous: Ip = 128).
fn x_elem(b: &mut KernelBuilder, c: &Ctx<'_>, ts: Reg<U32>) -> Reg<U32> {
    let p = c.p;
    let g0 = b.mad(ts, p.batch_pad, c.row0);
    b.mad(g0, p.ip, c.x_base)
}

/// `prefetch.global.L1` of x of step `ts` (the block's rows, a 128-byte line per thread) when
/// `on`, so that [`copy_x`] finds it in L1 later in the step. (Loading it into registers early
/// instead makes the compiler spill them, and the spill store waits for the load.)
pub(super) fn prefetch_x(b: &mut KernelBuilder, c: &Ctx<'_>, ts: Reg<U32>, on: Reg<Pred>) {
    let lines = b.shl(c.rows, 2u32);
    let mine = b.setp(Cmp::Lt, c.tid, lines);
    let mine = b.and(mine, on);
    b.if_then(mine, |b| {
        let g0 = x_elem(b, c, ts);
        let e = b.mad(c.tid, 32u32, g0);
        let a = b.index_addr(c.p.x, e, 4);
        b.prefetch_l1(a);
    });
}

/// x of step `ts` for the block's rows into x buffer `ts % 2` when `on` (a float4 per thread per
/// round).
pub(super) fn copy_x(b: &mut KernelBuilder, c: &Ctx<'_>, ts: Reg<U32>, on: Reg<Pred>) {
    let p = c.p;
    b.if_then(on, |b| {
        let lay = layout(b, c);
        let n4 = b.shl(c.rows, 5u32);
        let g0 = x_elem(b, c, ts);
        let sb = b.and(ts, 1u32);
        let s0 = b.mad(sb, lay.xbuf, lay.x);
        b.for_range(c.tid, n4, THREADS, |b, idx, _| {
            let i4 = b.shl(idx, 2u32);
            let g = b.add(g0, i4);
            let ga = b.index_addr(p.x, g, 4);
            let si = b.add(s0, i4);
            let sa = b.shared_index(c.smem, si);
            let v = b.ld_v4::<F32>(Space::GlobalNc, ga);
            b.st_v4(Space::Shared, sa, v);
        });
    });
}

/// gi of step `s` split between the warps with cells (the first `cw = cell_warps`) and the
/// others: the `8 - cw` spare warps start at once (during the cells) and take chunks of 8 gate
/// rows `0 .. K`, `K = min(chunks, 2 (8 - cw))`, in turn; the cell warps take the chunks from K on
/// after their cells. Everything is warp-uniform (the addressing stays in uniform registers).
pub(super) fn project_split(b: &mut KernelBuilder, c: &Ctx<'_>, s: Reg<U32>, cell_warps: Reg<U32>) {
    let r7 = b.add(c.r3, 7u32);
    let chunks = b.shr(r7, 3u32);
    let all = b.mov(THREADS / 32);
    let spare = b.sub(all, cell_warps);
    let k = b.shl(spare, 1u32);
    let k = b.min(k, chunks);
    let is_spare = b.setp(Cmp::Ge, c.warp, cell_warps);
    let first_spare = b.sub(c.warp, cell_warps);
    let first_cell = b.add(k, c.warp);
    let first = b.selp(first_spare, first_cell, is_spare);
    let end = b.selp(k, chunks, is_spare);
    let stride = b.selp(spare, cell_warps, is_spare);
    b.for_range(first, end, stride, |b, chunk, _| {
        project_rows(b, c, s, chunk)
    });
}

/// x of steps `0 .. min(steps, count)` into x buffers 0, 1, ... (rows (step, row) in order; no
/// barrier inside).
pub(super) fn stage_x(b: &mut KernelBuilder, c: &Ctx<'_>, count: impl Operand<U32>) {
    let p = c.p;
    let lay = layout(b, c);
    let first = b.min(p.steps, count);
    let xrows = b.mul(first, c.rows);
    let x_row = |b: &mut KernelBuilder, q| {
        let step = b.div(q, c.rows);
        let r = b.rem(q, c.rows);
        let xr = b.mad(step, p.batch_pad, c.row0);
        let xr = b.add(xr, r);
        b.mad(xr, p.ip, c.x_base)
    };
    let copy = RowCopy {
        smem: c.smem,
        dst: lay.x,
        dst_stride: None,
        rows: xrows,
        k: p.ip,
        src: p.x,
        row_elem: &x_row,
    };
    copy_rows(b, c.tid, &copy);
}

/// Precompute mode (`chunk != 0`): gi of every step before step 0, with W_ih held in registers
/// for it (KS = 8: 32 per lane, the same lane layout as W_hh's) and x of every step staged in
/// shared memory. Steps go in phases of two (2 Bg source rows, so half as many barriers): per
/// phase, [`partials`] of `W_ih x` into the scratch (sized for 2 Bg rows in this mode);
/// bar.sync; [`precompute_sums`]; bar.sync. The last phase stops after its partials' barrier
/// (`W_ih`'s registers are free from there) and returns its index: the caller issues W_hh's
/// loads, then runs its sums and a barrier.
pub(super) fn precompute(b: &mut KernelBuilder, c: &Ctx<'_>, lane: &Lane) -> Reg<U32> {
    precompute_with(b, c, lane, 4, &|b| stage_x(b, c, c.p.steps))
}

/// [`precompute`] with W_ih's rows `g + 16 q`, q < `qs` (`matvec::hold_rows`), and `stage(b)`
/// staging x of every step (and whatever else the caller wants in shared memory before the
/// block barrier that follows it) after W_ih's loads are issued.
pub(super) fn precompute_with(
    b: &mut KernelBuilder,
    c: &Ctx<'_>,
    lane: &Lane,
    qs: u32,
    stage: &dyn Fn(&mut KernelBuilder),
) -> Reg<U32> {
    let (p, smem) = (c.p, c.smem);
    b.comment("precompute mode: load W_ih into registers, stage x of every step");
    let wih = hold_rows(b, 8, qs, lane, p.w_ih, c.r3, &|b, lr| c.w_ih_row(b, lr));
    stage(b);
    b.bar_sync();
    let s1 = b.add(p.steps, 1u32);
    let phases = b.shr(s1, 1u32);
    let last = b.sub(phases, 1u32);
    b.comment("gi of every step: two steps per phase, partials of W_ih x then slot sums");
    b.for_range(0u32, phases, 1u32, |b, ph, _| {
        let lay = layout(b, c);
        let s0 = b.shl(ph, 1u32);
        let src = b.mad(s0, lay.xbuf, lay.x);
        let rows = phase_rows(b, c, ph);
        let from = Sources {
            src,
            k: p.ip,
            rows,
            scratch: lay.scratch,
        };
        partials(b, smem, &wih, lane, &from);
        b.bar_sync();
        let more = b.setp(Cmp::Lt, ph, last);
        b.if_then(more, |b| {
            precompute_sums(b, c, ph);
            b.bar_sync();
        });
    });
    last
}

/// Source rows of precompute phase `ph`: Bg per step of steps `2 ph`, `2 ph + 1` (< steps).
fn phase_rows(b: &mut KernelBuilder, c: &Ctx<'_>, ph: Reg<U32>) -> Reg<U32> {
    let s0 = b.shl(ph, 1u32);
    let left = b.sub(c.p.steps, s0);
    let n = b.min(left, 2u32);
    b.mul(n, c.rows)
}

/// The sums of precompute phase `ph`: gi row `2 ph Bg + q`, gate row lr = its 8 scratch slots in
/// order plus b_ih (all threads; no barrier inside).
pub(super) fn precompute_sums(b: &mut KernelBuilder, c: &Ctx<'_>, ph: Reg<U32>) {
    let smem = c.smem;
    let lay = layout(b, c);
    let rows = phase_rows(b, c, ph);
    let outs = b.mul(rows, c.r3);
    let q0 = b.shl(ph, 1u32);
    let q0 = b.mul(q0, c.rows);
    // idx / 3J by `gru::reciprocal`: idx 3J < 2^20 (idx < 2 x 32 x 64).
    let magic = reciprocal(b, c.r3, 20);
    b.for_range(c.tid, outs, THREADS, |b, idx, _| {
        let q = b.mul(idx, magic);
        let q = b.shr(q, 20u32);
        let lr = b.mul(q, c.r3);
        let lr = b.sub(idx, lr);
        let v = sum(b, smem, lay.scratch, rows, q, lr);
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

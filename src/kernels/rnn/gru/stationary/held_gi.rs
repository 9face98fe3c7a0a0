//! The held kernels' shared layout and input projection (`held`): the regions, the partials of
//! `W_ih x` (all warps, or the upper ones: `wide`) and the gi sums.

use super::matvec::{partials, sum, Held, Sources};
use super::wide::{self, Upper};
use super::{scratch_floats, staged, Lane};
use crate::kernels::rnn::gru::{reciprocal, Ctx};
use crate::ptx::*;

/// Floats reserved for b_ih of the block's gate rows (3J <= 64); the launch's epoch follows.
pub(super) const BIAS_FLOATS: u32 = 64;

/// Shared floats for `bg` rows and x of `c` steps (`c` >= the launch's steps) with the weights
/// of lane rows q < `qs` staged (`staged`).
pub fn smem_floats_staged(bg: u32, ip: u32, h: u32, c: u32, qs: u32) -> u32 {
    smem_floats(bg, ip, h, c) + staged::floats(qs)
}

/// Shared floats for `bg` rows and x of `c` steps (`c` >= the launch's steps).
pub fn smem_floats(bg: u32, ip: u32, h: u32, c: u32) -> u32 {
    bg * h + c.max(1) * bg * ip + 3 * scratch_floats(bg) + 2 * bg * GI_STRIDE + BIAS_FLOATS + 4
}

/// Floats reserved per row of a gi buffer (rows of 3J <= 64 floats).
const GI_STRIDE: u32 = 64;

/// Offsets (floats) of the shared regions.
pub(super) struct HeldLayout {
    pub x: Reg<U32>,
    /// Floats of one step of x (`rows x Ip`).
    pub xbuf: Reg<U32>,
    /// The W_hh mat-vec's scratch.
    pub sh: Reg<U32>,
    /// The W_ih scratch of parity 0 (parity 1 follows it).
    pub sx: Reg<U32>,
    /// Floats of one scratch (`8 rows x 72`).
    pub sbuf: Reg<U32>,
    /// gi of parity 0 (`rows x 3J`; parity 1 at `gi + rows 3J`).
    pub gi: Reg<U32>,
    pub bias: Reg<U32>,
}

/// The layout (recomputed where used: the step loop keeps no registers for it).
pub(super) fn layout(b: &mut KernelBuilder, c: &Ctx<'_>) -> HeldLayout {
    let p = c.p;
    let x = b.mul(p.group_rows, p.h);
    let nb = b.max(p.chunk, 1u32);
    let nbg = b.mul(nb, p.group_rows);
    let sh = b.mad(nbg, p.ip, x);
    let sbuf = b.mul(p.group_rows, scratch_floats(1));
    let sx = b.add(sh, sbuf);
    let gi = b.mad(sbuf, 2u32, sx);
    let gis = b.mul(p.group_rows, 2 * GI_STRIDE);
    let bias = b.add(gi, gis);
    let xbuf = b.mul(c.rows, p.ip);
    HeldLayout {
        x,
        xbuf,
        sh,
        sx,
        sbuf,
        gi,
        bias,
    }
}

/// Partials of `W_ih x_s` into the W_ih scratch of parity `s % 2` (no barrier inside).
pub(super) fn x_partials(b: &mut KernelBuilder, c: &Ctx<'_>, wih: &Held, lane: &Lane, s: Reg<U32>) {
    let lay = layout(b, c);
    let src = b.mad(s, lay.xbuf, lay.x);
    let par = b.and(s, 1u32);
    let scratch = b.mad(par, lay.sbuf, lay.sx);
    let from = Sources {
        src,
        k: c.p.ip,
        rows: c.rows,
        scratch,
    };
    partials(b, c.smem, wih, lane, &from);
}

/// [`x_partials`] by the upper warps with their W_ih (`wide`; the same scratch values).
pub(super) fn x_partials_wide(
    b: &mut KernelBuilder,
    c: &Ctx<'_>,
    wih: &Held,
    up: &Upper,
    s: Reg<U32>,
) {
    let lay = layout(b, c);
    let src = b.mad(s, lay.xbuf, lay.x);
    let par = b.and(s, 1u32);
    let scratch = b.mad(par, lay.sbuf, lay.sx);
    wide::partials(b, c.smem, wih, up, src, c.rows, scratch);
}

/// gi of step `s` into the gi buffer of parity `s % 2`: row q, gate row lr = the 8 slots of the
/// W_ih scratch of parity `s % 2` in order plus b_ih (`precompute_sums`' sums; no barrier
/// inside). Threads take the values from the last thread down, so that the threads without
/// cells (the last ones) take them first. `threads`: the first `threads` of the block take part
/// (`tid`: the calling thread's index among them).
pub(super) fn gi_sums(
    b: &mut KernelBuilder,
    c: &Ctx<'_>,
    s: Reg<U32>,
    threads: u32,
    tid: Reg<U32>,
) {
    let smem = c.smem;
    let lay = layout(b, c);
    let par = b.and(s, 1u32);
    let sx = b.mad(par, lay.sbuf, lay.sx);
    let outs = b.mul(c.rows, c.r3);
    let gbuf = b.mul(outs, par);
    let gbuf = b.add(gbuf, lay.gi);
    let first = b.sub(threads - 1, tid);
    // idx / 3J by `gru::reciprocal`: idx 3J < 2^20 (idx < 32 x 64).
    let magic = reciprocal(b, c.r3, 20);
    b.for_range(first, outs, threads, |b, idx, _| {
        let q = b.mul(idx, magic);
        let q = b.shr(q, 20u32);
        let lr = b.mul(q, c.r3);
        let lr = b.sub(idx, lr);
        let v = sum(b, smem, sx, c.rows, q, lr);
        let bi = b.add(lay.bias, lr);
        let ba = b.shared_index(smem, bi);
        let bias = b.ld::<F32>(Space::Shared, ba);
        let g = b.add(v, bias);
        let gi = b.add(gbuf, idx);
        let ga = b.shared_index(smem, gi);
        b.st(Space::Shared, ga, g);
    });
}

/// `cp.async` of x of step `s` (the block's rows, Ip = 128: 32 chunks of 16 bytes a row) into
/// its slot of the x region, by `threads` threads (`tid`: the calling thread's index among
/// them). Not committed or awaited.
pub(super) fn copy_x_step(
    b: &mut KernelBuilder,
    c: &Ctx<'_>,
    s: Reg<U32>,
    threads: u32,
    tid: Reg<U32>,
) {
    let p = c.p;
    let lay = layout(b, c);
    let dst = b.mad(s, lay.xbuf, lay.x);
    let n = b.shl(c.rows, 5u32);
    let xr0 = b.mad(s, p.batch_pad, c.row0);
    b.for_range(tid, n, threads, |b, i, _| {
        let r = b.shr(i, 5u32);
        let c4 = b.and(i, 31u32);
        let c4 = b.shl(c4, 2u32);
        let xr = b.add(xr0, r);
        let e = b.mad(xr, p.ip, c.x_base);
        let e = b.add(e, c4);
        let src = b.index_addr(p.x, e, 4);
        let si = b.mad(r, p.ip, dst);
        let si = b.add(si, c4);
        let sa = b.shared_index(c.smem, si);
        b.cp_async_16(sa, src);
    });
}

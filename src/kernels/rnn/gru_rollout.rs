//! `rnn_gru_rollout`: T steps of one GRU or of an ensemble of E GRUs as one persistent
//! cooperative kernel. The maths (PyTorch's convention) and the f64 reference are in
//! `crate::rnn::reference`; the f32 transcendentals are `mathf`'s.
//!
//! Sizes: batch Bp (multiple of 4, host-padded), input Ip and hidden H (multiples of 128; the host
//! pads the input with zero columns), J hidden units per block (even, divides H). Arrays
//! (row-major f32): `x` `T x Bp x Ip` (member e reads `x + e * x_member_stride`), `h0`
//! `E x Bp x H`, `w_ih` `E x 3H x Ip`, `w_hh` `E x 3H x H`, `b_ih`/`b_hh` `E x 3H`,
//! `ln_gain`/`ln_bias` `E x H`, `hraw` (scratch) and `out` `E x T x Bp x H`; `bar` holds
//! `arrive, exit, status, -` per member.
//!
//! Launch: cooperative, `E * H / J` blocks of [`THREADS`] threads, dynamic shared memory of
//! [`smem_floats`] floats. Block c is member `c / (H/J)`, units `j0 = (c % (H/J)) J .. + J`. It
//! keeps its 3J rows of W_hh and W_ih in shared memory for the whole rollout (local row
//! `3 jj + g` is gate g of unit j0 + jj), and the current state h (all Bp x H values) too.
//! Per step t:
//! 1. `gh = W_hh h` for its rows (`gru_tile::matvec`); barrier (block);
//! 2. cell: thread per (row, unit): r, z from `gi + gh + b_h`, `n = tanh(gi_n + r (gh_n + b_hn))`,
//!    `h' = n + z (h - n)` (one fma); h' goes to `hraw[e][t]`;
//! 3. grid barrier, split: after arriving, the block stages `x_{t+1}` and computes
//!    `gi = W_ih x_{t+1} + b_ih` (independent of h) while the other blocks arrive;
//! 4. every block copies all of `hraw[e][t]` into its shared h (four float4 loads per thread in
//!    flight at once), then, one warp per batch row (float4 per lane), applies layer norm (two
//!    warp sums: mean, then variance about the mean) and dropout (hash of (e, t, row, unit) vs a
//!    threshold, kept values times 1/(1-p)) in place; the units it owns also go to `out[e][t]`.
//! All blocks compute identical h (same data, same operation order), so no second barrier is
//! needed. Member barriers are independent: members do not wait for each other.

use super::barrier::GridBarrier;
use super::gru_tile::{matvec, MatVec};
use super::mathf::{hash32, sigmoid, tanh};
use crate::ptx::*;

/// Threads per block.
pub const THREADS: u32 = 256;

/// Dynamic shared memory of one block, in floats: h (`Bp x max(H, Ip)`), W_hh and W_ih rows
/// (`3J x (H + Ip)`), gi and gh (`2 x Bp x 3J`).
pub fn smem_floats(bp: u32, ip: u32, h: u32, j: u32) -> u32 {
    bp * h.max(ip) + 3 * j * (h + ip) + 2 * bp * 3 * j
}

struct P {
    x: Reg<U64>,
    xms: Reg<U32>,
    h0: Reg<U64>,
    w_ih: Reg<U64>,
    w_hh: Reg<U64>,
    b_ih: Reg<U64>,
    b_hh: Reg<U64>,
    gain: Reg<U64>,
    beta: Reg<U64>,
    hraw: Reg<U64>,
    out: Reg<U64>,
    steps: Reg<U32>,
    batch: Reg<U32>,
    bp: Reg<U32>,
    ip: Reg<U32>,
    h: Reg<U32>,
    j: Reg<U32>,
    ln: Reg<Pred>,
    eps: Reg<F32>,
    drop: Reg<Pred>,
    thr: Reg<U32>,
    scale: Reg<F32>,
    slo: Reg<U32>,
    shi: Reg<U32>,
}

fn params(b: &mut KernelBuilder) -> (P, Reg<U64>) {
    let names = ["x", "h0", "w_ih", "w_hh", "b_ih", "b_hh", "ln_gain", "ln_bias", "hraw", "out", "bar"];
    let ptrs: Vec<Param<U64>> = names.iter().map(|n| b.param::<U64>(n)).collect();
    let u32s = ["x_member_stride", "steps", "batch", "batch_pad", "input_pad", "hidden", "units", "layer_norm", "dropout", "drop_threshold", "seed_lo", "seed_hi"];
    let us: Vec<Param<U32>> = u32s.iter().map(|n| b.param::<U32>(n)).collect();
    let peps = b.param::<F32>("ln_eps");
    let pscale = b.param::<F32>("drop_scale");
    let g: Vec<Reg<U64>> = ptrs.iter().map(|p| b.global_ptr(p)).collect();
    let u: Vec<Reg<U32>> = us.iter().map(|p| b.ld_param(p)).collect();
    let ln = b.setp(Cmp::Ne, u[7], 0u32);
    let drop = b.setp(Cmp::Ne, u[8], 0u32);
    let eps = b.ld_param(&peps);
    let scale = b.ld_param(&pscale);
    let p = P {
        x: g[0], h0: g[1], w_ih: g[2], w_hh: g[3], b_ih: g[4], b_hh: g[5], gain: g[6], beta: g[7], hraw: g[8], out: g[9],
        xms: u[0], steps: u[1], batch: u[2], bp: u[3], ip: u[4], h: u[5], j: u[6], ln, eps, drop, thr: u[9], scale, slo: u[10], shi: u[11],
    };
    (p, g[10])
}

/// float4 copies each thread issues before it stores any (loads in flight together; 8 would
/// need ~180 registers on sm_90 and halve the blocks per SM).
const UNROLL: u32 = 4;

/// Copies `rows` rows of `k` floats (k % 4 == 0) from global `src` (row r starts at element
/// `row_elem(r)`) to shared `dst` (offset in floats, row stride k). Each thread issues up to
/// [`UNROLL`] float4 loads, then their stores, so one L2 round trip covers each group.
#[allow(clippy::too_many_arguments)]
fn copy_rows(b: &mut KernelBuilder, smem: &SharedArray<F32>, dst: Reg<U32>, rows: Reg<U32>, k: Reg<U32>, tid: Reg<U32>, src: Reg<U64>, row_elem: &dyn Fn(&mut KernelBuilder, Reg<U32>) -> Reg<U32>, nc: bool) {
    let k4 = b.shr(k, 2u32);
    let total = b.mul(rows, k4);
    b.for_range(tid, total, THREADS * UNROLL, |b, base, _| {
        let mut pending = Vec::with_capacity(UNROLL as usize);
        for u in 0..UNROLL {
            let idx = b.add(base, THREADS * u);
            let live = b.setp(Cmp::Lt, idx, total);
            let r = b.div(idx, k4);
            let c = b.rem(idx, k4);
            let c = b.shl(c, 2u32);
            let se = b.mad(r, k, c);
            let se = b.add(se, dst);
            let sa = b.shared_index(smem, se);
            let start = row_elem(b, r);
            let e = b.add(start, c);
            let ga = b.index_addr(src, e, 4);
            let mut v = None;
            b.guarded(live, false, |b| v = Some(b.ld_v4::<F32>(if nc { Space::GlobalNc } else { Space::Global }, ga)));
            pending.push((v.expect("the closure always runs"), live, sa));
        }
        for (v, live, sa) in pending {
            b.guarded(live, false, |b| b.st_v4(Space::Shared, sa, v));
        }
    });
}

/// Builds the module.
pub fn build(target: Target) -> Module {
    let mut b = KernelBuilder::new("rnn_gru_rollout");
    b.reqntid(THREADS, 1, 1);
    let (p, bar) = params(&mut b);
    let smem = b.dynamic_shared::<F32>("smem");
    let tid = b.special(Special::TidX);
    let lane = b.and(tid, 31u32);
    let warp = b.shr(tid, 5u32);
    let cta = b.special(Special::CtaidX);
    let bpm = b.div(p.h, p.j);
    let e = b.div(cta, bpm);
    let slice = b.rem(cta, bpm);
    let j0 = b.mul(slice, p.j);
    let r = b.mul(p.j, 3u32);
    let h3 = b.mul(p.h, 3u32);
    // Shared layout (floats).
    let hmax = b.max(p.h, p.ip);
    let o_wh = b.mul(p.bp, hmax);
    let o_wi = b.mad(r, p.h, o_wh);
    let o_gi = b.mad(r, p.ip, o_wi);
    let o_gh = b.mad(p.bp, r, o_gi);
    let zero = b.mov(0u32);
    // Member offsets (elements).
    let e_h3 = b.mul(e, h3);
    let e_wih = b.mul(e_h3, p.ip);
    let e_whh = b.mul(e_h3, p.h);
    let e_x = b.mul(e, p.xms);
    let tbh = b.mul(p.steps, p.bp);
    let tbh = b.mul(tbh, p.h);
    let e_seq = b.mul(e, tbh);
    let bh = b.mul(p.bp, p.h);
    let bar_e = b.mul_wide(e, 16u32);
    let arrive = b.add(bar, bar_e);
    let exit = b.add(arrive, 4u64);
    let status = b.add(arrive, 8u64);
    let gb = GridBarrier::new(&mut b, arrive, exit, status, bpm);
    // Local row lr = 3 jj + g  <->  global gate row g H + j0 + jj.
    let grow = |b: &mut KernelBuilder, lr: Reg<U32>| {
        let jj = b.div(lr, 3u32);
        let g = b.rem(lr, 3u32);
        let t = b.mad(g, p.h, j0);
        b.add(t, jj)
    };
    copy_rows(&mut b, &smem, o_wh, r, p.h, tid, p.w_hh, &|b, lr| {
        let gr = grow(b, lr);
        let t = b.mul(gr, p.h);
        b.add(t, e_whh)
    }, true);
    copy_rows(&mut b, &smem, o_wi, r, p.ip, tid, p.w_ih, &|b, lr| {
        let gr = grow(b, lr);
        let t = b.mul(gr, p.ip);
        b.add(t, e_wih)
    }, true);
    let bias_ih = |b: &mut KernelBuilder, lr: Reg<U32>| {
        let gr = grow(b, lr);
        let i = b.add(gr, e_h3);
        b.index_addr(p.b_ih, i, 4)
    };
    // gi for step `t` from x_t (staged into the h area with row stride Ip).
    let input_projection = |b: &mut KernelBuilder, t: Reg<U32>| {
        copy_rows(b, &smem, zero, p.bp, p.ip, tid, p.x, &|b, row| {
            let tr = b.mad(t, p.bp, row);
            let base = b.mul(tr, p.ip);
            b.add(base, e_x)
        }, true);
        b.bar_sync();
        let mv = MatVec { smem: &smem, src: zero, w: o_wi, out: o_gi, k: p.ip, rows: p.bp, wrows: r, bias: Some(&bias_ih) };
        matvec(b, &mv, lane, warp);
    };
    input_projection(&mut b, zero);
    b.bar_sync();
    copy_rows(&mut b, &smem, zero, p.bp, p.h, tid, p.h0, &|b, row| {
        let t = b.mul(e, bh);
        b.mad(row, p.h, t)
    }, true);
    b.bar_sync();

    b.for_range(0u32, p.steps, 1u32, |b, t, _| {
        let mv = MatVec { smem: &smem, src: zero, w: o_wh, out: o_gh, k: p.h, rows: p.bp, wrows: r, bias: None };
        matvec(b, &mv, lane, warp);
        b.bar_sync();
        // Cell.
        let cells = b.mul(p.bp, p.j);
        let step_base = b.mad(t, bh, e_seq);
        b.for_range(tid, cells, THREADS, |b, idx, _| {
            let row = b.div(idx, p.j);
            let jj = b.rem(idx, p.j);
            let lr0 = b.mul(jj, 3u32);
            let gbase = b.mad(row, r, lr0);
            let gate = |b: &mut KernelBuilder, off: Reg<U32>, g: u32| {
                let i = b.add(gbase, g);
                let i = b.add(i, off);
                let a = b.shared_index(&smem, i);
                b.ld::<F32>(Space::Shared, a)
            };
            let (gir, giz, gin) = (gate(b, o_gi, 0), gate(b, o_gi, 1), gate(b, o_gi, 2));
            let (ghr, ghz, ghn) = (gate(b, o_gh, 0), gate(b, o_gh, 1), gate(b, o_gh, 2));
            let unit = b.add(j0, jj);
            let bh_of = |b: &mut KernelBuilder, g: u32| {
                let i = b.mad(p.h, g, unit);
                let i = b.add(i, e_h3);
                let a = b.index_addr(p.b_hh, i, 4);
                b.ld::<F32>(Space::GlobalNc, a)
            };
            let (bhr, bhz, bhn) = (bh_of(b, 0), bh_of(b, 1), bh_of(b, 2));
            let ar = b.add(gir, ghr);
            let ar = b.add(ar, bhr);
            let rg = sigmoid(b, ar);
            let az = b.add(giz, ghz);
            let az = b.add(az, bhz);
            let zg = sigmoid(b, az);
            let u = b.add(ghn, bhn);
            let an = b.fma(rg, u, gin);
            let n = tanh(b, an);
            let hi = b.mad(row, p.h, unit);
            let ha = b.shared_index(&smem, hi);
            let hprev = b.ld::<F32>(Space::Shared, ha);
            let d = b.sub(hprev, n);
            let hn = b.fma(zg, d, n);
            let oi = b.add(step_base, hi);
            let oa = b.index_addr(p.hraw, oi, 4);
            b.st(Space::Global, oa, hn);
        });
        gb.arrive(b);
        let t1 = b.add(t, 1u32);
        let more = b.setp(Cmp::Lt, t1, p.steps);
        b.if_then(more, |b| input_projection(b, t1));
        gb.wait(b);
        // hraw[e][t] (written by every block of the member) -> shared h, then the transform.
        copy_rows(b, &smem, zero, p.bp, p.h, tid, p.hraw, &|b, row| b.mad(row, p.h, step_base), false);
        b.bar_sync();
        load_state(b, &p, &smem, t, step_base, j0, e, lane, warp);
        b.bar_sync();
    });
    gb.finish(&mut b);
    Module::single(target, b.finish())
}

/// Step 4 of the module notes, after hraw[e][t] was copied into the shared h: layer norm and
/// dropout in place, and the block's own units to `out`.
#[allow(clippy::too_many_arguments)]
fn load_state(b: &mut KernelBuilder, p: &P, smem: &SharedArray<F32>, t: Reg<U32>, step_base: Reg<U32>, j0: Reg<U32>, e: Reg<U32>, lane: Reg<U32>, warp: Reg<U32>) {
    let chunks = b.shr(p.h, 7u32);
    let lane4 = b.shl(lane, 2u32);
    let hf = b.cvt::<F32, U32>(p.h);
    let j1 = b.add(j0, p.j);
    b.for_range(warp, p.bp, 8u32, |b, row, _| {
        let rbase = b.mad(row, p.h, lane4);
        // Pass 1: sum for the mean (only needed with layer norm, cheap anyway).
        let sum = b.mov(0.0f32);
        b.for_range(0u32, chunks, 1u32, |b, c, _| {
            let k = b.mad(c, 128u32, rbase);
            let sa = b.shared_index(smem, k);
            let v = b.ld_v4::<F32>(Space::Shared, sa);
            for x in v {
                let s = b.add(sum, x);
                b.mov_to(sum, s);
            }
        });
        let mean = b.mov(0.0f32);
        let rstd = b.mov(1.0f32);
        b.if_then(p.ln, |b| {
            let total = b.warp_sum(sum);
            let m = b.div(total, hf);
            b.mov_to(mean, m);
            let sq = b.mov(0.0f32);
            b.for_range(0u32, chunks, 1u32, |b, c, _| {
                let k = b.mad(c, 128u32, rbase);
                let sa = b.shared_index(smem, k);
                let v = b.ld_v4::<F32>(Space::Shared, sa);
                for x in v {
                    let d = b.sub(x, m);
                    let s = b.fma(d, d, sq);
                    b.mov_to(sq, s);
                }
            });
            let var = b.warp_sum(sq);
            let var = b.div(var, hf);
            let ve = b.add(var, p.eps);
            let sd = b.sqrt(ve);
            let one = b.mov(1.0f32);
            let rs = b.div(one, sd);
            b.mov_to(rstd, rs);
        });
        b.for_range(0u32, chunks, 1u32, |b, c, _| {
            let k = b.mad(c, 128u32, rbase);
            let sa = b.shared_index(smem, k);
            let v = b.ld_v4::<F32>(Space::Shared, sa);
            let unit0 = b.mad(c, 128u32, lane4);
            let mut outv = [v[0]; 4];
            for (i, &x) in v.iter().enumerate() {
                let unit = b.add(unit0, i as u32);
                let y = b.mov(x);
                b.if_then(p.ln, |b| {
                    let d = b.sub(x, mean);
                    let nrm = b.mul(d, rstd);
                    let gi = b.mad(e, p.h, unit);
                    let ga = b.index_addr(p.gain, gi, 4);
                    let g = b.ld::<F32>(Space::GlobalNc, ga);
                    let ba = b.index_addr(p.beta, gi, 4);
                    let bt = b.ld::<F32>(Space::GlobalNc, ba);
                    let v = b.fma(nrm, g, bt);
                    b.mov_to(y, v);
                });
                b.if_then(p.drop, |b| {
                    let et = b.mad(e, p.steps, t);
                    let etb = b.mad(et, p.batch, row);
                    let ctr = b.mad(etb, p.h, unit);
                    let hsh = hash32(b, ctr, p.slo, p.shi);
                    let keep = b.setp(Cmp::Ge, hsh, p.thr);
                    let scaled = b.mul(y, p.scale);
                    let v = b.selp(scaled, 0.0f32, keep);
                    b.mov_to(y, v);
                });
                let lo = b.setp(Cmp::Ge, unit, j0);
                let hi = b.setp(Cmp::Lt, unit, j1);
                let mine = b.and(lo, hi);
                b.if_then(mine, |b| {
                    let oi = b.add(step_base, k);
                    let oi = b.add(oi, i as u32);
                    let oa = b.index_addr(p.out, oi, 4);
                    b.st(Space::Global, oa, y);
                });
                outv[i] = y;
            }
            b.st_v4(Space::Shared, sa, outv);
        });
    });
}

//! `rnn_gru_rollout`: T steps of one GRU or of an ensemble of E GRUs as one persistent
//! cooperative kernel. The maths (PyTorch's convention) and the f64 reference are in
//! `crate::rnn::reference`; the f32 transcendentals are `mathf`'s.
//!
//! Sizes: batch Bp (multiple of 4, host-padded), input Ip and hidden H (multiples of 128; the host
//! pads the input with zero columns). Arrays (row-major f32): `x` `T x Bp x Ip` (member e reads
//! `x + e * x_member_stride`), `h0` `E x Bp x H`, `w_ih` `E x 3H x Ip`, `w_hh` `E x 3H x H`,
//! `b_ih`/`b_hh` `E x 3H` (the host folds b_hh of the r and z gates into `b_ih`: the kernel reads
//! b_hh only for n), `ln_gain`/`ln_bias` `E x H`, `out` `E x T x Bp x H`; `hx` (exchange,
//! u64) `E x T x Bp x H`; `state` holds `epoch, count, status, -` (u32) per member.
//!
//! Batch rows are independent (layer norm is per row too), so the grid is split into groups:
//! block c is member e, batch group g (rows `g Bg .. + Bg`, the last group may be shorter, a
//! multiple of 4) and unit slice s (J units from `j0 = 2 floor(s (H/2) / S)`, J even and equal
//! up to 2 across slices, so the host can pick S to fill the SMs), `c = (e G + g) S + s` with
//! `G = ceil(Bp / Bg)`. Only the S blocks of one (e, g) exchange states. Launch:
//! cooperative (spinning needs co-residency), `E G S` blocks of [`THREADS`] threads, dynamic
//! shared memory of [`smem_floats`] floats. A block keeps its 3J rows of W_hh and W_ih in shared
//! memory (local row `3 jj + q` is gate q of unit j0 + jj), its rows of h, and `gi = W_ih x + b_ih`
//! for C steps at once (it does not depend on h: computed before step 0, and for steps
//! t + 1 .. t + 1 + C between step t's cell and its exchange, where it fills the wait).
//! Per step t:
//! 1. `gh = W_hh h` (`gru_tile::matvec`); bar.sync;
//! 2. cell, a thread per (row, unit): r, z from `gi + gh` (gi holds both biases), `n =
//!    tanh(gi_n + r (gh_n + b_hn))` (b_hn through the read-only cache), `h' = n + z (h - n)` (one
//!    fma), with `mathf`'s SFU forms of sigmoid and tanh. h' goes
//!    to `hx[e][t][row][unit]` as one 64-bit word `f32 bits | tag << 32` (`st.relaxed.gpu`),
//!    `tag = epoch + t + 1`; without layer norm and dropout also straight to `out`; bar.sync;
//! 3. exchange (`gru_exchange::gather`): the block polls its rows of `hx[e][t]` with 16-byte
//!    `ld.relaxed.gpu.v2.u64` loads (each 8-byte element single-copy atomic, so a value and its
//!    tag arrive together), re-reading only pairs whose tag is not yet this step's, and stores
//!    the values into its shared h; bar.sync. No fence, counter or barrier: each word validates
//!    itself. `hx[e][t]` is written once per launch, so there is no reuse hazard; stale words of
//!    earlier launches carry older tags (`epoch` advances by T per launch: at the start, after a
//!    bar.sync that follows every thread's read of it, thread 0 of each block counts the block
//!    in (`fence.acq_rel` + atomic add); the member's last block adds T and resets the count).
//!    A tag could only repeat after 2^32 steps of one object. The step loop skips the last
//!    step's gather unless layer norm or dropout need whole rows.
//! 4. with layer norm or dropout (`gru_exchange::transform`): one warp per row normalises in
//!    place (two warp sums) and applies dropout (hash of (e, t, row, unit)); the block's own
//!    units go to `out`; bar.sync.
//!
//! Two paths (parameter `stationary`): the one above, with the weights in shared memory, and
//! `gru_stationary`'s, with the weights in registers and gi of every step computed first (the
//! host's choice; same cell, exchange and transform, same maths up to f32 summation order; it
//! drops the barrier between the cell and the exchange, see its notes). Parameter `stamps` (0 or
//! `gru_stationary::STAMPS` u64): block 0's clock stamps on the stationary path, for benchmarks.
//!
//! A poll longer than `barrier::TIMEOUT_CYCLES` (blocks not co-resident) sets the member's
//! status word and goes on with wrong values instead of hanging; the host reports an error.

use super::gru_exchange::{gather, transform, Exchange, Gather, IN_FLIGHT};
use super::gru_tile::{copy_rows, matvec, MatVec};
use super::mathf::{sigmoid_sfu, tanh_sfu};
use crate::ptx::*;

/// Threads per block.
pub const THREADS: u32 = 256;

/// Dynamic shared memory of one block in floats, for `bg` rows, at most `j` units, `c` steps of gi:
/// W_hh and W_ih rows (`3J (H + Ip)`), the x stage and gi (`C Bg (Ip + 3J)`), h and gh
/// (`Bg (H + 3J)`).
pub fn smem_floats(bg: u32, ip: u32, h: u32, j: u32, c: u32) -> u32 {
    3 * j * (h + ip) + c * bg * (ip + 3 * j) + bg * (h + 3 * j)
}

/// Kernel parameters in registers.
pub(super) struct P {
    pub x: Reg<U64>,
    pub xms: Reg<U32>,
    pub h0: Reg<U64>,
    pub w_ih: Reg<U64>,
    pub w_hh: Reg<U64>,
    pub b_ih: Reg<U64>,
    pub b_hh: Reg<U64>,
    pub gain: Reg<U64>,
    pub beta: Reg<U64>,
    pub hx: Reg<U64>,
    pub out: Reg<U64>,
    pub state: Reg<U64>,
    pub steps: Reg<U32>,
    pub batch: Reg<U32>,
    pub bp: Reg<U32>,
    pub ip: Reg<U32>,
    pub h: Reg<U32>,
    pub slices: Reg<U32>,
    pub bg: Reg<U32>,
    pub chunk: Reg<U32>,
    pub ln: Reg<Pred>,
    pub eps: Reg<F32>,
    pub drop: Reg<Pred>,
    pub thr: Reg<U32>,
    pub scale: Reg<F32>,
    pub slo: Reg<U32>,
    pub shi: Reg<U32>,
    /// The weight-stationary path (`gru_stationary`).
    pub stationary: Reg<Pred>,
    /// Clock stamps (0 or `gru_stationary::STAMPS` u64; bench instrumentation).
    pub stamps: Param<U64>,
    /// Stamps on and this is thread 0 of block 0.
    pub stamping: Reg<Pred>,
}

fn params(b: &mut KernelBuilder) -> P {
    let names = [
        "x", "h0", "w_ih", "w_hh", "b_ih", "b_hh", "ln_gain", "ln_bias", "hx", "out", "state",
    ];
    let ptrs: Vec<Param<U64>> = names.iter().map(|n| b.param::<U64>(n)).collect();
    let u32s = [
        "x_member_stride",
        "steps",
        "batch",
        "batch_pad",
        "input_pad",
        "hidden",
        "slices",
        "rows",
        "chunk",
        "layer_norm",
        "dropout",
        "drop_threshold",
        "seed_lo",
        "seed_hi",
        "stationary",
    ];
    let us: Vec<Param<U32>> = u32s.iter().map(|n| b.param::<U32>(n)).collect();
    let peps = b.param::<F32>("ln_eps");
    let pscale = b.param::<F32>("drop_scale");
    let stamps = b.param::<U64>("stamps");
    let g: Vec<Reg<U64>> = ptrs.iter().map(|p| b.global_ptr(p)).collect();
    let u: Vec<Reg<U32>> = us.iter().map(|p| b.ld_param(p)).collect();
    let ln = b.setp(Cmp::Ne, u[9], 0u32);
    let drop = b.setp(Cmp::Ne, u[10], 0u32);
    let stationary = b.setp(Cmp::Ne, u[14], 0u32);
    let eps = b.ld_param(&peps);
    let scale = b.ld_param(&pscale);
    let sp = b.ld_param(&stamps);
    let stamping = {
        let nz = b.setp(Cmp::Ne, sp, 0u64);
        let tid = b.special(Special::TidX);
        let cta = b.special(Special::CtaidX);
        let t0 = b.setp(Cmp::Eq, tid, 0u32);
        let b0 = b.setp(Cmp::Eq, cta, 0u32);
        let p = b.and(nz, t0);
        b.and(p, b0)
    };
    P {
        x: g[0],
        h0: g[1],
        w_ih: g[2],
        w_hh: g[3],
        b_ih: g[4],
        b_hh: g[5],
        gain: g[6],
        beta: g[7],
        hx: g[8],
        out: g[9],
        state: g[10],
        xms: u[0],
        steps: u[1],
        batch: u[2],
        bp: u[3],
        ip: u[4],
        h: u[5],
        slices: u[6],
        bg: u[7],
        chunk: u[8],
        ln,
        eps,
        drop,
        thr: u[11],
        scale,
        slo: u[12],
        shi: u[13],
        stationary,
        stamps,
        stamping,
    }
}

/// Per-block values both paths use (registers of the kernel).
pub(super) struct Ctx<'a> {
    pub p: &'a P,
    pub smem: &'a SharedArray<F32>,
    pub tid: Reg<U32>,
    pub lane: Reg<U32>,
    pub warp: Reg<U32>,
    pub e: Reg<U32>,
    /// e * steps.
    pub et: Reg<U32>,
    pub row0: Reg<U32>,
    pub rows: Reg<U32>,
    pub j0: Reg<U32>,
    pub j1: Reg<U32>,
    /// Units of this block and its gate rows 3J.
    pub j: Reg<U32>,
    pub r3: Reg<U32>,
    /// Member offsets: e 3H (biases), e 3H Ip (W_ih), e 3H H (W_hh), e x_member_stride (x).
    pub e_h3: Reg<U32>,
    pub e_wih: Reg<U32>,
    pub e_whh: Reg<U32>,
    pub e_x: Reg<U32>,
    pub epoch: Reg<U32>,
}

impl Ctx<'_> {
    /// Address of b_ih of local gate row lr (member e).
    pub fn b_ih_addr(&self, b: &mut KernelBuilder, lr: Reg<U32>) -> Reg<U64> {
        let gr = self.grow(b, lr);
        let i = b.add(gr, self.e_h3);
        b.index_addr(self.p.b_ih, i, 4)
    }

    /// Local row lr = 3 jj + q  ->  global gate row q H + j0 + jj.
    pub fn grow(&self, b: &mut KernelBuilder, lr: Reg<U32>) -> Reg<U32> {
        let jj = b.div(lr, 3u32);
        let q = b.rem(lr, 3u32);
        let t = b.mad(q, self.p.h, self.j0);
        b.add(t, jj)
    }
}

/// `m = (d - 1 + 2^shift) / d`: with it, `idx / d` is `(idx * m) >> shift` while
/// `idx d < 2^shift` (the error idx / 2^shift stays under 1/d), a multiply instead of a division.
pub(super) fn reciprocal(b: &mut KernelBuilder, d: Reg<U32>, shift: u32) -> Reg<U32> {
    let dm = b.sub(d, 1u32);
    let m = b.add(dm, 1u32 << shift);
    b.div(m, d)
}

/// Builds the module.
pub fn build(target: Target) -> Module {
    let mut b = KernelBuilder::new("rnn_gru_rollout");
    b.reqntid(THREADS, 1, 1);
    // Two blocks per SM (128 registers) so that an ensemble's grid can be resident.
    b.minnctapersm(2);
    let p = params(&mut b);
    let smem = b.dynamic_shared::<F32>("smem");
    let tid = b.special(Special::TidX);
    let lane = b.and(tid, 31u32);
    let warp = b.shr(tid, 5u32);
    let cta = b.special(Special::CtaidX);
    // Block -> (member, group, slice).
    let slices = p.slices;
    let bgm1 = b.sub(p.bg, 1u32);
    let groups = b.add(p.bp, bgm1);
    let groups = b.div(groups, p.bg);
    let bpm = b.mul(groups, slices);
    let e = b.div(cta, bpm);
    let rem = b.rem(cta, bpm);
    let g = b.div(rem, slices);
    let s = b.rem(rem, slices);
    // Slice s: units 2 floor(s (H/2) / S) .. 2 floor((s + 1) (H/2) / S) (even counts that differ
    // by at most 2, so any S up to H/2 spreads the units evenly).
    let half = b.shr(p.h, 1u32);
    let sh = b.mul(s, half);
    let j0 = b.div(sh, slices);
    let j0 = b.shl(j0, 1u32);
    let sh1 = b.add(sh, half);
    let j1 = b.div(sh1, slices);
    let j1 = b.shl(j1, 1u32);
    let j = b.sub(j1, j0);
    let row0 = b.mul(g, p.bg);
    let left = b.sub(p.bp, row0);
    let rows = b.min(left, p.bg);
    let r3 = b.mul(j, 3u32);
    let h3 = b.mul(p.h, 3u32);
    let e_h3 = b.mul(e, h3);
    let e_wih = b.mul(e_h3, p.ip);
    let e_whh = b.mul(e_h3, p.h);
    let e_x = b.mul(e, p.xms);
    let st_e = b.mul_wide(e, 16u32);
    let epoch_a = b.add(p.state, st_e);
    let epoch = b.ld::<U32>(Space::Global, epoch_a);
    let et = b.mul(e, p.steps);
    // Read accounting, at the start (not on the way out, where thread 0's fence would wait for
    // the last step's stores): once every thread of the block has read the epoch (bar.sync),
    // thread 0 counts the block in; the member's last block advances the epoch by T for the
    // next launch and resets the count.
    b.bar_sync();
    let count_a = b.add(epoch_a, 4u64);
    let thread0 = b.setp(Cmp::Eq, tid, 0u32);
    b.if_then(thread0, |b| {
        b.fence_acq_rel(Scope::Gpu);
        let old = b.atom(Space::Global, AtomOp::Add, count_a, 1u32);
        let last = b.sub(bpm, 1u32);
        let is_last = b.setp(Cmp::Eq, old, last);
        b.if_then(is_last, |b| {
            let next = b.add(epoch, p.steps);
            b.st(Space::Global, epoch_a, next);
            b.st(Space::Global, count_a, 0u32);
        });
    });
    let c = Ctx {
        p: &p,
        smem: &smem,
        tid,
        lane,
        warp,
        e,
        et,
        row0,
        rows,
        j0,
        j1,
        j,
        r3,
        e_h3,
        e_wih,
        e_whh,
        e_x,
        epoch,
    };
    b.if_else(
        p.stationary,
        |b| super::gru_stationary::rollout(b, &c),
        |b| shared_rollout(b, &c),
    );
    Module::single(target, b.finish())
}

/// The shared-memory path (`stationary == 0`): weights in shared memory, `gru_tile::matvec`.
fn shared_rollout(b: &mut KernelBuilder, c: &Ctx<'_>) {
    let p = c.p;
    let smem = c.smem;
    let (tid, lane, warp, e, rows, r3) = (c.tid, c.lane, c.warp, c.e, c.rows, c.r3);
    // Shared layout (floats).
    let o_wih = b.mul(r3, p.h);
    let o_x = b.mad(r3, p.ip, o_wih);
    let cbg = b.mul(p.chunk, p.bg);
    let o_gi = b.mad(cbg, p.ip, o_x);
    let o_h = b.mad(cbg, r3, o_gi);
    let o_gh = b.mad(p.bg, p.h, o_h);
    let zero = b.mov(0u32);
    copy_rows(
        b,
        smem,
        zero,
        r3,
        p.h,
        tid,
        p.w_hh,
        &|b, lr| {
            let gr = c.grow(b, lr);
            b.mad(gr, p.h, c.e_whh)
        },
        true,
    );
    copy_rows(
        b,
        smem,
        o_wih,
        r3,
        p.ip,
        tid,
        p.w_ih,
        &|b, lr| {
            let gr = c.grow(b, lr);
            b.mad(gr, p.ip, c.e_wih)
        },
        true,
    );
    copy_rows(
        b,
        smem,
        o_h,
        rows,
        p.h,
        tid,
        p.h0,
        &|b, r| {
            let er = b.mad(e, p.bp, c.row0);
            let er = b.add(er, r);
            b.mul(er, p.h)
        },
        true,
    );
    let bias_ih = |b: &mut KernelBuilder, lr: Reg<U32>| c.b_ih_addr(b, lr);
    let ex = Exchange { c, o_h };

    // gi for steps t .. t + C (staged x rows: (step, row) pairs in order).
    let project = |b: &mut KernelBuilder, t: Reg<U32>| {
        let todo = b.sub(p.steps, t);
        let cs = b.min(todo, p.chunk);
        let xrows = b.mul(cs, rows);
        copy_rows(
            b,
            smem,
            o_x,
            xrows,
            p.ip,
            tid,
            p.x,
            &|b, q| {
                let step = b.div(q, rows);
                let r = b.rem(q, rows);
                let ts = b.add(t, step);
                let xr = b.mad(ts, p.bp, c.row0);
                let xr = b.add(xr, r);
                b.mad(xr, p.ip, c.e_x)
            },
            true,
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
        let tc = b.rem(t, p.chunk);
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
            cell(b, &ex, smem, c, t, tc, row, jj, o_gi, &gh, false);
        });
        b.bar_sync();
        // The next chunk's gi (gi of this step is consumed) fills the wait for the other blocks.
        let t1 = b.add(t, 1u32);
        let more = b.setp(Cmp::Lt, t1, p.steps);
        let t1c = b.rem(t1, p.chunk);
        let boundary = b.setp(Cmp::Eq, t1c, 0u32);
        let next = b.and(more, boundary);
        b.if_then(next, |b| project(b, t1));
        // The last step's h is only gathered for layer norm or dropout (whole rows).
        let xf = b.or(p.ln, p.drop);
        let need = b.or(more, xf);
        gather(
            b,
            &ex,
            t,
            &Gather {
                in_flight: IN_FLIGHT,
                skip_own: false,
                half_h: None,
                on: Some(need),
            },
        );
        b.bar_sync();
        let xf = b.or(p.ln, p.drop);
        b.if_then(xf, |b| {
            transform(b, &ex, t);
            b.bar_sync();
        });
    });
}

/// Step 2 of the module notes for the calling thread's (row, unit); `gh(b, lr)` is `W_hh h` of
/// the row at local gate row lr. With `to_shared`, h' also replaces h in the shared rows (only
/// this thread reads that element in the cell, and a gather that skips the block's own units
/// never writes it), so no barrier is needed before the gather.
#[allow(clippy::too_many_arguments)]
pub(super) fn cell(
    b: &mut KernelBuilder,
    ex: &Exchange<'_>,
    smem: &SharedArray<F32>,
    c: &Ctx<'_>,
    t: Reg<U32>,
    tc: Reg<U32>,
    row: Reg<U32>,
    jj: Reg<U32>,
    o_gi: Reg<U32>,
    gh: &dyn Fn(&mut KernelBuilder, Reg<U32>) -> Reg<F32>,
    to_shared: bool,
) {
    let p = ex.p;
    let (e_h3, r3) = (c.e_h3, c.r3);
    let unit = b.add(ex.j0, jj);
    // b_hh of the n gate (the host folded those of r and z into b_ih).
    let bhn = {
        let i = b.mad(p.h, 2u32, unit);
        let i = b.add(i, e_h3);
        let a = b.index_addr(p.b_hh, i, 4);
        b.ld::<F32>(Space::GlobalNc, a)
    };
    let lr0 = b.mul(jj, 3u32);
    let gi_row = b.mad(tc, ex.rows, row);
    let gi_base = b.mad(gi_row, r3, lr0);
    let gi_base = b.add(gi_base, o_gi);
    let at = |b: &mut KernelBuilder, base: Reg<U32>, q: u32| {
        let i = b.add(base, q);
        let a = b.shared_index(smem, i);
        b.ld::<F32>(Space::Shared, a)
    };
    let (gir, giz, gin) = (at(b, gi_base, 0), at(b, gi_base, 1), at(b, gi_base, 2));
    let ghs: Vec<Reg<F32>> = (0..3u32)
        .map(|q| {
            let lr = b.add(lr0, q);
            gh(b, lr)
        })
        .collect();
    let (ghr, ghz, ghn) = (ghs[0], ghs[1], ghs[2]);
    let ar = b.add(gir, ghr);
    let rg = sigmoid_sfu(b, ar);
    let az = b.add(giz, ghz);
    let zg = sigmoid_sfu(b, az);
    let u = b.add(ghn, bhn);
    let an = b.fma(rg, u, gin);
    let n = tanh_sfu(b, an);
    let hi = b.mad(row, p.h, unit);
    let hi = b.add(hi, ex.o_h);
    let ha = b.shared_index(smem, hi);
    let hprev = b.ld::<F32>(Space::Shared, ha);
    let d = b.sub(hprev, n);
    let hn = b.fma(zg, d, n);
    if to_shared {
        b.st(Space::Shared, ha, hn);
    }
    // Word index ((e T + t) Bp + row0 + row) H + unit, shared by hx and out.
    let wi = ex.word_index(b, t, row);
    let wi = b.add(wi, unit);
    let tag = b.add(ex.epoch, t);
    let tag = b.add(tag, 1u32);
    let bits = b.bitcast::<U32, F32>(hn);
    let word = b.pack64::<U64>(bits, tag);
    let xa = b.index_addr(p.hx, wi, 8);
    b.st_relaxed_gpu(xa, word);
    let transformed = b.or(p.ln, p.drop);
    let raw = b.not(transformed);
    b.if_then(raw, |b| {
        let oa = b.index_addr(p.out, wi, 4);
        b.st(Space::Global, oa, hn);
    });
}

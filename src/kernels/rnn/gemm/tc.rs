//! `rnn_gemm_nn_tc` / `rnn_gemm_tn_tc`: the randomized SVD's tall-skinny products on tensor
//! cores in split-precision TF32 ("3xTF32"), for sm_80 and later. Same parameters, shapes,
//! split-K plan semantics and partial/counter protocol as `rnn_gemm_*` (see `gemm`'s module
//! notes), with `N` = [`BN`] = 48 and the inner split a multiple of [`KC`].
//!
//! Precision: every f32 operand x is split as `hi = tf32(x)`, `lo = tf32(x - hi)` (both rounded
//! to nearest, 11 significant bits each), and each product is summed as
//! `lo_a hi_b + hi_a lo_b + hi_a hi_b` into f32 accumulators: about 22 bits of each operand
//! reach the sum (the dropped `lo_a lo_b` is below 2^-21 relative), close to the f32 FMA
//! kernels' own rounding of a 4096-term sum. Results differ from the FMA kernels' in the last
//! bits (another summation order); each launch is deterministic.
//!
//! Launch: grid `(M / 128, 1, S)`, [`TC_THREADS`] = 128 threads (4 warps). Warp w of block
//! (x, z) owns 32 output rows `128 x + 32 w ..` and the inner range `[z kps, (z + 1) kps)`.
//! Per [`KC`]-chunk of that range the block stages the skinny operand W (`K x 48`) transposed
//! and split, `Wt_hi[n][k]`, `Wt_lo[n][k]` (row stride [`WS`]: the 8 rows a quarter-warp reads
//! start 16 banks apart), between two barriers; the big operand A goes straight from global
//! memory into registers, two 16-deep steps ahead of the step being multiplied (16 floats per
//! lane and step, 16-byte loads), and W's global loads for the next chunk are issued right
//! after a chunk is staged (held in registers until then). Inside a 16-step, lane (g, t) = (lane / 4, lane % 4) holds inner
//! indices `4t .. 4t + 3`; the two mma k8 steps s = 0, 1 take `4t + 2s` as the fragment's
//! column t and `4t + 2s + 1` as its column t + 4 (any pairing of A's and W's inner indices gives
//! the same sum, and both operands use this one):
//! - nn (`C = A W`): lane loads rows `g + 8h` (h < 4) of the warp's 32 rows at `k0 + 4t`;
//!   m-tile i (rows 16 i ..) x n-tile j (columns 8 j ..) = 2 x 6 tiles of `mma.m16n8k8`, with
//!   A as the row-major operand and `Wt[8j + g][4t ..]` as the column operand;
//! - tn (`C = A^T W`, computed as `C^T = W^T A`): lane loads rows `k0 + 4t + r` (r < 4) of A at
//!   columns `32 w + 4g .. + 3`; m-tile i (W's columns 16 i ..) x n-tile j = 3 x 4 tiles, where
//!   n-tile j's column g is A's column `32 w + 4g + j` (so one 16-byte load feeds four tiles).

use super::tc_frame::{
    begin, finish, lanes, ld4, mov_quads, store_w, w_loads, w_stage, zero_acc, WStage,
};
use super::tc_parts::multiply_step;
use super::{OpA, BN};
use crate::ptx::*;

/// Threads per block (4 warps of 32 output rows each: [`BM`](super::BM) rows per block).
pub const TC_THREADS: u32 = 128;
/// Inner indices of W staged per chunk (the inner split is a multiple of it).
pub const KC: u32 = 64;
/// Row stride (words) of the staged `Wt` chunk: `2 KC + 4` (each inner index holds hi and lo),
/// so that rows g and g + 1 of a 16-byte quarter-warp read fall in complementary banks.
pub const WS: u32 = 2 * KC + 4;
/// Inner indices per register step.
const STEP: u32 = 16;
/// Steps per chunk.
const STEPS: u32 = KC / STEP;

/// `C = A W` on tensor cores (3xTF32).
pub fn build_nn(target: Target) -> Module {
    build(target, OpA::Plain)
}

/// `C = A^T W` on tensor cores (3xTF32).
pub fn build_tn(target: Target) -> Module {
    build(target, OpA::Transposed)
}

fn build(target: Target, op: OpA) -> Module {
    let (tn, mut b, p) = begin(op, "tc");
    let ws = b.shared_array::<B32>("w_split", BN * WS);
    let flag = b.shared_array::<U32>("last", 1);
    let l = lanes(&mut b, &p);
    let (a, lda, k_begin, k_end) = (p.a, p.lda, l.k_begin, l.k_end);
    let (lane, warp, g, wbase) = (l.lane, l.warp, l.g, l.wbase);
    let t4 = b.shl(l.t, 2u32);
    // The lane's four A pointers at step 0 and the per-step advance (bytes).
    let (ptrs, adv): (Vec<Reg<U64>>, Reg<U64>) = if tn {
        // Rows k_begin + 4t + r, columns wbase + 4g.
        let row = b.add(k_begin, t4);
        let g4 = b.shl(g, 2u32);
        let col = b.add(wbase, g4);
        let e0 = b.mad(row, lda, col);
        let p0 = b.index_addr(a, e0, 4);
        let lda4 = b.mul(lda, 4u32);
        let lda4 = b.cvt::<U64, U32>(lda4);
        let mut ps = vec![p0];
        for r in 1..4 {
            let prev = ps[r - 1];
            ps.push(b.add(prev, lda4));
        }
        let adv = b.mul(lda, 4 * STEP);
        (ps, b.cvt::<U64, U32>(adv))
    } else {
        // Rows wbase + g + 8h, columns k_begin + 4t.
        let row = b.add(wbase, g);
        let col = b.add(k_begin, t4);
        let e0 = b.mad(row, lda, col);
        let p0 = b.index_addr(a, e0, 4);
        let row8 = b.mul(lda, 32u32);
        let row8 = b.cvt::<U64, U32>(row8);
        let mut ps = vec![p0];
        for h in 1..4 {
            let prev = ps[h - 1];
            ps.push(b.add(prev, row8));
        }
        (ps, b.mov(u64::from(4 * STEP)))
    };
    // Staging: thread copies W rows kc0 + kk (kk = lane + 32 (w & 1)), quads nq0 + 2q (q < 6).
    let wodd = b.and(warp, 1u32);
    let kk = b.mad(wodd, 32u32, lane);
    let nq0 = b.shr(warp, 1u32);
    let wrow = b.add(k_begin, kk);
    let nq4 = b.shl(nq0, 2u32);
    let WStage {
        ptr: wptr,
        st: st_w,
        rd,
    } = w_stage(&mut b, &p, &l, &ws, WS, (wrow, nq4, kk));

    let acc = zero_acc(&mut b);
    let load_step = |b: &mut KernelBuilder, pred: Option<Reg<Pred>>| -> Vec<[Reg<F32>; 4]> {
        (0..4)
            .map(|h| ld4(b, Space::GlobalNc, ptrs[h], pred))
            .collect()
    };
    let advance = |b: &mut KernelBuilder| {
        for p in &ptrs {
            let n = b.add(*p, adv);
            b.mov_to(*p, n);
        }
    };
    let multiply = |b: &mut KernelBuilder, u: &[[Reg<F32>; 4]], kk0: u32| {
        multiply_step(b, tn, &acc, u, &rd, WS, kk0)
    };

    // W's global loads of one chunk (6 float4 per thread), predicated on `pred` when given.
    let load_w =
        |b: &mut KernelBuilder, pred: Option<Reg<Pred>>| w_loads(b, wptr, (6, 32), pred, false);
    b.comment("main loop: per chunk, stage W (split, transposed; loaded one chunk ahead), then 4 steps of mma (A loaded two steps ahead)");
    let has_work = b.setp(Cmp::Lt, k_begin, k_end);
    b.if_then(has_work, |b| {
        let span = b.sub(k_end, k_begin);
        let nchunks = b.shr(span, KC.trailing_zeros());
        let fresh = |b: &mut KernelBuilder, n: usize| -> Vec<[Reg<F32>; 4]> {
            (0..n).map(|_| [0; 4].map(|_| b.reg::<F32>())).collect()
        };
        let (cur0, cur1) = (fresh(b, 4), fresh(b, 4));
        let first = load_step(b, None);
        mov_quads(b, &cur0, &first);
        advance(b);
        let second = load_step(b, None);
        mov_quads(b, &cur1, &second);
        b.for_range(0u32, nchunks, 1u32, |b, chunk, _| {
            b.bar_sync();
            let wregs = load_w(b, None);
            store_w(b, &wregs, &st_w, 8, WS);
            b.bar_sync();
            let c1 = b.add(chunk, 1u32);
            let more = b.setp(Cmp::Lt, c1, nchunks);
            let wn = b.add(wptr, u64::from(4 * KC * BN));
            b.mov_to(wptr, wn);
            // Steps 4c .. 4c + 3 use cur0, cur1 and the loads of steps 4c + 2, 4c + 3 issued
            // here; the last two of those are the next chunk's first two steps.
            let mut ring = vec![cur0.clone(), cur1.clone()];
            for s4 in 0..STEPS {
                advance(b);
                let pred = (s4 + 2 >= STEPS).then_some(more);
                let next = load_step(b, pred);
                let u = ring.remove(0);
                multiply(b, &u, STEP * s4);
                ring.push(next);
            }
            mov_quads(b, &cur0, &ring[0]);
            mov_quads(b, &cur1, &ring[1]);
        });
    });

    finish(b, target, tn, &p, &l, &flag, &acc)
}

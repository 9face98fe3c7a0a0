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

use super::tc_parts::{epilogue, multiply_step, split, Epilogue};
use super::{OpA, BM, BN};
use crate::ptx::*;

/// Threads per block (4 warps of 32 output rows each: [`BM`] rows per block).
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
    let tn = op == OpA::Transposed;
    let mut b = KernelBuilder::new(if tn {
        "rnn_gemm_tn_tc"
    } else {
        "rnn_gemm_nn_tc"
    });
    b.reqntid(TC_THREADS, 1, 1);
    let pa = b.param::<U64>("a");
    let pb = b.param::<U64>("b");
    let pc = b.param::<U64>("c");
    let pp = b.param::<U64>("partial");
    let pcnt = b.param::<U64>("counters");
    let pm = b.param::<U32>("m");
    let _pn = b.param::<U32>("n");
    let pk = b.param::<U32>("k");
    let plda = b.param::<U32>("lda");
    let pkps = b.param::<U32>("k_per_split");
    let psplits = b.param::<U32>("splits");
    let (a, wm, cm) = (b.global_ptr(&pa), b.global_ptr(&pb), b.global_ptr(&pc));
    let (partial, counters) = (b.global_ptr(&pp), b.global_ptr(&pcnt));
    let (m, k, lda, kps) = (
        b.ld_param(&pm),
        b.ld_param(&pk),
        b.ld_param(&plda),
        b.ld_param(&pkps),
    );
    let ws = b.shared_array::<B32>("w_split", BN * WS);
    let flag = b.shared_array::<U32>("last", 1);

    b.comment("setup: lane (g, t), the warp's 32 rows, the block's inner range");
    let tid = b.special(Special::TidX);
    let bx = b.special(Special::CtaidX);
    let bz = b.special(Special::CtaidZ);
    let lane = b.and(tid, 31u32);
    let warp = b.shr(tid, 5u32);
    let g = b.shr(lane, 2u32);
    let t = b.and(lane, 3u32);
    let m0 = b.mul(bx, BM);
    let wbase = b.mad(warp, 32u32, m0);
    let k_begin = b.mul(bz, kps);
    let k_end = b.add(k_begin, kps);
    let k_end = b.min(k_end, k);
    let t4 = b.shl(t, 2u32);
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
    let we = b.mad(wrow, BN, nq4);
    let wptr = b.index_addr(wm, we, 4);
    // Inner index kk = 2p + e goes to words 4p + e (hi) and 4p + e + 2 (lo) of its row.
    let srow = b.mul(nq4, WS);
    let pe = b.and(kk, 1u32);
    let p2 = b.shr(kk, 1u32);
    let pw = b.mad(p2, 4u32, pe);
    let sidx = b.add(srow, pw);
    let st_w: Addr = b.shared_index(&ws, sidx).into();
    // Fragment reads: row g (nn: 8 j + g; tn: 16 i + g (+8)), words 8t .. (pair 2t + s).
    let t8 = b.shl(t, 3u32);
    let ridx = b.mad(g, WS, t8);
    let rd: Addr = b.shared_index(&ws, ridx).into();

    let acc: Vec<[Reg<F32>; 4]> = (0..12).map(|_| [0; 4].map(|_| b.mov(0.0f32))).collect();
    let load_step = |b: &mut KernelBuilder, pred: Option<Reg<Pred>>| -> Vec<[Reg<F32>; 4]> {
        (0..4)
            .map(|h| match pred {
                None => b.ld_v4::<F32>(Space::GlobalNc, ptrs[h]),
                Some(p) => {
                    let v = [0; 4].map(|_| b.reg::<F32>());
                    b.guarded(p, false, |b| {
                        let x = b.ld_v4::<F32>(Space::GlobalNc, ptrs[h]);
                        for q in 0..4 {
                            b.mov_to(v[q], x[q]);
                        }
                    });
                    v
                }
            })
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
    let load_w = |b: &mut KernelBuilder, pred: Option<Reg<Pred>>| -> Vec<[Reg<F32>; 4]> {
        (0..6u32)
            .map(|q| {
                let at = Addr::from(wptr).off(i64::from(32 * q));
                match pred {
                    None => b.ld_v4::<F32>(Space::Global, at),
                    Some(p) => {
                        let v = [0; 4].map(|_| b.reg::<F32>());
                        b.guarded(p, false, |b| {
                            let x = b.ld_v4::<F32>(Space::Global, at);
                            for i in 0..4 {
                                b.mov_to(v[i], x[i]);
                            }
                        });
                        v
                    }
                }
            })
            .collect()
    };
    let carry = |b: &mut KernelBuilder, dst: &[[Reg<F32>; 4]], src: &[[Reg<F32>; 4]]| {
        for (d, s) in dst.iter().zip(src) {
            for q in 0..4 {
                b.mov_to(d[q], s[q]);
            }
        }
    };
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
        carry(b, &cur0, &first);
        advance(b);
        let second = load_step(b, None);
        carry(b, &cur1, &second);
        b.for_range(0u32, nchunks, 1u32, |b, chunk, _| {
            b.bar_sync();
            let wregs = load_w(b, None);
            for (q, v) in wregs.iter().enumerate() {
                for (i, x) in v.iter().enumerate() {
                    let (h, l) = split(b, *x);
                    let off = i64::from(4 * (8 * q as u32 + i as u32) * WS);
                    b.st(Space::Shared, st_w.off(off), h);
                    b.st(Space::Shared, st_w.off(off + 8), l);
                }
            }
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
            carry(b, &cur0, &ring[0]);
            carry(b, &cur1, &ring[1]);
        });
    });

    let epi = Epilogue {
        tn,
        t,
        g,
        tid,
        bx,
        bz,
        m0,
        wbase,
        m,
        c: cm,
        partial,
        counters,
        flag: &flag,
    };
    epilogue(&mut b, &epi, &acc, &psplits);
    Module::single(target, b.finish())
}

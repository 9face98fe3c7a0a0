//! `rnn_gemm_nn_tca` / `rnn_gemm_tn_tca`: the 3xTF32 tensor-core products of `tc` with A
//! streamed through a [`NS`]-stage `cp.async` ring in shared memory instead of registers, so
//! that three 16-deep steps of A (24 KiB per block) are in flight without holding registers.
//! Same parameters, launch (grid `(M / 128, 1, S)`, 128 threads), split-K protocol, fragment
//! layouts, products and summation order per split as `tc` (the two give the same bits with the
//! same plan); W is staged in chunks of [`KCA`] (loaded one chunk ahead into registers).
//!
//! Step i (16 inner indices) of the block's range lives in slot `i % NS`, 8 KiB:
//! - nn: `A[m0 + r][k0 + c]` at word `16 r + c` (r < 128, c < 16): a lane's 16-byte fragment
//!   reads (rows g, g + 1 of a quarter-warp) start 16 banks apart;
//! - tn: `A[k0 + r][m0 + c]` at word `128 r + 4 (c / 4 ^ 2 ((r / 4) % 4)) + c % 4` (r < 16): the
//!   16-byte chunks of each row are swizzled so that the four rows `4t + r'` a quarter-warp
//!   reads fall in different banks.
//!
//! Per step: `cp.async.wait_group` (this step's copies landed), one barrier (they are visible,
//! and every warp is done with step i - 1, whose slot the copies of step i + 3 then overwrite),
//! the copies of step i + 3, and the step's products; a chunk's first step also stores the
//! chunk's split W (loaded during the previous chunk) between that barrier and a second one.

use super::tc_frame::{
    begin, finish, lanes, mov_quads, store_w, w_loads, w_stage, zero_acc, WStage,
};
use super::tc_parts::multiply_step;
use super::{OpA, BM, BN};
use crate::ptx::*;

/// Inner indices of W staged per chunk.
pub const KCA: u32 = 32;
/// Row stride (words) of the staged `Wt` chunk (hi and lo per inner index, see `tc::WS`).
const WSA: u32 = 2 * KCA + 4;
/// Inner indices per step (and per ring slot).
const STEP: u32 = 16;
/// Ring slots.
pub const NS: u32 = 4;
/// Bytes of one ring slot.
const SLOT: u32 = 4 * BM * STEP;

/// `C = A W`, A through the `cp.async` ring.
pub fn build_nn(target: Target) -> Module {
    build(target, OpA::Plain)
}

/// `C = A^T W`, A through the `cp.async` ring.
pub fn build_tn(target: Target) -> Module {
    build(target, OpA::Transposed)
}

fn build(target: Target, op: OpA) -> Module {
    let (tn, mut b, p) = begin(op, "tca");
    let ring = b.shared_array::<F32>("a_ring", NS * BM * STEP);
    let ws = b.shared_array::<B32>("w_split", BN * WSA);
    let flag = b.shared_array::<U32>("last", 1);
    let l = lanes(&mut b, &p);
    let (a, lda, k_begin, k_end) = (p.a, p.lda, l.k_begin, l.k_end);
    let (tid, lane, warp, g, t, m0) = (l.tid, l.lane, l.warp, l.g, l.t, l.m0);

    b.comment("copies: the thread's four 16-byte chunks of each step (source, ring offset)");
    let ring0 = b.shared_base(&ring);
    let (srcs, dsts, adv): (Vec<Reg<U64>>, Vec<Reg<U32>>, Reg<U64>) = if tn {
        // Chunk j: row warp + 4j of the step, 16-byte column `lane` (swizzle 2j).
        let row = b.add(k_begin, warp);
        let l4 = b.shl(lane, 2u32);
        let col = b.add(m0, l4);
        let e0 = b.mad(row, lda, col);
        let p0 = b.index_addr(a, e0, 4);
        let rows4 = b.mul(lda, 16u32);
        let rows4 = b.cvt::<U64, U32>(rows4);
        let mut srcs = vec![p0];
        let mut dsts = Vec::new();
        for j in 0..4u32 {
            if j > 0 {
                let prev = srcs[j as usize - 1];
                srcs.push(b.add(prev, rows4));
            }
            let r = b.add(warp, 4 * j);
            let pos = b.xor(lane, 2 * j);
            let w = b.mad(r, BM, 0u32);
            let w = b.mad(pos, 4u32, w);
            dsts.push(b.mad(w, 4u32, ring0));
        }
        let adv = b.mul(lda, 4 * STEP);
        (srcs, dsts, b.cvt::<U64, U32>(adv))
    } else {
        // Chunk j: row tid / 4 + 32 j of the block, 16-byte column tid % 4.
        let r = b.shr(tid, 2u32);
        let c4 = b.and(tid, 3u32);
        let row = b.add(m0, r);
        let c = b.shl(c4, 2u32);
        let col = b.add(k_begin, c);
        let e0 = b.mad(row, lda, col);
        let p0 = b.index_addr(a, e0, 4);
        let rows32 = b.mul(lda, 128u32);
        let rows32 = b.cvt::<U64, U32>(rows32);
        let mut srcs = vec![p0];
        let w = b.mad(r, STEP, c);
        let d0 = b.mad(w, 4u32, ring0);
        let mut dsts = vec![d0];
        for j in 1..4usize {
            let prev = srcs[j - 1];
            srcs.push(b.add(prev, rows32));
            dsts.push(b.add(d0, 4 * 32 * STEP * j as u32));
        }
        (srcs, dsts, b.mov(u64::from(4 * STEP)))
    };
    // Fragment reads: nn rows 32w + g + 8h at inner 4t; tn rows 4t + r at chunk (8w + g) ^ 2t.
    let rd_a = if tn {
        let t4 = b.shl(t, 2u32);
        let w8 = b.shl(warp, 3u32);
        let c = b.add(w8, g);
        let t2 = b.shl(t, 1u32);
        let pos = b.xor(c, t2);
        let w = b.mul(t4, BM);
        let w = b.mad(pos, 4u32, w);
        b.mad(w, 4u32, ring0)
    } else {
        let r = b.mad(warp, 32u32, g);
        let t4 = b.shl(t, 2u32);
        let w = b.mad(r, STEP, t4);
        b.mad(w, 4u32, ring0)
    };
    let h_stride: i64 = if tn {
        4 * BM as i64
    } else {
        4 * 8 * STEP as i64
    };
    // W staging: rows kc0 + lane, quads warp + 4q (q < 3); words 4 (kk / 2) + kk % 2 (+2: lo).
    let wrow = b.add(k_begin, lane);
    let w4 = b.shl(warp, 2u32);
    let WStage {
        ptr: wptr,
        st: st_w,
        rd: rd_w,
    } = w_stage(&mut b, &p, &l, &ws, WSA, (wrow, w4, lane));

    let acc = zero_acc(&mut b);
    // Copies of the next step into `slot` (predicated on `pred`), then a commit.
    let issue = |b: &mut KernelBuilder, slot: Reg<U32>, pred: Option<Reg<Pred>>| {
        let off = b.mul(slot, SLOT);
        for (s, d) in srcs.iter().zip(&dsts) {
            let dst = b.add(*d, off);
            match pred {
                None => b.cp_async_16(dst, *s),
                Some(p) => b.guarded(p, false, |b| b.cp_async_16(dst, *s)),
            }
            let n = b.add(*s, adv);
            b.mov_to(*s, n);
        }
        b.cp_async_commit_group();
    };
    let load_w =
        |b: &mut KernelBuilder, pred: Option<Reg<Pred>>| w_loads(b, wptr, (3, 64), pred, true);

    b.comment("main loop: chunks of 2 steps; A three steps ahead in the ring, W one chunk ahead");
    let has_work = b.setp(Cmp::Lt, k_begin, k_end);
    b.if_then(has_work, |b| {
        let span = b.sub(k_end, k_begin);
        let nsteps = b.shr(span, STEP.trailing_zeros());
        let nchunks = b.shr(span, KCA.trailing_zeros());
        for i in 0..NS - 1 {
            let slot = b.mov(i);
            issue(b, slot, None);
        }
        let wregs = load_w(b, None);
        b.for_range(0u32, nchunks, 1u32, |b, chunk, _| {
            let c1 = b.add(chunk, 1u32);
            let more = b.setp(Cmp::Lt, c1, nchunks);
            for s in 0..KCA / STEP {
                let i = b.mad(chunk, KCA / STEP, s);
                b.cp_async_wait_group(NS - 2);
                b.bar_sync();
                if s == 0 {
                    store_w(b, &wregs, &st_w, 16, WSA);
                }
                let ahead = b.add(i, NS - 1);
                let valid = b.setp(Cmp::Lt, ahead, nsteps);
                let slot = b.and(ahead, NS - 1);
                issue(b, slot, Some(valid));
                if s == 0 {
                    let wn = b.add(wptr, u64::from(4 * KCA * BN));
                    b.mov_to(wptr, wn);
                    let next = load_w(b, Some(more));
                    mov_quads(b, &wregs, &next);
                    b.bar_sync();
                }
                let cur = b.and(i, NS - 1);
                let off = b.mul(cur, SLOT);
                let base: Addr = b.add(rd_a, off).into();
                let u: Vec<[Reg<F32>; 4]> = (0..4)
                    .map(|h| b.ld_v4::<F32>(Space::Shared, base.off(h * h_stride)))
                    .collect();
                multiply_step(b, tn, &acc, &u, &rd_w, WSA, STEP * s);
            }
        });
        b.cp_async_wait_all();
    });

    finish(b, target, tn, &p, &l, &flag, &acc)
}

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

use super::tc::TC_THREADS;
use super::tc_parts::{epilogue, multiply_step, split, Epilogue};
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
    let tn = op == OpA::Transposed;
    let mut b = KernelBuilder::new(if tn {
        "rnn_gemm_tn_tca"
    } else {
        "rnn_gemm_nn_tca"
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
    let ring = b.shared_array::<F32>("a_ring", NS * BM * STEP);
    let ws = b.shared_array::<B32>("w_split", BN * WSA);
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
    let we = b.mad(wrow, BN, w4);
    let wptr = b.index_addr(wm, we, 4);
    let srow = b.mul(w4, WSA);
    let pe = b.and(lane, 1u32);
    let p2 = b.shr(lane, 1u32);
    let pw = b.mad(p2, 4u32, pe);
    let sidx = b.add(srow, pw);
    let st_w: Addr = b.shared_index(&ws, sidx).into();
    let t8 = b.shl(t, 3u32);
    let ridx = b.mad(g, WSA, t8);
    let rd_w: Addr = b.shared_index(&ws, ridx).into();

    let acc: Vec<[Reg<F32>; 4]> = (0..12).map(|_| [0; 4].map(|_| b.mov(0.0f32))).collect();
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
    let load_w = |b: &mut KernelBuilder, pred: Option<Reg<Pred>>| -> Vec<[Reg<F32>; 4]> {
        (0..3u32)
            .map(|q| {
                let at = Addr::from(wptr).off(i64::from(64 * q));
                let v = [0; 4].map(|_| b.reg::<F32>());
                let body = |b: &mut KernelBuilder| {
                    let x = b.ld_v4::<F32>(Space::Global, at.clone());
                    for i in 0..4 {
                        b.mov_to(v[i], x[i]);
                    }
                };
                match pred {
                    None => body(b),
                    Some(p) => b.guarded(p, false, body),
                }
                v
            })
            .collect()
    };

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
                    for (q, v) in wregs.iter().enumerate() {
                        for (e, x) in v.iter().enumerate() {
                            let (h, l) = split(b, *x);
                            let off = i64::from(4 * (16 * q as u32 + e as u32) * WSA);
                            b.st(Space::Shared, st_w.off(off), h);
                            b.st(Space::Shared, st_w.off(off + 8), l);
                        }
                    }
                }
                let ahead = b.add(i, NS - 1);
                let valid = b.setp(Cmp::Lt, ahead, nsteps);
                let slot = b.and(ahead, NS - 1);
                issue(b, slot, Some(valid));
                if s == 0 {
                    let wn = b.add(wptr, u64::from(4 * KCA * BN));
                    b.mov_to(wptr, wn);
                    let next = load_w(b, Some(more));
                    for (d, n) in wregs.iter().zip(&next) {
                        for e in 0..4 {
                            b.mov_to(d[e], n[e]);
                        }
                    }
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

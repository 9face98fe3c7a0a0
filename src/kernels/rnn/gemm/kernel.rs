//! Builds `rnn_gemm_nn` and `rnn_gemm_tn` (see `gemm`'s module notes).

use super::slice::{load_slice, store_slice, Tiles};
use super::{a_tile_len, Ctx, OpA, Shape, ASN_STRIDE, AS_STRIDE, BK, BM, BN, SHAPE4, SHAPE8};
use crate::ptx::*;

/// `C = A B`.
pub fn build_nn(target: Target) -> Module {
    build(target, OpA::Plain, SHAPE4)
}

/// `C = A^T B`.
pub fn build_tn(target: Target) -> Module {
    build(target, OpA::Transposed, SHAPE4)
}

/// `C = A B`, 8 x 6 per thread.
pub fn build_nn_r8(target: Target) -> Module {
    build(target, OpA::Plain, SHAPE8)
}

/// `C = A^T B`, 8 x 6 per thread.
pub fn build_tn_r8(target: Target) -> Module {
    build(target, OpA::Transposed, SHAPE8)
}

fn build(target: Target, op: OpA, shape: Shape) -> Module {
    let name = match (op, shape.rows) {
        (OpA::Transposed, 4) => "rnn_gemm_tn",
        (OpA::Plain, 4) => "rnn_gemm_nn",
        (OpA::Transposed, _) => "rnn_gemm_tn_r8",
        (OpA::Plain, _) => "rnn_gemm_nn_r8",
    };
    let (rows, nacc) = (shape.rows, shape.accs());
    let mut b = KernelBuilder::new(name);
    b.reqntid(shape.threads, 1, 1);
    if shape == SHAPE8 && op == OpA::Transposed && target >= Target::Sm90 {
        // 4 blocks of 128 threads per SM fit 128 registers without spilling on sm_90 and later
        // (ptxas 13.0 / 13.5); sm_75..sm_89 would spill 48-64 bytes at that cap, so their PTX
        // (the table's sm_75 target) leaves the count to ptxas. The nn kernel would spill on
        // every architecture and keeps its ~165 (3 blocks per SM).
        b.minnctapersm(4);
    }
    let pa = b.param::<U64>("a");
    let pb = b.param::<U64>("b");
    let pc = b.param::<U64>("c");
    let pp = b.param::<U64>("partial");
    let pcnt = b.param::<U64>("counters");
    let pm = b.param::<U32>("m");
    let pn = b.param::<U32>("n");
    let pk = b.param::<U32>("k");
    let plda = b.param::<U32>("lda");
    let pkps = b.param::<U32>("k_per_split");
    let psplits = b.param::<U32>("splits");
    let (a, bm, cm) = (b.global_ptr(&pa), b.global_ptr(&pb), b.global_ptr(&pc));
    let (partial, counters) = (b.global_ptr(&pp), b.global_ptr(&pcnt));
    let (m, n, k, lda, kps) = (
        b.ld_param(&pm),
        b.ld_param(&pn),
        b.ld_param(&pk),
        b.ld_param(&plda),
        b.ld_param(&pkps),
    );
    // Two buffers each; the nn pair is exactly 48 KiB, so the last-block flag reuses a_tile[0]
    // (free after the main loop's final barrier).
    let a_sh = b.shared_array::<F32>("a_tile", 2 * a_tile_len(op));
    let b_sh = b.shared_array::<F32>("b_tile", 2 * BK * BN);
    let tiles = Tiles { a: &a_sh, b: &b_sh };
    b.comment("setup: the block's tile (x, y) and inner range (z)");
    let tid = b.special(Special::TidX);
    let bx = b.special(Special::CtaidX);
    let by = b.special(Special::CtaidY);
    let bz = b.special(Special::CtaidZ);
    let m0 = b.mul(bx, BM);
    let n0 = b.mul(by, BN);
    let k_begin = b.mul(bz, kps);
    let k_end = b.add(k_begin, kps);
    let k_end = b.min(k_end, k);
    let (nn_ld, nn_st) = if op == OpA::Transposed {
        (m0, m0)
    } else {
        let row = b.shr(tid, 3u32);
        let ch = b.and(tid, 7u32);
        let k4 = b.shl(ch, 2u32);
        let grow = b.add(m0, row);
        let ld = b.mad(grow, lda, k4);
        let st = b.mad(row, ASN_STRIDE, k4);
        (ld, st)
    };
    let ctx = Ctx {
        a,
        bm,
        lda,
        n,
        m0,
        n0,
        tid,
        op,
        shape,
        nn_ld,
        nn_st,
    };
    let tn = b.and(tid, 7u32);
    let tm = b.shr(tid, 3u32);
    let acc: Vec<Reg<F32>> = (0..nacc).map(|_| b.mov(0.0f32)).collect();

    b.comment("first slice into buffer 0");
    let has_work = b.setp(Cmp::Lt, k_begin, k_end);
    b.if_then(has_work, |b| {
        let first = load_slice(b, &ctx, k_begin, None);
        let zero = b.mov(0u32);
        store_slice(b, &ctx, &tiles, zero, &first);
        b.bar_sync();
        // Byte offsets of the thread's A and B reads in buffer 0.
        let a_first = if op == OpA::Transposed {
            // Rows rows tm .. (shift: rows is 4 or 8).
            b.shl(tm, rows.trailing_zeros())
        } else {
            b.mul(tm, ASN_STRIDE)
        };
        let a_base0 = b.shared_index(&a_sh, a_first);
        let a_base1 = b.add(a_base0, 4 * a_tile_len(op));
        let b_col = b.mul(tn, 6u32);
        let b_base0 = b.shared_index(&b_sh, b_col);
        let b_base1 = b.add(b_base0, 4 * BK * BN);
        let cur = b.mov(0u32);
        b.comment(
            "per slice: load the next one, multiply this one, store the next into the other buffer",
        );
        b.for_range(k_begin, k_end, BK, |b, k0, _| {
            let next = b.add(k0, BK);
            let has_next = b.setp(Cmp::Lt, next, k_end);
            // Prefetch the next slice (predicated: the last pass loads nothing).
            let next_slice = load_slice(b, &ctx, next, Some(has_next));
            let odd = b.setp(Cmp::Ne, cur, 0u32);
            let a_base: Addr = b.selp(a_base1, a_base0, odd).into();
            let b_base: Addr = b.selp(b_base1, b_base0, odd).into();
            let b_at = |b: &mut KernelBuilder, kk: u32| {
                let mut bw = Vec::with_capacity(6);
                for h in 0..3u32 {
                    let v =
                        b.ld_v2::<F32>(Space::Shared, b_base.off(i64::from(kk * BN * 4 + 8 * h)));
                    bw.extend(v);
                }
                bw
            };
            let fmas = |b: &mut KernelBuilder, av: &[Reg<F32>], bw: &[Reg<F32>]| {
                for i in 0..av.len() {
                    for j in 0..6 {
                        let s = b.fma(av[i], bw[j], acc[i * 6 + j]);
                        b.mov_to(acc[i * 6 + j], s);
                    }
                }
            };
            if op == OpA::Transposed {
                for kk in 0..BK {
                    let mut av = Vec::with_capacity(rows as usize);
                    for h in 0..rows / 4 {
                        let off = i64::from(kk * AS_STRIDE * 4 + 16 * h);
                        av.extend(b.ld_v4::<F32>(Space::Shared, a_base.off(off)));
                    }
                    let bw = b_at(b, kk);
                    fmas(b, &av, &bw);
                }
            } else {
                let groups = shape.row_groups();
                for k4 in 0..BK / 4 {
                    // Rows t / 8 + groups i, columns 4 k4 .. +4.
                    let quads: Vec<[Reg<F32>; 4]> = (0..rows)
                        .map(|i| {
                            b.ld_v4::<F32>(
                                Space::Shared,
                                a_base.off(i64::from(4 * (groups * i * ASN_STRIDE + 4 * k4))),
                            )
                        })
                        .collect();
                    for kq in 0..4usize {
                        let bw = b_at(b, 4 * k4 + kq as u32);
                        let col: Vec<Reg<F32>> = quads.iter().map(|q| q[kq]).collect();
                        fmas(b, &col, &bw);
                    }
                }
            }
            let other = b.xor(cur, 1u32);
            b.if_then(has_next, |b| {
                store_slice(b, &ctx, &tiles, other, &next_slice)
            });
            b.mov_to(cur, other);
            b.bar_sync();
        });
    });

    // Epilogue: rows m0 + row0 + i step (tn: rows tm + i; nn: tm + (threads / 8) i), columns
    // n0 + 6 tn + j.
    let (row0, step) = if op == OpA::Transposed {
        (b.mad(tm, rows, m0), 1u32)
    } else {
        (b.add(tm, m0), shape.row_groups())
    };
    let col0 = b.mad(tn, 6u32, n0);
    let write_tile =
        |b: &mut KernelBuilder, base: Reg<U64>, row_off: Reg<U32>, vals: &[Reg<F32>]| {
            for i in 0..rows {
                let r = b.add(row_off, i * step);
                let e = b.mad(r, n, col0);
                let addr: Addr = b.index_addr(base, e, 4).into();
                for h in 0..3 {
                    let pair = [
                        vals[(i * 6 + 2 * h) as usize],
                        vals[(i * 6 + 2 * h + 1) as usize],
                    ];
                    b.st_v2(Space::Global, addr.off(8 * i64::from(h)), pair);
                }
            }
        };
    b.comment("epilogue: the tile to C (one split) or to partial[z]");
    let splits = b.ld_param(&psplits);
    let single = b.setp(Cmp::Eq, splits, 1u32);
    b.if_else(
        single,
        |b| write_tile(b, cm, row0, &acc),
        |b| {
            let prow = b.mad(bz, m, row0);
            write_tile(b, partial, prow, &acc);
            b.comment("split-K: count the block in; the last block of the tile sums the partials");
            b.fence_acq_rel(Scope::Gpu);
            b.bar_sync();
            let t0 = b.setp(Cmp::Eq, tid, 0u32);
            let gy = b.special(Special::NctaidY);
            let ci = b.mad(bx, gy, by);
            let caddr = b.index_addr(counters, ci, 4);
            b.if_then(t0, |b| {
                let old = b.atom(Space::Global, AtomOp::Add, caddr, 1u32);
                let lastv = b.sub(splits, 1u32);
                let is_last = b.setp(Cmp::Eq, old, lastv);
                let flag = b.selp(1.0f32, 0.0f32, is_last);
                b.st(Space::Shared, a_sh.at(0), flag);
            });
            b.bar_sync();
            let flag = b.ld::<F32>(Space::Shared, a_sh.at(0));
            let am_last = b.setp(Cmp::Eq, flag, 1.0f32);
            b.if_then(am_last, |b| {
                b.fence_acq_rel(Scope::Gpu);
                let sums: Vec<Reg<F32>> = (0..nacc).map(|_| b.mov(0.0f32)).collect();
                // 4 x 6: two partials per trip, their loads issued together; added s, then
                // s + 1. 8 x 6: one per trip (two would hold 144 values in registers).
                let pair = rows == 4;
                let per_trip = if pair { 2u32 } else { 1u32 };
                b.for_range(0u32, splits, per_trip, |b, s, _| {
                    let load = |b: &mut KernelBuilder, s: Reg<U32>, p: Option<Reg<Pred>>| {
                        let prow = b.mad(s, m, row0);
                        let mut vals = Vec::with_capacity(nacc);
                        for i in 0..rows {
                            let r = b.add(prow, i * step);
                            let e = b.mad(r, n, col0);
                            let addr: Addr = b.index_addr(partial, e, 4).into();
                            for h in 0..3 {
                                let v = match p {
                                    None => {
                                        b.ld_v2::<F32>(Space::Global, addr.off(8 * i64::from(h)))
                                    }
                                    Some(p) => {
                                        let v = [b.mov(0.0f32), b.mov(0.0f32)];
                                        b.guarded(p, false, |b| {
                                            let x = b.ld_v2::<F32>(
                                                Space::Global,
                                                addr.off(8 * i64::from(h)),
                                            );
                                            b.mov_to(v[0], x[0]);
                                            b.mov_to(v[1], x[1]);
                                        });
                                        v
                                    }
                                };
                                vals.extend(v);
                            }
                        }
                        vals
                    };
                    if !pair {
                        let v0 = load(b, s, None);
                        for (idx, sum) in sums.iter().enumerate() {
                            let added = b.add(*sum, v0[idx]);
                            b.mov_to(*sum, added);
                        }
                        return;
                    }
                    let s1 = b.add(s, 1u32);
                    let has1 = b.setp(Cmp::Lt, s1, splits);
                    let v0 = load(b, s, None);
                    let v1 = load(b, s1, Some(has1));
                    for (idx, sum) in sums.iter().enumerate() {
                        let added = b.add(*sum, v0[idx]);
                        b.mov_to(*sum, added);
                    }
                    for (idx, sum) in sums.iter().enumerate() {
                        let added = b.add(*sum, v1[idx]);
                        let kept = b.selp(added, *sum, has1);
                        b.mov_to(*sum, kept);
                    }
                });
                write_tile(b, cm, row0, &sums);
                b.if_then(t0, |b| b.st(Space::Global, caddr, 0u32));
            });
        },
    );
    Module::single(target, b.finish())
}

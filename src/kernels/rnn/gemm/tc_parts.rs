//! Pieces shared by the tensor-core GEMMs (`tc`: A through registers, `tca`: A through a
//! `cp.async` ring): the split of an f32 into TF32 halves, one 16-deep step of 3xTF32 mma on a
//! lane's A values and the staged `Wt`, and the epilogue (tile to C, or split-K partials and
//! the last block's ordered sum). The kernels' frame (parameters, setup, W staging): see
//! `tc_frame`. Fragment layouts: see `tc`'s module notes.

use super::tc::TC_THREADS;
use super::tc_frame::{Lanes, Params};
use super::{BM, BN};
use crate::ptx::*;

/// hi and lo TF32 halves of an f32 value.
pub(super) fn split(b: &mut KernelBuilder, x: Reg<F32>) -> (Reg<B32>, Reg<B32>) {
    let hi = b.cvt_tf32(x);
    let hf = b.bitcast::<F32, B32>(hi);
    let r = b.sub(x, hf);
    (hi, b.cvt_tf32(r))
}

/// `acc += a b` in 3xTF32: small terms first.
fn mma3(
    b: &mut KernelBuilder,
    acc: [Reg<F32>; 4],
    a: ([Reg<B32>; 4], [Reg<B32>; 4]),
    w: ([Reg<B32>; 2], [Reg<B32>; 2]),
) {
    b.mma_tf32_m16n8k8(acc, a.1, w.0);
    b.mma_tf32_m16n8k8(acc, a.0, w.1);
    b.mma_tf32_m16n8k8(acc, a.0, w.0);
}

/// One 16-step of products on the lane's A values `u` (4 loads of 4) with the staged `Wt`
/// columns `kk0 ..` (`rd`: the lane's read address in `Wt`, row stride `ws` words): per mma k8
/// step s, split the 8 values it uses, then one 16-byte read of `Wt` per row (hi pair, lo pair)
/// and the tiles' mma.
pub(super) fn multiply_step(
    b: &mut KernelBuilder,
    tn: bool,
    acc: &[[Reg<F32>; 4]],
    u: &[[Reg<F32>; 4]],
    rd: &Addr,
    ws: u32,
    kk0: u32,
) {
    // One 16-step of products on the values `u` (4 loads of 4) with the chunk's columns kk0..:
    // per mma k8 step s, split the 8 values it uses, then one 16-byte read of `Wt` per row
    // (hi pair, lo pair) and the tiles' mma.
    for s in 0..2usize {
        // halves[h][e]: load h, value 2s + e (nn: row g + 8h, inner 4t + 2s + e; tn: inner
        // 4t + h, column 4g + ...; see below).
        let frag = |b: &mut KernelBuilder, row: u32| {
            let off = i64::from(4 * (row * ws + 2 * kk0 + 4 * s as u32));
            let v = b.ld_v4::<B32>(Space::Shared, rd.off(off));
            ([v[0], v[1]], [v[2], v[3]])
        };
        if tn {
            // Loads 2s and 2s + 1 (inner 4t + 2s, + 1), all four columns j.
            let halves: Vec<[(Reg<B32>, Reg<B32>); 4]> = u[2 * s..2 * s + 2]
                .iter()
                .map(|v| v.map(|x| split(b, x)))
                .collect();
            for i in 0..3u32 {
                let (xh, xl) = frag(b, 16 * i);
                let (yh, yl) = frag(b, 16 * i + 8);
                let ah = [xh[0], yh[0], xh[1], yh[1]];
                let al = [xl[0], yl[0], xl[1], yl[1]];
                for j in 0..4usize {
                    let wh_ = [halves[0][j].0, halves[1][j].0];
                    let wl_ = [halves[0][j].1, halves[1][j].1];
                    mma3(b, acc[i as usize * 4 + j], (ah, al), (wh_, wl_));
                }
            }
        } else {
            // Values 2s and 2s + 1 of every load h (rows g + 8h).
            let halves: Vec<[(Reg<B32>, Reg<B32>); 2]> = u
                .iter()
                .map(|v| [split(b, v[2 * s]), split(b, v[2 * s + 1])])
                .collect();
            for j in 0..6u32 {
                let (bh, bl) = frag(b, 8 * j);
                for mt in 0..2usize {
                    let (r0, r1) = (&halves[2 * mt], &halves[2 * mt + 1]);
                    let ah = [r0[0].0, r1[0].0, r0[1].0, r1[1].0];
                    let al = [r0[0].1, r1[0].1, r0[1].1, r1[1].1];
                    mma3(b, acc[mt * 6 + j as usize], (ah, al), (bh, bl));
                }
            }
        }
    }
}

/// The tile to C (one split) or to `partial[z]`, then the split-K count and the last block's
/// ordered sum.
pub(super) fn epilogue(
    b: &mut KernelBuilder,
    tn: bool,
    p: &Params,
    l: &Lanes,
    flag: &SharedArray<U32>,
    acc: &[[Reg<F32>; 4]],
) {
    let Lanes {
        t,
        g,
        tid,
        bx,
        bz,
        m0,
        wbase,
        ..
    } = *l;
    let (m, cm, partial, counters) = (p.m, p.c, p.partial, p.counters);
    let threads = TC_THREADS;
    b.comment("epilogue: the tile to C (one split) or to partial[z]");
    let write = |b: &mut KernelBuilder, base: Reg<U64>, row_off: Reg<U32>| {
        let t2 = b.shl(t, 1u32);
        if tn {
            // Tile (i, j): C[wbase + 8t + j (+4)][16 i + g (+8)].
            let r = b.add(wbase, row_off);
            let r = b.mad(t, 8u32, r);
            let e = b.mad(r, BN, g);
            let p = b.index_addr(base, e, 4);
            let p: Addr = p.into();
            for i in 0..3u32 {
                for j in 0..4u32 {
                    let c = acc[(i * 4 + j) as usize];
                    let at = |dr: u32, dn: u32| i64::from(4 * ((j + dr) * BN + 16 * i + dn));
                    b.st(Space::Global, p.off(at(0, 0)), c[0]);
                    b.st(Space::Global, p.off(at(4, 0)), c[1]);
                    b.st(Space::Global, p.off(at(0, 8)), c[2]);
                    b.st(Space::Global, p.off(at(4, 8)), c[3]);
                }
            }
        } else {
            // Tile (mt, j): C[wbase + 16 mt + g (+8)][8 j + 2t ..].
            let r = b.add(wbase, row_off);
            let r = b.add(r, g);
            let e = b.mad(r, BN, t2);
            let p = b.index_addr(base, e, 4);
            let p: Addr = p.into();
            for mt in 0..2u32 {
                for j in 0..6u32 {
                    let c = acc[(mt * 6 + j) as usize];
                    let at = |dr: u32| i64::from(4 * ((16 * mt + dr) * BN + 8 * j));
                    b.st_v2(Space::Global, p.off(at(0)), [c[0], c[1]]);
                    b.st_v2(Space::Global, p.off(at(8)), [c[2], c[3]]);
                }
            }
        }
    };
    let splits = b.ld_param(&p.splits);
    let single = b.setp(Cmp::Eq, splits, 1u32);
    b.if_else(
        single,
        |b| {
            let zero = b.mov(0u32);
            write(b, cm, zero)
        },
        |b| {
            let prow = b.mul(bz, m);
            write(b, partial, prow);
            b.comment("split-K: count the block in; the last block of the tile sums the partials");
            b.fence_acq_rel(Scope::Gpu);
            b.bar_sync();
            let t0 = b.setp(Cmp::Eq, tid, 0u32);
            let caddr = b.index_addr(counters, bx, 4);
            b.if_then(t0, |b| {
                let old = b.atom(Space::Global, AtomOp::Add, caddr, 1u32);
                let lastv = b.sub(splits, 1u32);
                let is_last = b.setp(Cmp::Eq, old, lastv);
                let f = b.selp(1u32, 0u32, is_last);
                b.st(Space::Shared, flag.at(0), f);
            });
            b.bar_sync();
            let f = b.ld::<U32>(Space::Shared, flag.at(0));
            let am_last = b.setp(Cmp::Eq, f, 1u32);
            b.if_then(am_last, |b| {
                b.fence_acq_rel(Scope::Gpu);
                // The block's 128 x 48 outputs are contiguous: float4 tid + 128 q (q < 12),
                // summed over z = 0 .. S in order.
                let quads = BM * BN / 4 / threads;
                let sums: Vec<[Reg<F32>; 4]> =
                    (0..quads).map(|_| [0; 4].map(|_| b.mov(0.0f32))).collect();
                let e0 = b.mad(m0, BN, 0u32);
                let e0 = b.mad(tid, 4u32, e0);
                let mbn = b.mul(m, BN);
                b.for_range(0u32, splits, 1u32, |b, z, _| {
                    let ez = b.mad(z, mbn, e0);
                    let p: Addr = b.index_addr(partial, ez, 4).into();
                    let vs: Vec<[Reg<F32>; 4]> = (0..quads)
                        .map(|q| b.ld_v4::<F32>(Space::Global, p.off(i64::from(16 * threads * q))))
                        .collect();
                    for (s, v) in sums.iter().zip(&vs) {
                        for q in 0..4 {
                            let n = b.add(s[q], v[q]);
                            b.mov_to(s[q], n);
                        }
                    }
                });
                let pc: Addr = b.index_addr(cm, e0, 4).into();
                for (q, s) in sums.iter().enumerate() {
                    b.st_v4(
                        Space::Global,
                        pc.off(i64::from(16 * threads * q as u32)),
                        *s,
                    );
                }
                b.if_then(t0, |b| b.st(Space::Global, caddr, 0u32));
            });
        },
    );
}

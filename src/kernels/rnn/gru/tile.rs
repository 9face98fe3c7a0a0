//! The shared-memory GRU kernel's block-level mat-vec: `out[b][r] = (bias[r] +) sum_k src[b][k] w[r][k]` for
//! the block's batch rows (`Bp`, a multiple of 4) and weight rows (`R`, a multiple of 6), with
//! `src` (`Bp x K`) and `w` (`R x K`) row-major in shared memory and `K % 128 == 0`.
//!
//! Work split: a tile is 4 batch rows x 6 weight rows (24 outputs); warp w takes tiles w, w + 8,
//! .... Lane l owns the k in {4l + 128c + i : i < 4}: per 128-wide chunk it loads 4 float4 of
//! `src` and 6 float4 of `w` (a warp reads 512 contiguous bytes per load: no bank conflicts) and
//! does 96 fmas (k ascending per output). The 32 lanes' partial sums are then reduced by a
//! transposing butterfly: at xor distance 16, 8, 4 each lane keeps half of its values and adds
//! the partner's copy of that half (24 -> 12 -> 6 -> 3 values, 21 shuffles), then a plain
//! butterfly at distance 2 and 1 finishes the 3 values (6 shuffles). Lane l ends with outputs
//! `base .. base + 3` of the tile, `base = 12 b4 + 6 b3 + 3 b2` (bits of l), i.e. batch row
//! `2 b4 + b3` and weight rows `3 b2 ..`; lanes with `l % 4 == 0` store them.
//!
//! Also [`copy_rows`]: global rows to shared memory, float4 per thread, several loads in flight.

use super::THREADS;
use crate::ptx::*;

/// float4 copies each thread issues before it stores any (loads in flight together; 12 spill
/// at the rollout kernel's 128 registers).
const UNROLL: u32 = 8;

/// `row_elem(b, r)`: the element index of source row r's first float.
pub type RowElem<'a> = dyn Fn(&mut KernelBuilder, Reg<U32>) -> Reg<U32> + 'a;

/// A copy of `rows` rows of `k` floats (k % 4 == 0) from global `src` (row r starts at element
/// `row_elem(r)`, read through the non-coherent cache) to shared offset `dst` (floats).
pub struct RowCopy<'a> {
    /// The block's dynamic shared array.
    pub smem: &'a SharedArray<F32>,
    /// Destination offset (floats).
    pub dst: Reg<U32>,
    /// Destination row stride (floats, a multiple of 4, at least k); `None`: k.
    pub dst_stride: Option<Reg<U32>>,
    /// Rows to copy.
    pub rows: Reg<U32>,
    /// Floats per row.
    pub k: Reg<U32>,
    /// Global source base.
    pub src: Reg<U64>,
    /// Element index of a row's first float.
    pub row_elem: &'a RowElem<'a>,
}

/// Runs `copy` with the whole block (`tid`: the thread's index). Each thread issues up to
/// `UNROLL` (8) float4 loads, then their stores, so one L2 round trip covers each group.
pub fn copy_rows(b: &mut KernelBuilder, tid: Reg<U32>, copy: &RowCopy<'_>) {
    let stride = copy.dst_stride.unwrap_or(copy.k);
    let k4 = b.shr(copy.k, 2u32);
    let total = b.mul(copy.rows, k4);
    b.for_range(tid, total, THREADS * UNROLL, |b, base, _| {
        let mut pending = Vec::with_capacity(UNROLL as usize);
        for u in 0..UNROLL {
            let idx = b.add(base, THREADS * u);
            let live = b.setp(Cmp::Lt, idx, total);
            let r = b.div(idx, k4);
            let c = b.rem(idx, k4);
            let c = b.shl(c, 2u32);
            let se = b.mad(r, stride, c);
            let se = b.add(se, copy.dst);
            let sa = b.shared_index(copy.smem, se);
            let start = (copy.row_elem)(b, r);
            let e = b.add(start, c);
            let ga = b.index_addr(copy.src, e, 4);
            let mut v = None;
            b.guarded(live, false, |b| {
                v = Some(b.ld_v4::<F32>(Space::GlobalNc, ga))
            });
            pending.push((v.expect("the closure always runs"), live, sa));
        }
        for (v, live, sa) in pending {
            b.guarded(live, false, |b| b.st_v4(Space::Shared, sa, v));
        }
    });
}

/// `bias_of(b, r)`: the global address of weight row `r`'s f32 bias.
pub type BiasAddr<'a> = dyn Fn(&mut KernelBuilder, Reg<U32>) -> Reg<U64> + 'a;

/// Where a mat-vec reads and writes (offsets in floats into the dynamic shared array).
pub struct MatVec<'a> {
    /// The block's dynamic shared array.
    pub smem: &'a SharedArray<F32>,
    /// Offset of the input rows (`Bp x K`, row-major).
    pub src: Reg<U32>,
    /// Offset of the weight rows (`R x K`, row-major).
    pub w: Reg<U32>,
    /// Offset of the output (`Bp x R`).
    pub out: Reg<U32>,
    /// Inner length K (multiple of 128).
    pub k: Reg<U32>,
    /// Batch rows Bp (multiple of 4).
    pub rows: Reg<U32>,
    /// Weight rows R (multiple of 6).
    pub wrows: Reg<U32>,
    /// Optional global f32 bias with one value per weight row (`bias_of(b, r)` gives its address).
    pub bias: Option<&'a BiasAddr<'a>>,
}

/// Emits the mat-vec for the calling block (all threads; no barrier inside).
pub fn matvec(b: &mut KernelBuilder, mv: &MatVec<'_>, lane: Reg<U32>, warp: Reg<U32>) {
    let nbq = b.shr(mv.rows, 2u32);
    let nrg = b.div(mv.wrows, 6u32);
    let ntiles = b.mul(nbq, nrg);
    let nchunks = b.shr(mv.k, 7u32);
    let lane4 = b.shl(lane, 2u32);
    b.for_range(warp, ntiles, 8u32, |b, tile, _| {
        let bq = b.rem(tile, nbq);
        let rg = b.div(tile, nbq);
        let row0 = b.shl(bq, 2u32);
        let wrow0 = b.mul(rg, 6u32);
        let acc: Vec<Reg<F32>> = (0..24).map(|_| b.mov(0.0f32)).collect();
        // Byte addresses of this lane's first float4 in each source row and weight row.
        let src_row = b.mad(row0, mv.k, lane4);
        let src_row = b.add(src_row, mv.src);
        let w_row = b.mad(wrow0, mv.k, lane4);
        let w_row = b.add(w_row, mv.w);
        let sa0 = b.shared_index(mv.smem, src_row);
        let wa0 = b.shared_index(mv.smem, w_row);
        let kbytes = b.shl(mv.k, 2u32);
        b.for_range(0u32, nchunks, 1u32, |b, c, _| {
            let off = b.shl(c, 9u32); // 128 floats
            let sa = b.add(sa0, off);
            let wa = b.add(wa0, off);
            let mut h = Vec::with_capacity(4);
            let mut addr = sa;
            for bb in 0..4 {
                if bb > 0 {
                    addr = b.add(addr, kbytes);
                }
                h.push(b.ld_v4::<F32>(Space::Shared, addr));
            }
            let mut w = Vec::with_capacity(6);
            let mut addr = wa;
            for rr in 0..6 {
                if rr > 0 {
                    addr = b.add(addr, kbytes);
                }
                w.push(b.ld_v4::<F32>(Space::Shared, addr));
            }
            for i in 0..4 {
                for bb in 0..4 {
                    for rr in 0..6 {
                        let s = b.fma(h[bb][i], w[rr][i], acc[bb * 6 + rr]);
                        b.mov_to(acc[bb * 6 + rr], s);
                    }
                }
            }
        });
        let vals = transpose_reduce(b, &acc, lane);
        let b4 = b.bfe(lane, 4u32, 1u32);
        let b3 = b.bfe(lane, 3u32, 1u32);
        let b2 = b.bfe(lane, 2u32, 1u32);
        let brow = b.mad(b4, 2u32, b3);
        let brow = b.add(brow, row0);
        let r0 = b.mul(b2, 3u32);
        let r0 = b.add(r0, wrow0);
        let low = b.and(lane, 3u32);
        let writer = b.setp(Cmp::Eq, low, 0u32);
        b.if_then(writer, |b| {
            for (i, &v) in vals.iter().enumerate() {
                let r = b.add(r0, i as u32);
                let v = match mv.bias {
                    Some(bias_of) => {
                        let ba = bias_of(b, r);
                        let bv = b.ld::<F32>(Space::GlobalNc, ba);
                        b.add(v, bv)
                    }
                    None => v,
                };
                let e = b.mad(brow, mv.wrows, r);
                let e = b.add(e, mv.out);
                let a = b.shared_index(mv.smem, e);
                b.st(Space::Shared, a, v);
            }
        });
    });
}

/// 24 per-lane values -> 3 fully reduced values per lane (see the module notes).
fn transpose_reduce(b: &mut KernelBuilder, acc: &[Reg<F32>], lane: Reg<U32>) -> Vec<Reg<F32>> {
    let mut v: Vec<Reg<F32>> = acc.to_vec();
    for dist in [16u32, 8, 4] {
        let half = v.len() / 2;
        let bit = b.and(lane, dist);
        let upper = b.setp(Cmp::Ne, bit, 0u32);
        let mut next = Vec::with_capacity(half);
        for i in 0..half {
            let send = b.selp(v[i], v[i + half], upper);
            let keep = b.selp(v[i + half], v[i], upper);
            let recv = b.shfl(Shfl::Xor, send, dist);
            next.push(b.add(keep, recv));
        }
        v = next;
    }
    for dist in [2u32, 1] {
        v = v
            .iter()
            .map(|&x| {
                let o = b.shfl(Shfl::Xor, x, dist);
                b.add(x, o)
            })
            .collect();
    }
    v
}

//! One BK slice of `rnn_gemm_*`: its global loads into registers and its stores into one of the
//! two shared buffers (see `gemm`'s module notes).

use super::{a_tile_len, Ctx, Fragments, OpA, Shape, ASN_STRIDE, AS_STRIDE, BK, BM, BN};
use crate::ptx::*;

fn ld_v4_if(b: &mut KernelBuilder, addr: Reg<U64>, pred: Option<Reg<Pred>>) -> [Reg<F32>; 4] {
    match pred {
        None => b.ld_v4::<F32>(Space::GlobalNc, addr),
        Some(p) => {
            let mut out = None;
            b.guarded(p, false, |b| {
                out = Some(b.ld_v4::<F32>(Space::GlobalNc, addr))
            });
            out.expect("the closure always runs")
        }
    }
}

/// Global loads of one BK slice starting at inner index `k0`: `BM BK / 4 / threads` float4 of A
/// and `ceil(BK BN / 4 / threads)` of B (the last only for the threads it covers), all
/// predicated on `pred` when given. With 256 threads: 4 of A, 2 of B (the second for t < 128).
pub(super) fn load_slice(
    b: &mut KernelBuilder,
    c: &Ctx,
    k0: Reg<U32>,
    pred: Option<Reg<Pred>>,
) -> Fragments {
    let lane = b.and(c.tid, 31u32);
    let w = b.shr(c.tid, 5u32);
    let (warps, groups) = (c.shape.warps(), c.shape.row_groups());
    let mut av = Vec::new();
    for j in 0..a_loads(c.shape) {
        let idx = if c.op == OpA::Transposed {
            // A^T: row k0 + w + warps j of A, columns m0 + 4 lane ..
            let kr = b.add(k0, w);
            let kr = b.add(kr, warps * j);
            let col = b.shl(lane, 2u32);
            let col = b.add(col, c.m0);
            b.mad(kr, c.lda, col)
        } else {
            // A: row m0 + t / 8 + groups j, columns k0 + 4 (t % 8) .. (a warp reads 4 rows x
            // 128 contiguous bytes).
            let base = b.add(c.nn_ld, k0);
            b.mad(c.lda, groups * j, base)
        };
        let addr = b.index_addr(c.a, idx, 4);
        av.push(ld_v4_if(b, addr, pred));
    }
    let mut bv = Vec::new();
    let t = c.shape.threads;
    let (full, last) = b_loads(c.shape);
    let tail = (last < t).then(|| {
        let low = b.setp(Cmp::Lt, c.tid, last);
        match pred {
            Some(p) => b.and(p, low),
            None => low,
        }
    });
    for j in 0..full {
        let idx = b.add(c.tid, t * j);
        let row = b.div(idx, 12u32);
        let chunk = b.rem(idx, 12u32);
        let kr = b.add(k0, row);
        let col = b.mad(chunk, 4u32, c.n0);
        let e = b.mad(kr, c.n, col);
        let addr = b.index_addr(c.bm, e, 4);
        let p = if j + 1 == full { tail.or(pred) } else { pred };
        bv.push(ld_v4_if(b, addr, p));
    }
    (av, bv)
}

/// float4 loads of A per thread and slice.
fn a_loads(shape: Shape) -> u32 {
    BM * BK / 4 / shape.threads
}

/// float4 loads of B per thread and slice, and how many threads take the last one.
fn b_loads(shape: Shape) -> (u32, u32) {
    let quads = BK * BN / 4;
    let full = quads.div_ceil(shape.threads);
    (full, quads - (full - 1) * shape.threads)
}

/// The two shared tiles (each two buffers): op(A) and B.
pub(super) struct Tiles<'a> {
    pub a: &'a SharedArray<F32>,
    pub b: &'a SharedArray<F32>,
}

/// Stores a loaded slice into buffer `buf` (0 or 1, a register) of the staged tiles.
pub(super) fn store_slice(
    b: &mut KernelBuilder,
    c: &Ctx,
    tiles: &Tiles<'_>,
    buf: Reg<U32>,
    slice: &Fragments,
) {
    let (a_sh, b_sh) = (tiles.a, tiles.b);
    let (av, bv) = slice;
    let lane = b.and(c.tid, 31u32);
    let w = b.shr(c.tid, 5u32);
    let (warps, groups, t) = (c.shape.warps(), c.shape.row_groups(), c.shape.threads);
    let a_off = b.mul(buf, a_tile_len(c.op));
    let b_off = b.mul(buf, BK * BN);
    for (j, v) in av.iter().enumerate() {
        let e = if c.op == OpA::Transposed {
            let k = b.add(w, warps * j as u32);
            let col = b.shl(lane, 2u32);
            b.mad(k, AS_STRIDE, col)
        } else {
            b.add(c.nn_st, groups * ASN_STRIDE * j as u32)
        };
        let e = b.add(e, a_off);
        let addr = b.shared_index(a_sh, e);
        b.st_v4(Space::Shared, addr, *v);
    }
    let (full, last) = b_loads(c.shape);
    for (j, v) in bv.iter().enumerate() {
        let idx = b.add(c.tid, t * j as u32);
        let row = b.div(idx, 12u32);
        let chunk = b.rem(idx, 12u32);
        let col = b.shl(chunk, 2u32);
        let e = b.mad(row, BN, col);
        let e = b.add(e, b_off);
        let addr = b.shared_index(b_sh, e);
        if j + 1 < full as usize || last == t {
            b.st_v4(Space::Shared, addr, *v);
        } else {
            let has = b.setp(Cmp::Lt, c.tid, last);
            b.guarded(has, false, |b| b.st_v4(Space::Shared, addr, *v));
        }
    }
}

//! One BK slice of `rnn_gemm_*`: its global loads into registers and its stores into one of the
//! two shared buffers (see `gemm`'s module notes).

use super::{a_tile_len, Ctx, Fragments, OpA, ASN_STRIDE, AS_STRIDE, BK, BN};
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

/// Global loads of one BK slice starting at inner index `k0`: 4 float4 of A, 2 float4 of B (the
/// second only for threads < 128), all predicated on `pred` when given.
pub(super) fn load_slice(
    b: &mut KernelBuilder,
    c: &Ctx,
    k0: Reg<U32>,
    pred: Option<Reg<Pred>>,
) -> Fragments {
    let lane = b.and(c.tid, 31u32);
    let w = b.shr(c.tid, 5u32);
    let mut av = Vec::new();
    for j in 0..4u32 {
        let idx = if c.op == OpA::Transposed {
            // A^T: row k0 + w + 8j of A, columns m0 + 4 lane ..
            let kr = b.add(k0, w);
            let kr = b.add(kr, 8 * j);
            let col = b.shl(lane, 2u32);
            let col = b.add(col, c.m0);
            b.mad(kr, c.lda, col)
        } else {
            // A: row m0 + t / 8 + 32 j, columns k0 + 4 (t % 8) .. (a warp reads 4 rows x 128
            // contiguous bytes).
            let base = b.add(c.nn_ld, k0);
            b.mad(c.lda, 32 * j, base)
        };
        let addr = b.index_addr(c.a, idx, 4);
        av.push(ld_v4_if(b, addr, pred));
    }
    let mut bv = Vec::new();
    let low = b.setp(Cmp::Lt, c.tid, 128u32);
    let second = match pred {
        Some(p) => b.and(p, low),
        None => low,
    };
    for j in 0..2u32 {
        let idx = b.add(c.tid, 256 * j);
        let row = b.div(idx, 12u32);
        let chunk = b.rem(idx, 12u32);
        let kr = b.add(k0, row);
        let col = b.mad(chunk, 4u32, c.n0);
        let e = b.mad(kr, c.n, col);
        let addr = b.index_addr(c.bm, e, 4);
        bv.push(ld_v4_if(b, addr, if j == 0 { pred } else { Some(second) }));
    }
    (av, bv)
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
    let a_off = b.mul(buf, a_tile_len(c.op));
    let b_off = b.mul(buf, BK * BN);
    for (j, v) in av.iter().enumerate() {
        let e = if c.op == OpA::Transposed {
            let k = b.add(w, 8 * j as u32);
            let col = b.shl(lane, 2u32);
            b.mad(k, AS_STRIDE, col)
        } else {
            b.add(c.nn_st, 32 * ASN_STRIDE * j as u32)
        };
        let e = b.add(e, a_off);
        let addr = b.shared_index(a_sh, e);
        b.st_v4(Space::Shared, addr, *v);
    }
    for (j, v) in bv.iter().enumerate() {
        let idx = b.add(c.tid, 256 * j as u32);
        let row = b.div(idx, 12u32);
        let chunk = b.rem(idx, 12u32);
        let col = b.shl(chunk, 2u32);
        let e = b.mad(row, BN, col);
        let e = b.add(e, b_off);
        let addr = b.shared_index(b_sh, e);
        if j == 0 {
            b.st_v4(Space::Shared, addr, *v);
        } else {
            let has = b.setp(Cmp::Lt, c.tid, 128u32);
            b.guarded(has, false, |b| b.st_v4(Space::Shared, addr, *v));
        }
    }
}

//! The pair loop of `gaussian_forward_fast_f32`'s expanded form (`super::forward_fast`): the
//! tile's records (shared) x this thread's points (registers).

use super::common::KFloat;
use super::forward_fast::{Options, FAST_STRIDE, PACKED_STRIDE};
use crate::ptx::*;

/// The expanded pairs of the tile's `count` records in `ftile` with the points `xt` (relative
/// to the origin), adding to `acc` (one per point).
pub(super) fn expanded_pairs(
    b: &mut KernelBuilder,
    ftile: &SharedArray<F32>,
    count: Reg<U32>,
    xt: &[[Reg<F32>; 3]],
    acc: &[Reg<F32>],
    opts: &Options,
) {
    b.comment("pairs: the expanded solve, the tile's Gaussians x this thread's points");
    // Walks the records by address (`count` is a multiple of CHUNK_ALIGN, so of
    // `unroll`): one add, compare and branch per pass.
    let stride = if opts.packed {
        PACKED_STRIDE
    } else {
        FAST_STRIDE
    };
    let a0 = b.shared_index(ftile, 0u32);
    let len = b.mul(count, stride * 4);
    let a_end = b.add(a0, len);
    let step = opts.unroll * stride * 4;
    b.for_range(a0, a_end, step, |b, a, _| {
        let mut recs = Vec::new();
        if opts.packed {
            // Two records in five vector loads.
            for u in 0..opts.unroll / 2 {
                let at = Addr::from(a).off(i64::from(u * 2 * PACKED_STRIDE * 4));
                let mut v = Vec::new();
                for k in 0..5 {
                    let q = b.ld_v4::<F32>(Space::Shared, at.clone().off(16 * k));
                    v.extend(q);
                }
                recs.push(v[..10].to_vec());
                recs.push(v[10..].to_vec());
            }
        }
        for u in 0..opts.unroll {
            let [m00, m10, m11, m20, m21, m22, nb0, nb1, nb2, wn] = if opts.packed {
                std::array::from_fn(|k| recs[u as usize][k])
            } else {
                let at = Addr::from(a).off(i64::from(u * FAST_STRIDE * 4));
                let [m00, m10, m11, m20] = b.ld_v4::<F32>(Space::Shared, at.clone());
                let [m21, m22, nb0, nb1] = b.ld_v4::<F32>(Space::Shared, at.clone().off(16));
                let [nb2, wn] = b.ld_v2::<F32>(Space::Shared, at.off(32));
                [m00, m10, m11, m20, m21, m22, nb0, nb1, nb2, wn]
            };
            for p in 0..xt.len() {
                let [x0, x1, x2] = xt[p];
                let v0 = b.fma(m00, x0, nb0);
                let s1 = b.fma(m11, x1, nb1);
                let v1 = b.fma(m10, x0, s1);
                let s2 = b.fma(m22, x2, nb2);
                let s2 = b.fma(m21, x1, s2);
                let v2 = b.fma(m20, x0, s2);
                let t = b.fma(v0, v0, F32::imm(F32::EXP2_OFFSET));
                let t = b.fma(v1, v1, t);
                let t = b.fma(v2, v2, t);
                let e = F32::exp2_neg(b, t);
                let s = b.fma(wn, e, acc[p]);
                b.mov_to(acc[p], s);
            }
        }
    });
}

/// [`expanded_pairs`] with the first `n` points only, for n = `from`.. below the kernel's
/// points per thread, chosen by `live` (block-uniform, 1 <= live < points per thread): a chain of
/// branches, one loop per count.
#[allow(clippy::too_many_arguments)]
pub(super) fn partial_pairs(
    b: &mut KernelBuilder,
    live: Reg<U32>,
    from: u32,
    ftile: &SharedArray<F32>,
    count: Reg<U32>,
    xt: &[[Reg<F32>; 3]],
    acc: &[Reg<F32>],
    opts: &Options,
) {
    let n = from as usize;
    if from + 1 >= opts.points_per_thread {
        expanded_pairs(b, ftile, count, &xt[..n], &acc[..n], opts);
        return;
    }
    let here = b.setp(Cmp::Le, live, from);
    b.if_else(
        here,
        |b| expanded_pairs(b, ftile, count, &xt[..n], &acc[..n], opts),
        |b| partial_pairs(b, live, from + 1, ftile, count, xt, acc, opts),
    );
}

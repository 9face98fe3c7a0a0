//! Step 2 of the split variant ([`super::Variant::split_point`]): two warps per point, each
//! probing every other offset, their pair sums added through shared memory, then each warp's
//! part of the contributions (see [`super::point`] for the one-thread-per-point step).

use super::point::{add_point_part, transform, PairSums, Part};
use super::{Ctx, ACC_STRIDE};
use crate::ptx::*;

/// Step 2 of the split variant ([`super::Variant::split_point`]) for point `i` (when `valid`;
/// every thread of the block must call it): this warp's half of the probes, the two warps' pair
/// sums added through shared memory (`total = mine + partner's`, the same bits in both), then
/// this warp's part of the contributions.
pub(super) fn point_split(b: &mut KernelBuilder, cx: &Ctx, i: Reg<U32>, valid: Reg<Pred>) {
    let sp = cx
        .split
        .as_ref()
        .expect("the split variant has its context");
    let d = cx
        .dense
        .as_ref()
        .expect("the split variant probes the dense table");
    let sums = PairSums {
        e_sum: b.mov(0.0f64),
        g: [(); 3].map(|_| b.mov(0.0f64)),
        q: [(); 6].map(|_| b.mov(0.0f64)),
        found: b.mov(0u32),
    };
    let x = [(); 3].map(|_| b.mov(0.0f64));
    b.if_then(valid, |b| {
        let (xp, xt, cell, inside) = transform(b, cx, i);
        for k in 0..3 {
            b.mov_to(x[k], xp[k]);
        }
        b.if_then(inside, |b| {
            super::dense::dense_probes(b, cx, d, &sums, xt, cell)
        });
    });
    b.comment("split: the partner warp's pair sums (thread tid ^ 32)");
    let mine: Vec<Reg<F64>> = [sums.e_sum]
        .into_iter()
        .chain(sums.g)
        .chain(sums.q)
        .collect();
    let col = b.shared_index(&sp.xchg, sp.tid);
    for (k, v) in mine.iter().enumerate() {
        b.st(
            Space::Shared,
            Addr::from(col).off(k as i64 * ACC_STRIDE),
            *v,
        );
    }
    let fa = b.shared_index(&sp.xfound, sp.tid);
    b.st(Space::Shared, fa, sums.found);
    b.bar_sync();
    let partner = b.xor(sp.tid, 32u32);
    let pcol = b.shared_index(&sp.xchg, partner);
    let total: Vec<Reg<F64>> = mine
        .iter()
        .enumerate()
        .map(|(k, v)| {
            let o = b.ld::<F64>(Space::Shared, Addr::from(pcol).off(k as i64 * ACC_STRIDE));
            b.add(*v, o)
        })
        .collect();
    let pfa = b.shared_index(&sp.xfound, partner);
    let pf = b.ld::<U32>(Space::Shared, pfa);
    let found = b.or(sums.found, pf);
    b.bar_sync();
    let all = PairSums {
        e_sum: total[0],
        g: [total[1], total[2], total[3]],
        q: std::array::from_fn(|k| total[4 + k]),
        found,
    };
    let any = b.setp(Cmp::Ne, found, 0u32);
    let paired = b.and(valid, any);
    let first_half = b.setp(Cmp::Eq, sp.phase, 0u32);
    b.if_then(paired, |b| {
        b.if_else(
            first_half,
            |b| add_point_part(b, cx, x, &all, Part::First),
            |b| add_point_part(b, cx, x, &all, Part::Second),
        )
    });
}

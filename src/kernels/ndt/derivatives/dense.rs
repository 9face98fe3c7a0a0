//! Step 2's probes through the dense cell table (the dense [`super::Variant`]s): one load per
//! probe from the table, in groups whose loads are all in flight at once, then the pairs in
//! probe order (see [`super::point`]).

use super::point::{pair, pair_terms, probe_key, PairSums};
use super::{Ctx, DenseCtx, DENSE_GROUP};
use crate::ptx::*;

/// Dense cell table: the probes in groups of [`DENSE_GROUP`]; each group issues all its table
/// loads before any is used (one memory latency per group instead of one per probe), parks the
/// voxel indices in the thread's column of `cx.group`, then pairs them in probe order.
pub(super) fn dense_probes(
    b: &mut KernelBuilder,
    cx: &Ctx,
    d: &DenseCtx,
    sums: &PairSums,
    xt: [Reg<F64>; 3],
    cell: [Reg<S32>; 3],
) {
    b.comment("dense cell table: a group of probes loads its voxel indices at once");
    let cells = b.ld_param(&d.params.cells);
    let cells = b.to_global(cells);
    let origin = d.params.origin.clone().map(|p| b.ld_param(&p));
    let dims = d.params.dims.clone().map(|p| b.ld_param(&p));
    let last = b.sub(cx.probe_end, 1u32);
    // The thread's column of the group array: entry k at `col + k · COLUMN_STRIDE`.
    const COLUMN_STRIDE: u32 = 4 * super::BLOCK;
    let col = b.shared_index(&d.group, d.tid);
    // Linear probes: a point whose cell lies at least one cell inside the box on every axis
    // has all 26 neighbours in the box, so a probe's entry is the cell's entry plus the probe's
    // offset in the table (`d.linear`), with no per-probe bounds.
    let linear = d.linear.as_ref().map(|lin| {
        let mut interior: Option<Reg<Pred>> = None;
        let rel: [Reg<U32>; 3] = std::array::from_fn(|a| {
            // |cell|, |origin| < 2³⁰, so the difference fits s32.
            let r = b.sub(cell[a], origin[a]);
            let lo = b.setp(Cmp::Ge, r, 1i32);
            let dim = b.bitcast::<S32, U32>(dims[a]);
            let top = b.sub(dim, 1i32);
            let hi = b.setp(Cmp::Lt, r, top);
            let both = b.and(lo, hi);
            interior = Some(match interior {
                None => both,
                Some(p) => b.and(p, both),
            });
            b.bitcast::<U32, S32>(r)
        });
        let row = b.mad(rel[2], dims[1], rel[1]);
        let base = b.mad(row, dims[0], rel[0]);
        (interior.expect("three axes"), base, lin)
    });
    // The split variant: every other probe, from the warp's phase.
    let (start, step) = match &cx.split {
        None => (cx.probe_start, 1),
        Some(sp) => (b.add(cx.probe_start, sp.phase), 2),
    };
    b.for_range(start, cx.probe_end, DENSE_GROUP * step, |b, first, _| {
        // One bounded probe (the key, three bounds, the entry): the original path.
        let bounded = |b: &mut KernelBuilder, k: u32| {
            let o = b.add(first, k * step);
            let valid = b.setp(Cmp::Lt, o, cx.probe_end);
            // Past the end of the last group: read the last probe (in bounds), masked below.
            let o = b.min(o, last);
            let key = probe_key(b, cx, o, cell);
            let mut ok = valid;
            let rel: [Reg<U32>; 3] = std::array::from_fn(|a| {
                let r = b.sub(key[a], origin[a]);
                let r = b.bitcast::<U32, S32>(r);
                // Negative offsets wrap to large values and fail the bound too.
                let inside = b.setp(Cmp::Lt, r, dims[a]);
                ok = b.and(ok, inside);
                r
            });
            let row = b.mad(rel[2], dims[1], rel[1]);
            let at = b.mad(row, dims[0], rel[0]);
            let v = b.mov(-1i32);
            b.guarded(ok, false, |b| {
                let a = b.index_addr(cells, at, 4);
                let got = b.ld::<S32>(Space::GlobalNc, a);
                b.mov_to(v, got);
            });
            v
        };
        let found: [Reg<S32>; DENSE_GROUP as usize] = match &linear {
            // The Direct7-only build: fixed offsets (`probes7.rs`).
            None if cx.probes7 => super::probes7::direct7(b, cells, origin, dims, cell),
            None => std::array::from_fn(|k| bounded(b, k as u32)),
            Some((interior, base, lin)) => {
                let found = [(); DENSE_GROUP as usize].map(|_| b.mov(-1i32));
                b.if_else(
                    *interior,
                    |b| {
                        for (k, v) in found.iter().enumerate() {
                            let o = b.add(first, k as u32 * step);
                            let valid = b.setp(Cmp::Lt, o, cx.probe_end);
                            let o = b.min(o, last);
                            let la = b.shared_index(lin, o);
                            let off = b.ld::<S32>(Space::Shared, la);
                            let off = b.bitcast::<U32, S32>(off);
                            // Wraps to base − |offset| for negative offsets.
                            let at = b.add(*base, off);
                            b.guarded(valid, false, |b| {
                                let a = b.index_addr(cells, at, 4);
                                let got = b.ld::<S32>(Space::GlobalNc, a);
                                b.mov_to(*v, got);
                            });
                        }
                    },
                    |b| {
                        for (k, v) in found.iter().enumerate() {
                            let got = bounded(b, k as u32);
                            b.mov_to(*v, got);
                        }
                    },
                );
                found
            }
        };
        let end = if d.compact {
            // Hits only, in probe order, at the front of the column: the warp then pairs
            // max(hits per lane) times instead of once per probe that any lane hit.
            let at = b.mov(col);
            for v in found.iter() {
                let hit = b.setp(Cmp::Ne, *v, -1i32);
                b.guarded(hit, false, |b| b.st(Space::Shared, at, *v));
                let next = b.add(at, COLUMN_STRIDE);
                let next = b.selp(next, at, hit);
                b.mov_to(at, next);
            }
            b.sub(at, col)
        } else {
            for (k, v) in found.iter().enumerate() {
                let slot = Addr::from(col).off(i64::from(k as u32 * COLUMN_STRIDE));
                b.st(Space::Shared, slot, *v);
            }
            b.mov(DENSE_GROUP * COLUMN_STRIDE)
        };
        if d.compact && d.prefetch {
            // Software pipeline: the next hit's voxel record is requested before this hit's
            // terms are computed, so its load latency hides behind them.
            let ahead: [Reg<F64>; 9] = [(); 9].map(|_| b.mov(0.0f64));
            let any = b.setp(Cmp::Ne, end, 0u32);
            b.guarded(any, false, |b| {
                let v = b.ld::<S32>(Space::Shared, col);
                load_voxel_into(b, cx, v, &ahead);
            });
            b.for_range(0u32, end, COLUMN_STRIDE, |b, off, _| {
                let w: [Reg<F64>; 9] = ahead.map(|r| b.mov(r));
                let following = b.add(off, COLUMN_STRIDE);
                let more = b.setp(Cmp::Lt, following, end);
                b.guarded(more, false, |b| {
                    let slot = b.add(col, following);
                    let v = b.ld::<S32>(Space::Shared, slot);
                    load_voxel_into(b, cx, v, &ahead);
                });
                let next = b.label("probe_next");
                pair_terms(b, cx, sums, xt, &w, &next);
                b.place(&next);
            });
        } else if d.compact && cx.pair2 {
            super::pair2::pairs(b, cx, sums, xt, col, end, COLUMN_STRIDE);
        } else {
            b.for_range(0u32, end, COLUMN_STRIDE, |b, off, _| {
                let slot = b.add(col, off);
                let v = b.ld::<S32>(Space::Shared, slot);
                pair(b, cx, sums, xt, v);
            });
        }
    });
}

/// Loads voxel `v`'s record (mean, inverse covariance) into `w`.
fn load_voxel_into(b: &mut KernelBuilder, cx: &Ctx, v: Reg<S32>, w: &[Reg<F64>; 9]) {
    if cx.wide_records {
        let got = super::wide::load_record(b, cx, v);
        for (r, g) in w.iter().zip(got) {
            b.mov_to(*r, g);
        }
        return;
    }
    let vu = b.bitcast::<U32, S32>(v);
    let va: Addr = b.index_addr(cx.voxels, vu, 72).into();
    for (k, r) in w.iter().enumerate() {
        let x = b.ld::<F64>(Space::GlobalNc, va.off(8 * k as i64));
        b.mov_to(*r, x);
    }
}

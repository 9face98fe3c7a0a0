//! Direct7 probes of the dense cell table at fixed offsets ([`super::Variant::probes7`], a build
//! for Direct7 launches only: it ignores `probe_start` / `probe_count`, and the pipeline runs it
//! only when its search is Direct7): a point's seven table entries (probes `0..7` of
//! [`super::PROBES`]) are its cell's entry and the entries one cell away along each axis, so
//! instead of decoding each probe's offset word from shared memory and bounding all three
//! axes per probe, the cell's offsets in the box are bounded once and each neighbour moves one
//! axis (one add and one bound) and its entry by that axis's stride. The entries (and `−1` for
//! every probe outside the box) are exactly the generic path's, in the same order, so records
//! stay bit-identical.

use super::DENSE_GROUP;
use crate::ptx::*;

/// The seven voxel indices (−1: none) of the Direct7 probes around `cell`, in probe order, for
/// the dense table at `cells` with the box `origin + [0, dims)`. (A generic-probe fallback in
/// the same build for other searches raised the batch kernel from 96 to 127 registers on sm_90,
/// so the build serves Direct7 only.)
pub(super) fn direct7(
    b: &mut KernelBuilder,
    cells: Reg<U64>,
    origin: [Reg<S32>; 3],
    dims: [Reg<U32>; 3],
    cell: [Reg<S32>; 3],
) -> [Reg<S32>; DENSE_GROUP as usize] {
    b.comment("Direct7 probes at fixed offsets: bound the cell once, then one axis per probe");
    // |cell|, |origin| < 2³⁰: the differences fit s32; negative ones wrap and fail the bounds.
    let rel: [Reg<U32>; 3] = std::array::from_fn(|a| {
        let r = b.sub(cell[a], origin[a]);
        b.bitcast::<U32, S32>(r)
    });
    let ok: [Reg<Pred>; 3] = std::array::from_fn(|a| b.setp(Cmp::Lt, rel[a], dims[a]));
    // The bounds of the two axes a probe along `a` does not move.
    let others: [Reg<Pred>; 3] = [
        b.and(ok[1], ok[2]),
        b.and(ok[0], ok[2]),
        b.and(ok[0], ok[1]),
    ];
    let centre_ok = b.and(others[0], ok[0]);
    // The generic path's entry, `(rel_z · dims_y + rel_y) · dims_x + rel_x` (mod 2³²).
    let row = b.mad(rel[2], dims[1], rel[1]);
    let at = b.mad(row, dims[0], rel[0]);
    let stride = [None, Some(dims[0]), Some(b.mul(dims[0], dims[1]))];
    let load = |b: &mut KernelBuilder, ok: Reg<Pred>, at: Reg<U32>| {
        let v = b.mov(-1i32);
        b.guarded(ok, false, |b| {
            let a = b.index_addr(cells, at, 4);
            let got = b.ld::<S32>(Space::GlobalNc, a);
            b.mov_to(v, got);
        });
        v
    };
    let mut found = vec![load(b, centre_ok, at)];
    // Probes 1..7: +x, −x, +y, −y, +z, −z.
    for a in 0..3 {
        for up in [true, false] {
            let moved = if up {
                b.add(rel[a], 1u32)
            } else {
                b.sub(rel[a], 1u32)
            };
            let inside = b.setp(Cmp::Lt, moved, dims[a]);
            let valid = b.and(inside, others[a]);
            let entry = match (stride[a], up) {
                (None, true) => b.add(at, 1u32),
                (None, false) => b.sub(at, 1u32),
                (Some(s), true) => b.add(at, s),
                (Some(s), false) => b.sub(at, s),
            };
            found.push(load(b, valid, entry));
        }
    }
    std::array::from_fn(|k| found[k])
}

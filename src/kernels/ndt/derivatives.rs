//! `ndt_derivatives`: NDT score, gradient and Hessian of many (source cloud, pose) requests against
//! one voxel map, in one launch, fused per point and reduced on the device in f64.
//!
//! # Launch
//! Grid `(blocks_per_request, requests, 1)`, blocks of exactly [`BLOCK`] threads (`.reqntid`).
//! Block `(x, y)` serves request `y` and grid-strides over its points: point `i` is taken by
//! thread `i mod (BLOCK · blocks_per_request)`.
//!
//! # Memory
//! - `points`: source clouds as f32 `[x, y, z]` (12 bytes per point), concatenated;
//! - `voxels`: per voxel 9 f64 `[μx, μy, μz, C00, C01, C02, C11, C12, C22]` (mean in m, the upper
//!   triangle of the symmetric inverse covariance in 1/m²);
//! - `slots`: the CPU's `VoxelHash` table, `[ix, iy, iz, voxel]` as i32 (16 bytes, one vector
//!   load), `slot_mask = capacity − 1`; probed exactly as `ndt::voxel_hash` documents;
//! - request `y`: f64 `sin a, cos a, sin b, cos b, sin c, cos c, tx, ty, tz` then u32
//!   `first_point, point_count` — for `y = 0` in the `r0_*` parameters (a single-request launch
//!   reads no request memory), for `y ≥ 1` at `requests + y ·` [`REQUEST_BYTES`] in device memory
//!   (record 0 of that array is never read);
//! - `partials`: [`SLOT_VALUES`] f64 per (request, block), written once per launch;
//! - `counters`: one u32 per request, zero between launches (the last block resets it);
//! - `results`: [`VALUES`] f64 per request (may live in mapped host memory).
//!
//! # What each block does
//! 1. Thread 0 takes the request (parameters or memory) and computes `R` and its 9 angular derivative matrices from the
//!    sines and cosines ([`super::rotation`], CPU operation order) into shared memory, with the
//!    probe-offset table; barrier.
//! 2. Each thread, per point (`point.rs`): `x' = R x + t` (bit-identical to the CPU), voxel `c = floor(x' ·
//!    inv_resolution)` (no neighbours when |c| ≥ 2³⁰, as on the CPU), then for each probe offset `o`
//!    of the search mode (the CPU's tables and order) it probes the hash for `c + o`. For each
//!    voxel found (and, in radius mode, whose mean lies within the resolution) it adds, with
//!    `d = x' − μ`, `q = dᵀCd`, `e = exp(−d2 q / 2)` (pairs with `e` out of range are skipped as on
//!    the CPU): `E += e`, `G += e Cd`, `Q += e (C − d2 (Cd)(Cd)ᵀ)`. A point with at least one voxel
//!    then adds, with its Jacobian columns `j_k = (∂R/∂θ_k) x` and second-derivative columns
//!    `h_kl = (∂²R/∂θ_k∂θ_l) x`: `E` to the score sum, `[G, j_k·G]` to the gradient, and
//!    `JᵀQJ + [h_kl·G]` (21 upper-triangle entries, `J = [I | j_a j_b j_c]`) to the Hessian,
//!    which equals the CPU's per-pair sum because `J` and `h` do not depend on the voxel.
//!    Gradient and Hessian are scaled by `d1 d2` (the score by `−d1`) on the host.
//! 3. Reduction: the 29 per-thread sums (score, 6 gradient, 21 Hessian, correspondence count, all
//!    f64) are reduced over the block ([`super::reduce`]: warp reduce-scatter with shuffles, then
//!    shared memory) and stored as the block's partial; then one atomic per block on the
//!    request's counter. The block that arrives last sums all partials of the request in block
//!    order (deterministic, f64), writes the result and resets the counter.

use super::point::{point, Ctx};
use super::reduce::{block_reduce, WIDTH};
use super::rotation::*;
use crate::ptx::*;

/// Threads per block (required).
pub const BLOCK: u32 = 128;
/// Warps per block.
pub const WARPS: u32 = BLOCK / 32;
/// Values per result: score sum, 6 gradient, 21 Hessian (upper triangle, row-major), count.
pub const VALUES: usize = 29;
/// f64 values per partial slot (padded for alignment).
pub const SLOT_VALUES: usize = WIDTH;
/// Bytes per request record.
pub const REQUEST_BYTES: usize = 80;
/// Bytes per result record.
pub const RESULT_BYTES: usize = VALUES * 8;
/// Index of the score sum `Σ e` in a result.
pub const SCORE_INDEX: usize = 0;
/// Index of the first gradient entry in a result.
pub const GRADIENT_INDEX: usize = 1;
/// Index of the correspondence count in a result.
pub const COUNT_INDEX: usize = 28;
/// First probe of the Direct1/Direct7 table in [`PROBES`].
pub const PROBES_DIRECT7: u32 = 0;
/// First probe of the Direct27/Radius table in [`PROBES`].
pub const PROBES_DIRECT27: u32 = 7;
/// Largest |voxel index| (exclusive), as `ndt::voxel_grid::MAX_CELL_INDEX`.
pub const MAX_CELL_INDEX: f64 = (1u64 << 30) as f64;

/// Probe offsets: the Direct7 table (own voxel, then ±x, ±y, ±z), then the Direct27 table (own
/// voxel, then x-fastest over {−1, 0, 1}³ without the centre) — the CPU's tables and order.
pub const PROBES: [[i32; 3]; 34] = {
    let mut t = [[0i32; 3]; 34];
    let d7 = [
        [0, 0, 0],
        [1, 0, 0],
        [-1, 0, 0],
        [0, 1, 0],
        [0, -1, 0],
        [0, 0, 1],
        [0, 0, -1],
    ];
    let mut i = 0;
    while i < 7 {
        t[i] = d7[i];
        i += 1;
    }
    let mut n = 8; // t[7] is the Direct27 centre, [0, 0, 0]
    let mut z = -1;
    while z <= 1 {
        let mut y = -1;
        while y <= 1 {
            let mut x = -1;
            while x <= 1 {
                if !(x == 0 && y == 0 && z == 0) {
                    t[n] = [x, y, z];
                    n += 1;
                }
                x += 1;
            }
            y += 1;
        }
        z += 1;
    }
    t
};

/// Index of Hessian entry `(i, j)`, `i ≤ j < 6`, in a result.
pub const fn hessian_index(i: usize, j: usize) -> usize {
    7 + i * (13 - i) / 2 + (j - i)
}

/// Shared-memory index of the translation (after the ten 3×3 matrices).
pub(super) const TRANSLATION_AT: u32 = 90;

/// Builds the module.
pub fn build(target: Target) -> Module {
    let mut b = KernelBuilder::new("ndt_derivatives");
    b.reqntid(BLOCK, 1, 1);
    let p_points = b.param::<U64>("points");
    let p_voxels = b.param::<U64>("voxels");
    let p_slots = b.param::<U64>("slots");
    let p_mask = b.param::<U32>("slot_mask");
    let p_requests = b.param::<U64>("requests");
    let p_partials = b.param::<U64>("partials");
    let p_counters = b.param::<U64>("counters");
    let p_results = b.param::<U64>("results");
    let p_inv = b.param::<F64>("inv_resolution");
    let p_r2 = b.param::<F64>("radius_sq");
    let p_nhd2 = b.param::<F64>("neg_half_d2");
    let p_nd2 = b.param::<F64>("neg_d2");
    let p_pstart = b.param::<U32>("probe_start");
    let p_pcount = b.param::<U32>("probe_count");
    let p_radius = b.param::<U32>("radius_mode");

    let terms = b.shared_array::<F64>("terms", TRANSLATION_AT + 3);
    let info = b.shared_array::<U32>("info", 4);
    let probes = b.shared_array::<U32>("probes", PROBES.len() as u32);
    let part = b.shared_array::<F64>("part", WARPS * WIDTH as u32);

    let tid = b.special(Special::TidX);
    let blk = b.special(Special::CtaidX);
    let req = b.special(Special::CtaidY);
    let nblk = b.special(Special::NctaidX);
    let is0 = b.setp(Cmp::Eq, tid, 0u32);
    let requests = b.global_ptr(&p_requests);

    // Request 0 comes in the parameters (no memory read at all for single-request launches).
    let p_r0: Vec<Param<F64>> = [
        "r0_sa", "r0_ca", "r0_sb", "r0_cb", "r0_sc", "r0_cc", "r0_tx", "r0_ty", "r0_tz",
    ]
    .iter()
    .map(|n| b.param::<F64>(n))
    .collect();
    let p_r0_first = b.param::<U32>("r0_first");
    let p_r0_count = b.param::<U32>("r0_count");

    // 1. The request's terms, once per block.
    let mut pattern = None;
    b.if_then(is0, |b| {
        let w: Vec<Reg<F64>> = (0..9).map(|_| b.reg::<F64>()).collect();
        let (first, n) = (b.reg::<U32>(), b.reg::<U32>());
        let in_params = b.setp(Cmp::Eq, req, 0u32);
        b.if_else(
            in_params,
            |b| {
                for (k, p) in p_r0.iter().enumerate() {
                    let v = b.ld_param(p);
                    b.mov_to(w[k], v);
                }
                let f = b.ld_param(&p_r0_first);
                b.mov_to(first, f);
                let c = b.ld_param(&p_r0_count);
                b.mov_to(n, c);
            },
            |b| {
                let rq: Addr = b.index_addr(requests, req, REQUEST_BYTES as u32).into();
                for (k, &wk) in w.iter().enumerate() {
                    let v = b.ld::<F64>(Space::Global, rq.off(8 * k as i64));
                    b.mov_to(wk, v);
                }
                let f = b.ld::<U32>(Space::Global, rq.off(72));
                b.mov_to(first, f);
                let c = b.ld::<U32>(Space::Global, rq.off(76));
                b.mov_to(n, c);
            },
        );
        b.st(Space::Shared, info.at(0), first);
        b.st(Space::Shared, info.at(1), n);
        for (k, o) in PROBES.iter().enumerate() {
            let word = (o[0] + 1) as u32 | ((o[1] + 1) as u32) << 8 | ((o[2] + 1) as u32) << 16;
            b.st(Space::Shared, probes.at(k as u32), word);
        }
        let sc = SinCos {
            sa: w[0],
            ca: w[1],
            sb: w[2],
            cb: w[3],
            sc: w[4],
            cc: w[5],
        };
        let (mats, pat) = angle_matrices(b, &sc);
        for (m, mat) in mats.iter().enumerate() {
            for (e, s) in mat.iter().enumerate() {
                if let Sym::Reg { r, .. } = s {
                    b.st(Space::Shared, terms.at((9 * m + e) as u32), *r);
                }
            }
        }
        for k in 0..3 {
            b.st(Space::Shared, terms.at(TRANSLATION_AT + k as u32), w[6 + k]);
        }
        pattern = Some(pat);
    });
    b.bar_sync();

    // 2. Per-point work.
    let probe_start = b.ld_param(&p_pstart);
    let probe_count = b.ld_param(&p_pcount);
    let radius_mode = b.ld_param(&p_radius);
    let cx = Ctx {
        points: b.global_ptr(&p_points),
        voxels: b.global_ptr(&p_voxels),
        slots: b.global_ptr(&p_slots),
        slot_mask: b.ld_param(&p_mask),
        inv_resolution: b.ld_param(&p_inv),
        radius_sq: b.ld_param(&p_r2),
        neg_half_d2: b.ld_param(&p_nhd2),
        neg_d2: b.ld_param(&p_nd2),
        probe_start,
        probe_end: b.add(probe_start, probe_count),
        radius: b.setp(Cmp::Ne, radius_mode, 0u32),
        first: b.ld::<U32>(Space::Shared, info.at(0)),
        terms,
        probes,
        pattern: pattern.expect("the request block above always runs at build time"),
        acc: [(); VALUES - 1].map(|_| b.mov(0.0f64)),
        count: b.mov(0u32),
    };
    let n = b.ld::<U32>(Space::Shared, info.at(1));
    let start = b.mad(blk, BLOCK, tid);
    let stride = b.mul(nblk, BLOCK);
    b.for_range(start, n, stride, |b, i, _| point(b, &cx, i));

    // 3. Block partial, then the last block of the request reduces all partials.
    let count = b.cvt::<F64, U32>(cx.count);
    let zero = b.mov(0.0f64);
    let mut vals = [zero; WIDTH];
    vals[..VALUES - 1].copy_from_slice(&cx.acc);
    vals[COUNT_INDEX] = count;
    let total = block_reduce(&mut b, &vals, tid, WARPS, &part);

    let partials = b.global_ptr(&p_partials);
    let counters = b.global_ptr(&p_counters);
    let results = b.global_ptr(&p_results);
    let lead = b.setp(Cmp::Lt, tid, WIDTH as u32);
    let slot = b.mad(req, nblk, blk);
    b.if_then(lead, |b| {
        let k = b.mad(slot, SLOT_VALUES as u32, tid);
        let a = b.index_addr(partials, k, 8);
        b.st(Space::Global, a, total);
        b.fence_acq_rel(Scope::Gpu);
    });
    b.bar_sync();
    b.if_then(is0, |b| {
        let c = b.index_addr(counters, req, 4);
        let before = b.atom::<U32>(Space::Global, AtomOp::Add, c, 1u32);
        b.fence_acq_rel(Scope::Gpu);
        let last_index = b.sub(nblk, 1u32);
        let last = b.setp(Cmp::Eq, before, last_index);
        let flag = b.selp(1u32, 0u32, last);
        b.st(Space::Shared, info.at(2), flag);
    });
    b.bar_sync();
    let flag = b.ld::<U32>(Space::Shared, info.at(2));
    let is_last = b.setp(Cmp::Ne, flag, 0u32);
    // `is_last` is the same for the whole block, so the barrier inside block_reduce is safe.
    b.if_then(is_last, |b| {
        b.fence_acq_rel(Scope::Gpu);
        let sums: Vec<Reg<F64>> = (0..VALUES).map(|_| b.mov(0.0f64)).collect();
        let base = b.mul(req, nblk);
        b.for_range(tid, nblk, BLOCK, |b, j, _| {
            let s = b.add(base, j);
            let a: Addr = b.index_addr(partials, s, (SLOT_VALUES * 8) as u32).into();
            for (k, &acc) in sums.iter().enumerate() {
                let v = b.ld::<F64>(Space::Global, a.off(8 * k as i64));
                let t = b.add(acc, v);
                b.mov_to(acc, t);
            }
        });
        let mut vals = [zero; WIDTH];
        vals[..VALUES].copy_from_slice(&sums);
        let grand = block_reduce(b, &vals, tid, WARPS, &part);
        let writes = b.setp(Cmp::Lt, tid, VALUES as u32);
        b.if_then(writes, |b| {
            let k = b.mad(req, VALUES as u32, tid);
            let a = b.index_addr(results, k, 8);
            b.st(Space::Global, a, grand);
        });
        b.if_then(is0, |b| {
            let c = b.index_addr(counters, req, 4);
            b.st(Space::Global, c, 0u32);
        });
    });
    Module::single(target, b.finish())
}

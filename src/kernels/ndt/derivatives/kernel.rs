//! `ndt_derivatives`'s entry point: parameters and shared arrays, step 1 (the request's terms),
//! the per-point loop of step 2 (see [`super::point`]) and the reductions of step 3 (see the
//! module docs of [`super`]).

use super::mixed::{self, Mixed};
use super::point::point;
use super::server::{ServerParams, ServerRegs, STAMP_POINTS, STAMP_TERMS};
use super::solve_partials::{add_partials_xposed, partial_index};
use super::split::point_split;
use super::wide::acc_addr;
use super::{
    Ctx, DenseCtx, DenseParams, SplitCtx, Variant, BLOCK, COUNT_INDEX, DENSE_GROUP, PROBES,
    REQUEST_BYTES, SLOT_VALUES, SPLIT_POINTS_PER_BLOCK, TRANSLATION_AT, VALUES, WARPS,
};
use crate::kernels::ndt::reduce::{block_reduce, WIDTH};
use crate::kernels::ndt::rotation::*;
use crate::kernels::ndt::solve::{OPT_LEAN_FINAL, OPT_XPOSE_PARTIALS};
use crate::ptx::*;

/// Builds the module (the table's kernel: the default [`Variant`]).
pub fn build(target: Target) -> Module {
    build_variant(target, Variant::default())
}

/// Builds `ndt_derivatives_dense` ([`Variant::DENSE`]).
pub fn build_dense(target: Target) -> Module {
    build_entry(target, "ndt_derivatives_dense", Variant::DENSE)
}

/// Builds `ndt_derivatives_server` ([`Variant::SERVER`]).
pub fn build_server(target: Target) -> Module {
    build_entry(target, "ndt_derivatives_server", Variant::SERVER)
}

/// Builds `ndt_align_device` ([`Variant::SOLVE`] with the build options
/// `kernels::ndt::solve::TABLE_OPTS`).
pub fn build_align_device(target: Target) -> Module {
    super::build_align_device_opts(target, crate::kernels::ndt::solve::TABLE_OPTS)
}

/// Builds `ndt_derivatives_dense_small` ([`Variant::DENSE_SMALL`]).
pub fn build_dense_small(target: Target) -> Module {
    build_entry(target, "ndt_derivatives_dense_small", Variant::DENSE_SMALL)
}

/// Builds `ndt_derivatives_dense_cross` ([`Variant::DENSE_CROSS`]), the kernel of batch rounds.
pub fn build_dense_cross(target: Target) -> Module {
    build_entry(target, "ndt_derivatives_dense_cross", Variant::DENSE_CROSS)
}

/// Builds `ndt_derivatives_dense_cross7` ([`Variant::DENSE_CROSS7`]), the kernel of batch
/// rounds of pipelines that search Direct7.
pub fn build_dense_cross7(target: Target) -> Module {
    build_entry(
        target,
        "ndt_derivatives_dense_cross7",
        Variant::DENSE_CROSS7,
    )
}

/// Builds the module of one [`Variant`] (entry `ndt_derivatives`).
pub fn build_variant(target: Target, variant: Variant) -> Module {
    build_entry(target, "ndt_derivatives", variant)
}

pub(super) fn build_entry(target: Target, entry: &str, variant: Variant) -> Module {
    let mut b = KernelBuilder::new(entry);
    b.reqntid(BLOCK, 1, 1);
    if let Some(n) = variant.min_blocks_per_sm {
        b.minnctapersm(n);
    }
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
    let dense = variant.dense.then(|| DenseCtx {
        params: DenseParams {
            cells: b.param::<U64>("cells"),
            origin: ["cell_origin_x", "cell_origin_y", "cell_origin_z"].map(|n| b.param::<S32>(n)),
            dims: ["cell_dims_x", "cell_dims_y", "cell_dims_z"].map(|n| b.param::<U32>(n)),
        },
        group: b.shared_array::<S32>("group", DENSE_GROUP * BLOCK),
        tid,
        compact: variant.compact,
        prefetch: variant.prefetch,
        linear: variant
            .linear
            .then(|| b.shared_array::<S32>("linear", PROBES.len() as u32)),
    });
    let server = variant
        .server
        .then(|| ServerParams::declare(&mut b, variant.solve, variant.solve_opts));
    let mixed = (variant.mixed && variant.dense).then(|| Mixed::declare(&mut b, variant));
    let cross = (variant.cross && variant.dense && !variant.mixed && !variant.split_point)
        .then(|| super::cross::Cross::declare(&mut b));

    // Steps 1 to 3 for one request row; the server variant runs them once per request it
    // takes from the mailbox (`server.rs`).
    let serving = server
        .as_ref()
        .map(|p| ServerRegs::new(&mut b, p, &p_results, (&p_r0, &p_r0_first, &p_r0_count)));
    let srv = serving.as_ref();
    let steps = |b: &mut KernelBuilder| {
        // 1. The request's terms, once per block.
        b.comment("1. thread 0: the request (parameters or memory), R and its derivatives, probe table -> shared");
        let mut pattern = None;
        b.if_then(is0, |b| {
            let w: Vec<Reg<F64>> = (0..9).map(|_| b.reg::<F64>()).collect();
            let (first, n) = (b.reg::<U32>(), b.reg::<U32>());
            if let Some(s) = srv {
                s.read_request(b, &w, first, n);
            } else {
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
            }
            b.st(Space::Shared, info.at(0), first);
            b.st(Space::Shared, info.at(1), n);
            for (k, o) in PROBES.iter().enumerate() {
                let word = (o[0] + 1) as u32 | ((o[1] + 1) as u32) << 8 | ((o[2] + 1) as u32) << 16;
                b.st(Space::Shared, probes.at(k as u32), word);
            }
            if let Some(d) = &dense {
                if let Some(lin) = &d.linear {
                    let dx = b.ld_param(&d.params.dims[0]);
                    let dy = b.ld_param(&d.params.dims[1]);
                    let dxy = b.mul(dx, dy);
                    let (dx, dxy) = (b.bitcast::<S32, U32>(dx), b.bitcast::<S32, U32>(dxy));
                    for (k, o) in PROBES.iter().enumerate() {
                        let l = b.mad(dxy, o[2], o[0]);
                        let l = b.mad(dx, o[1], l);
                        b.st(Space::Shared, lin.at(k as u32), l);
                    }
                }
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
            // The mixed per-point code reads R only (its derivatives come from u_b, u_c).
            let stored = if mixed.is_some() || cross.is_some() {
                1
            } else {
                mats.len()
            };
            for (m, mat) in mats.iter().enumerate().take(stored) {
                for (e, s) in mat.iter().enumerate() {
                    if let Sym::Reg { r, .. } = s {
                        b.st(Space::Shared, terms.at((9 * m + e) as u32), *r);
                    }
                }
            }
            for k in 0..3 {
                b.st(Space::Shared, terms.at(TRANSLATION_AT + k as u32), w[6 + k]);
            }
            if let Some(m) = &mixed {
                m.store_terms(b, &w);
            }
            if let Some(c) = &cross {
                c.store(b, &w);
            }
            pattern = Some(pat);
        });
        b.bar_sync();
        if let Some(s) = srv {
            s.stamp_block0(b, STAMP_TERMS);
        }

        // 2. Per-point work.
        b.comment("2. per point (grid-stride): transform, voxel, probes, contributions");
        let probe_start = b.ld_param(&p_pstart);
        let probe_count = b.ld_param(&p_pcount);
        let radius_mode = b.ld_param(&p_radius);
        let acc_pairs = cross.is_some() && variant.shared_acc && variant.acc_pairs;
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
            acc_shared: variant.shared_acc.then(|| {
                let arr = b.shared_array::<F64>("acc", (VALUES as u32 - 1) * BLOCK);
                if acc_pairs {
                    super::wide::pair_column(b, &arr, tid)
                } else {
                    b.shared_index(&arr, tid)
                }
            }),
            count: b.mov(0u32),
            dense,
            cross: cross.as_ref().map(|c| c.regs(b, variant.late_loads)),
            wide_records: cross.is_some() && variant.wide_records,
            acc_pairs,
            probes7: variant.dense && !variant.linear && variant.probes7,
            pair2: variant.pair2 && !variant.prefetch && !variant.mixed,
            split: variant.split_point.then(|| {
                let w = b.shr(tid, 5u32);
                SplitCtx {
                    phase: b.and(w, 1u32),
                    tid,
                    xchg: b.shared_array::<F64>("xchg", 10 * BLOCK),
                    xfound: b.shared_array::<U32>("xfound", BLOCK),
                }
            }),
        };
        if let Some(col) = cx.acc_shared {
            for k in 0..VALUES - 1 {
                b.st(Space::Shared, acc_addr(col, k, cx.acc_pairs), 0.0f64);
            }
        }
        let n = b.ld::<U32>(Space::Shared, info.at(1));
        let mx = mixed.as_ref().map(|m| m.regs(b, &cx));
        if cx.split.is_some() {
            // Lane l of warps 2w and 2w + 1 share point 32 w + l of the block's pass.
            let lane = b.and(tid, 31u32);
            let pair = b.shr(tid, 6u32);
            let slot = b.mad(pair, 32u32, lane);
            let start = b.mul(blk, SPLIT_POINTS_PER_BLOCK);
            let stride = b.mul(nblk, SPLIT_POINTS_PER_BLOCK);
            // The pass bound is the same for the whole block (barriers inside).
            b.for_range(start, n, stride, |b, base, _| {
                let i = b.add(base, slot);
                let valid = b.setp(Cmp::Lt, i, n);
                point_split(b, &cx, i, valid);
            });
        } else if let Some(mx) = &mx {
            let start = b.mad(blk, BLOCK, tid);
            let stride = b.mul(nblk, BLOCK);
            b.for_range(start, n, stride, |b, i, _| mixed::point(b, &cx, mx, i));
        } else {
            let start = b.mad(blk, BLOCK, tid);
            let stride = b.mul(nblk, BLOCK);
            b.for_range(start, n, stride, |b, i, _| point(b, &cx, i));
        }
        if let Some(s) = srv {
            s.stamp_block0(b, STAMP_POINTS);
        }

        // 3. Block partial, then the last block of the request reduces all partials.
        b.comment("3. block reduction of the 29 sums");
        let count = b.cvt::<F64, U32>(cx.count);
        let zero = b.mov(0.0f64);
        let mut vals = [zero; WIDTH];
        match (cx.acc_shared, mx.as_ref().and_then(|m| m.acc32())) {
            (_, Some(acc32)) => {
                for (v, a) in vals[..VALUES - 1].iter_mut().zip(acc32) {
                    *v = b.cvt::<F64, F32>(*a);
                }
                if let Some(score) = mx.as_ref().and_then(|m| m.score_acc()) {
                    vals[0] = score;
                }
            }
            (Some(col), None) => {
                for (k, v) in vals[..VALUES - 1].iter_mut().enumerate() {
                    *v = b.ld::<F64>(Space::Shared, acc_addr(col, k, cx.acc_pairs));
                }
            }
            (None, None) => vals[..VALUES - 1].copy_from_slice(&cx.acc),
        }
        vals[COUNT_INDEX] = count;
        let total = block_reduce(b, &vals, tid, WARPS, &part);

        b.comment("3b. store the block partial, count the request's blocks");
        let partials = b.global_ptr(&p_partials);
        let counters = b.global_ptr(&p_counters);
        let results = b.global_ptr(&p_results);
        let lead = b.setp(Cmp::Lt, tid, WIDTH as u32);
        let slot = b.mad(req, nblk, blk);
        // The device solver's OPT_XPOSE_PARTIALS: value-major partials (one request).
        let xpose = srv.is_some_and(|s| s.solve_opt(OPT_XPOSE_PARTIALS));
        b.if_then(lead, |b| {
            let k = partial_index(b, xpose, tid, nblk, slot);
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
            let flag = match srv.filter(|s| s.solves()) {
                // The device solver: block 0 reduces (and solves) every time, once all blocks
                // have counted themselves (its instruction cache stays warm).
                Some(s) => s.block0_waits_for_all(b, c, last, nblk),
                None => b.selp(1u32, 0u32, last),
            };
            b.st(Space::Shared, info.at(2), flag);
        });
        b.bar_sync();
        b.comment("3c. the last block of the request sums all partials in block order");
        // (The device solver: block 0, after every block has counted itself.)
        let flag = b.ld::<U32>(Space::Shared, info.at(2));
        let is_last = b.setp(Cmp::Ne, flag, 0u32);
        // `is_last` is the same for the whole block, so the barrier inside block_reduce is safe.
        b.if_then(is_last, |b| {
            if let Some(s) = srv {
                s.stamp_last(b, is0);
            }
            if !srv.is_some_and(|s| s.solve_opt(OPT_LEAN_FINAL)) {
                b.fence_acq_rel(Scope::Gpu);
            }
            if let Some(s) = srv {
                s.stage_solver(b, tid);
            }
            let sums: Vec<Reg<F64>> = (0..VALUES).map(|_| b.mov(0.0f64)).collect();
            let base = b.mul(req, nblk);
            b.for_range(tid, nblk, BLOCK, |b, j, _| {
                let s = b.add(base, j);
                if xpose {
                    return add_partials_xposed(b, partials, s, nblk, &sums);
                }
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
            let solver_sums = srv.and_then(|s| s.solve_sums());
            b.if_then(writes, |b| match solver_sums {
                // The device solver reads them from shared memory (`ndt::solve`).
                Some(sums) => {
                    let at = b.shared_index(sums, tid);
                    b.st(Space::Shared, at, grand);
                }
                None => {
                    let k = b.mad(req, VALUES as u32, tid);
                    let a = b.index_addr(results, k, 8);
                    b.st(Space::Global, a, grand);
                }
            });
            b.if_then(is0, |b| {
                let c = b.index_addr(counters, req, 4);
                b.st(Space::Global, c, 0u32);
            });
            if let Some(s) = srv {
                s.publish(b, is0);
            }
        });
    };
    match &serving {
        None => steps(&mut b),
        Some(s) => s.serve(&mut b, info.clone(), steps),
    }
    Module::single(target, b.finish())
}

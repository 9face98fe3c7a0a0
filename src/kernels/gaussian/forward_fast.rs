//! `gaussian_forward_fast_f32`: the f32 fused forward of `super::forward` (same sums and output;
//! the launch below) with the per-pair solve expanded: 11 instructions per pair instead of 14.
//!
//! # The expanded solve
//! The forward's v' = L'^-1 (x - mu) (`super::scaled`: 3 subtractions, 3 products, 3 multiply-adds)
//! is affine in x: v' = M x - M mu with M = L'^-1 lower triangular. With a common origin o
//! subtracted from the points once (x~ = x - o, per point per launch) and b = M (mu - o) per
//! Gaussian, v'_k = sum_l M_kl x~_l - b_k is 6 multiply-adds (v0 = fma(M00, x~0, -b0), v1 =
//! fma(M10, x~0, fma(M11, x~1, -b1)), v2 = fma(M20, x~0, fma(M21, x~1, fma(M22, x~2, -b2)))),
//! then t = o_exp + |v'|^2 (3 multiply-adds), `ex2` and the weighted sum: 11 per pair. M is the
//! operator the subtract form applies, built from its f32 constants (sigma / a_k and -L_ab, see
//! `common`) in f64 and rounded once per entry; b = M (mu - o) in f64 with M's f32 entries, rounded
//! once (`crate::gaussian::gpu::fast`, staged on the host with the prepared Gaussians; o is
//! the centre of the means' bounding box, rounded to f32).
//!
//! # Error, and when the kernel keeps the subtract form
//! Write |.| elementwise and m = |M| |mu - o| (the largest terms that cancel in M x~ - b near the
//! mean). Rounding x~ (u |x~|), M and b (u each), and the up to three multiply-adds of a row
//! (u times the partial sums, each at most (|M| |x~|)_k + |b_k|) give, per component, |dv'_k| <=
//! 6 u ((|M| |x~|)_k + m_k) with u = 2^-24. Two cases per pair:
//! - far (|x~ - mu~| >= (|x~| + |mu~|) / 2 in the inf-norm): |M| |x~| + m <= 2 ||M||_inf |x~ - mu~|
//!   and |v'| >= |x~ - mu~| / ||M^-1||_inf, so |dv'| / |v'| <= 12 u kappa_inf(M): a relative
//!   error of the order of the subtract form's own (backward-stable solve, ~3 u kappa);
//! - near (otherwise, so |x~| < 3 |mu~|): |dv'_k| <= 24 u max_k m_k = 24 u G.
//!
//! The exponent then moves by dt <= 2 |v'| |dv'| + |dv'|^2 and each term by a relative ln(2) dt.
//! A Gaussian whose G = max_k m_k exceeds [`crate::gaussian::gpu::fast::FAST_G_LIMIT`] (or is not
//! finite) is flagged in its record; a tile of Gaussians with any flagged one runs the subtract
//! form of `super::forward` on the points reloaded from memory (results identical to the
//! built-in kernel's for that tile), every other tile the expanded form. With G <= 16 the near
//! case moves a term by at most ln(2) 2 |v'| 24 u 16 sqrt(3) ~ 1300 u |v'| relative in the worst
//! case (all roundings aligned); measured on the tests' sets the field errors stay at the subtract
//! form's (tests/gaussian_forward_fast.rs).
//!
//! # Launch and memory
//! Blocks of [`BLOCK`] threads, grid (ceil(B / (BLOCK P)), S) with P = [`POINTS_PER_THREAD`],
//! as `super::forward`, except for the Gaussian chunks: chunk c is Gaussians `starts[c] ..
//! starts[c + 1]` (parameter `starts`, a device table; lengths multiples of [`CHUNK_ALIGN`]),
//! which the field's plan makes shorter towards the end of the grid
//! (`crate::gaussian::gpu::fast_schedule`: blocks start in grid order, so the last wave is made
//! of short blocks and ends together; `chunk_len` is then unused). Per tile each thread stages
//! one Gaussian's expanded record (`ftile`: M00 M10 M11 M20 | M21 M22 -b0 -b1 | -b2 w c 2^o
//! flag 0, the layout of `fast`, [`FAST_STRIDE`] f32 per Gaussian); each warp's lane 0 writes
//! whether any of its Gaussians is flagged to `wflag`, and after the barrier every thread reads
//! the four words (one vector load) and takes the same branch. Only a flagged tile stages the
//! subtract form's scaled constants, into the same shared array (each thread over its own
//! record, then a barrier): computing them in every tile took ~6% of the warps' time (ncu
//! source counters, H100: their f64 conversions and the loads feeding them).
//!
//! With S > 1 chunks the kernel also adds the chunk rows (`forward_finish`): the last block of
//! each point block to finish (a per-point-block counter, parameter `counters`, zero between
//! launches) sums them in row order into `values`, bit for bit as `gaussian_reduce_rows`
//! would, so the forward is one launch. Parameters after the origin: `values`, `counters`,
//! `starts` (the built-in [`Options`]; variants without the fused sum or the table drop theirs).
//!
//! H100, 10000 x 100000, alternating in one process (three processes, gpu-results/s12/gfw-4.log):
//! 486.6-489.0 us against 506.2-508.1 us for session 11's build (variant `l0-f0-g0`: both forms
//! staged per tile, equal chunks, the row sums as a second launch); of that, the lazy staging
//! ~13 us, the schedule ~6 us, the fused sum ~0 (gfw-2/3.log). ncu: 11.96 instructions per pair
//! (11.97), warps active 23.7 of 24 (22.2), issue 77.5% (75.3%).

use super::common::*;
use super::forward::{BLOCK, CHUNK_ALIGN};
use super::forward_finish::{finish_rows, FinishParams};
pub use super::forward_options::{variant_options, Options, Schedule};
use super::forward_pairs::{expanded_pairs, partial_pairs};
use super::scaled::*;
use crate::ptx::*;

/// Points each thread owns.
pub const POINTS_PER_THREAD: u32 = 6;
/// f32 scalars per Gaussian of the expanded records (16-byte aligned).
pub const FAST_STRIDE: u32 = 12;
/// f32 scalars per Gaussian of the packed shared records (`Options::packed`: the first 10 of
/// a record, without the flag; 8-byte aligned, two records 16-byte aligned).
pub const PACKED_STRIDE: u32 = 10;
/// Offset of the flag (1.0: keep the subtract form for this Gaussian's tile) in a record.
pub const FAST_FLAG: u32 = 10;
/// Warps per block.
const WARPS: u32 = BLOCK / 32;
const _: () = assert!(WARPS == 4 && CHUNK_ALIGN.is_multiple_of(4));

/// The built-in module.
pub fn build_f32(target: Target) -> Module {
    build(target, Options::default())
}

/// A variant for comparisons (`PTXFLOW_GAUSS_FAST`, see `crate::gaussian::gpu::launch`): `p<N>`
/// points per thread, `r<N>` a register cap, `u<N>` Gaussians per pass, `t<K>` K x [`BLOCK`]
/// Gaussians per tile, `l1` the lazy subtract staging, `c1` the largest shared-memory carveout, `f1` the fused
/// row sum, `k1` packed shared records, `v1` the partial last point block,
/// `g<P>`/`m<N>`/`n<N>` the chunk schedule (guide percent, longest and shortest chunk; `g0`
/// none),
/// joined by `-` (`p8-u4`).
/// Same parameters and block. None for names it does not parse.
pub fn variant(name: &str) -> Option<Module> {
    variant_options(name).map(|o| build(Target::Sm75, o))
}

/// Loads point `i` (zeros unless `ok`).
fn load_point(
    b: &mut KernelBuilder,
    points: Reg<U64>,
    i: Reg<U32>,
    ok: Reg<Pred>,
) -> [Reg<F32>; 3] {
    let x = [(); 3].map(|_| b.mov(0.0f32));
    b.guarded(ok, false, |b| {
        let a = b.index_addr(points, i, 12);
        for (k, xk) in x.iter().enumerate() {
            let v = b.ld::<F32>(Space::GlobalNc, Addr::from(a).off(4 * k as i64));
            b.mov_to(*xk, v);
        }
    });
    x
}

/// The kernel with `opts`.
pub fn build(target: Target, opts: Options) -> Module {
    let p_count = opts.points_per_thread as usize;
    let mut b = KernelBuilder::new("gaussian_forward_fast_f32");
    b.reqntid(BLOCK, 1, 1);
    if let Some(r) = opts.max_registers {
        b.maxnreg(r);
    }
    let prep = b.param::<U64>("prep");
    let fast = b.param::<U64>("fast");
    let n_pad = b.param::<U32>("n_pad");
    let chunk_len = b.param::<U32>("chunk_len");
    let points = b.param::<U64>("points");
    let num_points_param = b.param::<U32>("num_points");
    let out_param = b.param::<U64>("out");
    let origin = [
        b.param::<F32>("origin_x"),
        b.param::<F32>("origin_y"),
        b.param::<F32>("origin_z"),
    ];
    let prep = b.global_ptr(&prep);
    let fast = b.global_ptr(&fast);
    let n_pad = b.ld_param(&n_pad);
    let chunk_len = b.ld_param(&chunk_len);
    let points = b.global_ptr(&points);
    let num_points = b.ld_param(&num_points_param);
    let out = b.global_ptr(&out_param);
    let origin = origin.map(|o| b.ld_param(&o));
    // (Loaded where they are used, so that they hold no register through the pair loop.)
    let fused = opts
        .fused
        .then(|| (b.param::<U64>("values"), b.param::<U64>("counters")));
    let starts = opts.schedule.map(|_| b.param::<U64>("starts"));
    let tile_blocks = opts.tile_blocks.max(1);
    let tile_len = BLOCK * tile_blocks;
    // Lazy: the subtract constants of a flagged tile go into the records' array (same stride).
    const _: () = assert!(PAIR_STRIDE == FAST_STRIDE);
    let tile = (!opts.lazy).then(|| b.shared_array::<F32>("tile", tile_len * PAIR_STRIDE));
    let ftile = b.shared_array::<F32>("ftile", tile_len * FAST_STRIDE);
    let tile = tile.unwrap_or_else(|| ftile.clone());
    let wflag = b.shared_array::<U32>("wflag", WARPS);

    b.comment("this thread's points relative to the origin (x beyond num_points: 0) and sums");
    let tid = b.special(Special::TidX);
    let pblock = b.special(Special::CtaidX);
    let chunk = b.special(Special::CtaidY);
    let first = b.mad(pblock, BLOCK * opts.points_per_thread, tid);
    let mut idx = Vec::new();
    let mut valid = Vec::new();
    let mut xt = Vec::new();
    let mut acc = Vec::new();
    for p in 0..opts.points_per_thread {
        let i = b.add(first, p * BLOCK);
        let ok = b.setp(Cmp::Lt, i, num_points);
        let x = load_point(&mut b, points, i, ok);
        xt.push([0, 1, 2].map(|k| b.sub(x[k], origin[k])));
        idx.push(i);
        valid.push(ok);
        acc.push(b.mov(0.0f32));
    }
    let lane = b.and(tid, 31u32);
    let warp = b.shr(tid, 5u32);
    let lane0 = b.setp(Cmp::Eq, lane, 0u32);

    // Stages the subtract form's constants of Gaussian `tile_start + t` into `tile` slot t.
    let stage_subtract = |b: &mut KernelBuilder, tile_start: Reg<U32>, t: Reg<U32>| {
        let j = b.add(tile_start, t);
        let src = b.index_addr(prep, j, PREP_STRIDE * 4);
        let v = load_prepared::<F32>(b, Space::GlobalNc, src.into());
        let g = PairConsts::from_prepared(b, &v);
        let z = b.mov(0.0f32);
        let slot = b.mul(t, PAIR_STRIDE);
        let dst = b.shared_index(&tile, slot);
        store_prepared::<F32>(b, Space::Shared, dst.into(), &g.to_array(z));
    };
    let (g_start, g_end) = match &starts {
        None => {
            let g_start = b.mul(chunk, chunk_len);
            let g_stop = b.add(g_start, chunk_len);
            (g_start, b.min(g_stop, n_pad))
        }
        Some(starts) => {
            let starts = b.global_ptr(starts);
            let a = b.index_addr(starts, chunk, 4);
            let g_start = b.ld::<U32>(Space::GlobalNc, a);
            let g_end = b.ld::<U32>(Space::GlobalNc, Addr::from(a).off(4));
            (g_start, g_end)
        }
    };
    let live = opts.partial.then(|| {
        // Points per thread with any point below num_points in this block (block-uniform).
        let block_first = b.mul(pblock, BLOCK * opts.points_per_thread);
        let rest = b.sub(num_points, block_first);
        let rest = b.min(rest, BLOCK * opts.points_per_thread);
        let up = b.add(rest, BLOCK - 1);
        b.div(up, BLOCK)
    });
    b.for_range(g_start, g_end, tile_len, |b, tile_start, _| {
        b.comment("tile: each thread stages one Gaussian (both forms) and its flag");
        let left = b.sub(g_end, tile_start);
        let count = b.min(left, tile_len);
        b.bar_sync();
        let flag = b.mov(0.0f32);
        for h in 0..tile_blocks {
            let t = if h == 0 { tid } else { b.add(tid, h * BLOCK) };
            let has = b.setp(Cmp::Lt, t, count);
            b.if_then(has, |b| {
                let j = if opts.lazy {
                    b.add(tile_start, t)
                } else {
                    let j = b.add(tile_start, t);
                    let src = b.index_addr(prep, j, PREP_STRIDE * 4);
                    let v = load_prepared::<F32>(b, Space::GlobalNc, src.into());
                    let g = PairConsts::from_prepared(b, &v);
                    let z = b.mov(0.0f32);
                    let slot = b.mul(t, PAIR_STRIDE);
                    let dst = b.shared_index(&tile, slot);
                    store_prepared::<F32>(b, Space::Shared, dst.into(), &g.to_array(z));
                    j
                };
                let fsrc = b.index_addr(fast, j, FAST_STRIDE * 4);
                let r = load_prepared::<F32>(b, Space::GlobalNc, fsrc.into());
                if opts.packed {
                    let fslot = b.mul(t, PACKED_STRIDE);
                    let fdst = b.shared_index(&ftile, fslot);
                    for (k, pair) in r[..PACKED_STRIDE as usize].chunks_exact(2).enumerate() {
                        let at = Addr::from(fdst).off(8 * k as i64);
                        b.st_v2::<F32>(Space::Shared, at, [pair[0], pair[1]]);
                    }
                } else {
                    let fslot = b.mul(t, FAST_STRIDE);
                    let fdst = b.shared_index(&ftile, fslot);
                    store_prepared::<F32>(b, Space::Shared, fdst.into(), &r);
                }
                if h == 0 {
                    b.mov_to(flag, r[FAST_FLAG as usize]);
                } else {
                    let f = b.max(flag, r[FAST_FLAG as usize]);
                    b.mov_to(flag, f);
                }
            });
        }
        let mine = b.setp(Cmp::Ne, flag, 0.0f32);
        let any = b.vote_any(mine);
        b.if_then(lane0, |b| {
            let w = b.selp(1u32, 0u32, any);
            let dst = b.shared_index(&wflag, warp);
            b.st(Space::Shared, dst, w);
        });
        b.bar_sync();
        let wf = b.shared_index(&wflag, 0u32);
        let [f0, f1, f2, f3] = b.ld_v4::<U32>(Space::Shared, wf);
        let f01 = b.or(f0, f1);
        let f23 = b.or(f2, f3);
        let f = b.or(f01, f23);
        let slow = b.setp(Cmp::Ne, f, 0u32);
        b.if_else(
            slow,
            |b| {
                b.comment("a flagged Gaussian: the subtract form on the points as loaded");
                if opts.lazy {
                    // Each thread overwrites only the slots it staged (no other thread reads
                    // them in a flagged tile); the barrier publishes them.
                    for h in 0..tile_blocks {
                        let t = if h == 0 { tid } else { b.add(tid, h * BLOCK) };
                        let has = b.setp(Cmp::Lt, t, count);
                        b.if_then(has, |b| stage_subtract(b, tile_start, t));
                    }
                    b.bar_sync();
                }
                let xs: Vec<[Reg<F32>; 3]> = (0..p_count)
                    .map(|p| load_point(b, points, idx[p], valid[p]))
                    .collect();
                b.for_range(0u32, count, 2u32, |b, k, _| {
                    for u in 0..2u32 {
                        let kk = b.add(k, u);
                        let slot = b.mul(kk, PAIR_STRIDE);
                        let a = b.shared_index(&tile, slot);
                        let pr = load_prepared::<F32>(b, Space::Shared, a.into());
                        let g = PairConsts::from_array(&pr);
                        for p in 0..p_count {
                            let (_, t) = solve_scaled(b, &g, xs[p]);
                            let e = F32::exp2_neg(b, t);
                            let s = b.fma(g.weight_norm, e, acc[p]);
                            b.mov_to(acc[p], s);
                        }
                    }
                });
                for p in 0..p_count {
                    for k in 0..3 {
                        let v = b.sub(xs[p][k], origin[k]);
                        b.mov_to(xt[p][k], v);
                    }
                }
            },
            |b| {
                let Some(live) = live else {
                    expanded_pairs(b, &ftile, count, &xt, &acc, &opts);
                    return;
                };
                // Only the grid's last point block can be partial: it runs the pairs of its
                // first `live` points of each thread (the others are beyond num_points).
                let full = b.setp(Cmp::Ge, live, opts.points_per_thread);
                b.if_else(
                    full,
                    |b| expanded_pairs(b, &ftile, count, &xt, &acc, &opts),
                    |b| partial_pairs(b, live, 1, &ftile, count, &xt, &acc, &opts),
                );
            },
        );
    });

    b.comment("store this chunk's sums");
    for p in 0..p_count {
        let (ok, i, v) = (valid[p], idx[p], acc[p]);
        b.guarded(ok, false, |b| {
            let a = addr2d(b, out, chunk, num_points, i, 4);
            b.st(Space::Global, a, v);
        });
    }
    if let Some((values, counters)) = fused {
        let prm = FinishParams {
            out: out_param,
            num_points: num_points_param,
            values,
            counters,
            points_per_thread: opts.points_per_thread,
        };
        finish_rows(&mut b, &prm, &wflag);
    }
    Module::single(target, b.finish())
}

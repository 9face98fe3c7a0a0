//! `gaussian_backward_tc_f32`: the f32 backward with each Gaussian's sums on the FP64 tensor
//! cores (`mma.sync.m8n8k4.f64`, or `m16n8k4` on sm_90). Same inputs, launch parameters and
//! outputs as `gaussian_backward_lanes_f32` (records of `super::lanes`' staging, the shared
//! finishing kernels); only the split of the work and the per-Gaussian sums differ.
//!
//! # The per-Gaussian sums as a GEMM over points
//! With s = g' e' per pair (the per-pair weight of `super::lanes`) and the per-point features
//! F = [1, x~ (3), x~_a x~_b for (a, b) = 00 10 11 20 21 22] of x~ = x - o (formed in f64 from
//! the f32 point and origin, so exactly), a Gaussian's sums T = sum_p s F_p are the product
//! S^T F with the points as the inner dimension: per warp an 8 x 4 tile of s (8 Gaussians, 4
//! points) times the 4 x 16 features (two 8-column tiles, 10 used) per two `mma.sync` in f64.
//! Each s is rounded once (f32 to f64 is exact), every product and sum is f64, so the
//! uncentred moments lose nothing that matters when they are centred on the Gaussian's mean
//! at the end (f64): c1 = T1 - m T0, C = T2 - m c1^T - T1 m^T (m = mu - o), S1 = M c1, S2 = M C
//! M^T with the exact operator M, then `super::fast_pairs::unscale_wide` as the other f32
//! kernels. The FP32 pipe keeps only the pair's solve (v' = M x~ - b, t, e' as `super::lanes`),
//! s, and the point sums P += N (s v') (9 per pair) instead of 13 more for the Gaussian sums.
//!
//! Why f64 and not TF32 (an estimate; no TF32 build was made): the uncentred second moments
//! cancel when centred, by up to (|x~| / |x - mu|)^2 for the points that matter (points ~0.75
//! m from the origin against Gaussians of 0.1 m on the bench's unit box: ~50; the test set
//! moved 300 m from the origin: ~10^6), and f32 sums (TF32 products split three ways still
//! accumulate in f32, ~2^-22 each) would then exceed the tests' 1e-4; centring per tile needs
//! spatially sorted Gaussians. In f64 every test set stays at ~1e-6
//! (tests/gaussian_backward_tc.rs).
//!
//! # Fragments and the work of a thread
//! Lane 4 g + t (g < 8, t < 4) of warp w owns point t of each of its K chunks of 4 points (x~,
//! g', P and its two feature operands B[t][g], B[t][8 + g] in registers) and, per 8-Gaussian
//! m-tile of the staged tile, Gaussian g (A[g][t] = s of that Gaussian and its point; with
//! [`TcOptions::m16`] Gaussians g and g + 8 of a 16-Gaussian m-tile and `m16n8k4`, sm_90).
//! After the K chunks the accumulators C[g][2t..2t+2] (feature columns 2t, 2t + 1 and 8 + 2t,
//! 9 + 2t) go to the block's buffer `bsum` (f64, per Gaussian of the tile and warp). After the
//! tile (a block barrier) thread q < [`TILE`] adds Gaussian q's warp rows in warp order,
//! centres and transforms them and stores `partial_gauss[(x * n_pad + j) * 10 + k]` for point
//! block x. Grouped builds ([`TcOptions::cap`]) instead add the tile's warp rows into f64
//! accumulators per Gaussian of the chunk (`tacc`, every thread a few (Gaussian, feature)
//! sums), take the block's next group of points, and transform and store each Gaussian once
//! after the last group. At the end of a group the 8 lanes of each point add their P in a fixed
//! butterfly and lane t stores `partial_points[(c * B + i) * 3 + k]`. No atomics: results are
//! bit-identical from run to run.
//!
//! # Tiles in the subtract form
//! As in `super::lanes` (its `stage`): a tile with a flagged Gaussian, or a block whose points
//! lie beyond a Gaussian's x_lim, forms every pair as v' = M (x - mu) from the reloaded point,
//! with e' and v' replaced by 0 where e' is not positive. Only the pair's solve differs: the
//! sums are formed as above. A point whose x~ is not finite has its features set to 0.
//!
//! # Launch
//! Blocks of [`TcOptions::block`] threads; grid (X, S). Not grouped: X = ceil(B / (warps 4
//! K)); block (x, c) owns points x warps 4 K + w 4 K + 4 k + t. Grouped: block x takes groups
//! x G + h (h < G = ceil(B / (X warps 4 K))) in turn. Gaussians [c chunk_len, min((c + 1)
//! chunk_len, n_pad)) (grouped: at most `cap` of them); chunk_len and n_pad are multiples of
//! [`TILE`].
//!
//! # Measured (H100, 10000 Gaussians x 100000 points, alternating with the lanes kernel in one
//! process; session 12, GPU runs 3 and 4)
//! Twice as slow as `super::lanes`, so opt-in: backward 2965-2972 us for the default build
//! against 1483-1493 us (first build, 8 points per thread, 8 warps, one group per block,
//! `m8n8k4`: 3088-3090 us; two accumulator sets `s1`: slower). ncu (1.59 GHz):
//! - first build: 26.4 warp instructions per pair x 32 (lanes 33.8), but issue slots 29% busy
//!   (lanes 73%) at 248 registers and 8 warps per SM; per issued instruction 1.95 cycles of
//!   barrier stall (the per-tile f64 transform on 2 of 8 warps), 1.09 of math-pipe throttle
//!   (64.1 M `m8n8k4`, 4.0 SM cycles each at the FP64 tensor pipe's peak, which it kept 35%
//!   busy: 0.98 ms of that pipe alone at 100%), 1.02 short scoreboard (f32-to-f64
//!   conversions, `ex2`, shared loads), 0.92 wait.
//! - default (grouped, `m16n8k4`: 32.1 M, also 4.0 SM cycles each, so twice the work per cycle:
//!   0.49 ms at 100%; pipe 18% busy): barrier 0.40 and throttle 0.15 cycles per issue, issue
//!   39%, but the per-group staging and sums of 4-point groups take it to 34.9 instructions per
//!   pair. ptxas gives it 254 registers with the group loop (128 without), so 8 warps per SM.
//!
//! At the lanes kernel's issue rate the first build's instruction count (846 M against 1083 M
//! warp instructions) would give ~1.16 ms;
//! what is missing is latency hiding at 2 warps per scheduler, not tensor throughput.

use super::lanes::REC;
use super::lanes_parts::{stage, StageCtx};
pub use super::tc_options::*;
use super::tc_parts::*;
use crate::kernels::gaussian::common::*;
use crate::ptx::*;

/// Gaussians staged per tile (the staging of `super::lanes`: one per thread of the first two
/// warps).
pub const TILE: u32 = 64;
/// f64 per (Gaussian, warp) row of `bsum`: the 10 used columns of the two 8-column feature
/// tiles (lanes t > 0 skip their columns 8 + 2t of the second).
pub(super) const ROW: u32 = 10;
/// The default module (sm_90: `mma.sync.m16n8k4` in f64).
pub fn build_tc_f32(target: Target) -> Module {
    build_tc(target, TC_OPTIONS)
}

/// The kernel with `opts` (`gaussian_backward_tc_f32`).
pub fn build_tc(target: Target, opts: TcOptions) -> Module {
    let warps = opts.warps;
    let rows = if opts.m16 { 2 } else { 1 };
    let grouped = opts.cap > 0;
    let mut b = KernelBuilder::new("gaussian_backward_tc_f32");
    b.reqntid(opts.block(), 1, 1);
    if let Some(r) = opts.max_registers {
        b.maxnreg(r);
    }
    let prep = b.param::<U64>("prep");
    let fast = b.param::<U64>("fast");
    let n_pad = b.param::<U32>("n_pad");
    let points = b.param::<U64>("points");
    let grads = b.param::<U64>("grad_values");
    let num_points = b.param::<U32>("num_points");
    let chunk_len = b.param::<U32>("chunk_len");
    let partial_points = b.param::<U64>("partial_points");
    let partial_gauss = b.param::<U64>("partial_gauss");
    let origin = [
        b.param::<F32>("origin_x"),
        b.param::<F32>("origin_y"),
        b.param::<F32>("origin_z"),
    ];
    let prep = b.global_ptr(&prep);
    let fast = b.global_ptr(&fast);
    let n_pad = b.ld_param(&n_pad);
    let points = b.global_ptr(&points);
    let grads = b.global_ptr(&grads);
    let num_points = b.ld_param(&num_points);
    let chunk_len = b.ld_param(&chunk_len);
    let partial_points = b.global_ptr(&partial_points);
    let partial_gauss = b.global_ptr(&partial_gauss);
    let origin = origin.map(|o| b.ld_param(&o));
    let rec = b.shared_array::<F32>("rec", TILE * REC);
    let mus = b.shared_array::<F32>("mus", TILE * 4);
    let bsum = b.shared_array::<F64>("bsum", TILE * warps * ROW);
    let tacc = grouped.then(|| b.shared_array::<F64>("tacc", opts.cap * FEATURES as u32));
    let wm = b.shared_array::<F32>("wm", warps);
    let wmax = b.shared_array::<F32>("wmax", 4);
    let tflag = b.shared_array::<U32>("tflag", 4);

    let tid = b.special(Special::TidX);
    let pblock = b.special(Special::CtaidX);
    let chunk = b.special(Special::CtaidY);
    let lane = b.and(tid, 31u32);
    let warp = b.shr(tid, 5u32);
    let gid = b.shr(lane, 2u32);
    let tig = b.and(lane, 3u32);
    let wfirst = b.mul(warp, 4 * opts.k);
    let wfirst = b.add(wfirst, tig);
    let od = origin.map(|o| b.cvt::<F64, F32>(o));
    let src = PointSrc {
        points,
        grads,
        num_points,
        origin,
        od,
        gid,
        _p: std::marker::PhantomData,
    };
    let pts = alloc_points(&mut b, opts.k);
    let ppb = opts.points_per_block();
    // Groups per block: ceil(B / (grid.x ppb)) when grouped, else 1.
    let groups = if grouped {
        let nb = b.special(Special::NctaidX);
        let per = b.mul(nb, ppb);
        let g = b.add(num_points, per);
        let g = b.sub(g, 1u32);
        b.div(g, per)
    } else {
        b.mov(1u32)
    };
    let set_first = b.mul(pblock, groups);

    // This thread's accumulator columns: bsum[((8 mt + gid) warps + warp) ROW + 2 tig].
    let slot = b.mad(gid, warps, warp);
    let slot = b.mul(slot, ROW);
    let t2 = b.shl(tig, 1u32);
    let slot = b.add(slot, t2);
    let acc_at = b.shared_index(&bsum, slot);
    let rec0 = b.shared_index(&rec, 0u32);
    let mus0 = b.shared_index(&mus, 0u32);
    let roff = b.mul(gid, REC * 4);
    let rec_g = b.add(rec0, roff);
    let moff = b.mul(gid, 16u32);
    let mus_g = b.add(mus0, moff);
    let staging = b.setp(Cmp::Lt, tid, TILE);
    let tig0 = b.setp(Cmp::Eq, tig, 0u32);
    let lane0 = b.setp(Cmp::Eq, lane, 0u32);
    let thread0 = b.setp(Cmp::Eq, tid, 0u32);
    let store = b.setp(Cmp::Lt, lane, 4u32);
    let g_start = b.mul(chunk, chunk_len);
    // Grouped: never more than `cap` Gaussians (the accumulators' size; the host's plan keeps
    // chunk_len within it).
    let span = if grouped {
        b.min(chunk_len, opts.cap)
    } else {
        chunk_len
    };
    let g_stop = b.add(g_start, span);
    let g_end = b.min(g_stop, n_pad);
    let tctx = TileCtx {
        pts: &pts,
        points,
        rec_g,
        mus_g,
        acc_at,
        tig0,
        gstride: warps * ROW * 8,
        rows,
        tile: TILE,
        split: opts.split,
    };

    let group_body = |b: &mut KernelBuilder, grp: Reg<U32>| {
        b.comment("this group's points: x - o, g / sigma^2, features; the block's |x - o|_inf");
        let gi = b.add(set_first, grp);
        let first = b.mad(gi, ppb, wfirst);
        let mut m = fill_points(b, &src, &pts, first);
        for s in [16u32, 8, 4, 2, 1] {
            let o = b.shfl(Shfl::Xor, m, s);
            m = b.max(m, o);
        }
        b.if_then(lane0, |b| {
            let dst = b.shared_index(&wm, warp);
            b.st(Space::Shared, dst, m);
        });
        b.bar_sync();
        b.if_then(thread0, |b| {
            let w0 = b.shared_index(&wm, 0u32);
            let mut bm = b.ld::<F32>(Space::Shared, w0);
            for w in 1..warps {
                let v = b.ld::<F32>(Space::Shared, Addr::from(w0).off(i64::from(4 * w)));
                bm = b.max(bm, v);
            }
            let dst = b.shared_index(&wmax, 0u32);
            b.st_v4(Space::Shared, dst, [bm, bm, bm, bm]);
        });
        b.for_range(g_start, g_end, TILE, |b, tile_start, _| {
            b.comment("tile: the first two warps stage the tile's Gaussians");
            b.bar_sync();
            b.if_then(staging, |b| {
                let j = b.add(tile_start, tid);
                let ctx = StageCtx {
                    prep,
                    fast,
                    wmax: &wmax,
                    rec: &rec,
                    mus: &mus,
                    tflag: &tflag,
                };
                stage(b, &ctx, j, tid);
            });
            b.bar_sync();
            let tf = b.shared_index(&tflag, 0u32);
            let mut f = b.ld::<U32>(Space::Shared, tf);
            for w in 1..TILE / 32 {
                let fw = b.ld::<U32>(Space::Shared, Addr::from(tf).off(i64::from(4 * w)));
                f = b.or(f, fw);
            }
            let slow = b.setp(Cmp::Ne, f, 0u32);
            b.if_else(
                slow,
                |b| tile_pairs(b, &tctx, true),
                |b| tile_pairs(b, &tctx, false),
            );
            b.bar_sync();
            match &tacc {
                None => {
                    b.comment("thread q < tile: Gaussian q's warp rows in order, transformed");
                    b.if_then(staging, |b| {
                        let j = b.add(tile_start, tid);
                        let base = b.mul(tid, warps * ROW);
                        let at = b.shared_index(&bsum, base);
                        let tot = warp_rows(b, at, warps, FEATURES as u32);
                        let dst = addr2d(b, partial_gauss, pblock, n_pad, j, GRAD_STRIDE * 4);
                        finish_gaussian(b, prep, j, &tot, od, dst);
                    });
                }
                Some(tacc) => {
                    b.comment("every thread: sums (Gaussian, feature) of the warp rows into tacc");
                    let lo = b.sub(tile_start, g_start);
                    let lo = b.mul(lo, FEATURES as u32);
                    b.for_range(tid, TILE * FEATURES as u32, opts.block(), |b, q, _| {
                        // q = 10 gl + f: bsum[(gl warps + w) ROW + f].
                        let gl = b.div(q, FEATURES as u32);
                        let f = b.rem(q, FEATURES as u32);
                        let at = b.mad(gl, warps * ROW, f);
                        let src = b.shared_index(&bsum, at);
                        let v = warp_rows(b, src, warps, 1);
                        let t = b.add(lo, q);
                        let dst = b.shared_index(tacc, t);
                        let first_group = b.setp(Cmp::Eq, grp, 0u32);
                        let old = b.ld::<F64>(Space::Shared, dst);
                        let old = b.selp(F64::imm(0.0), old, first_group);
                        let sum = b.add(old, v[0]);
                        b.st(Space::Shared, dst, sum);
                    });
                }
            }
        });
        b.comment("each point's sums over its 8 lanes (fixed butterfly); lane t stores them");
        for p in &pts {
            let mut s = p.pc;
            for x in [4u32, 8, 16] {
                s = s.map(|v| {
                    let o = b.shfl(Shfl::Xor, v, x);
                    b.add(v, o)
                });
            }
            let go = b.and(store, p.ok);
            let i = p.i;
            b.guarded(go, false, |b| {
                let a = addr2d(b, partial_points, chunk, num_points, i, 12);
                for (k, v) in s.into_iter().enumerate() {
                    b.st(Space::Global, Addr::from(a).off(k as i64 * 4), v);
                }
            });
        }
    };
    if grouped {
        b.for_range(0u32, groups, 1u32, |b, grp, _| group_body(b, grp));
    } else {
        let grp = b.mov(0u32);
        group_body(&mut b, grp);
    }
    if let Some(tacc) = &tacc {
        b.comment("grouped: each Gaussian of the chunk transformed and stored once");
        b.bar_sync();
        let count = b.sub(g_end, g_start);
        b.for_range(tid, count, opts.block(), |b, q, _| {
            let j = b.add(g_start, q);
            let base = b.mul(q, FEATURES as u32);
            let at = b.shared_index(tacc, base);
            let tot = warp_rows(b, at, 1, FEATURES as u32);
            let dst = addr2d(b, partial_gauss, pblock, n_pad, j, GRAD_STRIDE * 4);
            finish_gaussian(b, prep, j, &tot, od, dst);
        });
    }
    Module::single(target, b.finish())
}

/// `n` f64 at shared address `at` summed over `rows` rows of [`ROW`] f64 in row order (two-wide
/// loads when `n` is even).
fn warp_rows(b: &mut KernelBuilder, at: Reg<U32>, rows: u32, n: u32) -> Vec<Reg<F64>> {
    let mut tot: Option<Vec<Reg<F64>>> = None;
    for w in 0..rows {
        let a = Addr::from(at).off(i64::from(w * ROW * 8));
        let mut v = Vec::with_capacity(n as usize);
        if n.is_multiple_of(2) {
            for q in 0..i64::from(n / 2) {
                v.extend(b.ld_v2::<F64>(Space::Shared, a.clone().off(16 * q)));
            }
        } else {
            for q in 0..i64::from(n) {
                v.push(b.ld::<F64>(Space::Shared, a.clone().off(8 * q)));
            }
        }
        tot = Some(match tot {
            None => v,
            Some(t) => t.iter().zip(&v).map(|(x, y)| b.add(*x, *y)).collect(),
        });
    }
    tot.unwrap_or_else(|| unreachable!("at least one row"))
}

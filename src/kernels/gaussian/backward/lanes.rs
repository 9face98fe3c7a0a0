//! `gaussian_backward_lanes_f32`: the f32 backward laid out as the forward: points in lanes
//! (K per thread, in registers), Gaussians broadcast from shared memory, each Gaussian's sums
//! reduced across the warp once per Gaussian (amortised over the warp's 32 K points), then across
//! the block's warps once per tile. Same outputs as `gaussian_backward_f32` (the finishing
//! kernels are shared); the per-pair maths is that of `super::fast` (the expanded solve of
//! `gaussian_forward_fast_f32` with the sums kept in v' until the end).
//!
//! # Per pair (Gaussian j broadcast, point i in a register tile)
//! v' = M x~ - b (6 multiply-adds), t = o + |v'|^2 (3), e' = 2^-t (1), ge = g' e' (1), gv = ge v'
//! (3); Gaussian sums S0 += ge, S1 += gv (4 adds), S2_cb += gv_c v'_b for c >= b (6); point sums
//! P += N gv with N = (w c 2^o) M^T upper triangular (6): 30 instructions. The Gaussian's
//! constants (16 scalars, four uniform 16-byte loads) are read once per Gaussian for K pairs;
//! its sums start at its first pair's terms.
//!
//! On the H100 (10000 Gaussians x 100000 points, alternating with the unit kernel in one
//! process; session 11, GPU runs 1 to 3): backward 1484-1495 us against 1585-1598 us; ncu 33.7
//! instructions per pair (unit kernel 35.1), 254 registers (2 blocks, 8 warps per SM, as the
//! unit kernel), issue slots 71% (1.27 eligible warps per scheduler). More points per thread
//! (13, 14, 16), tiles of 32 (a barrier per 32 Gaussians) and fewer registers (10 points at 168,
//! 3 blocks per SM; caps that spill) were slower; `.maxnreg 232` was faster once (1447.6 us,
//! run 3; not verified as the built-in kernel).
//!
//! # Sums across lanes and warps
//! After its K pairs with Gaussian j a lane stores its 10 sums in its row of the warp's buffer
//! (`wbuf`: [`SUB`] Gaussians x 32 lanes x 12 scalars; three vector stores). After [`SUB`]
//! Gaussians (a warp sync), lane q < 5 [`SUB`] adds scalar pair (q mod 5) of Gaussian q / 5
//! over the 32 lanes in lane order (32 two-wide loads) and stores it in the block's buffer
//! (`bsum`, per Gaussian of the tile and warp). After the tile's Gaussians ([`TILE`] in the
//! built-in kernel; a block barrier), thread t < tile adds Gaussian t's four warp sums in warp
//! order, transforms them
//! to the unit kernel's quantities (`super::fast_pairs::unscale`, f64) and stores
//! `partial_gauss[(x * n_pad + j) * 10 + k]` for point block x. Each thread stores its points'
//! sums `partial_points[(c * B + i) * 3 + k]` for Gaussian chunk c at the end. Every sum runs in
//! a fixed order: results are bit-identical from run to run. No atomics.
//!
//! # When a tile takes the subtract form
//! The thread staging Gaussian j flags it when its record is flagged (`forward_fast`: G too
//! large for the expanded form), its constants exceed 2^100, or the block's largest |x~|_inf
//! exceeds x_lim = (2^100 - max |b|) / max_k sum_l |M_kl| (beyond it v' could overflow). A tile
//! with a flagged Gaussian runs every pair in the subtract form v' = M (x - mu) on the points
//! reloaded from memory, with selects: a pair whose e' is not positive (beyond the cutoff, or
//! NaN from an overflowing v') has e' and v' replaced by 0 and adds exactly 0. The host runs this
//! kernel only where N is finite and no Gaussian takes the compensated solve
//! (`crate::gaussian::gpu::lanes_backward`).
//!
//! # Launch
//! Blocks of exactly [`BLOCK`] threads; grid (ceil(B / (BLOCK K)), S) with K = the points per
//! thread of the build. Block (x, c) owns points x BLOCK K + p BLOCK + tid (p < K) and Gaussians
//! [c chunk_len, min((c + 1) chunk_len, n_pad)); chunk_len and n_pad are multiples of [`TILE`].

use super::fast_pairs::unscale;
use super::lanes_parts::*;
use crate::kernels::gaussian::common::*;
use crate::kernels::gaussian::scaled::sigma;
use crate::ptx::*;

/// Threads per block (required): four warps.
pub const BLOCK: u32 = 128;
/// Warps per block.
const WARPS: u32 = BLOCK / 32;
/// Gaussians staged per tile of the built-in kernel and the most a variant stages (one per
/// thread of the first warps); chunk lengths are multiples of it. (H100, GPU run 2: 1490 us
/// against 1552 us with tiles of 32, one block barrier per tile.)
pub const TILE: u32 = 64;
/// Gaussians whose lane sums are reduced together (5 SUB lanes busy, [`SUB`] x 5 <= 32).
pub const SUB: u32 = 4;
/// Scalars per Gaussian record in shared memory: M (6), -b (3), N (6), a pad.
pub(super) const REC: u32 = 16;
/// Scalars per lane row of `wbuf` (10 sums, two pads: 16-byte aligned rows).
const ROW: u32 = 12;
/// Scalars per Gaussian of `wbuf`: 32 rows and 12 scalars of padding, so that the reduction's
/// loads of the [`SUB`] Gaussians fall in different banks.
const GSTRIDE: u32 = 32 * ROW + 12;
/// Every lane of the warp.
const ALL_LANES: u32 = 0xffff_ffff;
/// Points per thread of the built-in kernel.
pub const POINTS_PER_THREAD: u32 = 12;
const _: () = assert!(GAUSSIAN_PAD.is_multiple_of(TILE) && TILE.is_multiple_of(SUB));
const _: () = assert!(SUB * 5 <= 32 && WARPS == 4);

/// Build options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LanesOptions {
    /// Points per thread.
    pub k: u32,
    /// `.maxnreg`, or none.
    pub max_registers: Option<u32>,
    /// Gaussians per tile (32 or 64: one per thread of the first one or two warps).
    pub tile: u32,
    /// Start each Gaussian's sums at zero rather than at its first pair's terms (one add per
    /// sum and Gaussian more; for comparisons).
    pub zero_init: bool,
}

/// The built-in kernel's options.
pub const LANES_OPTIONS: LanesOptions = LanesOptions {
    k: POINTS_PER_THREAD,
    max_registers: None,
    tile: TILE,
    zero_init: false,
};

/// The options of a comparison variant (`PTXFLOW_GAUSS_BWD_LANES`): `k<N>` points per thread
/// (1 to 24), `r<N>` a register cap, `t32` / `t64` Gaussians per tile, `z1` / `z0` sums
/// started at zero or at the first pair, joined by `-` (`k12-t32-z1`). None for names it does not
/// parse.
pub fn lanes_variant_options(name: &str) -> Option<LanesOptions> {
    let mut o = LANES_OPTIONS;
    for part in name.split('-') {
        let (key, val) = part.split_at(1.min(part.len()));
        let v: u32 = val.parse().ok()?;
        match key {
            "k" if (1..=24).contains(&v) => o.k = v,
            "r" => o.max_registers = Some(v),
            "t" if v == 32 || v == TILE => o.tile = v,
            "z" if v <= 1 => o.zero_init = v == 1,
            _ => return None,
        }
    }
    Some(o)
}

/// The built-in module.
pub fn build_lanes_f32(target: Target) -> Module {
    build_lanes(target, LANES_OPTIONS)
}

/// The kernel with `opts` (`gaussian_backward_lanes_f32`).
pub fn build_lanes(target: Target, opts: LanesOptions) -> Module {
    let k_count = opts.k as usize;
    let mut b = KernelBuilder::new("gaussian_backward_lanes_f32");
    b.reqntid(BLOCK, 1, 1);
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
    let tile = opts.tile;
    let rec = b.shared_array::<F32>("rec", tile * REC);
    let mus = b.shared_array::<F32>("mus", tile * 4);
    let wbuf = b.shared_array::<F32>("wbuf", WARPS * SUB * GSTRIDE);
    let bsum = b.shared_array::<F32>("bsum", tile * WARPS * ROW);
    let wmax = b.shared_array::<F32>("wmax", WARPS);
    let tflag = b.shared_array::<U32>("tflag", 4);
    let zero = F32::imm(0.0);

    b.comment("this thread's points: x - o, g / sigma^2 (0 beyond num_points), sums");
    let tid = b.special(Special::TidX);
    let pblock = b.special(Special::CtaidX);
    let chunk = b.special(Special::CtaidY);
    let lane = b.and(tid, 31u32);
    let warp = b.shr(tid, 5u32);
    let first = b.mad(pblock, BLOCK * opts.k, tid);
    let mut xt = Vec::new();
    let mut gp = Vec::new();
    let mut pc = Vec::new();
    let mut xmag: Option<Reg<F32>> = None;
    for p in 0..opts.k {
        let (i, ok) = point_index(&mut b, first, num_points, p);
        let x = load_point(&mut b, points, i, ok);
        let t = [0, 1, 2].map(|k| b.sub(x[k], origin[k]));
        for v in t {
            let a = b.abs(v);
            xmag = Some(match xmag {
                None => a,
                Some(m) => b.max(m, a),
            });
        }
        let g = b.mov(zero);
        b.guarded(ok, false, |b| {
            let ga = b.index_addr(grads, i, 4);
            let gv = b.ld::<F32>(Space::GlobalNc, ga);
            let s = sigma();
            let gs = F32::scale_const(b, gv, 1.0 / (s * s));
            b.mov_to(g, gs);
        });
        xt.push(t);
        gp.push(g);
        pc.push([(); 3].map(|_| b.mov(zero)));
    }
    b.comment("the block's largest |x - o|_inf");
    let mut m = xmag.unwrap_or_else(|| unreachable!("at least one point per thread"));
    for s in [16u32, 8, 4, 2, 1] {
        let o = b.shfl(Shfl::Xor, m, s);
        m = b.max(m, o);
    }
    let lane0 = b.setp(Cmp::Eq, lane, 0u32);
    b.if_then(lane0, |b| {
        let dst = b.shared_index(&wmax, warp);
        b.st(Space::Shared, dst, m);
    });

    // Lane q < 5 SUB reduces scalar pair c = q mod 5 of Gaussian g = q / 5 (q 13 >> 6 = q / 5
    // for q < 20) of each sub-tile.
    let reducer = b.setp(Cmp::Lt, lane, SUB * 5);
    let q13 = b.mul(lane, 13u32);
    let rg = b.shr(q13, 6u32);
    let rg5 = b.mul(rg, 5u32);
    let rc = b.sub(lane, rg5);
    let wslot = b.mul(warp, SUB * GSTRIDE);
    let my_row = b.mad(lane, ROW, wslot);
    let row_at = b.shared_index(&wbuf, my_row);
    let rslot = b.mad(rg, GSTRIDE, wslot);
    let rslot = b.mad(rc, 2u32, rslot);
    let red_at = b.shared_index(&wbuf, rslot);
    // bsum[(gi * WARPS + warp) * ROW + 2c] for gi = sub * SUB + g.
    let bslot = b.mul(rg, WARPS * ROW);
    let bslot = b.mad(warp, ROW, bslot);
    let bslot = b.mad(rc, 2u32, bslot);
    let bsum_at = b.shared_index(&bsum, bslot);
    let rec0 = b.shared_index(&rec, 0u32);
    let mus0 = b.shared_index(&mus, 0u32);
    let staging = b.setp(Cmp::Lt, tid, tile);

    let g_start = b.mul(chunk, chunk_len);
    let g_stop = b.add(g_start, chunk_len);
    let g_end = b.min(g_stop, n_pad);
    b.for_range(g_start, g_end, tile, |b, tile_start, _| {
        b.comment("tile: the first warps stage the tile's Gaussians (records, N, whether fast)");
        b.bar_sync();
        b.if_then(staging, |b| {
            let j = b.add(tile_start, tid);
            stage(
                b,
                &StageCtx {
                    prep,
                    fast,
                    wmax: &wmax,
                    rec: &rec,
                    mus: &mus,
                    tflag: &tflag,
                },
                j,
                tid,
            );
        });
        b.bar_sync();
        let tf = b.shared_index(&tflag, 0u32);
        let mut f = b.ld::<U32>(Space::Shared, tf);
        for w in 1..tile / 32 {
            let fw = b.ld::<U32>(Space::Shared, Addr::from(tf).off(i64::from(4 * w)));
            f = b.or(f, fw);
        }
        let slow = b.setp(Cmp::Ne, f, 0u32);
        let body = |b: &mut KernelBuilder, slow: bool| {
            b.for_range(0u32, tile, SUB, |b, sub, _| {
                b.comment("SUB Gaussians x this thread's points; lane sums into the warp buffer");
                // One Gaussian per pass (a loop, so that ptxas keeps one Gaussian's constants
                // and sums live at a time).
                let roff = b.mul(sub, REC * 4);
                let rec_from = b.add(rec0, roff);
                let moff = b.mul(sub, 16u32);
                let mus_at = b.add(mus0, moff);
                let row = b.mov(row_at);
                let rec_end = b.add(rec_from, SUB * REC * 4);
                b.for_range(rec_from, rec_end, REC * 4, |b, at, _| {
                    let c = load_consts(b, Addr::from(at));
                    let mu = slow.then(|| {
                        let [u0, u1, u2, _] = b.ld_v4::<F32>(Space::Shared, Addr::from(mus_at));
                        let next = b.add(mus_at, 16u32);
                        b.mov_to(mus_at, next);
                        [u0, u1, u2]
                    });
                    let mut sums = opts
                        .zero_init
                        .then(|| [(); GRAD_STRIDE as usize].map(|_| b.mov(zero)));
                    for p in 0..k_count {
                        let (v, e) = match mu {
                            None => {
                                let (v, t) = expanded(b, &c, xt[p]);
                                (v, F32::exp2_neg(b, t))
                            }
                            Some(mu) => {
                                let (i, ok) = point_index(b, first, num_points, p as u32);
                                let x = load_point(b, points, i, ok);
                                let (v, t) = subtract(b, &c, mu, x);
                                let e = F32::exp2_neg(b, t);
                                let live = b.setp(Cmp::Gt, e, zero);
                                (v.map(|x| b.selp(x, zero, live)), b.selp(e, zero, live))
                            }
                        };
                        sums = Some(pair(b, &c, v, e, gp[p], sums, &pc[p]));
                    }
                    let sums = sums.unwrap_or_else(|| unreachable!("at least one point"));
                    let at = Addr::from(row);
                    b.st_v4(
                        Space::Shared,
                        at.clone(),
                        [sums[0], sums[1], sums[2], sums[3]],
                    );
                    b.st_v4(
                        Space::Shared,
                        at.clone().off(16),
                        [sums[4], sums[5], sums[6], sums[7]],
                    );
                    b.st_v2(Space::Shared, at.off(32), [sums[8], sums[9]]);
                    let next = b.add(row, GSTRIDE * 4);
                    b.mov_to(row, next);
                });
                b.warp_sync(ALL_LANES);
                b.comment(
                    "lane q < 5 SUB: pair q mod 5 of Gaussian q / 5 over the lanes, in order",
                );
                b.if_then(reducer, |b| {
                    let acc = [b.mov(zero), b.mov(zero)];
                    for l in 0..32u32 {
                        let [x, y] = b.ld_v2::<F32>(
                            Space::Shared,
                            Addr::from(red_at).off(i64::from(l * ROW * 4)),
                        );
                        for (a, v) in acc.iter().zip([x, y]) {
                            let s = b.add(*a, v);
                            b.mov_to(*a, s);
                        }
                    }
                    let off = b.mul(sub, WARPS * ROW * 4);
                    let dst = b.add(bsum_at, off);
                    b.st_v2(Space::Shared, Addr::from(dst), acc);
                });
                b.warp_sync(ALL_LANES);
            });
        };
        b.if_else(slow, |b| body(b, true), |b| body(b, false));
        b.bar_sync();
        b.comment("thread t < tile: Gaussian t's warp sums in order, transformed, stored");
        b.if_then(staging, |b| {
            let j = b.add(tile_start, tid);
            let base = b.mul(tid, WARPS * ROW);
            let src = b.shared_index(&bsum, base);
            let mut tot: Option<Vec<Reg<F32>>> = None;
            for w in 0..WARPS {
                let at = Addr::from(src).off(i64::from(w * ROW * 4));
                let mut v = Vec::new();
                v.extend(b.ld_v4::<F32>(Space::Shared, at.clone()));
                v.extend(b.ld_v4::<F32>(Space::Shared, at.clone().off(16)));
                v.extend(b.ld_v2::<F32>(Space::Shared, at.off(32)));
                tot = Some(match tot {
                    None => v,
                    Some(t) => t.iter().zip(&v).map(|(a, c)| b.add(*a, *c)).collect(),
                });
            }
            let tot: [Reg<F32>; GRAD_STRIDE as usize] = tot
                .unwrap_or_else(|| unreachable!("four warps"))
                .try_into()
                .unwrap_or_else(|_| unreachable!("10 sums"));
            let src = b.index_addr(prep, j, PREP_STRIDE * 4);
            let pr = load_prepared::<F32>(b, Space::GlobalNc, src.into());
            let out = unscale(b, &pr, &tot);
            let dst = addr2d(b, partial_gauss, pblock, n_pad, j, GRAD_STRIDE * 4);
            for (k, v) in out.into_iter().enumerate() {
                b.st(Space::Global, Addr::from(dst).off(k as i64 * 4), v);
            }
        });
    });

    b.comment("store this chunk's point sums");
    for (p, sums) in pc.iter().enumerate() {
        let (i, ok) = point_index(&mut b, first, num_points, p as u32);
        let sums = *sums;
        b.guarded(ok, false, |b| {
            let a = addr2d(b, partial_points, chunk, num_points, i, 12);
            for (k, v) in sums.into_iter().enumerate() {
                b.st(Space::Global, Addr::from(a).off(k as i64 * 4), v);
            }
        });
    }
    Module::single(target, b.finish())
}

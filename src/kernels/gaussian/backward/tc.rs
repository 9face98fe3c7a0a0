//! `gaussian_backward_tc_f32`: the f32 backward with each Gaussian's sums on the FP64 tensor
//! cores (`mma.sync.m8n8k4.f64`). Same inputs, launch parameters and outputs as
//! `gaussian_backward_lanes_f32` (records of `super::lanes`' staging, the shared finishing
//! kernels); only the split of the work and the per-Gaussian sums differ.
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
//! # Fragments and the work of a thread
//! Lane 4 g + t (g < 8, t < 4) of warp w owns point t of each of its K chunks of 4 points (x~,
//! g', P and its two feature operands B[t][g], B[t][8 + g] in registers for the whole launch)
//! and, per 8-Gaussian tile of the staged tile, Gaussian g (A[g][t] = s of that Gaussian and
//! its point). After the K chunks the two accumulator pairs C[g][2t..2t+2] (feature columns
//! 2t, 2t + 1 and 8 + 2t, 9 + 2t) go to the block's buffer `bsum` (f64, per Gaussian of the
//! tile and warp). After the tile (a block barrier) thread q < [`TILE`] adds Gaussian q's warp
//! rows in warp order, centres and transforms them and stores `partial_gauss[(x * n_pad + j) *
//! 10 + k]` for point block x. At the end the 8 lanes of each point add their P in a fixed
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
//! Blocks of [`TcOptions::block`] threads; grid (ceil(B / (warps 4 K)), S). Block (x, c) owns
//! points x warps 4 K + w 4 K + 4 k + t and Gaussians [c chunk_len, min((c + 1) chunk_len,
//! n_pad)); chunk_len and n_pad are multiples of [`TILE`].

use super::fast_pairs::{exact_m, unscale_wide, ExactM, S2_SLOTS};
use super::lanes::REC;
use super::lanes_parts::{expanded, load_consts, load_point, stage, subtract, StageCtx};
use crate::kernels::gaussian::common::*;
use crate::kernels::gaussian::scaled::sigma;
use crate::ptx::*;

/// Gaussians staged per tile (the staging of `super::lanes`: one per thread of the first two
/// warps).
pub const TILE: u32 = 64;
/// f64 per (Gaussian, warp) row of `bsum`: the 10 used columns of the two 8-column feature
/// tiles (lanes t > 0 skip their columns 8 + 2t of the second).
const ROW: u32 = 10;
/// Features per point (columns of the GEMM that are used).
const FEATURES: usize = 10;

/// Build options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcOptions {
    /// Points per thread (chunks of 4 points per warp).
    pub k: u32,
    /// Warps per block.
    pub warps: u32,
    /// `.maxnreg`, or none.
    pub max_registers: Option<u32>,
    /// Two Gaussians per thread and `mma.sync.m16n8k4.f64` (sm_90) instead of one Gaussian and
    /// `m8n8k4` (half the mma instructions per pair).
    pub m16: bool,
}

impl TcOptions {
    /// The lowest target of the build (`m16`: sm_90).
    pub fn target(&self) -> Target {
        if self.m16 {
            Target::Sm90
        } else {
            Target::Sm80
        }
    }
    /// Threads per block.
    pub fn block(&self) -> u32 {
        self.warps * 32
    }
    /// Points per block.
    pub fn points_per_block(&self) -> u32 {
        self.warps * 4 * self.k
    }
}

/// The default build.
pub const TC_OPTIONS: TcOptions = TcOptions {
    k: 8,
    warps: 8,
    max_registers: None,
    m16: false,
};

/// The options of a variant (`PTXFLOW_GAUSS_BWD_TC`): `k<N>` points per thread (1 to 24),
/// `w<N>` warps per block (2 to 16), `r<N>` a register cap, `m16` / `m8` the mma shape (two
/// Gaussians per thread or one), joined by `-` (`k16-w4`, `k6-m16`). None for names it does not
/// parse.
pub fn tc_variant_options(name: &str) -> Option<TcOptions> {
    let mut o = TC_OPTIONS;
    for part in name.split('-') {
        let (key, val) = part.split_at(1.min(part.len()));
        let v: u32 = val.parse().ok()?;
        match key {
            "m" if v == 8 || v == 16 => o.m16 = v == 16,
            "k" if (1..=24).contains(&v) => o.k = v,
            "w" if (2..=16).contains(&v) && shared_bytes(v) <= 48 * 1024 => o.warps = v,
            "r" => o.max_registers = Some(v),
            _ => return None,
        }
    }
    Some(o)
}

/// The default module (sm_80: `mma.sync` in f64).
pub fn build_tc_f32(target: Target) -> Module {
    build_tc(target, TC_OPTIONS)
}

/// One point of a thread: x~, g', its point sums and its two feature operands.
struct Pt {
    i: Reg<U32>,
    ok: Reg<Pred>,
    xt: [Reg<F32>; 3],
    g: Reg<F32>,
    pc: [Reg<F32>; 3],
    fb: [Reg<F64>; 2],
}

/// Bytes of static shared memory of a build with `warps` warps (at most 48 KiB).
pub fn shared_bytes(warps: u32) -> u32 {
    TILE * REC * 4 + TILE * 16 + TILE * warps * ROW * 8 + warps * 4 + 32
}

/// The kernel with `opts` (`gaussian_backward_tc_f32`).
pub fn build_tc(target: Target, opts: TcOptions) -> Module {
    let warps = opts.warps;
    let rows = if opts.m16 { 2 } else { 1 };
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
    let wm = b.shared_array::<F32>("wm", warps);
    let wmax = b.shared_array::<F32>("wmax", 4);
    let tflag = b.shared_array::<U32>("tflag", 4);
    let zero = F32::imm(0.0);

    b.comment("this thread's points: x - o, g / sigma^2 (0 beyond num_points), features");
    let tid = b.special(Special::TidX);
    let pblock = b.special(Special::CtaidX);
    let chunk = b.special(Special::CtaidY);
    let lane = b.and(tid, 31u32);
    let warp = b.shr(tid, 5u32);
    let gid = b.shr(lane, 2u32);
    let tig = b.and(lane, 3u32);
    let wfirst = b.mul(warp, 4 * opts.k);
    let wfirst = b.add(wfirst, tig);
    let first = b.mad(pblock, opts.points_per_block(), wfirst);
    let is_g: Vec<Reg<Pred>> = (0..8u32).map(|g| b.setp(Cmp::Eq, gid, g)).collect();
    let od = origin.map(|o| b.cvt::<F64, F32>(o));
    let mut pts = Vec::new();
    let mut xmag: Option<Reg<F32>> = None;
    for p in 0..opts.k {
        let i = b.add(first, 4 * p);
        let ok = b.setp(Cmp::Lt, i, num_points);
        let x = load_point(&mut b, points, i, ok);
        let xt = [0, 1, 2].map(|k| b.sub(x[k], origin[k]));
        let mut pm: Option<Reg<F32>> = None;
        for v in xt {
            let a = b.abs(v);
            pm = Some(match pm {
                None => a,
                Some(m) => b.max(m, a),
            });
        }
        let pm = pm.unwrap_or_else(|| unreachable!("three coordinates"));
        xmag = Some(match xmag {
            None => pm,
            Some(m) => b.max(m, pm),
        });
        let g = b.mov(zero);
        b.guarded(ok, false, |b| {
            let ga = b.index_addr(grads, i, 4);
            let gv = b.ld::<F32>(Space::GlobalNc, ga);
            let s = sigma();
            let gs = F32::scale_const(b, gv, 1.0 / (s * s));
            b.mov_to(g, gs);
        });
        let fb = features(&mut b, x, od, &is_g);
        pts.push(Pt {
            i,
            ok,
            xt,
            g,
            pc: [(); 3].map(|_| b.mov(zero)),
            fb,
        });
    }
    b.comment("the block's largest |x - o|_inf (NaN-free max: a NaN point adds features 0)");
    let mut m = xmag.unwrap_or_else(|| unreachable!("at least one point per thread"));
    for s in [16u32, 8, 4, 2, 1] {
        let o = b.shfl(Shfl::Xor, m, s);
        m = b.max(m, o);
    }
    let lane0 = b.setp(Cmp::Eq, lane, 0u32);
    b.if_then(lane0, |b| {
        let dst = b.shared_index(&wm, warp);
        b.st(Space::Shared, dst, m);
    });
    b.bar_sync();
    let thread0 = b.setp(Cmp::Eq, tid, 0u32);
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

    let g_start = b.mul(chunk, chunk_len);
    let g_stop = b.add(g_start, chunk_len);
    let g_end = b.min(g_stop, n_pad);
    b.for_range(g_start, g_end, TILE, |b, tile_start, _| {
        b.comment("tile: the first two warps stage the tile's Gaussians");
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
        for w in 1..TILE / 32 {
            let fw = b.ld::<U32>(Space::Shared, Addr::from(tf).off(i64::from(4 * w)));
            f = b.or(f, fw);
        }
        let slow = b.setp(Cmp::Ne, f, 0u32);
        let body = |b: &mut KernelBuilder, slow: bool| {
            b.for_range(0u32, TILE / (8 * rows), 1u32, |b, mt, _| {
                b.comment("Gaussians 8 (rows mt + h) + gid x this thread's points; sums by mma");
                let group = b.mul(mt, 8 * rows);
                let mut cs = Vec::new();
                let mut mus_h = Vec::new();
                for h in 0..rows {
                    let gi = b.add(group, 8 * h);
                    let off = b.mul(gi, REC * 4);
                    let at = b.add(rec_g, off);
                    cs.push(load_consts(b, Addr::from(at)));
                    mus_h.push(slow.then(|| {
                        let off = b.mul(gi, 16u32);
                        let at = b.add(mus_g, off);
                        let [u0, u1, u2, _] = b.ld_v4::<F32>(Space::Shared, Addr::from(at));
                        [u0, u1, u2]
                    }));
                }
                let acc: Vec<Reg<F64>> = (0..4 * rows).map(|_| b.mov(F64::imm(0.0))).collect();
                for p in &pts {
                    let x = slow.then(|| load_point(b, points, p.i, p.ok));
                    let mut s = Vec::new();
                    for (c, mu) in cs.iter().zip(&mus_h) {
                        let (v, e) = match (mu, x) {
                            (Some(mu), Some(x)) => {
                                let (v, t) = subtract(b, c, *mu, x);
                                let e = F32::exp2_neg(b, t);
                                let live = b.setp(Cmp::Gt, e, zero);
                                (v.map(|x| b.selp(x, zero, live)), b.selp(e, zero, live))
                            }
                            _ => {
                                let (v, t) = expanded(b, c, p.xt);
                                (v, F32::exp2_neg(b, t))
                            }
                        };
                        let ge = b.mul(p.g, e);
                        s.push(b.cvt::<F64, F32>(ge));
                        let gv = v.map(|x| b.mul(ge, x));
                        // P += N gv, N = (w c 2^o) M^T upper triangular: N00 N01 N02 N11 N12 N22.
                        let [n00, n01, n02, n11, n12, n22] = c.n;
                        let p0 = b.fma(n00, gv[0], p.pc[0]);
                        let p0 = b.fma(n01, gv[1], p0);
                        let p0 = b.fma(n02, gv[2], p0);
                        let p1 = b.fma(n11, gv[1], p.pc[1]);
                        let p1 = b.fma(n12, gv[2], p1);
                        let p2 = b.fma(n22, gv[2], p.pc[2]);
                        for (d, v) in p.pc.iter().zip([p0, p1, p2]) {
                            b.mov_to(*d, v);
                        }
                    }
                    if rows == 1 {
                        b.mma_f64_m8n8k4([acc[0], acc[1]], s[0], p.fb[0]);
                        b.mma_f64_m8n8k4([acc[2], acc[3]], s[0], p.fb[1]);
                    } else {
                        b.mma_f64_m16n8k4([acc[0], acc[1], acc[2], acc[3]], [s[0], s[1]], p.fb[0]);
                        b.mma_f64_m16n8k4([acc[4], acc[5], acc[6], acc[7]], [s[0], s[1]], p.fb[1]);
                    }
                }
                // Row 8 (rows mt + h) + gid: columns 2 tig (tile 0) and 8 + 2 tig (tile 1).
                let off = b.mul(mt, 8 * rows * warps * ROW * 8);
                let at = b.add(acc_at, off);
                for h in 0..rows as usize {
                    let (t0, t1) = if rows == 1 {
                        (0, 2)
                    } else {
                        (2 * h, 4 + 2 * h)
                    };
                    let a = Addr::from(at).off((h * 8 * (warps * ROW) as usize * 8) as i64);
                    b.st_v2(Space::Shared, a.clone(), [acc[t0], acc[t0 + 1]]);
                    let (x, y) = (acc[t1], acc[t1 + 1]);
                    b.guarded(tig0, false, |b| b.st_v2(Space::Shared, a.off(64), [x, y]));
                }
            });
        };
        b.if_else(slow, |b| body(b, true), |b| body(b, false));
        b.bar_sync();
        b.comment("thread q < tile: Gaussian q's warp rows in order, centred, transformed");
        b.if_then(staging, |b| {
            let j = b.add(tile_start, tid);
            let base = b.mul(tid, warps * ROW);
            let src = b.shared_index(&bsum, base);
            let mut tot: Option<Vec<Reg<F64>>> = None;
            for w in 0..warps {
                let at = Addr::from(src).off(i64::from(w * ROW * 8));
                let mut v = Vec::with_capacity(FEATURES);
                for q in 0..FEATURES as i64 / 2 {
                    v.extend(b.ld_v2::<F64>(Space::Shared, at.clone().off(16 * q)));
                }
                tot = Some(match tot {
                    None => v,
                    Some(t) => t.iter().zip(&v).map(|(a, c)| b.add(*a, *c)).collect(),
                });
            }
            let tot = tot.unwrap_or_else(|| unreachable!("at least one warp"));
            let src = b.index_addr(prep, j, PREP_STRIDE * 4);
            let pr = load_prepared::<F32>(b, Space::GlobalNc, src.into());
            let m = exact_m(b, &pr);
            let sw = centre(b, &m, &tot, &pr, od);
            let out = unscale_wide(b, &m, &sw);
            let dst = addr2d(b, partial_gauss, pblock, n_pad, j, GRAD_STRIDE * 4);
            for (k, v) in out.into_iter().enumerate() {
                b.st(Space::Global, Addr::from(dst).off(k as i64 * 4), v);
            }
        });
    });

    b.comment("each point's sums over its 8 lanes (fixed butterfly); lane t stores them");
    let store = b.setp(Cmp::Lt, lane, 4u32);
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
    Module::single(target, b.finish())
}

/// The two feature operands of point `x` for lane group `gid` (`is_g[g]`: gid == g): feature
/// gid and feature 8 + gid (0 beyond the 10) of F = [1, x~, x~_a x~_b (`S2_SLOTS` order)] with
/// x~ = x - o in f64; all 0 where x~ is not finite.
fn features(
    b: &mut KernelBuilder,
    x: [Reg<F32>; 3],
    od: [Reg<F64>; 3],
    is_g: &[Reg<Pred>],
) -> [Reg<F64>; 2] {
    let xd: Vec<Reg<F64>> = (0..3)
        .map(|k| {
            let w = b.cvt::<F64, F32>(x[k]);
            b.sub(w, od[k])
        })
        .collect();
    let mut f = vec![b.mov(F64::imm(1.0)), xd[0], xd[1], xd[2]];
    for (a, c) in S2_SLOTS {
        f.push(b.mul(xd[a], xd[c]));
    }
    let pick = |b: &mut KernelBuilder, cols: &[Reg<F64>]| {
        // cols[g] for g < cols.len(), else 0.
        let mut v = b.mov(F64::imm(0.0));
        for (g, c) in cols.iter().enumerate() {
            v = b.selp(*c, v, is_g[g]);
        }
        v
    };
    let f0 = pick(b, &f[..8]);
    let f1 = pick(b, &f[8..FEATURES]);
    // Finite x~ (NaN and infinities fail): |x~0 + x~1 + x~2| < inf.
    let sum = b.add(xd[0], xd[1]);
    let sum = b.add(sum, xd[2]);
    let sum = b.abs(sum);
    let fin = b.setp(Cmp::Lt, sum, F64::imm(f64::INFINITY));
    [f0, f1].map(|v| b.selp(v, F64::imm(0.0), fin))
}

/// The expanded sums [S0, S1 (3), S2 (6)] (f64) of one Gaussian from its feature sums `t` =
/// [T0, T1 (3), T2 (6)] about o: centred on m = mu - o (c1 = T1 - m T0, C = T2 - m c1^T - T1
/// m^T), then S1 = M c1, S2 = M C M^T.
fn centre(
    b: &mut KernelBuilder,
    m: &ExactM,
    t: &[Reg<F64>],
    pr: &[Reg<F32>; 12],
    od: [Reg<F64>; 3],
) -> Vec<Reg<F64>> {
    let md: Vec<Reg<F64>> = (0..3)
        .map(|k| {
            let w = b.cvt::<F64, F32>(pr[PREP_MU as usize + k]);
            b.sub(w, od[k])
        })
        .collect();
    let t0 = t[0];
    let c1: Vec<Reg<F64>> = (0..3)
        .map(|a| {
            let nm = b.neg(md[a]);
            b.fma(nm, t0, t[1 + a])
        })
        .collect();
    let t2 = |a: usize, c: usize| {
        let (r, k) = if a >= c { (a, c) } else { (c, a) };
        let idx = S2_SLOTS
            .iter()
            .position(|&p| p == (r, k))
            .unwrap_or_else(|| unreachable!("every lower-triangle entry has a slot"));
        t[4 + idx]
    };
    // C_ac = T2_ac - m_a c1_c - m_c T1_a (symmetric; the full matrix).
    let mut cm = [[None; 3]; 3];
    for a in 0..3 {
        for c in 0..3 {
            let na = b.neg(md[a]);
            let v = b.fma(na, c1[c], t2(a, c));
            let nc = b.neg(md[c]);
            cm[a][c] = Some(b.fma(nc, t[1 + a], v));
        }
    }
    let cm = cm.map(|r| r.map(|v| v.unwrap_or_else(|| unreachable!("filled"))));
    let mm = |r: usize, c: usize| m[r][c].unwrap_or_else(|| unreachable!("lower triangle"));
    // S1 = M c1; Y = M C; S2 = Y M^T (lower triangle).
    let mut out = vec![t0];
    for r in 0..3 {
        let mut v = b.mul(mm(r, 0), c1[0]);
        for k in 1..=r {
            v = b.fma(mm(r, k), c1[k], v);
        }
        out.push(v);
    }
    let y: Vec<Vec<Reg<F64>>> = (0..3)
        .map(|r| {
            (0..3)
                .map(|c| {
                    let mut v = b.mul(mm(r, 0), cm[0][c]);
                    for k in 1..=r {
                        v = b.fma(mm(r, k), cm[k][c], v);
                    }
                    v
                })
                .collect()
        })
        .collect();
    for (r, s) in S2_SLOTS {
        let mut v = b.mul(y[r][0], mm(s, 0));
        for k in 1..=s {
            v = b.fma(y[r][k], mm(s, k), v);
        }
        out.push(v);
    }
    out
}

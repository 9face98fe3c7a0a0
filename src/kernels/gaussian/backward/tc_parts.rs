//! The pieces of `gaussian_backward_tc_f32` (see the module docs of [`super::tc`]): a thread's
//! points and their feature operands, one staged tile's pairs with the sums by `mma.sync`, and
//! the per-Gaussian centring and transform at the end.

use super::fast_pairs::{exact_m, unscale_wide, ExactM, S2_SLOTS};
use super::lanes::REC;
use super::lanes_parts::{expanded, load_consts, load_point, subtract};
use crate::kernels::gaussian::common::*;
use crate::kernels::gaussian::scaled::sigma;
use crate::ptx::*;

/// Features per point (columns of the GEMM that are used).
pub(super) const FEATURES: usize = 10;

/// One point of a thread: index, whether it exists, x~, g', its point sums and its two feature
/// operands (registers reused by every group of points).
pub(super) struct Pt {
    pub(super) i: Reg<U32>,
    pub(super) ok: Reg<Pred>,
    pub(super) xt: [Reg<F32>; 3],
    pub(super) g: Reg<F32>,
    pub(super) pc: [Reg<F32>; 3],
    pub(super) fb: [Reg<F64>; 2],
}

/// What loading a thread's points reads.
pub(super) struct PointSrc<'a> {
    pub(super) points: Reg<U64>,
    pub(super) grads: Reg<U64>,
    pub(super) num_points: Reg<U32>,
    pub(super) origin: [Reg<F32>; 3],
    pub(super) od: [Reg<F64>; 3],
    /// The lane's group (lane / 4).
    pub(super) gid: Reg<U32>,
    pub(super) _p: std::marker::PhantomData<&'a ()>,
}

/// `k` points' registers (zero).
pub(super) fn alloc_points(b: &mut KernelBuilder, k: u32) -> Vec<Pt> {
    let zero = F32::imm(0.0);
    (0..k)
        .map(|_| Pt {
            i: b.mov(0u32),
            ok: b.setp(Cmp::Ne, 0u32, 0u32),
            xt: [(); 3].map(|_| b.mov(zero)),
            g: b.mov(zero),
            pc: [(); 3].map(|_| b.mov(zero)),
            fb: [(); 2].map(|_| b.mov(F64::imm(0.0))),
        })
        .collect()
}

/// Loads points `first + 4 p` into `pts` (x~, g / sigma^2 (0 beyond num_points), features,
/// point sums 0); returns their largest |x~|_inf (a NaN-free max).
pub(super) fn fill_points(
    b: &mut KernelBuilder,
    s: &PointSrc<'_>,
    pts: &[Pt],
    first: Reg<U32>,
) -> Reg<F32> {
    let zero = F32::imm(0.0);
    let is_g: Vec<Reg<Pred>> = (0..8u32).map(|g| b.setp(Cmp::Eq, s.gid, g)).collect();
    let mut xmag: Option<Reg<F32>> = None;
    for (p, pt) in pts.iter().enumerate() {
        let i = b.add(first, 4 * p as u32);
        b.mov_to(pt.i, i);
        let ok = b.setp(Cmp::Lt, i, s.num_points);
        b.mov_to(pt.ok, ok);
        let x = load_point(b, s.points, i, ok);
        for ((xk, ok_), d) in x.iter().zip(s.origin).zip(pt.xt) {
            let v = b.sub(*xk, ok_);
            b.mov_to(d, v);
            let a = b.abs(v);
            xmag = Some(match xmag {
                None => a,
                Some(m) => b.max(m, a),
            });
        }
        b.mov_to(pt.g, zero);
        let g = pt.g;
        let grads = s.grads;
        b.guarded(ok, false, |b| {
            let ga = b.index_addr(grads, i, 4);
            let gv = b.ld::<F32>(Space::GlobalNc, ga);
            let sg = sigma();
            let gs = F32::scale_const(b, gv, 1.0 / (sg * sg));
            b.mov_to(g, gs);
        });
        let fb = features(b, x, s.od, &is_g);
        for (d, v) in pt.fb.iter().zip(fb) {
            b.mov_to(*d, v);
        }
        for d in pt.pc {
            b.mov_to(d, zero);
        }
    }
    xmag.unwrap_or_else(|| unreachable!("at least one point per thread"))
}

/// What a tile's pairs read.
pub(super) struct TileCtx<'a> {
    pub(super) pts: &'a [Pt],
    pub(super) points: Reg<U64>,
    /// This lane's first record (`rec` + gid REC) and mean (`mus` + gid 4), shared addresses.
    pub(super) rec_g: Reg<U32>,
    pub(super) mus_g: Reg<U32>,
    /// This lane's accumulator columns in `bsum` (Gaussian gid of the first m-tile).
    pub(super) acc_at: Reg<U32>,
    pub(super) tig0: Reg<Pred>,
    /// Bytes between the `bsum` rows of consecutive Gaussians.
    pub(super) gstride: u32,
    /// Gaussians per thread and mma (1: m8n8k4, 2: m16n8k4).
    pub(super) rows: u32,
    pub(super) tile: u32,
    /// Two accumulator sets (even and odd chunks: mma dependency chains half as long), added
    /// before the store.
    pub(super) split: bool,
}

/// The tile's Gaussians against this thread's points: per m-tile of 8 rows Gaussians, the
/// pairs (expanded, or the subtract form with selects when `slow`), the point sums, and the
/// Gaussians' feature sums by `mma.sync` stored to `bsum`.
pub(super) fn tile_pairs(b: &mut KernelBuilder, t: &TileCtx<'_>, slow: bool) {
    let zero = F32::imm(0.0);
    let rows = t.rows;
    b.for_range(0u32, t.tile / (8 * rows), 1u32, |b, mt, _| {
        b.comment("Gaussians 8 (rows mt + h) + gid x this thread's points; sums by mma");
        let group = b.mul(mt, 8 * rows);
        let mut cs = Vec::new();
        let mut mus_h = Vec::new();
        for h in 0..rows {
            let gi = b.add(group, 8 * h);
            let off = b.mul(gi, REC * 4);
            let at = b.add(t.rec_g, off);
            cs.push(load_consts(b, Addr::from(at)));
            mus_h.push(slow.then(|| {
                let off = b.mul(gi, 16u32);
                let at = b.add(t.mus_g, off);
                let [u0, u1, u2, _] = b.ld_v4::<F32>(Space::Shared, Addr::from(at));
                [u0, u1, u2]
            }));
        }
        let sets = if t.split { 2 } else { 1 };
        let accs: Vec<Vec<Reg<F64>>> = (0..sets)
            .map(|_| (0..4 * rows).map(|_| b.mov(F64::imm(0.0))).collect())
            .collect();
        for (pi, p) in t.pts.iter().enumerate() {
            let acc = &accs[pi % sets];
            let x = slow.then(|| load_point(b, t.points, p.i, p.ok));
            let mut s = Vec::new();
            for (c, mu) in cs.iter().zip(&mus_h) {
                let (v, e) = match (mu, x) {
                    (Some(mu), Some(x)) => {
                        let (v, tt) = subtract(b, c, *mu, x);
                        let e = F32::exp2_neg(b, tt);
                        let live = b.setp(Cmp::Gt, e, zero);
                        (v.map(|x| b.selp(x, zero, live)), b.selp(e, zero, live))
                    }
                    _ => {
                        let (v, tt) = expanded(b, c, p.xt);
                        (v, F32::exp2_neg(b, tt))
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
        let acc = &accs[0];
        if let Some(odd) = accs.get(1) {
            for (a, o) in acc.iter().zip(odd) {
                let v = b.add(*a, *o);
                b.mov_to(*a, v);
            }
        }
        // Row 8 (rows mt + h) + gid: columns 2 tig (tile 0) and 8 + 2 tig (tile 1, tig 0).
        let off = b.mul(mt, 8 * rows * t.gstride);
        let at = b.add(t.acc_at, off);
        for h in 0..rows as usize {
            let (t0, t1) = if rows == 1 {
                (0, 2)
            } else {
                (2 * h, 4 + 2 * h)
            };
            let a = Addr::from(at).off((h as u32 * 8 * t.gstride) as i64);
            b.st_v2(Space::Shared, a.clone(), [acc[t0], acc[t0 + 1]]);
            let (x, y) = (acc[t1], acc[t1 + 1]);
            b.guarded(t.tig0, false, |b| b.st_v2(Space::Shared, a.off(64), [x, y]));
        }
    });
}

/// Gaussian j's 10 output sums from its feature sums `tot` (f64), stored at `dst` (global):
/// centred and transformed ([`centre`], `unscale_wide`).
pub(super) fn finish_gaussian(
    b: &mut KernelBuilder,
    prep: Reg<U64>,
    j: Reg<U32>,
    tot: &[Reg<F64>],
    od: [Reg<F64>; 3],
    dst: Reg<U64>,
) {
    let src = b.index_addr(prep, j, PREP_STRIDE * 4);
    let pr = load_prepared::<F32>(b, Space::GlobalNc, src.into());
    let m = exact_m(b, &pr);
    let sw = centre(b, &m, tot, &pr, od);
    let out = unscale_wide(b, &m, &sw);
    for (k, v) in out.into_iter().enumerate() {
        b.st(Space::Global, Addr::from(dst).off(k as i64 * 4), v);
    }
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
        for (k, ck) in c1.iter().enumerate().take(r + 1).skip(1) {
            v = b.fma(mm(r, k), *ck, v);
        }
        out.push(v);
    }
    let y: Vec<Vec<Reg<F64>>> = (0..3)
        .map(|r| {
            (0..3)
                .map(|c| {
                    let mut v = b.mul(mm(r, 0), cm[0][c]);
                    for (k, row) in cm.iter().enumerate().take(r + 1).skip(1) {
                        v = b.fma(mm(r, k), row[c], v);
                    }
                    v
                })
                .collect()
        })
        .collect();
    for (r, s) in S2_SLOTS {
        let mut v = b.mul(y[r][0], mm(s, 0));
        for (k, yk) in y[r].iter().enumerate().take(s + 1).skip(1) {
            v = b.fma(*yk, mm(s, k), v);
        }
        out.push(v);
    }
    out
}

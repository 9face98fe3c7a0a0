//! [`super::OPT_DEVICE_EIGEN`]: the Newton step's eigen path on the device, so no step asks
//! the host (`newton.rs` calls [`newton_eigen`] where the Cholesky path cannot go).
//!
//! # The maths
//! The host's `ndt::newton_step::newton_increment` takes `A = −H = V Λ Vᵀ` (nalgebra's
//! `SymmetricEigen`) and returns `Δ = V diag(1 / max(|λ_k|, f)) Vᵀ g` with `f = 1e-9 max |λ|`,
//! positive definite when every `λ_k > f`, singular when `max |λ|` is zero or not finite.
//! `Δ` is a function of `A` (not of the particular eigenvectors), so any accurate
//! decomposition gives the host's `Δ` up to rounding. Here: cyclic Jacobi with the
//! round-robin ordering, three disjoint rotations at a time (five rounds a sweep cover the
//! fifteen pairs), sweeps until the off-diagonal sum of squares is below `1e-28` times the
//! diagonal's (or [`MAX_SWEEPS`]).
//!
//! Each rotation's angle comes from approximate reciprocals and square roots (an angle off by
//! a relative 2^-20 still shrinks its entry by that factor; convergence stays fast), while
//! `c = (1 + t²)^(-1/2)` gets two Newton steps so `c² + s² = 1` to rounding: every rotation
//! is orthogonal to working precision, which is what the accuracy of `V` and `Λ` rests on.
//!
//! # Lanes
//! Every group of eight lanes holds the whole problem (lane `l`, row `l mod 8`; the groups
//! compute the same numbers, lanes 6 and 7 of a group mirror rows 0 and 1 and stay out of the
//! sums): row `i` of `A` and of `V`. A round's partner rows swap their rows by shuffles, the
//! first lane of each pair computes the pair's `(c, s)`, every lane takes the three pairs'
//! values by shuffles, applies `Jᵀ` to its row (with the partner's row) and `J` to its row's
//! columns, and `J` to its row of `V`. The sums (off-diagonal test, `Vᵀ g`) are xor
//! butterflies inside the group, the same value in every lane, so every branch is uniform.

use crate::kernels::ndt::solve::factor::{at, Lower};
use crate::ptx::*;

/// Sweeps at most (a 6×6 needs about five; the cap only bounds NaN or pathological input).
pub const MAX_SWEEPS: u32 = 12;
/// Stop when `Σ_{i≠j} a_ij² ≤ OFF_TOL · Σ_i a_ii²`.
const OFF_TOL: f64 = 1e-28;
/// `EIGEN_FLOOR` of `ndt::newton_step`.
const EIGEN_FLOOR: f64 = 1e-9;

/// The round-robin rounds: three disjoint pairs `(p, q)`, `p < q`, per round (row 5 fixed,
/// rows 0..5 rotating), every pair once in five rounds.
pub fn rounds() -> [[(usize, usize); 3]; 5] {
    std::array::from_fn(|r| {
        let pair = |x: usize, y: usize| (x.min(y), x.max(y));
        [
            pair(r, 5),
            pair((r + 1) % 5, (r + 4) % 5),
            pair((r + 2) % 5, (r + 3) % 5),
        ]
    })
}

/// What [`newton_eigen`] leaves in every lane of the solver warp.
pub(super) struct Eigen {
    /// `Δ` (the host's `newton_increment` up to rounding).
    pub delta: [Reg<F64>; 6],
    /// Every eigenvalue above the floor.
    pub pd: Reg<Pred>,
    /// `max |λ|` zero or not finite: the host's `None`.
    pub singular: Reg<Pred>,
    /// Jacobi sweeps run (the tests read it).
    #[allow(dead_code)]
    pub sweeps: Reg<U32>,
}

fn sym(a: &Lower, i: usize, j: usize) -> Reg<F64> {
    if j <= i {
        at(a, i, j)
    } else {
        at(a, j, i)
    }
}

/// `vals[k]` where `is[k]` (the first when none holds).
fn pick(b: &mut KernelBuilder, vals: &[Reg<F64>; 6], is: &[Reg<Pred>; 6]) -> Reg<F64> {
    let mut v = vals[0];
    for k in 1..6 {
        v = b.selp(vals[k], v, is[k]);
    }
    v
}

/// Sum over the eight-lane group (lanes 6 and 7 pass zeros); every lane gets the same value.
fn group_sum(b: &mut KernelBuilder, v: Reg<F64>, real: Reg<Pred>) -> Reg<F64> {
    let mut acc = b.selp(v, 0.0f64, real);
    for k in [1u32, 2, 4] {
        let o = b.shfl(Shfl::Xor, acc, k);
        acc = b.add(acc, o);
    }
    acc
}

/// `(c, s)` of the rotation that zeroes `a_pq` (`d = a_qq − a_pp`, `e = 2 a_pq`):
/// `t = sgn(d) e / (|d| + sqrt(d² + e²))` from approximate operations, clamped to `[−1, 1]`
/// (0 where `e = 0`), then `c = (1 + t²)^(-1/2)` to working precision, `s = t c`.
/// With `f32_angle` ([`super::OPT_EIGEN_F32_ANGLE`]) `t` and the seed of `c` come from f32
/// arithmetic (single SFU instructions; `t` to about 2^-22, which only slows the last sweep's
/// convergence a little) and two f64 Newton steps make `c` exact to rounding as before.
fn rotation(
    b: &mut KernelBuilder,
    d: Reg<F64>,
    e: Reg<F64>,
    f32_angle: bool,
) -> (Reg<F64>, Reg<F64>) {
    if f32_angle {
        return rotation_f32(b, d, e);
    }
    let ee = b.mul(e, e);
    let x = b.fma(d, d, ee);
    let rx = b.rsqrt(x);
    let h = b.mul(x, rx);
    let ad = b.abs(d);
    let den = b.add(ad, h);
    let neg = b.setp(Cmp::Lt, d, 0.0f64);
    let ne = b.neg(e);
    let num = b.selp(ne, e, neg);
    let rden = b.rcp_approx(den);
    let t = b.mul(num, rden);
    let t = b.min(t, 1.0f64);
    let t = b.max(t, -1.0f64);
    let zero = b.setp(Cmp::Eq, e, 0.0f64);
    let t = b.selp(0.0f64, t, zero);
    let y = b.fma(t, t, 1.0f64);
    let mut c = b.rsqrt(y);
    for _ in 0..2 {
        // c += c (1 − y c²) / 2
        let yc = b.mul(y, c);
        let r = b.fma(yc, c, -1.0f64);
        let hc = b.mul(c, -0.5f64);
        c = b.fma(hc, r, c);
    }
    let s = b.mul(t, c);
    (c, s)
}

/// [`rotation`] with the angle from f32 arithmetic.
fn rotation_f32(b: &mut KernelBuilder, d: Reg<F64>, e: Reg<F64>) -> (Reg<F64>, Reg<F64>) {
    let d32 = b.cvt::<F32, F64>(d);
    let e32 = b.cvt::<F32, F64>(e);
    let ee = b.mul(e32, e32);
    let x = b.fma(d32, d32, ee);
    let h = b.sqrt_approx(x);
    let ad = b.abs(d32);
    let den = b.add(ad, h);
    let neg = b.setp(Cmp::Lt, d32, 0.0f32);
    let ne = b.neg(e32);
    let num = b.selp(ne, e32, neg);
    let rden = b.rcp_approx(den);
    let t32 = b.mul(num, rden);
    let t32 = b.min(t32, 1.0f32);
    let t32 = b.max(t32, -1.0f32);
    let zero = b.setp(Cmp::Eq, e32, 0.0f32);
    let t32 = b.selp(0.0f32, t32, zero);
    let y32 = b.fma(t32, t32, 1.0f32);
    let c32 = b.rsqrt(y32);
    let t = b.cvt::<F64, F32>(t32);
    let mut c = b.cvt::<F64, F32>(c32);
    let y = b.fma(t, t, 1.0f64);
    for _ in 0..2 {
        let yc = b.mul(y, c);
        let r = b.fma(yc, c, -1.0f64);
        let hc = b.mul(c, -0.5f64);
        c = b.fma(hc, r, c);
    }
    let s = b.mul(t, c);
    (c, s)
}

/// The eigen path of `newton_increment` for `a = −H` (lower triangle, the same registers in
/// every lane) and `g`, over the solver warp (`lane`: its lane index). See the module docs.
/// `all_lanes` ([`super::OPT_EIGEN_ALL_LANES`]): every lane takes the three pairs' entries
/// by shuffles at the start of a round and computes all three rotations itself (the same
/// numbers in every lane, no broadcast after them), and the off-diagonal test starts before
/// the third sweep.
#[allow(clippy::needless_range_loop)] // k indexes rows, columns and lane predicates together
pub(super) fn newton_eigen(
    b: &mut KernelBuilder,
    a: &Lower,
    g: &[Reg<F64>; 6],
    lane: Reg<U32>,
    all_lanes: bool,
    f32_angle: bool,
) -> Eigen {
    b.comment("device solve: the eigen path (cyclic Jacobi over the solver warp)");
    let li = b.and(lane, 7u32);
    let base = b.and(lane, 24u32);
    let real = b.setp(Cmp::Lt, li, 6u32);
    let wrapped = b.sub(li, 6u32);
    let row = b.selp(li, wrapped, real);
    let is_row: [Reg<Pred>; 6] = std::array::from_fn(|i| b.setp(Cmp::Eq, row, i as u32));
    let sh4 = b.shl(row, 2u32);
    let arow: [Reg<F64>; 6] = [(); 6].map(|_| b.reg::<F64>());
    let vrow: [Reg<F64>; 6] = [(); 6].map(|_| b.reg::<F64>());
    for j in 0..6 {
        let col: [Reg<F64>; 6] = std::array::from_fn(|i| sym(a, i, j));
        let v = pick(b, &col, &is_row);
        b.mov_to(arow[j], v);
        let one = b.selp(1.0f64, 0.0f64, is_row[j]);
        b.mov_to(vrow[j], one);
    }
    let sweeps = b.mov(0u32);
    let rounds = rounds();
    b.loop_forever(|b, done, _| {
        // The test: Σ off-diagonal² against Σ diagonal² (NaN never passes: the cap ends it).
        let test = |b: &mut KernelBuilder| {
            let mut off = b.mov(0.0f64);
            for j in 0..6 {
                let sq = b.mul(arow[j], arow[j]);
                let sq = b.selp(0.0f64, sq, is_row[j]);
                off = b.add(off, sq);
            }
            let diag = pick(b, &arow, &is_row);
            let dsq = b.mul(diag, diag);
            let off = group_sum(b, off, real);
            let dsq = group_sum(b, dsq, real);
            let lim = b.mul(dsq, OFF_TOL);
            let small = b.setp(Cmp::Le, off, lim);
            let capped = b.setp(Cmp::Ge, sweeps, MAX_SWEEPS);
            let stop = b.or(small, capped);
            b.bra_if(stop, done);
        };
        if all_lanes {
            let later = b.setp(Cmp::Ge, sweeps, 2u32);
            b.if_then(later, test);
        } else {
            test(b);
        }
        let n = b.add(sweeps, 1u32);
        b.mov_to(sweeps, n);
        for pairs in rounds.iter() {
            let mut pack = 0u32;
            for &(p, q) in pairs {
                pack |= (q as u32) << (4 * p) | (p as u32) << (4 * q);
            }
            let partner = b.shr(pack, sh4);
            let partner = b.and(partner, 7u32);
            let is_partner: [Reg<Pred>; 6] =
                std::array::from_fn(|k| b.setp(Cmp::Eq, partner, k as u32));
            let src = b.add(base, partner);
            let other: [Reg<F64>; 6] = arow.map(|v| b.shfl(Shfl::Idx, v, src));
            let cs: Vec<(Reg<F64>, Reg<F64>)> = if all_lanes {
                // Lane p's a_pp and a_pq, lane q's a_qq: the same inputs in every lane.
                let ins: Vec<(Reg<F64>, Reg<F64>, Reg<F64>)> = pairs
                    .iter()
                    .map(|&(p, q)| {
                        let fp = b.add(base, p as u32);
                        let fq = b.add(base, q as u32);
                        let app = b.shfl(Shfl::Idx, arow[p], fp);
                        let apq = b.shfl(Shfl::Idx, arow[q], fp);
                        let aqq = b.shfl(Shfl::Idx, arow[q], fq);
                        (app, apq, aqq)
                    })
                    .collect();
                ins.iter()
                    .map(|&(app, apq, aqq)| {
                        let d = b.sub(aqq, app);
                        let e = b.add(apq, apq);
                        rotation(b, d, e, f32_angle)
                    })
                    .collect()
            } else {
                let mine_d = pick(b, &arow, &is_row);
                let their_d = pick(b, &other, &is_partner);
                let off_pq = pick(b, &arow, &is_partner);
                // Valid in the pair's first lane (p = row), which the others read.
                let d = b.sub(their_d, mine_d);
                let e = b.add(off_pq, off_pq);
                let (c, s) = rotation(b, d, e, f32_angle);
                pairs
                    .iter()
                    .map(|&(p, _)| {
                        let from = b.add(base, p as u32);
                        (b.shfl(Shfl::Idx, c, from), b.shfl(Shfl::Idx, s, from))
                    })
                    .collect()
            };
            // Jᵀ on the rows: p' = c p − s q, q' = s p + c q.
            let mut my_c = cs[0].0;
            let mut my_s = cs[0].1;
            for (k, &(p, q)) in pairs.iter().enumerate().skip(1) {
                let mine = b.or(is_row[p], is_row[q]);
                my_c = b.selp(cs[k].0, my_c, mine);
                my_s = b.selp(cs[k].1, my_s, mine);
            }
            let first = b.setp(Cmp::Lt, row, partner);
            let neg_s = b.neg(my_s);
            let sm = b.selp(neg_s, my_s, first);
            for j in 0..6 {
                let cm = b.mul(my_c, arow[j]);
                let v = b.fma(sm, other[j], cm);
                b.mov_to(arow[j], v);
            }
            // J on the columns of A's row and V's row.
            for (k, &(p, q)) in pairs.iter().enumerate() {
                let (ck, sk) = cs[k];
                for m in [&arow, &vrow] {
                    let (xp, xq) = (m[p], m[q]);
                    let sq = b.mul(sk, xq);
                    let nsq = b.neg(sq);
                    let np = b.fma(ck, xp, nsq);
                    let cq = b.mul(ck, xq);
                    let nq = b.fma(sk, xp, cq);
                    b.mov_to(m[p], np);
                    b.mov_to(m[q], nq);
                }
            }
        }
    });
    // Λ in every lane, the floor, the flags.
    let diag = pick(b, &arow, &is_row);
    let lam: [Reg<F64>; 6] = std::array::from_fn(|k| {
        let from = b.add(base, k as u32);
        b.shfl(Shfl::Idx, diag, from)
    });
    let mut largest = b.mov(0.0f64);
    for l in lam.iter() {
        let m = b.abs(*l);
        largest = b.max(largest, m);
    }
    let pos = b.setp(Cmp::Gt, largest, 0.0f64);
    let fin = b.setp(Cmp::Lt, largest, f64::INFINITY);
    let good = b.and(pos, fin);
    let singular = b.not(good);
    let floor = b.mul(EIGEN_FLOOR, largest);
    let mut pd = b.setp(Cmp::Gt, lam[0], floor);
    for l in lam.iter().skip(1) {
        let above = b.setp(Cmp::Gt, *l, floor);
        pd = b.and(pd, above);
    }
    // Vᵀ g (butterflies over the rows), scaled, then V times it (row `row` here).
    let gi = pick(b, g, &is_row);
    let mut z = [gi; 6];
    for j in 0..6 {
        let p = b.mul(gi, vrow[j]);
        let w = group_sum(b, p, real);
        let m = b.abs(lam[j]);
        let m = b.max(m, floor);
        z[j] = b.div(w, m);
    }
    let mut mine = b.mov(0.0f64);
    for j in 0..6 {
        mine = b.fma(vrow[j], z[j], mine);
    }
    let delta: [Reg<F64>; 6] = std::array::from_fn(|k| {
        let from = b.add(base, k as u32);
        b.shfl(Shfl::Idx, mine, from)
    });
    Eigen {
        delta,
        pd,
        singular,
        sweeps,
    }
}

#[cfg(test)]
mod tests;

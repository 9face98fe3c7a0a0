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
fn rotation(b: &mut KernelBuilder, d: Reg<F64>, e: Reg<F64>) -> (Reg<F64>, Reg<F64>) {
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

/// The eigen path of `newton_increment` for `a = −H` (lower triangle, the same registers in
/// every lane) and `g`, over the solver warp (`lane`: its lane index). See the module docs.
#[allow(clippy::needless_range_loop)] // k indexes rows, columns and lane predicates together
pub(super) fn newton_eigen(
    b: &mut KernelBuilder,
    a: &Lower,
    g: &[Reg<F64>; 6],
    lane: Reg<U32>,
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
            let mine_d = pick(b, &arow, &is_row);
            let their_d = pick(b, &other, &is_partner);
            let off_pq = pick(b, &arow, &is_partner);
            // Valid in the pair's first lane (p = row), which the others read.
            let d = b.sub(their_d, mine_d);
            let e = b.add(off_pq, off_pq);
            let (c, s) = rotation(b, d, e);
            let cs: Vec<(Reg<F64>, Reg<F64>)> = pairs
                .iter()
                .map(|&(p, _)| {
                    let from = b.add(base, p as u32);
                    (b.shfl(Shfl::Idx, c, from), b.shfl(Shfl::Idx, s, from))
                })
                .collect();
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ndt::newton_step::newton_increment;
    use crate::rng::Rng;
    use crate::sim::{Grid, Memory, Program};
    use nalgebra::{Matrix6, Vector6};

    #[test]
    fn rounds_cover_every_pair_once() {
        let mut seen = std::collections::BTreeSet::new();
        for pairs in rounds() {
            let mut rows: Vec<usize> = pairs.iter().flat_map(|&(p, q)| [p, q]).collect();
            rows.sort();
            assert_eq!(rows, vec![0, 1, 2, 3, 4, 5]);
            for (p, q) in pairs {
                assert!(p < q && seen.insert((p, q)));
            }
        }
        assert_eq!(seen.len(), 15);
    }

    /// One warp: `a` (21 lower-triangle f64, row by row) and `g` (6) in, lane 0 stores `Δ`,
    /// `pd` and `singular` (as 1.0 / 0.0).
    fn program() -> Program {
        let mut kb = KernelBuilder::new("eigen_test");
        let (ap, gp, op) = (
            kb.global_arg::<F64>("a"),
            kb.global_arg::<F64>("g"),
            kb.global_arg::<F64>("out"),
        );
        let b = &mut kb;
        let mut a: Lower = [[None; 6]; 6];
        let mut k = 0u32;
        for i in 0..6 {
            for j in 0..=i {
                a[i][j] = Some(b.load_at(ap, k));
                k += 1;
            }
        }
        let g: [Reg<F64>; 6] = std::array::from_fn(|i| b.load_at(gp, i as u32));
        let lane = b.special(Special::TidX);
        let e = newton_eigen(b, &a, &g, lane);
        let lane0 = b.setp(Cmp::Eq, lane, 0u32);
        b.when(lane0, |b| {
            for (i, d) in e.delta.iter().enumerate() {
                b.store_at(op, i as u32, *d);
            }
            let pd = b.selp(1.0f64, 0.0f64, e.pd);
            b.store_at(op, 6u32, pd);
            let s = b.selp(1.0f64, 0.0f64, e.singular);
            b.store_at(op, 7u32, s);
        });
        let m = Module::single(Target::Sm90, kb.finish());
        Program::parse(&m.emit().unwrap()).unwrap()
    }

    fn run(prog: &Program, a: &Matrix6<f64>, g: &Vector6<f64>) -> (Vector6<f64>, bool, bool) {
        let mut mem = Memory::new();
        let mut low = Vec::new();
        for i in 0..6 {
            for j in 0..=i {
                low.push(a[(i, j)]);
            }
        }
        let aa = mem.upload("a", &low);
        let ga = mem.upload("g", g.as_slice());
        let oa = mem.upload("out", &[f64::NAN; 8]);
        prog.run(Grid::linear(1, 32), &[aa, ga, oa], &mut mem)
            .unwrap();
        let o = mem.download::<f64>("out").unwrap();
        (
            Vector6::from_column_slice(&o[..6]),
            o[6] == 1.0,
            o[7] == 1.0,
        )
    }

    #[test]
    fn jacobi_matches_the_host_eigen_path() {
        let prog = program();
        let mut rng = Rng::new(11);
        for k in 0..120 {
            let m = Matrix6::from_fn(|_, _| rng.normal());
            let q = m.qr().q();
            let lam = Vector6::from_fn(|i, _| match k % 4 {
                0 => rng.range(-1.0, 10.0),
                1 => 10f64.powf(rng.range(-12.0, 3.0)) * if i % 2 == 0 { 1.0 } else { -1.0 },
                2 => rng.range(-5.0, 5.0) * 1e4,
                _ => {
                    if i < 2 {
                        3.0
                    } else {
                        rng.range(-2.0, 2.0)
                    }
                }
            });
            let a = q * Matrix6::from_diagonal(&lam) * q.transpose();
            let a = (a + a.transpose()) * 0.5;
            let g = Vector6::from_fn(|_, _| rng.normal());
            let (want, pd) = newton_increment(&-a, &g).expect("non-zero spectrum");
            let (got, gpd, sing) = run(&prog, &a, &g);
            assert!(!sing, "case {k}");
            assert_eq!(gpd, pd, "case {k}: {lam:?}");
            let rel = (got - want).norm() / want.norm();
            let cond = lam.amax()
                / lam
                    .iter()
                    .map(|l| l.abs())
                    .fold(f64::INFINITY, f64::min)
                    .max(1e-9 * lam.amax());
            assert!(
                rel <= 1e-14 * cond.max(1.0),
                "case {k}: rel {rel:e}, cond {cond:e}"
            );
        }
    }

    #[test]
    fn diagonal_and_zero_matrices() {
        let prog = program();
        let g = Vector6::new(1.0, -2.0, 3.0, 0.5, -0.25, 2.0);
        let a = Matrix6::from_diagonal(&Vector6::new(4.0, -2.0, 1.0, 8.0, -0.5, 3.0));
        let (want, pd) = newton_increment(&-a, &g).unwrap();
        let (got, gpd, sing) = run(&prog, &a, &g);
        assert!(!sing && gpd == pd);
        assert!((got - want).norm() <= 1e-15 * want.norm(), "{got} {want}");
        let (_, _, sing) = run(&prog, &Matrix6::zeros(), &g);
        assert!(sing);
    }
}

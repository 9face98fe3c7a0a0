//! The randomized SVD's small step as the GPU runs it (`rnn_small_eig`, one block): the CPU
//! mirror, operation for operation (f64, `mul_add` where the kernel has `fma.rn`, correctly
//! rounded `sqrt`, `/`), so that tests can ask the GPU for bit-equal results.
//!
//! 1. Parallel cyclic Jacobi on `G` (the Gram of B^T, `l x l`, read from the lower triangle of a
//!    `W x W` row-major array, W = [`SMALL_W`]): indices `0..ne` (`ne = l` rounded up to even;
//!    index l is a zero row when l is odd) are paired by the round-robin ("circle") ordering,
//!    `ne - 1` rounds per sweep, `ne / 2` disjoint pairs per round. Each round first computes
//!    every pair's rotation from the round's starting matrix, then applies all of them at once:
//!    the `2 x 2` block of rows in pair P and columns in pair Q becomes `J_P^T M J_Q` (rows
//!    rotated first, then columns); a rotated pair's own diagonal block becomes
//!    `(a_pp - t a_pq, 0; 0, a_qq + t a_pq)`. `V <- V J` alike.
//! 2. A pair (p, q) rotates only when `|a_pq| > JACOBI_TOL sqrt(a_pp a_qq)` (in squares; the relative
//!    criterion under which Jacobi keeps the small eigenvalues of a graded positive definite
//!    matrix, such as the rSVD's Gram, to high relative accuracy); a sweep starts only while
//!    some pair is above it, at most [`JACOBI_MAX_SWEEPS`] sweeps.
//! 3. The Gram route's finish (`crate::rnn::rsvd_small::gram_factors`): the k largest
//!    eigenvalues (descending, ties in index order), `sigma_j = sqrt(lambda_j)`, the check
//!    `max |Sigma^-1 Z^T G Z Sigma^-1 - I| <= EIGEN_ORTHO_TOL`, and the packed factors
//!    `Z_k`, `Z_k Sigma_k^-1` for `U = Q Z_k`, `V = B^T Z_k Sigma_k^-1`.
//!
//! A status other than [`SMALL_OK`] (G not finite, no convergence, `sigma_k` below
//! `EIGEN_MIN_RATIO sigma_1`, or a failed check) sends the caller to the host route.

use super::rsvd_small::{EIGEN_MIN_RATIO, EIGEN_ORTHO_TOL};

pub use crate::kernels::rnn::small::abi::{
    JACOBI_MAX_SWEEPS, JACOBI_TOL, JACOBI_TOL2, SMALL_CHECK, SMALL_NOT_FINITE,
    SMALL_NO_CONVERGENCE, SMALL_OK, SMALL_RATIO,
};

/// Width of the padded small matrices (the GPU path's sketch width).
pub const SMALL_W: usize = crate::kernels::rnn::small::W as usize;
/// Layout of the kernel's `out` array (f64): `[0, k)` the singular values, then the status.
pub const OUT_STATUS: usize = crate::kernels::rnn::small::abi::OUT_STATUS as usize;
/// `out[OUT_SWEEPS]`: sweeps taken.
pub const OUT_SWEEPS: usize = crate::kernels::rnn::small::abi::OUT_SWEEPS as usize;
/// `out[OUT_DEFECT]`: the check's value (when it ran).
pub const OUT_DEFECT: usize = crate::kernels::rnn::small::abi::OUT_DEFECT as usize;
/// `out[OUT_ROUNDS]`: rounds in which some pair rotated.
pub const OUT_ROUNDS: usize = crate::kernels::rnn::small::abi::OUT_ROUNDS as usize;
/// Length of `out`.
pub const OUT_LEN: usize = crate::kernels::rnn::small::abi::OUT_LEN as usize;

/// The small step's result: status, sweeps, check value, S (k values) and the packed factors
/// (`W x W` row-major each; first k columns).
#[derive(Clone, Debug, PartialEq)]
pub struct SmallStep {
    /// [`SMALL_OK`] or the reason the host route must take over.
    pub status: u32,
    /// Jacobi sweeps taken.
    pub sweeps: u32,
    /// Rounds in which some pair rotated (the others cost the kernel one barrier).
    pub rounds: u32,
    /// `max |Sigma^-1 Z^T G Z Sigma^-1 - I|` (0 when the check did not run).
    pub defect: f64,
    /// The k singular values, descending (zeros unless the status is [`SMALL_OK`]).
    pub s: Vec<f64>,
    /// `Z_k` packed (`W x W`).
    pub zk: Vec<f64>,
    /// `Z_k Sigma_k^-1` packed (`W x W`).
    pub xk: Vec<f64>,
}

/// Pair `k` of round `round` in the circle ordering of `ne` indices (`m = ne - 1` rounds).
pub fn pair(round: usize, k: usize, ne: usize) -> (usize, usize) {
    let m = ne - 1;
    if k == 0 {
        (round, m)
    } else {
        ((round + k) % m, (round + m - k) % m)
    }
}

/// Whether pair (p, q) is above the rotation threshold, compared in squares (no square root
/// on the kernel's critical path): `a_pq^2 > JACOBI_TOL^2 max(a_pp a_qq, 0)`.
fn big(app: f64, aqq: f64, apq: f64) -> bool {
    apq * apq > JACOBI_TOL2 * (app * aqq).max(0.0)
}

/// `(c, s, t)` of the rotation that zeroes `a_pq`: with `d = a_qq - a_pp`, `e = 2 a_pq`,
/// `r = sqrt(d^2 + e^2)` and `w = |d| + r`, `t = sign(d) e / w` (the smaller root of
/// `t^2 + 2 (d / e) t - 1 = 0`), `c = 1 / sqrt(1 + t^2) = sqrt(w / (2 r))`, `s = t c`: three
/// long operations in a chain (sqrt, div, sqrt) instead of five.
fn rotation(app: f64, aqq: f64, apq: f64) -> (f64, f64, f64) {
    let d = aqq - app;
    let e = 2.0 * apq;
    let r = d.mul_add(d, e * e).sqrt();
    let w = d.abs() + r;
    let c = (w / (2.0 * r)).sqrt();
    let te = e / w;
    let t = if d >= 0.0 { te } else { -te };
    (c, t * c, t)
}

/// `(c x - s y, s x + c y)` as the kernel rounds it.
#[inline(always)]
fn rot(c: f64, s: f64, x: f64, y: f64) -> (f64, f64) {
    (c.mul_add(x, -(s * y)), s.mul_add(x, c * y))
}

/// Runs the whole small step on `gram` (`W x W`, lower triangle read) for width `l` and rank
/// `k` (`1 <= k <= l <= W`).
pub fn small_step(gram: &[f64], l: usize, k: usize) -> SmallStep {
    const W: usize = SMALL_W;
    assert!(gram.len() == W * W && (1..=W).contains(&l) && (1..=l).contains(&k));
    let mut a = vec![0.0f64; W * W];
    let mut finite = true;
    for i in 0..l {
        for j in 0..=i {
            let v = gram[i * W + j];
            finite &= v.is_finite();
            a[i * W + j] = v;
            a[j * W + i] = v;
        }
    }
    let mut v = vec![0.0f64; W * W];
    for i in 0..W {
        v[i * W + i] = 1.0;
    }
    let mut out = SmallStep {
        status: SMALL_OK,
        sweeps: 0,
        rounds: 0,
        defect: 0.0,
        s: vec![0.0; k],
        zk: vec![0.0; W * W],
        xk: vec![0.0; W * W],
    };
    if !finite {
        out.status = SMALL_NOT_FINITE;
        return out;
    }
    let ne = l + (l & 1);
    let np = ne / 2;
    let any_big = |a: &[f64]| {
        (0..l).any(|i| (i + 1..l).any(|j| big(a[i * W + i], a[j * W + j], a[i * W + j])))
    };
    loop {
        if !any_big(&a) {
            break;
        }
        if out.sweeps == JACOBI_MAX_SWEEPS {
            out.status = SMALL_NO_CONVERGENCE;
            return out;
        }
        out.sweeps += 1;
        for round in 0..ne - 1 {
            // (p, q, c, s, t, rotates) of every pair, from the round's starting matrix.
            let rots: Vec<(usize, usize, f64, f64, f64, bool)> = (0..np)
                .map(|kp| {
                    let (p, q) = pair(round, kp, ne);
                    let (app, aqq, apq) = (a[p * W + p], a[q * W + q], a[p * W + q]);
                    if big(app, aqq, apq) {
                        let (c, s, t) = rotation(app, aqq, apq);
                        (p, q, c, s, t, true)
                    } else {
                        (p, q, 1.0, 0.0, 0.0, false)
                    }
                })
                .collect();
            out.rounds += u32::from(rots.iter().any(|r| r.5));
            for bp in 0..np {
                for bq in bp..np {
                    let (p1, q1, c1, s1, t1, on1) = rots[bp];
                    let (p2, q2, c2, s2, _, on2) = rots[bq];
                    if bp == bq {
                        if on1 {
                            let apq = a[p1 * W + q1];
                            a[p1 * W + p1] = (-t1).mul_add(apq, a[p1 * W + p1]);
                            a[q1 * W + q1] = t1.mul_add(apq, a[q1 * W + q1]);
                            a[p1 * W + q1] = 0.0;
                            a[q1 * W + p1] = 0.0;
                        }
                        continue;
                    }
                    if !on1 && !on2 {
                        continue;
                    }
                    let (m11, m12) = (a[p1 * W + p2], a[p1 * W + q2]);
                    let (m21, m22) = (a[q1 * W + p2], a[q1 * W + q2]);
                    let (r11, r21) = rot(c1, s1, m11, m21);
                    let (r12, r22) = rot(c1, s1, m12, m22);
                    let (n11, n12) = rot(c2, s2, r11, r12);
                    let (n21, n22) = rot(c2, s2, r21, r22);
                    for (i, j, x) in [(p1, p2, n11), (p1, q2, n12), (q1, p2, n21), (q1, q2, n22)] {
                        a[i * W + j] = x;
                        a[j * W + i] = x;
                    }
                }
            }
            for &(p, q, c, s, _, on) in &rots {
                if !on {
                    continue;
                }
                for r in 0..W {
                    let (x, y) = rot(c, s, v[r * W + p], v[r * W + q]);
                    v[r * W + p] = x;
                    v[r * W + q] = y;
                }
            }
        }
    }
    // The k largest eigenvalues, descending, ties in index order.
    let vals: Vec<f64> = (0..l).map(|i| a[i * W + i]).collect();
    let mut order = vec![0usize; l];
    for i in 0..l {
        let rank = (0..l)
            .filter(|&j| vals[j] > vals[i] || (vals[j] == vals[i] && j < i))
            .count();
        order[rank] = i;
    }
    let (top, kth) = (vals[order[0]], vals[order[k - 1]]);
    if !(top > 0.0 && top.is_finite() && kth >= EIGEN_MIN_RATIO * EIGEN_MIN_RATIO * top) {
        out.status = SMALL_RATIO;
        return out;
    }
    let s: Vec<f64> = (0..k).map(|j| vals[order[j]].sqrt()).collect();
    let inv: Vec<f64> = s.iter().map(|&x| 1.0 / x).collect();
    let z = |j: usize, i: usize| v[i * W + order[j]];
    // c_j = G z_j / sigma_j (G from the input, lower triangle mirrored), then c_a . z_b / sigma_b.
    let g = |i: usize, c: usize| gram[i.max(c) * W + i.min(c)];
    let cm: Vec<f64> = (0..k * l)
        .map(|e| {
            let (j, i) = (e / l, e % l);
            (0..l).fold(0.0f64, |acc, c| g(i, c).mul_add(z(j, c), acc)) * inv[j]
        })
        .collect();
    let mut defect = 0.0f64;
    let mut nan = false;
    for a_ in 0..k {
        for (b_, &inv_b) in inv.iter().enumerate().skip(a_) {
            let d = (0..l).fold(0.0f64, |acc, i| cm[a_ * l + i].mul_add(z(b_, i), acc)) * inv_b;
            let d = (d - f64::from(u8::from(a_ == b_))).abs();
            nan |= d.is_nan();
            defect = defect.max(d);
        }
    }
    out.defect = defect;
    if nan || defect > EIGEN_ORTHO_TOL {
        out.status = SMALL_CHECK;
        return out;
    }
    for i in 0..l {
        for (j, &inv_j) in inv.iter().enumerate() {
            out.zk[i * W + j] = z(j, i);
            out.xk[i * W + j] = z(j, i) * inv_j;
        }
    }
    out.s = s;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use crate::rnn::rsvd_small::small_eigen;

    #[test]
    fn circle_ordering_meets_every_pair_once_per_sweep() {
        for ne in [2usize, 4, 42, 48] {
            let mut seen = vec![0u32; ne * ne];
            for r in 0..ne - 1 {
                let mut used = vec![false; ne];
                for k in 0..ne / 2 {
                    let (p, q) = pair(r, k, ne);
                    assert!(!used[p] && !used[q] && p != q);
                    used[p] = true;
                    used[q] = true;
                    seen[p.min(q) * ne + p.max(q)] += 1;
                }
            }
            for p in 0..ne {
                for q in p + 1..ne {
                    assert_eq!(seen[p * ne + q], 1, "pair {p},{q} of {ne}");
                }
            }
        }
    }

    /// A graded Gram matrix as the rSVD's (columns scaled by `rate^j`), padded to W.
    fn graded(rng: &mut Rng, l: usize, rate: f64) -> Vec<f64> {
        let rows = 3 * l;
        let b: Vec<f64> = (0..rows * l)
            .map(|i| rng.normal() * rate.powi((i % l) as i32))
            .collect();
        let mut g = vec![0.0f64; SMALL_W * SMALL_W];
        for r in 0..rows {
            for i in 0..l {
                for j in 0..l {
                    g[i * SMALL_W + j] += b[r * l + i] * b[r * l + j];
                }
            }
        }
        g
    }

    #[test]
    fn matches_the_host_eigen_route_on_graded_grams() {
        let mut rng = Rng::new(11);
        for (l, k, rate) in [
            (42usize, 32usize, 0.7f64),
            (41, 32, 0.75),
            (12, 5, 0.5),
            (48, 40, 0.8),
            (1, 1, 1.0),
        ] {
            let g = graded(&mut rng, l, rate);
            let st = small_step(&g, l, k);
            assert_eq!(st.status, SMALL_OK, "l {l}: {st:?}");
            assert!(
                st.defect <= 10.0 * JACOBI_TOL,
                "l {l}: defect {}",
                st.defect
            );
            let host = small_eigen(&g, SMALL_W, l, k)
                .expect("shape")
                .expect("eigen");
            for (a, b) in st.s.iter().zip(host.sigma()) {
                assert!((a - b).abs() <= 1e-12 * b, "l {l}: {a} vs {b}");
            }
            eprintln!(
                "l {l} k {k} rate {rate}: {} sweeps, {} rounds with rotations, defect {:.1e}",
                st.sweeps, st.rounds, st.defect
            );
        }
    }

    #[test]
    fn bad_grams_give_a_status() {
        let mut g = vec![0.0f64; SMALL_W * SMALL_W];
        g[0] = f64::NAN;
        assert_eq!(small_step(&g, 4, 2).status, SMALL_NOT_FINITE);
        let mut g = vec![0.0f64; SMALL_W * SMALL_W];
        g[0] = 1.0;
        g[SMALL_W + 1] = 1e-20;
        assert_eq!(small_step(&g, 2, 2).status, SMALL_RATIO);
    }
}

//! Randomized truncated SVD (Halko, Martinsson and Tropp 2011, Algorithms 4.4 and 5.1): for an
//! `m x n` matrix A, rank k, oversampling p and q power iterations, with l = k + p:
//!
//! ```text
//! Omega: n x l Gaussian;  Y = A Omega;  Q = orth(Y)
//! repeat q times:  Z = A^T Q;  Q' = orth(Z);  Y = A Q';  Q = orth(Y)
//! B^T = A^T Q (n x l);  B = W Sigma V_B^T (small SVD);  U = Q W[:, :k], S = Sigma[:k], V = V_B[:, :k]
//! ```
//!
//! [`rsvd_cpu`] is the f64 reference (Householder QR and SVD from nalgebra). [`rsvd_model`]
//! runs the GPU's algorithm on the CPU: f32 products, CholeskyQR in f64 ([`super::cholqr`]) and
//! the small SVD taken of the l x l triangular factor of B^T — the tests use it to check the
//! algorithm's accuracy without a GPU. [`small_eigen`] and [`small_factors`] are that last step,
//! shared with the GPU path: `B B^T = G = Z Sigma^2 Z^T` from the Gram of B^T (f64; available
//! before B^T's CholQR, so the GPU path overlaps it with that), then `W_k = R Z_k Sigma_k^-1`
//! with the CholQR factor R (`R^T R = G`: the first pass's shift cancels in `R_total`), checked
//! for orthonormality. A nearly rank-deficient B (`sigma_k < EIGEN_MIN_RATIO sigma_1`) or a
//! failed check takes [`small_svd`] of R instead. The Gram route ([`gram_factors`],
//! [`rsvd_model_gram_route`]) skips B^T's CholQR: `V = B^T Z_k Sigma_k^-1`, kept when
//! `Sigma^-1 Z^T G Z Sigma^-1 = I` to the same tolerance (what `W_k^T W_k` equals when
//! `R^T R = G`; with G the exact Gram of the f32 B^T it is V's orthonormality itself). The
//! eigenproblem is solved by [`super::symeig`] (Householder tridiagonalisation and implicit QL).

use super::cholqr;
pub use super::rsvd_small::{
    gram_defect, gram_factors, small_eigen, small_eigen_nalgebra, small_factors, small_svd,
    SmallEigen, SmallFactors, EIGEN_MIN_RATIO, EIGEN_ORTHO_TOL,
};
use super::testmat::to_dmatrix;
use super::LowRank;
use crate::rng::Rng;
use crate::{Error, Result};
use nalgebra::DMatrix;

/// Parameters of a randomized SVD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RsvdOptions {
    /// Target rank k (>= 1).
    pub rank: usize,
    /// Oversampling p (default 10).
    pub oversample: usize,
    /// Power iterations q (default 2).
    pub power_iters: usize,
    /// Seed of the Gaussian test matrix.
    pub seed: u64,
}

impl Default for RsvdOptions {
    fn default() -> Self {
        RsvdOptions {
            rank: 32,
            oversample: 10,
            power_iters: 2,
            seed: 0x0005_eed0_f5bd,
        }
    }
}

impl RsvdOptions {
    /// Options for rank `k` with the defaults otherwise.
    pub fn rank(k: usize) -> Self {
        RsvdOptions {
            rank: k,
            ..Default::default()
        }
    }

    /// The sketch width l = min(k + p, m, n).
    pub fn width(&self, m: usize, n: usize) -> usize {
        (self.rank + self.oversample).min(m).min(n)
    }

    /// Checks the rank against the matrix size.
    pub fn validate(&self, m: usize, n: usize) -> Result<()> {
        if m == 0 || n == 0 {
            return Err(Error::input(format!(
                "randomized SVD of an empty {m} x {n} matrix"
            )));
        }
        crate::size::product("randomized SVD matrix (rows x columns)", &[m, n])?;
        if self.rank.checked_add(self.oversample).is_none() {
            return Err(Error::input(format!(
                "rank {} + oversampling {} overflows",
                self.rank, self.oversample
            )));
        }
        if self.rank == 0 || self.rank > m.min(n) {
            return Err(Error::input(format!(
                "rank {} must be in 1..={} for a {m} x {n} matrix",
                self.rank,
                m.min(n)
            )));
        }
        Ok(())
    }
}

fn gaussian(rng: &mut Rng, rows: usize, cols: usize) -> DMatrix<f64> {
    DMatrix::from_fn(rows, cols, |_, _| rng.normal())
}

fn thin_q(y: DMatrix<f64>) -> DMatrix<f64> {
    y.qr().q()
}

fn to_lowrank(u: &DMatrix<f64>, s: &[f64], vt: &DMatrix<f64>, k: usize) -> Result<LowRank> {
    let (m, n) = (u.nrows(), vt.ncols());
    let mut uf = vec![0.0f32; m * k];
    for i in 0..m {
        for j in 0..k {
            uf[i * k + j] = u[(i, j)] as f32;
        }
    }
    let mut vf = vec![0.0f32; k * n];
    for j in 0..k {
        for c in 0..n {
            vf[j * n + c] = vt[(j, c)] as f32;
        }
    }
    LowRank::new(m, n, k, uf, s[..k].iter().map(|&v| v as f32).collect(), vf)
}

/// The f64 reference: HMT with Householder QR after every product, returned rounded to f32.
pub fn rsvd_cpu(a: &[f32], m: usize, n: usize, opts: &RsvdOptions) -> Result<LowRank> {
    opts.validate(m, n)?;
    let a = to_dmatrix(a, m, n)?;
    let l = opts.width(m, n);
    let mut rng = Rng::new(opts.seed);
    let omega = gaussian(&mut rng, n, l);
    let mut q = thin_q(&a * omega);
    for _ in 0..opts.power_iters {
        let q2 = thin_q(a.tr_mul(&q));
        q = thin_q(&a * q2);
    }
    let b = q.tr_mul(&a); // l x n
    let svd = b.svd(true, true);
    let (ub, vt) = (svd.u.expect("requested U"), svd.v_t.expect("requested V^T"));
    let u = q * ub;
    let s: Vec<f64> = svd.singular_values.iter().copied().collect();
    to_lowrank(&u, &s, &vt, opts.rank)
}

/// The row-major `m x n` input of [`rsvd_model`].
#[derive(Clone, Copy)]
struct Input<'a> {
    a: &'a [f32],
    m: usize,
    n: usize,
}

/// Which product of A [`gemm_f32`] forms.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    /// `A X` (X is `n x w`).
    Plain,
    /// `A^T X` (X is `m x w`).
    Transposed,
}

/// `op(A) X` in f32 (fma, k ascending) for row-major `X` with `w` columns, as the GPU's GEMMs.
fn gemm_f32(a: Input<'_>, op: Op, x: &[f32], w: usize) -> Vec<f32> {
    let (rows, inner) = match op {
        Op::Plain => (a.m, a.n),
        Op::Transposed => (a.n, a.m),
    };
    let mut c = vec![0.0f32; rows * w];
    for i in 0..rows {
        let out = &mut c[i * w..(i + 1) * w];
        for k in 0..inner {
            let aik = match op {
                Op::Transposed => a.a[k * a.n + i],
                Op::Plain => a.a[i * a.n + k],
            };
            for (o, &xv) in out.iter_mut().zip(&x[k * w..(k + 1) * w]) {
                *o = aik.mul_add(xv, *o);
            }
        }
    }
    c
}

/// The GPU's algorithm on the CPU (see the module notes): `mid_passes` CholQR passes after the
/// intermediate products, `final_passes` for the last Q and for B^T.
pub fn rsvd_model(
    a: &[f32],
    m: usize,
    n: usize,
    opts: &RsvdOptions,
    mid_passes: usize,
    final_passes: usize,
) -> Result<LowRank> {
    model(a, m, n, opts, (mid_passes, final_passes), false)
}

/// [`rsvd_model`] with the GPU's Gram route (opt-in there) for the last step:
/// `V = B^T Z_k Sigma_k^-1` ([`gram_factors`]); B^T is factored only when that route's check
/// fails.
pub fn rsvd_model_gram_route(
    a: &[f32],
    m: usize,
    n: usize,
    opts: &RsvdOptions,
    mid_passes: usize,
    final_passes: usize,
) -> Result<LowRank> {
    model(a, m, n, opts, (mid_passes, final_passes), true)
}

fn model(
    a: &[f32],
    m: usize,
    n: usize,
    opts: &RsvdOptions,
    (mid_passes, final_passes): (usize, usize),
    gram_route: bool,
) -> Result<LowRank> {
    opts.validate(m, n)?;
    let l = opts.width(m, n);
    let w = l; // no padding needed on the CPU
    let mut rng = Rng::new(opts.seed);
    let omega: Vec<f32> = (0..n * w).map(|_| rng.normal() as f32).collect();
    let input = Input { a, m, n };
    let y = gemm_f32(input, Op::Plain, &omega, w);
    let passes = |last: bool| if last { final_passes } else { mid_passes };
    let (mut q, _) = cholqr::cholqr(&y, m, w, l, passes(opts.power_iters == 0));
    for it in 0..opts.power_iters {
        let z = gemm_f32(input, Op::Transposed, &q, w);
        let (q2, _) = cholqr::cholqr(&z, n, w, l, mid_passes);
        let y = gemm_f32(input, Op::Plain, &q2, w);
        q = cholqr::cholqr(&y, m, w, l, passes(it + 1 == opts.power_iters)).0;
    }
    let bt = gemm_f32(input, Op::Transposed, &q, w);
    let g = cholqr::gram(&bt, n, w);
    let eig = small_eigen(&g, w, l, opts.rank)?;
    let fast = match (&eig, gram_route) {
        (Some(e), true) => gram_factors(e, &g, w, l, opts.rank)?,
        _ => None,
    };
    let (s, zk, v) = match fast {
        Some((s, zk, x)) => (s, zk, cholqr::apply(&bt, n, w, &x)),
        None => {
            let (qb, r_total) = cholqr::cholqr(&bt, n, w, l, final_passes);
            let (s, zk, wk) = small_factors(eig.as_ref(), &r_total, w, l, opts.rank)?;
            (s, zk, cholqr::apply(&qb, n, w, &wk))
        }
    };
    let u = cholqr::apply(&q, m, w, &zk);
    let k = opts.rank;
    let uf: Vec<f32> = (0..m).flat_map(|i| u[i * w..i * w + k].to_vec()).collect();
    let mut vt = vec![0.0f32; k * n];
    for c in 0..n {
        for j in 0..k {
            vt[j * n + c] = v[c * w + j];
        }
    }
    LowRank::new(m, n, k, uf, s.iter().map(|&v| v as f32).collect(), vt)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The eigen route against nalgebra's SVD of a CholQR factor R (`R^T R = G`) with
    /// fast-decaying, slowly decaying and flat spectra: singular values, orthonormal Z_k and
    /// W_k, and `R Z_k = W_k S`; a nearly rank-deficient G falls back to the SVD.
    #[test]
    fn small_eigen_route_matches_the_svd() {
        let (w, l, k, rows) = (48, 42, 32, 400);
        for (case, decay) in [(0u64, 0.8f64), (1, 0.97), (2, 1.0)] {
            let mut rng = Rng::new(10 + case);
            // B^T with columns of decaying scale (padding columns l..w zero), its Gram and R.
            let bt: Vec<f32> = (0..rows * w)
                .map(|i| {
                    if i % w < l {
                        (rng.normal() * decay.powi((i % w) as i32)) as f32
                    } else {
                        0.0
                    }
                })
                .collect();
            let g = super::cholqr::gram(&bt, rows, w);
            let (_, r) = super::cholqr::cholqr(&bt, rows, w, l, 2);
            let eig = small_eigen(&g, w, l, k)
                .unwrap()
                .expect("well-conditioned case takes the eigen route");
            let (s, zk, wk) = small_factors(Some(&eig), &r, w, l, k).unwrap();
            let (exact, _, _) = small_svd(&r, w, l, k).unwrap();

            // The Gram route: S and Z_k of the eigen route (as the factor route's when that keeps
            // them; case 0's f32 Q_b makes `R^T R` differ from G enough for the factor route to
            // fall back), and V = B^T Z_k S^-1 orthonormal.
            let (gs, gz, x) = gram_factors(&eig, &g, w, l, k)
                .unwrap()
                .expect("well-conditioned case passes the Gram route's check");
            assert!(gs == eig.sigma(), "case {case}: Gram route's S");
            assert!(
                s != eig.sigma() || (gs == s && gz == zk),
                "case {case}: both routes kept the eigen route but differ"
            );
            let v = super::cholqr::apply(&bt, rows, w, &x);
            let vg = super::cholqr::gram(&v, rows, w);
            for a in 0..k {
                for b in 0..k {
                    let want = if a == b { 1.0 } else { 0.0 };
                    assert!(
                        (vg[a * w + b] - want).abs() < 1e-5,
                        "case {case}: V^T V at {a},{b}: {}",
                        vg[a * w + b]
                    );
                }
            }
            // Against nalgebra's eigensolver.
            let theirs = small_eigen_nalgebra(&g, w, l, k).unwrap().unwrap();
            for (a, b) in eig.sigma().iter().zip(theirs.sigma()) {
                assert!(
                    (a - b).abs() <= 1e-9 * b,
                    "case {case}: sigma {a} vs nalgebra {b}"
                );
            }
            for j in 0..k {
                assert!(
                    (s[j] - exact[j]).abs() <= 1e-6 * exact[j],
                    "case {case}: sigma_{j} {} vs {}",
                    s[j],
                    exact[j]
                );
            }
            for a in 0..k {
                for b in 0..k {
                    let dot: f64 = (0..l).map(|i| wk[i * w + a] * wk[i * w + b]).sum();
                    let zdot: f64 = (0..l).map(|i| zk[i * w + a] * zk[i * w + b]).sum();
                    let want = if a == b { 1.0 } else { 0.0 };
                    assert!(
                        (dot - want).abs() < 1e-6 && (zdot - want).abs() < 1e-12,
                        "case {case}: W or Z not orthonormal at {a},{b}: {dot} {zdot}"
                    );
                }
            }
        }
        let mut g = vec![0.0f64; w * w];
        for i in 0..l {
            g[i * w + i] = if i < 20 { 1.0 } else { 1e-18 };
        }
        assert!(small_eigen(&g, w, l, k).unwrap().is_none());
    }

    /// The bench's kind of Gram: 8 dominant directions over a flat noise cluster (here 1e4 to
    /// 1e-3 in singular value, 7 orders of magnitude along G's diagonal, coupled as CholQR's
    /// ordering couples them). The eigen route must stay far inside the routes' tolerance, as
    /// nalgebra's solver does (the order of the reduction and of QL decides this; see
    /// `super::symeig`).
    #[test]
    fn small_eigen_is_accurate_on_graded_grams() {
        let (w, l, k, rows) = (48, 42, 32, 3000);
        let mut rng = Rng::new(21);
        // Columns 0..8 carry the signal (1e4 2^-c), every column noise of 1e-3 (sample
        // correlations couple them); padding columns l..w are zero.
        let bt: Vec<f32> = (0..rows * w)
            .map(|i| {
                let c = i % w;
                let signal = if c < 8 {
                    1e4 * 0.5f64.powi(c as i32)
                } else {
                    0.0
                };
                if c < l {
                    (signal * rng.normal() / (rows as f64).sqrt() + 1e-3 * rng.normal()) as f32
                } else {
                    0.0
                }
            })
            .collect();
        let g = super::cholqr::gram(&bt, rows, w);
        let ours = small_eigen(&g, w, l, k).unwrap().expect("eigen route");
        let theirs = small_eigen_nalgebra(&g, w, l, k)
            .unwrap()
            .expect("eigen route");
        let (d_ours, d_theirs) = (
            gram_defect(&ours, &g, w, l, k).unwrap(),
            gram_defect(&theirs, &g, w, l, k).unwrap(),
        );
        assert!(
            d_ours < 1e-10 && d_ours < 100.0 * d_theirs.max(1e-13),
            "Gram check {d_ours:e} (nalgebra {d_theirs:e})"
        );
    }
}

//! The randomized SVD's last step on small matrices (f64, shared by [`super::rsvd::rsvd_model`]
//! and the GPU path): [`small_eigen`] (the eigenproblem of B^T's Gram, [`super::symeig`]), then
//! either [`small_factors`] (`W_k = R Z_k Sigma_k^-1` from B^T's CholQR factor R, checked) or
//! [`gram_factors`] (`V = B^T Z_k Sigma_k^-1` straight from B^T, checked against the Gram: no
//! CholQR of B^T at all), and the fallback [`small_svd`] of R. See `super::rsvd`'s module notes
//! for the maths.

use super::symeig::{dot, sym_eigen};
use crate::{Error, Result};
use nalgebra::DMatrix;

/// Smallest `sigma_k / sigma_1` for which the eigen route is tried (below it `sigma_k^2` would
/// sit within a few orders of `eps sigma_1^2`).
pub const EIGEN_MIN_RATIO: f64 = crate::kernels::rnn::small::abi::EIGEN_MIN_RATIO;
/// The eigen route's result is kept only when `max |W_k^T W_k - I| <= EIGEN_ORTHO_TOL` (this
/// also pins each `sigma_j` to `||R z_j||` within half of it); otherwise [`small_svd`] of R.
/// The bench's 4096 x 4096 matrix (`sigma_32 / sigma_1 = 4.7e-5`) gives 1.8e-9 on the CPU model.
pub const EIGEN_ORTHO_TOL: f64 = crate::kernels::rnn::small::abi::EIGEN_ORTHO_TOL;

/// `(S, Z_k, X)`: k singular values and two `width x width` row-major f64 matrices whose first
/// k columns hold the vectors (`X` is `W_k` or `Z_k Sigma_k^-1`).
pub type SmallFactors = (Vec<f64>, Vec<f64>, Vec<f64>);

/// The eigen route's first half: `sigma_1..k` and `Z_k` from `G = B B^T`.
#[derive(Clone, Debug)]
pub struct SmallEigen {
    s: Vec<f64>,
    /// Row j (l values) is the eigenvector of `sigma_j^2`.
    zt: Vec<f64>,
    l: usize,
}

impl SmallEigen {
    /// `sigma_1..k`, descending.
    pub fn sigma(&self) -> &[f64] {
        &self.s
    }
}

fn check_small(len: usize, width: usize, l: usize, k: usize, what: &str) -> Result<()> {
    if len != width * width || l > width || k > l || k == 0 {
        return Err(Error::Shape {
            what: what.into(),
            expected: format!("{width} x {width}, 1 <= k <= l <= width"),
            got: format!("{len} values, l {l}, k {k}"),
        });
    }
    Ok(())
}

/// Keeps the k largest of `(values, vectors as rows of l)`, or None when
/// `sigma_k < EIGEN_MIN_RATIO sigma_1`.
fn top_k(
    vals: &[f64],
    vecs: impl Fn(usize, usize) -> f64,
    l: usize,
    k: usize,
) -> Option<SmallEigen> {
    let mut order: Vec<usize> = (0..l).collect();
    // Descending; ties keep index order (deterministic).
    order.sort_by(|&a, &b| vals[b].total_cmp(&vals[a]));
    let (top, kth) = (vals[order[0]], vals[order[k - 1]]);
    if !(top > 0.0 && top.is_finite() && kth >= EIGEN_MIN_RATIO * EIGEN_MIN_RATIO * top) {
        return None;
    }
    let s = order[..k].iter().map(|&i| vals[i].sqrt()).collect();
    let mut zt = vec![0.0f64; k * l];
    for (j, &o) in order[..k].iter().enumerate() {
        for i in 0..l {
            zt[j * l + i] = vecs(o, i);
        }
    }
    Some(SmallEigen { s, zt, l })
}

/// The symmetric eigenproblem of `G = B B^T` (the Gram of B^T, `width x width` row-major, its
/// leading `l x l` block used): the k largest eigenvalues' square roots and their vectors, or
/// None when `sigma_k < EIGEN_MIN_RATIO sigma_1` (or G is not finite, or the QL iteration does
/// not converge): then the caller takes the SVD of R.
pub fn small_eigen(gram: &[f64], width: usize, l: usize, k: usize) -> Result<Option<SmallEigen>> {
    check_small(gram.len(), width, l, k, "small eigenproblem Gram")?;
    let Some((vals, zt)) = sym_eigen(gram, width, l) else {
        return Ok(None);
    };
    Ok(top_k(&vals, |o, i| zt[o * l + i], l, k))
}

/// [`small_eigen`] with nalgebra's `symmetric_eigen` (the previous solver; tests and the bench
/// compare the two).
pub fn small_eigen_nalgebra(
    gram: &[f64],
    width: usize,
    l: usize,
    k: usize,
) -> Result<Option<SmallEigen>> {
    check_small(gram.len(), width, l, k, "small eigenproblem Gram")?;
    let g = DMatrix::from_fn(l, l, |i, j| gram[i * width + j]);
    if g.iter().any(|v| !v.is_finite()) {
        return Ok(None);
    }
    let eig = g.symmetric_eigen();
    let vals: Vec<f64> = eig.eigenvalues.iter().copied().collect();
    Ok(top_k(&vals, |o, i| eig.eigenvectors[(i, o)], l, k))
}

fn check_eig(e: &SmallEigen, l: usize, k: usize) -> Result<()> {
    if e.l != l || e.s.len() != k {
        return Err(Error::Shape {
            what: "small eigenvectors".into(),
            expected: format!("{l} x {k}"),
            got: format!("{} x {}", e.l, e.s.len()),
        });
    }
    Ok(())
}

/// Whether `|X^T X - I| <= EIGEN_ORTHO_TOL` everywhere (NaN fails) for the k rows of length l
/// in `xt` (each row one column of X).
fn orthonormal(xt: &[f64], l: usize, k: usize) -> bool {
    (0..k).all(|a| {
        (a..k).all(|b| {
            let d = dot(&xt[a * l..(a + 1) * l], &xt[b * l..(b + 1) * l]);
            (d - f64::from(u8::from(a == b))).abs() <= EIGEN_ORTHO_TOL
        })
    })
}

/// `(S, Z_k, X)` as `width x width` row-major matrices whose first k columns hold the rows of
/// `zt` and `xt`.
fn pack(e: &SmallEigen, xt: &[f64], width: usize, l: usize, k: usize) -> SmallFactors {
    let mut zk = vec![0.0f64; width * width];
    let mut xk = vec![0.0f64; width * width];
    for j in 0..k {
        for i in 0..l {
            zk[i * width + j] = e.zt[j * l + i];
            xk[i * width + j] = xt[j * l + i];
        }
    }
    (e.s.clone(), zk, xk)
}

fn finite_factor(r: &[f64], width: usize, l: usize) -> Result<()> {
    if (0..l).any(|i| r[i * width..i * width + l].iter().any(|v| !v.is_finite())) {
        return Err(Error::Kernel {
            kernel: "rnn_orth",
            code: 1,
            detail: "the triangular factor of B^T is not finite".into(),
        });
    }
    Ok(())
}

/// The small factors of the GPU path from `R_total` (`width x width` row-major, upper
/// triangular, `B^T = Q_b R`) and the eigen route's first half when it was taken: returns (S (k
/// values), Z_k, W_k) with `Z_k` and `W_k` as `width x width` row-major f64 matrices whose first
/// k columns hold the vectors (zeros elsewhere), ready for `U = Q Z_k` and `V = Q_b W_k`. With
/// `eig`, `W_k = R Z_k Sigma_k^-1`, kept if orthonormal to [`EIGEN_ORTHO_TOL`]; otherwise, or
/// without `eig`, [`small_svd`] of R.
pub fn small_factors(
    eig: Option<&SmallEigen>,
    r_total: &[f64],
    width: usize,
    l: usize,
    k: usize,
) -> Result<SmallFactors> {
    check_small(r_total.len(), width, l, k, "small SVD factor")?;
    let Some(e) = eig else {
        return small_svd(r_total, width, l, k);
    };
    check_eig(e, l, k)?;
    finite_factor(r_total, width, l)?;
    // w_j = R z_j / sigma_j, R upper triangular: w_j[i] = sum_{c >= i} R_ic z_j[c].
    let mut wt = vec![0.0f64; k * l];
    for j in 0..k {
        let z = &e.zt[j * l..(j + 1) * l];
        let inv = 1.0 / e.s[j];
        for i in 0..l {
            let row = &r_total[i * width + i..i * width + l];
            wt[j * l + i] = dot(row, &z[i..]) * inv;
        }
    }
    if !orthonormal(&wt, l, k) {
        return small_svd(r_total, width, l, k);
    }
    Ok(pack(e, &wt, width, l, k))
}

/// The Gram route's factors: with `G` (B^T's Gram, `width x width`) and its eigen route, returns
/// (S, Z_k, `Z_k Sigma_k^-1`) packed as [`small_factors`] does, ready for `U = Q Z_k` and
/// `V = B^T Z_k Sigma_k^-1` (no CholQR of B^T). Kept only if `V^T V = Sigma^-1 Z^T G Z Sigma^-1`
/// is the identity to [`EIGEN_ORTHO_TOL`] (the same quantity as [`small_factors`]' check, as
/// `R^T R = G`); None otherwise (the caller factors B^T and takes [`small_svd`]).
pub fn gram_factors(
    eig: &SmallEigen,
    gram: &[f64],
    width: usize,
    l: usize,
    k: usize,
) -> Result<Option<SmallFactors>> {
    check_small(gram.len(), width, l, k, "small eigenproblem Gram")?;
    check_eig(eig, l, k)?;
    #[allow(clippy::neg_cmp_op_on_partial_ord)] // NaN fails the check too
    if !(gram_defect(eig, gram, width, l, k)? <= EIGEN_ORTHO_TOL) {
        return Ok(None);
    }
    let mut xt = eig.zt.clone();
    for j in 0..k {
        let inv = 1.0 / eig.s[j];
        xt[j * l..(j + 1) * l].iter_mut().for_each(|v| *v *= inv);
    }
    Ok(Some(pack(eig, &xt, width, l, k)))
}

/// The Gram route's check value `max |Sigma^-1 Z^T G Z Sigma^-1 - I|` (NaN if not finite).
pub fn gram_defect(
    eig: &SmallEigen,
    gram: &[f64],
    width: usize,
    l: usize,
    k: usize,
) -> Result<f64> {
    check_small(gram.len(), width, l, k, "small eigenproblem Gram")?;
    check_eig(eig, l, k)?;
    // c_j = G z_j / sigma_j (G symmetric: its rows are its columns), then c_a . z_b / sigma_b.
    let mut ct = vec![0.0f64; k * l];
    for j in 0..k {
        let z = &eig.zt[j * l..(j + 1) * l];
        let inv = 1.0 / eig.s[j];
        for i in 0..l {
            ct[j * l + i] = dot(&gram[i * width..i * width + l], z) * inv;
        }
    }
    let mut worst = 0.0f64;
    for a in 0..k {
        for b in a..k {
            let d = dot(&ct[a * l..(a + 1) * l], &eig.zt[b * l..(b + 1) * l]) / eig.s[b];
            let d = (d - f64::from(u8::from(a == b))).abs();
            if d.is_nan() {
                return Ok(f64::NAN);
            }
            worst = worst.max(d);
        }
    }
    Ok(worst)
}

/// The exact route: the SVD of the leading `l x l` block of `R_total`, `R = W Sigma Z^T`
/// (nalgebra, f64); returns (S, Z_k, W_k) as [`small_factors`].
pub fn small_svd(r_total: &[f64], width: usize, l: usize, k: usize) -> Result<SmallFactors> {
    check_small(r_total.len(), width, l, k, "small SVD factor")?;
    finite_factor(r_total, width, l)?;
    let r = DMatrix::from_fn(l, l, |i, j| r_total[i * width + j]);
    let svd = r.svd(true, true);
    let (w, zt) = (svd.u.expect("requested U"), svd.v_t.expect("requested V^T"));
    let mut zk = vec![0.0f64; width * width];
    let mut wk = vec![0.0f64; width * width];
    for i in 0..l {
        for j in 0..k {
            zk[i * width + j] = zt[(j, i)];
            wk[i * width + j] = w[(i, j)];
        }
    }
    Ok((
        svd.singular_values.iter().take(k).copied().collect(),
        zk,
        wk,
    ))
}

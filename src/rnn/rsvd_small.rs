//! The randomized SVD's last step on small matrices (f64, shared by [`super::rsvd::rsvd_model`]
//! and the GPU path): [`small_eigen`] (the eigenproblem of B^T's Gram), [`small_factors`]
//! (`W_k = R Z_k Sigma_k^-1`, checked) and the fallback [`small_svd`] of the CholQR factor R. See
//! `super::rsvd`'s module notes for the maths.

use crate::{Error, Result};
use nalgebra::DMatrix;

/// Smallest `sigma_k / sigma_1` for which the eigen route is tried (below it `sigma_k^2` would
/// sit within a few orders of `eps sigma_1^2`).
pub const EIGEN_MIN_RATIO: f64 = 1e-6;
/// The eigen route's result is kept only when `max |W_k^T W_k - I| <= EIGEN_ORTHO_TOL` (this
/// also pins each `sigma_j` to `||R z_j||` within half of it); otherwise [`small_svd`] of R.
/// The bench's 4096 x 4096 matrix (`sigma_32 / sigma_1 = 4.7e-5`) gives 1.8e-9 on the CPU model.
pub const EIGEN_ORTHO_TOL: f64 = 1e-8;

/// The eigen route's first half: `sigma_1..k` and `Z_k` (`l x k`) from `G = B B^T`.
#[derive(Clone, Debug)]
pub struct SmallEigen {
    s: Vec<f64>,
    z: DMatrix<f64>,
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

/// The symmetric eigenproblem of `G = B B^T` (the Gram of B^T, `width x width` row-major, its
/// leading `l x l` block used): the k largest eigenvalues' square roots and their vectors, or
/// None when `sigma_k < EIGEN_MIN_RATIO sigma_1` (or G is not finite): then [`small_factors`]
/// takes the SVD of R. Costs about a third of that SVD at l = 42.
pub fn small_eigen(gram: &[f64], width: usize, l: usize, k: usize) -> Result<Option<SmallEigen>> {
    check_small(gram.len(), width, l, k, "small eigenproblem Gram")?;
    let g = DMatrix::from_fn(l, l, |i, j| gram[i * width + j]);
    if g.iter().any(|v| !v.is_finite()) {
        return Ok(None);
    }
    let eig = g.symmetric_eigen();
    let mut order: Vec<usize> = (0..l).collect();
    // Descending; ties keep index order (deterministic).
    order.sort_by(|&a, &b| eig.eigenvalues[b].total_cmp(&eig.eigenvalues[a]));
    let (top, kth) = (eig.eigenvalues[order[0]], eig.eigenvalues[order[k - 1]]);
    if !(top > 0.0 && top.is_finite() && kth >= EIGEN_MIN_RATIO * EIGEN_MIN_RATIO * top) {
        return Ok(None);
    }
    let s = order[..k]
        .iter()
        .map(|&i| eig.eigenvalues[i].sqrt())
        .collect();
    let z = DMatrix::from_fn(l, k, |i, j| eig.eigenvectors[(i, order[j])]);
    Ok(Some(SmallEigen { s, z }))
}

/// The small factors of the GPU path from `R_total` (`width x width` row-major, `B^T = Q_b R`)
/// and the eigen route's first half when it was taken: returns (S (k values), Z_k, W_k) with
/// `Z_k` and `W_k` as `width x width` row-major f64 matrices whose first k columns hold the
/// vectors (zeros elsewhere), ready for `U = Q Z_k` and `V = Q_b W_k`. With `eig`,
/// `W_k = R Z_k Sigma_k^-1`, kept if orthonormal to [`EIGEN_ORTHO_TOL`]; otherwise, or without
/// `eig`, [`small_svd`] of R.
pub fn small_factors(
    eig: Option<&SmallEigen>,
    r_total: &[f64],
    width: usize,
    l: usize,
    k: usize,
) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    check_small(r_total.len(), width, l, k, "small SVD factor")?;
    let Some(e) = eig else {
        return small_svd(r_total, width, l, k);
    };
    if e.z.nrows() != l || e.z.ncols() != k {
        return Err(Error::Shape {
            what: "small eigenvectors".into(),
            expected: format!("{l} x {k}"),
            got: format!("{} x {}", e.z.nrows(), e.z.ncols()),
        });
    }
    let r = DMatrix::from_fn(l, l, |i, j| r_total[i * width + j]);
    if r.iter().any(|v| !v.is_finite()) {
        return Err(Error::Kernel {
            kernel: "rnn_orth",
            code: 1,
            detail: "the triangular factor of B^T is not finite".into(),
        });
    }
    let mut w = r * &e.z;
    for (j, mut col) in w.column_iter_mut().enumerate() {
        col /= e.s[j];
    }
    let wtw = w.tr_mul(&w);
    let off = (0..k)
        .flat_map(|a| (0..k).map(move |b| (a, b)))
        .map(|(a, b)| (wtw[(a, b)] - f64::from(u8::from(a == b))).abs())
        .fold(0.0, f64::max);
    #[allow(clippy::neg_cmp_op_on_partial_ord)] // NaN must take this branch too
    if !(off <= EIGEN_ORTHO_TOL) {
        return small_svd(r_total, width, l, k);
    }
    let mut zk = vec![0.0f64; width * width];
    let mut wk = vec![0.0f64; width * width];
    for i in 0..l {
        for j in 0..k {
            zk[i * width + j] = e.z[(i, j)];
            wk[i * width + j] = w[(i, j)];
        }
    }
    Ok((e.s.clone(), zk, wk))
}

/// The exact route: the SVD of the leading `l x l` block of `R_total`, `R = W Sigma Z^T`
/// (nalgebra, f64); returns (S, Z_k, W_k) as [`small_factors`].
pub fn small_svd(
    r_total: &[f64],
    width: usize,
    l: usize,
    k: usize,
) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    check_small(r_total.len(), width, l, k, "small SVD factor")?;
    let r = DMatrix::from_fn(l, l, |i, j| r_total[i * width + j]);
    if r.iter().any(|v| !v.is_finite()) {
        return Err(Error::Kernel {
            kernel: "rnn_orth",
            code: 1,
            detail: "the triangular factor of B^T is not finite".into(),
        });
    }
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

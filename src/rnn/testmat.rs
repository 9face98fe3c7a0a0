//! Matrices with a prescribed singular spectrum and the quality measures of a truncated SVD:
//! the optimal rank-k error (Eckart–Young, from a full SVD), the reconstruction error
//! `||A - U S V^T||_F`, and the orthonormality defect `max |X^T X - I|`. Used by the tests,
//! the benches and the demo; everything is f64.

use super::LowRank;
use crate::rng::Rng;
use crate::{Error, Result};
use nalgebra::DMatrix;
use rayon::prelude::*;

/// Spectra the tests and benches use, for `r` singular values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Spectrum {
    /// sigma_i = rate^i.
    Exponential {
        /// Ratio of consecutive singular values, in (0, 1).
        rate: f64,
    },
    /// sigma_i = 1 / (1 + i).
    Harmonic,
    /// sigma_i = 1 - i / (2 r): no gap anywhere, the hard case for subspace iteration.
    Flat,
    /// sigma_i = 1 for i < rank, 0 after: exactly low rank.
    LowRank {
        /// Number of unit singular values.
        rank: usize,
    },
}

impl Spectrum {
    /// The first `r` singular values, descending.
    pub fn values(self, r: usize) -> Vec<f64> {
        (0..r)
            .map(|i| match self {
                Spectrum::Exponential { rate } => rate.powi(i as i32),
                Spectrum::Harmonic => 1.0 / (1.0 + i as f64),
                Spectrum::Flat => 1.0 - i as f64 / (2.0 * r as f64),
                Spectrum::LowRank { rank } => f64::from(u8::from(i < rank)),
            })
            .collect()
    }
}

/// An `m x n` matrix with orthonormal column bases `m x r` and `n x r` (r = min(m, n)) from QR of
/// Gaussian matrices, so its singular values are exactly `sigma` (up to rounding to f32).
pub fn matrix_with_spectrum(rng: &mut Rng, m: usize, n: usize, spectrum: Spectrum) -> Vec<f32> {
    let r = m.min(n);
    let sigma = spectrum.values(r);
    let g1 = DMatrix::from_fn(m, r, |_, _| rng.normal());
    let g2 = DMatrix::from_fn(n, r, |_, _| rng.normal());
    let u = g1.qr().q();
    let v = g2.qr().q();
    let mut us = u;
    for (j, s) in sigma.iter().enumerate() {
        us.column_mut(j).scale_mut(*s);
    }
    let a = us * v.transpose();
    let mut out = vec![0.0f32; m * n];
    out.par_chunks_mut(n).enumerate().for_each(|(i, row)| {
        for (j, o) in row.iter_mut().enumerate() {
            *o = a[(i, j)] as f32;
        }
    });
    out
}

/// The row-major f32 matrix as f64.
pub fn to_dmatrix(a: &[f32], m: usize, n: usize) -> Result<DMatrix<f64>> {
    let need = crate::size::product("matrix (rows x columns)", &[m, n])?;
    if a.len() != need {
        return Err(Error::Shape {
            what: "matrix".into(),
            expected: format!("{m} x {n} = {need} values"),
            got: a.len().to_string(),
        });
    }
    Ok(DMatrix::from_fn(m, n, |i, j| f64::from(a[i * n + j])))
}

/// The best possible rank-k Frobenius error, `sqrt(sum_{i >= k} sigma_i^2)`, from a full SVD.
pub fn optimal_error(a: &[f32], m: usize, n: usize, k: usize) -> Result<f64> {
    let s = to_dmatrix(a, m, n)?.singular_values();
    let mut v: Vec<f64> = s.iter().copied().collect();
    v.sort_by(|x, y| y.total_cmp(x));
    Ok(v.iter().skip(k).map(|x| x * x).sum::<f64>().sqrt())
}

/// `||A||_F`.
pub fn frobenius(a: &[f32]) -> f64 {
    a.par_iter()
        .map(|&v| f64::from(v) * f64::from(v))
        .sum::<f64>()
        .sqrt()
}

/// `||A - U diag(S) V^T||_F` in f64, row by row.
pub fn reconstruction_error(a: &[f32], lr: &LowRank) -> Result<f64> {
    let (m, n, k) = (lr.m(), lr.n(), lr.k());
    if a.len() != m * n {
        return Err(Error::Shape {
            what: "matrix for reconstruction".into(),
            expected: format!("{m} x {n}"),
            got: a.len().to_string(),
        });
    }
    let sq: f64 = (0..m)
        .into_par_iter()
        .map(|i| {
            let us: Vec<f64> = (0..k)
                .map(|j| f64::from(lr.u()[i * k + j]) * f64::from(lr.s()[j]))
                .collect();
            (0..n)
                .map(|c| {
                    let approx: f64 = (0..k).map(|j| us[j] * f64::from(lr.vt()[j * n + c])).sum();
                    let d = f64::from(a[i * n + c]) - approx;
                    d * d
                })
                .sum::<f64>()
        })
        .sum();
    Ok(sq.sqrt())
}

/// `max |X^T X - I|` over the `cols` columns of the row-major `rows x cols` matrix `x`.
pub fn column_orthonormality(x: &[f32], rows: usize, cols: usize) -> f64 {
    let mut worst = 0.0f64;
    for a in 0..cols {
        for b in a..cols {
            let dot: f64 = (0..rows)
                .map(|r| f64::from(x[r * cols + a]) * f64::from(x[r * cols + b]))
                .sum();
            let want = if a == b { 1.0 } else { 0.0 };
            worst = worst.max((dot - want).abs());
        }
    }
    worst
}

/// `max |X X^T - I|` over the `rows` rows of the row-major `rows x cols` matrix `x` (for V^T).
pub fn row_orthonormality(x: &[f32], rows: usize, cols: usize) -> f64 {
    let mut worst = 0.0f64;
    for a in 0..rows {
        for b in a..rows {
            let dot: f64 = (0..cols)
                .map(|c| f64::from(x[a * cols + c]) * f64::from(x[b * cols + c]))
                .sum();
            let want = if a == b { 1.0 } else { 0.0 };
            worst = worst.max((dot - want).abs());
        }
    }
    worst
}

/// A cheap large test matrix for timing (not for accuracy): a rank-8 sum of smooth outer products
/// with decaying weights plus uniform noise of size `noise`.
pub fn timing_matrix(seed: u64, m: usize, n: usize, noise: f32) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    let terms: Vec<(f64, Vec<f32>, Vec<f32>)> = (0..8)
        .map(|t| {
            (
                0.5f64.powi(t),
                rng.vec_f32(m, -1.0, 1.0),
                rng.vec_f32(n, -1.0, 1.0),
            )
        })
        .collect();
    let mut a = vec![0.0f32; m * n];
    a.par_chunks_mut(n).enumerate().for_each(|(i, row)| {
        let mut r = Rng::new(seed ^ (i as u64).wrapping_mul(0x9E37_79B9));
        for (j, o) in row.iter_mut().enumerate() {
            let s: f64 = terms
                .iter()
                .map(|(w, u, v)| w * f64::from(u[i]) * f64::from(v[j]))
                .sum();
            *o = s as f32 + noise * (2.0 * r.f32() - 1.0);
        }
    });
    a
}

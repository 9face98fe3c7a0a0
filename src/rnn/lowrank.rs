//! A rank-k factorisation `U diag(S) V^T` in f32 (what a randomized SVD returns and what the
//! low-rank correction applies): `u` is `m x k`, `s` has k values (descending, >= 0), `vt` is
//! `k x n`, all row-major.

use super::weights::{check_finite, check_len};
use crate::{Error, Result};

/// `U diag(S) V^T`, f32, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct LowRank {
    m: usize,
    n: usize,
    k: usize,
    u: Vec<f32>,
    s: Vec<f32>,
    vt: Vec<f32>,
}

impl LowRank {
    /// Validates shapes and finiteness (k >= 1, k <= min(m, n)).
    pub fn new(
        m: usize,
        n: usize,
        k: usize,
        u: Vec<f32>,
        s: Vec<f32>,
        vt: Vec<f32>,
    ) -> Result<Self> {
        if k == 0 || k > m.min(n) {
            return Err(Error::input(format!(
                "rank {k} must be in 1..={} for a {m} x {n} factorisation",
                m.min(n)
            )));
        }
        // k <= min(m, n), so m x k and k x n overflow only if m x n does.
        crate::size::product("low-rank factorisation (m x n)", &[m, n])?;
        check_len("U (m x k)", u.len(), m * k)?;
        check_len("S (k)", s.len(), k)?;
        check_len("V^T (k x n)", vt.len(), k * n)?;
        check_finite("U", &u)?;
        check_finite("S", &s)?;
        check_finite("V^T", &vt)?;
        Ok(LowRank { m, n, k, u, s, vt })
    }

    /// Rows of the factorised matrix.
    pub fn m(&self) -> usize {
        self.m
    }
    /// Columns of the factorised matrix.
    pub fn n(&self) -> usize {
        self.n
    }
    /// Rank: singular values kept.
    pub fn k(&self) -> usize {
        self.k
    }
    /// `m x k`, row-major.
    pub fn u(&self) -> &[f32] {
        &self.u
    }
    /// The `k` singular values.
    pub fn s(&self) -> &[f32] {
        &self.s
    }
    /// `k x n`, row-major.
    pub fn vt(&self) -> &[f32] {
        &self.vt
    }

    /// `U^T` (`k x m`, row-major): the layout the correction kernel reads coalesced.
    pub fn u_transposed(&self) -> Vec<f32> {
        let mut t = vec![0.0f32; self.k * self.m];
        for i in 0..self.m {
            for j in 0..self.k {
                t[j * self.m + i] = self.u[i * self.k + j];
            }
        }
        t
    }
}

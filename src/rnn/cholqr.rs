//! CholeskyQR of a tall f32 matrix with f64 arithmetic: the orthonormalisation the GPU's
//! randomized SVD uses (`rnn_orth` performs these steps in the same order). For `Y` (`rows x L`,
//! f32, columns `l..L` zero padding):
//!
//! 1. `G = Y^T Y` in f64 (products of f32 values are exact in f64);
//! 2. first pass only: `G += s I` on the first `l` diagonal entries, with the shifted-CholQR
//!    shift `s = 11 (rows l + l (l + 1)) 2^-53 trace(G)` (Fukaya et al. 2020), so that the
//!    factorisation exists even when Y is numerically rank-deficient;
//! 3. symmetric Gaussian elimination without pivoting on `[G | I]`, kept to the lower triangle
//!    of G: at step j every row a > j subtracts `m_a = G'_aj (1 / d_j)` (d_j = G'_jj; fma)
//!    times column j, `G'_ac -= m_a G'_cj` (j < c <= a), and times row j of the right half,
//!    `E_ac -= m_a E_jc` (c <= j). It leaves `L D` below the diagonal (column j holds
//!    `U_j. = (D L^T)_j.` at step j) and `E = L^{-1}` on the right (`G = L D L^T`), so
//!    `R = D^{-1/2} U` and `R^{-1} = E^T D^{-1/2}` with no triangular solve. Each step's updates
//!    are independent: on the GPU (`orth::elim`) each thread keeps 9 of the 2304 values in
//!    registers and a step costs one barrier. A pivot that is not positive (an exactly zero
//!    column: the padding) eliminates nothing and gets `R_jj = 1` with a zero row;
//! 4. `Q = Y R^{-1}`: `q_c = (sum_a y_a E_ca) / sqrt(d_c)` in f64, rounded to f32.
//!
//! After the first pass Q spans Y's range with a condition number of at most about 1e5; each
//! further pass (plain CholQR on the stored f32 Q) brings `Q^T Q` to within rounding of I.
//! `R_total = R_p ... R_1` relates the input to the output: `Y = Q R_total`.

/// The shift of the first pass for a Gram matrix with trace `trace` of `rows x l` data.
pub fn shift(trace: f64, rows: usize, l: usize) -> f64 {
    11.0 * ((rows * l + l * (l + 1)) as f64) * f64::EPSILON * 0.5 * trace
}

/// `G = Y^T Y` (`L x L`, row-major) of the row-major `rows x L` matrix `y`.
pub fn gram(y: &[f32], rows: usize, width: usize) -> Vec<f64> {
    let mut g = vec![0.0f64; width * width];
    for r in 0..rows {
        let row = &y[r * width..(r + 1) * width];
        for a in 0..width {
            let ya = f64::from(row[a]);
            for b in 0..width {
                g[a * width + b] = ya.mul_add(f64::from(row[b]), g[a * width + b]);
            }
        }
    }
    g
}

/// The elimination of step 3 (see the module notes) of one pass.
#[derive(Clone, Debug)]
pub struct Factor {
    /// `E = L^{-1}` (`L x L`, unit lower triangular, row-major).
    pub e: Vec<f64>,
    /// `1 / sqrt(d_c)` (1 for a dead pivot).
    pub s: Vec<f64>,
    /// R (`L x L`, upper triangular, row-major).
    pub r: Vec<f64>,
}

/// Factors `g` (`L x L`, symmetric) with `shift` added to the first `l` pivots.
pub fn factor(g: &[f64], width: usize, l: usize, shift: f64) -> Factor {
    let w = width;
    let mut u = g.to_vec();
    for j in 0..l {
        u[j * w + j] += shift;
    }
    let mut e: Vec<f64> = (0..w * w)
        .map(|i| f64::from(u8::from(i % (w + 1) == 0)))
        .collect();
    // Only the lower triangle of u is used (u[a][c], a >= c): column j is read, never written,
    // during step j, and row j of e is final before it.
    for j in 0..w {
        let d = u[j * w + j];
        let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
        for a in j + 1..w {
            let m = u[a * w + j] * inv;
            for c in j + 1..=a {
                u[a * w + c] = (-m).mul_add(u[c * w + j], u[a * w + c]);
            }
            for c in 0..=j {
                e[a * w + c] = (-m).mul_add(e[j * w + c], e[a * w + c]);
            }
        }
    }
    let mut s = vec![1.0f64; w];
    let mut r = vec![0.0f64; w * w];
    for i in 0..w {
        let d = u[i * w + i];
        let (rdiag, rscale) = if d > 0.0 {
            let sq = d.sqrt();
            s[i] = 1.0 / sq;
            (sq, s[i])
        } else {
            (1.0, 0.0)
        };
        r[i * w + i] = rdiag;
        for k in i + 1..w {
            r[i * w + k] = u[k * w + i] * rscale;
        }
    }
    Factor { e, s, r }
}

/// `Q = Y R^{-1}` from a [`Factor`]: `q_c = (sum_a y_a E_ca) s_c`, rounded to f32.
pub fn apply_factor(y: &[f32], rows: usize, width: usize, f: &Factor) -> Vec<f32> {
    let mut q = vec![0.0f32; rows * width];
    for r in 0..rows {
        for c in 0..width {
            let mut acc = 0.0f64;
            for a in 0..width {
                acc = f64::from(y[r * width + a]).mul_add(f.e[c * width + a], acc);
            }
            q[r * width + c] = (acc * f.s[c]) as f32;
        }
    }
    q
}

/// `Y X` for `rows x L` f32 `y` and `L x L` f64 `x` (upper triangular or dense), rounded to f32.
pub fn apply(y: &[f32], rows: usize, width: usize, x: &[f64]) -> Vec<f32> {
    let mut q = vec![0.0f32; rows * width];
    for r in 0..rows {
        for c in 0..width {
            let mut s = 0.0f64;
            for a in 0..width {
                s = f64::from(y[r * width + a]).mul_add(x[a * width + c], s);
            }
            q[r * width + c] = s as f32;
        }
    }
    q
}

/// `A B` for `L x L` row-major matrices.
pub fn matmul(a: &[f64], b: &[f64], width: usize) -> Vec<f64> {
    let mut c = vec![0.0f64; width * width];
    for i in 0..width {
        for k in 0..width {
            let aik = a[i * width + k];
            for j in 0..width {
                c[i * width + j] = aik.mul_add(b[k * width + j], c[i * width + j]);
            }
        }
    }
    c
}

/// `passes` rounds of CholQR (the first shifted): returns Q (f32, `rows x L`) and R_total.
pub fn cholqr(
    y: &[f32],
    rows: usize,
    width: usize,
    l: usize,
    passes: usize,
) -> (Vec<f32>, Vec<f64>) {
    let mut q = y.to_vec();
    let mut total: Vec<f64> = (0..width * width)
        .map(|i| f64::from(u8::from(i % (width + 1) == 0)))
        .collect();
    for p in 0..passes {
        let g = gram(&q, rows, width);
        let s = if p == 0 {
            shift((0..l).map(|j| g[j * width + j]).sum(), rows, l)
        } else {
            0.0
        };
        let f = factor(&g, width, l, s);
        q = apply_factor(&q, rows, width, &f);
        total = matmul(&f.r, &total, width);
    }
    (q, total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    #[test]
    fn elimination_gives_r_and_its_inverse() {
        let (rows, w, l) = (200, 12, 9);
        let mut rng = Rng::new(1);
        // Columns l..w are zero padding, as on the GPU.
        let y: Vec<f32> = (0..rows * w)
            .map(|i| if i % w < l { rng.normal() as f32 } else { 0.0 })
            .collect();
        let g = gram(&y, rows, w);
        let f = factor(&g, w, l, 0.0);
        let rtr = matmul(&transpose(&f.r, w), &f.r, w);
        for i in 0..l {
            for j in 0..l {
                assert!(
                    (rtr[i * w + j] - g[i * w + j]).abs() < 1e-9 * g[0],
                    "R^T R != G at {i},{j}"
                );
            }
        }
        // R X = I with X[a][c] = E[c][a] s_c.
        let x: Vec<f64> = (0..w * w)
            .map(|i| f.e[(i % w) * w + i / w] * f.s[i % w])
            .collect();
        let rx = matmul(&f.r, &x, w);
        for i in 0..w {
            for j in 0..w {
                let want = if i == j { 1.0 } else { 0.0 };
                assert!(
                    (rx[i * w + j] - want).abs() < 1e-12,
                    "R X != I at {i},{j}: {}",
                    rx[i * w + j]
                );
            }
        }
        let (q, total) = cholqr(&y, rows, w, l, 2);
        let qg = gram(&q, rows, w);
        for i in 0..w {
            for j in 0..w {
                let want = if i == j && i < l { 1.0 } else { 0.0 };
                assert!(
                    (qg[i * w + j] - want).abs() < 1e-6,
                    "Q^T Q at {i},{j}: {}",
                    qg[i * w + j]
                );
            }
        }
        // Y = Q R_total.
        for r in 0..rows {
            for c in 0..l {
                let v: f64 = (0..w)
                    .map(|a| f64::from(q[r * w + a]) * total[a * w + c])
                    .sum();
                assert!(
                    (v - f64::from(y[r * w + c])).abs() < 1e-5,
                    "Y != Q R at {r},{c}"
                );
            }
        }
    }

    fn transpose(a: &[f64], w: usize) -> Vec<f64> {
        (0..w * w).map(|i| a[(i % w) * w + i / w]).collect()
    }
}

//! CholeskyQR of a tall f32 matrix with f64 arithmetic: the orthonormalisation the GPU's
//! randomized SVD uses (`rnn_orth` mirrors these steps in the same order). For `Y` (`rows x L`,
//! f32, columns `l..L` zero padding):
//!
//! 1. `G = Y^T Y` in f64 (products of f32 values are exact in f64);
//! 2. first pass only: `G += s I` on the first `l` diagonal entries, with the shifted-CholQR
//!    shift `s = 11 (rows l + l (l + 1)) 2^-53 trace(G)` (Fukaya et al. 2020), so that the
//!    factorisation exists even when Y is numerically rank-deficient;
//! 3. `G = R^T R` (R upper; right-looking: row j of R, then the trailing update with fma); a
//!    pivot that is not positive (an exactly zero column, the padding) gets `R_jj = 1` and a zero
//!    row, which leaves that column of Y as it is;
//! 4. `X = R^{-1}` by back substitution per column; `Q = Y X` in f64, rounded to f32.
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

/// Upper Cholesky factor of `g` (`L x L`, upper triangle read, destroyed), with `shift` added to
/// the first `l` pivots. Returns R (`L x L`, zeros below the diagonal).
pub fn cholesky_upper(g: &mut [f64], width: usize, l: usize, shift: f64) -> Vec<f64> {
    let w = width;
    for j in 0..l {
        g[j * w + j] += shift;
    }
    let mut r = vec![0.0f64; w * w];
    for j in 0..w {
        let d = g[j * w + j];
        if !(d > 0.0) {
            r[j * w + j] = 1.0;
            continue;
        }
        let rjj = d.sqrt();
        r[j * w + j] = rjj;
        for c in j + 1..w {
            r[j * w + c] = g[j * w + c] / rjj;
        }
        for c in j + 1..w {
            for a in j + 1..=c {
                g[a * w + c] = (-r[j * w + a]).mul_add(r[j * w + c], g[a * w + c]);
            }
        }
    }
    r
}

/// `R^{-1}` of an upper-triangular `L x L` matrix with non-zero diagonal, column by column.
pub fn upper_inverse(r: &[f64], width: usize) -> Vec<f64> {
    let w = width;
    let mut x = vec![0.0f64; w * w];
    for c in 0..w {
        x[c * w + c] = 1.0 / r[c * w + c];
        for i in (0..c).rev() {
            let mut s = 0.0f64;
            for k in i + 1..=c {
                s = r[i * w + k].mul_add(x[k * w + c], s);
            }
            x[i * w + c] = -s / r[i * w + i];
        }
    }
    x
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
pub fn cholqr(y: &[f32], rows: usize, width: usize, l: usize, passes: usize) -> (Vec<f32>, Vec<f64>) {
    let mut q = y.to_vec();
    let mut total: Vec<f64> = (0..width * width).map(|i| f64::from(u8::from(i % (width + 1) == 0))).collect();
    for p in 0..passes {
        let mut g = gram(&q, rows, width);
        let s = if p == 0 { shift((0..l).map(|j| g[j * width + j]).sum(), rows, l) } else { 0.0 };
        let r = cholesky_upper(&mut g, width, l, s);
        q = apply(&q, rows, width, &upper_inverse(&r, width));
        total = matmul(&r, &total, width);
    }
    (q, total)
}

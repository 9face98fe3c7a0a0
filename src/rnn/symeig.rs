//! The symmetric eigenproblem of the randomized SVD's small Gram matrix (f64, n <= 48), written
//! for the host's critical path: flat row-major arrays, the eigenvectors held as rows so that
//! every update runs over contiguous memory.
//!
//! 1. Householder tridiagonalisation `T = Q^T G Q`: step j reflects the column below the
//!    diagonal, `x = G[j+1.., j]`, onto `alpha e_1` with `H = I - tau v v^T`
//!    (`v = x - alpha e_1`, `alpha = -sign(x_0) ||x||`, `tau = 2 / v^T v`) and updates the
//!    trailing block as `S <- S - v w^T - w v^T` with `p = tau S v`, `w = p - (tau / 2)(p^T v) v`.
//! 2. `Q^T` accumulated backwards (`Q = H_0 (H_1 (... H_{n-3}))`: step j only touches the
//!    trailing block), stored transposed: row i of `zt` is column i of Q.
//! 3. Implicit QL with Wilkinson-type shifts on the tridiagonal reversed (`i -> n - 1 - i`, Q's
//!    columns alike): each sweep chases the bulge with Givens rotations from the bottom of the
//!    unreduced block up to its top; every rotation of columns (i, i + 1) of `Q` is a rotation
//!    of rows (i, i + 1) of `zt`. An off-diagonal entry counts as zero once
//!    `|e_i| <= eps (|d_i| + |d_{i+1}|)`.
//!
//! The order matters for the rSVD's Gram, which is graded large-to-small along its diagonal
//! (8 orders of magnitude on the bench's matrix): the reflectors run from the large end, and QL
//! wants the large entries at the bottom, hence the reversal in between. The small
//! eigenvalues' vectors then come out accurate enough for the route checks (`Sigma^-1 Z^T G Z
//! Sigma^-1 - I` of 6.5e-12 on the 1024^2 timing matrix; the other orders gave 1.9e-11 and
//! 1.5e-8, nalgebra's `symmetric_eigen` 2.3e-12).
//!
//! Costs about 7 n^3 flops (n = 42: 0.5 Mflop). A block that takes more than [`MAX_SWEEPS`]
//! sweeps gives None (the caller falls back to the SVD of the triangular factor).

/// Sweeps allowed per eigenvalue before giving up (QL converges in about 1.5 on average).
pub const MAX_SWEEPS: usize = 60;

/// `a . b` with four independent partial sums (lanes i % 4, then summed in order), so that the
/// additions pipeline instead of waiting on each other.
#[inline(always)]
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f64; 4];
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..4 {
            acc[i] += x[i] * y[i];
        }
    }
    for (i, (x, y)) in ra.iter().zip(rb).enumerate() {
        acc[i] += x * y;
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

/// Eigenvalues (ascending order not guaranteed) and eigenvectors (row i of the second vector,
/// `n` values, belongs to eigenvalue i) of the symmetric `n x n` matrix held in the leading block
/// of `g` (row stride `ld`; only the lower triangle is read). None if the QL iteration does not
/// converge or a value is not finite.
pub fn sym_eigen(g: &[f64], ld: usize, n: usize) -> Option<(Vec<f64>, Vec<f64>)> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above); the function is otherwise safe.
        return unsafe { sym_eigen_avx2(g, ld, n) };
    }
    sym_eigen_body(g, ld, n)
}

/// [`sym_eigen`] compiled for AVX2: the same IEEE operations in the same order (Rust never
/// contracts a multiply and an add into an FMA), only wider vectors, so the results are
/// bit-identical to the baseline build's.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sym_eigen_avx2(g: &[f64], ld: usize, n: usize) -> Option<(Vec<f64>, Vec<f64>)> {
    sym_eigen_body(g, ld, n)
}

#[inline(always)]
fn sym_eigen_body(g: &[f64], ld: usize, n: usize) -> Option<(Vec<f64>, Vec<f64>)> {
    if n == 0 || ld < n || g.len() < (n - 1) * ld + n {
        return None;
    }
    // Full symmetric copy from the lower triangle.
    let mut a = vec![0.0f64; n * n];
    for i in 0..n {
        for j in 0..=i {
            let v = g[i * ld + j];
            a[i * n + j] = v;
            a[j * n + i] = v;
        }
    }
    if a.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let mut d = vec![0.0f64; n];
    let mut e = vec![0.0f64; n];
    // Reflectors: v of step j in row j (indices j+1..n), tau[j] (0: identity).
    let mut vs = vec![0.0f64; n * n];
    let mut tau = vec![0.0f64; n];
    let mut p = vec![0.0f64; n];
    for j in 0..n.saturating_sub(2) {
        let lo = j + 1;
        let norm2 = dot(&a[j * n + lo..j * n + n], &a[j * n + lo..j * n + n]);
        let x0 = a[j * n + lo];
        let tail = norm2 - x0 * x0;
        d[j] = a[j * n + j];
        if tail <= 0.0 {
            e[j] = x0;
            continue;
        }
        let alpha = if x0 >= 0.0 {
            -norm2.sqrt()
        } else {
            norm2.sqrt()
        };
        e[j] = alpha;
        let v = &mut vs[j * n..(j + 1) * n];
        v[lo] = x0 - alpha;
        for i in lo + 1..n {
            v[i] = a[j * n + i];
        }
        let vtv = v[lo] * v[lo] + tail;
        let t = 2.0 / vtv;
        tau[j] = t;
        // p = tau S v over the trailing block (rows contiguous).
        for r in lo..n {
            let row = &a[r * n + lo..r * n + n];
            p[r] = t * dot(row, &v[lo..n]);
        }
        let pv = dot(&p[lo..n], &v[lo..n]);
        let kk = 0.5 * t * pv;
        for i in lo..n {
            p[i] -= kk * v[i];
        }
        for r in lo..n {
            let (vr, wr) = (v[r], p[r]);
            let row = &mut a[r * n + lo..r * n + n];
            for ((x, &vc), &wc) in row.iter_mut().zip(&v[lo..n]).zip(&p[lo..n]) {
                *x -= vr * wc + wr * vc;
            }
        }
    }
    if n >= 2 {
        d[n - 2] = a[(n - 2) * n + n - 2];
        e[n - 2] = a[(n - 1) * n + n - 2];
    }
    d[n - 1] = a[(n - 1) * n + n - 1];
    e[n - 1] = 0.0;

    // Q = H_0 (H_1 (... H_{n-3} I)), built in `q` (row-major), then transposed into zt.
    let mut q = vec![0.0f64; n * n];
    for i in 0..n {
        q[i * n + i] = 1.0;
    }
    let mut u = vec![0.0f64; n];
    for j in (0..n.saturating_sub(2)).rev() {
        let t = tau[j];
        if t == 0.0 {
            continue;
        }
        let lo = j + 1;
        let v = &vs[j * n..(j + 1) * n];
        // u = v^T Q[lo.., lo..]; rows -= tau v_r u.
        u[lo..n].iter_mut().for_each(|x| *x = 0.0);
        for r in lo..n {
            let vr = v[r];
            let row = &q[r * n + lo..r * n + n];
            for (x, &y) in u[lo..n].iter_mut().zip(row) {
                *x += vr * y;
            }
        }
        for r in lo..n {
            let c = t * v[r];
            let row = &mut q[r * n + lo..r * n + n];
            for (x, &y) in row.iter_mut().zip(&u[lo..n]) {
                *x -= c * y;
            }
        }
    }
    // QL runs on the reversed tridiagonal (index i -> n - 1 - i) with Q's columns reversed
    // alike: row i of zt is column n - 1 - i of Q (see the module notes).
    let mut zt = vec![0.0f64; n * n];
    for i in 0..n {
        for j in 0..n {
            zt[i * n + j] = q[j * n + (n - 1 - i)];
        }
    }
    d.reverse();
    let e_fwd = e.clone();
    for i in 0..n - 1 {
        e[i] = e_fwd[n - 2 - i];
    }
    e[n - 1] = 0.0;

    // Implicit QL on (d, e), rotating rows of zt.
    for l in 0..n {
        let mut sweeps = 0;
        loop {
            let mut m = l;
            while m + 1 < n {
                let dd = d[m].abs() + d[m + 1].abs();
                if e[m].abs() <= f64::EPSILON * dd {
                    break;
                }
                m += 1;
            }
            if m == l {
                break;
            }
            sweeps += 1;
            if sweeps > MAX_SWEEPS {
                return None;
            }
            // Shift: the eigenvalue of the leading 2 x 2 block of the unreduced part closer to d_l.
            let g0 = (d[l + 1] - d[l]) / (2.0 * e[l]);
            let r0 = g0.hypot(1.0);
            let mut g = d[m] - d[l] + e[l] / (g0 + r0.copysign(g0));
            let (mut s, mut c, mut pp) = (1.0f64, 1.0f64, 0.0f64);
            let mut deflated = false;
            for i in (l..m).rev() {
                let f = s * e[i];
                let b = c * e[i];
                let r = (f * f + g * g).sqrt();
                // Squares out of range (never for an rSVD Gram): the careful form.
                let r = if r > 0.0 && r.is_finite() {
                    r
                } else {
                    f.hypot(g)
                };
                e[i + 1] = r;
                if r == 0.0 {
                    // Exact underflow: the block splits here.
                    d[i + 1] -= pp;
                    e[m] = 0.0;
                    deflated = true;
                    break;
                }
                s = f / r;
                c = g / r;
                let gg = d[i + 1] - pp;
                let rr = (d[i] - gg) * s + 2.0 * c * b;
                pp = s * rr;
                d[i + 1] = gg + pp;
                g = c * rr - b;
                let (top, bottom) = zt.split_at_mut((i + 1) * n);
                let zi = &mut top[i * n..];
                let zi1 = &mut bottom[..n];
                for (x, y) in zi.iter_mut().zip(zi1.iter_mut()) {
                    let (a0, a1) = (*x, *y);
                    *y = s * a0 + c * a1;
                    *x = c * a0 - s * a1;
                }
            }
            if deflated {
                continue;
            }
            d[l] -= pp;
            e[l] = g;
            e[m] = 0.0;
        }
    }
    if d.iter().chain(&zt).any(|v| !v.is_finite()) {
        return None;
    }
    Some((d, zt))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    fn check(g: &[f64], n: usize) {
        let (d, zt) = sym_eigen(g, n, n).expect("converges");
        let scale = g.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for i in 0..n {
            // G z_i = d_i z_i and orthonormal rows.
            for r in 0..n {
                let gz: f64 = (0..n).map(|c| g[r * n + c] * zt[i * n + c]).sum();
                assert!(
                    (gz - d[i] * zt[i * n + r]).abs() <= 1e-13 * scale * n as f64,
                    "residual at {i},{r}"
                );
            }
            for j in 0..n {
                let dot: f64 = (0..n).map(|c| zt[i * n + c] * zt[j * n + c]).sum();
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((dot - want).abs() < 1e-13, "Z^T Z at {i},{j}: {dot}");
            }
        }
        let mut mine = d.clone();
        mine.sort_by(f64::total_cmp);
        let m = nalgebra::DMatrix::from_fn(n, n, |i, j| g[i * n + j]);
        let mut theirs: Vec<f64> = m.symmetric_eigen().eigenvalues.iter().copied().collect();
        theirs.sort_by(f64::total_cmp);
        for (a, b) in mine.iter().zip(&theirs) {
            assert!((a - b).abs() <= 1e-13 * scale * n as f64, "{a} vs {b}");
        }
    }

    #[test]
    fn eigenpairs_of_random_graded_and_degenerate_matrices() {
        let mut rng = Rng::new(3);
        for n in [1usize, 2, 3, 7, 42, 48] {
            // Random symmetric.
            let x: Vec<f64> = (0..n * n).map(|_| rng.normal()).collect();
            let g: Vec<f64> = (0..n * n).map(|i| x[i] + x[(i % n) * n + i / n]).collect();
            check(&g, n);
            // A Gram matrix with graded columns (as the rSVD's) and a repeated eigenvalue.
            let rows = n + 5;
            let b: Vec<f64> = (0..rows * n)
                .map(|i| rng.normal() * 0.7f64.powi((i % n) as i32))
                .collect();
            let mut g = vec![0.0f64; n * n];
            for r in 0..rows {
                for i in 0..n {
                    for j in 0..n {
                        g[i * n + j] += b[r * n + i] * b[r * n + j];
                    }
                }
            }
            check(&g, n);
            let mut id = vec![0.0f64; n * n];
            for i in 0..n {
                id[i * n + i] = if i % 3 == 0 { 2.0 } else { 1.0 };
            }
            check(&id, n);
        }
        assert!(sym_eigen(&[f64::NAN], 1, 1).is_none());
        assert!(sym_eigen(&[1.0; 3], 2, 2).is_none());
    }
}

//! Memory layout of Gaussians, points and gradients, shared by the CPU reference and GPU kernels,
//! plus input validation and the per-Gaussian constants both precompute.
//!
//! One Gaussian is [`STRIDE`] = 10 consecutive scalars (f32: 40 bytes, 8-byte aligned, so a kernel
//! can load it as five `ld.v2.f32`):
//!
//! | index | 0    | 1    | 2    | 3     | 4     | 5     | 6     | 7     | 8     | 9   |
//! |-------|------|------|------|-------|-------|-------|-------|-------|-------|-----|
//! | value | mu_x | mu_y | mu_z | L00 | L10 | L11 | L20 | L21 | L22 | w   |
//!
//! i.e. the mean, then the lower triangle of the Cholesky factor L row by row (row-major packed
//! lower triangle, `Lrc` = row r, column c), then the weight. Diagonal entries (indices 3, 5, 8)
//! must be > 0. Points are `[x, y, z]` triples, [`POINT_STRIDE`] = 3 scalars each, in the same
//! length unit as the means and L. Per-Gaussian gradients use the Gaussian layout (gradient of each
//! scalar at the same index); per-point gradients use the point layout.

use super::real::Real;
use crate::{Error, Result};

/// Scalars per Gaussian: mu (3), L lower triangle (6), weight (1).
pub const STRIDE: usize = 10;
/// Scalars per point: x, y, z.
pub const POINT_STRIDE: usize = 3;
/// Offset of mu_x within a Gaussian.
pub const MU: usize = 0;
/// Offset of L00 within a Gaussian; the six L entries are `CHOL..CHOL + 6`.
pub const CHOL: usize = 3;
/// Offset of the weight within a Gaussian.
pub const WEIGHT: usize = 9;
/// Positions of the diagonal entries L00, L11, L22 within the six packed L entries.
pub const CHOL_DIAG: [usize; 3] = [0, 2, 5];
/// Names of the six packed L entries, in order.
pub const CHOL_NAMES: [&str; 6] = ["L00", "L10", "L11", "L20", "L21", "L22"];

/// Packs one Gaussian into the layout above.
pub fn pack<T: Real>(mu: [T; 3], chol: [T; 6], weight: T) -> [T; STRIDE] {
    [
        mu[0], mu[1], mu[2], chol[0], chol[1], chol[2], chol[3], chol[4], chol[5], weight,
    ]
}

/// Splits one packed Gaussian into (mu, L lower triangle, weight).
pub fn unpack<T: Real>(g: &[T; STRIDE]) -> ([T; 3], [T; 6], T) {
    (
        [g[0], g[1], g[2]],
        [g[3], g[4], g[5], g[6], g[7], g[8]],
        g[9],
    )
}

/// Above this estimate of kappa(L) (`||L||_F ||L^-1||_F`), an f32 field evaluates the backward's
/// per-pair solve with compensated arithmetic ([`Prepared::compensated`], see
/// [`super::pair::solve_compensated`]): the plain f32 solves lose up to ~1e4 u of componentwise
/// accuracy in s = Sigma^-1 r from kappa ~ 25 on (cancellations in both triangular solves).
/// [`super::generate::GaussianSpec::default`] Gaussians exceed 16 about once in 1e5, so a GPU
/// warp almost never takes the slower path on such sets.
pub const COMPENSATE_KAPPA: f64 = 16.0;

/// Per-Gaussian constants computed once per `set_gaussians`, so the per-pair loop has no division.
/// `inv_diag[k] = 1 / (Lkk + eps)`; `norm` = (2 pi)^{-3/2} / prod_k (Lkk + eps) when the field is
/// normalised, else 1; `weight_norm = w * norm`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Prepared<T> {
    /// Mean.
    pub mu: [T; 3],
    /// Off-diagonal Cholesky entry L10.
    pub l10: T,
    /// Off-diagonal Cholesky entry L20.
    pub l20: T,
    /// Off-diagonal Cholesky entry L21.
    pub l21: T,
    /// Reciprocals of the guarded diagonal.
    pub inv_diag: [T; 3],
    /// Weight (needed separately by the backward pass).
    pub weight: T,
    /// Normalisation constant (1 when not normalised).
    pub norm: T,
    /// `weight * norm`.
    pub weight_norm: T,
    /// The guarded diagonal a_k = Lkk + eps as rounded to `T` (the value `inv_diag` inverts).
    pub diag: [T; 3],
    /// The rest (Lkk + eps) - a_k, computed in f64 and rounded: with `diag`, a_k to ~u^2.
    pub diag_lo: [T; 3],
    /// Whether the backward solves this Gaussian with compensated arithmetic: `T` is f32 and
    /// the kappa(L) estimate exceeds [`COMPENSATE_KAPPA`].
    pub compensated: bool,
}

/// `||L||_F ||L^-1||_F`, between kappa_2(L) and 3 kappa_2(L), of the guarded factor with
/// diagonal `a` and off-diagonal entries (L10, L20, L21), in f64 (dimensionless).
pub fn kappa_estimate(a: [f64; 3], l10: f64, l20: f64, l21: f64) -> f64 {
    // L^-1 of a 3x3 lower-triangular matrix, entry by entry.
    let i10 = -l10 / (a[0] * a[1]);
    let i21 = -l21 / (a[1] * a[2]);
    let i20 = (l21 * l10 / a[1] - l20) / (a[0] * a[2]);
    let norm = (a[0] * a[0] + a[1] * a[1] + a[2] * a[2] + l10 * l10 + l20 * l20 + l21 * l21).sqrt();
    let inv_norm =
        (a.iter().map(|v| 1.0 / (v * v)).sum::<f64>() + i10 * i10 + i20 * i20 + i21 * i21).sqrt();
    norm * inv_norm
}

/// Checks a packed Gaussian array and computes [`Prepared`] constants into `out` (reused: cleared
/// and refilled, so no allocation once it has grown to size).
///
/// Errors: [`Error::Shape`] when the length is zero or not a multiple of [`STRIDE`];
/// [`Error::Input`] when any value is non-finite, a diagonal entry is not > 0, or the guarded
/// diagonal makes the normalisation non-finite.
pub fn prepare<T: Real>(
    packed: &[T],
    normalised: bool,
    diag_eps: T,
    out: &mut Vec<Prepared<T>>,
) -> Result<()> {
    if packed.is_empty() || !packed.len().is_multiple_of(STRIDE) {
        return Err(Error::Shape {
            what: "packed Gaussians".into(),
            expected: format!("a non-zero multiple of {STRIDE} scalars"),
            got: format!("{} scalars", packed.len()),
        });
    }
    out.clear();
    // (2 pi)^{-3/2}: the normalisation of a unit 3-D Gaussian.
    let unit_norm = T::from_f64((std::f64::consts::TAU).powf(-1.5));
    for (j, g) in packed.chunks_exact(STRIDE).enumerate() {
        if let Some(k) = g.iter().position(|v| !v.is_finite()) {
            return Err(Error::input(format!(
                "Gaussian {j}: {} is not finite ({})",
                field_name(k),
                g[k]
            )));
        }
        for &d in &CHOL_DIAG {
            if g[CHOL + d] <= T::ZERO {
                return Err(Error::input(format!(
                    "Gaussian {j}: Cholesky diagonal {} must be > 0, got {}",
                    CHOL_NAMES[d],
                    g[CHOL + d]
                )));
            }
        }
        let a = [
            g[CHOL] + diag_eps,
            g[CHOL + 2] + diag_eps,
            g[CHOL + 5] + diag_eps,
        ];
        let inv_diag = [T::ONE / a[0], T::ONE / a[1], T::ONE / a[2]];
        let norm = if normalised {
            unit_norm * inv_diag[0] * inv_diag[1] * inv_diag[2]
        } else {
            T::ONE
        };
        let weight = g[WEIGHT];
        let weight_norm = weight * norm;
        if !(inv_diag.iter().all(|v| v.is_finite()) && norm.is_finite() && weight_norm.is_finite())
        {
            return Err(Error::input(format!(
                "Gaussian {j}: diagonal too small for this float type (1/L[kk] or the \
                 normalisation overflows); diagonal {}, {}, {}",
                g[CHOL],
                g[CHOL + 2],
                g[CHOL + 5]
            )));
        }
        let exact = [0, 2, 5].map(|d| g[CHOL + d].to_f64() + diag_eps.to_f64());
        let diag_lo = [0, 1, 2].map(|k| T::from_f64(exact[k] - a[k].to_f64()));
        let single = T::EPSILON.to_f64() > 1e-10;
        let (l10, l20, l21) = (g[CHOL + 1], g[CHOL + 3], g[CHOL + 4]);
        let compensated = single
            && kappa_estimate(exact, l10.to_f64(), l20.to_f64(), l21.to_f64()) > COMPENSATE_KAPPA;
        out.push(Prepared {
            mu: [g[0], g[1], g[2]],
            l10,
            l20,
            l21,
            inv_diag,
            weight,
            norm,
            weight_norm,
            diag: a,
            diag_lo,
            compensated,
        });
    }
    Ok(())
}

/// Checks a point array: length a multiple of 3, every coordinate finite. Returns the number
/// of points.
///
/// Errors: [`Error::Shape`] for a length that is not a multiple of 3; [`Error::Input`] naming the
/// first non-finite coordinate.
pub fn check_points<T: Real>(points: &[T]) -> Result<usize> {
    if !points.len().is_multiple_of(POINT_STRIDE) {
        return Err(Error::Shape {
            what: "points".into(),
            expected: "a multiple of 3 scalars (x, y, z triples)".into(),
            got: format!("{} scalars", points.len()),
        });
    }
    if let Some(k) = points.iter().position(|v| !v.is_finite()) {
        return Err(Error::input(format!(
            "point {} coordinate {} is not finite ({})",
            k / 3,
            ["x", "y", "z"][k % 3],
            points[k]
        )));
    }
    Ok(points.len() / POINT_STRIDE)
}

fn field_name(k: usize) -> &'static str {
    match k {
        0 => "mu_x",
        1 => "mu_y",
        2 => "mu_z",
        3..=8 => CHOL_NAMES[k - CHOL],
        _ => "weight",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_unpack_round_trip_and_offsets() {
        let g = pack([1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0, 8.0, 9.0], 10.0f64);
        assert_eq!(g, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]);
        assert_eq!(
            unpack(&g),
            ([1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0, 8.0, 9.0], 10.0)
        );
        assert_eq!((g[MU], g[CHOL], g[WEIGHT]), (1.0, 4.0, 10.0));
        // Diagonal L00, L11, L22 sit at packed L positions 0, 2, 5.
        assert_eq!(CHOL_DIAG.map(|d| CHOL_NAMES[d]), ["L00", "L11", "L22"]);
    }

    #[test]
    fn prepare_precomputes_reciprocals_and_normalisation() {
        let g = pack([0.0; 3], [2.0, 0.5, 4.0, 0.25, 0.125, 0.5], 3.0f64);
        let mut out = Vec::new();
        prepare(&g, true, 0.0, &mut out).unwrap();
        let p = out[0];
        assert_eq!(p.inv_diag, [0.5, 0.25, 2.0]);
        let norm = (std::f64::consts::TAU).powf(-1.5) / 4.0;
        assert!((p.norm - norm).abs() <= 1e-15 * norm);
        assert!((p.weight_norm - 3.0 * norm).abs() <= 1e-15 * norm);
        assert_eq!((p.l10, p.l20, p.l21), (0.5, 0.25, 0.125));
    }
}

//! The interface a training loop uses every step: [`GaussianFieldOps`] (implemented by the CPU
//! [`super::GaussianField`], later by a GPU field), its [`FieldOptions`], and the borrowed
//! [`Gradients`] view of the backward pass's reused buffers.

use super::layout::{CHOL, MU, POINT_STRIDE, STRIDE, WEIGHT};
use super::real::Real;
use crate::Result;

/// How the field is evaluated. Fixed when a field is created.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FieldOptions {
    /// Multiply each Gaussian by 1 / ((2 pi)^{3/2} det L), so that with unit weights each one
    /// integrates to 1 (a density in 1/length^3).
    pub normalised: bool,
    /// Added to each diagonal entry of L before use (same length unit as the points): a_k =
    /// Lkk + eps. Bounds 1/a_k by 1/eps, so a positive but tiny diagonal cannot overflow.
    /// Gradients are with respect to Lkk (equal to those with respect to a_k). Must be finite
    /// and >= 0.
    pub diag_eps: f64,
}

impl Default for FieldOptions {
    /// Unnormalised, `diag_eps` = 1e-6.
    fn default() -> Self {
        FieldOptions {
            normalised: false,
            diag_eps: 1e-6,
        }
    }
}

/// Gradients of a scalar loss from one backward pass, borrowed from the field's reused buffers.
///
/// `points` holds dLoss/dx as xyz triples (3 per point of the last forward); `gaussians` holds
/// dLoss/d(parameter) in the packed Gaussian layout of [`super::layout`] (10 per Gaussian: mu, the
/// six L entries L00 L10 L11 L20 L21 L22, w), so a plain `param[k] -= lr * grad[k]` works.
#[derive(Clone, Copy, Debug)]
pub struct Gradients<'a, T> {
    /// dLoss/dx_i, `[gx, gy, gz]` per point.
    pub points: &'a [T],
    /// dLoss/d(packed Gaussian parameters), 10 per Gaussian.
    pub gaussians: &'a [T],
}

impl<T: Real> Gradients<'_, T> {
    /// Number of points.
    pub fn num_points(&self) -> usize {
        self.points.len() / POINT_STRIDE
    }
    /// Number of Gaussians.
    pub fn num_gaussians(&self) -> usize {
        self.gaussians.len() / STRIDE
    }
    /// dLoss/dx_i. Panics if `i` is out of range (like slice indexing).
    pub fn grad_point(&self, i: usize) -> [T; 3] {
        let p = &self.points[i * POINT_STRIDE..(i + 1) * POINT_STRIDE];
        [p[0], p[1], p[2]]
    }
    /// dLoss/dmu_j. Panics if `j` is out of range.
    pub fn grad_mean(&self, j: usize) -> [T; 3] {
        let g = &self.gaussians[j * STRIDE + MU..j * STRIDE + MU + 3];
        [g[0], g[1], g[2]]
    }
    /// dLoss/dL_j, six entries in packed order L00 L10 L11 L20 L21 L22. Panics if out of range.
    pub fn grad_chol(&self, j: usize) -> [T; 6] {
        let g = &self.gaussians[j * STRIDE + CHOL..j * STRIDE + CHOL + 6];
        [g[0], g[1], g[2], g[3], g[4], g[5]]
    }
    /// dLoss/dw_j. Panics if `j` is out of range.
    pub fn grad_weight(&self, j: usize) -> T {
        self.gaussians[j * STRIDE + WEIGHT]
    }
}

/// A Gaussian field that owns its buffers and is called every training step without reallocating
/// (buffers grow to the largest size seen, then are reused).
///
/// Call order: [`set_gaussians`](Self::set_gaussians), then [`forward`](Self::forward), then
/// optionally [`backward`](Self::backward) for that forward. Changing the Gaussians invalidates the
/// forward: `backward` then needs a new `forward`.
pub trait GaussianFieldOps {
    /// The float type the field computes in.
    type Scalar: Real;

    /// "cpu" or "gpu" (for reports; tests run one body against both).
    fn device(&self) -> &'static str;

    /// The options the field was created with.
    fn options(&self) -> FieldOptions;

    /// Replaces the Gaussians with `packed` (10 scalars each, layout in [`super::layout`]).
    ///
    /// Errors: [`crate::Error::Shape`] if the length is zero or not a multiple of 10;
    /// [`crate::Error::Input`] if a value is non-finite or a diagonal entry of L is not > 0.
    /// On error the previous Gaussians are gone (the field has none until the next success).
    fn set_gaussians(&mut self, packed: &[Self::Scalar]) -> Result<()>;

    /// Number of Gaussians currently set (0 before the first successful `set_gaussians`).
    fn num_gaussians(&self) -> usize;

    /// Squared Mahalanobis distances d_ij for every point i (xyz triples) and Gaussian j, written
    /// row-major into `out` (`out[i * N + j]`, B x N, dimensionless).
    ///
    /// Errors: no Gaussians set; `points` not xyz triples or non-finite; `out.len() != B * N`.
    fn distances_into(&mut self, points: &[Self::Scalar], out: &mut [Self::Scalar]) -> Result<()>;

    /// Field values f_i = sum_j w_j c_j exp(-d_ij / 2) at each point (xyz triples), one per point,
    /// without forming the B x N matrix. Keeps the points for `backward`.
    ///
    /// Errors: no Gaussians set; `points` not xyz triples or non-finite; a non-finite result
    /// (inputs beyond the float type's range).
    fn forward(&mut self, points: &[Self::Scalar]) -> Result<&[Self::Scalar]>;

    /// Gradients of a loss given `grad_values[i]` = dLoss/df_i for the points of the last forward.
    ///
    /// Errors: no forward since the last `set_gaussians`; `grad_values.len()` differs from the
    /// number of points of that forward; non-finite `grad_values`; a non-finite gradient.
    fn backward(&mut self, grad_values: &[Self::Scalar]) -> Result<Gradients<'_, Self::Scalar>>;
}

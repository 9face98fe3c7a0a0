//! Gaussian field: N anisotropic 3-D Gaussians evaluated at B query points, forward and backward.
//!
//! Gaussian j has a mean mu_j (metres), a lower-triangular Cholesky factor L_j of its covariance
//! (Sigma_j = L_j L_j^T, metres, positive diagonal) and a weight w_j (field units). The memory
//! layout (10 scalars per Gaussian: mu, L00 L10 L11 L20 L21 L22, w; points as xyz triples) is in
//! [`layout`]; GPU kernels use it as is. An NDT-style `&[[T; 3]]` cloud becomes the flat point
//! slice without a copy through [`crate::points::as_flat`].
//!
//! # Forward
//! With a_k = Lkk + eps ([`FieldOptions::diag_eps`]) and r_ij = x_i - mu_j:
//! - v_ij solves L_j v = r_ij by forward substitution (never an explicit inverse):
//!   v0 = r0/a0, v1 = (r1 - L10 v0)/a1, v2 = (r2 - L20 v0 - L21 v1)/a2;
//! - squared Mahalanobis distance d_ij = |v_ij|^2 (dimensionless);
//! - e_ij = exp(-d_ij / 2), flushed to 0 when d_ij > [`Real::EXP_CUTOFF_D`] (f32: 174, f64: 1416,
//!   where it would be subnormal; a GPU's `.ftz` exponential does the same);
//! - c_j = (2 pi)^{-3/2} / (a0 a1 a2) when [`FieldOptions::normalised`], else c_j = 1;
//! - field f_i = sum_j w_j c_j e_ij.
//!
//! # Backward
//! Notation: L_j,ab is entry (row a, column b) of L_j; s_ij,a is component a of s_ij.
//! Given g_i = dLoss/df_i, per pair (i, j):
//! - s_ij = L_j^{-T} v_ij by back substitution (s2 = v2/a2, s1 = (v1 - L21 s2)/a1,
//!   s0 = (v0 - L10 s1 - L20 s2)/a0), so s_ij = Sigma_j^{-1} r_ij;
//! - h_ij = g_i c_j e_ij and q_ij = -w_j h_ij.
//!
//! Then
//! - dLoss/dw_j    = sum_i h_ij
//! - dLoss/dx_i    = sum_j q_ij s_ij
//! - dLoss/dmu_j   = -sum_i q_ij s_ij
//! - dLoss/dL_j,ab = -sum_i q_ij s_ij,a v_ij,b  for a > b (L10, L20, L21)
//! - dLoss/dL_j,kk = -sum_i q_ij s_ij,k v_ij,k  - w_j (dLoss/dw_j) / a_k  (last term only when
//!   normalised)
//!
//! Derivation: df/dd = -w c e / 2 and dd/dv = 2 v, so dLoss/dv = q v. From L v = r,
//! dv = L^{-1}(dr - dL v), hence dLoss/dr = L^{-T} q v = q s and dLoss/dL = -(q s) v^T restricted
//! to the lower triangle; r = x - mu gives the x and mu rules. With normalisation, dc/da_k = -c/a_k
//! gives sum_i g_i w e_ij (-c/a_k) = -w (dLoss/dw) / a_k. Since a_k = Lkk + eps, gradients with
//! respect to Lkk and a_k coincide. A pair whose e_ij is 0 (beyond the cutoff) contributes exactly
//! 0 and is skipped, which also keeps 0 * inf out when s overflows.
//!
//! # Notes for a GPU implementation
//! - Precompute per Gaussian once per `set_gaussians` (see [`layout::Prepared`]): 1/a_k, c_j and
//!   w_j c_j, so the per-pair loop has no division; follow [`pair`] for the per-pair order.
//! - Per-point outputs (f_i, dLoss/dx_i) need no synchronisation when one thread owns a point.
//! - Per-Gaussian gradients are sums over points. The CPU stays deterministic by giving each block
//!   of points its own partial sums (at most [`cpu::MAX_PARTIALS`] blocks, split by B only) and
//!   adding the partials in block order; a GPU can do the same (block partials, then a reduction
//!   pass) rather than float atomics. The normalisation term of dLoss/dL_j,kk is linear in
//!   dLoss/dw_j, so adding it to each partial (as the CPU does) or once at the end agree.
//! - f32 only: a Gaussian whose kappa(L) estimate exceeds [`layout::COMPENSATE_KAPPA`] takes v
//!   from [`pair::solve_compensated`] in the backward (exact two-term r, products and remainders):
//!   the plain solves' rounding, amplified by cancellations in both triangular solves, costs up
//!   to ~4e-4 relative in dLoss/dx there; compensated, ~2e-5 (CPU) / ~5e-5 (GPU, fused).
//! - Gradients come back in the packed Gaussian layout, so an optimiser updates the packed
//!   parameter buffer in place.
//!
//! # Modules
//! - [`layout`]: packed layout, validation, per-Gaussian precomputed constants;
//! - [`pair`]: the per-pair maths above, in the order a kernel should follow;
//! - [`ops`]: the [`GaussianFieldOps`] trait a training loop calls, [`FieldOptions`], [`Gradients`];
//! - [`cpu`]: [`GaussianField`], the rayon CPU reference (f32 and f64, deterministic);
//! - [`gpu`]: [`GpuGaussianField`], the same on a CUDA device (kernels in
//!   `crate::kernels::gaussian`), [`gpu_launch`] its launch geometry, [`gpu_raw`] the same kernels
//!   on caller-owned device memory and streams (the PyTorch binding);
//! - [`validate`]: the checks both fields share, so they reject the same inputs alike;
//! - [`generate`]: generated Gaussians and points; [`demo`]: a gradient-descent fit.

pub mod cpu;
pub mod demo;
pub mod generate;
pub mod gpu;
pub mod gpu_launch;
pub mod gpu_raw;
mod gpu_raw_backward;
mod gpu_raw_prepare;
pub mod layout;
pub mod ops;
pub mod pair;
pub mod real;
pub mod validate;

pub use cpu::GaussianField;
pub use gpu::{GpuGaussianField, GpuReal};
pub use gpu_raw::{RawGaussianKernels, RawPlan, RawSlice};
pub use ops::{FieldOptions, GaussianFieldOps, Gradients};
pub use real::Real;

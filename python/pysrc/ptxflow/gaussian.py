"""The Gaussian field on numpy arrays: N anisotropic 3-D Gaussians evaluated at B points.

Each Gaussian is 10 scalars (packed layout): ``mu_x mu_y mu_z L00 L10 L11 L20 L21 L22 w`` with
L the lower-triangular Cholesky factor of its covariance (Sigma = L L^T, diagonal > 0) and w its
weight. The field is ``f(x) = sum_j w_j c_j exp(-|L_j^-1 (x - mu_j)|^2 / 2)`` with the diagonal
of L taken as ``Lkk + diag_eps`` and ``c_j = (2 pi)^-3/2 / prod_k (Lkk + diag_eps)`` when
``normalised`` (else 1). float32 or float64 (points and Gaussians alike), C-contiguous.
"""

import numpy as np

from . import _check, _native

__all__ = ["forward", "backward", "STRIDE"]

#: Scalars per Gaussian in the packed layout.
STRIDE = 10


def _args(points, gaussians, normalised, diag_eps, device):
    points = _check.array("points", points, 2, 3)
    gaussians = _check.array("gaussians", gaussians, 2, STRIDE)
    _check.same_dtype(points=points, gaussians=gaussians)
    return points, gaussians, bool(normalised), float(diag_eps), _check.device(device)


def forward(points, gaussians, normalised=False, diag_eps=1e-6, device="auto"):
    """Field values (B,) at ``points`` (B, 3) of ``gaussians`` (N, 10)."""
    args = _args(points, gaussians, normalised, diag_eps, device)
    fn = _native.gaussian_forward_f32 if args[0].dtype == np.float32 else _native.gaussian_forward_f64
    return fn(*args)


def backward(points, gaussians, grad_out, normalised=False, diag_eps=1e-6, device="auto"):
    """``(grad_points (B, 3), grad_gaussians (N, 10))``: gradients of a loss whose gradient with
    respect to the field values is ``grad_out`` (B,), in the packed layout (so
    ``gaussians -= lr * grad_gaussians`` is a gradient step)."""
    p, g, normalised, diag_eps, device = _args(points, gaussians, normalised, diag_eps, device)
    grad_out = _check.array("grad_out", grad_out, 1, None)
    _check.same_dtype(points=p, grad_out=grad_out)
    if grad_out.shape[0] != p.shape[0]:
        raise ValueError(f"grad_out must have shape ({p.shape[0]},), got {grad_out.shape}")
    fn = _native.gaussian_backward_f32 if p.dtype == np.float32 else _native.gaussian_backward_f64
    return fn(p, g, grad_out, normalised, diag_eps, device)

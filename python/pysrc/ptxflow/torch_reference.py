"""The Gaussian field in plain PyTorch (the same maths as ``ptxflow.torch``; autograd does the
backward). For tests, benchmarks and as the specification in code: it forms the B x N matrix, so
it is for modest sizes."""

import math

import torch

__all__ = ["field", "ReferenceGaussianField", "pack"]

_UNIT_NORM = (2.0 * math.pi) ** -1.5


def field(points, gaussians, normalised=False, diag_eps=1e-6):
    """f_i = sum_j w_j c_j exp(-|v_ij|^2 / 2), v_ij solving L_j v = x_i - mu_j by forward
    substitution; pairs with |v|^2 above the float type's cutoff contribute 0 (as the kernels)."""
    mu = gaussians[:, 0:3]
    l00, l10, l11, l20, l21, l22 = gaussians[:, 3:9].unbind(1)
    w = gaussians[:, 9]
    a0, a1, a2 = l00 + diag_eps, l11 + diag_eps, l22 + diag_eps
    r = points[:, None, :] - mu[None, :, :]
    v0 = r[..., 0] / a0
    v1 = (r[..., 1] - l10 * v0) / a1
    v2 = (r[..., 2] - l20 * v0 - l21 * v1) / a2
    d = v0 * v0 + v1 * v1 + v2 * v2
    cutoff = 174.0 if points.dtype == torch.float32 else 1416.0
    e = torch.where(d > cutoff, torch.zeros_like(d), torch.exp(-0.5 * d))
    c = _UNIT_NORM / (a0 * a1 * a2) if normalised else torch.ones_like(w)
    return e @ (w * c)


def diagonal_mask(device):
    """True at the diagonal entries (L00, L11, L22) of the six packed L entries."""
    return torch.tensor([True, False, True, False, False, True], device=device)


def pack(means, chol, weights, use_full_cov=True, mask=None):
    """The packed (N, 10) Gaussians of ``LearnableGaussianField``'s parameters: the diagonal of
    L is ``exp`` of the stored entries (so it stays positive), the off-diagonal entries are used
    as stored (zero without ``use_full_cov``). ``mask``: ``diagonal_mask`` (made when None)."""
    diag = diagonal_mask(chol.device) if mask is None else mask
    off = chol if use_full_cov else torch.zeros_like(chol)
    l = torch.where(diag, chol.exp(), off)
    return torch.cat([means, l, weights[:, None]], dim=1)


def init_parameters(num_gaussians, volume_size, dtype, device, generator=None):
    """Means uniform in the cube [-volume_size/2, volume_size/2]^3, isotropic standard deviation
    volume_size / (2 N^(1/3)) (log-diagonal), zero off-diagonal, weights N(0, 0.1^2)."""
    g = generator
    means = (torch.rand(num_gaussians, 3, generator=g, dtype=torch.float64) - 0.5) * volume_size
    sigma = volume_size / (2.0 * num_gaussians ** (1.0 / 3.0))
    chol = torch.zeros(num_gaussians, 6, dtype=torch.float64)
    chol[:, [0, 2, 5]] = math.log(sigma)
    weights = 0.1 * torch.randn(num_gaussians, generator=g, dtype=torch.float64)
    return [t.to(dtype=dtype, device=device) for t in (means, chol, weights)]


class ReferenceGaussianField(torch.nn.Module):
    """``ptxflow.torch.LearnableGaussianField`` in plain PyTorch (same parameters, same forward)."""

    def __init__(self, num_gaussians, volume_size, use_full_cov=True, device="cuda",
                 dtype=torch.float32, normalised=False, diag_eps=1e-6, generator=None):
        super().__init__()
        means, chol, weights = init_parameters(num_gaussians, volume_size, dtype, device,
                                               generator)
        self.means = torch.nn.Parameter(means)
        self.chol = torch.nn.Parameter(chol)
        self.weights = torch.nn.Parameter(weights)
        self.register_buffer("diag_mask", diagonal_mask(device), persistent=False)
        self.use_full_cov = use_full_cov
        self.normalised = normalised
        self.diag_eps = diag_eps

    def packed(self):
        return pack(self.means, self.chol, self.weights, self.use_full_cov, self.diag_mask)

    def forward(self, points):
        return field(points, self.packed(), self.normalised, self.diag_eps)

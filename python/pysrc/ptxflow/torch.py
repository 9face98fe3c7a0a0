"""The Gaussian field as a PyTorch op: ``gaussian_field`` (a ``torch.autograd.Function``) and
``LearnableGaussianField`` (an ``nn.Module``).

CUDA tensors are used in place: ptxflow launches its kernels (PTX JIT-compiled by the driver, no
nvcc) on the tensors' memory, in the device's primary context (the one PyTorch uses), on
PyTorch's current stream, with scratch from PyTorch's caching allocator. No host copies; the op
runs on whichever ``cuda:N`` its tensors live on. CPU tensors go through the CPU reference.

Unlike the numpy API, the CUDA path does not inspect values (that would synchronise): non-finite
inputs or a non-positive diagonal give NaN or inf, as in other PyTorch ops.
"""

import math

import numpy as np
import torch

from . import _native
from . import gaussian as _gaussian
from .torch_reference import diagonal_mask, init_parameters, pack

__all__ = ["gaussian_field", "GaussianField", "LearnableGaussianField"]

_UNIT_NORM = (2.0 * math.pi) ** -1.5
_KERNELS = {}
_ALIGN = 16


def _kernels(index):
    k = _KERNELS.get(index)
    if k is None:
        k = _KERNELS[index] = _native.CudaGaussian(index)
    return k


def _aligned(t):
    t = t.contiguous()
    return t if t.data_ptr() % _ALIGN == 0 else t.clone()


def _buf(t):
    return (t.data_ptr(), t.numel())


def _prepare(g, n_pad, normalised, diag_eps, scale):
    """The kernels' prepared layout (12 per Gaussian, zero padding to n_pad), on g's device."""
    n = g.shape[0]
    prep = torch.zeros(n_pad, 12, dtype=g.dtype, device=g.device)
    a = g[:, [3, 5, 8]] + diag_eps
    inv = 1.0 / a
    if normalised:
        norm = _UNIT_NORM * inv[:, 0] * inv[:, 1] * inv[:, 2]
    else:
        norm = torch.ones_like(inv[:, 0])
    w = g[:, 9]
    prep[:n, 0:3] = g[:, 0:3]
    prep[:n, 3:6] = -g[:, [4, 6, 7]]
    prep[:n, 6:9] = inv
    prep[:n, 9] = ((w * norm).double() * scale).to(g.dtype)
    prep[:n, 10] = (norm.double() * scale).to(g.dtype)
    prep[:n, 11] = w
    return prep


def _compensation(g, n_pad, diag_eps):
    """The f32 backward's compensation records (8 per Gaussian): -a (as rounded), the flag
    kappa(L) > 16, -(exact a - rounded a)."""
    n = g.shape[0]
    comp = torch.zeros(n_pad, 8, dtype=g.dtype, device=g.device)
    if g.dtype != torch.float32:
        return comp
    a = g[:, [3, 5, 8]] + diag_eps
    exact = g[:, [3, 5, 8]].double() + diag_eps
    lo = (exact - a.double()).to(g.dtype)
    gd = g.double()
    l10, l20, l21 = gd[:, 4], gd[:, 6], gd[:, 7]
    a0, a1, a2 = exact.unbind(1)
    i10 = -l10 / (a0 * a1)
    i21 = -l21 / (a1 * a2)
    i20 = (l21 * l10 / a1 - l20) / (a0 * a2)
    nrm = (a0 * a0 + a1 * a1 + a2 * a2 + l10 * l10 + l20 * l20 + l21 * l21).sqrt()
    inv = ((1.0 / (exact * exact)).sum(1) + i10 * i10 + i20 * i20 + i21 * i21).sqrt()
    comp[:n, 0:3] = -a
    comp[:n, 3] = (nrm * inv > 16.0).to(g.dtype)
    comp[:n, 4:7] = -lo
    return comp


def _check(points, gaussians):
    if not (isinstance(points, torch.Tensor) and isinstance(gaussians, torch.Tensor)):
        raise TypeError("points and gaussians must be torch tensors")
    if points.dtype not in (torch.float32, torch.float64) or points.dtype != gaussians.dtype:
        raise TypeError(f"points and gaussians must both be float32 or both float64, got "
                        f"{points.dtype} and {gaussians.dtype}")
    if points.device != gaussians.device:
        raise ValueError(f"points ({points.device}) and gaussians ({gaussians.device}) must be "
                         f"on one device")
    if points.dim() != 2 or points.shape[1] != 3:
        raise ValueError(f"points must have shape (B, 3), got {tuple(points.shape)}")
    if gaussians.dim() != 2 or gaussians.shape[1] != 10 or gaussians.shape[0] == 0:
        raise ValueError(f"gaussians must have shape (N, 10) with N >= 1, got "
                         f"{tuple(gaussians.shape)}")


class GaussianField(torch.autograd.Function):
    """f = field(points (B, 3), gaussians (N, 10) packed); gradients for both."""

    @staticmethod
    def forward(ctx, points, gaussians, normalised=False, diag_eps=1e-6):
        _check(points, gaussians)
        ctx.normalised, ctx.diag_eps = bool(normalised), float(diag_eps)
        if not (ctx.diag_eps >= 0.0 and math.isfinite(ctx.diag_eps)):
            raise ValueError(f"diag_eps must be finite and >= 0, got {diag_eps}")
        if points.device.type == "cpu":
            ctx.save_for_backward(points, gaussians)
            out = _gaussian.forward(points.detach().contiguous().numpy(),
                                    gaussians.detach().contiguous().numpy(),
                                    ctx.normalised, ctx.diag_eps, device="cpu")
            return torch.from_numpy(np.ascontiguousarray(out))
        if points.device.type != "cuda":
            raise ValueError(f"unsupported device {points.device}")
        double = points.dtype == torch.float64
        index = points.device.index if points.device.index is not None else torch.cuda.current_device()
        k = _kernels(index)
        points, gaussians = _aligned(points.detach()), _aligned(gaussians.detach())
        b, n = points.shape[0], gaussians.shape[0]
        n_pad, _, _, fwd_scratch, _, _ = k.plan(double, n, b)
        with torch.cuda.device(index):
            stream = torch.cuda.current_stream().cuda_stream
            prep = _prepare(gaussians, n_pad, ctx.normalised, ctx.diag_eps,
                            _native.CudaGaussian.exp_scale(double))
            values = torch.empty(b, dtype=points.dtype, device=points.device)
            scratch = torch.empty(fwd_scratch, dtype=points.dtype, device=points.device)
            k.forward(double, stream, n, b, _buf(prep), _buf(points), _buf(scratch), _buf(values))
        ctx.save_for_backward(points, gaussians, prep)
        ctx.index = index
        return values

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        saved = ctx.saved_tensors
        points, gaussians = saved[0], saved[1]
        if points.device.type == "cpu":
            gp, gg = _gaussian.backward(points.detach().contiguous().numpy(),
                                        gaussians.detach().contiguous().numpy(),
                                        grad_out.detach().contiguous().numpy(),
                                        ctx.normalised, ctx.diag_eps, device="cpu")
            return torch.from_numpy(gp), torch.from_numpy(gg), None, None
        prep = saved[2]
        double = points.dtype == torch.float64
        k = _kernels(ctx.index)
        b, n = points.shape[0], gaussians.shape[0]
        _, _, _, _, pp_len, pg_len = k.plan(double, n, b)
        opts = dict(dtype=points.dtype, device=points.device)
        with torch.cuda.device(ctx.index):
            stream = torch.cuda.current_stream().cuda_stream
            grad_out = _aligned(grad_out)
            comp = _compensation(gaussians, prep.shape[0], ctx.diag_eps)
            partial_points = torch.empty(pp_len, **opts)
            partial_gauss = torch.empty(pg_len, **opts)
            grad_points = torch.empty(b, 3, **opts)
            grad_gaussians = torch.empty(n, 10, **opts)
            k.backward(double, stream, n, b, ctx.normalised, _buf(prep), _buf(comp),
                       _buf(points), _buf(grad_out), _buf(partial_points), _buf(partial_gauss),
                       _buf(grad_points), _buf(grad_gaussians))
        return (grad_points if ctx.needs_input_grad[0] else None,
                grad_gaussians if ctx.needs_input_grad[1] else None, None, None)


def gaussian_field(points, gaussians, normalised=False, diag_eps=1e-6):
    """Field values (B,) at ``points`` (B, 3) of ``gaussians`` (N, 10, packed layout; see
    ``ptxflow.gaussian``), differentiable with respect to both. CUDA or CPU tensors, float32 or
    float64."""
    return GaussianField.apply(points, gaussians, normalised, diag_eps)


class LearnableGaussianField(torch.nn.Module):
    """N learnable anisotropic Gaussians in a cube of side ``volume_size``.

    Parameters: ``means`` (N, 3), ``chol`` (N, 6: the Cholesky factor's lower triangle L00 L10
    L11 L20 L21 L22, the diagonal stored as its log), ``weights`` (N). ``use_full_cov=False``
    keeps the covariances diagonal (off-diagonal entries ignored). ``forward(points (B, 3))``
    returns the field values (B,).
    """

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
        """The Gaussians in the packed (N, 10) layout."""
        return pack(self.means, self.chol, self.weights, self.use_full_cov, self.diag_mask)

    def forward(self, points):
        return gaussian_field(points, self.packed(), self.normalised, self.diag_eps)

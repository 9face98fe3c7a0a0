"""The Gaussian field as a PyTorch op: ``gaussian_field`` (a ``torch.autograd.Function``) and
``LearnableGaussianField`` (an ``nn.Module``).

CUDA tensors are used in place: ptxflow launches its kernels (PTX JIT-compiled by the driver, no
nvcc) on the tensors' memory, in the device's primary context (the one PyTorch uses), on
PyTorch's current stream, with workspaces from PyTorch's caching allocator. No host copies and
no synchronisation (so the op can be captured in CUDA graphs); the op runs on whichever
``cuda:N`` its tensors live on, with one ptxflow device per CUDA device opened on first use. The
Gaussians are prepared on the device (``gaussian_prepare`` kernel) every forward. CPU tensors go
through the CPU reference.

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

_KERNELS = {}
_PLANS = {}
_ALIGN = 16


def _kernels(index):
    k = _KERNELS.get(index)
    if k is None:
        k = _KERNELS[index] = _native.CudaGaussian(index)
    return k


def _plan(k, double, n, b):
    key = (id(k), double, n, b)
    p = _PLANS.get(key)
    if p is None:
        if len(_PLANS) > 4096:
            _PLANS.clear()
        p = _PLANS[key] = k.plan(double, n, b)
    return p


def _aligned(t):
    t = t.contiguous()
    return t if t.data_ptr() % _ALIGN == 0 else t.clone()


try:  # the raw handle without building a torch.cuda.Stream object (~10x cheaper)
    _raw_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:  # pragma: no cover - older PyTorch
    def _raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream


def _buf(t):
    return (t.data_ptr(), t.numel())


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
        device = points.device
        index = device.index if device.index is not None else torch.cuda.current_device()
        k = _kernels(index)
        points, gaussians = _aligned(points.detach()), _aligned(gaussians.detach())
        b, n = points.shape[0], gaussians.shape[0]
        fwd_len, _ = _plan(k, double, n, b)
        work = torch.empty(fwd_len, dtype=points.dtype, device=device)
        values = torch.empty(b, dtype=points.dtype, device=device)
        k.forward(double, _raw_stream(index), n, b, ctx.normalised,
                  ctx.diag_eps, _buf(gaussians), _buf(points), _buf(work), _buf(values))
        ctx.save_for_backward(points, work)
        ctx.index, ctx.n = index, n
        return values

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        points, second = ctx.saved_tensors
        if points.device.type == "cpu":
            gaussians = second
            gp, gg = _gaussian.backward(points.detach().contiguous().numpy(),
                                        gaussians.detach().contiguous().numpy(),
                                        grad_out.detach().contiguous().numpy(),
                                        ctx.normalised, ctx.diag_eps, device="cpu")
            return torch.from_numpy(gp), torch.from_numpy(gg), None, None
        work = second
        double = points.dtype == torch.float64
        k = _kernels(ctx.index)
        b, n = points.shape[0], ctx.n
        _, bwd_len = _plan(k, double, n, b)
        device = points.device
        grad_out = _aligned(grad_out)
        bwork = torch.empty(bwd_len, dtype=points.dtype, device=device)
        grad_points = torch.empty(b, 3, dtype=points.dtype, device=device)
        grad_gaussians = torch.empty(n, 10, dtype=points.dtype, device=device)
        k.backward(double, _raw_stream(ctx.index), n, b, ctx.normalised,
                   _buf(work), _buf(points), _buf(grad_out), _buf(bwork), _buf(grad_points),
                   _buf(grad_gaussians))
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

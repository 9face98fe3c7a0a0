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

_F32, _F64 = torch.float32, torch.float64
_Tensor = torch.Tensor
_INF = math.inf


class _Device:
    """ptxflow's kernels on one CUDA device and the workspace lengths of each (float type, N, B)
    seen (looked up once; a call then costs a dict lookup)."""

    __slots__ = ("index", "native", "plans")

    def __init__(self, index):
        self.index = index
        self.native = _native.CudaGaussian(index)
        self.plans = {}

    def plan(self, double, n, b):
        key = (double, n, b)
        p = self.plans.get(key)
        if p is None:
            if len(self.plans) > 4096:
                self.plans.clear()
            p = self.plans[key] = self.native.plan(double, n, b)
        return p


_DEVICES = {}


def _device(index):
    d = _DEVICES.get(index)
    if d is None:
        d = _DEVICES[index] = _Device(index)
    return d


try:  # the raw handle without building a torch.cuda.Stream object (~10x cheaper)
    _raw_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:  # pragma: no cover - older PyTorch or a build without CUDA
    def _raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream


def _check(points, gaussians):
    if not (isinstance(points, torch.Tensor) and isinstance(gaussians, torch.Tensor)):
        raise TypeError("points and gaussians must be torch tensors")
    if points.dtype not in (_F32, _F64) or points.dtype != gaussians.dtype:
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


def _diag_eps(diag_eps):
    eps = float(diag_eps)
    if not (eps >= 0.0 and math.isfinite(eps)):
        raise ValueError(f"diag_eps must be finite and >= 0, got {diag_eps}")
    return eps


def _aligned(t):
    """``t`` contiguous at a 16-byte aligned address (the kernels' vector loads), copied only
    when it is not."""
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()


def _forward_cuda(ctx, points, gaussians, normalised, diag_eps, double):
    """Prepare + forward on ``points``' device and current stream; the arguments are checked
    (contiguous, aligned, one device, shapes, dtypes)."""
    index = points.get_device()
    d = _DEVICES.get(index) or _device(index)
    b, n = points.shape[0], gaussians.shape[0]
    fwd_len, bwd_len = d.plan(double, n, b)
    work = points.new_empty(fwd_len)
    values = points.new_empty(b)
    d.native.forward(double, _raw_stream(index), n, b, normalised, diag_eps,
                     gaussians.data_ptr(), points.data_ptr(), work.data_ptr(), values.data_ptr())
    ctx.save_for_backward(points)
    ctx.pf = (d, work, n, b, normalised, double, bwd_len)
    return values


def _backward_cuda(ctx, grad_out):
    d, work, n, b, normalised, double, bwd_len = ctx.pf
    points, = ctx.saved_tensors
    if not (grad_out.dtype is points.dtype and grad_out.is_contiguous()
            and not grad_out.data_ptr() & 15):
        grad_out = _aligned(grad_out.to(points.dtype))
    grad_points = points.new_empty((b, 3))
    if b == 0:
        grad_gaussians = points.new_zeros((n, 10))
    else:
        grad_gaussians = points.new_empty((n, 10))
        bwork = points.new_empty(bwd_len)
        d.native.backward(double, _raw_stream(d.index), n, b, normalised, work.data_ptr(),
                          points.data_ptr(), grad_out.data_ptr(), bwork.data_ptr(),
                          grad_points.data_ptr(), grad_gaussians.data_ptr())
    need = ctx.needs_input_grad
    return (grad_points if need[0] else None, grad_gaussians if need[1] else None, None, None)


# With create_graph=True the backward runs with grad mode on: first-order only, as
# once_differentiable (its no_grad wrapper is skipped on the usual path, where grad mode is off).
_backward_cuda_once = torch.autograd.function.once_differentiable(_backward_cuda)


def _backward_cpu(ctx, grad_out):
    points, gaussians = ctx.saved_tensors
    gp, gg = _gaussian.backward(points.detach().contiguous().numpy(),
                                gaussians.detach().contiguous().numpy(),
                                grad_out.detach().contiguous().numpy(),
                                ctx.normalised, ctx.diag_eps, device="cpu")
    return torch.from_numpy(gp), torch.from_numpy(gg), None, None


class GaussianField(torch.autograd.Function):
    """f = field(points (B, 3), gaussians (N, 10) packed); gradients for both."""

    @staticmethod
    def forward(ctx, points, gaussians, normalised=False, diag_eps=1e-6):
        # The usual case, checked with a few attribute reads: contiguous, 16-byte aligned CUDA
        # tensors of one device and float type, shapes (B, 3) and (N >= 1, 10), a float eps.
        if (isinstance(points, _Tensor) and isinstance(gaussians, _Tensor)
                and points.is_cuda and gaussians.is_cuda and type(diag_eps) is float
                and 0.0 <= diag_eps < _INF):
            dtype, ps, gs = points.dtype, points.shape, gaussians.shape
            if (gaussians.dtype is dtype and (dtype is _F32 or dtype is _F64)
                    and len(ps) == 2 and ps[1] == 3 and len(gs) == 2 and gs[1] == 10 and gs[0]
                    and points.get_device() == gaussians.get_device()
                    and points.is_contiguous() and gaussians.is_contiguous()
                    and not (points.data_ptr() | gaussians.data_ptr()) & 15):
                return _forward_cuda(ctx, points, gaussians, bool(normalised), diag_eps,
                                     dtype is _F64)
        # Everything else: a clear error, or a contiguous aligned copy, or the CPU path.
        _check(points, gaussians)
        normalised, diag_eps = bool(normalised), _diag_eps(diag_eps)
        if points.device.type == "cuda":
            return _forward_cuda(ctx, _aligned(points.detach()), _aligned(gaussians.detach()),
                                 normalised, diag_eps, points.dtype is _F64)
        if points.device.type != "cpu":
            raise ValueError(f"unsupported device {points.device}")
        ctx.pf = None
        ctx.normalised, ctx.diag_eps = normalised, diag_eps
        ctx.save_for_backward(points, gaussians)
        out = _gaussian.forward(points.detach().contiguous().numpy(),
                                gaussians.detach().contiguous().numpy(),
                                normalised, diag_eps, device="cpu")
        return torch.from_numpy(np.ascontiguousarray(out))

    @staticmethod
    def backward(ctx, grad_out):
        if ctx.pf is None:
            return _backward_cpu(ctx, grad_out)
        if torch.is_grad_enabled():
            return _backward_cuda_once(ctx, grad_out)
        return _backward_cuda(ctx, grad_out)


def _direct_apply():
    """``GaussianField.apply`` without the Python layer that ``torch.autograd.Function.apply``
    has in some PyTorch versions (a classmethod that binds arguments, asks whether functorch
    transforms are active and walks the arguments for dead functorch wrappers before calling
    the C++ ``apply``): the C++ ``apply`` with the same two checks done inline. None where
    ``Function.apply`` is already the C++ one (newer PyTorch) or the pieces are missing."""
    c_apply = torch._C._FunctionBase.__dict__.get("apply")
    if c_apply is None or torch.autograd.Function.__dict__.get("apply") is c_apply:
        return None
    active = getattr(torch._C, "_are_functorch_transforms_active", None)
    unwrap = getattr(getattr(torch._C, "_functorch", None), "unwrap_if_dead", None)
    compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    if active is None or unwrap is None or compiling is None:
        return None
    try:
        apply = c_apply.__get__(None, GaussianField)
    except (AttributeError, TypeError):
        return None

    def direct(points, gaussians, normalised, diag_eps):
        if (compiling() or active() or not isinstance(points, _Tensor)
                or not isinstance(gaussians, _Tensor)):
            return GaussianField.apply(points, gaussians, normalised, diag_eps)
        return apply(unwrap(points), unwrap(gaussians), normalised, diag_eps)
    return direct


_apply = _direct_apply() or GaussianField.apply


def gaussian_field(points, gaussians, normalised=False, diag_eps=1e-6):
    """Field values (B,) at ``points`` (B, 3) of ``gaussians`` (N, 10, packed layout; see
    ``ptxflow.gaussian``), differentiable with respect to both. CUDA or CPU tensors, float32 or
    float64."""
    return _apply(points, gaussians, normalised, diag_eps)


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

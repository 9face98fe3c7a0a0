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

The host's cost of a call is kept to what a launch needs: a few attribute reads check the usual
case (contiguous, 16-byte aligned tensors of one CUDA device and dtype; anything else takes the
checked path, which copies or raises), one dict lookup keyed by the tensors' shapes both validates
them (a key is only stored once its shapes and dtype passed the checks) and finds the device's
kernels and workspace sizes, one native call per direction takes raw addresses and the raw current
stream, and the outputs and the workspace (the forward's, with the backward's folded in for small
problems) are ``new_empty`` tensors. The backward launches no reduction for a gradient autograd
does not want (points that need none). ``python/gpu/overhead.py`` breaks a call down against
PyTorch's own floor.

Host-cost switches (read at import, or when a device is first used for graphs):
``PTXFLOW_TORCH_EARLY_GRADS`` (allocate the gradients in the forward, on the caller's thread; on
unless ``0``), and two opt-ins (off unless ``1``): ``PTXFLOW_TORCH_POOL`` (reuse the workspace per
stream, ``_WorkPool``) and ``PTXFLOW_PY_GRAPHS`` (each direction's kernels replayed as one
recorded CUDA graph, direct launches where a recording cannot be used; or set
``_native_device(i).graphs``). Measured on the H100 machine (``python/gpu/overhead.py``, 1000 x
500 f32 fwd+bwd, medians of 7 interleaved rounds, three runs): early gradients saved 8-20 us a
call in every run; the pool and graph replays saved up to 44 us in one run and nothing beyond the
noise (+-10 us) in the others, so they stay opt-in. ``python/gpu/gpu_check.py`` passes with all
of them on and all off, and ``memcheck_op.py`` reports 0 errors under compute-sanitizer.
"""

import math
import os
import sys

import numpy as np
import torch

from . import _native
from . import gaussian as _gaussian
from .torch_reference import diagonal_mask, init_parameters, pack

__all__ = ["gaussian_field", "GaussianField", "LearnableGaussianField"]

_F32, _F64 = torch.float32, torch.float64
_Tensor = torch.Tensor
_INF = math.inf


_NATIVE = {}  # CUDA ordinal -> _native.CudaGaussian
#: (ordinal, dtype, points.shape, gaussians.shape) -> _Plan; a key is only stored for shapes and
#: a dtype that passed the checks, so a hit validates them with one lookup.
_PLANS = {}
_MAX_PLANS = 4096

#: Backward workspaces up to this size (bytes) are allocated with the forward's, in one
#: allocation held from the forward to the backward: one allocation fewer per call where the
#: host's cost of an allocation matters (small problems), bounded memory where it does not.
FOLD_BYTES = 8 << 20

#: Opt-in (``PTXFLOW_TORCH_POOL=1`` in the environment at import): workspaces (the forward's with the folded backward's) kept for reuse on the stream they were
#: used on (``_WorkPool``, up to ``POOL_DEPTH`` per shape and stream), one allocation fewer per
#: call. Plans take pools while their worst case fits in ``POOL_BUDGET`` bytes (per process,
#: never given back).
POOL_DEPTH = 4
POOL_BUDGET = 256 << 20
_pool_budget = POOL_BUDGET
_POOL_ON = os.environ.get("PTXFLOW_TORCH_POOL", "0") == "1"

_getrefcount = sys.getrefcount

#: On unless ``PTXFLOW_TORCH_EARLY_GRADS=0`` at import: allocate the
#: gradients in the forward (the caller's thread) instead of the backward (the autograd engine's
#: device thread).
EARLY_GRADS = os.environ.get("PTXFLOW_TORCH_EARLY_GRADS", "1") != "0"


class _WorkPool:
    """Workspaces of one problem shape on one stream, reused once nothing refers to them.

    A workspace is referred to by the pool and by the ``ctx`` of the call that uses it, from its
    forward until autograd frees that ``ctx`` (after a backward without ``retain_graph``, or when
    the graph is dropped); while anything else holds it, it is busy. A free one is reused on the
    same stream only, so the next call's kernels are ordered after the last ones that touched it
    (PyTorch runs a node's backward on its forward's stream; a backward on another stream drops
    the workspace from the pool). Never used while the stream is being captured into a CUDA graph
    (the graph keeps its own allocations), and a workspace made during a capture never enters.
    """

    __slots__ = ("free", "length", "depth")

    def __init__(self, length, depth=POOL_DEPTH):
        self.free = []
        self.length = length
        self.depth = depth

    def take(self, like):
        """A workspace tensor of ``length`` scalars (of ``like``'s dtype and device): a free
        pooled one, else a new one, pooled when there is room."""
        free = self.free
        for _ in range(len(free)):
            try:
                w = free.pop()  # claimed: atomic under the GIL, invisible to other threads
            except IndexError:
                break
            # References: this local and getrefcount's argument; anything more is a ctx.
            busy = _getrefcount(w) > 2
            free.insert(0, w) if busy else free.append(w)
            if not busy:
                return w
        w = like.new_empty(self.length)
        if len(free) < self.depth:
            free.append(w)
        return w

    def drop(self, w):
        """Forgets ``w`` (used on another stream than the pool's)."""
        self.free[:] = [f for f in self.free if f is not w]


class _Plan:
    """One (device, dtype, shapes): the device's kernels, workspace lengths and pools."""

    __slots__ = ("native", "index", "n", "b", "dtype", "double", "fwd_len", "bwd_len", "bwd_off",
                 "fold", "pools", "pool_ok")

    def __init__(self, index, dtype, n, b):
        global _pool_budget
        self.native = _native_device(index)
        self.index = index
        double = dtype is _F64
        self.n, self.b, self.dtype, self.double = n, b, dtype, double
        self.fwd_len, self.bwd_len = self.native.plan(double, n, b)
        size = 8 if double else 4
        self.fold = b > 0 and self.bwd_len * size <= FOLD_BYTES
        self.bwd_off = self.fwd_len * size  # bytes from the workspace to the folded backward's
        self.pools = {}  # raw stream -> _WorkPool of fold workspaces
        bytes_ = (self.fwd_len + self.bwd_len) * size * POOL_DEPTH
        self.pool_ok = _POOL_ON and self.fold and bytes_ <= _pool_budget
        if self.pool_ok:
            _pool_budget -= bytes_


def _native_device(index):
    k = _NATIVE.get(index)
    if k is None:
        # Opening device `index` (context, module loads) makes its context current on this
        # thread, and PyTorch reads its current device from the current context: put the
        # caller's back (a first call on cuda:1 left cuda:1 current; multi_gpu_check.py).
        current = torch.cuda.current_device()
        try:
            k = _NATIVE[index] = _native.CudaGaussian(index)
        finally:
            if torch.cuda.current_device() != current:
                torch.cuda.set_device(current)
    return k


def _plan(index, dtype, ps, gs):
    """The plan of contiguous CUDA tensors ``points`` (shape ``ps``) and ``gaussians`` (``gs``)
    of one device and dtype, made once; None for shapes or a dtype the kernels do not take."""
    if not (dtype is _F32 or dtype is _F64) or len(ps) != 2 or ps[1] != 3 or len(gs) != 2 \
            or gs[1] != 10 or gs[0] < 1:
        return None
    if len(_PLANS) >= _MAX_PLANS:
        global _pool_budget
        _PLANS.clear()
        _pool_budget = POOL_BUDGET  # the old pools go with the calls that still hold them
    p = _PLANS[(index, dtype, ps, gs)] = _Plan(index, dtype, gs[0], ps[0])
    return p


try:  # the raw handle without building a torch.cuda.Stream object (~10x cheaper)
    _raw_stream = torch._C._cuda_getCurrentRawStream
    _capturing = torch._C._cuda_isCurrentStreamCapturing
except AttributeError:  # pragma: no cover - older PyTorch or a build without CUDA
    def _raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream

    def _capturing():
        return torch.cuda.is_current_stream_capturing()

_grad_enabled = torch._C.is_grad_enabled


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


def _forward_cuda(ctx, plan, index, points, normalised, diag_eps, pp, gp):
    """Prepare + forward on device ``index`` and its current stream; the arguments are checked
    (contiguous, 16-byte aligned at ``pp`` and ``gp``, one device, ``plan``'s shapes and dtype)."""
    stream = _raw_stream(index)
    need = ctx.needs_input_grad
    b = plan.b
    if plan.fold and (need[0] or need[1]):
        # Workspace [forward's | backward's]; pooled per stream unless the stream is capturing.
        if plan.pool_ok and not _capturing():
            pool = plan.pools.get(stream)
            if pool is None:
                pool = plan.pools[stream] = _WorkPool(plan.fwd_len + plan.bwd_len)
            work = pool.take(points)
        else:
            pool, work = None, points.new_empty(plan.fwd_len + plan.bwd_len)
        wp = work.data_ptr()
        bwp = wp + plan.bwd_off
    else:
        pool, work = None, points.new_empty(plan.fwd_len)
        wp, bwp = work.data_ptr(), None
    values = points.new_empty(b)
    plan.native.forward(plan.double, stream, plan.n, b, normalised, diag_eps, gp, pp, wp,
                        values.data_ptr())
    ctx.save_for_backward(points)
    ctx.pf = (plan, work, wp, bwp, normalised, stream, pool, pp)
    # The gradients' memory, made here (the calling thread) rather than in the backward (the
    # autograd engine's device thread) when EARLY_GRADS; a second backward makes its own.
    ctx.grads = (points.new_empty(b, 3) if need[0] else None,
                 points.new_empty(plan.n, 10) if need[1] else None) if EARLY_GRADS and b else None
    return values


def _backward_cuda(ctx, grad_out):
    plan, work, wp, bwp, normalised, stream, pool, pp = ctx.pf
    points, = ctx.saved_tensors  # (autograd's check that nothing changed it in place)
    go = grad_out.data_ptr()
    if not (grad_out.dtype is plan.dtype and grad_out.is_contiguous() and not go & 15):
        grad_out = _aligned(grad_out.to(plan.dtype))
        go = grad_out.data_ptr()
    need = ctx.needs_input_grad
    b, n = plan.b, plan.n
    if b == 0:
        return (points.new_empty(0, 3) if need[0] else None,
                points.new_zeros(n, 10) if need[1] else None, None, None)
    # Only the gradients autograd wants: without the points' the reduction is not launched.
    grads = ctx.grads
    if grads is not None:
        ctx.grads = None  # handed out once: a retained graph's next backward makes new ones
        grad_points, grad_gaussians = grads
    else:
        grad_points = points.new_empty(b, 3) if need[0] else None
        grad_gaussians = points.new_empty(n, 10) if need[1] else None
    if bwp is None:
        bwork = points.new_empty(plan.bwd_len)
        bwp = bwork.data_ptr()
    now = _raw_stream(plan.index)
    if pool is not None and (now != stream or _capturing()):
        pool.drop(work)  # used on another stream or by a graph: never reused
    plan.native.backward(plan.double, now, n, b, normalised, wp, pp, go, bwp,
                         None if grad_points is None else grad_points.data_ptr(),
                         None if grad_gaussians is None else grad_gaussians.data_ptr())
    return grad_points, grad_gaussians, None, None


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
        # tensors of one device and dtype, a float eps; the shapes and the dtype by the plan
        # lookup (a key exists only for shapes and a dtype that passed the checks once).
        if (isinstance(points, _Tensor) and isinstance(gaussians, _Tensor)
                and points.is_cuda and gaussians.is_cuda
                and type(diag_eps) is float and 0.0 <= diag_eps < _INF):
            index, dtype = points.get_device(), points.dtype
            if (gaussians.get_device() == index and gaussians.dtype is dtype
                    and points.is_contiguous() and gaussians.is_contiguous()):
                ps, gs = points.shape, gaussians.shape
                plan = _PLANS.get((index, dtype, ps, gs)) or _plan(index, dtype, ps, gs)
                pp, gp = points.data_ptr(), gaussians.data_ptr()
                if plan is not None and not (pp | gp) & 15:
                    return _forward_cuda(ctx, plan, index, points, bool(normalised), diag_eps,
                                         pp, gp)
        # Everything else: a clear error, or a contiguous aligned copy, or the CPU path.
        _check(points, gaussians)
        normalised, diag_eps = bool(normalised), _diag_eps(diag_eps)
        if points.device.type == "cuda":
            points, gaussians = _aligned(points.detach()), _aligned(gaussians.detach())
            index, dtype = points.get_device(), points.dtype
            plan = _plan(index, dtype, points.shape, gaussians.shape)
            return _forward_cuda(ctx, plan, index, points, normalised, diag_eps,
                                 points.data_ptr(), gaussians.data_ptr())
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
        if _grad_enabled():
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

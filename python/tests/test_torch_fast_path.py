"""ptxflow.torch's CUDA fast path (checks, plan lookup, workspace pool, ctx bookkeeping) run on CPU
tensors that claim to be on device 0, with a stand-in for the native kernels that keeps its
"prepared" Gaussians in the workspace, as the real ones do: a workspace handed to a second call
while the first still needs it gives the first call's backward the second call's Gaussians, so
the gradients show it. The kernels themselves are python/gpu/gpu_check.py's business."""
import ctypes

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pt = pytest.importorskip("ptxflow.torch")
import ptxflow  # noqa: E402


def arr(ptr, n, double):
    c = ctypes.c_double if double else ctypes.c_float
    return np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(c)), shape=(n,))


class FakeNative:
    """`CudaGaussian`'s interface on host memory: the forward "prepares" by copying the
    Gaussians and eps into the workspace; the backward reads them back from there."""

    def __init__(self):
        self.calls = []

    def plan(self, double, n, b):
        return n * 10 + 4, 3 * b + 10 * n

    def forward(self, double, stream, n, b, normalised, eps, gp, pp, wp, vp):
        self.calls.append(("forward", stream, wp))
        g = arr(gp, n * 10, double).reshape(n, 10).copy()
        p = arr(pp, b * 3, double).reshape(b, 3).copy()
        w = arr(wp, n * 10 + 1, double)
        w[: n * 10] = g.ravel()
        w[n * 10] = eps
        arr(vp, b, double)[:] = ptxflow.gaussian.forward(p, g, normalised, eps, device="cpu")

    def backward(self, double, stream, n, b, normalised, wp, pp, gop, bwp, gpp, ggp):
        self.calls.append(("backward", stream, wp))
        w = arr(wp, n * 10 + 1, double)
        g, eps = w[: n * 10].reshape(n, 10).copy(), float(w[n * 10])
        p = arr(pp, b * 3, double).reshape(b, 3).copy()
        go = arr(gop, b, double).copy()
        dp, dg = ptxflow.gaussian.backward(p, g, go, normalised, eps, device="cpu")
        arr(bwp, 3 * b + 10 * n, double)[:] = 0.0  # the backward workspace is written too
        if gpp is not None:
            arr(gpp, 3 * b, double)[:] = dp.ravel()
        if ggp is not None:
            arr(ggp, 10 * n, double)[:] = dg.ravel()


@pytest.fixture
def fake(monkeypatch):
    native = FakeNative()
    stream = [7]
    monkeypatch.setattr(torch.Tensor, "get_device", lambda self: 0)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(pt, "_POOL_ON", True)
    monkeypatch.setattr(pt, "_NATIVE", {0: native})
    monkeypatch.setattr(pt, "_PLANS", {})
    monkeypatch.setattr(pt, "_raw_stream", lambda index: stream[0])
    monkeypatch.setattr(pt, "_capturing", lambda: False)
    native.stream = stream
    return native


def problem(b, n, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    gauss = torch.zeros(n, 10, dtype=torch.float64)
    gauss[:, 0:3] = (torch.rand(n, 3, generator=g, dtype=torch.float64) - 0.5) * 3
    gauss[:, [3, 5, 8]] = 0.4 + 0.8 * torch.rand(n, 3, generator=g, dtype=torch.float64)
    gauss[:, [4, 6, 7]] = 0.3 * torch.randn(n, 3, generator=g, dtype=torch.float64)
    gauss[:, 9] = torch.randn(n, generator=g, dtype=torch.float64)
    pts = (torch.rand(b, 3, generator=g, dtype=torch.float64) - 0.5) * 4
    go = torch.randn(b, generator=g, dtype=torch.float64)
    return (pts.to(dtype).requires_grad_(), gauss.to(dtype).requires_grad_(), go.to(dtype))


def want(p, g, go, normalised=False, eps=1e-6):
    pn, gn = p.detach().numpy(), g.detach().numpy()
    f = ptxflow.gaussian.forward(pn, gn, normalised, eps, device="cpu")
    dp, dg = ptxflow.gaussian.backward(pn, gn, go.numpy(), normalised, eps, device="cpu")
    return [torch.from_numpy(a) for a in (f, dp, dg)]


def same(got, ref):
    return all(torch.equal(a.detach(), b) for a, b in zip(got, ref))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fast_path_results(fake, dtype):
    """The fast path as shipped and with the workspace pool (PTXFLOW_TORCH_POOL=1)."""
    p, g, go = problem(40, 30, dtype, 1)
    f = pt.gaussian_field(p, g, True, 1e-3)
    got = (f,) + torch.autograd.grad(f, (p, g), go)
    assert same(got, want(p, g, go, True, 1e-3))
    assert [c[0] for c in fake.calls] == ["forward", "backward"]
    (plan,) = pt._PLANS.values()
    assert plan.fold and plan.pool_ok and len(plan.pools[7].free) == 1
    plan.pool_ok = False  # as shipped: no pool
    f = pt.gaussian_field(p, g, True, 1e-3)
    got = (f,) + torch.autograd.grad(f, (p, g), go)
    assert same(got, want(p, g, go, True, 1e-3)) and len(plan.pools[7].free) == 1


def test_pool_reuse_never_hands_out_a_busy_workspace(fake):
    probs = [problem(50, 20, torch.float32, 10 + i) for i in range(4)]
    refs = [want(*q) for q in probs]
    for i in range(8):  # back to back: the workspace is reused
        p, g, go = probs[i % 4]
        f = pt.gaussian_field(p, g)
        assert same((f,) + torch.autograd.grad(f, (p, g), go), refs[i % 4])
    used = {c[2] for c in fake.calls}
    # `f` of the previous step is alive (with its graph) while the next forward runs: two
    assert len(used) == 2, "back-to-back calls reuse the workspaces"
    # two graphs alive, differentiated in reverse order
    f0, f1 = pt.gaussian_field(*probs[0][:2]), pt.gaussian_field(*probs[1][:2])
    assert same((f1,) + torch.autograd.grad(f1, probs[1][:2], probs[1][2]), refs[1])
    assert same((f0,) + torch.autograd.grad(f0, probs[0][:2], probs[0][2]), refs[0])
    # a retained graph differentiated again after other calls of the same shapes
    p2, g2, go2 = probs[2]
    f2 = pt.gaussian_field(p2, g2)
    torch.autograd.grad(f2, (p2, g2), go2, retain_graph=True)
    for i in range(5):
        p, g, go = probs[i % 2]
        torch.autograd.grad(pt.gaussian_field(p, g), (p, g), go)
    assert same((f2,) + torch.autograd.grad(f2, (p2, g2), go2), refs[2])
    # a forward whose graph is kept (a loss held until the next step) while the next runs
    kept = pt.gaussian_field(*probs[3][:2])
    for i in range(3):
        p, g, go = probs[i]
        f = pt.gaussian_field(p, g)
        assert same((f,) + torch.autograd.grad(f, (p, g), go), refs[i])
    assert same((kept,) + torch.autograd.grad(kept, probs[3][:2], probs[3][2]), refs[3])
    (plan,) = pt._PLANS.values()
    assert len(plan.pools[7].free) <= pt.POOL_DEPTH


def test_backward_on_another_stream_drops_the_workspace(fake):
    p, g, go = problem(30, 10, torch.float32, 3)
    f = pt.gaussian_field(p, g)
    (plan,) = pt._PLANS.values()
    (pool,) = plan.pools.values()
    assert len(pool.free) == 1
    fake.stream[0] = 8
    assert same((f,) + torch.autograd.grad(f, (p, g), go), want(p, g, go))
    assert len(pool.free) == 0 and fake.calls[-1][1] == 8


def test_pool_off_and_capture(fake, monkeypatch):
    p, g, go = problem(30, 10, torch.float64, 4)
    monkeypatch.setattr(pt, "_capturing", lambda: True)
    f = pt.gaussian_field(p, g)
    assert same((f,) + torch.autograd.grad(f, (p, g), go), want(p, g, go))
    (plan,) = pt._PLANS.values()
    assert not plan.pools, "no pool while capturing"
    monkeypatch.setattr(pt, "_capturing", lambda: False)
    plan.pool_ok = False
    f = pt.gaussian_field(p, g)
    assert same((f,) + torch.autograd.grad(f, (p, g), go), want(p, g, go))
    assert not plan.pools


def test_fast_path_hands_odd_inputs_to_the_checked_path(fake):
    p, g, go = problem(20, 12, torch.float32, 5)
    with pytest.raises(ValueError):
        pt.gaussian_field(p[:, :2], g)
    with pytest.raises(ValueError):
        pt.gaussian_field(p, g[:0])
    with pytest.raises(TypeError):
        pt.gaussian_field(p, g.double())
    assert not pt._PLANS, "no plan for shapes or dtypes the kernels do not take"
    # strided points and an int eps: copied / converted, then the same kernels
    ps = p.detach().t().contiguous().t().requires_grad_()
    assert not ps.is_contiguous()
    f = pt.gaussian_field(ps, g, False, 0)
    assert same((f,) + torch.autograd.grad(f, (ps, g), go), want(p, g, go, False, 0.0))
    # only one gradient wanted
    f = pt.gaussian_field(p.detach(), g)
    (dg,) = torch.autograd.grad(f, g, go)
    assert torch.equal(dg, want(p, g, go)[2])


def test_early_gradients(fake, monkeypatch):
    """EARLY_GRADS: the forward allocates the gradients; a retained graph's second backward
    makes new ones (the first ones belong to the caller by then)."""
    monkeypatch.setattr(pt, "EARLY_GRADS", True)
    p, g, go = problem(30, 12, torch.float32, 6)
    ref = want(p, g, go)
    f = pt.gaussian_field(p, g)
    first = torch.autograd.grad(f, (p, g), go, retain_graph=True)
    keep = [t.clone() for t in first]
    second = torch.autograd.grad(f, (p, g), go * 2)
    assert same((f,) + first, ref) and all(torch.equal(a, b) for a, b in zip(first, keep))
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(first, second))
    assert torch.equal(second[1], 2 * ref[2])
    # one gradient wanted: only that one is made
    f = pt.gaussian_field(p.detach(), g)
    (dg,) = torch.autograd.grad(f, g, go)
    assert torch.equal(dg, ref[2])


def test_only_cuda_tensors_take_the_fast_path(monkeypatch):
    """A tensor of another device type can report an index (``get_device()`` of an XPU or MPS
    tensor is 0): only ``is_cuda`` tensors may reach the CUDA kernels."""
    native = FakeNative()
    monkeypatch.setattr(torch.Tensor, "get_device", lambda self: 0)
    monkeypatch.setattr(pt, "_NATIVE", {0: native})
    monkeypatch.setattr(pt, "_PLANS", {})
    p, g, go = problem(20, 12, torch.float64, 7)
    f = pt.gaussian_field(p, g)
    assert same((f,) + torch.autograd.grad(f, (p, g), go), want(p, g, go))
    assert not native.calls and not pt._PLANS

"""ptxflow.torch on CPU tensors (skipped without PyTorch; the CUDA path is python/gpu/gpu_check.py)."""
import pytest

torch = pytest.importorskip("torch")
pt = pytest.importorskip("ptxflow.torch")
from ptxflow import torch_reference as ref  # noqa: E402


def problem(b, n, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    gauss = torch.zeros(n, 10, dtype=torch.float64)
    gauss[:, 0:3] = (torch.rand(n, 3, generator=g, dtype=torch.float64) - 0.5) * 3
    gauss[:, [3, 5, 8]] = 0.4 + 0.8 * torch.rand(n, 3, generator=g, dtype=torch.float64)
    gauss[:, [4, 6, 7]] = 0.3 * torch.randn(n, 3, generator=g, dtype=torch.float64)
    gauss[:, 9] = torch.randn(n, generator=g, dtype=torch.float64)
    pts = (torch.rand(b, 3, generator=g, dtype=torch.float64) - 0.5) * 4
    return pts.to(dtype), gauss.to(dtype)


@pytest.mark.parametrize("normalised", [False, True])
def test_gradcheck_cpu(normalised):
    p, g = problem(9, 7, torch.float64)
    p.requires_grad_()
    g.requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: pt.gaussian_field(a, b, normalised), (p, g),
                                    eps=1e-6, atol=1e-7, rtol=1e-5)


def test_matches_reference_f32():
    p, g = problem(200, 100, torch.float32, seed=1)
    p.requires_grad_()
    g.requires_grad_()
    go = torch.randn(200, generator=torch.Generator().manual_seed(2))
    f = pt.gaussian_field(p, g)
    dp, dg = torch.autograd.grad(f, (p, g), go)
    p64, g64 = p.detach().double().requires_grad_(), g.detach().double().requires_grad_()
    fr = ref.field(p64, g64)
    rp, rg = torch.autograd.grad(fr, (p64, g64), go.double())
    for a, b in ((f, fr), (dp, rp), (dg, rg)):
        assert float((a.detach().double() - b).abs().max() / b.abs().max()) < 1e-5


def test_module_matches_reference_module():
    gen = torch.Generator().manual_seed(3)
    a = pt.LearnableGaussianField(32, 4.0, use_full_cov=False, device="cpu", generator=gen)
    r = ref.ReferenceGaussianField(32, 4.0, use_full_cov=False, device="cpu")
    r.load_state_dict(a.state_dict())
    x = (torch.rand(64, 3, generator=gen) - 0.5) * 4
    assert a(x).shape == (64,)
    torch.testing.assert_close(a(x), r(x), rtol=1e-5, atol=1e-6)
    a(x).sum().backward()
    assert a.chol.grad[:, [1, 3, 4]].abs().max() == 0  # diagonal covariances: off-diagonals unused


def test_bad_inputs():
    p, g = problem(5, 4, torch.float32)
    with pytest.raises(TypeError):
        pt.gaussian_field(p, g.double())
    with pytest.raises(TypeError):
        pt.gaussian_field(p.numpy(), g)
    with pytest.raises(ValueError):
        pt.gaussian_field(p[:, :2], g)
    with pytest.raises(ValueError):
        pt.gaussian_field(p, g[:0])
    bad = g.clone()
    bad[0, 3] = -1.0
    with pytest.raises(ValueError, match="Cholesky diagonal"):
        pt.gaussian_field(p, bad)


def test_direct_apply(monkeypatch):
    """Where ``Function.apply`` has a Python layer (PyTorch before it moved to C++, as on the
    GPU machine), ``gaussian_field`` calls the C++ ``apply`` directly: same values and gradients,
    same errors. Simulated here by giving ``Function.apply`` a Python layer."""
    c_apply = torch._C._FunctionBase.__dict__["apply"]

    def layered(cls, *args, **kwargs):
        return c_apply.__get__(None, cls)(*args, **kwargs)
    monkeypatch.setattr(torch.autograd.Function, "apply", classmethod(layered))
    direct = pt._direct_apply()
    assert direct is not None
    p, g = problem(9, 7, torch.float64)
    p.requires_grad_()
    g.requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: direct(a, b, False, 1e-6), (p, g),
                                    eps=1e-6, atol=1e-7, rtol=1e-5)
    torch.testing.assert_close(direct(p, g, True, 1e-6), pt.GaussianField.apply(p, g, True, 1e-6))
    with pytest.raises(TypeError):
        direct(p.detach().numpy(), g, False, 1e-6)
    with pytest.raises(ValueError):
        direct(p, g, False, -1.0)


def test_work_pool_reuses_only_unreferenced_workspaces():
    """The CUDA path's workspace pool (exercised here on CPU tensors): a workspace is handed out
    again only once nothing but the pool refers to it (the call that used it is gone)."""
    like = torch.zeros(1)
    pool = pt._WorkPool(8, depth=2)
    a = pool.take(like)
    assert a.shape == (8,) and a.dtype == like.dtype
    b = pool.take(like)  # `a` is held (a call's ctx): a second one
    assert b is not a
    c = pool.take(like)  # both held: a third, not pooled (depth 2)
    assert c is not a and c is not b and len(pool.free) == 2
    a_id = id(a)
    del a
    d = pool.take(like)  # `a` is free again: reused
    assert id(d) == a_id
    del c
    e = pool.take(like)  # `c` was never pooled; `b` and `d` are held: a new one
    assert e is not b and e is not d and len(pool.free) == 2
    pool.drop(b)
    assert len(pool.free) == 1
    pool.drop(b)  # dropping twice is harmless
    del b, d, e
    f = pool.take(like)
    g = pool.take(like)
    assert f is not g

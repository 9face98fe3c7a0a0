"""ptxflow.gaussian on the CPU against a numpy float64 reference and finite differences."""
import numpy as np
import pytest

import ptxflow
from ptxflow import gaussian

UNIT = (2 * np.pi) ** -1.5


def problem(n=37, b=53, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    g = np.zeros((n, 10))
    g[:, 0:3] = rng.uniform(-1.5, 1.5, (n, 3))
    g[:, [3, 5, 8]] = rng.uniform(0.4, 1.2, (n, 3))
    g[:, [4, 6, 7]] = rng.normal(0, 0.3, (n, 3))
    g[:, 9] = rng.normal(0, 1, n)
    p = rng.uniform(-2, 2, (b, 3))
    go = rng.normal(0, 1, b)
    return p.astype(dtype), g.astype(dtype), go.astype(dtype)


def parts(g, eps):
    mu = g[:, 0:3]
    l10, l20, l21 = g[:, 4], g[:, 6], g[:, 7]
    a = g[:, [3, 5, 8]] + eps
    return mu, l10, l20, l21, a


def ref_forward(p, g, normalised=False, eps=1e-6):
    p, g = p.astype(np.float64), g.astype(np.float64)
    mu, l10, l20, l21, a = parts(g, eps)
    r = p[:, None, :] - mu[None]
    v0 = r[..., 0] / a[:, 0]
    v1 = (r[..., 1] - l10 * v0) / a[:, 1]
    v2 = (r[..., 2] - l20 * v0 - l21 * v1) / a[:, 2]
    e = np.exp(-0.5 * (v0 ** 2 + v1 ** 2 + v2 ** 2))
    c = UNIT / a.prod(1) if normalised else np.ones(len(g))
    return e @ (g[:, 9] * c)


def ref_backward(p, g, go, normalised=False, eps=1e-6):
    """The module docs' backward formulas, in float64."""
    p, g, go = p.astype(np.float64), g.astype(np.float64), go.astype(np.float64)
    mu, l10, l20, l21, a = parts(g, eps)
    w = g[:, 9]
    r = p[:, None, :] - mu[None]
    v0 = r[..., 0] / a[:, 0]
    v1 = (r[..., 1] - l10 * v0) / a[:, 1]
    v2 = (r[..., 2] - l20 * v0 - l21 * v1) / a[:, 2]
    s2 = v2 / a[:, 2]
    s1 = (v1 - l21 * s2) / a[:, 1]
    s0 = (v0 - l10 * s1 - l20 * s2) / a[:, 0]
    e = np.exp(-0.5 * (v0 ** 2 + v1 ** 2 + v2 ** 2))
    c = UNIT / a.prod(1) if normalised else np.ones(len(g))
    h = go[:, None] * c * e
    q = -w * h
    s = np.stack([s0, s1, s2], -1)
    v = np.stack([v0, v1, v2], -1)
    gp = (q[..., None] * s).sum(1)
    gg = np.zeros_like(g)
    gg[:, 9] = h.sum(0)
    gg[:, 0:3] = -(q[..., None] * s).sum(0)
    qs = q[..., None] * s
    for slot, (ra, cb) in zip(range(3, 9), [(0, 0), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2)]):
        gg[:, slot] = -(qs[..., ra] * v[..., cb]).sum(0)
    if normalised:
        for slot, k in ((3, 0), (5, 1), (8, 2)):
            gg[:, slot] -= w * gg[:, 9] / a[:, k]
    return gp, gg


def rel(x, y):
    return np.abs(x - y).max() / np.abs(y).max()


@pytest.mark.parametrize("normalised", [False, True])
@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-12), (np.float32, 2e-5)])
def test_forward_backward_match_numpy_reference(normalised, dtype, tol):
    p, g, go = problem(dtype=dtype)
    f = gaussian.forward(p, g, normalised=normalised, device="cpu")
    assert f.dtype == dtype and f.shape == (53,)
    assert rel(f, ref_forward(p, g, normalised)) < tol
    gp, gg = gaussian.backward(p, g, go, normalised=normalised, device="cpu")
    assert gp.dtype == dtype and gp.shape == (53, 3) and gg.shape == (37, 10)
    rp, rg = ref_backward(p, g, go, normalised)
    assert rel(gp, rp) < tol
    assert rel(gg, rg) < tol


@pytest.mark.parametrize("normalised", [False, True])
def test_backward_matches_finite_differences(normalised):
    p, g, go = problem(n=6, b=9, seed=1)
    gp, gg = gaussian.backward(p, g, go, normalised=normalised, device="cpu")
    loss = lambda p_, g_: float(go @ gaussian.forward(p_, g_, normalised=normalised, device="cpu"))  # noqa: E731
    h = 1e-6
    for arr, grad in ((p, gp), (g, gg)):
        fd = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            up, dn = arr.copy(), arr.copy()
            up[idx] += h
            dn[idx] -= h
            args_up = (up, g) if arr is p else (p, up)
            args_dn = (dn, g) if arr is p else (p, dn)
            fd[idx] = (loss(*args_up) - loss(*args_dn)) / (2 * h)
        assert rel(grad, fd) < 1e-6


def test_defaults_are_field_options_defaults():
    p, g, _ = problem()
    assert np.array_equal(gaussian.forward(p, g), gaussian.forward(p, g, False, 1e-6, "auto"))
    assert not np.array_equal(gaussian.forward(p, g, diag_eps=0.1, device="cpu"),
                              gaussian.forward(p, g, device="cpu"))


def test_empty_points_give_empty_values():
    _, g, _ = problem()
    f = gaussian.forward(np.zeros((0, 3)), g, device="cpu")
    assert f.shape == (0,)


def test_bad_inputs_raise_clear_errors():
    p, g, go = problem()
    with pytest.raises(TypeError, match="numpy.ndarray"):
        gaussian.forward(p.tolist(), g)
    with pytest.raises(TypeError, match="dtype"):
        gaussian.forward(p.astype(np.int64), g)
    with pytest.raises(TypeError, match="share one dtype"):
        gaussian.forward(p.astype(np.float32), g)
    with pytest.raises(ValueError, match="shape"):
        gaussian.forward(p[:, :2].copy(), g)
    with pytest.raises(ValueError, match="shape"):
        gaussian.forward(p, g[:, :9].copy())
    with pytest.raises(ValueError, match="C-contiguous"):
        gaussian.forward(np.asfortranarray(p), g)
    with pytest.raises(ValueError, match="C-contiguous"):
        gaussian.forward(p[::2], g)
    bad = g.copy()
    bad[3, 5] = -1.0
    with pytest.raises(ValueError, match="Cholesky diagonal L11 must be > 0"):
        gaussian.forward(p, bad, device="cpu")
    bad = g.copy()
    bad[1, 0] = np.nan
    with pytest.raises(ValueError, match="Gaussian 1: mu_x is not finite"):
        gaussian.forward(p, bad, device="cpu")
    with pytest.raises(ValueError, match="non-zero multiple of 10"):
        gaussian.forward(p, g[:0], device="cpu")
    with pytest.raises(ValueError, match="grad_out must have shape"):
        gaussian.backward(p, g, go[:-1])
    with pytest.raises(ValueError, match="diag_eps"):
        gaussian.forward(p, g, diag_eps=-1.0, device="cpu")
    with pytest.raises(ValueError, match="device"):
        gaussian.forward(p, g, device="tpu")


def test_gpu_without_a_device_is_a_ptxflow_error():
    ok, why = ptxflow.gpu_available()
    if ok:
        pytest.skip("a GPU is present")
    p, g, _ = problem()
    with pytest.raises(ptxflow.PtxflowError, match="no CUDA device"):
        gaussian.forward(p, g, device="gpu")
    # auto falls back to the CPU
    assert np.array_equal(gaussian.forward(p, g, device="auto"), gaussian.forward(p, g, device="cpu"))

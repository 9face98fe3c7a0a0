"""Host cost of one forward+backward through ptxflow.torch at N x B = 1000 x 500 (f32, CUDA), stage
by stage, next to PyTorch's own floor (diagnostic; run on the GPU machine).

python overhead.py [--iters=N]

Prints, in one process and before any profiler runs (a CUPTI session can leave the driver slower):
- floors: what PyTorch costs on this host without ptxflow: an empty autograd.Function round trip
  (forward returns a fresh (B,) tensor, backward two fresh gradients) through ``Function.apply``
  and, where PyTorch's ``apply`` has a Python layer, through the C++ ``apply`` that ptxflow uses;
  a plain op chain of the same shape; the same empty Function on CPU tensors (no hand-over to
  the autograd engine's CUDA device thread); single calls (torch.empty, perf_counter_ns);
- the op: wall per call back to back (the issue's figure), forward alone, the native entry
  points alone (with and without launches: ``PTXFLOW_PY_NO_LAUNCH=1`` at construction), and the
  whole op with launches off;
- a stage-by-stage breakdown (median ns per stage over many calls) of an instrumented copy of
  ``GaussianField`` that does exactly what ``ptxflow/torch.py`` does on its fast path;
- last, the kernels' device time (torch.profiler, CUPTI) and the overhead as the issue defines it:
  wall - device time; then the empty-Function floor measured again after the profiler.
"""
import gc
import os
import statistics
import sys
import time

import torch

import ptxflow.torch as pt
from ptxflow import _native

ns = time.perf_counter_ns
N, B = 1000, 500
ITERS = 400
for _a in sys.argv[1:]:
    if _a.startswith("--iters="):
        ITERS = int(_a.split("=", 1)[1])


def per_call(fn, iters=None, reps=3):
    """(host us/call, wall us/call) of `iters` back-to-back calls, best of `reps`; host: until the
    last call returned, wall: until the device finished too."""
    iters = iters or ITERS
    for _ in range(30):
        fn()
    torch.cuda.synchronize()
    best = None
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        host = time.perf_counter() - t0
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        r = (host / iters * 1e6, wall / iters * 1e6)
        if best is None or r[1] < best[1]:
            best = r
    return best


def row(name, fn, iters=None):
    host, wall = per_call(fn, iters)
    print(f"  {name:64s} host {host:8.2f} us  wall {wall:8.2f} us", flush=True)
    return wall


def problem():
    g, p, go = _native.gaussian_problem(N, B)
    f = lambda a: torch.from_numpy(a).to(device="cuda", dtype=torch.float32)  # noqa: E731
    return f(p).requires_grad_(), f(g).requires_grad_(), f(go)


class NullEmpty(torch.autograd.Function):
    """No work: fresh outputs with torch.empty(..., device=) (as last session's floor)."""

    @staticmethod
    def forward(ctx, a, b):
        return torch.empty(a.shape[0], device=a.device)

    @staticmethod
    def backward(ctx, g):
        return torch.empty(B, 3, device=g.device), torch.empty(N, 10, device=g.device)


class NullNew(torch.autograd.Function):
    """No work: fresh outputs with new_empty (what the op allocates with)."""

    @staticmethod
    def forward(ctx, a, b):
        return a.new_empty(a.shape[0])

    @staticmethod
    def backward(ctx, g):
        return g.new_empty((B, 3)), g.new_empty((N, 10))


def c_apply(cls):
    c = torch._C._FunctionBase.__dict__.get("apply")
    if c is None or torch.autograd.Function.__dict__.get("apply") is c:
        return None
    return c.__get__(None, cls)


def floors(p, g, go):
    print("== floors: PyTorch alone on this host (no ptxflow)", flush=True)
    fa = torch.autograd.Function.__dict__.get("apply")
    print(f"  torch.autograd.Function.apply is {'C++' if fa is torch._C._FunctionBase.__dict__.get('apply') else 'Python (' + type(fa).__name__ + ')'}; "
          f"ptxflow.torch uses {'the C++ apply directly' if pt._apply is not pt.GaussianField.apply else 'GaussianField.apply'}")
    out = {}
    row("python loop, nothing", lambda: None)
    row("perf_counter_ns()", ns)
    row("torch.empty(500, device=cuda)", lambda: torch.empty(B, device=p.device))
    row("p.new_empty(500)", lambda: p.new_empty(B))
    row("torch._C._cuda_getCurrentRawStream(0)", lambda: pt._raw_stream(0))
    grad = torch.autograd.grad

    def plain():
        y = p.sum(1) + g.sum()
        grad(y, (p, g), go)
    out["plain"] = row("plain op chain y = p.sum(1) + g.sum(), fwd+bwd (3 kernels)", plain)
    pd, gd = p.detach(), g.detach()
    row("plain op chain forward only (no grad)", lambda: pd.sum(1) + gd.sum())
    out["null"] = row("empty Function (torch.empty outputs) via Function.apply, fwd+bwd",
                      lambda: grad(NullEmpty.apply(p, g), (p, g), go))
    out["null_new"] = row("empty Function (new_empty outputs) via Function.apply, fwd+bwd",
                          lambda: grad(NullNew.apply(p, g), (p, g), go))
    ca = c_apply(NullNew)
    if ca is not None:
        out["null_c"] = row("empty Function (new_empty outputs) via C++ apply, fwd+bwd",
                            lambda: grad(ca(p, g), (p, g), go))
        row("empty Function via C++ apply, forward only (inputs need no grad)",
            lambda: ca(pd, gd))
    row("empty Function via Function.apply, forward only (inputs need no grad)",
        lambda: NullNew.apply(pd, gd))
    y = NullNew.apply(p, g)
    row("autograd.grad on a retained empty-Function graph (backward only)",
        lambda: grad(y, (p, g), go, retain_graph=True))
    pc, gc_, goc = (t.detach().cpu().requires_grad_(t.requires_grad) for t in (p, g, go))

    class NullCpu(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a.new_empty(a.shape[0])

        @staticmethod
        def backward(ctx, g_):
            return g_.new_empty((B, 3)), g_.new_empty((N, 10))
    out["null_cpu"] = row("empty Function on CPU tensors (no CUDA device thread), fwd+bwd",
                          lambda: grad(NullCpu.apply(pc, gc_), (pc, gc_), goc))
    return out


class Probe(torch.autograd.Function):
    """ptxflow/torch.py's fast path, with a time stamp between stages (keep in step with it)."""

    stamps = []

    @staticmethod
    def forward(ctx, points, gaussians, normalised=False, diag_eps=1e-6):
        st = Probe.stamps
        st.append(ns())  # 1 forward entered
        _T = torch.Tensor
        ok = (isinstance(points, _T) and isinstance(gaussians, _T)
              and points.is_cuda and gaussians.is_cuda and type(diag_eps) is float
              and 0.0 <= diag_eps < pt._INF)
        dtype, ps, gs = points.dtype, points.shape, gaussians.shape
        index = points.get_device()
        ok = ok and (gaussians.dtype is dtype and (dtype is pt._F32 or dtype is pt._F64)
                     and len(ps) == 2 and ps[1] == 3 and len(gs) == 2 and gs[1] == 10 and gs[0]
                     and gaussians.get_device() == index
                     and points.is_contiguous() and gaussians.is_contiguous())
        pp, gp = points.data_ptr(), gaussians.data_ptr()
        assert ok and not (pp | gp) & 15
        normalised, double, b, n = bool(normalised), dtype is pt._F64, ps[0], gs[0]
        st.append(ns())  # 2 checks
        native, fwd_len, bwd_len, fold = pt._PLANS.get((index, double, n, b)) or pt._plan((index, double, n, b))
        need = ctx.needs_input_grad
        fold = fold and b > 0 and (need[0] or need[1])
        st.append(ns())  # 3 plan lookup
        work = points.new_empty(fwd_len + bwd_len if fold else fwd_len)
        values = points.new_empty(b)
        st.append(ns())  # 4 two new_empty
        wp = work.data_ptr()
        stream = pt._raw_stream(index)
        vp = values.data_ptr()
        st.append(ns())  # 5 stream + data_ptrs
        native.forward(double, stream, n, b, normalised, diag_eps, gp, pp, wp, vp)
        st.append(ns())  # 6 native forward (prepare + forward launches)
        ctx.save_for_backward(points)
        bwp = wp + fwd_len * (8 if double else 4) if fold else None
        ctx.pf = (native, index, work, wp, bwp, n, b, normalised, double, bwd_len)
        st.append(ns())  # 7 save
        return values

    @staticmethod
    def backward(ctx, grad_out):
        st = Probe.stamps
        st.append(ns())  # 9 backward entered
        if torch.is_grad_enabled():
            raise RuntimeError("probe: fast path only")
        native, index, work, wp, bwp, n, b, normalised, double, bwd_len = ctx.pf
        points, = ctx.saved_tensors
        st.append(ns())  # 10 saved tensors
        go = grad_out.data_ptr()
        if not (grad_out.dtype is points.dtype and grad_out.is_contiguous() and not go & 15):
            raise RuntimeError("probe: fast path only")
        need = ctx.needs_input_grad
        st.append(ns())  # 11 grad_out check
        grad_points = points.new_empty((b, 3)) if need[0] else None
        grad_gaussians = points.new_empty((n, 10)) if need[1] else None
        if bwp is None:
            bwork = points.new_empty(bwd_len)
            bwp = bwork.data_ptr()
        st.append(ns())  # 12 new_empty (grads, workspace unless folded)
        stream = pt._raw_stream(index)
        ptrs = (wp, points.data_ptr(), go, bwp,
                None if grad_points is None else grad_points.data_ptr(),
                None if grad_gaussians is None else grad_gaussians.data_ptr())
        st.append(ns())  # 13 stream + data_ptrs
        native.backward(double, stream, n, b, normalised, *ptrs)
        st.append(ns())  # 14 native backward (3 launches)
        r = (grad_points, grad_gaussians, None, None)
        st.append(ns())  # 15 return tuple
        return r


STAGES = [
    "call -> forward entered (apply: ctx, inputs)",
    "fast checks (types, device, dtype, shapes, contiguity, alignment)",
    "plan lookup (one dict) + needs_input_grad",
    "two new_empty (workspace [+ backward's], values)",
    "raw stream + 2 data_ptr()",
    "native forward (PyO3 + prepare & forward launches)",
    "save_for_backward + ctx.pf",
    "forward returned -> apply returned (outputs wrapped, node)",
    "autograd.grad called -> backward entered (engine, device thread)",
    "ctx.pf unpack + saved_tensors",
    "grad_out check + needs_input_grad",
    "new_empty: two gradients (+ workspace unless folded)",
    "raw stream + 4 data_ptr()",
    "native backward (PyO3 + 3 launches)",
    "result tuple",
    "backward returned -> autograd.grad returned (engine, hand-back)",
]


def breakdown(p, g, go, apply, label, iters=2000):
    st = Probe.stamps
    grad = torch.autograd.grad
    rows = []
    for i in range(iters + 100):
        st.clear()
        t0 = ns()
        f = apply(p, g, False, 1e-6)
        t8 = ns()
        st.append(t8)  # 8 apply returned
        st.append(ns())  # (grad call starts)
        grad(f, (p, g), go)
        t16 = ns()
        if i >= 100:
            s = [t0] + st[:8] + st[9:] + [t16]
            # s: t0, 1..7, 8, 9..15, 16 -> stage k = s[k+1] - s[k]
            rows.append([s[k + 1] - s[k] for k in range(len(s) - 1)])
    torch.cuda.synchronize()
    med = [statistics.median(c) / 1000 for c in zip(*rows)]
    total = statistics.median([sum(r) for r in rows]) / 1000
    print(f"== stage breakdown ({label}), median us per stage over {iters} calls; sum of medians "
          f"{sum(med):.1f} us, median total {total:.1f} us", flush=True)
    for name, v in zip(STAGES, med):
        print(f"  {v:8.2f} us  {name}")
    return med


def main():
    print("device", torch.cuda.get_device_name(0), "torch", torch.__version__,
          "python", sys.version.split()[0], flush=True)
    print("gc enabled", gc.isenabled(), "; cpu", os.cpu_count(), "logical cores", flush=True)
    p, g, go = problem()
    fl = floors(p, g, go)

    print("== ptxflow op (1000 x 500 f32)", flush=True)
    grad = torch.autograd.grad
    step = lambda: grad(pt.gaussian_field(p, g), (p, g), go)  # noqa: E731
    wall = row("op fwd+bwd back to back (the issue's wall)", step, ITERS)
    if pt._apply is not pt.GaussianField.apply:
        row("op fwd+bwd through GaussianField.apply (Python apply layer)",
            lambda: grad(pt.GaussianField.apply(p, g, False, 1e-6), (p, g), go))
    pd, gd = p.detach(), g.detach()
    row("op forward only (inputs need no grad)", lambda: pt.gaussian_field(pd, gd))
    k = pt._native_device(0)
    fwd_len, bwd_len = k.plan(False, N, B)
    work, bwork = pd.new_empty(fwd_len), pd.new_empty(bwd_len)
    vals, gp, gg = pd.new_empty(B), pd.new_empty((B, 3)), pd.new_empty((N, 10))
    s = pt._raw_stream(0)
    fargs = (False, s, N, B, False, 1e-6, gd.data_ptr(), pd.data_ptr(), work.data_ptr(), vals.data_ptr())
    bargs = (False, s, N, B, False, work.data_ptr(), pd.data_ptr(), go.data_ptr(), bwork.data_ptr(),
             gp.data_ptr(), gg.data_ptr())
    os.environ["PTXFLOW_PY_NO_LAUNCH"] = "1"
    k0 = _native.CudaGaussian(0)
    del os.environ["PTXFLOW_PY_NO_LAUNCH"]
    assert k0.no_launch and not k.no_launch
    row("native forward: prepare + forward launches (3 kernels here)", lambda: k.forward(*fargs))
    row("native forward, launches off (PyO3 + plan + checks)", lambda: k0.forward(*fargs))
    row("native backward: 3 launches", lambda: k.backward(*bargs))
    row("native backward, launches off", lambda: k0.backward(*bargs))
    row("op fwd+bwd, points need no gradient (2 launches in the backward)",
        lambda: grad(pt.gaussian_field(pd, g), (g,), go))
    pt._NATIVE[0] = k0
    pt._PLANS.clear()
    try:
        off = row("op fwd+bwd with launches off (all host work but the driver's)", step, ITERS)
    finally:
        pt._NATIVE[0] = k
        pt._PLANS.clear()
    ca = c_apply(Probe)
    if ca is not None:
        med = breakdown(p, g, go, ca, "C++ apply, as ptxflow.torch")
    else:
        med = breakdown(p, g, go, Probe.apply, "Function.apply, as ptxflow.torch")
    own = med[1] + med[2] + med[3] + med[4] + med[5] + med[6] + med[9] + med[10] + med[11] + med[12] + med[13] + med[14]
    print(f"  ptxflow's own stages (checks, lookups, allocations, native calls, ctx): {own:.1f} us; "
          f"of which native calls {med[5] + med[13]:.1f} us", flush=True)

    # Device time last: the profiler (CUPTI) may leave the driver slower afterwards.
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(50):
            step()
        torch.cuda.synchronize()
    total, kernels = 0.0, {}
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None)
        if t is None:
            t = getattr(e, "self_cuda_time_total", 0.0)
        if t:
            total += t
            kernels[e.key] = (t / 50, e.count // 50)
    dev = total / 50
    for kname, (t, c) in sorted(kernels.items(), key=lambda kv: -kv[1][0]):
        print(f"    {t:8.2f} us x{c} {kname[:90]}")
    floor = fl.get("null_c", fl["null_new"])
    print(f"overhead N x B = {N} x {B}: wall {wall:.1f} us/call, device time {dev:.1f} us/call, "
          f"binding overhead (wall - device, the issue's definition) {wall - dev:.1f} us/call "
          f"(target < 20)", flush=True)
    print(f"floor: empty autograd.Function fwd+bwd {fl['null']:.1f} us/call (torch.empty, Function.apply), "
          f"{fl['null_new']:.1f} (new_empty), {fl.get('null_c', float('nan')):.1f} (C++ apply); plain op chain "
          f"{fl['plain']:.1f}; empty Function on CPU tensors {fl['null_cpu']:.1f}", flush=True)
    print(f"ptxflow's share: wall - empty-Function floor = {wall - floor:.1f} us/call; with launches off "
          f"{off:.1f} us/call wall (launches cost {wall - off:.1f})", flush=True)
    row("after the profiler: empty Function (new_empty) fwd+bwd",
        lambda: grad(NullNew.apply(p, g), (p, g), go))
    row("after the profiler: op fwd+bwd", step)


if __name__ == "__main__":
    main()

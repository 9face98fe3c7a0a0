"""Forward+backward of the Gaussian field through ptxflow's torch op against torch.compile of the
pure-PyTorch field, same run, CUDA events, warm-up, medians; and the op's binding overhead.

python bench.py [--no-compile] [--sizes=NxB,...]   (N Gaussians x B points, as benches/gaussian.rs)
"""
import statistics
import sys
import time

import torch

import ptxflow.torch as pt
from ptxflow import _native
from ptxflow import torch_reference as ref



def timed(fn, warmup=3, iters=20):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ms = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    return statistics.median(ms), min(ms)


def pipelined(fn, warmup=3, iters=20):
    """Per-iteration time of `iters` back-to-back calls between two events (the host runs ahead,
    as in a training loop): device-bound sizes show the device time, host-bound ones the host's."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / iters


def fwd_bwd(field, p, g, go):
    def step():
        f = field(p, g)
        torch.autograd.grad(f, (p, g), go)
    return step


def problem(n, b):
    """The Rust bench's problem (benches/gaussian.rs: same generator, seed and spreads), f32."""
    g, p, go = _native.gaussian_problem(n, b)
    f = lambda a: torch.from_numpy(a).to(device="cuda", dtype=torch.float32)  # noqa: E731
    return f(p).requires_grad_(), f(g).requires_grad_(), f(go)


def bench(n, b, compile_ref):
    p, g, go = problem(n, b)
    med, lo = timed(fwd_bwd(pt.gaussian_field, p, g, go))
    pipe = pipelined(fwd_bwd(pt.gaussian_field, p, g, go))
    fmed, _ = timed(lambda: pt.gaussian_field(p.detach(), g.detach()))
    print(f"ptxflow op    N x B = {n:>6} x {b:>6} f32 fwd+bwd median {med:8.3f} ms (min {lo:.3f}), "
          f"back-to-back {pipe:.3f} ms/iter; fwd alone {fmed:.3f} ms", flush=True)
    if not compile_ref:
        return
    try:
        t0 = time.perf_counter()
        cf = torch.compile(ref.field, dynamic=False)
        step = fwd_bwd(cf, p, g, go)
        step()
        torch.cuda.synchronize()
        print(f"  torch.compile warm-up (compile) {time.perf_counter() - t0:.1f} s", flush=True)
        cmed, clo = timed(step, warmup=2, iters=10)
        cpipe = pipelined(step, warmup=1, iters=10)
        print(f"torch.compile N x B = {n:>6} x {b:>6} f32 fwd+bwd median {cmed:8.3f} ms (min {clo:.3f}), "
              f"back-to-back {cpipe:.3f} ms/iter; ptxflow speed-up x{cmed / med:.1f} (median), "
              f"x{cpipe / pipe:.1f} (back-to-back)", flush=True)
    except Exception as e:  # noqa: BLE001
        print(f"torch.compile B={b} N={n}: failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
    torch.cuda.empty_cache()


class _Null(torch.autograd.Function):
    """No work: PyTorch's own cost of a Python autograd.Function round trip (fresh outputs)."""

    @staticmethod
    def forward(ctx, a, b_):
        return a.new_empty(a.shape[0])

    @staticmethod
    def backward(ctx, g_):
        return g_.new_empty(ctx.shapes[0]), g_.new_empty(ctx.shapes[1])


def _per_call(fn, iters):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    best = None
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        host = time.perf_counter() - t0
        torch.cuda.synchronize()
        r = (host / iters * 1e6, (time.perf_counter() - t0) / iters * 1e6)
        best = r if best is None or r[1] < best[1] else best
    return best


def overhead(n=1000, b=500, iters=400):
    """The issue's binding overhead: wall per forward+backward through the op, back to back
    (best of 3 x `iters`), minus the kernels' device time (torch.profiler); PyTorch's own floor
    on this host measured in the same way before the profiler runs."""
    p, g, go = problem(n, b)
    step = fwd_bwd(pt.gaussian_field, p, g, go)
    t_host, wall = _per_call(step, iters)

    class Null(_Null):
        @staticmethod
        def forward(ctx, a, b_):
            ctx.shapes = ((b, 3), (n, 10))
            return a.new_empty(a.shape[0])
    _, null_us = _per_call(fwd_bwd(Null.apply, p, g, go), iters)

    def plain_step():
        torch.autograd.grad(p.sum(1) + g.sum(), (p, g), go)
    _, plain_us = _per_call(plain_step, iters)
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(50):
            step()
        torch.cuda.synchronize()
    total = 0.0
    kernels = {}
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None)
        if t is None:
            t = getattr(e, "self_cuda_time_total", 0.0)
        if t:
            total += t
            kernels[e.key] = (t / 50, e.count // 50)
    dev = total / 50
    print(f"overhead N x B = {n} x {b}: wall {wall:.1f} us/call (host enqueue {t_host:.1f} us/call), "
          f"device time {dev:.1f} us/call, binding overhead {wall - dev:.1f} us/call", flush=True)
    for k, (t, c) in sorted(kernels.items(), key=lambda kv: -kv[1][0]):
        print(f"    {t:8.2f} us x{c} {k[:90]}")
    print(f"  floor on this host: empty autograd.Function fwd+bwd {null_us:.1f} us/call, plain op chain "
          f"(p.sum(1) + g.sum()) fwd+bwd {plain_us:.1f} us/call; ptxflow's share (wall - empty Function) "
          f"{wall - null_us:.1f} us/call", flush=True)
    # The same step captured in a CUDA graph: the Python and autograd cost is paid once.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    _, gwall = _per_call(graph.replay, iters)
    print(f"  CUDA graph of the same fwd+bwd: wall {gwall:.1f} us/replay; "
          f"overhead vs summed kernel time {gwall - dev:.1f} us/replay", flush=True)


if __name__ == "__main__":
    sizes = "10000x100000,1000x500,100000x10000"
    for a in sys.argv[1:]:
        if a.startswith("--sizes="):
            sizes = a.split("=", 1)[1]
    print("device", torch.cuda.get_device_name(0), "torch", torch.__version__, flush=True)
    overhead()
    for s in filter(None, sizes.split(",")):
        n, b = (int(v) for v in s.split("x"))
        bench(n, b, "--no-compile" not in sys.argv and n * b <= 10**9 and n <= 10000)

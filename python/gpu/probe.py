"""Host-time breakdown of one forward+backward through ptxflow.torch at 1000 x 500 (diagnostic)."""
import cProfile
import pstats
import time

import torch

import ptxflow.torch as pt
from ptxflow import _native


def per_call(fn, iters=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    host = (time.perf_counter() - t) / iters * 1e6
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t) / iters * 1e6
    return host, wall


def main():
    g, p, go = _native.gaussian_problem(1000, 500)
    f = lambda a: torch.from_numpy(a).to(device="cuda", dtype=torch.float32)  # noqa: E731
    p, g, go = f(p), f(g), f(go)
    k = pt._kernels(0)
    fl, bl = k.plan(False, 1000, 500)
    work = torch.empty(fl, device="cuda")
    bwork = torch.empty(bl, device="cuda")
    vals = torch.empty(500, device="cuda")
    gp = torch.empty(500, 3, device="cuda")
    gg = torch.empty(1000, 10, device="cuda")
    buf = pt._buf
    s = torch.cuda.current_stream().cuda_stream
    dev = p.device
    rows = [
        ("torch.empty(n)", lambda: torch.empty(fl, device=dev)),
        ("current_stream(dev).cuda_stream", lambda: torch.cuda.current_stream(dev).cuda_stream),
        ("k.plan", lambda: k.plan(False, 1000, 500)),
        ("k.forward direct (prepare+forward launches)", lambda: k.forward(
            False, s, 1000, 500, False, 1e-6, buf(g), buf(p), buf(work), buf(vals))),
        ("k.backward direct (3 launches)", lambda: k.backward(
            False, s, 1000, 500, False, buf(work), buf(p), buf(go), buf(bwork), buf(gp), buf(gg))),
        ("gaussian_field forward, no grad", lambda: pt.gaussian_field(p, g)),
    ]
    pr, gr = p.clone().requires_grad_(), g.clone().requires_grad_()
    rows.append(("fwd+bwd autograd.grad", lambda: torch.autograd.grad(pt.gaussian_field(pr, gr), (pr, gr), go)))

    class Null(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return torch.empty(500, device=a.device)

        @staticmethod
        def backward(ctx, go_):
            return torch.empty(500, 3, device=go_.device), torch.empty(1000, 10, device=go_.device)
    rows.append(("null autograd.Function fwd+bwd (torch's own cost)",
                 lambda: torch.autograd.grad(Null.apply(pr, gr), (pr, gr), go)))
    for name, fn in rows:
        host, wall = per_call(fn)
        print(f"{name:55s} host {host:8.2f} us/call, wall {wall:8.2f} us/call", flush=True)
    prof = cProfile.Profile()
    step = rows[6][1]
    prof.enable()
    for _ in range(300):
        step()
    torch.cuda.synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()

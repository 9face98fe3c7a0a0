"""GPU checks of the ptxflow Python package (run on the GPU machine; prints PASS/FAIL lines).

python gpu_check.py [--quick]
"""
import math
import os
import sys
import time
import traceback

import numpy as np
import torch

import ptxflow
import ptxflow.torch as pt
from ptxflow import torch_reference as ref

RESULTS = []


def check(name, ok, detail=""):
    RESULTS.append((name, bool(ok)))
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)


def run(name, fn):
    try:
        fn()
    except Exception:  # noqa: BLE001 - report and go on
        traceback.print_exc()
        check(name, False, "raised")


def gaussians(n, dtype, device, seed, spread=2.0, full=True):
    g = torch.Generator().manual_seed(seed)
    mu = (torch.rand(n, 3, generator=g, dtype=torch.float64) - 0.5) * 2 * spread
    diag = 0.3 + 0.7 * torch.rand(n, 3, generator=g, dtype=torch.float64)
    off = 0.3 * torch.randn(n, 3, generator=g, dtype=torch.float64) if full else torch.zeros(n, 3, dtype=torch.float64)
    w = torch.randn(n, generator=g, dtype=torch.float64)
    packed = torch.stack([mu[:, 0], mu[:, 1], mu[:, 2], diag[:, 0], off[:, 0], diag[:, 1],
                          off[:, 1], off[:, 2], diag[:, 2], w], 1)
    return packed.to(dtype=dtype, device=device)


def points(b, dtype, device, seed, spread=2.5):
    g = torch.Generator().manual_seed(seed)
    return ((torch.rand(b, 3, generator=g, dtype=torch.float64) - 0.5) * 2 * spread).to(dtype=dtype, device=device)


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def env():
    print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
    print("device", torch.cuda.get_device_name(0))
    print("ptxflow.gpu_available", ptxflow.gpu_available())


def numpy_gpu_vs_cpu():
    for dtype in (np.float32, np.float64):
        for normalised in (False, True):
            p = points(333, torch.float64, "cpu", 1).numpy().astype(dtype)
            g = gaussians(777, torch.float64, "cpu", 2).numpy().astype(dtype)
            go = np.random.default_rng(3).normal(size=333).astype(dtype)
            fc = ptxflow.gaussian.forward(p, g, normalised=normalised, device="cpu")
            fg = ptxflow.gaussian.forward(p, g, normalised=normalised, device="gpu")
            bc = ptxflow.gaussian.backward(p, g, go, normalised=normalised, device="cpu")
            bg = ptxflow.gaussian.backward(p, g, go, normalised=normalised, device="gpu")
            tol = 1e-5 if dtype == np.float32 else 1e-12
            errs = [rel(torch.from_numpy(fg), torch.from_numpy(fc)),
                    rel(torch.from_numpy(bg[0]), torch.from_numpy(bc[0])),
                    rel(torch.from_numpy(bg[1]), torch.from_numpy(bc[1]))]
            check(f"numpy gpu==cpu {np.dtype(dtype).name} normalised={normalised}", max(errs) < tol,
                  f"rel errors (values, dpoints, dgaussians) {errs}")


def same_as_numpy_gpu():
    """The torch op (device-side preparation) and the numpy GPU path (host preparation) run the
    same kernels on the same plan: results must be bit-identical, well and badly conditioned."""
    for dtype in (torch.float32, torch.float64):
        for normalised in (False, True):
            for bad in (False, True):
                g = gaussians(1500, torch.float64, "cpu", 21)
                if bad:  # shear and 500x diagonal spread: kappa up to ~1e4, compensated solves
                    gen = torch.Generator().manual_seed(22)
                    scale = torch.exp(torch.rand(1500, 3, generator=gen, dtype=torch.float64) * math.log(0.002))
                    g[:, [3, 4, 5]] *= torch.stack([scale[:, 0], scale[:, 1], scale[:, 1]], 1)
                    g[:, [6, 7, 8]] *= scale[:, 2:3]
                    g[:, [4, 6, 7]] *= 6.0
                g = g.to(dtype)
                p = points(700, dtype, "cpu", 23)
                go = torch.randn(700, generator=torch.Generator().manual_seed(24), dtype=torch.float64).to(dtype)
                pc, gc = p.cuda().requires_grad_(), g.cuda().requires_grad_()
                f = pt.gaussian_field(pc, gc, normalised)
                dp, dg = torch.autograd.grad(f, (pc, gc), go.cuda())
                fn = ptxflow.gaussian.forward(p.numpy(), g.numpy(), normalised=normalised, device="gpu")
                bp, bg = ptxflow.gaussian.backward(p.numpy(), g.numpy(), go.numpy(), normalised=normalised, device="gpu")
                same = [torch.equal(f.cpu(), torch.from_numpy(fn)), torch.equal(dp.cpu(), torch.from_numpy(bp)),
                        torch.equal(dg.cpu(), torch.from_numpy(bg))]
                diffs = [rel(f, torch.from_numpy(fn)), rel(dp, torch.from_numpy(bp)), rel(dg, torch.from_numpy(bg))]
                check(f"torch op == numpy gpu bit for bit {dtype} normalised={normalised} badly_conditioned={bad}",
                      all(same), f"equal (values, dpoints, dgaussians) {same}, rel {diffs}")


def gradcheck():
    for normalised in (False, True):
        p = points(17, torch.float64, "cuda", 4, spread=1.5).requires_grad_()
        g = gaussians(23, torch.float64, "cuda", 5, spread=1.0).requires_grad_()
        ok = torch.autograd.gradcheck(lambda a, b: pt.gaussian_field(a, b, normalised, 1e-6), (p, g),
                                      eps=1e-6, atol=1e-7, rtol=1e-5)
        check(f"gradcheck f64 cuda normalised={normalised}", ok, "torch.autograd.gradcheck")


def f32_vs_reference():
    for normalised in (False, True):
        p = points(1000, torch.float32, "cuda", 6).requires_grad_()
        g = gaussians(500, torch.float32, "cuda", 7).requires_grad_()
        go = torch.randn(1000, device="cuda", generator=torch.Generator("cuda").manual_seed(8))
        f = pt.gaussian_field(p, g, normalised)
        dp, dg = torch.autograd.grad(f, (p, g), go)
        p64 = p.detach().double().requires_grad_()
        g64 = g.detach().double().requires_grad_()
        fr = ref.field(p64, g64, normalised)
        rp, rg = torch.autograd.grad(fr, (p64, g64), go.double())
        errs = [rel(f, fr), rel(dp, rp), rel(dg, rg)]
        check(f"f32 op vs reference normalised={normalised}", max(errs) < 1e-5,
              f"normwise rel errors (values, dpoints, dgaussians) vs f64 reference {errs}")
        f32r = ref.field(p.detach(), g.detach(), normalised)
        print(f"  (pure-PyTorch f32 reference vs f64: {rel(f32r, fr):.2e})")


def cpu_tensors():
    p = points(50, torch.float64, "cpu", 9).requires_grad_()
    g = gaussians(40, torch.float64, "cpu", 10).requires_grad_()
    ok = torch.autograd.gradcheck(lambda a, b: pt.gaussian_field(a, b), (p, g), eps=1e-6, atol=1e-7, rtol=1e-5)
    check("gradcheck f64 cpu tensors", ok, "")


def training(opt_name, steps=200, n=64, b=512):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(11)
    a = pt.LearnableGaussianField(n, 4.0, use_full_cov=True, device="cuda", generator=gen)
    r = ref.ReferenceGaussianField(n, 4.0, use_full_cov=True, device="cuda")
    r.load_state_dict(a.state_dict())
    truth = gaussians(16, torch.float32, "cuda", 12, spread=1.5)
    make = (lambda params: torch.optim.Adam(params, lr=1e-2)) if opt_name == "adam" else (
        lambda params: torch.optim.SGD(params, lr=1e-2))
    oa, orf = make(a.parameters()), make(r.parameters())
    worst, first_bad = 0.0, None
    losses = []
    for step in range(steps):
        x = points(b, torch.float32, "cuda", 1000 + step, spread=2.0)
        y = ref.field(x, truth)
        la = ((a(x) - y) ** 2).mean()
        lr_ = ((r(x) - y) ** 2).mean()
        oa.zero_grad(); la.backward(); oa.step()
        orf.zero_grad(); lr_.backward(); orf.step()
        e = abs(la.item() - lr_.item()) / abs(lr_.item())
        losses.append((la.item(), lr_.item()))
        if e > worst:
            worst = e
        if e > 1e-4 and first_bad is None:
            first_bad = step
    check(f"training {steps} steps ({opt_name}) ptxflow vs pure PyTorch", worst < 1e-4,
          f"max rel loss diff {worst:.2e} (first >1e-4 at step {first_bad}); loss {losses[0][1]:.4e} -> {losses[-1][1]:.4e}")


def cuda_graph():
    p = points(1000, torch.float32, "cuda", 13)
    g = gaussians(500, torch.float32, "cuda", 14).requires_grad_()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            pt.gaussian_field(p, g).sum().backward()
    torch.cuda.current_stream().wait_stream(s)
    g.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = pt.gaussian_field(p, g)
        out.sum().backward()
    graph.replay()
    torch.cuda.synchronize()
    want = ref.field(p.double(), g.detach().double())
    check("cuda graph capture + replay", rel(out, want) < 1e-5, f"rel {rel(out, want):.2e}")


def stream_and_device():
    s = torch.cuda.Stream()
    p = points(2000, torch.float32, "cuda", 15)
    g = gaussians(3000, torch.float32, "cuda", 16)
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        # The side stream writes the points only after a long sleep: a launch on any other
        # stream would read them before they exist.
        torch.cuda._sleep(100_000_000)
        p2 = torch.empty_like(p)
        p2.copy_(p)
        f = pt.gaussian_field(p2, g)
    s.synchronize()
    want = ref.field(p.double(), g.double())
    check("runs on the current (side) stream", rel(f, want) < 1e-5, f"rel {rel(f, want):.2e}")
    if torch.cuda.device_count() > 1:
        p1, g1 = p.to("cuda:1"), g.to("cuda:1")
        f1 = pt.gaussian_field(p1, g1)
        check("runs on cuda:1", f1.device.index == 1 and rel(f1, want) < 1e-5, "")


def bad_inputs():
    p = points(10, torch.float32, "cuda", 1)
    g = gaussians(5, torch.float32, "cuda", 2)
    cases = [
        ("dtype mix", lambda: pt.gaussian_field(p, g.double()), TypeError),
        ("shape", lambda: pt.gaussian_field(p[:, :2], g), ValueError),
        ("device mix", lambda: pt.gaussian_field(p.cpu(), g), ValueError),
        ("no gaussians", lambda: pt.gaussian_field(p, g[:0]), ValueError),
    ]
    for name, fn, exc in cases:
        try:
            fn()
            check(f"bad input {name}", False, "no exception")
        except exc as e:
            check(f"bad input {name}", True, f"{type(e).__name__}: {e}")
    # strided (non-contiguous) inputs are made contiguous, not rejected
    pp = torch.cat([p, p], 1)[:, ::2]
    check("non-contiguous points", rel(pt.gaussian_field(pp, g), ref.field(pp.double(), g.double())) < 1e-5, "")


def fast_path_edges():
    """What the call's fast path hands elsewhere: misaligned or strided inputs, B = 0, a strided
    grad_out (from .sum()), create_graph=True (first-order only), in-place modification of a
    saved input, a Python int eps; and the caller's current device is left as it was."""
    p = points(300, torch.float32, "cuda", 31)
    g = gaussians(200, torch.float32, "cuda", 32)
    go = torch.randn(300, device="cuda", generator=torch.Generator("cuda").manual_seed(33))
    p64, g64 = p.double().requires_grad_(), g.double().requires_grad_()
    want = ref.field(p64, g64)
    wp, wg = torch.autograd.grad(want, (p64, g64), go.double())
    # misaligned Gaussians (4 bytes off a 16-byte boundary): copied, same results
    gm = torch.cat([torch.zeros(1, device="cuda"), g.flatten()])[1:].view(200, 10)
    assert gm.data_ptr() % 16 != 0
    gm.requires_grad_()
    f = pt.gaussian_field(p, gm)
    (dg,) = torch.autograd.grad(f, gm, go)
    check("misaligned gaussians", rel(f, want) < 1e-5 and rel(dg, wg) < 1e-5,
          f"rel {rel(f, want):.2e} {rel(dg, wg):.2e}")
    # B = 0: empty values, zero Gaussian gradients
    pe = torch.empty(0, 3, device="cuda", requires_grad=True)
    gr = g.clone().requires_grad_()
    f = pt.gaussian_field(pe, gr)
    dp, dg = torch.autograd.grad(f, (pe, gr), torch.empty(0, device="cuda"))
    check("no points", f.shape == (0,) and dp.shape == (0, 3) and float(dg.abs().max()) == 0.0, "")
    # .sum() gives a stride-0 grad_out
    pr, gr = p.clone().requires_grad_(), g.clone().requires_grad_()
    pt.gaussian_field(pr, gr).sum().backward()
    ws = torch.autograd.grad(ref.field(p64, g64).sum(), (p64, g64))
    check("strided grad_out (sum)", rel(pr.grad, ws[0]) < 1e-5 and rel(gr.grad, ws[1]) < 1e-5,
          f"rel {rel(pr.grad, ws[0]):.2e} {rel(gr.grad, ws[1]):.2e}")
    # create_graph=True: right first derivatives, and differentiating them again is an error
    gr = g.clone().requires_grad_()
    (dg,) = torch.autograd.grad(pt.gaussian_field(p, gr), gr, go, create_graph=True)
    try:
        dg.sum().backward()
        second = "no error"
    except RuntimeError as e:
        second = f"RuntimeError: {str(e)[:80]}"
    check("create_graph=True (once differentiable)", rel(dg, wg) < 1e-5 and second != "no error",
          f"rel {rel(dg, wg):.2e}; double backward: {second}")
    # a saved input modified in place before the backward: autograd's version check
    q = p.clone().requires_grad_()
    q2 = q * 1.0
    f = pt.gaussian_field(q2, g)
    q2.add_(1.0)
    try:
        torch.autograd.grad(f, q, go)
        msg = "no error"
    except RuntimeError as e:
        msg = f"RuntimeError: {str(e)[:80]}"
    check("in-place change of saved points is detected", msg != "no error", msg)
    # eps as an int (the checked path converts it)
    f = pt.gaussian_field(p, g, False, 0)
    check("int diag_eps", rel(f, ref.field(p.double(), g.double(), False, 0.0)) < 1e-5, "")
    # only the points' gradient wanted (no Gaussian reduction), and only the Gaussians'
    pr = p.clone().requires_grad_()
    (dp,) = torch.autograd.grad(pt.gaussian_field(pr, g), pr, go)
    gr = g.clone().requires_grad_()
    (dg,) = torch.autograd.grad(pt.gaussian_field(p, gr), gr, go)
    check("one gradient wanted", rel(dp, wp) < 1e-5 and rel(dg, wg) < 1e-5,
          f"rel {rel(dp, wp):.2e} {rel(dg, wg):.2e}")
    # the backward workspace allocated by the backward (as large problems do), not folded
    fold = pt.FOLD_BYTES
    pt.FOLD_BYTES = 0
    pt._PLANS.clear()
    try:
        pr, gr = p.clone().requires_grad_(), g.clone().requires_grad_()
        f = pt.gaussian_field(pr, gr)
        dp, dg = torch.autograd.grad(f, (pr, gr), go)
    finally:
        pt.FOLD_BYTES = fold
        pt._PLANS.clear()
    check("backward workspace not folded", max(rel(f, want), rel(dp, wp), rel(dg, wg)) < 1e-5,
          f"rel {rel(f, want):.2e} {rel(dp, wp):.2e} {rel(dg, wg):.2e}")
    before = torch.cuda.current_device()
    pt.gaussian_field(p, g)
    check("current device unchanged", torch.cuda.current_device() == before, f"{before}")


def workspace_pool():
    """The reused workspaces (``ptxflow.torch._WorkPool``, opt-in: turned on here whatever
    PTXFLOW_TORCH_POOL says): calls back to back with other inputs, two graphs alive at once, a
    retained graph differentiated again after other calls, a call on a side stream, and calls
    after a CUDA graph capture all give the reference's results."""
    was = pt._POOL_ON
    pt._POOL_ON = True
    pt._PLANS.clear()
    try:
        _workspace_pool()
    finally:
        pt._POOL_ON = was
        pt._PLANS.clear()


def _workspace_pool():
    n, b = 400, 300
    go = torch.randn(b, device="cuda", generator=torch.Generator("cuda").manual_seed(41))

    def want(p, g):
        p64, g64 = p.detach().double().requires_grad_(), g.detach().double().requires_grad_()
        f = ref.field(p64, g64)
        return (f,) + torch.autograd.grad(f, (p64, g64), go.double())

    def worst(got, ref_):
        return max(rel(a, r) for a, r in zip(got, ref_))

    probs = [(points(b, torch.float32, "cuda", 50 + i).requires_grad_(),
              gaussians(n, torch.float32, "cuda", 60 + i).requires_grad_()) for i in range(4)]
    refs = [want(p, g) for p, g in probs]
    errs = []
    for i in range(12):
        p, g = probs[i % 4]
        f = pt.gaussian_field(p, g)
        errs.append(worst((f,) + torch.autograd.grad(f, (p, g), go), refs[i % 4]))
    plan = pt._PLANS.get((0, torch.float32, probs[0][0].shape, probs[0][1].shape))
    pooled = plan is not None and plan.pool_ok and sum(len(q.free) for q in plan.pools.values())
    check("pool: calls back to back, other inputs each time", max(errs) < 1e-5,
          f"max rel {max(errs):.2e}; pooled workspaces {pooled}")
    # two graphs alive, differentiated in reverse order
    f0 = pt.gaussian_field(*probs[0])
    f1 = pt.gaussian_field(*probs[1])
    e1 = worst((f1,) + torch.autograd.grad(f1, probs[1], go), refs[1])
    e0 = worst((f0,) + torch.autograd.grad(f0, probs[0], go), refs[0])
    check("pool: two graphs alive at once", max(e0, e1) < 1e-5, f"rel {e0:.2e} {e1:.2e}")
    # a retained graph, differentiated again after other calls of the same shapes
    f2 = pt.gaussian_field(*probs[2])
    first = torch.autograd.grad(f2, probs[2], go, retain_graph=True)
    for i in range(6):
        p, g = probs[i % 2]
        torch.autograd.grad(pt.gaussian_field(p, g), (p, g), go)
    again = torch.autograd.grad(f2, probs[2], go)
    e2 = worst((f2,) + again, refs[2])
    same = all(torch.equal(a, c) for a, c in zip(first, again))
    check("pool: retained graph differentiated again after other calls", e2 < 1e-5 and same,
          f"rel {e2:.2e}; bit-identical to its first backward {same}")
    # a side stream, then the default stream again
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    errs = []
    with torch.cuda.stream(s):
        for i in range(4):
            p, g = probs[i % 4]
            f = pt.gaussian_field(p, g)
            errs.append(worst((f,) + torch.autograd.grad(f, (p, g), go), refs[i % 4]))
    torch.cuda.current_stream().wait_stream(s)
    for i in range(4):
        p, g = probs[(i + 1) % 4]
        f = pt.gaussian_field(p, g)
        errs.append(worst((f,) + torch.autograd.grad(f, (p, g), go), refs[(i + 1) % 4]))
    check("pool: side stream then default stream", max(errs) < 1e-5, f"max rel {max(errs):.2e}")
    # a CUDA graph of the op (its own allocations), replayed between eager calls
    p, g = probs[3][0].detach(), probs[3][1]
    gs = g.detach().clone().requires_grad_()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            pt.gaussian_field(p, gs).sum().backward()
    torch.cuda.current_stream().wait_stream(s)
    gs.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = pt.gaussian_field(p, gs)
        out.sum().backward()
    errs = []
    for i in range(3):
        graph.replay()
        q, h = probs[i % 3]
        f = pt.gaussian_field(q, h)
        errs.append(worst((f,) + torch.autograd.grad(f, (q, h), go), refs[i % 3]))
    torch.cuda.synchronize()
    errs.append(rel(out, refs[3][0]))
    check("pool: eager calls between CUDA graph replays", max(errs) < 1e-5,
          f"max rel {max(errs):.2e}")


def ndt_lz4_gpu():
    d = os.environ.get("PTXFLOW_DATA", "data/pointclouds")
    t = os.path.join(d, "251370668.pcd")
    s = os.path.join(d, "251371071.pcd")
    if os.path.exists(t):
        tc, sc = ptxflow.read_cloud(t), ptxflow.read_cloud(s)
        t0 = time.perf_counter()
        rg = ptxflow.ndt.align(tc, sc, device="gpu")
        t1 = time.perf_counter()
        rc = ptxflow.ndt.align(tc, sc, device="cpu")
        t2 = time.perf_counter()
        dt = np.abs(rg["transform"] - rc["transform"]).max()
        check("ndt gpu vs cpu", rg["device"] == "gpu" and dt < 1e-3,
              f"max |dT| {dt:.2e}, gpu {t1 - t0:.3f} s, cpu {t2 - t1:.3f} s, stop {rg['stop']}")
        print("  gpu transform\n", rg["transform"])
    else:
        print("SKIPPED ndt: no", t)
    data = (b"ptxflow lz4 page " * 50000) + os.urandom(100000)
    f = ptxflow.lz4.compress(data, device="gpu")
    check("lz4 gpu compress -> cpu decompress", ptxflow.lz4.decompress(f, device="cpu") == data, f"{len(data)} -> {len(f)}")
    check("lz4 cpu compress -> gpu decompress", ptxflow.lz4.decompress(ptxflow.lz4.compress(data, device="cpu"), device="gpu") == data, "")


if __name__ == "__main__":
    env()
    quick = "--quick" in sys.argv
    for name, fn in [("numpy gpu vs cpu", numpy_gpu_vs_cpu), ("same as numpy gpu", same_as_numpy_gpu),
                     ("gradcheck", gradcheck),
                     ("f32 vs reference", f32_vs_reference), ("cpu tensors", cpu_tensors),
                     ("training adam", lambda: training("adam")),
                     ("training sgd", lambda: training("sgd")),
                     ("stream", stream_and_device), ("cuda graph", cuda_graph),
                     ("bad inputs", bad_inputs), ("fast path edges", fast_path_edges),
                     ("workspace pool", workspace_pool),
                     ("ndt lz4 gpu", ndt_lz4_gpu)]:
        run(name, fn)
    for index, k in sorted(pt._NATIVE.items()):
        print(f"cuda:{index} graphs {k.graphs}: (recordings, replays, replays with moved "
              f"arguments, direct launches, last skip) {k.graph_stats()}")
    bad = [n for n, ok in RESULTS if not ok]
    print(f"gpu_check: {len(RESULTS) - len(bad)} passed, {len(bad)} failed {bad}")

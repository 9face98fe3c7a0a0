"""ptxflow.torch on a machine with two or more GPUs (prints PASS/FAIL lines; exits 1 on a failure).

python multi_gpu_check.py [--one-gpu]

(--one-gpu: on a machine with one GPU, run what does not need a second one, to try the script.)

- forward + backward of the same problem on cuda:0 and cuda:1 (f32 and f64), each against the CPU
  path (ptxflow's CPU reference on CPU tensors);
- the caller's current device is left as it was by a call on the other device (the launches bind
  that device's context; PyTorch reads its current device from the current context);
- both devices from one thread, alternating, and from two threads at once;
- torch.nn.DataParallel over LearnableGaussianField (replicas on every GPU, one thread each): the
  gradient matches a single-device step.
"""
import sys
import threading

import torch

import ptxflow.torch as pt

RESULTS = []


def check(name, ok, detail=""):
    RESULTS.append((name, bool(ok)))
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)


def rel(a, b):
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def problem(b, n, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    g = torch.zeros(n, 10, dtype=torch.float64)
    g[:, 0:3] = (torch.rand(n, 3, generator=gen, dtype=torch.float64) - 0.5) * 3
    g[:, [3, 5, 8]] = 0.4 + 0.8 * torch.rand(n, 3, generator=gen, dtype=torch.float64)
    g[:, [4, 6, 7]] = 0.3 * torch.randn(n, 3, generator=gen, dtype=torch.float64)
    g[:, 9] = torch.randn(n, generator=gen, dtype=torch.float64)
    p = (torch.rand(b, 3, generator=gen, dtype=torch.float64) - 0.5) * 4
    go = torch.randn(b, generator=gen, dtype=torch.float64)
    return p.to(dtype), g.to(dtype), go.to(dtype)


def fwd_bwd(p, g, go, device):
    pd = p.to(device).requires_grad_()
    gd = g.to(device).requires_grad_()
    f = pt.gaussian_field(pd, gd)
    dp, dg = torch.autograd.grad(f, (pd, gd), go.to(device))
    return f, dp, dg


def per_device():
    for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-12)):
        p, g, go = problem(700, 900, dtype, 1)
        want = fwd_bwd(p, g, go, "cpu")
        for index in range(min(torch.cuda.device_count(), 4)):
            dev = f"cuda:{index}"
            torch.cuda.set_device(0)
            got = fwd_bwd(p, g, go, dev)
            errs = [rel(a, b) for a, b in zip(got, want)]
            on = [t.device.index for t in got]
            check(f"{dev} {dtype} vs cpu", max(errs) < tol and on == [index] * 3,
                  f"rel (values, dpoints, dgaussians) {errs}, devices {on}")
            check(f"{dev} {dtype}: current device still 0", torch.cuda.current_device() == 0,
                  f"current {torch.cuda.current_device()}")


def alternating_and_threads():
    p, g, go = problem(500, 400, torch.float32, 2)
    want = fwd_bwd(p, g, go, "cpu")
    worst = 0.0
    for i in range(20):
        got = fwd_bwd(p, g, go, f"cuda:{i % 2}")
        worst = max(worst, max(rel(a, b) for a, b in zip(got, want)))
    check("alternating cuda:0 / cuda:1 from one thread", worst < 1e-5, f"worst rel {worst:.2e}")
    errs = {}

    def worker(index):
        torch.cuda.set_device(index)
        w = 0.0
        for _ in range(20):
            got = fwd_bwd(p, g, go, f"cuda:{index}")
            w = max(w, max(rel(a, b) for a, b in zip(got, want)))
        errs[index] = w
    threads = [threading.Thread(target=worker, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check("two threads, one device each, at once", len(errs) == 2 and max(errs.values()) < 1e-5,
          f"worst rel per device {errs}")


def data_parallel():
    gen = torch.Generator().manual_seed(3)
    field = pt.LearnableGaussianField(128, 4.0, device="cuda:0", generator=gen)
    x = (torch.rand(4096, 3, generator=gen) - 0.5) * 4
    y = torch.exp(-(x ** 2).sum(1))
    x, y = x.to("cuda:0"), y.to("cuda:0")
    ((field(x) - y) ** 2).mean().backward()
    single = [q.grad.clone() for q in field.parameters()]
    field.zero_grad()
    dp = torch.nn.DataParallel(field)
    ((dp(x) - y) ** 2).mean().backward()
    errs = [rel(q.grad, s) for q, s in zip(field.parameters(), single)]
    check("DataParallel over LearnableGaussianField: gradients as one device", max(errs) < 1e-4,
          f"rel per parameter {errs} over {torch.cuda.device_count()} GPUs")


if __name__ == "__main__":
    n = torch.cuda.device_count()
    print("torch", torch.__version__, "GPUs", n, [torch.cuda.get_device_name(i) for i in range(n)])
    fns = (per_device, alternating_and_threads, data_parallel)
    if n < 2:
        if "--one-gpu" not in sys.argv[1:] or n < 1:
            print("SKIPPED multi_gpu_check: fewer than 2 GPUs")
            sys.exit(0)
        print("--one-gpu: only the checks one GPU can run")
        fns = (per_device, data_parallel)
    for fn in fns:
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - report and go on
            import traceback
            traceback.print_exc()
            check(fn.__name__, False, f"raised {type(e).__name__}: {e}")
    bad = [name for name, ok in RESULTS if not ok]
    print(f"multi_gpu_check: {len(RESULTS) - len(bad)} passed, {len(bad)} failed {bad}")
    sys.exit(1 if bad else 0)

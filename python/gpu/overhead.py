"""Host cost of one forward+backward through ptxflow.torch at N x B = 1000 x 500 (f32, CUDA), next
to PyTorch's own floor on the same host (diagnostic; run on the GPU machine).

python overhead.py [--rounds=R] [--iters=I] [--no-graphs]

Every figure is wall time per call of I calls back to back (the device kept up: each block ends
with a synchronize), measured in R rounds with the variants interleaved (round 1: A B C ..., round
2: A B C ...), so that a host that drifts (frequency, neighbours) moves all of them alike; the
median over the rounds is reported, with the lowest. In one process, before any profiler runs (a
CUPTI session can leave the driver slower):

- floors: PyTorch without ptxflow: an empty ``autograd.Function`` (forward returns a fresh (B,)
  tensor, backward two fresh gradients) through the C++ ``apply`` that ptxflow uses and through
  ``Function.apply``; the same with ``torch.autograd`` multithreading off (the backward then runs
  on the calling thread instead of the engine's CUDA device thread); on CPU tensors; single
  PyTorch calls (``torch.empty``, ``x.add_(1)``) and a plain op chain;
- the op as shipped, with each opt-in (workspace pool, gradients allocated in the forward, CUDA
  graph replays; ``--no-graphs`` leaves the last out) and with all three, with its launches off
  (every host step but the driver's), session 5's op where the bundle ships it
  (``ptxflow.torch_s5``), and the op with multithreading off;
- host time of single calls with the device idle (synchronized before each) and busy (behind a
  long kernel): ptxflow's native forward and backward (3 launches each), the same with launches
  off, one PyTorch kernel launch (``x.add_(1)``);
- a stage-by-stage breakdown (median ns per stage) of an instrumented copy of the op's fast path,
  and of the empty Function with the same stamps (the engine's own stages);
- last, the kernels' device time (torch.profiler, CUPTI), and the summary: the issue's overhead
  (wall - device time) and ptxflow's share (wall - the empty Function's wall).
"""
import gc
import os
import statistics
import sys
import time

import torch

import ptxflow.torch as pt
from ptxflow import _native

try:  # session 5's op, shipped next to the current one by the GPU bundle (not in the wheel)
    import ptxflow.torch_s5 as old
except ImportError:
    old = None

ns = time.perf_counter_ns
N, B = 1000, 500
ROUNDS, ITERS = 7, 300
GRAPH_RUNS = "--no-graphs" not in sys.argv[1:]
for _a in sys.argv[1:]:
    if _a.startswith("--rounds="):
        ROUNDS = int(_a.split("=", 1)[1])
    elif _a.startswith("--iters="):
        ITERS = int(_a.split("=", 1)[1])
grad = torch.autograd.grad
OP = "op fwd+bwd (as shipped)"
FLOOR = "floor: empty Function, C++ apply (as ptxflow), fwd+bwd"
OFF = "op fwd+bwd, launches off (all host work but the driver's)"
FLOOR_MT = "floor: empty Function, C++ apply, multithreading off"
OP_MT = "op fwd+bwd, multithreading off"
EARLY = "op fwd+bwd, gradients allocated in the forward (EARLY_GRADS)"
GRAPHS = "op fwd+bwd, each direction one CUDA graph replay (PTXFLOW_PY_GRAPHS)"
POOL = "op fwd+bwd, workspace reused per stream (PTXFLOW_TORCH_POOL)"
ALL = "op fwd+bwd, all three opt-ins (POOL, EARLY_GRADS, GRAPHS)"


def block(fn, iters):
    """Wall us per call of `iters` calls back to back, device included."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = ns()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (ns() - t0) / iters / 1000


def interleaved(title, variants, rounds=None, iters=None):
    """variants: [(name, fn, setup or None, teardown or None)]; returns {name: median us}."""
    rounds, iters = rounds or ROUNDS, iters or ITERS
    got = {v[0]: [] for v in variants}
    for _ in range(rounds):
        for name, fn, setup, teardown in variants:
            if setup:
                setup()
            try:
                got[name].append(block(fn, iters))
            finally:
                if teardown:
                    teardown()
    print(f"== {title} (wall us per call; median and lowest of {rounds} interleaved rounds of "
          f"{iters} calls)", flush=True)
    med = {}
    for name, _, _, _ in variants:
        v = got[name]
        med[name] = statistics.median(v)
        print(f"  {name:72s} {med[name]:8.2f}  (lowest {min(v):8.2f})", flush=True)
    return med


def single(fn, busy, reps=200):
    """Median host us of one call: device idle (synchronized before each call) or busy (queued
    behind a long kernel, at most 40 calls per kernel so the queue never fills)."""
    out = []
    for r in range(reps):
        if busy:
            if r % 40 == 0:
                torch.cuda.synchronize()
                torch.cuda._sleep(20_000_000)
        else:
            torch.cuda.synchronize()
        t0 = ns()
        fn()
        out.append(ns() - t0)
    torch.cuda.synchronize()
    return statistics.median(out) / 1000


def problem():
    g, p, go = _native.gaussian_problem(N, B)
    f = lambda a: torch.from_numpy(a).to(device="cuda", dtype=torch.float32)  # noqa: E731
    return f(p).requires_grad_(), f(g).requires_grad_(), f(go)


class NullNew(torch.autograd.Function):
    """No work: fresh outputs with new_empty (as the op allocates)."""

    @staticmethod
    def forward(ctx, a, b):
        return a.new_empty(a.shape[0])

    @staticmethod
    def backward(ctx, g):
        return g.new_empty(B, 3), g.new_empty(N, 10)


def c_apply(cls):
    c = torch._C._FunctionBase.__dict__.get("apply")
    if c is None or torch.autograd.Function.__dict__.get("apply") is c:
        return cls.apply
    return c.__get__(None, cls)


def mt(on):
    """Setter of torch.autograd's multithreading (off: the backward runs on the calling thread)."""
    return lambda: torch._C._set_multithreading_enabled(on)


class Probe(torch.autograd.Function):
    """ptxflow/torch.py's fast path (forward, _forward_cuda, backward, _backward_cuda) with a time
    stamp between stages; keep in step with it. `Probe.empty` = True: the same stamps around
    no work (fresh outputs only), the engine's own stages."""

    stamps = []
    empty = False

    @staticmethod
    def forward(ctx, points, gaussians, normalised=False, diag_eps=1e-6):
        st = Probe.stamps
        st.append(ns())  # 1 forward entered
        if Probe.empty:
            st.extend((ns(), ns()))  # 2, 3
            v = points.new_empty(B)
            st.append(ns())  # 4: the allocation, as the op's values
            st.extend((ns(), ns()))  # 5, 6
            return v
        ok = False
        if (isinstance(points, pt._Tensor) and isinstance(gaussians, pt._Tensor)
                and type(diag_eps) is float and 0.0 <= diag_eps < pt._INF):
            index, dtype = points.get_device(), points.dtype
            if (index >= 0 and gaussians.get_device() == index and gaussians.dtype is dtype
                    and points.is_contiguous() and gaussians.is_contiguous()):
                ps, gs = points.shape, gaussians.shape
                plan = pt._PLANS.get((index, dtype, ps, gs)) or pt._plan(index, dtype, ps, gs)
                pp, gp = points.data_ptr(), gaussians.data_ptr()
                ok = plan is not None and not (pp | gp) & 15
        if not ok:
            raise RuntimeError("probe: fast path only")
        normalised = bool(normalised)
        st.append(ns())  # 2 checks + plan lookup
        stream = pt._raw_stream(index)
        need = ctx.needs_input_grad
        b = plan.b
        if not (plan.fold and (need[0] or need[1])):
            raise RuntimeError("probe: folded workspace only")
        if plan.pool_ok and not pt._capturing():
            pool = plan.pools.get(stream)
            if pool is None:
                pool = plan.pools[stream] = pt._WorkPool(plan.fwd_len + plan.bwd_len)
            work = pool.take(points)
        else:
            pool, work = None, points.new_empty(plan.fwd_len + plan.bwd_len)
        st.append(ns())  # 3 stream + workspace (pool or new_empty)
        wp = work.data_ptr()
        bwp = wp + plan.bwd_off
        values = points.new_empty(b)
        st.append(ns())  # 4 values new_empty
        plan.native.forward(plan.double, stream, plan.n, b, normalised, diag_eps, gp, pp, wp,
                            values.data_ptr())
        st.append(ns())  # 5 native forward
        ctx.save_for_backward(points)
        ctx.pf = (plan, work, wp, bwp, normalised, stream, pool, pp)
        ctx.grads = (points.new_empty(b, 3) if need[0] else None,
                     points.new_empty(plan.n, 10) if need[1] else None) if pt.EARLY_GRADS else None
        st.append(ns())  # 6 save (+ early gradients)
        return values

    @staticmethod
    def backward(ctx, grad_out):
        st = Probe.stamps
        st.append(ns())  # 8 backward entered
        if Probe.empty:
            st.extend((ns(), ns()))  # 9, 10
            r = (grad_out.new_empty(B, 3), grad_out.new_empty(N, 10), None, None)
            st.append(ns())  # 11: the allocations, as the op's gradients
            st.extend((ns(), ns()))  # 12, 13
            return r
        if pt._grad_enabled():
            raise RuntimeError("probe: fast path only")
        plan, work, wp, bwp, normalised, stream, pool, pp = ctx.pf
        points, = ctx.saved_tensors
        st.append(ns())  # 9 ctx.pf + saved_tensors
        go = grad_out.data_ptr()
        if not (grad_out.dtype is plan.dtype and grad_out.is_contiguous() and not go & 15):
            raise RuntimeError("probe: fast path only")
        need = ctx.needs_input_grad
        b, n = plan.b, plan.n
        st.append(ns())  # 10 grad_out check + needs_input_grad
        grads = ctx.grads
        if grads is not None:
            ctx.grads = None
            grad_points, grad_gaussians = grads
        else:
            grad_points = points.new_empty(b, 3) if need[0] else None
            grad_gaussians = points.new_empty(n, 10) if need[1] else None
        st.append(ns())  # 11 two gradients (or the forward's)
        now = pt._raw_stream(plan.index)
        if pool is not None and (now != stream or pt._capturing()):
            pool.drop(work)
        st.append(ns())  # 12 stream + pool check
        plan.native.backward(plan.double, now, n, b, normalised, wp, pp, go, bwp,
                             None if grad_points is None else grad_points.data_ptr(),
                             None if grad_gaussians is None else grad_gaussians.data_ptr())
        st.append(ns())  # 13 native backward
        return grad_points, grad_gaussians, None, None


STAGES = [
    "call -> forward entered (apply: ctx, inputs)",
    "checks + plan lookup (types, device, dtype, contiguity, shapes by key, alignment)",
    "raw stream + needs_input_grad + workspace (pool take or new_empty)",
    "values new_empty",
    "native forward (PyO3 + prepare, forward, reduce launches)",
    "save_for_backward + ctx.pf (+ gradients when allocated in the forward)",
    "forward returned -> apply returned (outputs wrapped, node)",
    "autograd.grad called -> backward entered (engine, device thread)",
    "ctx.pf + saved_tensors",
    "grad_out check + needs_input_grad",
    "two gradients new_empty (or the forward's)",
    "raw stream + pool check",
    "native backward (PyO3 + backward, reduce, finish launches)",
    "backward returned -> autograd.grad returned (engine, hand-back)",
]
OWN = [1, 2, 3, 4, 5, 8, 9, 10, 11, 12]  # stages that are ptxflow's code (or its allocations)


def breakdown(p, g, go, apply, empty, iters):
    st = Probe.stamps
    Probe.empty = empty
    rows = []
    for i in range(iters + 100):
        st.clear()
        t0 = ns()
        f = apply(p, g, False, 1e-6)
        st.append(ns())  # 7 apply returned
        grad(f, (p, g), go)
        t14 = ns()
        del f
        if i >= 100:
            s = [t0] + st + [t14]
            rows.append([s[k + 1] - s[k] for k in range(len(s) - 1)])
    torch.cuda.synchronize()
    Probe.empty = False
    return rows


def stage_table(p, g, go):
    apply = c_apply(Probe)
    rows = {False: [], True: [], "early": []}
    for _ in range(3):  # interleaved: op, empty, op with early gradients, op, ...
        for mode in (False, True, "early"):
            pt.EARLY_GRADS = mode == "early"
            rows[mode] += breakdown(p, g, go, apply, mode is True, 500)
    pt.EARLY_GRADS = False
    med = {e: [statistics.median(c) / 1000 for c in zip(*rows[e])] for e in rows}
    tot = {e: statistics.median([sum(r) for r in rows[e]]) / 1000 for e in rows}
    print(f"== stage breakdown, median us per stage over {len(rows[False])} calls each "
          f"(op's fast path | the empty Function with the same stamps | the op with EARLY_GRADS);"
          f" median totals {tot[False]:.1f} | {tot[True]:.1f} | {tot['early']:.1f} us", flush=True)
    for k, name in enumerate(STAGES):
        print(f"  {med[False][k]:8.2f} | {med[True][k]:8.2f} | {med['early'][k]:8.2f} us  {name}")
    own = sum(med[False][k] for k in OWN)
    eng = [k for k in range(len(STAGES)) if k not in OWN]
    print(f"  ptxflow's own stages: {own:.1f} us (native calls {med[False][4] + med[False][12]:.1f}); "
          f"engine stages: op {sum(med[False][k] for k in eng):.1f} us, empty Function "
          f"{sum(med[True][k] for k in eng):.1f} us", flush=True)
    return own


def graph_replay(step):
    """Wall us per replay of a CUDA graph of `step` (no host work per call at all)."""
    sg = torch.cuda.Stream()
    sg.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(sg):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(sg)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return block(graph.replay, 400)


def device_time(step, calls=50):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            step()
        torch.cuda.synchronize()
    total, kernels = 0.0, {}
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None)
        if t is None:
            t = getattr(e, "self_cuda_time_total", 0.0)
        if t:
            total += t
            kernels[e.key] = (t / calls, e.count // calls)
    for kname, (t, c) in sorted(kernels.items(), key=lambda kv: -kv[1][0]):
        print(f"    {t:8.2f} us x{c} {kname[:90]}")
    return total / calls


def main():
    print("device", torch.cuda.get_device_name(0), "torch", torch.__version__,
          "python", sys.version.split()[0], "; gc enabled", gc.isenabled(), "; cpu",
          os.cpu_count(), "logical cores", flush=True)
    fa = torch.autograd.Function.__dict__.get("apply")
    print("torch.autograd.Function.apply is",
          "C++" if fa is torch._C._FunctionBase.__dict__.get("apply") else "Python",
          "; ptxflow.torch calls", "the C++ apply" if pt._apply is not pt.GaussianField.apply
          else "GaussianField.apply", flush=True)
    p, g, go = problem()
    pd, gd = p.detach(), g.detach()
    step = lambda: grad(pt.gaussian_field(p, g), (p, g), go)  # noqa: E731
    step()
    plan = pt._PLANS[(0, torch.float32, p.shape, g.shape)]
    k = plan.native
    os.environ["PTXFLOW_PY_NO_LAUNCH"] = "1"
    k0 = _native.CudaGaussian(0)
    del os.environ["PTXFLOW_PY_NO_LAUNCH"]
    assert k0.no_launch and not k.no_launch
    def pool(on):
        def set_():
            plan.pool_ok = on and plan.fold
        return set_

    def all_opt_ins(on):
        def set_():
            pool(on)()
            early(on)()
            if GRAPH_RUNS:
                graphs(on)()
        return set_

    def early(on):
        def set_():
            pt.EARLY_GRADS = on
        return set_

    def graphs(on):
        def set_():
            k.graphs = on
        return set_

    def native(kk):
        def set_():
            plan.native = kk
        return set_

    null_c, null_py = c_apply(NullNew), NullNew.apply
    pc, gc_, goc = (t.detach().cpu().requires_grad_(t.requires_grad) for t in (p, g, go))
    x = torch.zeros(B, device="cuda")

    def chain():
        grad(p.sum(1) + g.sum(), (p, g), go)

    variants = [
        (FLOOR, lambda: grad(null_c(p, g), (p, g), go), None, None),
        (OP, step, None, None),
        ("floor: empty Function, Function.apply, fwd+bwd",
         lambda: grad(null_py(p, g), (p, g), go), None, None),
        (POOL, step, pool(True), pool(False)),
        (OFF, step, native(k0), native(k)),
        (EARLY, step, early(True), early(False)),
    ]
    if GRAPH_RUNS:
        variants.append((GRAPHS, step, graphs(True), graphs(False)))
    variants.append((ALL, step, all_opt_ins(True), all_opt_ins(False)))
    if old is not None:
        ostep = lambda: grad(old.gaussian_field(p, g), (p, g), go)  # noqa: E731
        ostep()
        variants.append(("session 5's op fwd+bwd (ptxflow.torch_s5)", ostep, None, None))
    variants += [
        (FLOOR_MT, lambda: grad(null_c(p, g), (p, g), go), mt(False), mt(True)),
        (OP_MT, step, mt(False), mt(True)),
        ("floor: empty Function on CPU tensors, fwd+bwd",
         lambda: grad(null_c(pc, gc_), (pc, gc_), goc), None, None),
        ("plain op chain y = p.sum(1) + g.sum(), fwd+bwd (3 kernels + engine)", chain, None,
         None),
        ("op forward only (inputs need no grad)", lambda: pt.gaussian_field(pd, gd), None, None),
        ("floor: empty Function forward only (inputs need no grad)",
         lambda: null_c(pd, gd), None, None),
        ("x.add_(1) (one PyTorch kernel)", lambda: x.add_(1), None, None),
        ("torch.empty(500, device=cuda)", lambda: torch.empty(B, device="cuda"), None, None),
    ]
    med = interleaved("per call, back to back", variants)

    fwd_len, bwd_len = plan.fwd_len, plan.bwd_len
    work, vals = pd.new_empty(fwd_len + bwd_len), pd.new_empty(B)
    gp_, gg_ = pd.new_empty(B, 3), pd.new_empty(N, 10)
    s = pt._raw_stream(0)
    wp = work.data_ptr()
    fargs = (False, s, N, B, False, 1e-6, gd.data_ptr(), pd.data_ptr(), wp, vals.data_ptr())
    bargs = (False, s, N, B, False, wp, pd.data_ptr(), go.data_ptr(), wp + plan.bwd_off,
             gp_.data_ptr(), gg_.data_ptr())
    kg = _native.CudaGaussian(0)
    kg.graphs = True
    three = lambda: (x.add_(1), x.add_(1), x.add_(1))  # noqa: E731
    s3 = torch.cuda.Stream()
    s3.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s3):
        three()
    torch.cuda.current_stream().wait_stream(s3)
    g3 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g3):
        three()
    print("== single calls, host us (median of 200): device idle | device busy", flush=True)
    for name, fn in [
        ("native forward (PyO3 + 3 launches)", lambda: k.forward(*fargs)),
        ("native backward (PyO3 + 3 launches)", lambda: k.backward(*bargs)),
    ] + ([
        ("native forward, one graph replay", lambda: kg.forward(*fargs)),
        ("native backward, one graph replay", lambda: kg.backward(*bargs)),
    ] if GRAPH_RUNS else []) + [
        ("native forward, launches off", lambda: k0.forward(*fargs)),
        ("native backward, launches off", lambda: k0.backward(*bargs)),
        ("x.add_(1) (one PyTorch launch)", lambda: x.add_(1)),
        ("three x.add_(1)", three),
        ("CUDAGraph.replay() of three x.add_(1)", g3.replay),
        ("torch.empty(500, device=cuda)", lambda: torch.empty(B, device="cuda")),
        ("p.new_empty(500)", lambda: pd.new_empty(B)),
    ]:
        print(f"  {name:52s} {single(fn, False):8.2f} | {single(fn, True):8.2f}", flush=True)

    own = stage_table(p, g, go)
    print("graph stats (recordings, replays, replays with moved arguments, direct launches, last "
          "skip): op's device", k.graph_stats(), "; single-call device", kg.graph_stats(),
          flush=True)

    replay = graph_replay(step)

    # Device time last: the profiler (CUPTI) may leave the driver slower afterwards.
    dev = device_time(step)
    wall, floor, off = med[OP], med[FLOOR], med[OFF]
    floor_mt, wall_mt = med[FLOOR_MT], med[OP_MT]
    print(f"overhead N x B = {N} x {B}: wall {wall:.1f} us/call, device time {dev:.1f} us/call, "
          f"binding overhead (wall - device time, the issue's definition) {wall - dev:.1f} "
          f"us/call (target < 20)", flush=True)
    print(f"floor: empty autograd.Function fwd+bwd {floor:.1f} us/call on this host (the same "
          f"apply and engine path); ptxflow's share = wall - floor = {wall - floor:.1f} us/call "
          f"(stage sum of ptxflow's own code {own:.1f}); launches off {off:.1f} us/call",
          flush=True)
    print(f"multithreading off (backward on the calling thread): floor {floor_mt:.1f}, op "
          f"{wall_mt:.1f} us/call, ptxflow's share {wall_mt - floor_mt:.1f}, wall - device time "
          f"{wall_mt - dev:.1f}", flush=True)
    if GRAPH_RUNS:
        print(f"with CUDA graph replays (PTXFLOW_PY_GRAPHS=1): {med[GRAPHS]:.1f} us/call, share "
              f"{med[GRAPHS] - floor:.1f}, wall - device time {med[GRAPHS] - dev:.1f}", flush=True)
    for name in (POOL, EARLY, ALL):
        print(f"{name}: {med[name]:.1f} us/call, share {med[name] - floor:.1f}, wall - device "
              f"time {med[name] - dev:.1f}", flush=True)
    if old is not None:
        o = med["session 5's op fwd+bwd (ptxflow.torch_s5)"]
        print(f"session 5's op {o:.1f} us/call: share {o - floor:.1f} -> {wall - floor:.1f} now",
              flush=True)
    print(f"CUDA graph of the op's fwd+bwd: {replay:.1f} us/replay, {replay - dev:.1f} over the "
          f"kernels' device time", flush=True)


if __name__ == "__main__":
    main()

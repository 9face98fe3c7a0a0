"""A few forward+backward calls of ptxflow.torch on CUDA tensors, small enough to run under
compute-sanitizer (prints PASS/FAIL; exits 1 on a wrong result):

compute-sanitizer --tool memcheck --error-exitcode 9 python memcheck_op.py

Covers the launch paths a call can take: direct launches and CUDA graph replays (recorded, then
replayed with the buffers moved: new gradient, value and workspace tensors each call), the pooled
and the unpooled workspace, both float types, one or both gradients.
"""
import sys

import torch

import ptxflow.torch as pt
from ptxflow import torch_reference as ref

bad = 0
for graphs in (False, True):
    for dtype, tol in ((torch.float32, 1e-5), (torch.float64, 1e-12)):
        gen = torch.Generator().manual_seed(7)
        p = ((torch.rand(300, 3, generator=gen, dtype=torch.float64) - 0.5) * 4).to(dtype)
        g = torch.zeros(200, 10, dtype=torch.float64)
        g[:, 0:3] = (torch.rand(200, 3, generator=gen, dtype=torch.float64) - 0.5) * 3
        g[:, [3, 5, 8]] = 0.4 + 0.8 * torch.rand(200, 3, generator=gen, dtype=torch.float64)
        g[:, [4, 6, 7]] = 0.3 * torch.randn(200, 3, generator=gen, dtype=torch.float64)
        g[:, 9] = torch.randn(200, generator=gen, dtype=torch.float64)
        g = g.to(dtype)
        go = torch.randn(300, generator=gen, dtype=torch.float64).to(dtype)
        p64, g64 = p.double().requires_grad_(), g.double().requires_grad_()
        f64 = ref.field(p64, g64)
        want = (f64,) + torch.autograd.grad(f64, (p64, g64), go.double())
        pc, gc, goc = p.cuda().requires_grad_(), g.cuda().requires_grad_(), go.cuda()
        pt._native_device(0).graphs = graphs
        keep = []
        worst = 0.0
        for i in range(6):
            if i == 3:
                pt._PLANS.clear()  # a new plan: unpooled first call, then pooled again
            f = pt.gaussian_field(pc, gc)
            got = (f,) + torch.autograd.grad(f, (pc, gc), goc)
            keep.append(got)  # keeps the outputs alive: the next call's buffers move
            worst = max(worst, *(float((a.double().cpu() - w).abs().max() / w.abs().max())
                                 for a, w in zip(got, want)))
        (dg,) = torch.autograd.grad(pt.gaussian_field(pc.detach(), gc), gc, goc)
        worst = max(worst, float((dg.double().cpu() - want[2]).abs().max() / want[2].abs().max()))
        ok = worst < tol
        bad += not ok
        print(f"{'PASS' if ok else 'FAIL'} graphs={graphs} {dtype}: worst rel {worst:.2e}; "
              f"graph stats {pt._native_device(0).graph_stats()}", flush=True)
torch.cuda.synchronize()
sys.exit(1 if bad else 0)

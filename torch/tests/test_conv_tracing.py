# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""The operators under PyTorch's tracers and compilers: torch.library.opcheck (schema, fake
kernels, autograd registration, AOT dispatch), torch.compile (AOTAutograd, forces through the
double backward), torch.export, TorchScript."""

import pytest
import torch
from problems import random_inputs, uvu_tp

import clebsch_torch


@pytest.fixture(scope="module")
def case():
    tp = uvu_tp("3x0e+2x1o", "0e+1o+2e", 2)
    x, y, w, s, r = random_inputs(tp, num_nodes=6, num_edges=20, seed=11)
    return clebsch_torch.problem_from_e3nn(tp), x, y, w, s, r


def energy_and_forces(x, y, w, s, r, problem: str):
    """A toy potential: E = sum(out^2); 'forces' = -dE/dy, kept differentiable."""
    y = y.detach().requires_grad_()
    out = torch.ops.clebsch.conv(x, y, w, s, r, x.shape[0], problem)
    e = (out * out).sum()
    (dy,) = torch.autograd.grad(e, [y], create_graph=True)
    return e, -dy


def test_opcheck(case):
    problem, x, y, w, s, r = case
    args = [t.clone().requires_grad_() for t in (x, y, w)]
    torch.library.opcheck(torch.ops.clebsch.conv.default, (*args, s, r, x.shape[0], problem))
    g = torch.randn_like(torch.ops.clebsch.conv(x, y, w, s, r, x.shape[0], problem))
    torch.library.opcheck(
        torch.ops.clebsch.conv_backward.default,
        (*[t.clone().requires_grad_() for t in (x, y, w)], s, r, g.requires_grad_(), problem),
    )
    torch.library.opcheck(
        torch.ops.clebsch.conv_double_backward.default,
        (x, y, w, s, r, g.detach(), x, None, w, problem),
    )


def test_compile_fullgraph_forward_and_backward(case):
    # One graph (fullgraph), traced by AOTAutograd through the fake kernels: the joint graph
    # holds clebsch::conv and clebsch::conv_backward.
    problem, x, y, w, s, r = case
    from torch._dynamo.testing import CompileCounterWithBackend

    def f(x, y, w):
        return torch.ops.clebsch.conv(x, y, w, s, r, x.shape[0], problem)

    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(f, backend=counter, fullgraph=True)
    args = [t.clone().requires_grad_() for t in (x, y, w)]
    out = compiled(*args)
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, args, g)
    want = torch.autograd.grad(f(*args), args, g)
    assert counter.frame_count == 1
    assert any("clebsch.conv" in str(n.target) for n in counter.graphs[0].graph.nodes)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_compile_aot_eager_with_force_loss(case):
    problem, x, y, w, s, r = case
    wp = w.clone().requires_grad_()

    def loss(wp):
        e, f = energy_and_forces(x, y, wp, s, r, problem)
        return e + (f * f).sum()

    eager = torch.autograd.grad(loss(wp), [wp])[0]
    compiled = torch.compile(loss, backend="aot_eager", fullgraph=False)
    got = torch.autograd.grad(compiled(wp), [wp])[0]
    torch.testing.assert_close(got, eager, rtol=1e-12, atol=1e-12)


def test_compile_dynamic_shapes(case):
    problem, x, y, w, s, r = case

    def f(x, y, w, s, r):
        return torch.ops.clebsch.conv(x, y, w, s, r, x.shape[0], problem).sum(0)

    compiled = torch.compile(f, backend="aot_eager", dynamic=True, fullgraph=True)
    for e in (20, 13):
        torch.testing.assert_close(
            compiled(x, y[:e], w[:e], s[:e], r[:e]), f(x, y[:e], w[:e], s[:e], r[:e])
        )


class Conv(torch.nn.Module):
    def __init__(self, problem: str):
        super().__init__()
        self.problem = problem

    def forward(self, x, y, w, s, r):
        return torch.ops.clebsch.conv(x, y, w, s, r, x.shape[0], self.problem)


def test_export(case):
    problem, x, y, w, s, r = case
    ep = torch.export.export(Conv(problem), (x, y, w, s, r))
    assert "clebsch.conv" in str(ep.graph)
    torch.testing.assert_close(ep.module()(x, y, w, s, r), Conv(problem)(x, y, w, s, r))


def test_torchscript_forces_and_their_gradient(case):
    problem, x, y, w, s, r = case

    class Model(torch.nn.Module):
        def __init__(self, problem: str):
            super().__init__()
            self.problem = problem

        def forward(self, x, y, w, s, r):
            out = torch.ops.clebsch.conv(x, y, w, s, r, x.shape[0], self.problem)
            e = (out * out).sum()
            grads = torch.autograd.grad([e], [y], create_graph=True)
            dy = grads[0]
            assert dy is not None
            return e + (dy * dy).sum()

    scripted = torch.jit.script(Model(problem))
    wp = w.clone().requires_grad_()
    yp = y.clone().requires_grad_()
    got = torch.autograd.grad(scripted(x, yp, wp, s, r), [wp])[0]
    want = torch.autograd.grad(Model(problem)(x, yp, wp, s, r), [wp])[0]
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)

# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Autograd of the operators against finite differences (gradcheck, gradgradcheck, float64),
and their refusals."""

import pytest
import torch
from problems import dim_out, random_inputs, uvu_tp

import clebsch_torch

PROBLEMS = {
    "mace": ("3x0e+2x1o", "0e+1o+2e", 2, ""),
    "parity": ("2x0o+2x1e", "0e+1o", 1, ""),
    "mixed_uvw": ("2x0e+2x1o", "0e+1o", 1, "3x0e+1x1o"),
}


@pytest.fixture(params=sorted(PROBLEMS))
def case(request):
    tp = uvu_tp(*PROBLEMS[request.param])
    # 5 nodes (one receives nothing), 12 edges: repeated pairs and self-loops likely.
    x, y, w, s, r = random_inputs(tp, num_nodes=5, num_edges=12, seed=len(request.param))
    return clebsch_torch.problem_from_e3nn(tp), (x, y, w), (s, r)


def test_gradcheck(case):
    problem, xyw, (s, r) = case
    args = [t.clone().requires_grad_() for t in xyw]

    def f(x, y, w):
        return clebsch_torch.conv(x, y, w, s, r, x.shape[0], problem)

    assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-8, rtol=1e-6)


def test_gradgradcheck(case):
    problem, xyw, (s, r) = case
    args = [t.clone().requires_grad_() for t in xyw]

    def f(x, y, w):
        return clebsch_torch.conv(x, y, w, s, r, x.shape[0], problem)

    assert torch.autograd.gradgradcheck(f, args, eps=1e-6, atol=1e-8, rtol=1e-6)


def test_backward_operator_gradcheck(case):
    # The backward operator alone, differentiated in (x, y, w, grad_out): its derivative is the
    # double backward operator.
    problem, (x, y, w), (s, r) = case
    g = torch.randn(x.shape[0], dim_out(problem), dtype=x.dtype)
    args = [t.clone().requires_grad_() for t in (x, y, w, g)]

    def f(x, y, w, g):
        return torch.ops.clebsch.conv_backward(x, y, w, s, r, g, problem)

    assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-8, rtol=1e-6)


def test_more_receivers_than_senders_and_int32_indices(case):
    problem, (x, y, w), (s, r) = case
    out64 = clebsch_torch.conv(x, y, w, s, r, x.shape[0] + 3, problem)
    out32 = clebsch_torch.conv(x, y, w, s.int(), r.int(), x.shape[0] + 3, problem)
    assert out64.shape[0] == x.shape[0] + 3
    assert torch.equal(out64, out32)
    assert out64[x.shape[0] :].abs().max() == 0


def test_no_edges(case):
    problem, (x, y, w), _ = case
    none = torch.zeros(0, dtype=torch.long)
    xr = x.clone().requires_grad_()
    out = clebsch_torch.conv(xr, y[:0], w[:0], none, none, x.shape[0], problem)
    assert out.abs().max() == 0
    (gx,) = torch.autograd.grad(out.sum(), xr)
    assert gx.abs().max() == 0


def test_refusals_name_the_input(case):
    problem, (x, y, w), (s, r) = case
    n = x.shape[0]
    with pytest.raises(RuntimeError, match="x must be"):
        clebsch_torch.conv(x[:, :-1], y, w, s, r, n, problem)
    with pytest.raises(RuntimeError, match="w must be"):
        clebsch_torch.conv(x, y, w[:, :-1], s, r, n, problem)
    with pytest.raises(RuntimeError, match="one dtype"):
        clebsch_torch.conv(x.float(), y, w, s, r, n, problem)
    bad = s.clone()
    bad[3] = n + 10
    with pytest.raises(RuntimeError, match=str(n + 10)):
        clebsch_torch.conv(x, y, w, bad, r, n, problem)
    with pytest.raises(RuntimeError, match="missing field"):
        clebsch_torch.conv(x, y, w, s, r, n, "{}")
    with pytest.raises(RuntimeError, match="not valid JSON"):
        clebsch_torch.conv(x, y, w, s, r, n, "{")


def test_cuda_says_not_built(case):
    # A build without its CUDA path (CLEBSCH_TORCH_CUDA=OFF) refuses CUDA tensors by name; the
    # CUDA path itself is test_conv_cuda.py's.
    if "cuda" in torch.ops.clebsch.build_features():
        pytest.skip("this build has the CUDA path (tested by test_conv_cuda.py)")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    problem, (x, y, w), (s, r) = case
    with pytest.raises(RuntimeError, match="has no CUDA path"):
        clebsch_torch.conv(x.cuda(), y.cuda(), w.cuda(), s.cuda(), r.cuda(), x.shape[0], problem)

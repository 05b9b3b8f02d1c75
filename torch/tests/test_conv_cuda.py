# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""The operators' device path (the generated kernels of kernels/) against the CPU host path and
e3nn: forward, backward and double backward, autograd to second order, gradcheck/gradgradcheck
(float64), bitwise repeatability, edge cases and refusals; on a GPU also the current stream and
CUDA graph capture. Targets: device_targets.py (real CUDA when present, else the emulated
backend; the skipped one says why)."""

import os

import pytest
import torch
from device_targets import TARGETS, make_target
from problems import dim_out, e3nn_conv, random_inputs, uvu_tp

import clebsch_torch

PROBLEMS = {
    "mace": ("3x0e+2x1o", "0e+1o+2e", 2),
    "parity": ("2x0o+2x1e", "0e+1o", 1),
    # Multiplicities above a warp's 32 lanes (chunks), l up to 3.
    "wide": ("40x0e+33x1o", "0e+1o+2e+3o", 3),
}
# Relative to the largest reference entry; float64 is summation-order round-off only.
TOL = {torch.float64: 1e-12, torch.float32: 2e-5}


@pytest.fixture(params=TARGETS)
def target(request):
    return make_target(request.param)


def case(name, num_nodes=9, num_edges=60, seed=3, dtype=torch.float64):
    tp = uvu_tp(*PROBLEMS[name])
    problem = clebsch_torch.problem_from_e3nn(tp)
    x, y, w, s, r = random_inputs(tp, num_nodes, num_edges, seed=seed, dtype=dtype)
    g = torch.Generator().manual_seed(seed + 100)
    grad = torch.randn(num_nodes, dim_out(problem), generator=g, dtype=dtype)
    cot = [torch.randn(t.shape, generator=g, dtype=dtype) for t in (x, y, w)]
    return tp, problem, (x, y, w, s, r), grad, cot


def all_outputs(problem, x, y, w, s, r, grad, dx, dy, dw):
    """out, (gx, gy, gw), (ggx, ggy, ggw, gg) of the three operators."""
    out = torch.ops.clebsch.conv(x, y, w, s, r, grad.shape[0], problem)
    back = torch.ops.clebsch.conv_backward(x, y, w, s, r, grad, problem)
    dbl = torch.ops.clebsch.conv_double_backward(x, y, w, s, r, grad, dx, dy, dw, problem)
    return [out, *back, *dbl]


NAMES = ["out", "gx", "gy", "gw", "dbl.gx", "dbl.gy", "dbl.gw", "dbl.g_grad_out"]


def assert_close(got, want, tol, what):
    got = got.detach().cpu().to(want.dtype)
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    scale = max(1.0, float(want.abs().max())) if want.numel() else 1.0
    err = float((got - want).abs().max()) if want.numel() else 0.0
    assert err <= tol * scale, f"{what}: max deviation {err:.3e} (scale {scale:.3e})"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_three_operators_match_the_cpu_path(target, name, dtype):
    _, problem, (x, y, w, s, r), grad, (dx, dy, dw) = case(name, dtype=dtype)
    want = all_outputs(problem, x, y, w, s, r, grad, dx, dy, dw)
    with target.active():
        got = all_outputs(problem, *target.to(x, y, w, s, r, grad, dx, dy, dw))
    assert all(t.device.type == target.device.type for t in got)
    assert float(want[0].abs().max()) > 0.1  # a real result, not zeros
    for n, a, b in zip(NAMES, got, want):
        assert_close(a, b, TOL[dtype], f"{target.name} {name} {n}")


def test_double_backward_with_absent_cotangents(target):
    # Autograd passes undefined cotangents for unused gradients: they count as zero.
    _, problem, (x, y, w, s, r), grad, (dx, _, _) = case("mace")
    want = torch.ops.clebsch.conv_double_backward(x, y, w, s, r, grad, dx, None, None, problem)
    with target.active():
        args = target.to(x, y, w, s, r, grad, dx)
        got = torch.ops.clebsch.conv_double_backward(*args, None, None, problem)
    for n, a, b in zip(NAMES[4:], got, want):
        assert_close(a, b, TOL[torch.float64], f"{target.name} {n}")


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_autograd_to_second_order_matches_e3nn(target, name):
    # A force-loss-like use: first derivatives with create_graph, then the gradient of a loss
    # of them, through conv_autograd.cpp's backward and double backward on the device path.
    tp, problem, (x, y, w, s, r), grad, (vx, vy, vw) = case(name)
    n = x.shape[0]

    def second_order(conv, x, y, w, grad, vx, vy, vw):
        xyw = [t.clone().requires_grad_() for t in (x, y, w)]
        out = conv(*xyw)
        first = torch.autograd.grad((out * grad).sum(), xyw, create_graph=True)
        loss = sum((f * v).sum() for f, v in zip(first, (vx, vy, vw)))
        return [out.detach(), *(f.detach() for f in first), *torch.autograd.grad(loss, xyw)]

    want = second_order(lambda a, b, c: e3nn_conv(tp, a, b, c, s, r, n), x, y, w, grad, vx, vy, vw)
    with target.active():
        sd, rd = target.to(s, r)
        got = second_order(
            lambda a, b, c: clebsch_torch.conv(a, b, c, sd, rd, n, problem),
            *target.to(x, y, w, grad, vx, vy, vw),
        )
    for k, (a, b) in enumerate(zip(got, want)):
        assert_close(a, b, 1e-11, f"{target.name} {name} output {k} against e3nn")


def test_gradcheck_and_gradgradcheck(target):
    _, problem, (x, y, w, s, r), _, _ = case("mace", num_nodes=5, num_edges=12, seed=5)
    with target.active():
        x, y, w, sd, rd = target.to(x, y, w, s, r)
        args = [t.clone().requires_grad_() for t in (x, y, w)]

        def f(x, y, w):
            return clebsch_torch.conv(x, y, w, sd, rd, x.shape[0], problem)

        assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-8, rtol=1e-6)
        assert torch.autograd.gradgradcheck(f, args, eps=1e-6, atol=1e-8, rtol=1e-6)


def test_backward_operator_gradcheck(target):
    _, problem, (x, y, w, s, r), grad, _ = case("parity", num_nodes=5, num_edges=12, seed=6)
    with target.active():
        x, y, w, grad, sd, rd = target.to(x, y, w, grad, s, r)
        args = [t.clone().requires_grad_() for t in (x, y, w, grad)]

        def f(x, y, w, g):
            return torch.ops.clebsch.conv_backward(x, y, w, sd, rd, g, problem)

        assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-8, rtol=1e-6)


def test_bitwise_repeatable_and_independent_of_the_edge_order(target):
    _, problem, (x, y, w, s, r), grad, (dx, dy, dw) = case("wide", num_edges=200)
    perm = torch.randperm(s.shape[0], generator=torch.Generator().manual_seed(1))
    with target.active():
        args = target.to(x, y, w, s, r, grad, dx, dy, dw)
        first = all_outputs(problem, *args)
        second = all_outputs(problem, *args)
        p = target.to(perm)
        xs, ys, ws, ss, rs, gs, dxs, dys, dws = args
        shuffled = all_outputs(problem, xs, ys[p], ws[p], ss[p], rs[p], gs, dxs, dys[p], dws[p])
    for n, a, b in zip(NAMES, first, second):
        assert torch.equal(a, b), f"{target.name} {n}: two identical calls differ"
    # Per-edge outputs follow the permutation; per-node sums agree to round-off.
    for k, (a, b) in enumerate(zip(shuffled, first)):
        if NAMES[k] in ("gy", "gw", "dbl.gy", "dbl.gw"):
            b = b[p]
        assert_close(a, b.cpu(), 1e-12, f"{target.name} {NAMES[k]} with shuffled edges")


def test_int32_indices_empty_rows_and_no_edges(target):
    _, problem, (x, y, w, s, r), grad, (dx, dy, dw) = case("mace")
    n = x.shape[0]
    want = torch.ops.clebsch.conv(x, y, w, s, r, n + 3, problem)
    with target.active():
        xd, yd, wd, sd, rd = target.to(x, y, w, s, r)
        out32 = torch.ops.clebsch.conv(xd, yd, wd, sd.int(), rd.int(), n + 3, problem)
        none = target.to(torch.zeros(0, dtype=torch.long))
        empty = all_outputs(
            problem,
            xd,
            yd[:0],
            wd[:0],
            none,
            none,
            *target.to(grad, dx),
            *target.to(dy[:0], dw[:0]),
        )
    assert_close(out32, want, 1e-12, f"{target.name} int32 indices, 3 extra receivers")
    assert float(out32[n - 1 :].abs().max()) == 0  # rows without edges are zero
    for name, t in zip(NAMES, empty):
        assert t.numel() == 0 or float(t.abs().max()) == 0, f"{name} without edges is not zero"


def test_refusals_name_the_input(target):
    _, problem, (x, y, w, s, r), _, _ = case("mace")
    with target.active():
        xd, yd, wd, sd, rd = target.to(x, y, w, s, r)
        bad = sd.clone()
        bad[3] = x.shape[0]
        with pytest.raises(RuntimeError, match=r"sender indices must lie in \[0, 9\)"):
            torch.ops.clebsch.conv(xd, yd, wd, bad, rd, x.shape[0], problem)
        with pytest.raises(RuntimeError, match=r"receiver indices must lie in \[0, 4\)"):
            torch.ops.clebsch.conv(xd, yd, wd, sd, rd, 4, problem)
        # The kernels run only uvu instructions: a mixed problem is refused by name.
        mixed = uvu_tp("2x0e+2x1o", "0e+1o", 1, "3x0e+1x1o")
        mp = clebsch_torch.problem_from_e3nn(mixed)
        xm, ym, wm, sm, rm = target.to(*random_inputs(mixed, 5, 12, seed=1))
        with pytest.raises(RuntimeError, match="support only 'uvu' instructions"):
            torch.ops.clebsch.conv(xm, ym, wm, sm, rm, 5, mp)
        if target.name == "cuda":
            with pytest.raises(RuntimeError, match="y is on cpu but x is on cuda"):
                torch.ops.clebsch.conv(xd, y, wd, sd, rd, x.shape[0], problem)


def test_emulated_switch_is_read_at_every_call(target):
    if target.name != "emulated":
        pytest.skip("the emulated target's switch (CLEBSCH_TORCH_CPU_BACKEND)")
    _, problem, (x, y, w, s, r), _, _ = case("mace")
    old = os.environ.get("CLEBSCH_TORCH_CPU_BACKEND")
    os.environ["CLEBSCH_TORCH_CPU_BACKEND"] = "bogus"
    try:
        with pytest.raises(RuntimeError, match="must be 'host' or 'emulated', got 'bogus'"):
            torch.ops.clebsch.conv(x, y, w, s, r, x.shape[0], problem)
    finally:
        if old is None:
            del os.environ["CLEBSCH_TORCH_CPU_BACKEND"]
        else:
            os.environ["CLEBSCH_TORCH_CPU_BACKEND"] = old


def test_cuda_current_stream_and_graph_capture(target):
    # Work on a side stream, then captured into a CUDA graph (which fails on any launch on
    # another stream, any synchronisation and any allocation outside PyTorch's allocator) and
    # replayed with new inputs.
    if target.name != "cuda":
        pytest.skip("streams and CUDA graphs exist on the cuda target only")
    _, problem, (x, y, w, s, r), grad, (dx, dy, dw) = case("wide", num_edges=300)
    args = list(target.to(x, y, w, s, r, grad, dx, dy, dw))
    want = [t.cpu() for t in all_outputs(problem, *args)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = all_outputs(problem, *args)
    torch.cuda.current_stream().wait_stream(side)
    for n, a, b in zip(NAMES, got, want):
        assert torch.equal(a.cpu(), b), f"{n} on a side stream differs"
    os.environ["CLEBSCH_TORCH_CHECK_INDICES"] = "0"  # its check synchronises
    try:
        graph = torch.cuda.CUDAGraph()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            all_outputs(problem, *args)  # warm-up on the capture stream
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            captured = all_outputs(problem, *args)
        for a in args[:3] + args[5:]:
            a.mul_(0.5)
        graph.replay()
        torch.cuda.synchronize()
    finally:
        del os.environ["CLEBSCH_TORCH_CHECK_INDICES"]
    # out and the g_grad_out are trilinear, the rest bilinear or linear: compare with fresh
    # calls on the halved inputs.
    fresh = all_outputs(problem, *args)
    for n, a, b in zip(NAMES, captured, fresh):
        assert_close(a, b.cpu(), 1e-12, f"{n} replayed from a CUDA graph")

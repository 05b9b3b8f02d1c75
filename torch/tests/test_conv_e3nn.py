# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""The operators against e3nn's unfused convolution (gather, TensorProduct, index_add):
values, first derivatives and second derivatives, float64."""

import pytest
import torch
from problems import e3nn_conv, random_inputs, uvu_tp

import clebsch_torch

TOL = 1e-12  # float64, relative to max(1, max |reference|)

PROBLEMS = {
    "mace_l1": ("8x0e+8x1o", "0e+1o+2e+3o", 2, ""),
    "mace_l2_in": ("4x0e+4x1o+4x2e", "0e+1o+2e+3o", 3, ""),
    "nequip_parity": ("3x0o+3x0e+3x1o+3x1e", "0e+1o+2e", 1, ""),
    "high_l": ("2x0e+2x3o+2x4e", "0e+1o+2e+3o+4e", 4, ""),
    "mixed_uvw": ("4x0e+3x1o", "0e+1o+2e", 2, "5x0e+2x1o"),
}


def close(a, b, tol=TOL):
    scale = max(1.0, float(b.abs().max()) if b.numel() else 1.0)
    err = float((a - b).abs().max()) if a.numel() else 0.0
    assert err <= tol * scale, f"max deviation {err:.3e} (scale {scale:.3e})"


@pytest.fixture(params=sorted(PROBLEMS))
def case(request):
    tp = uvu_tp(*PROBLEMS[request.param])
    inputs = random_inputs(tp, num_nodes=9, num_edges=40, seed=len(request.param))
    return tp, clebsch_torch.problem_from_e3nn(tp), inputs


def both(tp, problem, x, y, w, sender, receiver):
    n = x.shape[0]
    ours = clebsch_torch.conv(x, y, w, sender, receiver, n, problem)
    ref = e3nn_conv(tp, x, y, w, sender, receiver, n)
    return ours, ref


def test_forward_equals_e3nn(case):
    tp, problem, (x, y, w, s, r) = case
    ours, ref = both(tp, problem, x, y, w, s, r)
    assert ours.shape == ref.shape
    close(ours, ref)
    assert ours[-1].abs().max() == 0  # the node without incoming edges


def test_first_and_second_derivatives_equal_e3nn(case):
    tp, problem, (x, y, w, s, r) = case
    g = torch.Generator().manual_seed(7)
    inputs = [t.clone().requires_grad_() for t in (x, y, w)]
    cot = torch.randn(x.shape[0], tp.irreps_out.dim, generator=g, dtype=x.dtype)
    cot.requires_grad_()
    probes = [torch.randn(t.shape, generator=g, dtype=x.dtype) for t in inputs]
    grads = {}
    for name in ("ours", "ref"):
        out = both(tp, problem, *inputs, s, r)[0 if name == "ours" else 1]
        first = torch.autograd.grad(out, inputs, cot, create_graph=True)
        # A random direction through the first derivatives: its gradient is the double backward
        # (Hessian-vector products in x, y, w and the mixed term in the cotangent).
        s_ = sum((f * p).sum() for f, p in zip(first, probes))
        second = torch.autograd.grad(s_, inputs + [cot])
        grads[name] = [t.detach() for t in first] + list(second)
    for a, b in zip(grads["ours"], grads["ref"]):
        close(a, b)


def test_float32_close_to_float64_reference(case):
    tp, problem, (x, y, w, s, r) = case
    ref = e3nn_conv(tp, x, y, w, s, r, x.shape[0])
    ours = clebsch_torch.conv(x.float(), y.float(), w.float(), s, r, x.shape[0], problem)
    assert ours.dtype == torch.float32
    close(ours.double(), ref, tol=1e-5)


def test_derived_couplings_equal_e3nn_up_to_the_known_sign():
    # Without explicit couplings the core derives e3nn 0.6's normalisation and wigner_3j. The
    # mace venv's e3nn is 0.4.4, whose wigner_3j has the other sign for some odd l1+l2+l3
    # (here 1o x 2e -> 2o): those blocks agree up to sign, every other block exactly.
    tp = uvu_tp("4x0e+4x1o", "0e+1o+2e", 2)
    ins = [
        (i.i_in1, i.i_in2, i.i_out, i.connection_mode, i.has_weight, 1.0) for i in tp.instructions
    ]
    derived = clebsch_torch.conv_problem(
        str(tp.irreps_in1), str(tp.irreps_in2), str(tp.irreps_out), ins
    )
    x, y, w, s, r = random_inputs(tp, 6, 20, seed=3)
    ref = e3nn_conv(tp, x, y, w, s, r, 6)
    ours = clebsch_torch.conv(x, y, w, s, r, 6, derived)
    odd = 0
    for ins, sl in zip(tp.instructions, tp.irreps_out.slices()):
        ls = [tp.irreps_in1[ins.i_in1].ir.l, tp.irreps_in2[ins.i_in2].ir.l]
        ls.append(tp.irreps_out[ins.i_out].ir.l)
        if sum(ls) % 2 == 1 and (ours[:, sl] + ref[:, sl]).abs().max() < 1e-12:
            odd += 1
            continue
        close(ours[:, sl], ref[:, sl])
    assert odd <= 1

# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""clebsch_torch.patch_mace on mace-torch models converted to cuEquivariance (float64, random
weights, cuEquivariance's CPU fallback): the patched model gives the e3nn model's energies and
forces and the converted model's parameter gradients. CTest runs it apart (torch_extension_cueq)
with cuEquivariance on PYTHONPATH: importable, it changes the models mace-torch builds."""

import torch

import clebsch_torch
from test_patch_mace import CASES, batch_of, build_mace, close, loss_and_grads

import pytest


# A model converted to cuEquivariance by mace-torch (the CPU runs cuEquivariance's torch
# fallback, no ops wheel needed): the patch keeps its cuEquivariance linears, contractions and
# skip products and replaces the convolution, permuting between its ir_mul layout and e3nn's.
@pytest.mark.parametrize("case", ["residual_l2", "density_l3"])
def test_cueq_converted_model_patched_equals_unpatched(case):
    import cuequivariance_torch  # noqa: F401  (in the mace venv: scripts/setup-python.sh)
    from mace.cli.convert_e3nn_cueq import run as e3nn_to_cueq

    kw = CASES[case]
    ref = build_mace(seed=3, **kw)
    old = torch.get_default_dtype()
    try:
        cueq = e3nn_to_cueq(build_mace(seed=3, **kw), device="cpu")
        patched = clebsch_torch.patch_mace(e3nn_to_cueq(build_mace(seed=3, **kw), device="cpu"))
    finally:
        torch.set_default_dtype(old)
    block = patched.interactions[0]
    assert isinstance(block.conv_tp, clebsch_torch.mace.MaceConv)
    assert block.conv_tp.layout == "ir_mul"
    assert any(
        type(m).__module__.startswith("cuequivariance_torch") for m in block.linear.modules()
    )
    batch = batch_of(ref, seed=1)
    e0, f0, _ = loss_and_grads(ref, batch)
    _, _, gc = loss_and_grads(cueq, batch)
    e1, f1, g1 = loss_and_grads(patched, batch)
    close(e1, e0, "energy against the e3nn model")
    close(f1, f0, "forces against the e3nn model")
    assert float(f0.abs().max()) > 1e-3
    # the same parameters in the same order as the converted model's (the convolution has none)
    assert len(g1) == len(gc) > 10
    for n, (a, b) in enumerate(zip(g1, gc)):
        close(a, b, f"gradient of parameter {n} against the cuEquivariance model")

    # Control: without the layout permutation the patched model is wrong.
    for b in patched.interactions:
        b.conv_tp.layout = "mul_ir"
    _, f_wrong, _ = loss_and_grads(patched, batch)
    assert float((f_wrong - f0).abs().max()) > 1e-6

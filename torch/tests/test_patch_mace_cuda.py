# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""clebsch_torch.patch_mace on the operators' device path (device_targets.py: real CUDA when
present, else the emulated backend): a patched mace-torch model (float64, random weights) gives
the unpatched model's energy, forces and parameter gradients of an energy + force loss (the
force loss runs the double backward) to 1e-10, the unpatched model evaluated on the same device
by mace-torch's own e3nn convolution."""

import pytest
import torch
from device_targets import TARGETS, make_target
from test_patch_mace import CASES, batch_of, close, loss_and_grads

import clebsch_torch

from potentials.tests.mace_factory import build_mace  # noqa: E402  (path set by test_patch_mace)


@pytest.fixture(params=TARGETS)
def target(request):
    return make_target(request.param)


def on(target, batch):
    return {k: v.to(target.device) if torch.is_tensor(v) else v for k, v in batch.items()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_patched_model_on_the_device_path_equals_unpatched(target, name):
    kw = CASES[name]
    ref = build_mace(seed=len(name), **dict(kw)).to(target.device)
    patched = clebsch_torch.patch_mace(build_mace(seed=len(name), **dict(kw))).to(target.device)
    batch = on(target, batch_of(ref, seed=1))
    e0, f0, g0 = loss_and_grads(ref, batch)
    with target.active():
        e1, f1, g1 = loss_and_grads(patched, batch)
    assert e1.device.type == target.device.type
    close(e1, e0, "energy")
    close(f1, f0, "forces")
    assert float(f0.abs().max()) > 1e-3  # a real force field, not zeros
    assert len(g0) == len(g1) > 10
    for n, (a, b) in enumerate(zip(g1, g0)):
        close(a, b, f"gradient of parameter {n}")

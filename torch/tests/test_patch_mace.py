# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""clebsch_torch.patch_mace on real mace-torch models (float64, random weights): energies, forces
and the parameter gradients of an energy + force loss equal the unpatched model's; the state
dict is unchanged; TorchScript still works; unsupported modules are refused by name."""

import pathlib
import sys

import numpy as np
import pytest
import torch

import clebsch_torch

import mace  # noqa: E402,F401  (the mace venv: CTest runs these tests there)

# potentials/tests/mace_factory.py builds models through mace-torch's own constructors.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from potentials.read_mace import _batch_for  # noqa: E402
from potentials.tests.mace_factory import build_mace  # noqa: E402

TOL = 1e-10

CASES = {
    "residual_l2": dict(max_ell=2, hidden_irreps="4x0e+4x1o+4x2e", correlation=2),
    "density_l3": dict(
        max_ell=3,
        hidden_irreps="4x0e+4x1o",
        correlation=3,
        interaction_cls_first="RealAgnosticDensityInteractionBlock",
        interaction_cls="RealAgnosticDensityResidualInteractionBlock",
    ),
    "plain_mace_nonnatural": dict(
        model="MACE",
        hidden_irreps="4x0e+4x0o+4x1o+4x1e",
        interaction_cls_first="RealAgnosticInteractionBlock",
    ),
}


def structure(seed):
    from ase.build import bulk

    atoms = bulk("Cu", "fcc", a=3.6, cubic=True).repeat((2, 1, 1))
    atoms.numbers[::3] = 79
    rng = np.random.default_rng(seed)
    atoms.positions += 0.15 * rng.standard_normal(atoms.positions.shape)
    return atoms


def batch_of(model, seed):
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # the batch's tensors in the model's dtype
    try:
        return _batch_for(model, structure(seed), "Default", float(model.r_max))
    finally:
        torch.set_default_dtype(old)


def loss_and_grads(model, batch):
    """Energy, forces and the parameter gradients of E + sum(F^2) (forces need the double
    backward of the convolution)."""
    out = model(dict(batch), training=True, compute_force=True)
    e, f = out["energy"], out["forces"]
    loss = e.sum() + (f * f).sum()
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]
    return e.detach(), f.detach(), grads


def close(a, b, what):
    scale = max(1.0, float(b.abs().max()) if b.numel() else 1.0)
    err = float((a - b).abs().max()) if a.numel() else 0.0
    assert err <= TOL * scale, f"{what}: max deviation {err:.3e} (scale {scale:.3e})"
    return err


# Module scope: each pair is built once (a build takes seconds), and no test changes them.
@pytest.fixture(scope="module", params=sorted(CASES))
def models(request):
    kw = dict(CASES[request.param])
    # Built twice from one seed (deepcopy fails on mace-torch's EmptyParam): identical models.
    ref = build_mace(seed=len(request.param), **kw)
    patched = clebsch_torch.patch_mace(build_mace(seed=len(request.param), **dict(kw)))
    return ref, patched


def test_energy_forces_and_loss_gradients_equal_unpatched(models):
    ref, patched = models
    assert all(isinstance(b.conv_tp, clebsch_torch.mace.MaceConv) for b in patched.interactions)
    batch = batch_of(ref, seed=1)
    e0, f0, g0 = loss_and_grads(ref, batch)
    e1, f1, g1 = loss_and_grads(patched, batch)
    close(e1, e0, "energy")
    close(f1, f0, "forces")
    assert float(f0.abs().max()) > 1e-3  # a real force field, not zeros
    assert len(g0) == len(g1) > 10
    for n, (a, b) in enumerate(zip(g1, g0)):
        close(a, b, f"gradient of parameter {n}")


def test_state_dict_is_unchanged(models):
    ref, patched = models
    assert list(patched.state_dict()) == list(ref.state_dict())
    patched.load_state_dict(ref.state_dict())


def test_patching_twice_changes_nothing(models):
    _, patched = models
    convs = [b.conv_tp for b in patched.interactions]
    clebsch_torch.patch_mace(patched)
    assert [b.conv_tp for b in patched.interactions] == convs


def test_torchscript_of_patched_convolutions(models):
    _, patched = models
    g = torch.Generator().manual_seed(5)
    for block in patched.interactions:
        conv = block.conv_tp
        scripted = torch.jit.script(conv)
        n, e = 4, 9
        x = torch.randn(n, conv.irreps_in1.dim, generator=g, dtype=torch.float64)
        y = torch.randn(e, conv.irreps_in2.dim, generator=g, dtype=torch.float64)
        w = torch.randn(e, conv.weight_numel, generator=g, dtype=torch.float64)
        edge_index = torch.randint(0, n, (2, e), generator=g)
        assert torch.equal(scripted(x, y, w, edge_index), conv(x, y, w, edge_index))


def test_patched_model_scripts_when_the_unpatched_one_does(models):
    # Whole-model TorchScript of mace-torch 0.3.16 with e3nn 0.4.4 fails under recent torch
    # (e3nn's Activation), patched or not: the patch must not change which way it goes.
    ref, patched = models

    def scripts(model):
        try:
            return torch.jit.script(model)
        except RuntimeError:
            return None

    s_ref, s_patched = scripts(ref), scripts(patched)
    assert (s_ref is None) == (s_patched is None)
    if s_patched is not None:
        batch = batch_of(patched, seed=2)
        got = s_patched(dict(batch), compute_force=True)
        want = patched(dict(batch), compute_force=True)
        close(got["energy"], want["energy"], "energy")
        close(got["forces"], want["forces"], "forces")


def test_refuses_unsupported_modules_by_name():
    small = dict(max_ell=1, hidden_irreps="2x0e+2x1o", correlation=1)
    ref = build_mace(seed=0, **small)
    with pytest.raises(ValueError, match="no mace-torch interaction block"):
        clebsch_torch.patch_mace(torch.nn.Linear(2, 2))
    # A block whose conv_tp is not e3nn's (what a cuEquivariance model has): named, and no block
    # of the model is patched.
    ref.interactions[1].conv_tp = torch.nn.Identity()
    with pytest.raises(ValueError, match=r"interactions\.1 .*Identity, not an e3nn"):
        clebsch_torch.patch_mace(ref)
    assert not isinstance(ref.interactions[0].conv_tp, clebsch_torch.mace.MaceConv)
    ref = build_mace(seed=0, **small)
    ref.interactions[0].conv_fusion = "atomic"
    with pytest.raises(ValueError, match=r"interactions\.0 .*already uses a fused convolution"):
        clebsch_torch.patch_mace(ref)

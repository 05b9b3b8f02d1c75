# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""clebsch_torch.nequip.enable_clebsch on real nequip models (float64, random weights):
energies, forces and the parameter gradients of an energy + force loss equal the unpatched
model's; the state dict is unchanged; refusals name the module. Runs in the nequip venv."""

import pathlib
import sys

import numpy as np
import pytest
import torch

import clebsch_torch  # noqa: F401  (loads the operators)

import nequip  # noqa: E402,F401  (the nequip venv: CTest runs this file there)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from potentials.tests.test_nequip import CASES as EXPORT_CASES  # noqa: E402
from potentials.tests.test_nequip import build_nequip  # noqa: E402

from clebsch_torch.nequip import ClebschTensorProductScatter, enable_clebsch  # noqa: E402

TOL = 1e-10
CASES = {
    "l2": dict(l_max=2, num_layers=2, num_features=4, avg_num_neighbors=10.0),
    "parity_zbl_per_edge_cutoff": EXPORT_CASES["parity_zbl_per_edge_cutoff"],
}


def data_for(model, seed):
    from ase.build import bulk
    from nequip.data import AtomicDataDict, from_ase
    from nequip.data.transforms import NeighborListTransform

    atoms = bulk("Cu", "fcc", a=3.6, cubic=True)
    rng = np.random.default_rng(seed)
    atoms.positions += 0.15 * rng.standard_normal(atoms.positions.shape)
    data = from_ase(atoms)
    types = torch.zeros(len(atoms), dtype=torch.long)
    types[::3] = 1
    data[AtomicDataDict.ATOM_TYPE_KEY] = types
    data.pop(AtomicDataDict.ATOMIC_NUMBERS_KEY, None)
    data = NeighborListTransform(r_max=4.0, type_names=["Cu", "Au"])(data)
    for key in (AtomicDataDict.POSITIONS_KEY, AtomicDataDict.CELL_KEY):
        data[key] = data[key].double()
    return data


def loss_and_grads(model, data):
    from nequip.data import AtomicDataDict

    model.train()  # nequip's forces keep their graph (create_graph) only in training mode
    out = model(dict(data))
    e, f = out[AtomicDataDict.TOTAL_ENERGY_KEY], out[AtomicDataDict.FORCE_KEY]
    loss = e.sum() + (f * f).sum()
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]
    return e.detach(), f.detach(), grads


def close(a, b, what):
    scale = max(1.0, float(b.abs().max()) if b.numel() else 1.0)
    err = float((a - b).abs().max()) if a.numel() else 0.0
    assert err <= TOL * scale, f"{what}: max deviation {err:.3e} (scale {scale:.3e})"


@pytest.fixture(scope="module", params=sorted(CASES))
def models(request):
    def build():
        torch.manual_seed(17)  # build_nequip perturbs the weights with the global generator
        return build_nequip(seed=3, **CASES[request.param])

    ref = build()
    # The first build of a process can differ from later ones (nequip's global state is set up
    # on first use): the patched twin gets the reference's weights through the state dict.
    patched = enable_clebsch(build())
    patched.load_state_dict(ref.state_dict())
    return ref, patched


def test_energy_forces_and_loss_gradients_equal_unpatched(models):
    ref, patched = models
    n = sum(isinstance(m, ClebschTensorProductScatter) for m in patched.modules())
    assert n >= 1
    data = data_for(ref, seed=1)
    e0, f0, g0 = loss_and_grads(ref, data)
    e1, f1, g1 = loss_and_grads(patched, data)
    close(e1, e0, "energy")
    close(f1, f0, "forces")
    assert float(f0.abs().max()) > 1e-3
    assert len(g0) == len(g1) > 5
    for k, (a, b) in enumerate(zip(g1, g0)):
        close(a, b, f"gradient of parameter {k}")


def test_state_dict_is_unchanged(models):
    ref, patched = models
    assert list(patched.state_dict()) == list(ref.state_dict())
    patched.load_state_dict(ref.state_dict())


def test_refusals_name_the_module():
    with pytest.raises(ValueError, match="no nequip TensorProductScatter"):
        enable_clebsch(torch.nn.Linear(2, 2))

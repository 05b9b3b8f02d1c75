# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Training a nequip model with clebsch_torch.nequip.enable_clebsch (issue 26): as
test_train_mace.py, for a randomly initialised NequIPGNNModel (l_max 2, two layers) trained by a
plain Adam loop on nequip's own batched AtomicDataDict (no nequip training machinery). Runs in the
nequip venv."""

import pathlib
import sys

import numpy as np
import pytest
import torch

import clebsch_torch  # noqa: F401  (loads the operators)

import nequip  # noqa: E402,F401  (the nequip venv: CTest runs this file there)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from potentials.tests.test_nequip import build_nequip  # noqa: E402

from clebsch_torch.nequip import ClebschTensorProductScatter, enable_clebsch  # noqa: E402

import training  # noqa: E402

MODEL = dict(l_max=2, num_layers=2, num_features=4, avg_num_neighbors=10.0)
R_MAX = 4.0  # build_nequip's
TOLERANCE = {"float64": (1e-10, 1e-9), "float32": (1e-4, 1e-4)}


def batches():
    """The EMT frames as nequip batches of training.BATCH_SIZE structures (fixed order). Positions
    stay float64 for either model dtype, as nequip's own data pipeline gives them."""
    from nequip.data import AtomicDataDict, from_ase
    from nequip.data.transforms import NeighborListTransform

    neighbors = NeighborListTransform(r_max=R_MAX, type_names=["Cu", "Au"])
    items = []
    for atoms, energy, forces in training.emt_frames():
        data = from_ase(atoms)
        data[AtomicDataDict.ATOM_TYPE_KEY] = torch.tensor([int(z == 79) for z in atoms.numbers])
        data.pop(AtomicDataDict.ATOMIC_NUMBERS_KEY, None)
        data = neighbors(data)
        for key in (AtomicDataDict.POSITIONS_KEY, AtomicDataDict.CELL_KEY):
            data[key] = data[key].double()
        items.append((data, energy, forces))
    out = []
    for k in range(0, len(items), training.BATCH_SIZE):
        part = items[k : k + training.BATCH_SIZE]
        batch = AtomicDataDict.batched_from_list([d for d, _, _ in part])
        ref_e = torch.tensor([e for _, e, _ in part], dtype=torch.float64)
        ref_f = torch.tensor(np.concatenate([f for _, _, f in part]), dtype=torch.float64)
        out.append((batch, ref_e, ref_f))
    return out


def step_loss(model, item):
    from nequip.data import AtomicDataDict as K

    batch, ref_e, ref_f = item
    out = model(dict(batch))  # train mode: forces keep their graph (create_graph)
    return training.energy_force_loss(
        out[K.TOTAL_ENERGY_KEY],
        out[K.FORCE_KEY],
        ref_e,
        ref_f,
        torch.bincount(out[K.BATCH_KEY]),
    )


def twins(model_dtype):
    def build():
        torch.manual_seed(17)  # build_nequip perturbs the weights with the global generator
        return build_nequip(seed=3, model_dtype=model_dtype, **MODEL)

    ref = build()
    patched = enable_clebsch(build())
    # nequip's first build in a process can differ from later ones: same weights by state dict.
    patched.load_state_dict(ref.state_dict())
    assert any(isinstance(m, ClebschTensorProductScatter) for m in patched.modules())
    assert not any(isinstance(m, ClebschTensorProductScatter) for m in ref.modules())
    return ref, patched


@pytest.mark.parametrize("model_dtype", ["float64", "float32"])
def test_loss_curves_agree_step_by_step(model_dtype):
    torch.set_num_threads(1)
    ref, patched = twins(model_dtype)
    rtol_loss, rtol_param = TOLERANCE[model_dtype]
    training.assert_twins_train_alike(
        ref, patched, batches(), step_loss, rtol_loss, rtol_param, f"nequip {model_dtype}"
    )


def test_a_perturbed_convolution_is_caught():
    # See test_train_mace.py: a 1e-7 relative change of the patched convolution must fail the
    # float64 comparison.
    torch.set_num_threads(1)
    ref, patched = twins("float64")
    convs = [m for m in patched.modules() if isinstance(m, ClebschTensorProductScatter)]
    training.perturb_outputs(convs, 1.0 + 1e-7)
    data = batches()
    want = training.train(ref, data, step_loss, steps=10)
    got = training.train(patched, data, step_loss, steps=10)
    dev, _ = training.curve_deviation(got, want)
    print(f"nequip, convolution output x (1 + 1e-7): loss deviation {dev:.3e}")
    assert dev > TOLERANCE["float64"][0]

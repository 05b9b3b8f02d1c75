# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Training a mace-torch model with clebsch_torch.patch_mace (issue 26): two copies of one
randomly initialised ScaleShiftMACE, one unpatched (e3nn's convolution) and one patched, trained
with Adam on the same EMT batches in the same order (energy + force loss, forces with
create_graph=True, so every step runs the double backward). The loss curves must agree step by
step: float64 to 1e-10 relative at every step, float32 to 1e-4; the final parameters too. A
control shows that a 1e-7 relative change of the patched convolution's output is caught."""

import pathlib
import sys

import numpy as np
import pytest
import torch

import clebsch_torch

import mace  # noqa: E402,F401  (the mace venv: CTest runs these tests there)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from potentials.tests.mace_factory import build_mace  # noqa: E402

import training  # noqa: E402

#: Small, but every kind of path: l <= 2 edge attributes, vector features, correlation 2.
MODEL = dict(
    hidden_irreps="4x0e+4x1o",
    max_ell=2,
    correlation=2,
    num_interactions=2,
    num_bessel=4,
    radial_MLP=[8],
    MLP_irreps="4x0e",
)
#: Per-step relative tolerance of the loss, and of the final parameters, per dtype.
TOLERANCE = {torch.float64: (1e-10, 1e-9), torch.float32: (1e-4, 1e-4)}


def batches(model, dtype):
    """The EMT frames as mace-torch batches of training.BATCH_SIZE structures (fixed order)."""
    from mace import data as mdata
    from mace.tools import torch_geometric, utils

    frames = training.emt_frames()
    z_table = utils.AtomicNumberTable([int(z) for z in model.atomic_numbers])
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # the batch's tensors in the model's dtype
    try:
        configs = []
        for atoms, _, _ in frames:
            config = mdata.config_from_atoms(atoms)
            config.head = "Default"
            configs.append(
                mdata.AtomicData.from_config(
                    config, z_table=z_table, cutoff=float(model.r_max), heads=["Default"]
                )
            )
        loader = torch_geometric.dataloader.DataLoader(
            configs, batch_size=training.BATCH_SIZE, shuffle=False
        )
        out = []
        for k, batch in enumerate(loader):
            part = frames[k * training.BATCH_SIZE : (k + 1) * training.BATCH_SIZE]
            ref_e = torch.tensor([e for _, e, _ in part], dtype=dtype)
            ref_f = torch.tensor(np.concatenate([f for _, _, f in part]), dtype=dtype)
            out.append((batch.to_dict(), ref_e, ref_f))
        return out
    finally:
        torch.set_default_dtype(old)


def step_loss(model, item):
    batch, ref_e, ref_f = item
    out = model(dict(batch), training=True, compute_force=True)
    return training.energy_force_loss(
        out["energy"], out["forces"], ref_e, ref_f, torch.bincount(batch["batch"])
    )


def twins(dtype):
    """The unpatched model and a patched copy with the same initial weights."""
    ref = build_mace(seed=26, dtype=dtype, **MODEL)
    patched = clebsch_torch.patch_mace(build_mace(seed=26, dtype=dtype, **MODEL))
    patched.load_state_dict(ref.state_dict())
    assert all(isinstance(b.conv_tp, clebsch_torch.mace.MaceConv) for b in patched.interactions)
    assert not any(isinstance(b.conv_tp, clebsch_torch.mace.MaceConv) for b in ref.interactions)
    return ref, patched


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_loss_curves_agree_step_by_step(dtype):
    torch.set_num_threads(1)
    ref, patched = twins(dtype)
    rtol_loss, rtol_param = TOLERANCE[dtype]
    training.assert_twins_train_alike(
        ref, patched, batches(ref, dtype), step_loss, rtol_loss, rtol_param, f"mace {dtype}"
    )


def test_a_perturbed_convolution_is_caught():
    # The comparison above must be able to fail: the patched convolution's output times
    # (1 + 1e-7), far below anything a loss curve plot would show, exceeds the float64 tolerance.
    torch.set_num_threads(1)
    ref, patched = twins(torch.float64)
    training.perturb_outputs([b.conv_tp for b in patched.interactions], 1.0 + 1e-7)
    data = batches(ref, torch.float64)
    want = training.train(ref, data, step_loss, steps=10)
    got = training.train(patched, data, step_loss, steps=10)
    dev, _ = training.curve_deviation(got, want)
    print(f"mace, convolution output x (1 + 1e-7): loss deviation {dev:.3e}")
    assert dev > TOLERANCE[torch.float64][0]

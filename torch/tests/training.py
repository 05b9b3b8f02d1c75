# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Shared pieces of the loss-curve tests (test_train_mace.py, test_train_nequip.py): the EMT
data, the energy + force loss, a plain Adam loop and the step-by-step comparison.

The repository commits no EMT data set (potentials/train_bundled.py writes its training set under
build/ when the bundled models are retrained, with minutes of Langevin MD), so the tests label
their own: rattled 8-atom fcc Cu/Au cells with ASE's EMT calculator, from a fixed seed. ASE is a
dependency of both mace-torch and nequip.
"""

from typing import Callable, List, Sequence, Tuple

import numpy as np
import torch

#: Training frames, structures per step, steps, Adam learning rate (the loss falls by ~50x).
NUM_FRAMES = 8
BATCH_SIZE = 2
STEPS = 300
LEARNING_RATE = 5e-3


def emt_frames(n: int = NUM_FRAMES, seed: int = 20261202) -> List[Tuple]:
    """``n`` rattled, strained 8-atom fcc Cu-Au cells with their EMT energies and forces.

    Returns
    -------
    list of (ase.Atoms, float, numpy.ndarray)
        Structure (no calculator), energy in eV, forces ``[8, 3]`` in eV/A.
    """
    from ase.build import bulk
    from ase.calculators.emt import EMT

    rng = np.random.default_rng(seed)
    frames = []
    for _ in range(n):
        atoms = bulk("Cu", "fcc", a=rng.uniform(3.6, 3.9), cubic=True).repeat((2, 1, 1))
        atoms.numbers[rng.random(len(atoms)) < 0.4] = 79
        atoms.positions += 0.12 * rng.standard_normal(atoms.positions.shape)
        atoms.calc = EMT()
        energy, forces = float(atoms.get_potential_energy()), atoms.get_forces().copy()
        atoms.calc = None
        frames.append((atoms, energy, forces))
    return frames


def energy_force_loss(
    energy: torch.Tensor,
    forces: torch.Tensor,
    ref_energy: torch.Tensor,
    ref_forces: torch.Tensor,
    atoms_per_frame: torch.Tensor,
) -> torch.Tensor:
    """Mean squared per-atom energy error plus mean squared force component error."""
    n = atoms_per_frame.to(energy.dtype)
    de = (energy.reshape(-1) - ref_energy.to(energy.dtype)) / n
    df = forces - ref_forces.to(forces.dtype)
    return (de * de).mean() + (df * df).mean()


def train(
    model: torch.nn.Module,
    batches: Sequence,
    step_loss: Callable[[torch.nn.Module, object], torch.Tensor],
    steps: int = STEPS,
) -> np.ndarray:
    """Adam on ``step_loss(model, batch)``, batches in a fixed cyclic order; the loss per step.

    The forces inside the loss are autograd gradients with ``create_graph=True`` (mace-torch with
    ``training=True``, nequip in train mode), so ``loss.backward()`` runs the convolution's
    double backward at every step.
    """
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    losses = []
    for step in range(steps):
        loss = step_loss(model, batches[step % len(batches)])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return np.asarray(losses)


def curve_deviation(got: np.ndarray, want: np.ndarray) -> Tuple[float, int]:
    """Largest relative deviation of two loss curves and the step where it occurs."""
    assert got.shape == want.shape
    rel = np.abs(got - want) / np.abs(want)
    return float(rel.max()), int(rel.argmax())


def assert_curves_agree(got: np.ndarray, want: np.ndarray, rtol: float, what: str) -> float:
    """Every step's loss within ``rtol`` (relative) of the reference; returns the deviation."""
    dev, step = curve_deviation(got, want)
    print(
        f"{what}: {len(want)} steps, loss {want[0]:.4g} -> {want[-1]:.4g}, max relative "
        f"deviation {dev:.3e} (step {step})"
    )
    assert dev <= rtol, (
        f"{what}: loss at step {step} is {got[step]!r}, unpatched {want[step]!r} "
        f"(relative deviation {dev:.3e} > {rtol:.0e})"
    )
    # A real training run, not a flat curve that would agree trivially.
    assert want[-20:].mean() < 0.2 * want[:5].mean(), f"{what}: the loss did not fall"
    return dev


def assert_parameters_agree(
    got: torch.nn.Module, want: torch.nn.Module, rtol: float, what: str
) -> float:
    """Final parameters equal, by name, to ``rtol`` times the largest parameter magnitude."""
    a, b = dict(got.named_parameters()), dict(want.named_parameters())
    assert list(a) == list(b)
    scale = max(float(p.detach().abs().max()) for p in b.values() if p.numel())
    dev = max(float((a[k] - b[k]).detach().abs().max()) for k in b if b[k].numel())
    print(f"{what}: max parameter deviation {dev:.3e} (largest parameter {scale:.3g})")
    assert dev <= rtol * scale, f"{what}: final parameters differ by {dev:.3e}"
    return dev


def assert_twins_train_alike(
    ref: torch.nn.Module,
    patched: torch.nn.Module,
    batches: Sequence,
    step_loss: Callable[[torch.nn.Module, object], torch.Tensor],
    rtol_loss: float,
    rtol_param: float,
    what: str,
) -> None:
    """Trains the unpatched and the patched copy alike; their loss curves and final parameters
    must agree (assert_curves_agree, assert_parameters_agree)."""
    want = train(ref, batches, step_loss)
    got = train(patched, batches, step_loss)
    assert_curves_agree(got, want, rtol_loss, what)
    assert_parameters_agree(patched, ref, rtol_param, what)


def perturb_outputs(modules: Sequence[torch.nn.Module], factor: float) -> List:
    """Multiply each module's output by ``factor`` (a forward hook); returns the handles."""
    return [m.register_forward_hook(lambda _m, _i, out: out * factor) for m in modules]

"""The harness itself, checked against physics computed independently in NumPy.

A perturbed Lennard-Jones crystal is run serially and on 2 MPI ranks; the harness's thermo and dump
parsing must reproduce the LJ energy and forces that NumPy computes from the dumped positions, and
the two runs must agree. If the harness mis-parsed a column or a frame, these would fail.
"""

import numpy as np
import pytest

from lammps_harness import cleanup, run_lammps

LJ_INPUT = """
units lj
atom_style atomic
boundary p p p
lattice fcc 0.8442
region box block 0 4 0 4 0 4
create_box 1 box
create_atoms 1 box
mass 1 1.0
displace_atoms all random 0.05 0.05 0.05 4321 units box
pair_style lj/cut 2.5
pair_coeff 1 1 1.0 1.0 2.5
neighbor 0.3 bin
thermo_style custom step pe press
thermo_modify format float %.16g
dump d all custom 1 dump.lj id x y z fx fy fz
dump_modify d format float %.17g
run 0
"""


def lj_energy_forces(pos, box, rc=2.5):
    """Plain O(N^2) LJ (epsilon=sigma=1, unshifted) with the minimum-image convention."""
    n = len(pos)
    energy = 0.0
    forces = np.zeros_like(pos)
    for i in range(n):
        d = pos[i] - pos[i + 1 :]
        d -= box * np.round(d / box)
        r2 = np.sum(d * d, axis=1)
        mask = r2 < rc * rc
        inv6 = 1.0 / r2[mask] ** 3
        energy += np.sum(4.0 * (inv6 * inv6 - inv6))
        fmag = (48.0 * inv6 * inv6 - 24.0 * inv6) / r2[mask]
        fij = d[mask] * fmag[:, None]
        forces[i] += fij.sum(axis=0)
        forces[i + 1 :][mask] -= fij
    return energy, forces


@pytest.mark.parametrize("nprocs", [1, 2])
def test_thermo_and_dump_match_independent_lj(nprocs):
    run = run_lammps(LJ_INPUT, nprocs=nprocs)
    assert run.returncode == 0, run.output
    frame = run.dump("dump.lj")[0]
    box = frame.box[:, 1] - frame.box[:, 0]
    pos = np.stack([frame.column(c) for c in "xyz"], axis=1)
    energy, forces = lj_energy_forces(pos, box)
    natoms = len(pos)
    assert natoms == 256
    assert run.thermo[0]["PotEng"] == pytest.approx(energy / natoms, rel=1e-12)
    lmp_forces = np.stack([frame.column(c) for c in ("fx", "fy", "fz")], axis=1)
    np.testing.assert_allclose(lmp_forces, forces, rtol=0, atol=1e-10 * np.abs(forces).max())
    cleanup(run)


def test_serial_and_mpi_runs_agree():
    runs = [run_lammps(LJ_INPUT + "run 20\n", nprocs=n) for n in (1, 2)]
    for run in runs:
        assert run.returncode == 0, run.output
    assert len(runs[0].thermo) == len(runs[1].thermo) > 2
    for a, b in zip(runs[0].thermo, runs[1].thermo):
        assert a["PotEng"] == pytest.approx(b["PotEng"], rel=1e-10)
    for run in runs:
        cleanup(run)


def test_failed_run_is_reported():
    run = run_lammps("units lj\nthis_is_not_a_command\n")
    assert run.returncode != 0
    assert "Unknown command" in run.output

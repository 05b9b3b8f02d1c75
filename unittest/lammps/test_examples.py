"""Every input of examples/, run as its README writes it but a few steps long.

The reference is independent of the C++ engines: at every thermo step the potential energy that
LAMMPS prints is compared with the NumPy evaluator of the model file
(``potentials/numpy_reference.py``, itself checked against mace-torch and nequip by the exporter
tests) on the positions and box LAMMPS dumped at that step. The MPI command of the READMEs runs
too and must print the thermo of the serial run.

Environment (set by CTest): CLEBSCH_LMP, CLEBSCH_PLUGIN, CLEBSCH_SOURCE_DIR.
"""

import os
import pathlib
import re
import shutil
import tempfile

import numpy as np
import pytest

from lammps_harness import LammpsRun, cleanup, parse_dump, parse_thermo, run_lammps

ROOT = pathlib.Path(os.environ.get("CLEBSCH_SOURCE_DIR", pathlib.Path(__file__).parents[2]))
EXAMPLES = ROOT / "examples"
STEPS, EVERY = 10, 10  # thermo (and the reference) at steps 0 and 10
TOL_E = 1e-9  # eV per atom: float64 engine against float64 NumPy


def _inputs():
    found = sorted(p for p in EXAMPLES.glob("*/in.*") if p.parent.name != "plugin-smoke")
    return [pytest.param(p, id=f"{p.parent.name}/{p.name}") for p in found]


def _run_example(path: pathlib.Path, nprocs: int = 1) -> LammpsRun:
    """Run a copy of the example's folder (its relative model path kept) with a dump of
    positions before its run command."""
    work = pathlib.Path(tempfile.mkdtemp(prefix="clebsch-example-"))
    shutil.copytree(path.parent, work / "examples" / path.parent.name)
    (work / "potentials").symlink_to(ROOT / "potentials")
    here = work / "examples" / path.parent.name
    text = path.read_text()
    assert re.search(r"^run \$\{steps\}$", text, re.M), f"{path}: run length is not ${{steps}}"
    dump = (
        "dump ref all custom ${every} dump.ref id type x y z\n"
        "dump_modify ref format float %.17g sort id\n"
        "thermo_modify format float %.17g\n"
    )
    text = re.sub(r"^run \$\{steps\}$", dump + "run ${steps}", text, flags=re.M)
    return run_lammps(
        text,
        nprocs=nprocs,
        workdir=here,
        variables={"steps": STEPS, "every": EVERY},
    )


def _model_path(text: str) -> pathlib.Path:
    m = re.search(r"^pair_coeff \* \* (\S+) (.+)$", text, re.M)
    assert m, "no pair_coeff * * line"
    return m.group(1), m.group(2).split()


@pytest.mark.parametrize("path", _inputs())
def test_example_thermo_matches_numpy_reference(path):
    from potentials import numpy_reference as nr
    from potentials import write

    run = _run_example(path)
    assert run.returncode == 0, run.output[-3000:]
    steps = [int(r["Step"]) for r in run.thermo]
    assert steps == list(range(0, STEPS + 1, EVERY)), steps
    rel_model, elements = _model_path(path.read_text())
    model, tensors = write.read_model((path.parent / rel_model).resolve())
    symbols = [sp["symbol"] for sp in model["species"]]
    species_of_type = [symbols.index(e) for e in elements]
    frames = parse_dump(run.workdir / "dump.ref")
    assert [f.timestep for f in frames] == steps
    for row, frame in zip(run.thermo, frames):
        lo, hi = frame.box[:, 0], frame.box[:, 1]
        cell = np.diag(hi - lo)
        x = np.stack([frame.column(c) for c in ("x", "y", "z")], axis=1) - lo
        species = np.array([species_of_type[int(t) - 1] for t in frame.column("type")])
        ref = nr.evaluate(model, tensors, x, species, cell, (True, True, True))
        n = len(species)
        assert abs(row["PotEng"] - float(ref["energy"][0])) <= TOL_E * n, (
            path.name,
            row["Step"],
            row["PotEng"],
            float(ref["energy"][0]),
        )
    assert all(np.isfinite(list(r.values())).all() for r in run.thermo)
    shutil.rmtree(run.workdir.parent.parent, ignore_errors=True)


def test_example_under_mpirun_prints_the_serial_thermo():
    """The README's `mpirun -np 2 lmp -in in.cuau-nvt`: step 0 as on one rank. (Later steps
    differ: create_atoms numbers the atoms by rank, so `velocity create` gives other atoms other
    velocities; the serial test above checks those steps.)"""
    path = EXAMPLES / "mace" / "in.cuau-nvt"
    one, two = _run_example(path), _run_example(path, nprocs=2)
    for run in (one, two):
        assert run.returncode == 0, run.output[-3000:]
    assert len(one.thermo) == len(two.thermo) == STEPS // EVERY + 1
    a, b = one.thermo[0], two.thermo[0]
    for key in ("Temp", "PotEng", "TotEng", "Press"):
        assert b[key] == pytest.approx(a[key], rel=1e-10, abs=1e-7), key
    for run in (one, two):
        shutil.rmtree(run.workdir.parent.parent, ignore_errors=True)


def test_plugin_smoke_example_loads_the_plugin_and_conserves_energy():
    path = EXAMPLES / "plugin-smoke" / "in.smoke"
    run = run_lammps(path.read_text())
    assert run.returncode == 0, run.output[-3000:]
    assert "Clebsch 0.1.0" in run.output
    assert "irreps 128x0e+128x1o+128x2e: dim 1152, lmax 2" in run.output
    etot = [r["TotEng"] for r in parse_thermo(run.log)]
    # NVE with lj/cut unshifted at 2.5 sigma: pairs crossing the cutoff move the total energy by
    # a few parts in 1000 while the lattice melts (LAMMPS's own in.melt does the same).
    assert len(etot) == 6 and max(etot) - min(etot) < 5e-3 * abs(etot[0]), etot
    cleanup(run)

"""pair_style clebsch ... radial spline N: the radial MLPs tabulated as splines (an opt-in
approximation). References are independent of the spline: the exact-MLP run of the same atoms
(the spline converges to it: 2,000 intervals agree to ~1e-8 eV/A, 16 intervals measurably
differ), on the host engine and, where the build has the CUDA engine, on device gpu (emulated
backend without a GPU) against the host engine's spline run. Bad values are LAMMPS errors that
say what to change.

Environment (set by CTest): CLEBSCH_LMP, CLEBSCH_PLUGIN, CLEBSCH_BUNDLED_DIR, CLEBSCH_CUDA_ENGINE.
"""

import os
import pathlib

import numpy as np
import pytest

from lammps_harness import cleanup, run_lammps

BUNDLED = pathlib.Path(os.environ.get("CLEBSCH_BUNDLED_DIR", ""))
MACE = BUNDLED / "cuau-mace.safetensors"
NEQUIP = BUNDLED / "cuau-nequip.safetensors"

SCRIPT = """
units metal
atom_style atomic
lattice fcc 3.75
region box block 0 2 0 2 0 2
create_box 2 box
create_atoms 1 box
set type 1 type/fraction 2 0.25 20261201
displace_atoms all random 0.1 0.1 0.1 9127 units box
mass * 63.5
plugin load ${{plugin}}
pair_style clebsch {keywords}
pair_coeff * * {model} Cu Au
compute pe all pe/atom
thermo_style custom step pe press
thermo_modify format float %.17g norm no
dump d all custom 1 dump.out id fx fy fz c_pe
dump_modify d format float %.17g sort id
run 0
"""


def _run(keywords, model=MACE):
    run = run_lammps(SCRIPT.format(keywords=keywords, model=model))
    return run


def _result(run):
    assert run.returncode == 0, run.output[-3000:]
    frame = run.dump("dump.out")[-1]
    forces = np.stack([frame.column(c) for c in ("fx", "fy", "fz")], axis=1)
    return run.thermo[0]["PotEng"], forces, frame.column("c_pe"), run.thermo[0]["Press"]


def _gpu(monkeypatch):
    if os.environ.get("CLEBSCH_CUDA_ENGINE", "1") == "0":
        pytest.skip("this build has no CUDA engine (no CUDA toolkit was found at configure time)")
    if not any(pathlib.Path(p).exists() for p in ("/dev/nvidia0", "/dev/nvidiactl")):
        monkeypatch.setenv("CLEBSCH_CUDA_BACKEND", "emulated")


def test_spline_converges_to_the_exact_mlp_on_the_host():
    runs = [_run(k) for k in ("", "radial exact", "radial spline 2000", "radial spline 16")]
    exact, exact_kw, dense, coarse = (_result(r) for r in runs)
    assert "radial spline 2000" in runs[2].log, runs[2].log[-2000:]
    # radial exact is the default.
    assert exact_kw[0] == exact[0]
    np.testing.assert_array_equal(exact_kw[1], exact[1])
    # 2,000 intervals: the model to ~1e-8 eV/A; 16: measurably another model.
    np.testing.assert_allclose(dense[1], exact[1], rtol=0, atol=1e-7)
    np.testing.assert_allclose(dense[2], exact[2], rtol=0, atol=1e-9)
    assert abs(dense[0] - exact[0]) <= 1e-8 * len(exact[2])
    assert abs(dense[3] - exact[3]) <= 1e-4 * max(1.0, abs(exact[3]))
    assert np.abs(coarse[1] - exact[1]).max() > 1e-6
    for r in runs:
        cleanup(r)


@pytest.mark.parametrize("precision, force_tol", [("fp64", 1e-10), ("fp32", 2e-4)])
def test_device_gpu_spline_equals_the_host_spline(precision, force_tol, monkeypatch):
    _gpu(monkeypatch)
    host = _run("precision fp64 radial spline 500")
    gpu = _run(f"precision {precision} device gpu radial spline 500")
    (e_h, f_h, pe_h, _), (e_g, f_g, pe_g, _) = _result(host), _result(gpu)
    np.testing.assert_allclose(f_g, f_h, rtol=0, atol=force_tol * max(1.0, np.abs(f_h).max()))
    np.testing.assert_allclose(pe_g, pe_h, rtol=0, atol=force_tol * max(1.0, np.abs(pe_h).max()))
    assert abs(e_g - e_h) <= force_tol * max(1.0, abs(e_h))
    cleanup(host)
    cleanup(gpu)


@pytest.mark.parametrize(
    "keywords, model, message",
    [
        ("radial spline 4", MACE, "radial spline needs 8 to 1000000 intervals, got 4"),
        ("radial spline", MACE, "radial spline needs a number of intervals"),
        ("radial cubic", MACE, "radial must be exact or spline N, got cubic"),
        ("radial spline 100", NEQUIP, "radial spline is implemented for MACE models only"),
    ],
)
def test_bad_radial_keywords_are_clear_errors(keywords, model, message):
    run = _run(keywords, model)
    assert run.returncode != 0
    assert message in run.output, run.output[-2000:]
    cleanup(run)

"""Production MD holds (issue 28), pair_style clebsch: the CI-sized versions of bench/md/soak.

- NVE drift over 1,000 steps on 108 atoms on the host engine, and over 400 steps of a 13-atom
  cluster on the CUDA engine's emulated backend (device gpu without a GPU) against the host
  engine's, against the issue's bound scaled to a short run;
- restart continuity: write_restart / read_restart and write_data / read_data in a new process
  continue the uninterrupted run bitwise (fp64, orthogonal box; the host engine on 1 and 2
  ranks, the CUDA engine in deterministic mode) or to round-off (the CUDA engine's atomic mode,
  and any engine in a triclinic box, where LAMMPS's fractional-coordinate round trips change
  ghost positions by an ulp); a run killed mid-way continues from its last restart file to the
  uninterrupted run's state;
- loud failures: lost atoms, overlapping atoms and a NaN/inf model output are LAMMPS errors
  naming the atom IDs and the step.
"""

import os

import numpy as np
import pytest

import md_holds as md
from lammps_harness import cleanup, run_lammps
from test_pair_clebsch import _bundled, _gpu_present

STYLES = {
    "host": "",
    "gpu-deterministic": " device gpu deterministic yes",
    "gpu-atomic": " device gpu deterministic no",
}


@pytest.fixture
def backend(request, monkeypatch):
    # device gpu runs the CUDA engine's emulated backend where no GPU is present; a build without
    # the CUDA engine (no CUDA toolkit at configure, CLEBSCH_CUDA_ENGINE=0 from CTest) skips the
    # device gpu cases: every test that takes this fixture runs device gpu unless its "style"
    # parameter is "host".
    style = getattr(getattr(request.node, "callspec", None), "params", {}).get("style", "gpu")
    if style != "host" and os.environ.get("CLEBSCH_CUDA_ENGINE", "1") == "0":
        pytest.skip("this build has no CUDA engine (no CUDA toolkit was found at configure time)")
    if not _gpu_present():
        monkeypatch.setenv("CLEBSCH_CUDA_BACKEND", "emulated")


# ------------------------------------------------------------------------------------------------
# NVE drift
# ------------------------------------------------------------------------------------------------

NVE = """
velocity all create 1200 4928459 mom yes rot yes dist gaussian loop geom
fix nve all nve
thermo_style custom step pe ke etotal
thermo_modify format float %.17g norm no
thermo 10
run 1000
"""


@pytest.mark.parametrize("style", ["host"])
def test_nve_drift_1000_steps(backend, style):
    """1 ps of NVE (1 fs steps) at ~600 K on 108 Cu-Au atoms in float64. A conserving model's
    total energy fluctuates about a flat line: its fitted slope over 1 ps is dominated by that
    fluctuation (~1e-3 eV/atom/ns here), far below the 80 eV/ns a non-conservative force gave
    OpenEquivariance #211; the bound, 2e-2 eV/atom/ns, fails any force that is not the
    gradient of the energy by more than round-off."""
    run = run_lammps(md.header(_bundled(), STYLES[style]) + NVE, files={"data.in": md.crystal(3)})
    assert run.returncode == 0, run.output[-3000:]
    drift, rms = md.drift_per_atom_ns(run, 108)
    e = np.array([r["TotEng"] for r in run.thermo]) / 108
    print(f"NVE {style}: drift {drift:.3e} eV/atom/ns, fluctuation (rms) {rms:.3e} eV/atom")
    assert len(e) == 101
    assert abs(drift) < 2e-2
    assert rms < 2e-5
    cleanup(run)


CLUSTER_NVE = """
velocity all create 600 4928459 mom yes rot yes dist gaussian loop geom
fix nve all nve
thermo_style custom step pe ke etotal
thermo_modify format float %.17g norm no
thermo 10
run 400
"""


def test_nve_drift_emulated_gpu_matches_the_host(backend):
    """400 steps of NVE (0.4 ps) of a free 13-atom Cu12Au cluster on the CUDA engine (device
    gpu, deterministic, float64; the emulated backend without a GPU: ~25 s per 200 steps on
    two cores, so not 1,000 steps) and on the host engine. Over 0.4 ps the fitted slope is
    set by the fluctuation (~1e-2 eV/atom/ns from an r.m.s. of ~2e-6 eV/atom), so the
    issue's 1e-4 eV/atom/ns over 100 ps cannot be resolved here; what can: the bound of 5e-2,
    which a force that is not the energy's gradient (OpenEquivariance #211: ~80 eV/ns) fails
    by orders of magnitude, and the issue's "GPU fp64 within 2x of CPU fp64 over the same
    steps", here to 1e-4 eV/atom/ns since both engines integrate the same trajectory to
    round-off."""
    runs = {}
    for style in ("host", "gpu-deterministic"):
        run = run_lammps(
            md.header(_bundled(), STYLES[style], "boundary f f f") + CLUSTER_NVE,
            files={"data.in": md.cluster13()},
        )
        assert run.returncode == 0, run.output[-3000:]
        assert len([r for r in run.thermo if "TotEng" in r]) == 41
        runs[style] = (md.drift_per_atom_ns(run, 13), run)
    (d_host, rms_host), _ = runs["host"]
    (d_gpu, rms_gpu), _ = runs["gpu-deterministic"]
    print(
        f"NVE 13 atoms: host drift {d_host:.3e}, device gpu {d_gpu:.3e} eV/atom/ns; "
        f"fluctuation {rms_host:.3e} / {rms_gpu:.3e} eV/atom"
    )
    assert abs(d_gpu) < 5e-2 and rms_gpu < 2e-5
    assert abs(d_gpu) <= 2 * abs(d_host) + 1e-4
    assert abs(d_gpu - d_host) < 1e-4
    for _, run in runs.values():
        cleanup(run)


# ------------------------------------------------------------------------------------------------
# Restart continuity
# ------------------------------------------------------------------------------------------------


# The emulated GPU backend runs the device code on one core, ~100x slower than the host engine:
# a few steps of it.
HALF = {"host": 20, "gpu-deterministic": 3, "gpu-atomic": 3}


@pytest.mark.parametrize(
    "style,nprocs,via",
    [
        ("host", 1, "restart"),
        ("host", 2, "restart"),
        ("host", 1, "data"),
        ("host", 2, "data"),
        ("gpu-deterministic", 1, "restart"),
        ("gpu-deterministic", 1, "data"),
    ],
)
def test_restart_continues_bitwise(backend, style, nprocs, via):
    """Steps N..2N after read_restart / read_data in a new process (32 atoms, orthogonal box)
    are, bit for bit (positions, velocities, forces at step 2N and every thermo row), those of
    the same process going on with a second `run` at step N: on the host engine and on the CUDA
    engine in deterministic mode (its sums run in a fixed order, set by the atoms alone)."""
    model, pair, half = _bundled(), STYLES[style], HALF[style]
    ref = md.uninterrupted(model, pair, 2 * half, nprocs=nprocs, split=half)
    first = md.first_half(model, pair, half, via=via, nprocs=nprocs)
    assert ref.returncode == 0, ref.output[-3000:]
    assert first.returncode == 0, first.output[-3000:]
    second = md.second_half(model, pair, half, 2 * half, first.workdir, via=via, nprocs=nprocs)
    assert second.returncode == 0, second.output[-3000:]
    a, b = md.state_at(ref, "final.dump"), md.state_at(second, "final.dump")
    assert a.timestep == b.timestep == 2 * half
    diff = md.max_state_difference(a, b)
    print(f"restart {style}, {nprocs} ranks, via {via}: max |d(x, v, f)| = {diff:.3e}")
    assert diff == 0.0
    rows = {r["Step"]: r for r in ref.thermo}
    for r in second.thermo:
        assert r == rows[r["Step"]], (r, rows[r["Step"]])
    for run in (ref, first, second):
        cleanup(run)


@pytest.mark.parametrize("via", ["restart", "data"])
def test_nequip_restart_continues_bitwise(via):
    """The bundled NequIP model on the host engine: the same bitwise continuation (20 steps,
    then 20 more in a new process)."""
    model = _bundled("cuau-nequip")
    ref = md.uninterrupted(model, "", 40, split=20)
    first = md.first_half(model, "", 20, via=via)
    assert first.returncode == 0, first.output[-3000:]
    second = md.second_half(model, "", 20, 40, first.workdir, via=via)
    for run in (ref, second):
        assert run.returncode == 0, run.output[-3000:]
    diff = md.max_state_difference(
        md.state_at(ref, "final.dump"), md.state_at(second, "final.dump")
    )
    print(f"NequIP restart via {via}: max |d(x, v, f)| = {diff:.3e}")
    assert diff == 0.0
    rows = {r["Step"]: r for r in ref.thermo}
    for r in second.thermo:
        assert r == rows[r["Step"]], (r, rows[r["Step"]])
    for run in (ref, first, second):
        cleanup(run)


@pytest.mark.parametrize("style", ["host", "gpu-deterministic"])
def test_triclinic_box_restart_continues_to_round_off(backend, style):
    """The same restart in a triclinic box of zero tilt: LAMMPS makes ghosts through
    fractional coordinates, and write_restart's extra x -> lamda -> x round trip moves some
    ghosts by an ulp (md_holds.crystal), so no pair style continues such a run bitwise; the
    trajectories agree to round-off (3 steps on: 4e-16 on the host engine, 1e-16 on the CUDA
    engine here)."""
    model, pair, half = _bundled(), STYLES[style], HALF["gpu-deterministic"]
    ref = md.uninterrupted(model, pair, 2 * half, split=half, triclinic=True)
    first = md.first_half(model, pair, half, via="restart", triclinic=True)
    assert first.returncode == 0, first.output[-3000:]
    second = md.second_half(model, pair, half, 2 * half, first.workdir, via="restart")
    for run in (ref, second):
        assert run.returncode == 0, run.output[-3000:]
    diff = md.max_state_difference(
        md.state_at(ref, "final.dump"), md.state_at(second, "final.dump")
    )
    print(f"triclinic restart {style}: max |d(x, v, f)| = {diff:.3e}")
    assert diff < 1e-12
    for run in (ref, first, second):
        cleanup(run)


@pytest.mark.parametrize("order", ["fixed", "lammps-defaults"])
def test_restart_continues_a_single_run_to_round_off(order):
    """Against one `run 40`: the restart's re-wrapping of positions at step 20 (and, with
    LAMMPS's defaults, atoms re-sorted at setup and lists rebuilt at other steps) changes the
    last bits; the trajectories agree to round-off."""
    model = _bundled()
    order = md.DETERMINISTIC_ORDER if order == "fixed" else ""
    ref = md.uninterrupted(model, "", 40, order=order)
    first = md.first_half(model, "", 20, via="restart", order=order)
    second = md.second_half(model, "", 20, 40, first.workdir, via="restart", order=order)
    for run in (ref, first, second):
        assert run.returncode == 0, run.output[-3000:]
    diff = md.max_state_difference(
        md.state_at(ref, "final.dump"), md.state_at(second, "final.dump")
    )
    print(f"restart vs one run ({order or 'defaults'}): max |d(x, v, f)| = {diff:.3e}")
    assert diff < 1e-9
    for run in (ref, first, second):
        cleanup(run)


def test_atomic_mode_restart_continues_to_round_off(backend):
    model, pair = _bundled(), STYLES["gpu-atomic"]
    ref = md.uninterrupted(model, pair, 6, split=3)
    first = md.first_half(model, pair, 3, via="restart")
    second = md.second_half(model, pair, 3, 6, first.workdir, via="restart")
    for run in (ref, first, second):
        assert run.returncode == 0, run.output[-3000:]
    diff = md.max_state_difference(
        md.state_at(ref, "final.dump"), md.state_at(second, "final.dump")
    )
    print(f"atomic mode restart: max |d(x, v, f)| = {diff:.3e}")
    assert diff < 1e-9
    for run in (ref, first, second):
        cleanup(run)


@pytest.mark.parametrize("nprocs", [1, 2])
def test_killed_run_restarts_from_its_last_restart_file(nprocs):
    """SIGKILL at step 25 of a 40-step run writing restart files every 10 steps: r.10 and r.20
    exist, nothing after; a new process from r.20 ends, bit for bit, where the run going on
    from step 20 (a second `run` in one process) ends: nothing lost but steps 21..25."""
    model = _bundled()
    ref = md.uninterrupted(model, "", 40, nprocs=nprocs, split=20)
    killed = md.killed_run(model, "", 40, 25, 10, nprocs=nprocs)
    assert ref.returncode == 0, ref.output[-3000:]
    assert killed.returncode != 0, "the run was not killed"
    files = md.restart_files(killed.workdir)
    assert list(files) == [10, 20], files
    assert max(r["Step"] for r in killed.thermo) >= 25
    second = md.second_half(
        model, "", 20, 40, killed.workdir, via="restart", nprocs=nprocs, restart_file="r.20"
    )
    assert second.returncode == 0, second.output[-3000:]
    assert (
        md.max_state_difference(md.state_at(ref, "final.dump"), md.state_at(second, "final.dump"))
        == 0.0
    )
    for run in (ref, killed, second):
        cleanup(run)


# ------------------------------------------------------------------------------------------------
# Loud failures
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("style,first_run", [("host", 0), ("host", 20), ("gpu-deterministic", 0)])
def test_nan_in_the_model_output_names_atom_and_step(backend, tmp_path, style, first_run):
    """A model file whose Au weights overflow (finite, so the reader accepts it): the Au dimer,
    atoms 33 and 34, gets non-finite energies and forces; the error names those two only (the
    Cu cluster is out of their reach) and the step: 0, or 20 when the good model ran the first
    20 steps."""
    bad = md.overflowing_model(_bundled(), "products.0.contractions.0.nu3.W", 1)
    run = run_lammps(
        md.nan_input(_bundled(), STYLES[style], first_run),
        files={"data.in": md.cluster_with_far_atom(), "bad.safetensors": bad},
    )
    text = md.error_text(run)
    assert run.returncode != 0
    assert "ERROR" in text and "non-finite result (NaN or inf)" in text, text[-3000:]
    assert f"at step {first_run}: the energy of atoms 33 (" in text, text[-3000:]
    # Only the dimer: atoms 33 and 34, the one edge between them both ways, nothing more.
    assert "), 34 (" in text and "the forces between atoms 33-34, 34-33." in text, text[-3000:]


def test_nan_only_where_the_defect_is():
    """The same crafted model on an all-Cu system runs: the check does not fire on finite
    output (the weights scaled are Au's only)."""
    bad = md.overflowing_model(_bundled(), "products.0.contractions.0.nu3.W", 1)
    run = run_lammps(
        md.nan_input(_bundled(), ""),
        files={"data.in": md.cluster_with_far_atom(au_far=False), "bad.safetensors": bad},
    )
    assert run.returncode == 0, run.output[-3000:]
    cleanup(run)


@pytest.mark.parametrize("style", ["host", "gpu-deterministic"])
@pytest.mark.parametrize("nprocs", [1, 2])
def test_overlapping_atoms_name_ids_and_step(backend, style, nprocs):
    run = run_lammps(md.overlap_input(_bundled(), STYLES[style]), nprocs=nprocs)
    text = md.error_text(run)
    assert run.returncode != 0
    assert "at step 0, atoms 1 and 2 (0.05 A apart) are closer than the 0.1 A" in text, text[-3000:]


@pytest.mark.parametrize("nprocs", [1, 2])
def test_atom_leaving_a_nonperiodic_box_names_it(nprocs):
    """Atom 5 at 2 A/fs towards the -x wall, 10 A away: lost on the rebuild after it crosses."""
    run = run_lammps(
        md.flying_atom_input(_bundled(), "", boundary="f f f", speed=-2000),
        nprocs=nprocs,
        files={"data.in": md.crystal_far_from_walls()},
    )
    text = md.error_text(run)
    assert run.returncode != 0
    assert "lost atoms at step" in text and "missing atom IDs 5." in text, text[-3000:]
    assert "107 of 108 atoms remain" in text


def test_atom_jumping_past_a_subdomain_names_it():
    """2 ranks along x, periodic: atom 5 at 30 A/fs jumps past the other rank's subdomain."""
    run = run_lammps(
        md.flying_atom_input(
            _bundled(), "", boundary="p p p", speed=-30000, processors="processors 2 1 1"
        ),
        nprocs=2,
        files={"data.in": md.crystal(3)},
    )
    text = md.error_text(run)
    assert run.returncode != 0
    assert "lost atoms at step 1:" in text and "missing atom IDs 5." in text, text[-3000:]


def test_lost_atoms_allowed_by_the_input_are_not_an_error():
    """thermo_modify lost warn: the user chose to go on; LAMMPS warns, the run ends normally."""
    run = run_lammps(
        md.flying_atom_input(_bundled(), "", boundary="f f f", speed=-2000, lost="warn"),
        files={"data.in": md.crystal_far_from_walls()},
    )
    assert run.returncode == 0, run.output[-3000:]
    assert "Lost atoms" in md.error_text(run)
    cleanup(run)

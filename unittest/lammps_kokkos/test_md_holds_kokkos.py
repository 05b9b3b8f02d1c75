"""Production MD holds (issue 28) for clebsch/kk: the plain style's checks
(../lammps/test_md_holds.py, inputs from md_holds.py) under ``-k on t 2 -sf kk``: a short
NVE drift, restart continuity (to round-off) through write_restart/read_restart and
write_data/read_data, and the loud failures (NaN/inf output, overlapping atoms, lost atoms)
naming atom IDs and the step, on the host engine and the CUDA engine on the Views (emulated
backend without a GPU)."""

import os

import pytest

import md_holds as md
from lammps_harness import cleanup, run_lammps
from test_pair_clebsch import _bundled, _gpu_present
from test_pair_clebsch_kokkos import KK

STYLES = {"host": "", "device": " device gpu deterministic yes"}


@pytest.fixture
def backend(request, monkeypatch):
    # The "device" cases need the CUDA engine, which CTest names in CLEBSCH_CUDA_LIBRARY when
    # this build has one (none without a CUDA toolkit at configure); without a GPU they run its
    # emulated backend.
    style = getattr(getattr(request.node, "callspec", None), "params", {}).get("style", "device")
    if style != "host" and not os.environ.get("CLEBSCH_CUDA_LIBRARY"):
        pytest.skip("this build has no CUDA engine (no CUDA toolkit was found at configure time)")
    if not _gpu_present():
        monkeypatch.setenv("CLEBSCH_CUDA_BACKEND", "emulated")


def test_kk_nve_drift_1000_steps():
    text = (
        md.header(_bundled(), "")
        + """
velocity all create 1200 4928459 mom yes rot yes dist gaussian loop geom
fix nve all nve
thermo_style custom step pe ke etotal
thermo_modify format float %.17g norm no
thermo 10
run 1000
"""
    )
    run = run_lammps(text, files={"data.in": md.crystal(3)}, extra_args=KK)
    assert run.returncode == 0, run.output[-3000:]
    assert "pair clebsch/kk" in run.log
    drift, rms = md.drift_per_atom_ns(run, 108)
    print(f"NVE clebsch/kk: drift {drift:.3e} eV/atom/ns, fluctuation {rms:.3e} eV/atom")
    assert abs(drift) < 2e-2 and rms < 2e-5
    cleanup(run)


# The emulated backend is ~100x slower than the host engine: a few steps of it.
HALF = {"host": 10, "device": 2}


@pytest.mark.parametrize(
    "style,nprocs,via",
    [("host", 1, "restart"), ("host", 2, "restart"), ("host", 1, "data"), ("device", 1, "restart")],
)
def test_kk_restart_continues_to_round_off(backend, style, nprocs, via):
    """As the plain style's test: a new process from the restart or data file continues the run
    that goes on with a second `run` in one process, here to round-off: clebsch/kk tallies
    forces with atomics and reduces energies and virials across Kokkos threads, in no fixed
    order (measured: 1.8e-15 on 1 rank, 6.7e-16 on 2)."""
    model, pair, half = _bundled(), STYLES[style], HALF[style]
    ref = md.uninterrupted(model, pair, 2 * half, nprocs=nprocs, args=KK, split=half)
    first = md.first_half(model, pair, half, via=via, nprocs=nprocs, args=KK)
    assert ref.returncode == 0, ref.output[-3000:]
    assert first.returncode == 0, first.output[-3000:]
    second = md.second_half(
        model, pair, half, 2 * half, first.workdir, via=via, nprocs=nprocs, args=KK
    )
    assert second.returncode == 0, second.output[-3000:]
    assert "pair clebsch/kk" in second.log
    a, b = md.state_at(ref, "final.dump"), md.state_at(second, "final.dump")
    diff = md.max_state_difference(a, b)
    print(f"clebsch/kk restart {style}, {nprocs} ranks, via {via}: max |d| = {diff:.3e}")
    assert diff < 1e-12
    for run in (ref, first, second):
        cleanup(run)


@pytest.mark.parametrize("style", ["host", "device"])
def test_kk_nan_in_the_model_output_names_atom_and_step(backend, style):
    bad = md.overflowing_model(_bundled(), "products.0.contractions.0.nu3.W", 1)
    run = run_lammps(
        md.nan_input(_bundled(), STYLES[style], 20),
        files={"data.in": md.cluster_with_far_atom(), "bad.safetensors": bad},
        extra_args=KK,
    )
    text = md.error_text(run)
    assert run.returncode != 0
    assert "non-finite result (NaN or inf) at step 20: " in text, text[-3000:]
    # The device engine fills per-atom energies only on steps that ask for them; the forces of
    # the Au dimer name it on every step.
    assert "the forces between atoms 33-34, 34-33." in text, text[-3000:]
    if style == "host":
        assert "the energy of atoms 33 (" in text, text[-3000:]


@pytest.mark.parametrize("style", ["host", "device"])
@pytest.mark.parametrize("nprocs", [1, 2])
def test_kk_overlapping_atoms_name_ids_and_step(backend, style, nprocs):
    run = run_lammps(md.overlap_input(_bundled(), STYLES[style]), nprocs=nprocs, extra_args=KK)
    text = md.error_text(run)
    assert run.returncode != 0
    assert "at step 0, atoms 1 and 2 (0.05 A apart) are closer than the 0.1 A" in text, text[-3000:]


def test_kk_atom_jumping_past_a_subdomain_names_it():
    run = run_lammps(
        md.flying_atom_input(
            _bundled(), "", boundary="p p p", speed=-30000, processors="processors 2 1 1"
        ),
        nprocs=2,
        files={"data.in": md.crystal(3)},
        extra_args=KK,
    )
    text = md.error_text(run)
    assert run.returncode != 0
    assert "lost atoms at step 1:" in text and "missing atom IDs 5." in text, text[-3000:]

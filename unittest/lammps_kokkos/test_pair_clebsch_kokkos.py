"""pair_style clebsch/kk in real LAMMPS runs of a LAMMPS built with KOKKOS (OpenMP backend).

The same LAMMPS-level checks as the plain style (unittest/lammps/test_pair_clebsch.py), on the
plain style's own inputs run with ``-k on t 2 -sf kk`` (so ``pair_style clebsch`` becomes
``clebsch/kk``): golden energies, per-atom energies, forces and virials of every exported model
against the real mace-torch / nequip outputs, newton on and off, per-atom sums, errors. Then
``clebsch/kk`` against the plain ``clebsch`` style in the same binary (without ``-k``), to 1e-10
in float64 on 1, 2 and 4 MPI ranks, which exercises the per-layer ghost exchange through
LAMMPS's Kokkos pair communication (pack/unpack_*_comm_kokkos) and, with newton off, the ghost
force tally.

Environment (set by CTest, test ``lammps_kokkos_integration``): CLEBSCH_LMP (the chroot's lmp
wrapper), CLEBSCH_MPIEXEC (its mpirun), CLEBSCH_PLUGIN (the plugin built against that LAMMPS),
CLEBSCH_MODELS_DIR, CLEBSCH_BUNDLED_DIR. Nothing here skips but the CUDA engine's test on a
build without one (the configure fails instead under CLEBSCH_REQUIRE_ALL).
"""

import os

import numpy as np
import pytest

from lammps_harness import cleanup, run_lammps
from structures import data_file, golden_structures, model_species, to_lammps
from test_pair_clebsch import (
    _gpu_present,
    BASIC,
    CUAU_INPUT,
    NKTV2P_METAL,
    TOL_F64,
    _bundled,
    _input,
    _model_params,
    _pair_args,
    _virial_from_row,
    cuau_crystal,
)

# The Kokkos command-line switches: OpenMP threads here; a GPU host runs the same tests with
# CLEBSCH_KK_ARGS="-k on g 1 -sf kk" against LAMMPS built with Kokkos CUDA.
KK = os.environ.get("CLEBSCH_KK_ARGS", "-k on t 2 -sf kk").split()
FORCE_COLUMNS = ("fx", "fy", "fz")


def _used_kk(run):
    # LAMMPS names the pair style of each neighbor list request in its log.
    return "pair clebsch/kk" in run.log


def test_environment_is_the_kokkos_lammps():
    for var in ("CLEBSCH_LMP", "CLEBSCH_PLUGIN", "CLEBSCH_MPIEXEC"):
        assert os.environ.get(var), (
            f"{var} is not set: run through ctest (lammps_kokkos_integration)"
        )


@pytest.mark.parametrize("nprocs", [1, 2])
def test_plugin_registers_the_kokkos_styles(nprocs):
    run = run_lammps("plugin load ${plugin}\nplugin list\n", nprocs=nprocs, extra_args=KK)
    assert run.returncode == 0, run.output
    for name in ("clebsch", "clebsch/kk", "clebsch/kk/device", "clebsch/kk/host"):
        assert f"pair style plugin {name}\n" in run.log, run.log
    assert "KOKKOS mode with Kokkos version" in run.log, run.log
    cleanup(run)


# ------------------------------------------------------------------------------------------------
# Golden data of the exported models (real mace-torch / nequip, float64)
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", _model_params())
@pytest.mark.parametrize("newton", ["on", "off"])
def test_golden_structures_match_python_model_kk(model, newton):
    assert model is not None, "exported models missing"
    name, path, golden_path = model
    elements = model_species(path)
    for s in golden_structures(golden_path):
        box, positions, rot = to_lammps(s.positions, s.cell, s.pbc)
        boundary = " ".join("p" if p else "f" for p in s.pbc)
        run = run_lammps(
            _input(path, elements, boundary, newton=newton, pair_args=_pair_args(golden_path)),
            extra_args=KK,
            files={"data.test": data_file(box, positions, s.species + 1, len(elements))},
        )
        assert run.returncode == 0, run.output
        assert _used_kk(run), run.log
        row = run.thermo[0]
        frame = run.dump("dump.out")[0]
        forces = np.stack([frame.column(c) for c in FORCE_COLUMNS], axis=1) @ rot.T
        scale_e = max(1.0, abs(s.energy))
        assert abs(row["PotEng"] - s.energy) <= TOL_F64 * scale_e, (name, s.name)
        np.testing.assert_allclose(
            frame.column("c_pe"),
            s.node_energy,
            rtol=0,
            atol=TOL_F64 * scale_e,
            err_msg=f"{name} {s.name}",
        )
        np.testing.assert_allclose(
            forces, s.forces, rtol=0, atol=TOL_F64, err_msg=f"{name} {s.name}"
        )
        w_atoms = -_virial_from_row(row, [row[f"c_sums[{k}]"] for k in range(2, 8)]) / NKTV2P_METAL
        w_press = _virial_from_row(
            row, [row[k] for k in ("Pxx", "Pyy", "Pzz", "Pxy", "Pxz", "Pyz")]
        )
        w_press *= row["Volume"] / NKTV2P_METAL
        for w in (w_atoms, w_press):
            np.testing.assert_allclose(
                rot @ w @ rot.T,
                s.virial,
                rtol=0,
                atol=TOL_F64 * max(1.0, np.abs(s.virial).max()),
                err_msg=f"{name} {s.name}",
            )
        assert row["c_sums[1]"] == pytest.approx(row["PotEng"], rel=1e-12, abs=1e-12)
        cleanup(run)


# ------------------------------------------------------------------------------------------------
# clebsch/kk against the plain clebsch style, same binary, 1/2/4 ranks
# ------------------------------------------------------------------------------------------------


def _cuau_run(style_args, nprocs, *, n=5, steps=10, newton="on", pair_args="", dump_every=10):
    """The plain style's Cu-Au input; @p pair_args follows ``pair_style clebsch``."""
    text = CUAU_INPUT.format(
        newton=newton,
        model=_bundled(),
        temp=600,
        steps=steps,
        thermo=1,
        dump_every=dump_every,
        pair_args=pair_args,
    )
    return run_lammps(
        text, nprocs=nprocs, extra_args=style_args, files={"data.cuau": cuau_crystal(n)}
    )


def _compare(kk, plain, *, f_tol, e_tol, x_tol=None, label=""):
    """Asserts /kk equals plain; returns max |dF| at step 0."""
    for run in (kk, plain):
        assert run.returncode == 0, run.output
    assert _used_kk(kk) and not _used_kk(plain), (kk.log[-3000:], plain.log[-3000:])
    a, b = kk.dump("dump.out"), plain.dump("dump.out")
    assert a[0].data.shape == b[0].data.shape
    df = max(np.abs(a[0].column(c) - b[0].column(c)).max() for c in FORCE_COLUMNS)
    for col in FORCE_COLUMNS:
        np.testing.assert_allclose(
            a[0].column(col), b[0].column(col), rtol=0, atol=f_tol, err_msg=f"{label} {col}"
        )
    np.testing.assert_allclose(
        a[0].column("c_pe"), b[0].column("c_pe"), rtol=0, atol=e_tol, err_msg=f"{label} c_pe"
    )
    assert len(kk.thermo) == len(plain.thermo)
    r, p = kk.thermo[0], plain.thermo[0]
    assert r["PotEng"] == pytest.approx(p["PotEng"], rel=0, abs=e_tol * len(a[0].data)), label
    for key in ("Pxx", "Pyy", "Pzz", "Pxy", "Pxz", "Pyz", "c_sums[1]", "c_sums[2]", "c_sums[7]"):
        assert r[key] == pytest.approx(p[key], rel=1e3 * e_tol, abs=1e3 * e_tol), (label, key)
    if x_tol is not None:
        for col in ("x", "y", "z"):
            np.testing.assert_allclose(
                a[-1].column(col),
                b[-1].column(col),
                rtol=0,
                atol=x_tol,
                err_msg=f"{label} {col} at the last step",
            )
        for s, t in zip(kk.thermo, plain.thermo):
            assert s["TotEng"] == pytest.approx(t["TotEng"], rel=0, abs=x_tol), label
    return df


@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_kk_equals_plain_float64(nprocs):
    """500 atoms, 10 MD steps: step-0 forces, per-atom energies and virials to 1e-10, the
    trajectory to 1e-8, on the Kokkos style (-k on t 2 -sf kk) and the plain one."""
    kk = _cuau_run(KK, nprocs)
    plain = _cuau_run([], nprocs)
    df = _compare(kk, plain, f_tol=1e-10, e_tol=1e-10, x_tol=1e-8, label=f"{nprocs} ranks")
    print(f"clebsch/kk vs clebsch, float64, {nprocs} MPI ranks: max |dF| = {df:.3e} eV/A")
    cleanup(kk)
    cleanup(plain)


@pytest.mark.parametrize("nprocs", [1, 2])
def test_kk_newton_off_equals_plain(nprocs):
    """newton off: on 2 ranks the ghost forces and virials come back through the Kokkos reverse
    communication of clebsch/kk's own tally."""
    kk = _cuau_run(KK, nprocs, n=4, steps=0, newton="off", dump_every=1)
    plain = _cuau_run([], nprocs, n=4, steps=0, newton="on", dump_every=1)
    df = _compare(kk, plain, f_tol=1e-10, e_tol=1e-10, label=f"newton off, {nprocs} ranks")
    print(f"clebsch/kk newton off vs clebsch newton on, {nprocs} ranks: max |dF| = {df:.3e} eV/A")
    cleanup(kk)
    cleanup(plain)


@pytest.mark.skipif(
    not os.environ.get("CLEBSCH_CUDA_LIBRARY"),
    reason="this build has no CUDA engine (no CUDA toolkit was found at configure time)",
)
@pytest.mark.parametrize("nprocs,newton", [(1, "on"), (2, "on"), (4, "on"), (2, "off")])
def test_kk_device_engine_on_the_views_equals_plain(monkeypatch, nprocs, newton):
    """device gpu: clebsch/kk runs the CUDA engine on its graph Views in place
    (CudaEngine::compute_device), and the engine hands its per-layer ghost rows, in its own
    memory, to the Kokkos pair communication. Without a GPU the CUDA engine's emulated backend
    runs the same device code on host memory (the Views of Kokkos OpenMP). Equal to the plain
    style's host engine to 1e-10 in float64, on 1, 2 and 4 ranks, newton on and off."""
    if not _gpu_present():
        monkeypatch.setenv("CLEBSCH_CUDA_BACKEND", "emulated")
    kk = _cuau_run(KK, nprocs, n=4, steps=0, newton=newton, dump_every=1, pair_args=" device gpu")
    plain = _cuau_run([], nprocs, n=4, steps=0, dump_every=1)
    assert "on the Kokkos Views in place" in kk.log, kk.log[-3000:]
    label = f"device engine, {nprocs} ranks, newton {newton}"
    df = _compare(kk, plain, f_tol=1e-10, e_tol=1e-10, label=label)
    print(f"clebsch/kk device gpu vs clebsch device cpu, {label}: max |dF| = {df:.3e} eV/A")
    cleanup(kk)
    cleanup(plain)


def test_kk_host_variant_equals_plain():
    kk = _cuau_run(KK, 2, n=4, steps=0, dump_every=1, pair_args="/kk/host")
    plain = _cuau_run([], 2, n=4, steps=0, dump_every=1)
    _compare(kk, plain, f_tol=1e-10, e_tol=1e-10, label="clebsch/kk/host")
    cleanup(kk)
    cleanup(plain)


def test_kk_float32_exchange_matches_plain():
    """precision fp32 on 2 ranks: the exchanged node features are float32 rows."""
    kk = _cuau_run(KK, 2, n=4, steps=0, dump_every=1, pair_args=" precision fp32")
    plain = _cuau_run([], 2, n=4, steps=0, dump_every=1, pair_args=" precision fp32")
    df = _compare(kk, plain, f_tol=1e-4, e_tol=1e-5, label="fp32")
    print(f"clebsch/kk vs clebsch, float32, 2 ranks: max |dF| = {df:.3e} eV/A")
    cleanup(kk)
    cleanup(plain)


def test_kk_empty_subdomain_runs_and_matches_serial_plain():
    text = f"""
units metal
atom_style atomic
atom_modify map array
boundary f f f
processors 2 1 1
region box block 0 40 0 20 0 20
create_box 2 box
lattice fcc 3.75 origin 0.1 0.1 0.1
region left block 2 14 2 18 2 18 units box
create_atoms 1 region left
set type 1 type/fraction 2 0.3 99
mass 1 63.546
mass 2 196.97
plugin load ${{plugin}}
pair_style clebsch
pair_coeff * * {_bundled()} Cu Au
thermo_style custom step pe press
thermo_modify format float %.17g
dump d all custom 1 dump.out id fx fy fz
dump_modify d format float %.17g sort id
run 0
"""
    serial = run_lammps(text.replace("processors 2 1 1", ""))
    parallel = run_lammps(text, nprocs=2, extra_args=KK)
    for run in (serial, parallel):
        assert run.returncode == 0, run.output
    assert _used_kk(parallel)
    assert parallel.thermo[0]["PotEng"] == pytest.approx(serial.thermo[0]["PotEng"], rel=1e-12)
    for col in FORCE_COLUMNS:
        np.testing.assert_allclose(
            parallel.dump("dump.out")[0].column(col),
            serial.dump("dump.out")[0].column(col),
            rtol=0,
            atol=1e-10,
        )
    cleanup(serial)
    cleanup(parallel)


# ------------------------------------------------------------------------------------------------
# Bad input: the plain style's clear errors, through clebsch/kk
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "units,ntypes,coeff,message",
    [
        (
            "metal",
            1,
            "pair_coeff * * /nonexistent/model.safetensors Cu",
            'cannot open model file "/nonexistent/model.safetensors"',
        ),
        ("metal", 1, "pair_coeff * * {model} Zr", "element Zr (atom type 1) is not in model"),
        ("metal", 2, "pair_coeff * * {model} Cu", "2 atom types, got 1 names"),
        ("real", 1, "pair_coeff * * {model} Cu", "requires 'units metal'"),
    ],
)
def test_bad_input_gives_clear_error_kk(units, ntypes, coeff, message):
    run = run_lammps(
        BASIC.format(units=units, ntypes=ntypes, coeff=coeff.format(model=_bundled())),
        extra_args=KK,
    )
    assert run.returncode != 0
    assert "ERROR" in run.output and message in run.output, run.output[-2000:]


def test_atoms_too_close_is_an_error_kk():
    text = f"""
units metal
atom_style atomic
region box block 0 10 0 10 0 10
create_box 1 box
create_atoms 1 single 5 5 5
create_atoms 1 single 5 5 5.01
mass 1 63.5
plugin load ${{plugin}}
pair_style clebsch
pair_coeff * * {_bundled()} Cu
run 0
"""
    run = run_lammps(text, extra_args=KK)
    assert run.returncode != 0
    text = run.output + run.log
    assert "ERROR" in text and "overlapping atoms" in text and "0.01" in text, text[-2000:]


def test_kk_host_communication_path_equals_plain():
    """'package kokkos comm/pair/* host': LAMMPS's host communication calls the style's host
    pack/unpack (the same kernels on host buffers, staged through device copies on a GPU; the
    path LAMMPS also takes without GPU-aware MPI) instead of the *_comm_kokkos ones."""
    args = KK + ["-pk", "kokkos", "comm/pair/forward", "host", "comm/pair/reverse", "host"]
    kk = _cuau_run(args, 2, n=4, steps=0, newton="off", dump_every=1)
    plain = _cuau_run([], 2, n=4, steps=0, dump_every=1)
    _compare(kk, plain, f_tol=1e-10, e_tol=1e-10, label="host comm path")
    cleanup(kk)
    cleanup(plain)

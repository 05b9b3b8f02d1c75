"""pair_style clebsch as LAMMPS scripts use it: re-issued pair_style, pair_style hybrid/overlay
with NULL types and with LAMMPS's own pair styles, and pair_coeff errors under hybrid.

References are independent of the style under test: a fresh run with the keywords the re-issued
line should have restored; for hybrid/overlay, separate runs with each sub-style alone (LAMMPS's
own zbl and lj/cut, and clebsch on the system without the NULL-type atoms), whose energies,
per-atom energies, forces and pressures must add up to the hybrid run's.

Environment (set by CTest): CLEBSCH_LMP, CLEBSCH_PLUGIN, CLEBSCH_BUNDLED_DIR, CLEBSCH_CUDA_ENGINE.
"""

import functools
import os
import pathlib
import re
import subprocess

import numpy as np
import pytest

from lammps_harness import cleanup, lammps_executable, run_lammps

MODEL = pathlib.Path(os.environ.get("CLEBSCH_BUNDLED_DIR", "")) / "cuau-mace.safetensors"


@functools.lru_cache(maxsize=None)
def _data(ntypes, n, null_fraction):
    """An n^3-cell fcc Cu-Au crystal, jittered; with ntypes 3 a fraction of type 3 atoms. Made
    once on one rank and written as a data file, so that every run (any rank count) reads the
    same atoms with the same IDs."""
    text = f"""
units metal
atom_style atomic
lattice fcc 3.75
region box block 0 {n} 0 {n} 0 {n}
create_box {ntypes} box
create_atoms 1 box
set type 1 type/fraction 2 0.25 20261129
displace_atoms all random 0.08 0.08 0.08 4821 units box
mass * 63.5
"""
    if null_fraction:
        text += f"set type 1 type/fraction 3 {null_fraction} 77\n"
    run = run_lammps(text + "write_data data.sys\n")
    assert run.returncode == 0, run.output[-3000:]
    data = (run.workdir / "data.sys").read_text()
    cleanup(run)
    return data


def _run(head, body, nprocs=1):
    """Run @p body on the system (ntypes, n, null_fraction) = @p head."""
    text = "units metal\natom_style atomic\nread_data data.sys\nplugin load ${plugin}\n" + body
    return run_lammps(text, nprocs=nprocs, files={"data.sys": _data(*head)})


TWO, SMALL, THREE = (2, 3, 0.0), (2, 2, 0.0), (3, 4, 0.15)

OUTPUT = """
compute pe all pe/atom
thermo_style custom step pe press pxx pyy pzz pxy pxz pyz {extra}
thermo_modify format float %.17g norm no
dump d all custom 1 dump.out id type fx fy fz c_pe
dump_modify d format float %.17g sort id
run 0
"""


def _ok(run):
    assert run.returncode == 0, run.output[-3000:]
    return run


def _forces(run):
    frame = run.dump("dump.out")[-1]
    return frame, np.stack([frame.column(c) for c in ("fx", "fy", "fz")], axis=1)


# ------------------------------------------------------------------------------------------------
# Re-issued pair_style
# ------------------------------------------------------------------------------------------------

REISSUE = """
pair_style clebsch {first}
pair_coeff * * {model} Cu Au
thermo_style custom step pe
thermo_modify format float %.17g norm no
run 0
pair_style clebsch {second}
run 0
"""


def test_reissued_pair_style_resets_keywords_and_rebuilds_the_engine():
    """precision fp32, then a plain `pair_style clebsch`: the second run is fp64 again (the
    default), with the model of the first pair_coeff, equal to a fresh fp64 run."""
    run = _ok(_run(TWO, REISSUE.format(first="precision fp32", second="", model=MODEL)))
    fresh = _ok(_run(TWO, REISSUE.format(first="", second="", model=MODEL)))
    e32, e64_reissued = run.thermo[0]["PotEng"], run.thermo[1]["PotEng"]
    e64 = fresh.thermo[0]["PotEng"]
    assert "engine rebuilt" in run.log and "precision fp64, device cpu" in run.log, run.log[-2000:]
    # fp32 really differs, so that the equality below says the engine was rebuilt.
    assert abs(e32 - e64) > 1e-8, (e32, e64)
    assert abs(e64_reissued - e64) <= 1e-10 * max(1.0, abs(e64)), (e64_reissued, e64)
    # The same keywords again: nothing to rebuild.
    assert "engine rebuilt" not in fresh.log
    cleanup(run)
    cleanup(fresh)


@pytest.mark.skipif(
    os.environ.get("CLEBSCH_CUDA_ENGINE", "1") == "0",
    reason="this build has no CUDA engine (no CUDA toolkit was found at configure time)",
)
def test_reissued_pair_style_leaves_the_gpu(monkeypatch):
    """`device gpu` then a plain `pair_style clebsch`: back on the host engine (emulated backend
    without a GPU)."""
    if not any(pathlib.Path(p).exists() for p in ("/dev/nvidia0", "/dev/nvidiactl")):
        monkeypatch.setenv("CLEBSCH_CUDA_BACKEND", "emulated")
    run = _ok(_run(SMALL, REISSUE.format(first="device gpu", second="", model=MODEL)))
    rebuilt = run.log[run.log.index("engine rebuilt") :]
    assert "device cpu" in rebuilt.splitlines()[0], rebuilt[:500]
    a, b = run.thermo[0]["PotEng"], run.thermo[1]["PotEng"]
    assert abs(a - b) <= 1e-10 * max(1.0, abs(a)), (a, b)
    cleanup(run)


# ------------------------------------------------------------------------------------------------
# hybrid/overlay
# ------------------------------------------------------------------------------------------------

ZBL = "pair_coeff 1 1 zbl 29 29\npair_coeff 1 2 zbl 29 79\npair_coeff 2 2 zbl 79 79\n"


def _assert_sum(total, parts, label):
    ft = _forces(total)[1]
    fs = sum(_forces(p)[1] for p in parts)
    np.testing.assert_allclose(ft, fs, rtol=0, atol=1e-10, err_msg=label)
    et = _forces(total)[0].column("c_pe")
    es = sum(_forces(p)[0].column("c_pe") for p in parts)
    np.testing.assert_allclose(et, es, rtol=0, atol=1e-10, err_msg=label)
    for key in ("PotEng", "Pxx", "Pyy", "Pzz", "Pxy", "Pxz", "Pyz"):
        s = sum(p.thermo[0][key] for p in parts)
        assert total.thermo[0][key] == pytest.approx(s, rel=1e-10, abs=1e-8), (label, key)


def test_hybrid_overlay_with_zbl_adds_up():
    """hybrid/overlay clebsch + zbl equals clebsch alone plus zbl alone: energy, per-atom
    energies, forces and the pressure tensor."""
    hybrid = _ok(
        _run(
            TWO,
            "pair_style hybrid/overlay clebsch zbl 2.0 3.0\n"
            + f"pair_coeff * * clebsch {MODEL} Cu Au\n"
            + ZBL
            + OUTPUT.format(extra=""),
        )
    )
    alone = _ok(
        _run(TWO, f"pair_style clebsch\npair_coeff * * {MODEL} Cu Au\n" + OUTPUT.format(extra=""))
    )
    zbl = _ok(
        _run(TWO, "pair_style zbl 2.0 3.0\n" + ZBL.replace(" zbl", "") + OUTPUT.format(extra=""))
    )
    # zbl contributes (the neighbour distance 2.65 A lies inside its switching range).
    assert np.abs(_forces(zbl)[1]).max() > 1e-3
    _assert_sum(hybrid, [alone, zbl], "clebsch + zbl")
    for r in (hybrid, alone, zbl):
        cleanup(r)


LJ = (
    "pair_coeff 1 3 lj/cut 0.02 2.3\npair_coeff 2 3 lj/cut 0.03 2.4\n"
    "pair_coeff 3 3 lj/cut 0.05 2.5\n"
)


def _null_hybrid(nprocs):
    return _run(
        THREE,
        "pair_style hybrid/overlay clebsch lj/cut 5.0\n"
        + f"pair_coeff * * clebsch {MODEL} Cu Au NULL\n"
        + LJ
        + "compute pc all pair clebsch\n"
        + OUTPUT.format(extra="c_pc"),
        nprocs=nprocs,
    )


@pytest.mark.parametrize("nprocs", [1, 2])
def test_hybrid_overlay_null_type_is_left_to_the_other_style(nprocs):
    """Type 3 is NULL for clebsch and covered by lj/cut only. The model's part equals clebsch on
    the system without the type-3 atoms; lj/cut's part equals lj/cut alone (zero epsilon
    between the model's types); on two ranks the per-layer exchange skips the NULL atoms."""
    hybrid = _ok(_null_hybrid(nprocs))
    lj = _ok(
        _run(
            THREE,
            "pair_style lj/cut 5.0\npair_coeff 1*2 1*2 0.0 1.0\n"
            + LJ.replace(" lj/cut", "")
            + OUTPUT.format(extra=""),
        )
    )
    without = _ok(
        _run(
            THREE,
            "group null type 3\ndelete_atoms group null compress no\n"
            + f"pair_style clebsch\npair_coeff * * {MODEL} Cu Au Cu\n"
            + OUTPUT.format(extra=""),
        )
    )
    frame_h, f_h = _forces(hybrid)
    frame_lj, f_lj = _forces(lj)
    frame_w, f_w = _forces(without)
    model_part = f_h - f_lj
    is_null = frame_h.column("type") == 3
    assert is_null.sum() > 0
    np.testing.assert_allclose(model_part[is_null], 0.0, rtol=0, atol=1e-10)
    assert np.array_equal(frame_h.column("id")[~is_null], frame_w.column("id"))
    np.testing.assert_allclose(model_part[~is_null], f_w, rtol=0, atol=1e-10)
    e_model = hybrid.thermo[0]["c_pc"]
    assert e_model == pytest.approx(without.thermo[0]["PotEng"], rel=1e-12)
    assert hybrid.thermo[0]["PotEng"] == pytest.approx(e_model + lj.thermo[0]["PotEng"], rel=1e-12)
    if nprocs > 1:
        serial = _ok(_null_hybrid(1))
        np.testing.assert_allclose(f_h, _forces(serial)[1], rtol=0, atol=1e-10)
        cleanup(serial)
    for r in (hybrid, lj, without):
        cleanup(r)


@pytest.mark.parametrize(
    "pair,message",
    [
        (
            "pair_style clebsch\npair_coeff * * {model} Cu NULL\n",
            "atom type 2 is NULL in pair_coeff, which only pair_style hybrid/overlay",
        ),
        (
            "pair_style hybrid/overlay clebsch zbl 2.0 3.0\n"
            "pair_coeff * * clebsch {model} Cu Zr\n" + ZBL,
            "element Zr (atom type 2) is not in model",
        ),
        (
            "pair_style hybrid/overlay clebsch zbl 2.0 3.0\npair_coeff * * clebsch {model} Cu\n",
            "2 atom types, got 1 names",
        ),
        (
            "pair_style hybrid/overlay clebsch zbl 2.0 3.0\n"
            "pair_coeff * * clebsch {model} NULL NULL\n",
            "pair_coeff maps every atom type to NULL",
        ),
    ],
)
def test_pair_coeff_errors_are_clear_alone_and_under_hybrid(pair, message):
    run = _run(SMALL, pair.format(model=MODEL) + "run 0\n")
    text = run.output + run.log
    assert run.returncode != 0
    assert "ERROR" in text and message in text, text[-2000:]


def test_engine_errors_name_lammps_atom_ids():
    """The engine counts graph edges and nodes; the error a user reads names the atoms by the
    IDs of the input (here atoms 7 and 3, 0.01 A apart, IDs chosen unlike their indices)."""
    data = """LAMMPS data: two overlapping atoms with IDs unlike their indices

3 atoms
1 atom types
0 10 xlo xhi
0 10 ylo yhi
0 10 zlo zhi

Masses

1 63.5

Atoms # atomic

11 1 2.0 2.0 2.0
7 1 5.0 5.0 5.0
3 1 5.0 5.0 5.01
"""
    body = f"""
units metal
atom_style atomic
atom_modify map array
read_data data.ov
plugin load ${{plugin}}
pair_style clebsch
pair_coeff * * {MODEL} Cu
run 0
"""
    run = run_lammps(body, files={"data.ov": data})
    out = run.output + run.log
    assert run.returncode != 0
    # The pair style's own check (clebsch_md_checks) stops the run before the engine's, in the
    # same words the engine's message would carry: either names the LAMMPS IDs 7 and 3.
    assert ("overlapping atoms" in out or "closer than" in out) and re.search(
        r"(LAMMPS atom IDs|atoms) (7 and 3|3 and 7)", out
    ), out[-2000:]


def test_citation_reminder_names_the_model_papers(tmp_path):
    """LAMMPS's citation file lists the MACE and NequIP papers when the style is used (lmp run
    here directly: the harness passes -nocite)."""
    (tmp_path / "data.sys").write_text(_data(*SMALL))
    (tmp_path / "in.test").write_text(
        "units metal\natom_style atomic\nread_data data.sys\nplugin load ${plugin}\n"
        f"pair_style clebsch\npair_coeff * * {MODEL} Cu Au\nrun 0\n"
    )
    cmd = [lammps_executable(), "-in", "in.test", "-log", "none", "-cite", "cite.txt"]
    cmd += ["-var", "plugin", os.environ.get("CLEBSCH_PLUGIN", "")]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "pair clebsch (MACE and NequIP models)" in proc.stdout
    cite = (tmp_path / "cite.txt").read_text()
    assert "Batatia2022" in cite and "Batzner2022" in cite, cite[-2000:]


# ------------------------------------------------------------------------------------------------
# memory_usage(): the engine's memory in LAMMPS's memory report
# ------------------------------------------------------------------------------------------------

MEMORY = """
pair_style clebsch {keywords}
pair_coeff * * {model} Cu Au
thermo_style custom step pe
run 0
info memory
"""


def _memory(run):
    """LAMMPS's own sum of every object's memory_usage() ("Total dynamically allocated memory",
    the same sum as the memory line of run) and the allocator's count of heap bytes in use
    ("Current reserved memory pool size", glibc's mallinfo: an independent measure), Mbyte."""
    text = run.output
    total = float(re.search(r"Total dynamically allocated memory: ([\d.e+]+) Mbyte", text)[1])
    pool = float(re.search(r"Current reserved memory pool size: ([\d.e+]+) Mbyte", text)[1])
    return total, pool


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_memory_report_counts_the_engine(device, monkeypatch):
    """From a small to a larger crystal the heap grows mostly by the engine's buffers (per edge
    and per atom; on the emulated GPU backend device memory is host heap too): LAMMPS's reported
    memory must grow by about as much (between half and 1.5 times the heap's growth). Without
    the engine in the pair style's memory_usage() it grows by the graph and neighbor lists only,
    a small part of the heap's growth."""
    if device == "gpu":
        if os.environ.get("CLEBSCH_CUDA_ENGINE", "1") == "0":
            pytest.skip(
                "this build has no CUDA engine (no CUDA toolkit was found at configure time)"
            )
        if any(pathlib.Path(p).exists() for p in ("/dev/nvidia0", "/dev/nvidiactl")):
            pytest.skip("on a GPU device memory is not host heap (the engine test checks it)")
        monkeypatch.setenv("CLEBSCH_CUDA_BACKEND", "emulated")
    sizes = (2, 3) if device == "gpu" else (3, 6)
    measured = []
    for n in sizes:
        run = _ok(_run((2, n, 0.0), MEMORY.format(keywords=f"device {device}", model=MODEL)))
        assert "Per MPI rank memory allocation" in run.output
        measured.append(_memory(run))
        cleanup(run)
    (total_a, pool_a), (total_b, pool_b) = measured
    d_total, d_pool = total_b - total_a, pool_b - pool_a
    assert d_pool > 2.0, measured  # Mbyte: the larger crystal needs measurably more
    assert 0.5 * d_pool <= d_total <= 1.5 * d_pool, measured

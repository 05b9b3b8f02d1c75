"""pair_style clebsch in real LAMMPS runs.

References are independent of the pair style: the golden data of each exported model are the
real mace-torch / nequip outputs in float64 (exported by the ``exported_models`` CTest fixture
from freshly built random-weight models), and the MPI tests compare LAMMPS runs on different
rank counts with each other.

Environment (set by CTest): CLEBSCH_LMP, CLEBSCH_PLUGIN, CLEBSCH_MODELS_DIR (models.json of the
fixture), CLEBSCH_BUNDLED_DIR (potentials/bundled).
"""

import json
import os
import pathlib

import numpy as np
import pytest

from lammps_harness import cleanup, run_lammps
from structures import data_file, golden_structures, model_species, read_safetensors, to_lammps

NKTV2P_METAL = 1.6021765e6  # LAMMPS force->nktv2p for units metal
TOL_F64 = 1e-10


def _models():
    index = pathlib.Path(os.environ.get("CLEBSCH_MODELS_DIR", "")) / "models.json"
    if not index.exists():
        pytest.fail(f"{index} is missing: the exported_models CTest fixture must run first")
    models = json.loads(index.read_text())["models"]
    return [(m["name"], index.parent / m["file"], index.parent / m["golden"]) for m in models]


def _model_params():
    try:
        return [pytest.param(m, id=m[0]) for m in _models()]
    except BaseException:  # collected without the fixture: one failing parameter says why
        return [pytest.param(None, id="models-missing")]


def _pair_args(golden_path):
    """``charge Q spin S`` for models with per-structure embeddings (golden structure_inputs)."""
    _, metadata = read_safetensors(golden_path)
    inputs = json.loads(metadata["golden_json"]).get("structure_inputs") or {}
    keyword = {"total_charge": "charge", "total_spin": "spin"}
    return " ".join(f"{keyword[k]} {v!r}" for k, v in inputs.items())


def _input(model, elements, boundary, *, newton="on", extra="", pair_args="", pre=""):
    return f"""
units metal
atom_style atomic
boundary {boundary}
newton {newton}
read_data data.test
plugin load ${{plugin}}
{pre}
pair_style clebsch {pair_args}
pair_coeff * * {model} {" ".join(elements)}
compute pe all pe/atom
compute sa all stress/atom NULL
compute sums all reduce sum c_pe c_sa[1] c_sa[2] c_sa[3] c_sa[4] c_sa[5] c_sa[6]
thermo_style custom step pe pxx pyy pzz pxy pxz pyz vol &
  c_sums[1] c_sums[2] c_sums[3] c_sums[4] c_sums[5] c_sums[6] c_sums[7]
thermo_modify format float %.17g norm no
dump d all custom 1 dump.out id fx fy fz c_pe
dump_modify d format float %.17g
{extra}
run 0
"""


def _run_golden(model_path, structure, *, nprocs=1, newton="on", pair_args="", pre=""):
    elements = model_species(model_path)
    box, positions, rotation = to_lammps(structure.positions, structure.cell, structure.pbc)
    data = data_file(box, positions, structure.species + 1, len(elements))
    boundary = " ".join("p" if p else "f" for p in structure.pbc)
    run = run_lammps(
        _input(model_path, elements, boundary, newton=newton, pair_args=pair_args, pre=pre),
        nprocs=nprocs,
        files={"data.test": data},
    )
    return run, rotation


def _virial_from_row(row, keys):
    w = np.zeros((3, 3))
    for (a, b), value in zip(((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)), keys):
        w[a, b] = w[b, a] = value
    return w


@pytest.mark.parametrize("model", _model_params())
@pytest.mark.parametrize("newton", ["on", "off"])
def test_golden_structures_match_python_model(model, newton):
    assert model is not None, "exported models missing"
    name, path, golden_path = model
    _check_golden(name, path, golden_path, newton=newton)


def _head_params():
    """(name, model, golden file of one head, head, default head) of every multi-head model."""
    try:
        index = pathlib.Path(os.environ.get("CLEBSCH_MODELS_DIR", "")) / "models.json"
        out = []
        for m in json.loads(index.read_text())["models"]:
            for head, golden in (m.get("head_goldens") or {}).items():
                case = (m["name"], index.parent / m["file"], index.parent / golden, head, m["head"])
                out.append(pytest.param(case, id=f"{m['name']}-{head}"))
        return out or [pytest.param(None, id="no-multihead-model")]
    except BaseException:
        return [pytest.param(None, id="models-missing")]


@pytest.mark.parametrize("case", _head_params())
def test_head_keyword_evaluates_that_head_as_mace_torch_does(case):
    """`pair_style clebsch head NAME` on the fixture's two-head model: energies, per-atom
    energies, forces and virials equal mace-torch evaluated on that head (its own golden file)."""
    assert case is not None, "no multi-head model with per-head golden data in models.json"
    name, path, golden_path, head, _ = case
    _check_golden(f"{name} head {head}", path, golden_path, pair_args=f"head {head}")


def test_unknown_head_is_an_error_naming_the_heads():
    case = next(p.values[0] for p in _head_params())
    assert case is not None, "no multi-head model with per-head golden data in models.json"
    _, path, golden_path, _, default = case
    s = golden_structures(golden_path)[0]
    run, _ = _run_golden(path, s, pair_args="head nope")
    assert run.returncode != 0
    assert '"nope" is not a head of the model; its heads are' in run.output, run.output[-2000:]
    assert f"(default {default})" in run.output and "change the head keyword" in run.output
    cleanup(run)


def test_reissued_pair_style_changes_the_head():
    """head of a non-default head, then a plain `pair_style clebsch`: back on the default head,
    each run equal to mace-torch on its head."""
    cases = [p.values[0] for p in _head_params()]
    assert cases[0] is not None, "no multi-head model with per-head golden data in models.json"
    other = next(c for c in cases if c[3] != c[4])
    default = next(c for c in cases if c[3] == c[4] and c[0] == other[0])
    _, path, golden_other, head, _ = other
    s_other = golden_structures(golden_other)[0]
    s_default = golden_structures(default[2])[0]
    assert s_other.name == s_default.name
    elements = model_species(path)
    box, positions, _ = to_lammps(s_other.positions, s_other.cell, s_other.pbc)
    boundary = " ".join("p" if p else "f" for p in s_other.pbc)
    text = (
        _input(path, elements, boundary, pair_args=f"head {head}") + "pair_style clebsch\nrun 0\n"
    )
    data = data_file(box, positions, s_other.species + 1, len(elements))
    run2 = run_lammps(text, files={"data.test": data})
    assert run2.returncode == 0, run2.output
    assert "engine rebuilt" in run2.log
    first, second = run2.thermo[0]["PotEng"], run2.thermo[-1]["PotEng"]
    tol = TOL_F64 * max(1.0, abs(s_default.energy))
    assert abs(first - s_other.energy) <= tol, (first, s_other.energy)
    assert abs(second - s_default.energy) <= tol, (second, s_default.energy)
    cleanup(run2)


def _check_golden(name, path, golden_path, *, newton="on", nprocs=1, pair_args=None, pre=""):
    if pair_args is None:
        pair_args = _pair_args(golden_path)
    for s in golden_structures(golden_path):
        run, rot = _run_golden(path, s, newton=newton, nprocs=nprocs, pair_args=pair_args, pre=pre)
        assert run.returncode == 0, run.output
        row = run.thermo[0]
        frame = run.dump("dump.out")[0]
        forces = np.stack([frame.column(c) for c in ("fx", "fy", "fz")], axis=1) @ rot.T
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
        # Per-atom virials summed, and the global virial from the pressure, against Python.
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
# The bundled Cu-Au MACE model: MPI decomposition, energy conservation, per-atom sums
# ------------------------------------------------------------------------------------------------


def _bundled(name="cuau-mace"):
    path = pathlib.Path(os.environ.get("CLEBSCH_BUNDLED_DIR", "")) / f"{name}.safetensors"
    if not path.exists():
        pytest.fail(f"bundled model {path} is missing")
    return path


def cuau_crystal(n, au_fraction=0.25, a=3.75, jitter=0.05, seed=20261129):
    """An n x n x n fcc Cu-Au crystal as a LAMMPS data file. Built here, not with LAMMPS's
    create_atoms/set/displace_atoms, whose atom IDs and random choices depend on the number of
    MPI ranks; a data file makes every rank count simulate the same system."""
    rng = np.random.default_rng(seed)
    basis = np.array([[0, 0, 0], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]])
    cells = np.array([(i, j, k) for i in range(n) for j in range(n) for k in range(n)], float)
    positions = ((cells[:, None, :] + basis[None, :, :]) * a).reshape(-1, 3)
    positions += rng.normal(scale=jitter, size=positions.shape)
    types = np.where(rng.random(len(positions)) < au_fraction, 2, 1)
    length = n * a
    return data_file(
        (0, length, 0, length, 0, length, 0, 0, 0), positions, types, 2, [63.546, 196.97]
    )


CUAU_INPUT = """
units metal
atom_style atomic
atom_modify map array
newton {newton}
read_data data.cuau
plugin load ${{plugin}}
pair_style clebsch{pair_args}
pair_coeff * * {model} Cu Au
velocity all create {temp} 4928459 mom yes rot yes dist gaussian loop geom
timestep 0.001
fix nve all nve
compute pe all pe/atom
compute sa all stress/atom NULL
compute sums all reduce sum c_pe c_sa[1] c_sa[2] c_sa[3] c_sa[4] c_sa[5] c_sa[6]
thermo_style custom step pe ke etotal press pxx pyy pzz pxy pxz pyz vol &
  c_sums[1] c_sums[2] c_sums[3] c_sums[4] c_sums[5] c_sums[6] c_sums[7]
thermo_modify format float %.17g norm no
thermo {thermo}
dump d0 all custom {dump_every} dump.out id x y z fx fy fz c_pe
dump_modify d0 format float %.17g sort id
run {steps}
"""


def _cuau(
    nprocs=1,
    newton="on",
    n=10,
    steps=100,
    temp=600,
    thermo=10,
    dump_every=100,
    au_fraction=0.25,
    pair_args="",
):
    text = CUAU_INPUT.format(
        newton=newton,
        model=_bundled(),
        temp=temp,
        steps=steps,
        thermo=thermo,
        dump_every=dump_every,
        pair_args=pair_args,
    )
    return run_lammps(
        text, nprocs=nprocs, files={"data.cuau": cuau_crystal(n, au_fraction=au_fraction)}
    )


def test_4000_atoms_same_on_1_2_4_ranks():
    runs = {n: _cuau(nprocs=n) for n in (1, 2, 4)}
    for n, run in runs.items():
        assert run.returncode == 0, (n, run.output)
    ref = runs[1]
    ref_frames = ref.dump("dump.out")
    assert ref_frames[0].data.shape[0] == 4000
    for n in (2, 4):
        frames = runs[n].dump("dump.out")
        # Step 0: energies and forces to 1e-10 (float64).
        assert runs[n].thermo[0]["PotEng"] == pytest.approx(
            ref.thermo[0]["PotEng"], rel=1e-12, abs=1e-10
        )
        for col in ("fx", "fy", "fz", "c_pe"):
            np.testing.assert_allclose(
                frames[0].column(col),
                ref_frames[0].column(col),
                rtol=0,
                atol=1e-10,
                err_msg=f"{n} ranks, {col}",
            )
        # Step 100: the same trajectory to 1e-8.
        for col in ("x", "y", "z"):
            np.testing.assert_allclose(
                frames[-1].column(col),
                ref_frames[-1].column(col),
                rtol=0,
                atol=1e-8,
                err_msg=f"{n} ranks, {col} at step 100",
            )
        for a, b in zip(runs[n].thermo, ref.thermo):
            assert a["TotEng"] == pytest.approx(b["TotEng"], rel=0, abs=1e-8)
    for run in runs.values():
        cleanup(run)


@pytest.mark.parametrize("nprocs", [1, 2])
def test_newton_off_equals_newton_on(nprocs):
    on = _cuau(nprocs=nprocs, n=4, steps=0, newton="on", dump_every=1)
    off = _cuau(nprocs=nprocs, n=4, steps=0, newton="off", dump_every=1)
    for run in (on, off):
        assert run.returncode == 0, run.output
    a, b = on.dump("dump.out")[0], off.dump("dump.out")[0]
    for col in ("fx", "fy", "fz", "c_pe"):
        np.testing.assert_allclose(b.column(col), a.column(col), rtol=0, atol=1e-12)
    for key in ("PotEng", "Pxx", "Pyy", "Pzz", "Pxy", "Pxz", "Pyz", "c_sums[2]", "c_sums[7]"):
        assert off.thermo[0][key] == pytest.approx(on.thermo[0][key], rel=1e-12, abs=1e-9)
    cleanup(on)
    cleanup(off)


@pytest.mark.parametrize("nprocs", [1, 2])
def test_per_atom_energies_and_virials_sum_to_totals(nprocs):
    run = _cuau(nprocs=nprocs, n=4, steps=0, dump_every=1)
    assert run.returncode == 0, run.output
    row = run.thermo[0]
    assert row["c_sums[1]"] == pytest.approx(row["PotEng"], rel=1e-12)
    # sum of stress/atom = -(kinetic + virial) * nktv2p and P = (kinetic + virial) * nktv2p / V.
    volume = row["Volume"]
    frame = run.dump("dump.out")[0]
    assert frame.data.shape[0] == 256
    for k, key in zip(range(2, 8), ("Pxx", "Pyy", "Pzz", "Pxy", "Pxz", "Pyz")):
        assert -row[f"c_sums[{k}]"] / volume == pytest.approx(row[key], rel=1e-10, abs=1e-6)
    cleanup(run)


def test_nve_energy_conservation_600K():
    """NVE, float64, 5,000 steps of 1 fs on 108 atoms of the bundled model, all Cu, at 600 K
    (velocities drawn at 1200 K: half of the kinetic energy goes into the potential)."""
    run = _cuau(n=3, steps=5000, temp=1200, thermo=100, dump_every=5000, au_fraction=0.0)
    assert run.returncode == 0, run.output
    e = np.array([r["TotEng"] for r in run.thermo])
    t_ps = np.array([r["Step"] for r in run.thermo]) * 0.001
    natoms = 108
    drift = np.polyfit(t_ps, e / natoms, 1)[0]  # eV/atom/ps
    spread = (e.max() - e.min()) / natoms
    print(f"NVE 108 Cu atoms, 5 ps: drift {drift:.3e} eV/atom/ps, max-min {spread:.3e} eV/atom")
    assert abs(drift) < 1e-5
    assert spread < 5e-4
    cleanup(run)


# ------------------------------------------------------------------------------------------------
# Bad input: each a clear LAMMPS error
# ------------------------------------------------------------------------------------------------

BASIC = """
units {units}
atom_style atomic
lattice fcc 3.75
region box block 0 2 0 2 0 2
create_box {ntypes} box
create_atoms 1 box
mass * 63.5
plugin load ${{plugin}}
pair_style clebsch
{coeff}
run 0
"""


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
        # LAMMPS itself enforces "* *" for one-coeff styles, with this message:
        (
            "metal",
            1,
            "pair_coeff 1 1 {model} Cu",
            "Pair_coeff must start with * * for pair style clebsch",
        ),
        ("real", 1, "pair_coeff * * {model} Cu", "requires 'units metal'"),
        ("metal", 1, "pair_coeff * * {truncated} Cu", "cannot load model"),
    ],
)
def test_bad_input_gives_clear_error(tmp_path, units, ntypes, coeff, message):
    model = _bundled()
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
    run = run_lammps(
        BASIC.format(
            units=units, ntypes=ntypes, coeff=coeff.format(model=model, truncated=truncated)
        )
    )
    assert run.returncode != 0
    assert "ERROR" in run.output and message in run.output, run.output[-2000:]


GPU_INPUT = """
units metal
atom_style atomic
lattice fcc 3.75
region box block 0 2 0 2 0 2
create_box 1 box
create_atoms 1 box
mass * 63.5
plugin load ${{plugin}}
pair_style clebsch device gpu {extra}
pair_coeff * * {model} Cu
run 0
"""


def _gpu_present() -> bool:
    return any(pathlib.Path(p).exists() for p in ("/dev/nvidia0", "/dev/nvidiactl"))


# CTest says whether this build has libclebsch_cuda (none without a CUDA toolkit at configure).
_NO_CUDA_ENGINE = pytest.mark.skipif(
    os.environ.get("CLEBSCH_CUDA_ENGINE", "1") == "0",
    reason="this build has no CUDA engine (no CUDA toolkit was found at configure time)",
)


@_NO_CUDA_ENGINE
@pytest.mark.skipif(_gpu_present(), reason="a GPU is present: device gpu runs")
def test_device_gpu_without_a_gpu_gives_an_actionable_error():
    """The plugin loads on a CPU machine; device gpu fails at pair_coeff, saying what to do."""
    run = run_lammps(GPU_INPUT.format(model=_bundled(), extra="deterministic no"))
    text = run.output + run.log
    assert run.returncode != 0
    assert "ERROR" in text and "device gpu" in text and "device cpu" in text, text[-2000:]


def test_negative_edge_batch_is_a_clear_error():
    run = run_lammps(GPU_INPUT.format(model=_bundled(), extra="edge_batch -5"))
    text = run.output + run.log
    assert run.returncode != 0
    assert "edge_batch must be 0 (automatic) or a number of neighbor pairs" in text, text[-2000:]


def test_device_gpu_with_a_missing_engine_library_names_the_fix(monkeypatch):
    monkeypatch.setenv("CLEBSCH_CUDA_LIBRARY", "/nonexistent/libclebsch_cuda.so")
    run = run_lammps(GPU_INPUT.format(model=_bundled(), extra=""))
    text = run.output + run.log
    assert run.returncode != 0
    assert "cannot load the CUDA engine library" in text and "CLEBSCH_CUDA_LIBRARY" in text, text[
        -2000:
    ]


@_NO_CUDA_ENGINE
@pytest.mark.parametrize("nprocs,extra", [(1, ""), (2, ""), (2, " edge_batch 7")])
def test_device_gpu_equals_device_cpu(monkeypatch, nprocs, extra):
    """device gpu through the plugin's on-demand loading of libclebsch_cuda, on the emulated
    backend (CLEBSCH_CUDA_BACKEND=emulated; the real GPU where one is present): energies, forces,
    per-atom energies and the pressure tensor of device cpu, on one rank (ghosts mapped to owners)
    and two (per-layer ghost exchange); and with the MACE weights in batches of 7 neighbor pairs
    (edge_batch: recomputed in the backward, grad_x accumulated over batches)."""
    if not _gpu_present():
        monkeypatch.setenv("CLEBSCH_CUDA_BACKEND", "emulated")
    cpu = _cuau(nprocs=nprocs, n=2, steps=0, dump_every=1)
    gpu = _cuau(nprocs=nprocs, n=2, steps=0, dump_every=1, pair_args=" device gpu" + extra)
    for run in (cpu, gpu):
        assert run.returncode == 0, run.output[-3000:]
    assert "device gpu" in gpu.output + gpu.log and "device cpu" in cpu.output + cpu.log
    if extra:
        assert "device gpu, edge_batch 7)" in gpu.output + gpu.log
    a, b = cpu.dump("dump.out")[0], gpu.dump("dump.out")[0]
    for col in ("fx", "fy", "fz", "c_pe"):
        np.testing.assert_allclose(b.column(col), a.column(col), rtol=0, atol=1e-10)
    for key in ("PotEng", "Pxx", "Pyy", "Pzz", "Pxy", "Pxz", "Pyz"):
        assert gpu.thermo[0][key] == pytest.approx(cpu.thermo[0][key], rel=1e-10, abs=1e-8)
    cleanup(cpu)
    cleanup(gpu)


def test_atoms_too_close_is_an_error():
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
    run = run_lammps(text)
    assert run.returncode != 0
    text = run.output + run.log
    assert "ERROR" in text and "overlapping atoms" in text and "0.01" in text, text[-2000:]


def test_empty_subdomain_runs_and_matches_serial():
    """2 ranks split along x, all atoms in the left half: rank 1 owns nothing and must run."""
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
    serial, parallel = run_lammps(text.replace("processors 2 1 1", "")), run_lammps(text, nprocs=2)
    for run in (serial, parallel):
        assert run.returncode == 0, run.output
    assert parallel.thermo[0]["PotEng"] == pytest.approx(serial.thermo[0]["PotEng"], rel=1e-12)
    for col in ("fx", "fy", "fz"):
        np.testing.assert_allclose(
            parallel.dump("dump.out")[0].column(col),
            serial.dump("dump.out")[0].column(col),
            rtol=0,
            atol=1e-10,
        )
    cleanup(serial)
    cleanup(parallel)

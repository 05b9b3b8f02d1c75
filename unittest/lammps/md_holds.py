"""Production-MD checks (issue 28), shared by the plain style's tests (test_md_holds.py) and
clebsch/kk's (../lammps_kokkos/test_md_holds_kokkos.py): short NVE drift, restart continuity
through write_restart/read_restart and write_data/read_data, a run killed mid-way and restarted
from its last restart file, and the loud failures (lost atoms, overlapping atoms, a non-finite
model output) that must name atom IDs and the step.

Every reference is independent of the run under test: the uninterrupted run is a separate LAMMPS
process with the same input, the drift bound comes from the issue (eV/atom/ns), and the
failing inputs are built so that the offending atom IDs are known in advance.
"""

from __future__ import annotations

import json
import pathlib
import struct

import numpy as np

from lammps_harness import run_lammps
from structures import data_file

# Settings under which a run's arithmetic depends on the positions alone: no spatial re-sorting
# of atoms (LAMMPS sorts every 1,000 steps and at each run's setup) and a neighbor list rebuilt
# (positions re-wrapped) every step. The pair style orders each atom's edges by neighbor ID, so
# the neighbor list's own order never matters (clebsch_md_checks.h).
DETERMINISTIC_ORDER = "atom_modify sort 0 0.0\nneigh_modify every 1 delay 0 check no\n"

# Unwrapped positions: runs that re-wrap atoms into the box at different steps still compare.
STATE_COLUMNS = ("xu", "yu", "zu", "vx", "vy", "vz", "fx", "fy", "fz")


def crystal(n, au_fraction=0.25, a=3.75, jitter=0.05, seed=20261129, triclinic=False):
    """An n x n x n periodic fcc Cu-Au crystal (data file), IDs 1..4n^3, in an orthogonal box,
    or with `triclinic` a triclinic one of zero tilt (the "0 0 0 xy xz yz" line).

    The box kind decides whether a restart can be bitwise at all, whatever the pair style: in a
    triclinic box LAMMPS wraps atoms and makes ghosts through fractional coordinates
    (x2lamda, pbc, borders, lamda2x) at every re-neighboring, at write_restart and at a run's
    setup, and x -> lamda -> x is not the identity in floating point. A restarted run's
    positions have been through one round trip more (write_restart's) than the uninterrupted
    run's at the same step; where that moved an atom by an ulp, the two runs' setups derive its
    ghosts from different fractional coordinates, and the ghost positions differ in the last
    bits although the owned positions agree (LAMMPS's own pair_style lj/cut shows it too). In an
    orthogonal box ghosts are x +/- L of the owned x, and the runs continue bitwise."""
    rng = np.random.default_rng(seed)
    basis = np.array([[0, 0, 0], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]])
    cells = np.array([(i, j, k) for i in range(n) for j in range(n) for k in range(n)], float)
    positions = ((cells[:, None, :] + basis[None, :, :]) * a).reshape(-1, 3)
    positions += rng.normal(scale=jitter, size=positions.shape)
    types = np.where(rng.random(len(positions)) < au_fraction, 2, 1)
    length = n * a
    box = (0, length, 0, length, 0, length, 0, 0, 0)
    text = data_file(box, positions, types, 2, [63.546, 196.97])
    if triclinic:
        return text
    return "\n".join(line for line in text.splitlines() if not line.endswith("xy xz yz")) + "\n"


def cluster13(a=3.70, jitter=0.05, seed=20261202):
    """A 13-atom cuboctahedral Cu12Au cluster (Au at the centre, IDs 1..13) in a 30 A box with
    non-periodic boundaries ("boundary f f f" before read_data): few edges (156), for runs on
    the CUDA engine's emulated backend."""
    rng = np.random.default_rng(seed)
    d = a / 2
    shell = [(x, y, 0) for x in (-d, d) for y in (-d, d)]
    shell += [(x, 0, z) for x in (-d, d) for z in (-d, d)]
    shell += [(0, y, z) for y in (-d, d) for z in (-d, d)]
    positions = np.array([(0.0, 0.0, 0.0)] + shell) + 15.0
    positions += rng.normal(scale=jitter, size=positions.shape)
    types = [2] + [1] * 12
    text = data_file((0, 30, 0, 30, 0, 30, 0, 0, 0), positions, types, 2, [63.546, 196.97])
    return "\n".join(line for line in text.splitlines() if not line.endswith("xy xz yz")) + "\n"


def header(model, pair_args="", extra=""):
    """Units, the data file, the pair style and NVE; `extra` goes before the pair style."""
    return f"""
units metal
atom_style atomic
atom_modify map array
{extra}
read_data data.in
plugin load ${{plugin}}
pair_style clebsch{pair_args}
pair_coeff * * {model} Cu Au
timestep 0.001
"""


THERMO = """
thermo_style custom step pe ke etotal
thermo_modify format float %.17g norm no flush yes
thermo {every}
"""

FINAL_DUMP = """
dump fin all custom {step} {name} id xu yu zu vx vy vz fx fy fz
dump_modify fin format float %.17g sort id first no
"""


def state_at(run, name):
    """The last frame of a dump written by FINAL_DUMP."""
    return run.dump(name)[-1]


def max_state_difference(a, b):
    """Largest |difference| of positions, velocities and forces of two frames (same IDs)."""
    assert np.array_equal(a.column("id"), b.column("id")), "different atoms"
    return max(float(np.abs(a.column(c) - b.column(c)).max()) for c in STATE_COLUMNS)


def drift_per_atom_ns(run, natoms, dt_fs=1.0):
    """Slope of a least-squares line through TotEng (eV/atom/ns) and the r.m.s. of the residual
    (eV/atom): the two figures bench/md/soak reports."""
    rows = [r for r in run.thermo if "TotEng" in r]
    t_ns = np.array([r["Step"] for r in rows]) * dt_fs * 1e-6
    e = np.array([r["TotEng"] for r in rows]) / natoms
    slope, intercept = np.polyfit(t_ns, e, 1)
    rms = float(np.sqrt(np.mean((e - (slope * t_ns + intercept)) ** 2)))
    return float(slope), rms


# ------------------------------------------------------------------------------------------------
# Restart continuity
# ------------------------------------------------------------------------------------------------


def uninterrupted(
    model,
    pair_args,
    steps,
    *,
    nprocs=1,
    order=DETERMINISTIC_ORDER,
    args=None,
    split=None,
    n=2,
    triclinic=False,
):
    """One process: `steps` of NVE from the crystal at 1200 K; the state at the last step.
    With `split`, as two `run` commands (`run split`, then on to `steps`): what a restart at
    `split` must reproduce bitwise. Each run's setup re-wraps the positions into the box
    (LAMMPS's domain->pbc: x - L + L is x only to round-off), so a single `run steps` and any
    run that starts anew at `split` agree to round-off only."""
    runs = f"run {steps}\n" if split is None else f"run {split}\nrun {steps} upto\n"
    text = (
        header(model, pair_args, order)
        + "velocity all create 1200 4928459 mom yes rot yes dist gaussian loop geom\n"
        + "fix nve all nve\n"
        + THERMO.format(every=5)
        + FINAL_DUMP.format(step=steps, name="final.dump")
        + runs
    )
    files = {"data.in": crystal(n, triclinic=triclinic)}
    return run_lammps(text, nprocs=nprocs, files=files, extra_args=args)


def first_half(
    model,
    pair_args,
    half,
    *,
    via,
    nprocs=1,
    order=DETERMINISTIC_ORDER,
    args=None,
    n=2,
    triclinic=False,
):
    """The first `half` steps of the same run, ending in write_restart or write_data (`via`)."""
    write = "write_restart mid.restart" if via == "restart" else "write_data mid.data"
    text = (
        header(model, pair_args, order)
        + "velocity all create 1200 4928459 mom yes rot yes dist gaussian loop geom\n"
        + "fix nve all nve\n"
        + THERMO.format(every=5)
        + f"run {half}\n{write}\n"
    )
    files = {"data.in": crystal(n, triclinic=triclinic)}
    return run_lammps(text, nprocs=nprocs, files=files, extra_args=args)


def second_half(
    model,
    pair_args,
    half,
    steps,
    workdir,
    *,
    via,
    nprocs=1,
    order=DETERMINISTIC_ORDER,
    args=None,
    restart_file="mid.restart",
):
    """A new process that reads what first_half wrote, restates the pair style, pair_coeff and
    fix (LAMMPS stores none of them for this style), and runs to `steps`."""
    if via == "restart":
        start = f"read_restart {restart_file}\n"
    else:
        # A data file holds no time step number: restore it so that both runs count alike.
        start = f"read_data mid.data\nreset_timestep {half}\n"
    text = f"""
units metal
atom_style atomic
atom_modify map array
{order if via != "restart" else ""}
{start}
{order if via == "restart" else ""}
plugin load ${{plugin}}
pair_style clebsch{pair_args}
pair_coeff * * {model} Cu Au
timestep 0.001
fix nve all nve
{THERMO.format(every=5)}
{FINAL_DUMP.format(step=steps, name="final.dump")}
run {steps} upto
"""
    return run_lammps(text, nprocs=nprocs, workdir=workdir, extra_args=args)


# SIGKILL to the lmp process that runs this script through LAMMPS's `shell` (its nearest
# ancestor named lmp*): no clean-up, no final restart file, as when a job is killed.
KILL_LMP = """p=$PPID
while [ "$p" -gt 1 ]; do
  case "$(cat /proc/$p/comm)" in lmp*) kill -9 "$p"; exit 0 ;; esac
  p=$(awk '{print $4}' /proc/$p/stat)
done
exit 1
"""


def killed_run(model, pair_args, steps, kill_after, restart_every, *, nprocs=1, args=None, n=2):
    """The uninterrupted run's input with restart files every `restart_every` steps, killed
    (SIGKILL, from inside the run: `run N every M "shell sh kill_lmp.sh"`) after `kill_after`."""
    text = (
        header(model, pair_args, DETERMINISTIC_ORDER)
        + "velocity all create 1200 4928459 mom yes rot yes dist gaussian loop geom\n"
        + "fix nve all nve\n"
        + THERMO.format(every=5)
        + f"restart {restart_every} r.*\n"
        + f'run {steps} every {kill_after} "shell sh kill_lmp.sh"\n'
    )
    files = {"data.in": crystal(n), "kill_lmp.sh": KILL_LMP}
    return run_lammps(text, nprocs=nprocs, files=files, extra_args=args)


def restart_files(workdir):
    """Restart files r.<step> that a run left, by step."""
    found = {}
    for p in pathlib.Path(workdir).glob("r.*"):
        if p.suffix[1:].isdigit():
            found[int(p.suffix[1:])] = p
    return dict(sorted(found.items()))


# ------------------------------------------------------------------------------------------------
# Loud failures
# ------------------------------------------------------------------------------------------------


def cluster_with_far_atom(au_far=True):
    """A 2x2x2 fcc Cu cluster (IDs 1..32) in a non-periodic 40 A box, and a dimer, atoms 33 and
    34 (Au when `au_far`), 20 A from it: beyond any cutoff, so only the dimer sees an Au-only
    defect of the model."""
    a = 3.61
    basis = np.array([[0, 0, 0], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]])
    cells = np.array([(i, j, k) for i in range(2) for j in range(2) for k in range(2)], float)
    positions = list(((cells[:, None, :] + basis[None, :, :]) * a).reshape(-1, 3) + 5.0)
    positions += [np.array([32.0, 32.0, 32.0]), np.array([34.6, 32.0, 32.0])]
    types = [1] * 32 + [2 if au_far else 1] * 2
    return data_file(
        (0, 40, 0, 40, 0, 40, 0, 0, 0), np.array(positions), types, 2, [63.546, 196.97]
    )


def overflowing_model(model_path, tensor, species, factor=1e300):
    """The model file with the rows of `species` (first index) of `tensor` multiplied by
    `factor`: every weight still finite (the reader rejects non-finite ones), but the network's
    cubic products of that species' features overflow to inf/NaN, as a badly trained or
    corrupted model can. Returns the file's bytes."""
    raw = pathlib.Path(model_path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8 : 8 + n])
    info = head[tensor]
    assert info["dtype"] == "F64", info
    begin, end = (8 + n + o for o in info["data_offsets"])
    values = np.frombuffer(raw[begin:end], dtype="<f8").reshape(info["shape"]).copy()
    values[species] *= factor
    assert np.isfinite(values).all()
    return raw[:begin] + values.astype("<f8").tobytes() + raw[end:]


def nan_input(model, pair_args, first_run=0):
    """The cluster with the good model for `first_run` steps, then the overflowing model."""
    good = f"pair_coeff * * {model} Cu Au\nrun {first_run}\n" if first_run else ""
    return f"""
units metal
atom_style atomic
atom_modify map array
boundary f f f
read_data data.in
plugin load ${{plugin}}
pair_style clebsch{pair_args}
timestep 0.001
velocity all create 300 4928459 mom yes rot no dist gaussian loop geom
fix nve all nve
thermo 5
{good}pair_coeff * * bad.safetensors Cu Au
run 10
"""


def flying_atom_input(model, pair_args, *, boundary, speed, lost="error", processors=""):
    """The 3x3x3 crystal with atom 5 (on the crystal's -x face) given `speed` A/ps along x: in
    a non-periodic box it leaves through the wall; in a periodic one split between ranks along
    x, fast enough, it jumps past the neighboring subdomain."""
    return f"""
units metal
atom_style atomic
atom_modify map array
boundary {boundary}
{processors}
read_data data.in
plugin load ${{plugin}}
pair_style clebsch{pair_args}
pair_coeff * * {model} Cu Au
timestep 0.001
group fly id 5
velocity fly set {speed} 0 0
fix nve all nve
thermo 100
thermo_modify lost {lost}
run 60
"""


def crystal_far_from_walls():
    """The 3x3x3 crystal in a 31.25 A box reaching 10 A beyond it on every side (for a
    non-periodic box, whose walls must not touch the crystal)."""
    lines = crystal(3).splitlines()
    for i, line in enumerate(lines):
        if line.endswith(("xlo xhi", "ylo yhi", "zlo zhi")):
            lines[i] = "-10 21.25 " + " ".join(line.split()[-2:])
    return "\n".join(lines) + "\n"


def overlap_input(model, pair_args, processors=""):
    """Atoms 1 and 2 0.05 A apart (a duplicated atom), atom 3 elsewhere."""
    return f"""
units metal
atom_style atomic
atom_modify map array
{processors}
region box block 0 12 0 12 0 12
create_box 2 box
create_atoms 1 single 3 3 3
create_atoms 1 single 3 3 3.05
create_atoms 2 single 9 9 9
mass 1 63.546
mass 2 196.97
plugin load ${{plugin}}
pair_style clebsch{pair_args}
pair_coeff * * {model} Cu Au
run 0
"""


def error_text(run):
    return run.output + run.log

"""Run real LAMMPS (``lmp``) on an input, serially or under ``mpirun``, and parse what it wrote.

The LAMMPS-level tests of Clebsch assert on real runs through this module: thermo output (every
``run``'s table, parsed into rows), ``dump custom`` text files, and the log. The executable, the
plugin and the MPI launcher come from the environment CTest sets:

``CLEBSCH_LMP``      path of ``lmp`` (required)
``CLEBSCH_PLUGIN``   path of ``libclebschplugin.so`` (inputs load it with ``plugin load ${plugin}``)
``CLEBSCH_MPIEXEC``  MPI launcher, default ``mpirun``

Examples
--------
>>> run = run_lammps("units lj\\nlattice fcc 0.8442\\n...", nprocs=2)   # doctest: +SKIP
>>> run.thermo[-1]["PotEng"]                                              # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import subprocess
import tempfile

import numpy as np


@dataclasses.dataclass
class DumpFrame:
    """One frame of a ``dump custom`` text file, rows sorted by atom id when ``id`` is a column."""

    timestep: int
    box: np.ndarray  # (3, 2) lo/hi bounds (or (3, 3) with tilt factors)
    columns: list[str]
    data: np.ndarray  # (natoms, ncolumns)

    def column(self, name: str) -> np.ndarray:
        return self.data[:, self.columns.index(name)]


@dataclasses.dataclass
class LammpsRun:
    """What one LAMMPS run produced."""

    returncode: int
    output: str  # stdout and stderr together
    log: str
    thermo: list[dict[str, float]]
    workdir: pathlib.Path

    def dump(self, name: str) -> list[DumpFrame]:
        return parse_dump(self.workdir / name)

    def last(self, key: str) -> float:
        return self.thermo[-1][key]


def parse_thermo(log: str) -> list[dict[str, float]]:
    """Rows of every thermo table in a LAMMPS log (header line starting with ``Step``)."""
    rows: list[dict[str, float]] = []
    header: list[str] | None = None
    for line in log.splitlines():
        words = line.split()
        if words[:1] == ["Step"]:
            header = words
            continue
        if header is None:
            continue
        if line.startswith("Loop time of") or len(words) != len(header):
            header = None
            continue
        try:
            values = [float(w) for w in words]
        except ValueError:
            header = None
            continue
        rows.append(dict(zip(header, values)))
    return rows


def parse_dump(path: pathlib.Path) -> list[DumpFrame]:
    """Frames of a ``dump custom`` text file."""
    frames: list[DumpFrame] = []
    lines = pathlib.Path(path).read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("ITEM: TIMESTEP"):
            timestep = int(lines[i + 1])
            natoms = int(lines[i + 3])
            box = np.array([[float(x) for x in lines[i + 5 + k].split()] for k in range(3)])
            columns = lines[i + 8].split()[2:]
            data = np.array(
                [[float(x) for x in lines[i + 9 + k].split()] for k in range(natoms)]
            ).reshape(natoms, len(columns))
            if "id" in columns:
                data = data[np.argsort(data[:, columns.index("id")], kind="stable")]
            frames.append(DumpFrame(timestep, box, columns, data))
            i += 9 + natoms
        else:
            i += 1
    return frames


def lammps_executable() -> str:
    lmp = os.environ.get("CLEBSCH_LMP")
    if not lmp:
        raise RuntimeError("CLEBSCH_LMP is not set: run the LAMMPS tests through ctest")
    return lmp


def run_lammps(
    input_text: str,
    *,
    nprocs: int = 1,
    files: dict[str, str | bytes] | None = None,
    variables: dict[str, str] | None = None,
    extra_args: list[str] | None = None,
    timeout: float = 900,
    workdir: pathlib.Path | None = None,
) -> LammpsRun:
    """Run ``lmp -in in.test`` in a fresh directory and return what it produced.

    Parameters
    ----------
    input_text : the LAMMPS input script.
    nprocs : MPI ranks; 1 runs ``lmp`` directly, more runs it under the MPI launcher.
    files : extra files to write into the run directory (name -> content).
    variables : ``-var name value`` pairs; ``plugin`` is always defined.
    extra_args : more command-line arguments for ``lmp``.
    """
    workdir = pathlib.Path(workdir or tempfile.mkdtemp(prefix="clebsch-lmp-"))
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "in.test").write_text(input_text)
    for name, content in (files or {}).items():
        mode = "wb" if isinstance(content, bytes) else "w"
        with open(workdir / name, mode) as f:
            f.write(content)
    variables = {"plugin": os.environ.get("CLEBSCH_PLUGIN", ""), **(variables or {})}
    cmd = [lammps_executable(), "-in", "in.test", "-log", "log.lammps", "-nocite"]
    for name, value in variables.items():
        cmd += ["-var", name, str(value)]
    cmd += extra_args or []
    env = dict(os.environ)
    if nprocs > 1:
        launcher = os.environ.get("CLEBSCH_MPIEXEC", "mpirun")
        cmd = (
            [launcher, "-np", str(nprocs)]
            + (["--oversubscribe"] if "mpirun" in pathlib.Path(launcher).name else [])
            + cmd
        )
        # OpenMPI refuses root unless told; CI runs as root in a throwaway clone.
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    proc = subprocess.run(
        cmd,
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=timeout,
        text=True,
    )
    log_path = workdir / "log.lammps"
    log = log_path.read_text() if log_path.exists() else ""
    return LammpsRun(proc.returncode, proc.stdout, log, parse_thermo(log), workdir)


def cleanup(run: LammpsRun) -> None:
    """Remove the run directory (tests call this on success, keep it for failures)."""
    shutil.rmtree(run.workdir, ignore_errors=True)

"""Structures for the LAMMPS tests: golden files of exported models, and LAMMPS data files.

The golden files (potentials/FORMAT.md §7) hold structures with the Python model's float64
energies, forces and virials. LAMMPS needs a restricted triclinic box (a along x, b in the xy
plane), so a general cell is rotated into that frame; ``to_lammps`` returns the rotation, and
forces and virials computed by LAMMPS are rotated back with it before any comparison.

Examples
--------
>>> # golden = read_safetensors("model.golden.safetensors")
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import struct

import numpy as np

_DTYPES = {"F64": "<f8", "F32": "<f4", "I64": "<i8", "I32": "<i4", "U8": "u1", "BOOL": "?"}


def read_safetensors(path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Tensors and metadata of a safetensors file (NumPy only; the format is tiny)."""
    raw = pathlib.Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    metadata = header.pop("__metadata__", {})
    data = raw[8 + n :]
    tensors = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype=_DTYPES[entry["dtype"]]).reshape(
            entry["shape"]
        )
    return tensors, metadata


@dataclasses.dataclass
class GoldenStructure:
    name: str
    positions: np.ndarray  # (N, 3)
    cell: np.ndarray  # (3, 3) rows are lattice vectors
    pbc: np.ndarray  # (3,) bool
    species: np.ndarray  # (N,) model species index
    energy: float
    node_energy: np.ndarray
    forces: np.ndarray
    virial: np.ndarray  # (3, 3), -dE/d(strain)


def golden_structures(path) -> list[GoldenStructure]:
    tensors, metadata = read_safetensors(path)
    golden = json.loads(metadata["golden_json"])
    out = []
    for s in golden["structures"]:
        t = {k: tensors[f"{s['name']}.{k}"] for k in s["keys"]}
        out.append(
            GoldenStructure(
                s["name"],
                np.array(t["positions"], float),
                np.array(t["cell"], float),
                np.array(t["pbc"], bool),
                np.array(t["species"], int),
                float(t["energy"][0]),
                np.array(t["node_energy"], float),
                np.array(t["forces"], float),
                np.array(t["virial"], float),
            )
        )
    return out


def model_species(path) -> list[str]:
    """Element symbols of a model file, in model order (the pair_coeff names)."""
    _, metadata = read_safetensors(path)
    return [s["symbol"] for s in json.loads(metadata["model_json"])["species"]]


def to_lammps(positions, cell, pbc, margin=10.0):
    """Box, positions and rotation for LAMMPS.

    Returns ``(box, new_positions, rotation)`` with ``new = old @ rotation``; ``box`` holds
    ``xlo xhi ylo yhi zlo zhi xy xz yz``. Non-periodic directions get a box that encloses every
    atom with ``margin`` to spare (the cell vector there is ignored).
    """
    positions = np.asarray(positions, float)
    pbc = np.asarray(pbc, bool)
    cell = np.array(cell, float)
    lo = positions.min(axis=0) - margin
    hi = positions.max(axis=0) + margin
    for d in range(3):
        if not pbc[d]:
            cell[d] = 0.0
            cell[d, d] = hi[d] - lo[d]
    if np.linalg.det(cell) <= 0:
        raise ValueError("cell must be right-handed")
    a, b, c = cell
    ax = np.linalg.norm(a)
    bx = b @ a / ax
    by = np.sqrt(b @ b - bx * bx)
    cx = c @ a / ax
    cy = (b @ c - bx * cx) / by
    cz = np.sqrt(c @ c - cx * cx - cy * cy)
    new_cell = np.array([[ax, 0, 0], [bx, by, 0], [cx, cy, cz]])
    rotation = np.linalg.solve(cell, new_cell)  # old @ rotation = new for lattice vectors
    origin = np.where(pbc, 0.0, lo) @ rotation
    new_positions = positions @ rotation
    box = (
        origin[0],
        origin[0] + ax,
        origin[1],
        origin[1] + by,
        origin[2],
        origin[2] + cz,
        bx,
        cx,
        cy,
    )
    return box, new_positions, rotation


def data_file(box, positions, types, ntypes, masses=None) -> str:
    """A LAMMPS data file (atom_style atomic), atom IDs 1..N in the given order."""
    xlo, xhi, ylo, yhi, zlo, zhi, xy, xz, yz = box
    lines = [
        "Clebsch test structure",
        "",
        f"{len(positions)} atoms",
        f"{ntypes} atom types",
        "",
        f"{xlo:.17g} {xhi:.17g} xlo xhi",
        f"{ylo:.17g} {yhi:.17g} ylo yhi",
        f"{zlo:.17g} {zhi:.17g} zlo zhi",
        f"{xy:.17g} {xz:.17g} {yz:.17g} xy xz yz",
        "",
        "Masses",
        "",
    ]
    for t in range(1, ntypes + 1):
        lines.append(f"{t} {masses[t - 1] if masses else 1.0}")
    lines += ["", "Atoms # atomic", ""]
    for i, (t, p) in enumerate(zip(types, positions)):
        lines.append(f"{i + 1} {t} {p[0]:.17g} {p[1]:.17g} {p[2]:.17g}")
    return "\n".join(lines) + "\n"

"""Golden data: reference structures and the companion ``*.golden.safetensors`` file.

Three structures are built from the model's own species (seeded, so every export of the
same model gives the same file):

``molecule``
    a non-periodic 8-atom cluster (species cycled over the model's species);
``periodic``
    a sheared, rattled fcc cell of the first species, periodic in x, y, z, with one cell
    length shorter than ``r_max`` so that an atom sees its own periodic images;
``multispecies``
    a rattled fcc slab with all species, periodic in x and y only.

For each the golden file holds the inputs, the Python model's outputs in float64 (energy,
per-atom energies, forces, virial, stress for fully periodic cells), the edge list in the
engine's convention, and per-layer intermediates. See ``FORMAT.md``, section "Golden file".

Examples
--------
>>> [name for name, _ in reference_structures([29, 79], r_max=5.0)]
['molecule', 'periodic', 'multispecies']
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Tuple

import numpy as np

from . import schema

#: Keys of evaluator outputs that are stored per structure, besides intermediates.
PRIMARY_KEYS = ("energy", "node_energy", "forces", "virial", "stress")


def _nn_distance(species_z: List[int]) -> float:
    from ase.data import covalent_radii

    return max(2.2, 2.0 * float(np.mean([covalent_radii[z] for z in species_z])))


def reference_structures(species_z: List[int], r_max: float, seed: int = 20261129):
    """The three golden structures as ``(name, ase.Atoms)`` pairs.

    Parameters
    ----------
    species_z : list of int
        The model's atomic numbers, in species order.
    r_max : float
        The model cutoff (used to make the periodic cell small enough to see its own images).
    seed : int

    Examples
    --------
    >>> s = dict(reference_structures([29], 5.0))
    >>> len(s["molecule"]), len(s["periodic"]), bool(s["multispecies"].pbc[2])
    (8, 8, False)
    """
    import ase
    import ase.build

    if not species_z:
        raise ValueError("species_z is empty")
    rng = np.random.default_rng(seed)
    d0 = _nn_distance(species_z)
    a = d0 * np.sqrt(2.0)
    # molecule: centre + 7 of the 12 fcc neighbours, rattled
    nbrs = np.array(
        [[1, 1, 0], [1, -1, 0], [-1, 1, 0], [0, 1, 1], [0, -1, 1], [1, 0, -1], [-1, 0, 1]],
        dtype=float,
    ) * (a / 2)
    pos = np.vstack([np.zeros(3), nbrs]) + rng.normal(scale=0.08, size=(8, 3))
    zs = [species_z[i % len(species_z)] for i in range(8)]
    molecule = ase.Atoms(numbers=zs, positions=pos, pbc=False)
    # periodic: primitive fcc of species 0, 4x2x1, sheared, rattled; the third cell length
    # (~ d0) is below any sensible r_max, so atoms see their own periodic images
    prim = ase.build.bulk("X", "fcc", a=a)
    periodic = prim * (4, 2, 1)
    periodic.set_atomic_numbers([species_z[0]] * len(periodic))
    shear = np.eye(3) + np.array([[0.02, 0.03, 0.0], [0.0, -0.01, 0.02], [0.01, 0.0, 0.015]])
    periodic.set_cell(periodic.cell[:] @ shear, scale_atoms=True)
    periodic.positions += rng.normal(scale=0.06, size=periodic.positions.shape)
    periodic.wrap()
    if min(periodic.cell.lengths()) >= r_max:
        raise ValueError("periodic golden cell does not see its own images; r_max too small")
    # multispecies: fcc slab 2x2x2 conventional, species mixed, periodic in x, y only
    slab = ase.build.bulk("X", "fcc", a=a, cubic=True) * (2, 2, 1)
    slab = slab * (1, 1, 2)
    zs = [species_z[i % len(species_z)] for i in rng.permutation(len(slab))]
    slab.set_atomic_numbers(zs)
    slab.positions += rng.normal(scale=0.08, size=slab.positions.shape)
    slab.pbc = (True, True, False)
    return [("molecule", molecule), ("periodic", periodic), ("multispecies", slab)]


def build_golden(
    model_json: Mapping[str, Any],
    evaluate: Callable[[Any], Dict[str, np.ndarray]],
    edge_convert: Callable[[Dict[str, np.ndarray]], Tuple[np.ndarray, ...]],
    notes: Mapping[str, str],
) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
    """Run ``evaluate(atoms)`` on the reference structures and assemble the golden file.

    Parameters
    ----------
    model_json : dict
        The exported description (for species, r_max, source hash).
    evaluate : callable
        ``atoms -> dict`` of NumPy arrays (the package's float64 evaluation).
    edge_convert : callable
        ``outputs -> (centre, neighbour, shift)`` in the file's convention.
    notes : dict of str to str
        Meaning of the intermediate keys, stored in the JSON.

    Returns
    -------
    (golden_json, tensors)

    Examples
    --------
    >>> # golden_json, tensors = build_golden(model_json, lambda a: evaluate_mace(m, a), ...)
    """
    species_z = [s["Z"] for s in model_json["species"]]
    structures = []
    tensors: Dict[str, np.ndarray] = {}
    for name, atoms in reference_structures(species_z, model_json["r_max"]):
        out = evaluate(atoms)
        centre, neighbour, shift = edge_convert(out)
        entry = {
            "name": name,
            "n_atoms": len(atoms),
            "n_edges": int(len(centre)),
            "pbc": [bool(p) for p in atoms.pbc],
            "keys": [],
        }
        species = np.array([species_z.index(int(z)) for z in atoms.numbers], dtype=np.int64)
        items = {
            "positions": atoms.positions,
            "cell": np.asarray(atoms.cell[:]),
            "pbc": np.asarray(atoms.pbc, dtype=np.int64),
            "species": species,
            "atomic_numbers": atoms.numbers.astype(np.int64),
            "edge_centre": centre,
            "edge_neighbour": neighbour,
            "edge_shift": shift,
        }
        for key, value in out.items():
            if key.startswith("edge_") and key not in (
                "edge_vectors",
                "edge_sh",
                "edge_radial",
                "edge_embedding",
            ):
                continue  # the package's own edge bookkeeping; converted above
            items[key] = value
        for key, value in items.items():
            value = np.asarray(value)
            if value.size == 0:
                continue
            tensors[f"{name}.{key}"] = value
            entry["keys"].append(key)
        structures.append(entry)
    golden_json = {
        "format": schema.GOLDEN_FORMAT_NAME,
        "format_version": schema.GOLDEN_FORMAT_VERSION,
        "model_sha256": model_json["source"]["sha256"],
        "arch": model_json["arch"],
        "head": model_json["source"].get("head"),
        "dtype": "float64",
        "structures": structures,
        "notes": dict(notes),
    }
    return golden_json, tensors

"""Command line of the Clebsch exporter.

::

    python -m potentials.cli export-mace   model.model        out.safetensors [--head H] [--golden]
    python -m potentials.cli export-nequip model.nequip.zip   out.safetensors [--golden]
    python -m potentials.cli check  out.safetensors [--golden out.golden.safetensors]
    python -m potentials.cli info   out.safetensors

``export-mace`` runs in the mace environment, ``export-nequip`` in the nequip one; ``check``
and ``info`` need only NumPy and safetensors. ``--golden`` also writes
``out.golden.safetensors`` (reference structures and float64 outputs of the Python model) and
checks the export against it with the NumPy reference evaluator.

Examples
--------
>>> main(["info", "--help"])  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional

import numpy as np

from . import write


def _check_against_golden(model_path, golden_path, verbose: bool = True) -> float:
    """Evaluate the golden structures with the NumPy reference; return the worst |dE|/atom."""
    from . import numpy_reference as nr

    model_json, tensors = write.read_model(model_path)
    golden_json, g = write.read_golden(golden_path)
    if golden_json.get("model_sha256") != model_json["source"]["sha256"]:
        raise ValueError(
            f"{golden_path} belongs to model {golden_json.get('model_sha256')}, "
            f"not {model_json['source']['sha256']}"
        )
    worst = 0.0
    for s in golden_json["structures"]:
        n = s["name"]
        edges = (g[f"{n}.edge_centre"], g[f"{n}.edge_neighbour"], g[f"{n}.edge_shift"])
        out = nr.evaluate(
            model_json,
            tensors,
            g[f"{n}.positions"],
            g[f"{n}.species"],
            g[f"{n}.cell"],
            [bool(p) for p in g[f"{n}.pbc"]],
            edges=edges,
            structure_inputs=golden_json.get("structure_inputs"),
        )
        de = float(np.abs(out["node_energy"] - g[f"{n}.node_energy"]).max())
        worst = max(worst, de)
        if verbose:
            print(
                f"  {n:14s} atoms {s['n_atoms']:4d} edges {s['n_edges']:6d}  "
                f"E(python) {g[f'{n}.energy'][0]: .12f}  E(numpy) {out['energy'][0]: .12f}  "
                f"max|d e_i| {de:.2e}"
            )
    return worst


def model_package(path) -> Optional[str]:
    """Which package pickled a model file: ``"mace"``, ``"nequip"`` or None (unknown).

    Reads the pickle stream inside the torch zip archive (``*/data.pkl``, or the packaged
    ``.pkl`` files of a ``.nequip.zip``) for the module names it references; nothing is
    unpickled.

    Examples
    --------
    >>> model_package("/nonexistent") is None
    True
    """
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            blob = b"".join(z.read(n)[: 1 << 22] for n in z.namelist() if n.endswith(".pkl"))
    except (OSError, zipfile.BadZipFile):
        return None
    has_mace, has_nequip = b"mace.modules" in blob, b"nequip." in blob
    if has_mace != has_nequip:
        return "mace" if has_mace else "nequip"
    return None


def _check_exporter(arch: str, path) -> None:
    """Refuse a model of the other package with the command that exports it."""
    other = {"mace": "nequip", "nequip": "mace"}[arch]
    if model_package(path) == other:
        raise ValueError(
            f"{path} is a {other} model; export it with 'export-{other}' "
            f"(in ~/.cache/clebsch/venv-{other}), not 'export-{arch}'"
        )


def _export(arch: str, args) -> int:
    _check_exporter(arch, args.model)
    if arch == "mace":
        from . import read_mace as reader

        model = reader.load_mace(args.model)
        model_json, tensors = reader.export_mace(model, head=args.head, source_path=args.model)
    else:
        from . import read_nequip as reader

        model = reader.load_nequip(args.model)
        model_json, tensors = reader.export_nequip(model, source_path=args.model)
    write.write_model(args.out, model_json, tensors)
    size = sum(t.nbytes for t in tensors.values())
    print(
        f"wrote {args.out}: {model_json['arch']} {model_json['source']['model_class']}, "
        f"{len(tensors)} tensors, {size / 1e6:.2f} MB"
    )
    if args.golden:
        if arch == "mace":
            golden_json, golden_tensors = reader.golden_mace(model, model_json, head=args.head)
        else:
            golden_json, golden_tensors = reader.golden_nequip(model, model_json)
        gpath = write.golden_path_for(args.out)
        write.write_golden(gpath, golden_json, golden_tensors)
        print(f"wrote {gpath}")
        worst = _check_against_golden(args.out, gpath)
        tol = 1e-8
        if worst > tol:
            print(
                f"FAILED: NumPy reference differs from the Python model by {worst:.2e} eV/atom",
                file=sys.stderr,
            )
            return 1
        print(f"OK: NumPy reference matches the Python model (max |d e_i| = {worst:.2e} eV)")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point; returns the exit status.

    Examples
    --------
    >>> # main(["export-mace", "cu.model", "cu.safetensors", "--golden"])
    """
    parser = argparse.ArgumentParser(
        prog="python -m potentials.cli", description="Export MACE/NequIP models for Clebsch."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("export-mace", help="export a MACE .model file")
    p.add_argument("model")
    p.add_argument("out")
    p.add_argument("--head", default=None, help="head to export (multi-head models)")
    p.add_argument("--golden", action="store_true", help="also write golden data and check")
    p = sub.add_parser("export-nequip", help="export a NequIP .ckpt or .nequip.zip file")
    p.add_argument("model")
    p.add_argument("out")
    p.add_argument("--golden", action="store_true", help="also write golden data and check")
    p = sub.add_parser("check", help="validate a file (and compare with golden data)")
    p.add_argument("file")
    p.add_argument("--golden", default=None)
    p = sub.add_parser("info", help="print the description of a file")
    p.add_argument("file")
    p.add_argument("--json", action="store_true", help="print the whole model_json")
    args = parser.parse_args(argv)
    try:
        if args.command == "export-mace":
            return _export("mace", args)
        if args.command == "export-nequip":
            return _export("nequip", args)
        if args.command == "check":
            model_json, tensors = write.read_model(args.file)
            print(
                f"{args.file}: valid {model_json['format']} {model_json['format_version']}, "
                f"arch {model_json['arch']}, {len(tensors)} tensors"
            )
            if args.golden:
                worst = _check_against_golden(args.file, args.golden)
                print(f"max |d e_i| = {worst:.2e} eV")
                return 0 if worst <= 1e-8 else 1
            return 0
        if args.command == "info":
            model_json, tensors = write.read_model(args.file)
            if args.json:
                print(json.dumps(model_json, indent=1))
                return 0
            src = model_json["source"]
            print(f"arch         {model_json['arch']} ({src['model_class']})")
            print(f"format       {model_json['format_version']}")
            print(f"species      {[s['symbol'] for s in model_json['species']]}")
            print(f"r_max        {model_json['r_max']}")
            print(f"model dtype  {model_json['model_dtype']}")
            print(f"head         {src.get('head')}")
            print(f"packages     {src['packages']}")
            print(f"sha256       {src['sha256']}")
            print(
                f"parameters   {sum(t.size for t in tensors.values())} numbers in "
                f"{len(tensors)} tensors"
            )
            return 0
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as err:
        # Unpickling a model of the other package, whose modules this venv does not have.
        hint = _wrong_exporter_hint(args, err)
        if hint is None:
            raise
        print(f"error: {hint}", file=sys.stderr)
        return 2
    return 0


def _wrong_exporter_hint(args, err: ModuleNotFoundError) -> Optional[str]:
    """The right command for a model of the other package, from the module that is missing."""
    root = (err.name or "").split(".")[0]
    right = {"mace": "export-mace", "nequip": "export-nequip"}.get(root)
    if right is None or right == args.command:
        return None
    venv = {"export-mace": "venv-mace", "export-nequip": "venv-nequip"}[right]
    return (
        f"{args.model} is a {root} model (it needs the {root!r} package to load); export it with "
        f"'{right}' (in ~/.cache/clebsch/{venv}), not '{args.command}'"
    )


if __name__ == "__main__":
    sys.exit(main())

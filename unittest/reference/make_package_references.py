"""Compute reference values with the real mace-torch / nequip modules for the C++ tests.

Every module ``pkg_<component>.py`` in this folder declares, at module level, the virtual
environment it needs: ``VENV = "mace"`` (then it defines ``generate(rng) -> dict``, written to
``<out>/pkg_<component>.json``) or a tuple such as ``VENV = ("mace", "nequip")`` (then it defines
``generate_<venv>(rng)`` for each, written to ``<out>/pkg_<component>_<venv>.json``). mace-torch
pins e3nn 0.4.4 and nequip needs e3nn 0.6, so each venv is a separate interpreter: this driver
reads the declaration without importing the module (``ast``), then runs itself as a worker under
the interpreter given for that venv (``--python mace=/path/to/python``). The dicts hold float64
inputs drawn from ``rng`` and what the package's modules compute from them (outputs, autograd
gradients, the module buffers); ``unittest/test_pkg_<component>.cpp`` reads them.

Examples
--------
>>> # python make_package_references.py --out build/unittest/reference \\
>>> #     --python mace=~/.cache/clebsch/venv-mace/bin/python \\
>>> #     --python nequip=~/.cache/clebsch/venv-nequip/bin/python
"""

import argparse
import ast
import importlib.util
import json
import os
import pathlib
import subprocess
import sys

SEED = 20261129


def declared_venvs(path):
    """Return the venv names that ``VENV`` at module level of ``path`` declares."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "VENV" for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            if isinstance(value, str):
                return [value], True
            if isinstance(value, (tuple, list)) and all(isinstance(v, str) for v in value):
                return list(value), False
            raise ValueError(
                f"{path.name}: VENV must be a string or a tuple of strings, got {value!r}"
            )
    raise ValueError(f"{path.name}: no module-level VENV declaration")


def _to_plain(value):
    """Convert tensors and arrays (nested in dicts/lists) to JSON-serialisable values."""
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        if not (value.is_floating_point() or value.is_complex()):
            return value.long().tolist()
        return value.double().tolist()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, dict):
        return {str(k): _to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_plain(v) for v in value]
    return value


def worker(module_path, venv, single, out):
    """Run one module's generator for one venv in this interpreter and write its JSON."""
    if venv == "mace":
        # e3nn 0.4.4 torch.load()s its constants with the pre-2.6 default; mace sets this too.
        os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    import numpy as np
    import torch

    torch.set_default_dtype(torch.float64)
    spec = importlib.util.spec_from_file_location(module_path.stem, module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rng = np.random.default_rng(SEED)
    torch.manual_seed(SEED)
    generate = module.generate if single else getattr(module, f"generate_{venv}")
    data = generate(rng)
    versions = {"torch": torch.__version__, "e3nn": __import__("e3nn").__version__}
    for package in ("mace", "nequip"):
        try:
            from importlib.metadata import version

            versions[package] = version("mace-torch" if package == "mace" else package)
        except Exception:  # noqa: BLE001  (package absent from this venv)
            pass
    data["versions"] = versions
    component = module_path.stem[len("pkg_") :]
    name = f"pkg_{component}.json" if single else f"pkg_{component}_{venv}.json"
    (out / name).write_text(json.dumps(_to_plain(data)))
    print(f"wrote {name} ({venv}: {versions})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=pathlib.Path)
    parser.add_argument(
        "--python",
        action="append",
        default=[],
        metavar="VENV=PATH",
        help="interpreter of a venv, e.g. mace=/path/bin/python (repeatable)",
    )
    parser.add_argument("--only", default=None, help="generate only this component")
    parser.add_argument("--worker", type=pathlib.Path, help=argparse.SUPPRESS)
    parser.add_argument("--venv", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    here = pathlib.Path(__file__).resolve().parent
    if args.worker:
        _, single = declared_venvs(args.worker)
        worker(args.worker, args.venv, single, args.out)
        return 0

    pythons = {}
    for item in args.python:
        name, sep, path = item.partition("=")
        if not sep or not path:
            parser.error(f"--python expects VENV=PATH, got {item!r}")
        pythons[name] = path
    modules = sorted(here.glob("pkg_*.py"))
    if not modules:
        print("no pkg_*.py modules found", file=sys.stderr)
        return 1
    failures = 0
    for path in modules:
        component = path.stem[len("pkg_") :]
        if args.only and component != args.only:
            continue
        venvs, _ = declared_venvs(path)
        for venv in venvs:
            if venv not in pythons:
                print(
                    f"{path.name}: no interpreter for venv {venv!r} (pass --python {venv}=PATH)",
                    file=sys.stderr,
                )
                failures += 1
                continue
            cmd = [
                pythons[venv],
                str(pathlib.Path(__file__).resolve()),
                "--out",
                str(args.out),
                "--worker",
                str(path),
                "--venv",
                venv,
            ]
            result = subprocess.run(cmd)
            if result.returncode != 0:
                print(
                    f"{path.name} ({venv}) failed with exit status {result.returncode}",
                    file=sys.stderr,
                )
                failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

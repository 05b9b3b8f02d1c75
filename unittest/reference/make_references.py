"""Compute reference values with the real e3nn for the C++ tests.

Every module ``ref_<component>.py`` in this folder defines ``generate(rng) -> dict``; the dict
(inputs drawn from ``rng`` and the outputs e3nn computes for them, float64) is written to
``<out>/<component>.json``, which ``unittest/test_e3nn_<component>.cpp`` reads.

Examples
--------
>>> # python make_references.py --out build/unittest/reference
"""

import argparse
import importlib.util
import json
import pathlib
import sys

import numpy as np
import torch


def _to_plain(value):
    """Convert tensors and arrays (nested in dicts/lists) to JSON-serialisable lists."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().double().tolist()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): _to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_plain(v) for v in value]
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=pathlib.Path)
    parser.add_argument("--only", default=None, help="generate only this component")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_default_dtype(torch.float64)
    here = pathlib.Path(__file__).resolve().parent
    modules = sorted(here.glob("ref_*.py"))
    if not modules:
        print("no ref_*.py modules found", file=sys.stderr)
        return 1
    for path in modules:
        component = path.stem[len("ref_") :]
        if args.only and component != args.only:
            continue
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        rng = np.random.default_rng(20261129)
        torch.manual_seed(20261129)
        data = module.generate(rng)
        data["e3nn_version"] = __import__("e3nn").__version__
        (args.out / f"{component}.json").write_text(json.dumps(_to_plain(data)))
        print(f"wrote {component}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())

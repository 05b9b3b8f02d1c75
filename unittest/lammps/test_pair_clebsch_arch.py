"""pair_style clebsch on the architectures of mace-torch's newer foundation models (models.json
entries with arch "mace_arch": MH-1-style non-linear interactions and bias readouts, and an
OMOL-style model with a total-charge/spin embedding), against mace-torch's float64 golden data
on 1 and 2 ranks, with device cpu and device gpu (the CUDA engine, on its emulated backend
where no GPU is present); the per-structure inputs as numbers and as equal-style variables, and
the error when a model needs one that is not given.

Environment: as test_pair_clebsch.py.
"""

import json
import os
import pathlib

import pytest

from test_pair_clebsch import _NO_CUDA_ENGINE, _check_golden, _gpu_present, _pair_args, _run_golden
from structures import golden_structures


def _arch_models():
    index = pathlib.Path(os.environ.get("CLEBSCH_MODELS_DIR", "")) / "models.json"
    if not index.exists():
        pytest.fail(f"{index} is missing: the exported_models CTest fixture must run first")
    models = [m for m in json.loads(index.read_text())["models"] if m["arch"] == "mace_arch"]
    if len(models) != 4:
        pytest.fail(f"models.json lists {len(models)} mace_arch models, expected 4")
    return [(m["name"], index.parent / m["file"], index.parent / m["golden"]) for m in models]


@pytest.mark.parametrize("nprocs", [1, 2])
def test_new_architectures_match_mace_torch(nprocs):
    for name, path, golden in _arch_models():
        _check_golden(name, path, golden, nprocs=nprocs)


def test_structure_inputs_from_variables():
    for name, path, golden in _arch_models():
        args = _pair_args(golden)
        if not args:
            continue
        words = args.split()  # charge Q spin S
        pre = "\n".join(f"variable {k} equal {v}" for k, v in zip(words[::2], words[1::2]))
        _check_golden(name, path, golden, pair_args="charge v_charge spin v_spin", pre=pre)


def test_missing_charge_is_an_error_naming_the_keyword():
    for _name, path, golden in _arch_models():
        if not _pair_args(golden):
            continue
        s = golden_structures(golden)[0]
        run, _ = _run_golden(path, s, pair_args="")
        assert run.returncode != 0
        assert "total_charge" in run.output and "charge" in run.output, run.output


@_NO_CUDA_ENGINE
@pytest.mark.parametrize("nprocs", [1, 2])
def test_device_gpu_runs_the_new_architectures(monkeypatch, nprocs):
    """device gpu (clebsch_cuda_create_engine_v3: charge and spin reach the CUDA engine) against
    mace-torch's float64 golden data, as device cpu is held above."""
    if not _gpu_present():
        monkeypatch.setenv("CLEBSCH_CUDA_BACKEND", "emulated")
    for name, path, golden in _arch_models():
        _check_golden(
            name, path, golden, nprocs=nprocs, pair_args=_pair_args(golden) + " device gpu"
        )

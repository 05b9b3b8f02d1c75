"""Write and read Clebsch model files and golden-data files (safetensors + JSON metadata).

Floating-point tensors are stored as little-endian float64 whatever the model's own dtype
(widening float32 to float64 is exact); integer tensors as int64. The JSON goes into the
safetensors ``__metadata__`` under ``model_json`` (model files) or ``golden_json`` (golden
files), with ``format`` and ``format_version`` next to it so that a reader can reject a file
before parsing the JSON.

Examples
--------
>>> import json, tempfile, pathlib, numpy as np
>>> from potentials import schema
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> write_golden(d / "g.safetensors", {"structures": []}, {"x": np.zeros(2)})
>>> meta, tensors = read_golden(d / "g.safetensors")
>>> meta["structures"], tensors["x"].dtype
([], dtype('float64'))
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any, Dict, Mapping, Tuple

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from . import schema


def _as_storable(name: str, value: Any) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype == np.bool_:
        array = array.astype(np.int64)
    if np.issubdtype(array.dtype, np.floating):
        array = array.astype(np.float64)
        if not np.all(np.isfinite(array)):
            raise ValueError(f"tensor {name!r} holds non-finite values")
    elif np.issubdtype(array.dtype, np.integer):
        array = array.astype(np.int64)
    else:
        raise TypeError(f"tensor {name!r} has unsupported dtype {array.dtype}")
    if array.size == 0:
        raise ValueError(f"tensor {name!r} is empty; empty tensors are not stored")
    return np.ascontiguousarray(array)


def _check_json(obj: Any, path: str = "") -> None:
    """Reject NaN/inf (not valid JSON) and non-string keys before dumping."""
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError(f"{path or 'json'} is {obj}, which JSON cannot represent")
    if isinstance(obj, dict):
        for key, value in obj.items():
            if not isinstance(key, str):
                raise TypeError(f"{path}: JSON key {key!r} is not a string")
            _check_json(value, f"{path}.{key}" if path else key)
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            _check_json(value, f"{path}[{i}]")


def write_model(path, model_json: Mapping[str, Any], tensors: Mapping[str, Any]) -> None:
    """Validate and write a model file.

    Parameters
    ----------
    path : str or pathlib.Path
        Output file, conventionally ``*.safetensors``.
    model_json : dict
        The model description (see ``FORMAT.md``).
    tensors : dict of str to array-like
        Every tensor that ``model_json`` references, and no other.

    Raises
    ------
    ValueError
        If the description and the tensors disagree (see :func:`schema.validate`).

    Examples
    --------
    >>> # write_model("out.safetensors", model_json, tensors)
    """
    arrays = {name: _as_storable(name, value) for name, value in tensors.items()}
    schema.validate(model_json, arrays)
    _check_json(model_json)
    metadata = {
        "format": schema.FORMAT_NAME,
        "format_version": str(model_json["format_version"]),
        "model_json": json.dumps(model_json, sort_keys=False, allow_nan=False),
    }
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(arrays, str(path), metadata=metadata)


def _read(path, key: str) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
    path = pathlib.Path(path)
    if not path.is_file():
        raise ValueError(f"no such file: {path}")
    with safe_open(str(path), framework="numpy") as handle:
        metadata = handle.metadata() or {}
        if key not in metadata:
            raise ValueError(f"{path} has no {key!r} in its safetensors metadata")
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    return json.loads(metadata[key]), tensors


def read_model(path) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
    """Read a model file; return ``(model_json, tensors)`` after validating them.

    Raises
    ------
    ValueError
        If the file is missing, not a Clebsch model, of an unknown major version, or
        inconsistent.

    Examples
    --------
    >>> # model_json, tensors = read_model("potentials/bundled/cu-mace.safetensors")
    """
    model_json, tensors = _read(path, "model_json")
    schema.validate(model_json, tensors)
    return model_json, tensors


def write_golden(path, golden_json: Mapping[str, Any], tensors: Mapping[str, Any]) -> None:
    """Write a golden-data file (reference outputs of the Python model, float64).

    Examples
    --------
    >>> # write_golden("out.golden.safetensors", {"structures": [...]}, tensors)
    """
    arrays = {name: _as_storable(name, value) for name, value in tensors.items()}
    golden_json = dict(golden_json)
    golden_json.setdefault("format", schema.GOLDEN_FORMAT_NAME)
    golden_json.setdefault("format_version", schema.GOLDEN_FORMAT_VERSION)
    _check_json(golden_json)
    metadata = {
        "format": golden_json["format"],
        "format_version": golden_json["format_version"],
        "golden_json": json.dumps(golden_json, allow_nan=False),
    }
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(arrays, str(path), metadata=metadata)


def read_golden(path) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
    """Read a golden-data file; return ``(golden_json, tensors)``.

    Examples
    --------
    >>> # meta, tensors = read_golden("out.golden.safetensors")
    """
    return _read(path, "golden_json")


def golden_path_for(model_path) -> pathlib.Path:
    """The companion golden file of a model file: ``x.safetensors`` -> ``x.golden.safetensors``.

    Examples
    --------
    >>> str(golden_path_for("a/cu.safetensors"))
    'a/cu.golden.safetensors'
    """
    model_path = pathlib.Path(model_path)
    stem = (
        model_path.name[: -len(".safetensors")]
        if model_path.name.endswith(".safetensors")
        else model_path.name
    )
    return model_path.with_name(stem + ".golden.safetensors")

"""The Clebsch model-file schema: constants, irreps helpers and a validator.

A model file is one ``.safetensors`` file. Its ``__metadata__`` holds ``format`` (the string
``clebsch-model``), ``format_version`` and ``model_json``: a JSON document that describes the
network completely (irreps, instructions, path weights, radial basis, species, units, ...).
Every numeric array lives in a tensor of the same file and is referenced from the JSON by an
object ``{"tensor": name, "shape": [...]}``. ``potentials/FORMAT.md`` is the normative
description; this module is its executable counterpart and depends on NumPy only.

Examples
--------
>>> parse_irreps("8x0e+4x1o")
[(8, 0, 1), (4, 1, -1)]
>>> irreps_dim("8x0e+4x1o")
20
>>> check_version({"format": "clebsch-model", "format_version": "1.0"})
(1, 0)
"""

from __future__ import annotations

import re
from typing import Any, Dict, Iterator, List, Mapping, Tuple

import numpy as np

FORMAT_NAME = "clebsch-model"
FORMAT_VERSION = "1.1"
GOLDEN_FORMAT_NAME = "clebsch-golden"
GOLDEN_FORMAT_VERSION = "1.0"

#: Major versions this module (and the C++ reader) understands.
SUPPORTED_MAJOR = 1

#: Architectures the file can describe, and the key of their section in ``model_json``.
ARCHITECTURES = ("mace", "nequip")

#: Keys every ``model_json`` must carry at top level.
REQUIRED_TOP_LEVEL = (
    "format",
    "format_version",
    "arch",
    "source",
    "units",
    "model_dtype",
    "tensor_dtype",
    "species",
    "r_max",
    "r_max_pairs",
    "graph",
    "spherical_harmonics",
)

#: Activation names the file may use, and their definitions (before the ``cst`` factor).
ACTIVATIONS = {
    "silu": "x * sigmoid(x)",
    "tanh": "tanh(x)",
    "sigmoid": "1 / (1 + exp(-x))",
    "abs": "|x|",
    "ssp": "softplus(x) - log(2)  (shifted softplus)",
    "gelu": "x * (1 + erf(x / sqrt(2))) / 2  (exact GELU, torch.nn.GELU)",
    "mish": "x * tanh(softplus(x))  (torch.nn.Mish)",
}

_IRREP_TERM = re.compile(r"^\s*(?:(\d+)\s*x\s*)?(\d+)([eo])\s*$")


def parse_irreps(text: str) -> List[Tuple[int, int, int]]:
    """Parse an e3nn irreps string into ``(mul, l, p)`` triples, keeping the order.

    Parameters
    ----------
    text : str
        e3nn syntax, e.g. ``"16x0e+8x1o"``; the empty string is the empty sum.

    Returns
    -------
    list of tuple of int
        ``(mul, l, p)`` with ``p`` = +1 (``e``) or -1 (``o``).

    Raises
    ------
    TypeError
        If ``text`` is not a string.
    ValueError
        If a term is malformed; the message names it.

    Examples
    --------
    >>> parse_irreps("1x0e+1x1o+1x2e")
    [(1, 0, 1), (1, 1, -1), (1, 2, 1)]
    >>> parse_irreps("")
    []
    """
    if not isinstance(text, str):
        raise TypeError(f"irreps must be a string, got {type(text).__name__}: {text!r}")
    if text.strip() == "":
        return []
    out = []
    for term in text.split("+"):
        match = _IRREP_TERM.match(term)
        if match is None:
            raise ValueError(f"malformed irreps term {term!r} in {text!r}")
        mul = int(match.group(1)) if match.group(1) is not None else 1
        out.append((mul, int(match.group(2)), 1 if match.group(3) == "e" else -1))
    return out


def irreps_dim(text: str) -> int:
    """Total dimension ``sum(mul * (2l+1))`` of an irreps string.

    Examples
    --------
    >>> irreps_dim("2x0e+1x2e")
    7
    """
    return sum(mul * (2 * l + 1) for mul, l, _ in parse_irreps(text))


def irreps_offsets(text: str) -> List[int]:
    """Start of each block in the flat ``mul_ir`` layout, plus the total dimension.

    Examples
    --------
    >>> irreps_offsets("2x0e+1x1o")
    [0, 2, 5]
    """
    offsets = [0]
    for mul, l, _ in parse_irreps(text):
        offsets.append(offsets[-1] + mul * (2 * l + 1))
    return offsets


def tensor_ref(name: str, shape) -> Dict[str, Any]:
    """The JSON object that references a tensor of the file.

    Examples
    --------
    >>> tensor_ref("a.weight", (3, 4))
    {'tensor': 'a.weight', 'shape': [3, 4]}
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"tensor name must be a non-empty string, got {name!r}")
    return {"tensor": name, "shape": [int(s) for s in shape]}


def check_version(model_json: Mapping[str, Any]) -> Tuple[int, int]:
    """Check the format name and major version; return ``(major, minor)``.

    Raises
    ------
    ValueError
        If the format is not ``clebsch-model`` or the major version is unknown; the message
        names both versions.

    Examples
    --------
    >>> check_version({"format": "clebsch-model", "format_version": "2.0"})
    Traceback (most recent call last):
    ...
    ValueError: model file has format_version 2.0, this reader understands 1.x (1.1)
    """
    fmt = model_json.get("format")
    if fmt != FORMAT_NAME:
        raise ValueError(f"not a Clebsch model: format is {fmt!r}, expected {FORMAT_NAME!r}")
    version = str(model_json.get("format_version", ""))
    match = re.match(r"^(\d+)\.(\d+)$", version)
    if match is None:
        raise ValueError(f"malformed format_version {version!r}")
    major, minor = int(match.group(1)), int(match.group(2))
    if major != SUPPORTED_MAJOR:
        raise ValueError(
            f"model file has format_version {version}, this reader understands "
            f"{SUPPORTED_MAJOR}.x ({FORMAT_VERSION})"
        )
    return major, minor


def iter_tensor_refs(obj: Any, path: str = "") -> Iterator[Tuple[str, Dict[str, Any]]]:
    """Yield ``(json_path, ref)`` for every tensor reference inside a JSON document.

    Examples
    --------
    >>> list(iter_tensor_refs({"a": [{"tensor": "x", "shape": [1]}]}))
    [('a[0]', {'tensor': 'x', 'shape': [1]})]
    """
    if isinstance(obj, dict):
        if "tensor" in obj and "shape" in obj and isinstance(obj["tensor"], str):
            yield path, obj
            return
        for key, value in obj.items():
            yield from iter_tensor_refs(value, f"{path}.{key}" if path else str(key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from iter_tensor_refs(value, f"{path}[{i}]")


def validate(model_json: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> None:
    """Check a model description against its tensors.

    Checks the version, the top-level keys, that every referenced tensor exists with the
    stated shape, that every tensor of the file is referenced, and that every irreps string
    parses.

    Parameters
    ----------
    model_json : dict
        The decoded ``model_json``.
    tensors : dict of str to numpy.ndarray
        The tensors of the file.

    Raises
    ------
    ValueError
        On the first inconsistency; the message names the field and the value.

    Examples
    --------
    >>> validate({"format": "clebsch-model"}, {})
    Traceback (most recent call last):
    ...
    ValueError: malformed format_version ''
    """
    check_version(model_json)
    for key in REQUIRED_TOP_LEVEL:
        if key not in model_json:
            raise ValueError(f"model_json lacks the top-level key {key!r}")
    arch = model_json["arch"]
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown arch {arch!r}; expected one of {ARCHITECTURES}")
    if arch not in model_json:
        raise ValueError(f"model_json has arch {arch!r} but no {arch!r} section")
    seen = set()
    for path, ref in iter_tensor_refs(model_json):
        name = ref["tensor"]
        if name not in tensors:
            raise ValueError(f"{path} references tensor {name!r}, which the file does not hold")
        shape = list(np.shape(tensors[name]))
        if shape != list(ref["shape"]):
            raise ValueError(f"{path}: tensor {name!r} has shape {shape}, JSON says {ref['shape']}")
        seen.add(name)
    unreferenced = sorted(set(tensors) - seen)
    if unreferenced:
        raise ValueError(f"tensors not referenced by model_json: {unreferenced[:5]}")
    for path, value in _iter_irreps_fields(model_json):
        try:
            parse_irreps(value)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None
    n_species = len(model_json["species"])
    r_pairs = np.asarray(model_json["r_max_pairs"], dtype=float)
    if r_pairs.shape != (n_species, n_species):
        raise ValueError(
            f"r_max_pairs has shape {list(r_pairs.shape)}, expected [{n_species}, {n_species}]"
        )
    if np.any(r_pairs > float(model_json["r_max"]) + 1e-12):
        raise ValueError(f"r_max_pairs exceeds r_max = {model_json['r_max']}")


def _iter_irreps_fields(obj: Any, path: str = "") -> Iterator[Tuple[str, str]]:
    if isinstance(obj, dict):
        for key, value in obj.items():
            sub = f"{path}.{key}" if path else str(key)
            if key.startswith("irreps") and isinstance(value, str):
                yield sub, value
            else:
                yield from _iter_irreps_fields(value, sub)
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from _iter_irreps_fields(value, f"{path}[{i}]")

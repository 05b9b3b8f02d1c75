"""Describe e3nn building blocks (Linear, TensorProduct, FullyConnectedNet, Activation, Gate).

Shared by ``read_mace`` (e3nn 0.4.4) and ``read_nequip`` (e3nn 0.6): only attributes that both
versions have are read. Everything that matters numerically is read from the module as it
was built, never recomputed: path weights from ``instructions``, ``cst`` from each
``normalize2mom``, the Clebsch-Gordan tables by probing the compiled tensor product with
one-hot inputs (so ``pw * C`` comes out exactly as the module multiplies it, signs included).

Examples
--------
>>> # inside the mace venv:
>>> # from e3nn import o3; sink = TensorSink()
>>> # d = describe_linear(o3.Linear("4x0e+2x1o", "3x0e+2x1o"), "lin", sink)
>>> # d["instructions"][0]["path_weight"]   # 1/sqrt(4)
>>> # 0.5
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from . import schema
from .schema import tensor_ref

#: Largest |probe - path_weight * wigner_3j| accepted silently; larger is recorded.
CG_MATCH_TOL = 1e-12


class TensorSink:
    """Collects the tensors of an export under unique names.

    Examples
    --------
    >>> sink = TensorSink()
    >>> sink.add("a.w", np.ones((2, 3)))
    {'tensor': 'a.w', 'shape': [2, 3]}
    >>> sorted(sink.tensors)
    ['a.w']
    """

    def __init__(self) -> None:
        self.tensors: Dict[str, np.ndarray] = {}

    def add(self, name: str, value) -> Dict[str, Any]:
        if name in self.tensors:
            raise ValueError(f"tensor name {name!r} used twice")
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu()
            value = value.double().numpy() if value.is_floating_point() else value.numpy()
        array = np.array(value)
        if np.issubdtype(array.dtype, np.floating):
            array = array.astype(np.float64)
        self.tensors[name] = array
        return tensor_ref(name, array.shape)


def class_name(module: Any) -> str:
    """Fully qualified class name, used in refusal messages and in the file.

    Examples
    --------
    >>> class_name(torch.nn.Linear(1, 1))
    'torch.nn.modules.linear.Linear'
    """
    cls = type(module)
    mod = re.sub(r"^<torch_package_\d+>\.", "", cls.__module__)  # torch.package mangling
    return f"{mod}.{cls.__qualname__}"


def refuse(module: Any, why: str) -> None:
    """Raise the exporter's standard refusal, naming the module class.

    Raises
    ------
    ValueError
        Always.
    """
    raise ValueError(f"unsupported module {class_name(module)}: {why}")


def _activation_name(fn: Any) -> str:
    """Map an activation callable to a name of ``schema.ACTIVATIONS``."""
    if isinstance(fn, torch.nn.SiLU):
        return "silu"
    if isinstance(fn, torch.nn.Tanh):
        return "tanh"
    if isinstance(fn, torch.nn.Sigmoid):
        return "sigmoid"
    name = getattr(fn, "__name__", None)
    if name in ("silu", "tanh", "sigmoid", "abs"):
        return name
    if name in ("shifted_softplus", "ShiftedSoftPlus"):
        return "ssp"
    raise ValueError(
        f"unsupported activation {getattr(fn, '__qualname__', type(fn).__name__)!r} "
        f"({class_name(fn)}); supported: silu, tanh, sigmoid, abs, shifted_softplus"
    )


def describe_act(act: Any) -> Optional[Dict[str, Any]]:
    """Describe an activation, with the constant the module really multiplies by.

    e3nn wraps activations in ``normalize2mom``; it multiplies by ``cst`` unless
    ``|cst - 1| < 1e-4``, in which case it multiplies by nothing (``_is_id``). The file stores
    the factor that is applied.

    Examples
    --------
    >>> describe_act(None) is None
    True
    >>> describe_act(torch.nn.SiLU())
    {'name': 'silu', 'cst': 1.0}
    """
    if act is None:
        return None
    if type(act).__name__ == "normalize2mom":
        cst = 1.0 if getattr(act, "_is_id", False) else float(act.cst)
        return {"name": _activation_name(act.f), "cst": cst}
    return {"name": _activation_name(act), "cst": 1.0}


def _irreps(irreps) -> str:
    return str(irreps)


def describe_linear(
    linear: Any,
    name: str,
    sink: TensorSink,
    weight: Optional[torch.Tensor] = None,
    path_shapes: Optional[List[tuple]] = None,
) -> Dict[str, Any]:
    """Describe an ``e3nn.o3.Linear`` (no biases), with its flat weight.

    ``y[i_out][w, m] += path_weight * sum_u W[weight_offset + u*mul_out + w] * x[i_in][u, m]``.

    Parameters
    ----------
    linear : e3nn.o3.Linear
    name : str
        Tensor name of the weight.
    sink : TensorSink
    weight : torch.Tensor, optional
        Replacement flat weight (used when a multi-head model is sliced to one head).
    path_shapes : list of tuple, optional
        The instructions' path shapes matching ``weight`` (path weights stay the module's).

    Raises
    ------
    ValueError
        If the module is not an ``o3.Linear``, has biases, or uses ``f_in``/external weights.
    """
    if type(linear).__name__ != "Linear" or not hasattr(linear, "instructions"):
        refuse(
            linear,
            "expected e3nn.o3.Linear (cuequivariance linears: convert the model "
            "back to e3nn first)",
        )
    if not getattr(linear, "internal_weights", True) or not getattr(linear, "shared_weights", True):
        refuse(linear, "Linear with external or per-sample weights")
    if any(ins.i_in == -1 for ins in linear.instructions):
        refuse(linear, "Linear with biases")
    w = linear.weight if weight is None else weight
    instructions = []
    offset = 0
    for k, ins in enumerate(linear.instructions):
        shape = ins.path_shape if path_shapes is None else path_shapes[k]
        numel = int(np.prod(shape))
        if numel == 0:
            continue
        instructions.append(
            {
                "i_in": int(ins.i_in),
                "i_out": int(ins.i_out),
                "path_shape": [int(s) for s in shape],
                "path_weight": float(ins.path_weight),
                "weight_offset": offset,
            }
        )
        offset += numel
    if offset != w.numel():
        raise ValueError(f"{name}: instructions need {offset} weights, module has {w.numel()}")
    return {
        "op": "linear",
        "irreps_in": _irreps(linear.irreps_in),
        "irreps_out": _irreps(linear.irreps_out),
        "weight": sink.add(name, w.reshape(-1)) if offset > 0 else None,
        "instructions": instructions,
    }


def _slices(irreps) -> List[int]:
    out = [0]
    for mul_ir in irreps:
        out.append(out[-1] + mul_ir.mul * mul_ir.ir.dim)
    return out


def probe_cg(tp: Any, k: int, dtype=torch.float64) -> np.ndarray:
    """Probe instruction ``k`` of an e3nn TensorProduct; return ``P[i, j, m]``.

    Channel 0 of input 1 and channel 0 of input 2 are set to one-hot vectors, the weight of the
    first path element of instruction ``k`` is 1 and all other weights are 0. The output
    channel 0 of block ``i_out`` is then ``P = path_weight * C`` exactly as the compiled module
    computes it.

    Examples
    --------
    >>> # P = probe_cg(model.interactions[0].conv_tp, 1)
    """
    ins = tp.instructions[k]
    if not ins.has_weight:
        raise ValueError(f"instruction {k} of {class_name(tp)} has no weight; cannot probe")
    ir1 = tp.irreps_in1[ins.i_in1].ir
    ir2 = tp.irreps_in2[ins.i_in2].ir
    ir3 = tp.irreps_out[ins.i_out].ir
    d1, d2, d3 = ir1.dim, ir2.dim, ir3.dim
    s1, s2, s3 = _slices(tp.irreps_in1), _slices(tp.irreps_in2), _slices(tp.irreps_out)
    n = d1 * d2
    x = torch.zeros(n, s1[-1], dtype=dtype)
    y = torch.zeros(n, s2[-1], dtype=dtype)
    for row in range(n):
        i, j = divmod(row, d2)
        x[row, s1[ins.i_in1] + i] = 1.0
        y[row, s2[ins.i_in2] + j] = 1.0
    offset = 0
    for other in tp.instructions[:k]:
        if other.has_weight:
            offset += int(np.prod(other.path_shape))
    w = torch.zeros(tp.weight_numel, dtype=dtype)
    w[offset] = 1.0
    if not tp.shared_weights:
        w = w.expand(n, -1).contiguous()
    with torch.no_grad():
        out = tp(x, y, w)
    block = out[:, s3[ins.i_out] : s3[ins.i_out] + d3]
    rest = out.clone()
    rest[:, s3[ins.i_out] : s3[ins.i_out] + d3] = 0
    if rest.abs().max() > 0:
        raise ValueError(f"probe of instruction {k} of {class_name(tp)} leaked into other outputs")
    return block.reshape(d1, d2, d3).double().numpy()


def describe_tensor_product(
    tp: Any, name: str, sink: TensorSink, weight_source: str
) -> Dict[str, Any]:
    """Describe an e3nn ``TensorProduct`` (incl. ``FullyConnectedTensorProduct``).

    Each instruction gets a probed table ``cg`` = ``path_weight * C`` (see :func:`probe_cg`);
    ``cg_vs_wigner_3j`` records the largest difference to ``path_weight * o3.wigner_3j`` of the
    installed e3nn (0 up to round-off unless the module carries other constants).

    Parameters
    ----------
    tp : e3nn.o3.TensorProduct
    name : str
        Prefix of the tensor names.
    sink : TensorSink
    weight_source : {"internal", "external"}
        ``internal``: the module's own (shared) weight is exported as ``<name>.weight``;
        ``external``: the weights come per edge from another module (radial MLP).

    Raises
    ------
    ValueError
        For modes other than uvw/uvu/uuu, weightless instructions, or a mismatch between
        ``weight_source`` and the module.
    """
    from e3nn import o3

    if not hasattr(tp, "instructions") or not hasattr(tp, "irreps_in1"):
        refuse(
            tp,
            "expected e3nn.o3.TensorProduct (convert cuequivariance/OpenEquivariance "
            "models back to e3nn first)",
        )
    instructions = []
    offset = 0
    max_dev = 0.0
    for k, ins in enumerate(tp.instructions):
        if ins.connection_mode not in ("uvw", "uvu", "uuu"):
            refuse(tp, f"connection mode {ins.connection_mode!r} (instruction {k})")
        if not ins.has_weight:
            refuse(tp, f"instruction {k} without weights")
        probe = probe_cg(tp, k)
        l1 = tp.irreps_in1[ins.i_in1].ir.l
        l2 = tp.irreps_in2[ins.i_in2].ir.l
        l3 = tp.irreps_out[ins.i_out].ir.l
        ref = float(ins.path_weight) * o3.wigner_3j(l1, l2, l3, dtype=torch.float64).numpy()
        dev = float(np.abs(probe - ref).max())
        max_dev = max(max_dev, dev)
        numel = int(np.prod(ins.path_shape))
        instructions.append(
            {
                "i_in1": int(ins.i_in1),
                "i_in2": int(ins.i_in2),
                "i_out": int(ins.i_out),
                "mode": ins.connection_mode,
                "has_weight": True,
                "path_weight": float(ins.path_weight),
                "path_shape": [int(s) for s in ins.path_shape],
                "weight_offset": offset,
                "cg": sink.add(f"{name}.cg.{k}", probe),
                "cg_vs_wigner_3j": dev,
            }
        )
        offset += numel
    if offset != tp.weight_numel:
        raise ValueError(
            f"{name}: instructions need {offset} weights, module has {tp.weight_numel}"
        )
    if weight_source == "internal":
        if not tp.internal_weights:
            refuse(tp, "expected internal weights")
        weight = sink.add(f"{name}.weight", tp.weight.reshape(-1))
    elif weight_source == "external":
        if tp.internal_weights or tp.shared_weights:
            refuse(tp, "expected external per-edge weights")
        weight = None
    else:
        raise ValueError(f"weight_source must be 'internal' or 'external', got {weight_source!r}")
    return {
        "op": "tensor_product",
        "irreps_in1": _irreps(tp.irreps_in1),
        "irreps_in2": _irreps(tp.irreps_in2),
        "irreps_out": _irreps(tp.irreps_out),
        "weight_source": weight_source,
        "weight_numel": int(tp.weight_numel),
        "weight": weight,
        "cg_includes_path_weight": True,
        "cg_max_deviation_from_wigner_3j": max_dev,
        "instructions": instructions,
    }


def describe_fc_net(net: Any, name: str, sink: TensorSink) -> Dict[str, Any]:
    """Describe an ``e3nn.nn.FullyConnectedNet`` as an ``mlp`` op.

    Layer k: ``z = (x @ W_k) * weight_scale``, then if the layer has an activation
    ``z = out_scale * cst * f(z)``. e3nn's ``_Layer`` gives weight_scale =
    ``(h_in * var_in)^-1/2`` and out_scale = ``var_out^1/2`` with an activation, and
    weight_scale = ``(h_in * var_in / var_out)^-1/2`` without.
    """
    if type(net).__name__ != "FullyConnectedNet":
        refuse(net, "expected e3nn.nn.FullyConnectedNet")
    layers = []
    for i, layer in enumerate(net.children()):
        if type(layer).__name__ != "_Layer":
            refuse(layer, "expected e3nn.nn._fc._Layer inside FullyConnectedNet")
        h_in, var_in, var_out = float(layer.h_in), float(layer.var_in), float(layer.var_out)
        act = describe_act(layer.act)
        if act is not None:
            scale = (h_in * var_in) ** -0.5
            out_scale = var_out**0.5
        else:
            scale = (h_in * var_in / var_out) ** -0.5
            out_scale = 1.0
        layers.append(
            {
                "weight": sink.add(f"{name}.layer{i}.weight", layer.weight),
                "bias": None,
                "weight_scale": scale,
                "activation": act,
                "out_scale": out_scale,
            }
        )
    return {"op": "mlp", "layers": layers}


def describe_activation(act: Any) -> Dict[str, Any]:
    """Describe an ``e3nn.nn.Activation``: one activation (or null) per irreps block.

    Examples
    --------
    >>> # describe_activation(readout.non_linearity)["acts"]
    >>> # [{'name': 'silu', 'cst': 1.679...}]
    """
    if type(act).__name__ != "Activation" or not hasattr(act, "acts"):
        refuse(act, "expected e3nn.nn.Activation")
    return {
        "op": "activation",
        "irreps_in": _irreps(act.irreps_in),
        "irreps_out": _irreps(act.irreps_out),
        "acts": [describe_act(a) for a in act.acts],
    }


def describe_gate(gate: Any) -> Dict[str, Any]:
    """Describe an ``e3nn.nn.Gate`` with explicit gather indices.

    The input is cut into three parts by pure gathers: ``x[index_scalars]`` (laid out as
    ``irreps_scalars``), ``x[index_gates]`` (``irreps_gates``) and ``x[index_gated]``
    (``irreps_gated``). Output = ``concat(act_scalars(scalars), gated')`` where the k-th irrep
    copy of ``gated`` (blocks in order, copies u in order) is multiplied by
    ``act_gates(gates)[k]``. The indices are obtained by pushing ``arange(dim)`` through the
    module's own cutter, so they are exactly what it does.
    """
    if type(gate).__name__ != "Gate" or not hasattr(gate, "sc"):
        refuse(gate, "expected e3nn.nn.Gate")
    dim = sum(m.mul * m.ir.dim for m in gate.irreps_in)
    with torch.no_grad():
        parts = gate.sc(torch.arange(dim, dtype=torch.float64).unsqueeze(0))
    idx = [[int(round(v)) for v in p.reshape(-1).tolist()] for p in parts]
    return {
        "op": "gate",
        "irreps_in": _irreps(gate.irreps_in),
        "irreps_out": _irreps(gate.irreps_out),
        # the activations' own irreps (not simplified): one act per block
        "irreps_scalars": _irreps(gate.act_scalars.irreps_in),
        "irreps_gates": _irreps(gate.act_gates.irreps_in),
        "irreps_gated": _irreps(gate.irreps_gated),
        "index_scalars": idx[0],
        "index_gates": idx[1],
        "index_gated": idx[2],
        "act_scalars": [describe_act(a) for a in gate.act_scalars.acts],
        "act_gates": [describe_act(a) for a in gate.act_gates.acts],
    }


def package_version(name: str) -> Optional[str]:
    """Installed version of a distribution, or None.

    Examples
    --------
    >>> isinstance(package_version("numpy"), str)
    True
    """
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def sha256_file(path) -> str:
    """Hex SHA-256 of a file (the source-model hash recorded in the export)."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_state(module: torch.nn.Module) -> str:
    """Hex SHA-256 over the named parameters and buffers (for models held in memory)."""
    import hashlib

    h = hashlib.sha256()
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def model_header(
    arch: str,
    model: torch.nn.Module,
    source_path,
    *,
    package: str,
    model_dtype: str,
    species,
    r_max: float,
    r_max_pairs,
    graph: Dict[str, Any],
    sh_irreps,
    source_extra: Optional[Dict[str, Any]] = None,
    heads=None,
    head=None,
) -> Dict[str, Any]:
    """The part of a model description that every architecture writes (FORMAT.md §2-3).

    Parameters
    ----------
    arch : str
        ``"mace"`` or ``"nequip"``; the caller adds its own section under this key.
    model : torch.nn.Module
        The source model (its class name, and its parameters' hash when ``source_path`` is None).
    source_path : str or pathlib.Path or None
        The file the model was loaded from, hashed as the source-model hash.
    package : str
        The model's own distribution (``"mace-torch"``, ``"nequip"``), whose version is recorded.
    source_extra : dict, optional
        Keys of the ``source`` object after ``model_class`` (for example nequip's ``metadata``).
    sh_irreps : e3nn.o3.Irreps
        The edge spherical harmonics' irreps.

    Returns
    -------
    dict
        Keys in the order FORMAT.md lists them, up to ``spherical_harmonics``.

    Examples
    --------
    >>> # header = model_header("mace", model, "my.model", package="mace-torch", ...)
    """
    import pathlib

    if source_path is not None:
        source_hash, source_name = sha256_file(source_path), pathlib.Path(source_path).name
    else:
        source_hash, source_name = sha256_state(model), None
    source = {
        "file": source_name,
        "sha256": source_hash,
        "sha256_of": "file" if source_path is not None else "parameters_and_buffers",
        "model_class": class_name(model),
        **(source_extra or {}),
        "heads": heads,
        "head": head,
        "packages": {
            k: package_version(k) for k in (package, "e3nn", "torch", "numpy", "ase", "safetensors")
        },
        "exporter": f"clebsch-potentials {__import__('potentials').__version__}",
    }
    return {
        "format": schema.FORMAT_NAME,
        "format_version": schema.FORMAT_VERSION,
        "arch": arch,
        "source": source,
        "units": {
            "energy": "eV",
            "length": "Angstrom",
            "force": "eV/Angstrom",
            "virial": "eV",
            "stress": "eV/Angstrom^3",
        },
        "model_dtype": model_dtype,
        "tensor_dtype": "float64",
        "species": species,
        "r_max": r_max,
        "r_max_pairs": r_max_pairs,
        "graph": graph,
        "spherical_harmonics": {
            "lmax": int(max(ir.l for _, ir in sh_irreps)),
            "irreps": str(sh_irreps),
            "normalize": True,
            "normalization": "component",
        },
    }


def is_close_to(x: float, y: float) -> bool:
    return math.isclose(x, y, rel_tol=0, abs_tol=1e-12)

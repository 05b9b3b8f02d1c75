"""NumPy evaluation of the newer MACE blocks (FORMAT.md §5: ``residual_nonlinear``
interactions, ``nonlinear_bias`` readouts, the per-structure ``embedding``), from the file
alone. Split from ``numpy_reference.py``, which calls these; the same executable-spec rules.

Examples
--------
>>> # from potentials import numpy_reference_arch as arch
>>> # h0, e_emb = arch.embedding(model_json["mace"]["embedding"], h0, {"total_charge": 0}, t)
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

import numpy as np

from .numpy_reference import _act, activation, gate, linear, mlp, tensor_product

Tensors = Mapping[str, np.ndarray]


def structure_input(emb: Mapping[str, Any], inputs: Optional[Mapping[str, float]], name: str):
    """The value of one per-structure input, or a ValueError naming it."""
    if inputs is None or name not in inputs:
        raise ValueError(
            f"the model needs the per-structure input {name!r} (its embedding_specs); "
            f"given: {sorted(inputs or {})}"
        )
    return float(inputs[name])


def embedding(
    emb: Mapping[str, Any], h0: np.ndarray, inputs: Optional[Mapping[str, float]], t: Tensors
):
    """``h0 + silu(concat(features) @ P)`` (the same row for every atom) and the embedding
    readout's per-atom energy (zero without a readout)."""
    parts = []
    for f in emb["features"]:
        v = structure_input(emb, inputs, f["name"])
        if f["type"] == "categorical":
            idx = int(np.trunc(v + f["offset"]))  # torch .long() truncates toward zero
            if not 0 <= idx < f["num_classes"]:
                raise ValueError(
                    f"{f['name']} = {v} is outside the embedding's {f['num_classes']} classes "
                    f"(offset {f['offset']})"
                )
            parts.append(t[f["table"]["tensor"]][idx])
        else:
            parts.append(mlp(f["mlp"], np.array([[v]]), t)[0])
    x = np.concatenate(parts)[None, :] @ t[emb["project"]["weight"]["tensor"]]
    x = _act(emb["project"]["activation"], x)
    h = h0 + x
    e = np.zeros(len(h0))
    if emb.get("readout") is not None:
        e = linear(emb["readout"], h, t)[:, 0]
    return h, e


def nonlinear_interaction(
    inter: Mapping[str, Any], h, onehot, Y, ef, fc, recv, send, t: Tensors, out: Dict, k: int
):
    """A ``residual_nonlinear`` interaction: returns ``(sc, M)`` where M feeds the product."""
    n = len(h)
    sc = linear(inter["skip"], h, t)
    hu = linear(inter["linear_up"], h, t)
    res = linear(inter["linear_res"], hu, t)
    src = linear(inter["source_embedding"], onehot, t)
    tgt = linear(inter["target_embedding"], onehot, t)
    x = np.concatenate([ef, src[send], tgt[recv]], axis=1)
    tpw = mlp(inter["radial_mlp"], x, t)
    out[f"layer{k}.tp_weights"] = tpw
    dens = np.tanh(mlp(inter["density_mlp"], x, t) ** 2)
    if fc is not None:
        tpw = tpw * fc[:, None]
        dens = dens * fc[:, None]
    msg = tensor_product(inter["conv_tp"], hu[send], Y, t, weight=tpw)
    M = np.zeros((n, msg.shape[1]))
    np.add.at(M, recv, msg)
    D = np.zeros((n, 1))
    np.add.at(D, recv, dens)
    M = linear(inter["linear_1"], M, t) / (D * inter["density_beta"] + inter["density_alpha"])
    M = gate(inter["gate"], M + res)
    return sc, linear(inter["linear_2"], M, t)


def bias_readout(ro: Mapping[str, Any], x, t: Tensors) -> np.ndarray:
    """``linear_2(act(linear_mid(act(linear_1(x)))))[:, 0]`` (the last two with biases)."""
    z = activation(ro["activation"], linear(ro["linear_1"], x, t))
    z = activation(ro["activation"], linear(ro["linear_mid"], z, t))
    return linear(ro["linear_2"], z, t)[:, 0]

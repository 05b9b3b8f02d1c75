"""Describe the MACE modules of mace-torch's newer foundation models (MH-0/MH-1, OMOL).

``read_mace.py`` handles the classic blocks; this module adds, in the combinations mace-torch
builds them (``mace/modules/models.py::MACE.__init__``):

- ``RealAgnosticResidualNonLinearInteractionBlock`` (``blocks.py``): species embeddings of
  both edge ends concatenated to the radial basis, radial and density MLPs made of
  ``RadialMLP`` (Linear + LayerNorm + SiLU, with biases), a residual ``linear_res``, a
  learned density normalisation ``linear_1(M) / (beta D + alpha)``, a gate and ``linear_2``;
  its self-connection is a plain ``Linear`` (no species mixing).
- ``NonLinearBiasReadoutBlock``: ``linear_2(act(linear_mid(act(linear_1(h)))))``, the last two
  linears with biases on their scalar outputs; multi-head models are sliced to each head.
- ``embedding_specs`` (``GenericJointEmbedding``): per-structure features (total charge, spin,
  ...) embedded, projected and added to ``h0``; with ``use_embedding_readout`` a linear
  readout of that ``h0`` whose energy goes outside the scale (into E0).
- ``GatedEquivariantBlock`` (mace-torch 0.3.16's own gate) as the format's ``gate`` op.

Examples
--------
>>> # from potentials.read_mace_arch import describe_nonlinear_interaction
>>> # desc = describe_nonlinear_interaction(model.interactions[0], 0, sink)
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np
import torch

from .read_e3nn import (
    TensorSink,
    class_name,
    describe_act,
    describe_activation,
    describe_gate,
    describe_linear,
    describe_tensor_product,
    refuse,
)

#: Interaction blocks described here: (residual, density normalisation) as in read_mace.
NONLINEAR_INTERACTIONS = {"RealAgnosticResidualNonLinearInteractionBlock": (True, True)}
#: Readouts described here.
BIAS_READOUTS = ("NonLinearBiasReadoutBlock",)
#: Known mace-torch classes refused with the reason (the README table lists them).
REFUSED = {
    "RealAgnosticAttResidualInteractionBlock": "attention interaction block (not implemented)",
    "GeneralNonLinearBiasReadoutBlock": "gated readout of PolarMACE field features, not an "
    "energy readout of MACE/ScaleShiftMACE",
}


def describe_radial_mlp(net: Any, name: str, sink: TensorSink) -> Dict[str, Any]:
    """Describe a mace ``RadialMLP`` (``torch.nn.Linear`` -> ``LayerNorm`` -> ``SiLU`` per hidden
    layer, a plain ``Linear`` last) as an ``mlp`` op with ``layer_norm`` entries (FORMAT.md §4.3).

    Raises
    ------
    ValueError
        If the stack holds anything else (the message names the module class).
    """
    if type(net).__name__ != "RadialMLP":
        refuse(net, "expected mace RadialMLP")
    mods = list(net.net)
    layers: List[Dict[str, Any]] = []
    i = 0
    while i < len(mods):
        lin = mods[i]
        if not isinstance(lin, torch.nn.Linear):
            refuse(lin, "expected torch.nn.Linear in RadialMLP")
        k = len(layers)
        layer = {
            "weight": sink.add(f"{name}.layer{k}.weight", lin.weight.detach().T.contiguous()),
            "bias": (sink.add(f"{name}.layer{k}.bias", lin.bias) if lin.bias is not None else None),
            "weight_scale": 1.0,
            "layer_norm": None,
            "activation": None,
            "out_scale": 1.0,
        }
        i += 1
        if i < len(mods) and isinstance(mods[i], torch.nn.LayerNorm):
            ln = mods[i]
            if ln.weight is None or len(ln.normalized_shape) != 1:
                refuse(ln, "LayerNorm without elementwise affine or over several dimensions")
            layer["layer_norm"] = {
                "weight": sink.add(f"{name}.layer{k}.ln_weight", ln.weight),
                "bias": sink.add(f"{name}.layer{k}.ln_bias", ln.bias),
                "eps": float(ln.eps),
            }
            i += 1
        if i < len(mods) and not isinstance(mods[i], torch.nn.Linear):
            layer["activation"] = describe_act(mods[i])
            i += 1
        layers.append(layer)
    return {"op": "mlp", "layers": layers}


def describe_any_gate(gate: Any) -> Dict[str, Any]:
    """The ``gate`` op of an e3nn ``nn.Gate`` or mace-torch 0.3.16's ``GatedEquivariantBlock``.

    For the latter the gather indices are read from its slice table (``_s_start``, ``_g_start``,
    ``_gated_info``) and checked by evaluating the module against the description on random
    input, so what is written is what the module computes.
    """
    if type(gate).__name__ == "Gate":
        return describe_gate(gate)
    if type(gate).__name__ != "GatedEquivariantBlock":
        refuse(gate, "expected e3nn nn.Gate or mace GatedEquivariantBlock")
    if getattr(gate, "_layout_is_ir_mul", False):
        refuse(gate, "ir_mul (cuequivariance) layout; convert the model back to e3nn first")
    idx_s = list(range(gate._s_start, gate._s_start + gate._s_len))
    idx_g = list(range(gate._g_start, gate._g_start + gate._g_len))
    idx_v: List[int] = []
    g_expected = 0
    for gd_start, gd_len, _ir_dim, mul, g_off in gate._gated_info:
        if g_off != g_expected:
            refuse(gate, "gated blocks not in the order of their gates")
        idx_v.extend(range(gd_start, gd_start + gd_len))
        g_expected += mul

    def act(fn, cst):
        if fn is None:
            return None
        return {"name": describe_act(fn)["name"], "cst": float(cst)}

    a_s = act(gate._act_scalar, gate._scalar_cst)
    a_g = act(gate._act_gate, gate._gate_cst)
    desc = {
        "op": "gate",
        "irreps_in": str(gate.irreps_in),
        "irreps_out": str(gate.irreps_out),
        "irreps_scalars": str(gate.irreps_scalars),
        "irreps_gates": str(gate.irreps_gates),
        "irreps_gated": str(gate.irreps_gated),
        "index_scalars": idx_s,
        "index_gates": idx_g,
        "index_gated": idx_v,
        "act_scalars": [a_s for _ in gate.irreps_scalars],
        "act_gates": [a_g for _ in gate.irreps_gates],
    }
    from .numpy_reference import gate as np_gate

    x = torch.randn(3, gate.irreps_in.dim, dtype=torch.float64)
    with torch.no_grad():
        ref = gate(x).numpy()
    err = np.abs(np_gate(desc, x.numpy()) - ref).max() if ref.size else 0.0
    if err > 1e-12:
        refuse(gate, f"gate description does not reproduce the module (max error {err:.2e})")
    return desc


def describe_linear_bias(
    linear: Any,
    name: str,
    sink: TensorSink,
    in_sel: Optional[List[int]] = None,
    out_sel: Optional[List[int]] = None,
) -> Dict[str, Any]:
    """An e3nn ``o3.Linear`` with ``biases=True`` as a ``linear`` op plus ``bias`` (a tensor ref
    ``[dim(irreps_out)]``, zero on outputs without a bias; FORMAT.md §4.1). ``in_sel``/``out_sel``
    restrict single-block scalar inputs/outputs to some channels (multi-head slicing; path
    weights keep the module's fan-in)."""
    irreps_in, irreps_out = linear.irreps_in, linear.irreps_out
    for side, sel, irreps in (("input", in_sel, irreps_in), ("output", out_sel, irreps_out)):
        if sel is not None and (len(irreps) != 1 or irreps[0].ir.l != 0):
            refuse(linear, f"cannot slice the {side} {irreps} of a multi-head readout")
    out_slices = [0]
    for mul_ir in irreps_out:
        out_slices.append(out_slices[-1] + mul_ir.dim)
    bias_full = torch.zeros(irreps_out.dim, dtype=torch.float64)
    w_off = b_off = 0
    pieces, instructions = [], []
    for ins in linear.instructions:
        if ins.i_in == -1:
            n = int(np.prod(ins.path_shape))
            b = linear.bias.detach().double()[b_off : b_off + n]
            bias_full[out_slices[ins.i_out] : out_slices[ins.i_out + 1]] += ins.path_weight * b
            b_off += n
            continue
        mi, mo = ins.path_shape
        w = linear.weight.detach().double()[w_off : w_off + mi * mo].reshape(mi, mo)
        w_off += mi * mo
        if in_sel is not None:
            w = w[in_sel, :]
        if out_sel is not None:
            w = w[:, out_sel]
        if w.numel() == 0:
            continue
        instructions.append(
            {
                "i_in": int(ins.i_in),
                "i_out": int(ins.i_out),
                "path_shape": [int(w.shape[0]), int(w.shape[1])],
                "path_weight": float(ins.path_weight),
                "weight_offset": sum(int(p.numel()) for p in pieces),
            }
        )
        pieces.append(w.reshape(-1))
    if out_sel is not None:
        bias_full = bias_full[out_sel]
    weight = torch.cat(pieces) if pieces else None
    return {
        "op": "linear",
        "irreps_in": f"{len(in_sel)}x0e" if in_sel is not None else str(irreps_in),
        "irreps_out": f"{len(out_sel)}x0e" if out_sel is not None else str(irreps_out),
        "weight": sink.add(f"{name}.weight", weight) if weight is not None else None,
        "bias": sink.add(f"{name}.bias", bias_full),
        "instructions": instructions,
    }


def describe_nonlinear_interaction(inter: Any, t: int, sink: TensorSink) -> Dict[str, Any]:
    """Describe a ``RealAgnosticResidualNonLinearInteractionBlock`` (FORMAT.md §5, kind
    ``residual_nonlinear``)."""
    if hasattr(inter, "conv_fusion"):
        refuse(inter.conv_tp, "fused convolution (cuequivariance/OpenEquivariance)")
    p = f"interactions.{t}"
    return {
        "class": class_name(inter),
        "kind": "residual_nonlinear",
        "residual": True,
        "density_normalization": True,
        "irreps_node_in": str(inter.node_feats_irreps),
        "irreps_edge_attrs": str(inter.edge_attrs_irreps),
        "irreps_edge_feats": str(inter.edge_feats_irreps),
        "irreps_edge": str(inter.edge_irreps),
        "irreps_mid": str(inter.conv_tp.irreps_out),
        "irreps_target": str(inter.target_irreps),
        "irreps_hidden_out": str(inter.hidden_irreps),
        "irreps_nonlin": str(inter.irreps_nonlin),
        "source_embedding": describe_linear(
            inter.source_embedding, f"{p}.source_embedding.weight", sink
        ),
        "target_embedding": describe_linear(
            inter.target_embedding, f"{p}.target_embedding.weight", sink
        ),
        "linear_up": describe_linear(inter.linear_up, f"{p}.linear_up.weight", sink),
        "linear_res": describe_linear(inter.linear_res, f"{p}.linear_res.weight", sink),
        "radial_mlp": describe_radial_mlp(inter.conv_tp_weights, f"{p}.conv_tp_weights", sink),
        "conv_tp": describe_tensor_product(inter.conv_tp, f"{p}.conv_tp", sink, "external"),
        "linear_1": describe_linear(inter.linear_1, f"{p}.linear_1.weight", sink),
        "density_mlp": describe_radial_mlp(inter.density_fn, f"{p}.density_fn", sink),
        "density_alpha": float(inter.alpha.detach()),
        "density_beta": float(inter.beta.detach()),
        "gate": describe_any_gate(inter.equivariant_nonlin),
        "linear_2": describe_linear(inter.linear_2, f"{p}.linear_2.weight", sink),
        "skip": describe_linear(inter.skip_tp, f"{p}.skip_tp.weight", sink),
        "skip_tp_input": "node_features_in",
    }


def describe_bias_readout(
    readout: Any, t: int, layer: int, head: int, n_heads: int, sink: TensorSink
) -> Dict[str, Any]:
    """Describe a ``NonLinearBiasReadoutBlock``: type ``nonlinear_bias``,
    ``e = linear_2(act(linear_mid(act(linear_1(h)))))[0]`` for the exported head."""
    from .read_mace import _head_linear

    p = f"readouts.{t}"
    hidden = readout.linear_1.irreps_out
    sel = None
    if n_heads > 1:
        per = hidden.dim // n_heads
        sel = list(range(head * per, (head + 1) * per))
    act = describe_activation(readout.non_linearity)
    if sel is not None:
        if len(act["acts"]) != 1:
            refuse(readout.non_linearity, "multi-head readout with several activation blocks")
        act["irreps_in"] = act["irreps_out"] = f"{len(sel)}x0e"
    return {
        "layer": layer,
        "type": "nonlinear_bias",
        "linear_1": _head_linear(readout.linear_1, f"{p}.linear_1.weight", sink, out_sel=sel),
        "activation": act,
        "linear_mid": describe_linear_bias(
            readout.linear_mid, f"{p}.linear_mid", sink, in_sel=sel, out_sel=sel
        ),
        "linear_2": describe_linear_bias(
            readout.linear_2,
            f"{p}.linear_2",
            sink,
            in_sel=sel,
            out_sel=[head] if n_heads > 1 else None,
        ),
    }


def describe_embedding(model: Any, readout: Any, sink: TensorSink):
    """The per-structure embedding (``joint_embedding``) with the default head's ``readout``
    (already described, or None), or None."""
    if not hasattr(model, "joint_embedding"):
        return None
    je = model.joint_embedding
    if type(je).__name__ != "GenericJointEmbedding":
        refuse(je, "expected mace GenericJointEmbedding")
    features = []
    for name, spec in je.specs.items():
        if spec.get("per", "graph") != "graph":
            refuse(je, f"per-node embedding feature {name!r} (only per-graph features)")
        emb = je.embedders[name]
        if spec["type"] == "categorical":
            features.append(
                {
                    "name": name,
                    "type": "categorical",
                    "num_classes": int(spec["num_classes"]),
                    "offset": float(spec.get("offset", 0)),
                    "table": sink.add(f"embedding.{name}.table", emb.weight),
                }
            )
        elif spec["type"] == "continuous":
            mods = list(emb)
            if int(spec["in_dim"]) != 1:
                refuse(emb, f"continuous feature {name!r} with in_dim {spec['in_dim']} != 1")
            layers = []
            for k, lin in enumerate((mods[0], mods[2])):
                layers.append(
                    {
                        "weight": sink.add(f"embedding.{name}.layer{k}.weight", lin.weight.T),
                        "bias": (
                            sink.add(f"embedding.{name}.layer{k}.bias", lin.bias)
                            if lin.bias is not None
                            else None
                        ),
                        "weight_scale": 1.0,
                        "layer_norm": None,
                        "activation": describe_act(mods[1]) if k == 0 else None,
                        "out_scale": 1.0,
                    }
                )
            features.append(
                {"name": name, "type": "continuous", "mlp": {"op": "mlp", "layers": layers}}
            )
        else:
            refuse(je, f"embedding feature type {spec['type']!r}")
    proj_lin, proj_act = je.project[0], je.project[1]
    if proj_lin.bias is not None:
        refuse(proj_lin, "projection with bias")
    return {
        "features": features,
        "project": {
            "weight": sink.add("embedding.project.weight", proj_lin.weight.T),
            "activation": describe_act(proj_act),
        },
        "readout": readout,
        "readout_scaled": False,
    }

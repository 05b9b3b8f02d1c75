"""Read a NequIP model (nequip >= 0.7, tested with 0.19) into the Clebsch description.

Supported: models built by ``NequIPGNNModel`` / ``FullNequIPGNNModel`` /
``PresetNequIPGNNModel`` (eager ``GraphModel`` from a ``.ckpt`` or a packaged ``.nequip.zip``):
type embedding, Bessel edge encoding with polynomial cutoff, per-edge-type cutoffs,
``ConvNetLayer`` with gate nonlinearity (parity on or off), self-connections, resnet,
per-type ``avg_num_neighbors``, the per-atom readout MLP, ``PerTypeScaleShift`` and the ``ZBL``
pair potential. Everything else (``NormActivation``, Lennard-Jones, categorical graph-field
embeddings, accelerated tensor products, compiled ``.nequip.pt2``/``.nequip.pth``) is refused
with a ``ValueError`` naming the module class.

Run inside the nequip environment (``~/.cache/clebsch/venv-nequip``).

Examples
--------
>>> # model = load_nequip("model.nequip.zip")
>>> # model_json, tensors = export_nequip(model, source_path="model.nequip.zip")
"""

from __future__ import annotations

import copy as copy_module
import io
import pathlib
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from .read_e3nn import (
    TensorSink,
    class_name,
    describe_gate,
    describe_linear,
    describe_tensor_product,
    model_header,
    refuse,
)

#: Constants hard-coded in ``nequip.nn.pair_potential._ZBL.forward`` (LAMMPS pair_style zbl).
ZBL_PZBL = 0.23
ZBL_A0 = 0.46850
ZBL_C = [0.02817, 0.28022, 0.50986, 0.18175]
ZBL_D = [-0.20162, -0.40290, -0.94229, -3.19980]


def _ensure_global_state() -> None:
    from nequip.utils.global_state import global_state_initialized, set_global_state

    if not global_state_initialized():
        set_global_state(allow_tf32=False)


def load_nequip(path) -> torch.nn.Module:
    """Load a NequIP ``.ckpt`` or ``.nequip.zip`` as an eager ``GraphModel`` on the CPU.

    Raises
    ------
    ValueError
        If the file is missing or is a compiled model (``.nequip.pt2``/``.nequip.pth``).

    Examples
    --------
    >>> # model = load_nequip("run/best.ckpt")
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise ValueError(f"NequIP model file not found: {path}")
    name = path.name
    if name.endswith(".pt2") or name.endswith(".pth"):
        raise ValueError(
            f"{path} is a compiled NequIP model; export from the .ckpt or the "
            ".nequip.zip package instead"
        )
    _ensure_global_state()
    from nequip.model.saved_models.load_utils import load_saved_model

    model = load_saved_model(str(path), compile_mode="eager")
    return model.to("cpu").eval()


def _func(model) -> torch.nn.Module:
    """The SequentialGraphNetwork inside a GraphModel / ForceStressOutput."""
    for _, m in model.named_modules():
        if type(m).__name__ == "SequentialGraphNetwork":
            return m
    refuse(model, "no SequentialGraphNetwork found (not a NequIP GraphModel?)")


def _double_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A float64 copy. NequIP modules remember the build dtype in plain attributes
    (``_output_dtype``, ``model_dtype``) and cast to it, so those are widened too."""
    try:
        # packaged (torch.package) models deep-copy but do not pickle
        copy = copy_module.deepcopy(model)
    except Exception:  # noqa: BLE001  (fall back to a pickle round trip)
        buf = io.BytesIO()
        torch.save(model, buf)
        buf.seek(0)
        copy = torch.load(buf, map_location="cpu", weights_only=False)
    copy = copy.double().eval()
    for mod in copy.modules():
        for attr in ("_output_dtype", "model_dtype"):
            if getattr(mod, attr, None) == torch.float32:
                setattr(mod, attr, torch.float64)
    return copy


def _act_module(mod) -> Dict[str, Any]:
    name = type(mod).__name__
    table = {
        "SiLU": "silu",
        "Tanh": "tanh",
        "Sigmoid": "sigmoid",
        "ShiftedSoftplus": "ssp",
        "GELU": "gelu",
        "Mish": "mish",
    }
    if name == "GELU" and getattr(mod, "approximate", "none") != "none":
        refuse(mod, f"GELU(approximate={mod.approximate!r}); only the exact (erf) GELU")
    if name not in table:
        refuse(mod, f"activation {name} in a ScalarMLP; supported: {', '.join(table)}")
    return {"name": table[name], "cst": 1.0}


def describe_scalar_mlp(fn, name: str, sink: TensorSink) -> Dict[str, Any]:
    """Describe a ``nequip.nn.mlp.ScalarMLPFunction`` as an ``mlp`` op.

    Layer: ``z = (x @ W) * alpha (+ bias)``, then the following activation module if any
    (plain ``torch.nn`` activations: ``cst`` = 1).
    """
    if type(fn).__name__ != "ScalarMLPFunction":
        refuse(fn, "expected nequip ScalarMLPFunction")
    mlp = fn.mlp
    layers: List[Dict[str, Any]] = []
    if type(mlp).__name__ == "DeepLinearMLP":
        ws = list(mlp.weights)
        for k, w in enumerate(ws):
            layers.append(
                {
                    "weight": sink.add(f"{name}.{k}.weight", w),
                    "bias": None,
                    "weight_scale": float(mlp.alpha) if k == len(ws) - 1 else 1.0,
                    "activation": None,
                    "out_scale": 1.0,
                }
            )
        return {"op": "mlp", "layers": layers}
    mods = list(mlp)
    k = 0
    while k < len(mods):
        layer = mods[k]
        if type(layer).__name__ != "ScalarLinearLayer":
            refuse(layer, "expected ScalarLinearLayer in a ScalarMLP")
        entry = {
            "weight": sink.add(f"{name}.{k}.weight", layer.weight),
            "bias": (
                sink.add(f"{name}.{k}.bias", layer.bias.reshape(-1))
                if getattr(layer, "bias", None) is not None
                else None
            ),
            "weight_scale": float(layer.alpha),
            "activation": None,
            "out_scale": 1.0,
        }
        k += 1
        if k < len(mods) and type(mods[k]).__name__ != "ScalarLinearLayer":
            if type(mods[k]).__name__ != "Identity":
                entry["activation"] = _act_module(mods[k])
            k += 1
        layers.append(entry)
    return {"op": "mlp", "layers": layers}


def _type_names(model, func) -> List[str]:
    names = getattr(model, "type_names", None)
    if names is None:
        names = list(func.type_embed.type_names) if hasattr(func.type_embed, "type_names") else None
    if names is None:
        raise ValueError("cannot determine the model's type_names")
    return list(names)


def _species(type_names: List[str], zbl, chemical_species: Optional[List[str]]):
    from ase.data import atomic_numbers, chemical_symbols

    if chemical_species is not None:
        if len(chemical_species) != len(type_names):
            raise ValueError(
                f"chemical_species {chemical_species} does not match type_names {type_names}"
            )
        zs = [atomic_numbers.get(s, 0) for s in chemical_species]
    elif zbl is not None:
        zs = [int(round(float(z))) for z in zbl.atomic_numbers]
    else:
        zs = [atomic_numbers.get(t, 0) for t in type_names]
    return [
        {"index": i, "Z": z, "symbol": chemical_symbols[z] if z > 0 else t, "type_name": t}
        for i, (t, z) in enumerate(zip(type_names, zs))
    ]


def _conv_layer(layer, k: int, sink: TensorSink) -> Dict[str, Any]:
    if type(layer).__name__ != "ConvNetLayer":
        refuse(layer, "expected nequip ConvNetLayer")
    conv = layer.conv
    if type(conv).__name__ != "InteractionBlock":
        refuse(conv, "expected nequip InteractionBlock")
    nonlin = layer.equivariant_nonlin
    if type(nonlin).__name__ != "Gate":
        refuse(nonlin, "only the gate nonlinearity is supported")
    tps = conv.tp_scatter
    if type(tps).__name__ != "TensorProductScatter":
        refuse(tps, "accelerated tensor product (convert back to the e3nn TensorProductScatter)")
    p = f"layer{k}"
    norm = conv.avg_num_neighbors_norm
    norm_const = norm.norm_const.detach().double().reshape(-1)
    feature_in = str(conv.linear_1.irreps_in)
    return {
        "class": class_name(layer),
        "irreps_in": feature_in,
        "irreps_out": str(nonlin.irreps_out),
        "resnet": bool(layer.resnet),
        "sc": (
            describe_tensor_product(conv.sc, f"{p}.sc", sink, "internal")
            if conv.sc is not None
            else None
        ),
        "linear_1": describe_linear(conv.linear_1, f"{p}.linear_1.weight", sink),
        "norm_const": sink.add(f"{p}.norm_const", norm_const),
        "edge_mlp": describe_scalar_mlp(conv.edge_mlp, f"{p}.edge_mlp", sink),
        "tp": describe_tensor_product(tps.tp, f"{p}.tp", sink, "external"),
        "linear_2": describe_linear(conv.linear_2, f"{p}.linear_2.weight", sink),
        "gate": describe_gate(nonlin),
    }


def export_nequip(
    model: torch.nn.Module, source_path=None, chemical_species: Optional[List[str]] = None
) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
    """Describe a NequIP GraphModel: return ``(model_json, tensors)``.

    Parameters
    ----------
    model : torch.nn.Module
        A ``GraphModel`` as returned by :func:`load_nequip` or a model builder.
    source_path : optional, the file the model came from (for the recorded SHA-256).
    chemical_species : list of str, optional
        Element of each type, when the type names are not element symbols and the model has
        no ZBL term that records them.

    Raises
    ------
    ValueError
        If a module is unsupported (the message names its class).

    Examples
    --------
    >>> # model_json, tensors = export_nequip(load_nequip("cu.nequip.zip"))
    """
    model_dtype = str(getattr(model, "model_dtype", next(model.parameters()).dtype))
    model_dtype = model_dtype.replace("torch.", "")
    metadata = dict(getattr(model, "metadata", {}) or {})
    model = _double_copy(model)
    func = _func(model)
    sink = TensorSink()
    allowed = {
        "type_embed",
        "spharm",
        "edge_norm",
        "bessel_encode",
        "factor",
        "per_atom_energy_readout",
        "per_type_energy_scale_shift",
        "pair_potential",
        "total_energy_sum",
    }
    layer_names = []
    for name, mod in func.named_children():
        if name.startswith("layer") and name.endswith("_convnet"):
            layer_names.append(name)
        elif name not in allowed:
            refuse(mod, f"unexpected module {name!r} in the NequIP network")
    type_embed = func.type_embed
    if type(type_embed).__name__ != "NodeTypeEmbed":
        refuse(type_embed, "expected NodeTypeEmbed")
    if getattr(type_embed, "do_categorical_graph_field_embed", False):
        refuse(type_embed, "categorical graph-field embeddings")
    type_names = _type_names(model, func)
    n_types = len(type_names)
    zbl = getattr(func, "pair_potential", None)
    if zbl is not None and type(zbl).__name__ != "ZBL":
        refuse(zbl, "only the ZBL pair potential is supported")

    spharm = func.spharm.sh
    if not getattr(spharm, "normalize", True) or spharm.normalization != "component":
        refuse(spharm, "spherical harmonics must be normalize=True, normalization='component'")
    edge_norm = func.edge_norm
    r_max = float(edge_norm.r_max)
    recip = edge_norm._rmax_recip.detach().double().reshape(-1)
    if recip.numel() == 1:
        recip = recip.expand(n_types * n_types).clone()
    recip = recip.reshape(n_types, n_types)
    bessel = func.bessel_encode
    if type(bessel).__name__ != "BesselEdgeLengthEncoding":
        refuse(bessel, "expected BesselEdgeLengthEncoding")
    cutoff = bessel.cutoff
    if type(cutoff).__name__ != "PolynomialCutoff":
        refuse(cutoff, "only the polynomial cutoff is supported")
    factor = float(func.factor.factor)

    layers = [
        _conv_layer(getattr(func, name), k, sink)
        for k, name in enumerate(sorted(layer_names, key=lambda s: int(s[5:-8])))
    ]
    readout = func.per_atom_energy_readout
    if type(readout).__name__ != "ScalarMLP":
        refuse(readout, "expected ScalarMLP readout")
    ss = func.per_type_energy_scale_shift
    if type(ss).__name__ != "PerTypeScaleShift":
        refuse(ss, "expected PerTypeScaleShift")

    def per_type(t: torch.Tensor, has: bool, default: float) -> torch.Tensor:
        if not has or t.numel() == 0:
            return torch.full((n_types,), default, dtype=torch.float64)
        t = t.detach().double().reshape(-1)
        return t.expand(n_types).clone() if t.numel() == 1 else t

    species = _species(type_names, zbl, chemical_species)
    nequip_section = {
        "model_class": class_name(model),
        "num_layers": len(layers),
        "type_embedding": sink.add("type_embed.weight", type_embed.embed_module.weight),
        "radial": {
            "basis": "bessel_nequip",
            "num_basis": int(bessel.bessel_weights.numel()),
            "bessel_weights": sink.add("radial.bessel_weights", bessel.bessel_weights.reshape(-1)),
            "rmax_recip": sink.add("radial.rmax_recip", recip),
            "cutoff": {"type": "polynomial", "p": float(cutoff.p)},
            "factor": factor,
        },
        "layers": layers,
        "readout": describe_scalar_mlp(readout.mlp_module, "readout", sink),
        "scale_shift": {
            "scales": sink.add("scale_shift.scales", per_type(ss.scales, ss.has_scales, 1.0)),
            "shifts": sink.add("scale_shift.shifts", per_type(ss.shifts, ss.has_shifts, 0.0)),
        },
        "pair_potential": None,
    }
    if zbl is not None:
        nequip_section["pair_potential"] = {
            "type": "zbl_nequip",
            "atomic_numbers": [float(z) for z in zbl.atomic_numbers],
            "qqr2exesquare": float(zbl._qqr2exesquare),
            "pzbl": ZBL_PZBL,
            "a0": ZBL_A0,
            "c": ZBL_C,
            "d": ZBL_D,
            "cutoff_p": float(zbl.cutoff.p),
        }
    r_pairs = (1.0 / recip).tolist()
    model_json = model_header(
        "nequip",
        model,
        source_path,
        package="nequip",
        model_dtype=model_dtype,
        species=species,
        r_max=r_max,
        r_max_pairs=r_pairs,
        graph={
            "edge_vector": "neighbour_minus_centre",
            "message_direction": "neighbour_to_centre",
            "edge_condition": "0 < |r_neighbour + shift - r_centre| <= r_max_pairs[type_centre]"
            "[type_neighbour] (edges beyond contribute exactly zero)",
            "num_layers": len(layers),
        },
        sh_irreps=spharm.irreps_out,
        source_extra={"metadata": {str(k): str(v) for k, v in metadata.items()}},
    )
    model_json["nequip"] = nequip_section
    return model_json, sink.tensors


# ---------------------------------------------------------------------------------------------
# Golden data
# ---------------------------------------------------------------------------------------------


def evaluate_nequip(
    model: torch.nn.Module,
    atoms,
    species_index: List[int],
    intermediates: bool = True,
    copy: bool = True,
) -> Dict[str, np.ndarray]:
    """Evaluate a NequIP model in float64 on ``atoms`` (types given by ``species_index``).

    Keys: ``energy``, ``node_energy``, ``forces``, ``virial``, ``stress`` (periodic),
    ``edge_index0`` (centre), ``edge_index1`` (neighbour), ``edge_cell_shift``,
    ``edge_vectors`` and with ``intermediates``: ``edge_sh``, ``edge_embedding``, ``h0``,
    ``layer{k}.h`` (after gate/resnet), ``layer{k}.conv`` (before the gate),
    ``pair_energy``. ``copy=False`` skips the float64 copy (the caller passes one).
    """
    from nequip.data import AtomicDataDict, from_ase
    from nequip.data.transforms import NeighborListTransform

    if copy:
        model = _double_copy(model)
    func = _func(model)
    type_names = _type_names(model, func)
    data = from_ase(atoms)
    data[AtomicDataDict.ATOM_TYPE_KEY] = torch.as_tensor(species_index, dtype=torch.long)
    data.pop(AtomicDataDict.ATOMIC_NUMBERS_KEY, None)
    edge_norm = func.edge_norm
    r_max = float(edge_norm.r_max)
    per_edge = None
    if edge_norm._per_edge_type:
        mat = (1.0 / edge_norm._rmax_recip.double().reshape(len(type_names), -1)).tolist()
        per_edge = {
            a: {b: mat[i][j] for j, b in enumerate(type_names)} for i, a in enumerate(type_names)
        }
    data = NeighborListTransform(r_max=r_max, per_edge_type_cutoff=per_edge, type_names=type_names)(
        data
    )
    for key in (AtomicDataDict.POSITIONS_KEY, AtomicDataDict.CELL_KEY):
        if key in data:
            data[key] = data[key].double()
    captured: Dict[str, torch.Tensor] = {}
    hooks = []

    def keep(key, field):
        def hook(_m, _i, output):
            captured[key] = output[field].detach().clone()

        return hook

    if intermediates:
        hooks.append(
            func.spharm.register_forward_hook(keep("edge_sh", AtomicDataDict.EDGE_ATTRS_KEY))
        )
        hooks.append(
            func.factor.register_forward_hook(
                keep("edge_embedding", AtomicDataDict.EDGE_EMBEDDING_KEY)
            )
        )
        hooks.append(
            func.type_embed.register_forward_hook(keep("h0", AtomicDataDict.NODE_FEATURES_KEY))
        )
        names = sorted(
            [n for n, _ in func.named_children() if n.endswith("_convnet")],
            key=lambda s: int(s[5:-8]),
        )
        for k, name in enumerate(names):
            layer = getattr(func, name)
            hooks.append(
                layer.conv.register_forward_hook(
                    keep(f"layer{k}.conv", AtomicDataDict.NODE_FEATURES_KEY)
                )
            )
            hooks.append(
                layer.register_forward_hook(keep(f"layer{k}.h", AtomicDataDict.NODE_FEATURES_KEY))
            )
        hooks.append(
            func.per_type_energy_scale_shift.register_forward_hook(
                keep("node_energy_before_pair", AtomicDataDict.PER_ATOM_ENERGY_KEY)
            )
        )
    try:
        out = model(dict(data))
    finally:
        for h in hooks:
            h.remove()
    res = {
        "energy": out[AtomicDataDict.TOTAL_ENERGY_KEY].detach().reshape(1),
        "node_energy": out[AtomicDataDict.PER_ATOM_ENERGY_KEY].detach().reshape(-1),
        "forces": out[AtomicDataDict.FORCE_KEY].detach(),
    }
    if AtomicDataDict.VIRIAL_KEY in out:
        res["virial"] = out[AtomicDataDict.VIRIAL_KEY].detach().reshape(3, 3)
    if AtomicDataDict.STRESS_KEY in out and bool(np.all(atoms.pbc)):
        res["stress"] = out[AtomicDataDict.STRESS_KEY].detach().reshape(3, 3)
    ei = data[AtomicDataDict.EDGE_INDEX_KEY]
    res["edge_index0"] = ei[0]
    res["edge_index1"] = ei[1]
    shift = data.get(AtomicDataDict.EDGE_CELL_SHIFT_KEY)
    if shift is None:
        shift = torch.zeros(ei.shape[1], 3)
    res["edge_cell_shift"] = shift.round().long()
    pos = data[AtomicDataDict.POSITIONS_KEY]
    cell = data.get(AtomicDataDict.CELL_KEY)
    cellm = cell.reshape(3, 3) if cell is not None else torch.zeros(3, 3, dtype=torch.float64)
    res["edge_vectors"] = pos[ei[1]] - pos[ei[0]] + shift.double() @ cellm
    if intermediates:
        res.update(captured)
        if "node_energy_before_pair" in captured:
            before = captured["node_energy_before_pair"].reshape(-1)
            res["pair_energy"] = res["node_energy"] - before
            del res["node_energy_before_pair"]
    return {k: v.detach().cpu().numpy() for k, v in res.items()}


NEQUIP_GOLDEN_NOTES = {
    "energy": "[1] total energy, eV",
    "node_energy": "[N] per-atom energy after scale/shift and pair potential",
    "forces": "[N,3] -dE/dr, eV/Angstrom",
    "virial": "[3,3] NequIP 'virial' = -dE/d(strain), eV",
    "stress": "[3,3] NequIP 'stress' = -virial/volume, eV/Angstrom^3 (fully periodic only)",
    "edge_centre": "[E] edge_index[0]",
    "edge_neighbour": "[E] edge_index[1]",
    "edge_shift": "[E,3] integer image of the neighbour: r_neighbour + shift @ cell",
    "edge_vectors": "[E,3] r_neighbour_image - r_centre (NequIP convention)",
    "edge_sh": "[E,(lmax+1)^2] spherical harmonics of edge_vectors",
    "edge_embedding": "[E,num_basis] Bessel x cutoff x factor",
    "h0": "[N,E] type embedding (initial node features and node attributes)",
    "layer{k}.conv": "[N,dim] InteractionBlock output (linear_2 + sc), before the gate",
    "layer{k}.h": "[N,dim] node features after the gate (and resnet)",
    "pair_energy": "[N] ZBL energy per atom (after scale/shift, added last)",
}


def golden_nequip(model: torch.nn.Module, model_json: Dict[str, Any]):
    """Golden data for an exported NequIP model: ``(golden_json, tensors)``.

    Examples
    --------
    >>> # gj, gt = golden_nequip(model, model_json); write.write_golden(path, gj, gt)
    """
    from .golden import build_golden

    zs = [s["Z"] for s in model_json["species"]]

    def evaluate(atoms):
        idx = [zs.index(int(z)) for z in atoms.numbers]
        return evaluate_nequip(model, atoms, idx)

    def convert(out):
        return (
            out["edge_index0"].astype(np.int64),
            out["edge_index1"].astype(np.int64),
            out["edge_cell_shift"].astype(np.int64),
        )

    if any(z == 0 for z in zs):
        raise ValueError("golden data needs the element of every type; pass chemical_species")
    return build_golden(model_json, evaluate, convert, NEQUIP_GOLDEN_NOTES)

"""Read a MACE model (mace-torch 0.3.x, e3nn backend) into the Clebsch description.

Supported: ``MACE`` and ``ScaleShiftMACE``; interaction blocks ``RealAgnosticInteractionBlock``,
``RealAgnosticResidualInteractionBlock``, ``RealAgnosticDensityInteractionBlock``,
``RealAgnosticDensityResidualInteractionBlock``; any correlation, ``max_ell`` and hidden
irreps; Bessel radial basis with the polynomial cutoff (``apply_cutoff`` on or off); the
``AgnesiTransform`` and ``SoftTransform`` distance transforms; ``ZBLBasis`` pair repulsion;
linear and non-linear readouts; multi-head models (every head is exported: FORMAT.md §5
``heads``; the engines evaluate the one ``pair_style clebsch head NAME`` chooses); the
species-agnostic product. Everything else is refused with a ``ValueError`` naming the module class.

Run inside the mace environment (``~/.cache/clebsch/venv-mace``).

Examples
--------
>>> # model = load_mace("model.model")
>>> # model_json, tensors = export_mace(model, head=None, source_path="model.model")
>>> # write.write_model("model.safetensors", model_json, tensors)
"""

from __future__ import annotations

import io
import pathlib
from typing import Any, Dict, List, Optional, Tuple

import mace  # noqa: F401  (before e3nn 0.4.4: sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD)
import numpy as np
import torch

from .read_e3nn import (
    TensorSink,
    class_name,
    describe_activation,
    describe_fc_net,
    describe_linear,
    describe_tensor_product,
    model_header,
    refuse,
)
from .read_mace_arch import (
    BIAS_READOUTS,
    NONLINEAR_INTERACTIONS,
    REFUSED,
    describe_bias_readout,
    describe_embedding,
    describe_nonlinear_interaction,
)

SUPPORTED_MODELS = ("MACE", "ScaleShiftMACE")
SUPPORTED_READOUTS = ("LinearReadoutBlock", "NonLinearReadoutBlock", *BIAS_READOUTS)
RADIAL_BASES = ("BesselBasis", "GaussianBasis", "ChebychevBasis")
SUPPORTED_RADIAL = (
    *RADIAL_BASES,
    "PolynomialCutoff",
    "AgnesiTransform",
    "SoftTransform",
    "ZBLBasis",
)
SUPPORTED_OTHER = ("GenericJointEmbedding", "GatedEquivariantBlock", "RadialMLP")
SUPPORTED_INTERACTIONS = {
    "RealAgnosticInteractionBlock": (False, False),
    "RealAgnosticResidualInteractionBlock": (True, False),
    "RealAgnosticDensityInteractionBlock": (False, True),
    "RealAgnosticDensityResidualInteractionBlock": (True, True),
}

#: Constants hard-coded in ``mace.modules.radial.ZBLBasis.forward``.
ZBL_EXPONENTS = [3.2, 0.9423, 0.4028, 0.2016]
ZBL_COULOMB = 14.3996
ZBL_BOHR = 0.529


def load_mace(path) -> torch.nn.Module:
    """Load a MACE ``.model`` file (a pickled ``torch.nn.Module``) on the CPU.

    Parameters
    ----------
    path : str or pathlib.Path

    Raises
    ------
    ValueError
        If the file does not exist or does not hold a ``torch.nn.Module``.

    Examples
    --------
    >>> # model = load_mace("MACE-small.model")
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise ValueError(f"MACE model file not found: {path}")
    model = torch.load(str(path), map_location="cpu", weights_only=False)
    if not isinstance(model, torch.nn.Module):
        raise ValueError(
            f"{path} holds a {type(model).__name__}, not a torch.nn.Module "
            "(TorchScript *-lammps.pt files and state dicts are not supported; "
            "export from the .model file)"
        )
    return model


def _double_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A float64 copy of the model, through a pickle round trip.

    ``copy.deepcopy`` fails on MACE models that hold an ``EmptyParam`` (a zeroed
    symmetric-contraction weight); pickling turns it into a plain zero Parameter.
    """
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    return torch.load(buf, map_location="cpu", weights_only=False).double().eval()


def _heads(model) -> List[str]:
    return list(getattr(model, "heads", None) or ["Default"])


def default_head(model) -> Optional[str]:
    """The head mace-torch's own calculator evaluates when none is named, or None.

    ``MACECalculator``: the only head of a single-head model, else the head named ``default``
    (any case); a multi-head model without one has no default.

    Examples
    --------
    >>> # default_head(model)
    >>> # 'Default'
    """
    heads = _heads(model)
    if len(heads) == 1:
        return heads[0]
    named = [h for h in heads if h.lower() == "default"]
    return named[0] if named else None


def select_head(model, head: Optional[str]) -> Tuple[int, str]:
    """Resolve a head name to its index; None is the model's default head (:func:`default_head`).

    Raises
    ------
    ValueError
        If ``head`` is not one of the model's heads, or is None and the model has several heads
        none of which is named ``default``.

    Examples
    --------
    >>> # select_head(model, "mp_pbe")
    >>> # (1, 'mp_pbe')
    """
    heads = _heads(model)
    if head is None:
        head = default_head(model)
        if head is None:
            raise ValueError(
                f"model has {len(heads)} heads {heads} and none is named 'default'; "
                "pick the default head with --head"
            )
        return heads.index(head), head
    if head not in heads:
        raise ValueError(f"head {head!r} is not one of the model's heads {heads}")
    return heads.index(head), head


class _PrefixedSink:
    """A TensorSink view that prefixes every tensor name (the tensors of one head)."""

    def __init__(self, sink: TensorSink, prefix: str) -> None:
        self.sink, self.prefix = sink, prefix

    def add(self, name: str, value) -> Dict[str, Any]:
        return self.sink.add(self.prefix + name, value)


def _check_model(model) -> None:
    name = type(model).__name__
    if name not in SUPPORTED_MODELS:
        refuse(model, f"model class {name}; supported: {', '.join(SUPPORTED_MODELS)}")
    for attr, why in (("les_readouts", "LES long-range readouts"),):
        if hasattr(model, attr):
            refuse(getattr(model, attr), why)
    for n, m in model.named_modules():
        mod = type(m).__module__
        if mod.startswith("cuequivariance") or mod.startswith("openequivariance"):
            refuse(
                m,
                f"accelerated module at {n!r}; convert the model back to e3nn with "
                "mace/cli/convert_cueq_e3nn.py or convert_oeq_e3nn.py",
            )


def _radial(model, sink: TensorSink, species_z: List[int]) -> Dict[str, Any]:
    rad = model.radial_embedding
    basis = rad.bessel_fn
    if type(basis).__name__ not in RADIAL_BASES:
        refuse(basis, "radial basis; supported: " + ", ".join(RADIAL_BASES))
    cutoff = rad.cutoff_fn
    if type(cutoff).__name__ != "PolynomialCutoff":
        refuse(cutoff, "only the polynomial cutoff is supported")
    out = {
        "r_max": float(model.r_max),
        "cutoff": {"type": "polynomial", "p": int(cutoff.p), "r_max": float(cutoff.r_max)},
        "apply_cutoff": bool(getattr(rad, "apply_cutoff", True)),
        "distance_transform": None,
    }
    if type(basis).__name__ == "BesselBasis":
        out["basis"] = "bessel"
        out["num_basis"] = int(basis.bessel_weights.numel())
        out["bessel_weights"] = sink.add("radial.bessel_weights", basis.bessel_weights)
        out["prefactor"] = float(basis.prefactor)
        out["r_max"] = float(basis.r_max)
    elif type(basis).__name__ == "GaussianBasis":
        out["basis"] = "gaussian"
        out["num_basis"] = int(basis.gaussian_weights.numel())
        out["gaussian_centres"] = sink.add("radial.gaussian_centres", basis.gaussian_weights)
        out["gaussian_coeff"] = float(basis.coeff)
    else:
        out["basis"] = "chebyshev"
        out["num_basis"] = int(basis.num_basis)
    if hasattr(rad, "distance_transform"):
        dt = rad.distance_transform
        cov = [float(dt.covalent_radii[z]) for z in species_z]
        if type(dt).__name__ == "AgnesiTransform":
            out["distance_transform"] = {
                "type": "agnesi",
                "q": float(dt.q),
                "p": float(dt.p),
                "a": float(dt.a),
                "covalent_radii": cov,
            }
        elif type(dt).__name__ == "SoftTransform":
            out["distance_transform"] = {
                "type": "soft",
                "alpha": float(dt.alpha),
                "covalent_radii": cov,
            }
        else:
            refuse(dt, "unknown distance transform")
    return out


def _pair_repulsion(model, species_z: List[int]) -> Optional[Dict[str, Any]]:
    if not hasattr(model, "pair_repulsion"):
        return None
    zbl = model.pair_repulsion_fn
    if type(zbl).__name__ != "ZBLBasis":
        refuse(zbl, "only ZBLBasis pair repulsion is supported")
    return {
        "type": "zbl_mace",
        "p": int(zbl.p),
        "a_exp": float(zbl.a_exp),
        "a_prefactor": float(zbl.a_prefactor),
        "c": [float(c) for c in zbl.c],
        "exponents": ZBL_EXPONENTS,
        "coulomb": ZBL_COULOMB,
        "bohr": ZBL_BOHR,
        "atomic_numbers": species_z,
        "covalent_radii": [float(zbl.covalent_radii[z]) for z in species_z],
    }


def _interaction(inter, t: int, sink: TensorSink) -> Dict[str, Any]:
    name = type(inter).__name__
    if name in NONLINEAR_INTERACTIONS:
        return describe_nonlinear_interaction(inter, t, sink)
    if name not in SUPPORTED_INTERACTIONS:
        supported = ", ".join([*SUPPORTED_INTERACTIONS, *NONLINEAR_INTERACTIONS])
        why = f" ({REFUSED[name]})" if name in REFUSED else ""
        refuse(inter, f"interaction block {name}{why}; supported: {supported}")
    residual, density = SUPPORTED_INTERACTIONS[name]
    if hasattr(inter, "conv_fusion"):
        refuse(inter.conv_tp, "fused convolution (cuequivariance/OpenEquivariance)")
    p = f"interactions.{t}"
    out = {
        "class": class_name(inter),
        "residual": residual,
        "density_normalization": density,
        "irreps_node_in": str(inter.node_feats_irreps),
        "irreps_edge_attrs": str(inter.edge_attrs_irreps),
        "irreps_edge_feats": str(inter.edge_feats_irreps),
        "irreps_edge": str(inter.edge_irreps),
        "irreps_mid": str(inter.conv_tp.irreps_out),
        "irreps_target": str(inter.target_irreps),
        "irreps_hidden_out": str(inter.hidden_irreps),
        "linear_up": describe_linear(inter.linear_up, f"{p}.linear_up.weight", sink),
        "radial_mlp": describe_fc_net(inter.conv_tp_weights, f"{p}.conv_tp_weights", sink),
        "conv_tp": describe_tensor_product(inter.conv_tp, f"{p}.conv_tp", sink, "external"),
        "linear": describe_linear(inter.linear, f"{p}.linear.weight", sink),
        "skip_tp": describe_tensor_product(inter.skip_tp, f"{p}.skip_tp", sink, "internal"),
        "skip_tp_input": "node_features_in" if residual else "message",
    }
    if type(inter.skip_tp).__name__ != "FullyConnectedTensorProduct":
        refuse(inter.skip_tp, "expected an e3nn FullyConnectedTensorProduct as skip_tp")
    if density:
        out["message_normalization"] = {
            "type": "density",
            "density_mlp": describe_fc_net(inter.density_fn, f"{p}.density_fn", sink),
        }
    else:
        out["message_normalization"] = {
            "type": "avg_num_neighbors",
            "avg_num_neighbors": float(inter.avg_num_neighbors),
        }
    return out


def _product(prod, inter, t: int, n_species: int, sink: TensorSink) -> Dict[str, Any]:
    if type(prod).__name__ != "EquivariantProductBasisBlock":
        refuse(prod, "expected EquivariantProductBasisBlock")
    sc = prod.symmetric_contractions
    if type(sc).__name__ != "SymmetricContraction":
        refuse(sc, "expected mace SymmetricContraction (e3nn backend)")
    agnostic = bool(getattr(prod, "use_agnostic_product", False))
    p = f"products.{t}"
    irreps_in = sc.irreps_in
    muls = {mul for mul, _ in irreps_in}
    if len(muls) != 1:
        raise ValueError(f"{p}: product input {irreps_in} has unequal multiplicities")
    num_features = muls.pop()
    dim_a = sum(ir.dim for _, ir in irreps_in)
    contractions = []
    for c_idx, (contraction, mul_ir) in enumerate(zip(sc.contractions, sc.irreps_out)):
        if type(contraction).__name__ != "Contraction":
            refuse(contraction, "expected mace Contraction")
        L = mul_ir.ir.l
        corr = int(contraction.correlation)
        weights_by_nu = {corr: contraction.weights_max}
        # self.weights[j] holds nu = correlation - 1 - j (built in reverse order)
        for j, w in enumerate(contraction.weights):
            weights_by_nu[corr - 1 - j] = w
        terms = []
        for nu in range(1, corr + 1):
            U = dict(contraction.named_buffers())[f"U_matrix_{nu}"].detach().double()
            if L == 0:
                U = U.unsqueeze(0)
            expected = [2 * L + 1] + [dim_a] * nu
            if list(U.shape[:-1]) != expected:
                raise ValueError(
                    f"{p}.contractions.{c_idx}: U_matrix_{nu} has shape "
                    f"{list(U.shape)}, expected {expected}+[K]"
                )
            W = weights_by_nu[nu].detach().double()
            if W.shape[0] == 1 and n_species > 1 and agnostic:
                W = W.expand(n_species, -1, -1).contiguous()
            if W.shape[0] != n_species or W.shape[1] != U.shape[-1] or W.shape[2] != num_features:
                raise ValueError(
                    f"{p}.contractions.{c_idx}: weights for nu={nu} have shape "
                    f"{list(W.shape)}, expected [{n_species}, {U.shape[-1]}, "
                    f"{num_features}]"
                )
            base = f"{p}.contractions.{c_idx}.nu{nu}"
            terms.append({"nu": nu, "U": sink.add(f"{base}.U", U), "W": sink.add(f"{base}.W", W)})
        contractions.append(
            {
                "irrep_out": str(mul_ir.ir),
                "L": L,
                "mul": int(mul_ir.mul),
                "correlation": corr,
                "terms": terms,
            }
        )
    residual = {**SUPPORTED_INTERACTIONS, **NONLINEAR_INTERACTIONS}[type(inter).__name__][0]
    return {
        "irreps_in": str(irreps_in),
        "irreps_out": str(sc.irreps_out),
        "num_features": int(num_features),
        "dim_a": int(dim_a),
        "species_agnostic_weights_tiled": agnostic,
        "contractions": contractions,
        "linear": describe_linear(prod.linear, f"{p}.linear.weight", sink),
        "add_skip": bool(prod.use_sc) and residual,
    }


def _sliced_weight(linear, in_sel=None, out_sel=None) -> Tuple[torch.Tensor, Dict]:
    """Slice the flat weight of a Linear along single-block input/output sides."""
    pieces, shapes = [], []
    offset = 0
    for ins in linear.instructions:
        mi, mo = ins.path_shape
        w = linear.weight[offset : offset + mi * mo].reshape(mi, mo)
        offset += mi * mo
        if in_sel is not None:
            w = w[in_sel, :]
        if out_sel is not None:
            w = w[:, out_sel]
        pieces.append(w.reshape(-1))
        shapes.append(tuple(w.shape))
    return torch.cat(pieces), shapes


def _head_linear(linear, name: str, sink: TensorSink, in_sel=None, out_sel=None):
    """Describe a Linear restricted to some channels of its (single-block) input/output."""
    if in_sel is None and out_sel is None:
        return describe_linear(linear, name, sink)
    for side, sel, irreps in (
        ("input", in_sel, linear.irreps_in),
        ("output", out_sel, linear.irreps_out),
    ):
        if sel is not None and (len(irreps) != 1 or irreps[0].ir.l != 0):
            refuse(linear, f"cannot slice the {side} {irreps} of a multi-head readout")
    weight, shapes = _sliced_weight(linear, in_sel, out_sel)
    desc = describe_linear(linear, name, sink, weight=weight, path_shapes=shapes)
    if in_sel is not None:
        desc["irreps_in"] = f"{len(in_sel)}x0e"
    if out_sel is not None:
        desc["irreps_out"] = f"{len(out_sel)}x0e"
    return desc


def _readout(
    readout, t: int, layer: int, head: int, n_heads: int, sink: TensorSink
) -> Dict[str, Any]:
    p = f"readouts.{t}"
    name = type(readout).__name__
    if name == "LinearReadoutBlock":
        out_sel = [head] if n_heads > 1 else None
        return {
            "layer": layer,
            "type": "linear",
            "linear": _head_linear(readout.linear, f"{p}.linear.weight", sink, out_sel=out_sel),
        }
    if name == "NonLinearReadoutBlock":
        hidden = readout.linear_1.irreps_out
        if n_heads > 1:
            dim = hidden.dim
            per = dim // n_heads
            sel = list(range(head * per, (head + 1) * per))
        else:
            sel = None
        act = describe_activation(readout.non_linearity)
        if sel is not None:
            if len(act["acts"]) != 1:
                refuse(readout.non_linearity, "multi-head readout with several activation blocks")
            act["irreps_in"] = act["irreps_out"] = f"{len(sel)}x0e"
        return {
            "layer": layer,
            "type": "nonlinear",
            "linear_1": _head_linear(readout.linear_1, f"{p}.linear_1.weight", sink, out_sel=sel),
            "activation": act,
            "linear_2": _head_linear(
                readout.linear_2,
                f"{p}.linear_2.weight",
                sink,
                in_sel=sel,
                out_sel=[head] if n_heads > 1 else None,
            ),
        }
    if name in BIAS_READOUTS:
        return describe_bias_readout(readout, t, layer, head, n_heads, sink)
    why = f" ({REFUSED[name]})" if name in REFUSED else ""
    refuse(
        readout,
        f"readout block {name}{why}; supported: " + ", ".join(SUPPORTED_READOUTS),
    )


def _head_section(model, head: int, n_heads: int, n_layers: int, sink) -> Dict[str, Any]:
    """What differs between heads: the readouts sliced to ``head``, its E0, scale and shift, and
    its embedding readout (FORMAT.md §5 ``heads``)."""
    n_readouts = len(model.readouts)
    readouts = []
    for r, readout in enumerate(model.readouts):
        layer = n_layers - 1 if n_readouts == 1 else r
        readouts.append(_readout(readout, r, layer, head, n_heads, sink))
    e0 = torch.atleast_2d(model.atomic_energies_fn.atomic_energies.detach().double())
    e0_row = e0[0] if e0.shape[0] != n_heads and e0.shape[0] == 1 else e0[head]
    if type(model).__name__ == "ScaleShiftMACE":
        scale = float(torch.atleast_1d(model.scale_shift.scale)[head])
        shift = float(torch.atleast_1d(model.scale_shift.shift)[head])
    else:
        scale, shift = 1.0, 0.0
    section = {
        "readouts": readouts,
        "atomic_energies": sink.add("atomic_energies", e0_row),
        "scale_shift": {"scale": scale, "shift": shift},
    }
    if hasattr(model, "joint_embedding"):
        section["embedding_readout"] = None
        if hasattr(model, "embedding_readout"):
            section["embedding_readout"] = _head_linear(
                model.embedding_readout.linear,
                "embedding_readout.linear.weight",
                sink,
                out_sel=[head] if n_heads > 1 else None,
            )
    return section


def export_mace(
    model: torch.nn.Module, head: Optional[str] = None, source_path=None
) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
    """Describe a MACE model: return ``(model_json, tensors)`` for :func:`write.write_model`.

    Parameters
    ----------
    model : torch.nn.Module
        A ``MACE`` or ``ScaleShiftMACE`` (e3nn backend), any dtype; it is not modified.
    head : str, optional
        The default head (every head is exported; this one is evaluated when ``pair_style``
        names none). None: mace-torch's own default (:func:`default_head`).
    source_path : str or pathlib.Path, optional
        The ``.model`` file, for the recorded SHA-256; without it the hash is taken over the
        parameters and buffers.

    Raises
    ------
    ValueError
        If anything in the model is unsupported (the message names the module class), or
        ``head`` is not a head of the model, or is None and the model has no default head.

    Examples
    --------
    >>> # model_json, tensors = export_mace(load_mace("cu.model"))
    >>> # model_json["mace"]["interactions"][0]["class"]
    >>> # 'mace.modules.blocks.RealAgnosticResidualInteractionBlock'
    """
    _check_model(model)
    model_dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    model = _double_copy(model)
    head_index, head_name = select_head(model, head)
    heads = _heads(model)
    n_heads = len(heads)
    sink = TensorSink()

    species_z = [int(z) for z in model.atomic_numbers]
    n_species = len(species_z)
    from ase.data import chemical_symbols

    r_max = float(model.r_max)
    sh = model.spherical_harmonics
    if getattr(sh, "normalization", "component") != "component" or not getattr(
        sh, "normalize", True
    ):
        refuse(sh, "spherical harmonics must be normalize=True, normalization='component'")

    emb = model.node_embedding.linear
    interactions = [_interaction(inter, t, sink) for t, inter in enumerate(model.interactions)]
    products = [
        _product(prod, inter, t, n_species, sink)
        for t, (prod, inter) in enumerate(zip(model.products, model.interactions))
    ]
    n_layers = len(interactions)
    # Every head, the default first in the sink so that its tensors keep the names of a
    # single-head export; the top-level fields repeat the default head's (a 1.0 reader
    # evaluates those).
    order = [head_index] + [h for h in range(n_heads) if h != head_index]
    sections = {}
    for h in order:
        hsink = sink if h == head_index else _PrefixedSink(sink, f"heads.{heads[h]}.")
        sections[h] = _head_section(model, h, n_heads, n_layers, hsink)
    default = sections[head_index]
    mace_section = {
        "model_class": class_name(model),
        "num_interactions": n_layers,
        "node_embedding": describe_linear(emb, "node_embedding.linear.weight", sink),
        "radial": _radial(model, sink, species_z),
        "pair_repulsion": _pair_repulsion(model, species_z),
        "interactions": interactions,
        "products": products,
        "readouts": default["readouts"],
        "atomic_energies": default["atomic_energies"],
        "scale_shift": default["scale_shift"],
        "heads": [{"name": heads[h], **sections[h]} for h in range(n_heads)],
        "default_head": head_name,
    }
    embedding = describe_embedding(model, default.get("embedding_readout"), sink)
    if embedding is not None:
        mace_section["embedding"] = embedding
    model_json = model_header(
        "mace",
        model,
        source_path,
        package="mace-torch",
        model_dtype=model_dtype,
        species=[
            {"index": i, "Z": z, "symbol": chemical_symbols[z]} for i, z in enumerate(species_z)
        ],
        r_max=r_max,
        r_max_pairs=[[r_max] * n_species for _ in range(n_species)],
        graph={
            "edge_vector": "centre_minus_neighbour",
            "message_direction": "neighbour_to_centre",
            "edge_condition": "0 < |r_centre - r_neighbour + shift| < r_max (all periodic "
            "images, excluding only the atom itself with zero shift)",
            "num_layers": n_layers,
        },
        sh_irreps=sh.irreps_out,
        heads=heads,
        head=head_name,
    )
    model_json["mace"] = mace_section
    return model_json, sink.tensors


# ---------------------------------------------------------------------------------------------
# Golden data
# ---------------------------------------------------------------------------------------------


def _batch_for(model, atoms, head_name: str, r_max: float, structure_inputs=None):
    from mace import data as mdata
    from mace.tools import torch_geometric, utils

    z_table = utils.AtomicNumberTable([int(z) for z in model.atomic_numbers])
    config = mdata.config_from_atoms(atoms)
    config.head = head_name
    if structure_inputs:
        # set directly: the default KeySpecification reads no info keys from atoms.info
        config.properties.update({k: float(v) for k, v in structure_inputs.items()})
    atomic = mdata.AtomicData.from_config(
        config, z_table=z_table, cutoff=r_max, heads=_heads(model)
    )
    loader = torch_geometric.dataloader.DataLoader([atomic], batch_size=1, shuffle=False)
    return next(iter(loader)).to_dict()


def evaluate_mace(
    model: torch.nn.Module,
    atoms,
    head: Optional[str] = None,
    intermediates: bool = True,
    structure_inputs: Optional[Dict[str, float]] = None,
) -> Dict[str, np.ndarray]:
    """Evaluate a MACE model in float64 on an ``ase.Atoms``; return energies, forces, virial
    and (optionally) per-layer intermediates as NumPy arrays.

    Keys: ``energy`` [1], ``node_energy`` [N], ``forces`` [N,3], ``virial`` [3,3] and
    ``stress`` [3,3] (periodic cells only), ``edge_sender``/``edge_receiver`` [E],
    ``edge_vectors`` [E,3], and with ``intermediates``: ``edge_sh``, ``edge_radial``,
    ``h0``, ``layer{t}.tp_weights``, ``layer{t}.A``, ``layer{t}.sc``, ``layer{t}.B``,
    ``layer{t}.h``, ``readout{r}``, ``pair_energy``.

    Examples
    --------
    >>> # out = evaluate_mace(model, ase.build.bulk("Cu", cubic=True))
    """
    old_default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        model = _double_copy(model)
        head_index, head_name = select_head(model, head)
        r_max = float(model.r_max)
        batch = _batch_for(model, atoms, head_name, r_max, structure_inputs)
        captured: Dict[str, torch.Tensor] = {}
        hooks = []

        def keep(key, fn=lambda o: o):
            def hook(_m, _i, output):
                captured[key] = fn(output).detach().clone()

            return hook

        if intermediates:
            hooks.append(model.spherical_harmonics.register_forward_hook(keep("edge_sh")))
            hooks.append(
                model.radial_embedding.register_forward_hook(keep("edge_radial", lambda o: o[0]))
            )
            hooks.append(model.node_embedding.register_forward_hook(keep("h0")))
            if hasattr(model, "pair_repulsion"):
                hooks.append(model.pair_repulsion_fn.register_forward_hook(keep("pair_energy")))
            for t, (inter, prod) in enumerate(zip(model.interactions, model.products)):
                hooks.append(
                    inter.conv_tp_weights.register_forward_hook(keep(f"layer{t}.tp_weights"))
                )
                hooks.append(inter.register_forward_hook(keep(f"layer{t}.A", lambda o: o[0])))
                residual_classes = {**SUPPORTED_INTERACTIONS, **NONLINEAR_INTERACTIONS}
                if residual_classes.get(type(inter).__name__, (False,))[0]:
                    hooks.append(inter.register_forward_hook(keep(f"layer{t}.sc", lambda o: o[1])))
                hooks.append(prod.symmetric_contractions.register_forward_hook(keep(f"layer{t}.B")))
                hooks.append(prod.register_forward_hook(keep(f"layer{t}.h")))
            for r, readout in enumerate(model.readouts):
                hooks.append(
                    readout.register_forward_hook(
                        keep(f"readout{r}", lambda o, h=head_index: o[:, h])
                    )
                )
        if intermediates and hasattr(model, "joint_embedding"):
            # h0 is captured before mace adds the embedding in place; added back below
            hooks.append(model.joint_embedding.register_forward_hook(keep("h0_embedding")))
        if hasattr(model, "embedding_readout"):
            # Always captured: mace's node_energy leaves this (position-independent) energy out
            # although its total energy has it; the golden node_energy adds it back.
            hooks.append(
                model.embedding_readout.register_forward_hook(
                    keep("embedding_energy", lambda o, h=head_index: o[:, h])
                )
            )
        periodic = bool(np.any(atoms.pbc))
        try:
            out = model(
                batch,
                training=False,
                compute_force=True,
                compute_virials=True,
                compute_stress=periodic and bool(np.all(atoms.pbc)),
            )
        finally:
            for h in hooks:
                h.remove()
        res = {
            "energy": out["energy"].detach().reshape(1),
            "node_energy": out["node_energy"].detach(),
            "forces": out["forces"].detach(),
            "virial": out["virials"].detach().reshape(3, 3),
        }
        if out.get("stress") is not None and bool(np.all(atoms.pbc)):
            res["stress"] = out["stress"].detach().reshape(3, 3)
        ei = batch["edge_index"]
        res["edge_sender"] = ei[0]
        res["edge_receiver"] = ei[1]
        pos = batch["positions"].detach()
        res["edge_vectors"] = pos[ei[1]] - pos[ei[0]] + batch["shifts"]
        res["edge_unit_shifts"] = batch["unit_shifts"].round().long()
        if "h0_embedding" in captured:
            captured["h0"] = captured["h0"] + captured.pop("h0_embedding")
        res.update(captured)
        if "embedding_energy" in captured:
            res["node_energy"] = res["node_energy"] + captured["embedding_energy"]
        return {k: v.detach().cpu().numpy() for k, v in res.items()}
    finally:
        torch.set_default_dtype(old_default)


MACE_GOLDEN_NOTES = {
    "energy": "[1] total energy E = sum(node_energy), eV",
    "node_energy": "[N] E0[z] + scale*(pair + sum of readouts) + shift",
    "forces": "[N,3] -dE/dr, eV/Angstrom",
    "virial": "[3,3] MACE 'virials' = -dE/d(strain) (symmetric displacement), eV",
    "stress": "[3,3] MACE 'stress' = -virial/volume, eV/Angstrom^3 (fully periodic only)",
    "edge_centre": "[E] receiver (centre) atom index",
    "edge_neighbour": "[E] sender (neighbour) atom index",
    "edge_shift": "[E,3] integer image of the neighbour: r_neighbour + shift @ cell",
    "edge_vectors": "[E,3] r_centre - r_neighbour_image (MACE convention)",
    "edge_sh": "[E,(lmax+1)^2] spherical harmonics of edge_vectors",
    "edge_radial": "[E,num_basis] radial embedding e_e (Bessel times cutoff if apply_cutoff)",
    "h0": "[N,C] node embedding",
    "pair_energy": "[N] ZBL energy per atom (before scale), if the model has ZBL",
    "layer{t}.tp_weights": "[E,weight_numel] radial MLP output (before any cutoff factor)",
    "layer{t}.A": "[N,C,D] interaction output A[n,c,i] fed to the product",
    "layer{t}.sc": "[N,dim(hidden_out)] skip_tp output of residual blocks",
    "layer{t}.B": "[N,dim(hidden_out)] symmetric-contraction output, before products.linear",
    "layer{t}.h": "[N,dim(hidden_out)] node features after layer t (linear(B) + sc)",
    "readout{r}": "[N] readout r of the exported head (before scale)",
    "embedding_energy": "[N] embedding readout of the exported head (outside the scale; "
    "included in node_energy, which mace-torch's own node_energy omits)",
}

#: Per-structure inputs of the golden data of models with an embedding (non-default values,
#: so that a reader that ignored them would fail).
GOLDEN_STRUCTURE_INPUTS = {"total_charge": 1.0, "total_spin": 2.0}


def golden_mace(model: torch.nn.Module, model_json: Dict[str, Any], head: Optional[str] = None):
    """Golden data for an exported MACE model: ``(golden_json, tensors)``.

    Examples
    --------
    >>> # gj, gt = golden_mace(model, model_json); write.write_golden(path, gj, gt)
    """
    from .golden import build_golden

    def convert(out):
        return (
            out["edge_receiver"].astype(np.int64),
            out["edge_sender"].astype(np.int64),
            -out["edge_unit_shifts"].astype(np.int64),
        )

    inputs = None
    emb = model_json["mace"].get("embedding")
    if emb is not None:
        inputs = {}
        for f in emb["features"]:
            if f["name"] not in GOLDEN_STRUCTURE_INPUTS:
                raise ValueError(f"no golden value for the embedding feature {f['name']!r}")
            inputs[f["name"]] = GOLDEN_STRUCTURE_INPUTS[f["name"]]
    gj, gt = build_golden(
        model_json,
        lambda atoms: evaluate_mace(model, atoms, head, structure_inputs=inputs),
        convert,
        MACE_GOLDEN_NOTES,
    )
    if inputs is not None:
        gj["structure_inputs"] = inputs
    gj["head"] = select_head(model, head)[1]  # the head evaluated, which need not be the default
    return gj, gt

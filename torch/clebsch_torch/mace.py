# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Drop-in use in mace-torch: the interaction blocks' convolution on the Clebsch operators.

Every mace-torch interaction block computes its message either as
``scatter_sum(conv_tp(node_feats[sender], edge_attrs, tp_weights), receiver)`` or, when the
block has an attribute ``conv_fusion``, as ``conv_tp(node_feats, edge_attrs, tp_weights,
edge_index)`` (the entry mace-torch's cuEquivariance and OpenEquivariance switches use). The
patch takes the second entry: it replaces ``conv_tp`` by :class:`MaceConv` and sets
``conv_fusion``, so the gather, tensor product and scatter become one operator. Nothing of
mace-torch is forked or monkey-patched at class level.

A model converted to cuEquivariance by mace-torch (``mace.cli.convert_e3nn_cueq``) is patched
too: its cuEquivariance linears, symmetric contractions and skip products stay, only the
convolution becomes Clebsch's. Its node features are in cuEquivariance's ``ir_mul`` layout (the
components of an irrep outermost), Clebsch's operator reads e3nn's ``mul_ir``: the patch
permutes the convolution's input and output columns (one gather each way), as mace-torch's own
OpenEquivariance hybrid does. The convolution's e3nn problem is rebuilt from the block's irreps
with mace-torch's own ``tp_out_irreps_with_instructions``; the radial MLP's weights are in the
order both use.
"""

import inspect
from typing import Any, List, Tuple

import torch

from .problem import problem_from_e3nn


class MaceConv(torch.nn.Module):
    """The fused replacement of an interaction block's e3nn ``conv_tp``.

    It keeps the e3nn module's buffers and submodules under their names, so the model's
    ``state_dict`` keys (and checkpoints) are unchanged, and its irreps attributes, which
    mace-torch tools read.

    Parameters
    ----------
    tp : e3nn.o3.TensorProduct
        The block's ``conv_tp`` (per-edge external weights).

    Examples
    --------
    >>> # block.conv_tp = MaceConv(block.conv_tp); block.conv_fusion = "clebsch"
    """

    problem: str
    layout: str

    def __init__(self, tp: Any, layout: str = "mul_ir") -> None:
        super().__init__()
        self.problem = problem_from_e3nn(tp)
        self.layout = layout
        if layout not in ("mul_ir", "ir_mul"):
            raise ValueError(f"MaceConv: layout must be 'mul_ir' or 'ir_mul', got {layout!r}")
        # Both always present (empty for mul_ir): TorchScript compiles both branches.
        ir_mul = layout == "ir_mul"
        for name, irreps in (("to_mul_ir", tp.irreps_in1), ("to_ir_mul", tp.irreps_out)):
            order = _layout_order(irreps, name[3:]) if ir_mul else torch.zeros(0, dtype=torch.long)
            self.register_buffer(name, order, persistent=False)
        for name, buf in tp.named_buffers(recurse=False):
            self.register_buffer(name, buf)
        for name, mod in tp.named_children():
            self.add_module(name, mod)
        self.irreps_in1 = tp.irreps_in1
        self.irreps_in2 = tp.irreps_in2
        self.irreps_out = tp.irreps_out
        self.instructions = tp.instructions
        self.weight_numel = tp.weight_numel
        self.shared_weights = tp.shared_weights
        self.internal_weights = tp.internal_weights

    def forward(
        self,
        node_feats: torch.Tensor,
        edge_attrs: torch.Tensor,
        tp_weights: torch.Tensor,
        edge_index: torch.Tensor,
    ) -> torch.Tensor:
        ir_mul = self.layout == "ir_mul"
        if ir_mul:
            # Y's irreps have multiplicity 1: the same in both layouts
            node_feats = node_feats.index_select(1, self.to_mul_ir)
        out = torch.ops.clebsch.conv(
            node_feats,
            edge_attrs,
            tp_weights,
            edge_index[0],
            edge_index[1],
            node_feats.shape[0],
            self.problem,
        )
        return out.index_select(1, self.to_ir_mul) if ir_mul else out


def _layout_order(irreps: Any, target: str) -> torch.Tensor:
    """Column indices that gather rows of ``irreps`` into ``target`` layout from the other."""
    index: List[int] = []
    offset = 0
    for mul, ir in irreps:
        d = ir.dim
        for a in range(mul if target == "mul_ir" else d):
            for b in range(d if target == "mul_ir" else mul):
                # target mul_ir: (u = a, i = b) reads ir_mul's i * mul + u; ir_mul: (i = a, u = b)
                # reads mul_ir's u * d + i
                index.append(offset + (b * mul + a if target == "mul_ir" else b * d + a))
        offset += mul * d
    return torch.tensor(index, dtype=torch.long)


def _cueq_layout(block: torch.nn.Module) -> str:
    """The node features' layout of a block built by mace-torch with cuEquivariance ("" for
    an e3nn block)."""
    cfg = getattr(block, "cueq_config", None)
    if cfg is None or not getattr(cfg, "enabled", False):
        return ""
    return str(getattr(cfg, "layout_str", "mul_ir"))


def _e3nn_conv_of(block: torch.nn.Module) -> Any:
    """The e3nn TensorProduct a cuEquivariance block's convolution stands for, built as mace-torch
    builds the e3nn one (every block type calls the same helper)."""
    from e3nn import o3
    from mace.modules.irreps_tools import tp_out_irreps_with_instructions

    irreps_mid, instructions = tp_out_irreps_with_instructions(
        block.edge_irreps, block.edge_attrs_irreps, block.target_irreps
    )
    return o3.TensorProduct(
        block.edge_irreps,
        block.edge_attrs_irreps,
        irreps_mid,
        instructions=instructions,
        shared_weights=False,
        internal_weights=False,
    )


def _blocks(model: torch.nn.Module) -> List[Tuple[str, torch.nn.Module]]:
    from mace.modules.blocks import InteractionBlock

    return [(n, m) for n, m in model.named_modules() if isinstance(m, InteractionBlock)]


def _refusal(name: str, block: torch.nn.Module) -> str:
    """Why ``block`` cannot be patched ("" when it can)."""
    from e3nn import o3

    what = f"{name} ({type(block).__name__})"
    conv_tp = getattr(block, "conv_tp", None)
    if isinstance(conv_tp, MaceConv):
        return ""
    layout = _cueq_layout(block)
    if layout:
        if layout not in ("mul_ir", "ir_mul"):
            return f"{what}: cuEquivariance layout {layout!r} is neither mul_ir nor ir_mul"
        if not all(hasattr(block, a) for a in ("edge_irreps", "edge_attrs_irreps")):
            return f"{what}: no edge_irreps/edge_attrs_irreps to rebuild its convolution from"
        if "conv_fusion" not in inspect.getsource(type(block).forward):
            return f"{what}: its forward has no conv_fusion entry to call the fused convolution"
        try:
            tp = _e3nn_conv_of(block)
            problem_from_e3nn(tp)
        except (TypeError, ValueError) as e:
            return f"{what}.conv_tp: {e}"
        sizes = getattr(getattr(block, "conv_tp_weights", None), "hs", None)
        if sizes and tp.weight_numel != sizes[-1]:
            return (
                f"{what}: its radial MLP gives {sizes[-1]} weights, "
                f"the rebuilt convolution takes {tp.weight_numel}"
            )
        return ""
    if hasattr(block, "conv_fusion"):
        return f"{what} already uses a fused convolution (conv_fusion={block.conv_fusion!r})"
    if not isinstance(conv_tp, o3.TensorProduct):
        return (
            f"{what}.conv_tp is {type(conv_tp).__name__}, not an e3nn TensorProduct "
            "(convert cuEquivariance/OpenEquivariance models back to e3nn first)"
        )
    if "conv_fusion" not in inspect.getsource(type(block).forward):
        return f"{what}: its forward has no conv_fusion entry to call the fused convolution"
    try:
        problem_from_e3nn(conv_tp)
    except (TypeError, ValueError) as e:
        return f"{what}.conv_tp: {e}"
    return ""


def patch_mace(model: torch.nn.Module) -> torch.nn.Module:
    """Run every interaction block's convolution of a mace-torch model on Clebsch's operators.

    The model is changed in place (and returned); patching twice changes nothing more. Either
    every block is patched or, when one cannot be, none is.

    Parameters
    ----------
    model : torch.nn.Module
        A built or loaded mace-torch model (``MACE``, ``ScaleShiftMACE``, ...) with e3nn
        convolutions, or one converted to cuEquivariance by mace-torch (its convolution is
        replaced, the rest stays cuEquivariance's; the ``conv_tp`` entries of its state dict
        are then the e3nn module's: the converter does not carry them either).

    Returns
    -------
    torch.nn.Module
        ``model``.

    Raises
    ------
    ValueError
        Naming each module that is not supported, or when the model has no interaction block.

    Examples
    --------
    >>> # model = clebsch_torch.patch_mace(torch.load("model.model"))
    """
    blocks = _blocks(model)
    if not blocks:
        raise ValueError(f"{type(model).__name__}: no mace-torch interaction block to patch")
    refused = [r for r in (_refusal(n, b) for n, b in blocks) if r]
    if refused:
        raise ValueError("clebsch_torch.patch_mace: unsupported: " + "; ".join(refused))
    for _, block in blocks:
        if isinstance(block.conv_tp, MaceConv):
            continue
        layout = _cueq_layout(block)
        if layout:
            block.conv_tp = MaceConv(_e3nn_conv_of(block), layout=layout)
        else:
            block.conv_tp = MaceConv(block.conv_tp)
        block.conv_fusion = "clebsch"
    return model

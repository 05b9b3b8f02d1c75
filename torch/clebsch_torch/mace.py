# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Drop-in use in mace-torch: the interaction blocks' convolution on the Clebsch operators.

Every mace-torch interaction block computes its message either as
``scatter_sum(conv_tp(node_feats[sender], edge_attrs, tp_weights), receiver)`` or, when the
block has an attribute ``conv_fusion``, as ``conv_tp(node_feats, edge_attrs, tp_weights,
edge_index)`` (the entry mace-torch's cuEquivariance and OpenEquivariance switches use). The
patch takes the second entry: it replaces ``conv_tp`` by :class:`MaceConv` and sets
``conv_fusion``, so the gather, tensor product and scatter become one operator. Nothing of
mace-torch is forked or monkey-patched at class level.
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

    def __init__(self, tp: Any) -> None:
        super().__init__()
        self.problem = problem_from_e3nn(tp)
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
        return torch.ops.clebsch.conv(
            node_feats,
            edge_attrs,
            tp_weights,
            edge_index[0],
            edge_index[1],
            node_feats.shape[0],
            self.problem,
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
        convolutions.

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
        if not isinstance(block.conv_tp, MaceConv):
            block.conv_tp = MaceConv(block.conv_tp)
            block.conv_fusion = "clebsch"
    return model

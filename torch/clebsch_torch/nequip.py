# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Drop-in use in nequip: its convolution module ``TensorProductScatter`` on Clebsch's operators.

nequip's interaction block computes ``scatter(tp(x[edge_src], edge_attr, edge_weight),
edge_dst)`` in one module, ``nequip.nn._tp_scatter_base.TensorProductScatter``, which nequip's
own OpenEquivariance and cuEquivariance model modifiers replace by a subclass.
:func:`enable_clebsch` does the same with :class:`ClebschTensorProductScatter`, through nequip's
``replace_submodules``; the e3nn module is kept as ``tp`` so that the state dict is unchanged.

Examples
--------
>>> # from clebsch_torch.nequip import enable_clebsch
>>> # model = enable_clebsch(model)
"""

import torch
from nequip.nn import replace_submodules
from nequip.nn._tp_scatter_base import TensorProductScatter
from nequip.utils.dtype import torch_default_dtype

from .problem import problem_from_e3nn


class ClebschTensorProductScatter(TensorProductScatter):
    """``TensorProductScatter`` whose forward is one fused ``clebsch::conv`` call.

    Parameters
    ----------
    old : TensorProductScatter
        The module it replaces; its e3nn ``tp`` (and so its buffers) is kept.
    """

    problem: str

    def __init__(self, old: TensorProductScatter) -> None:
        with torch_default_dtype(old.model_dtype):
            super().__init__(
                feature_irreps_in=old.feature_irreps_in,
                irreps_edge_attr=old.irreps_edge_attr,
                irreps_mid=old.irreps_mid,
                instructions=old.instructions,
            )
        self.tp = old.tp
        self.problem = problem_from_e3nn(old.tp)

    def forward(self, x, edge_attr, edge_weight, edge_dst, edge_src):
        # NequIP: messages flow from edge_src (sender) into edge_dst (receiver).
        return torch.ops.clebsch.conv(
            x, edge_attr, edge_weight, edge_src, edge_dst, x.size(0), self.problem
        )


def enable_clebsch(model: torch.nn.Module) -> torch.nn.Module:
    """Replace every ``TensorProductScatter`` of a nequip model (in place; also returned).

    Parameters
    ----------
    model : torch.nn.Module
        A nequip model (e.g. ``NequIPGNNModel``) with e3nn convolutions.

    Returns
    -------
    torch.nn.Module

    Raises
    ------
    ValueError
        When the model has no ``TensorProductScatter``, or one is already another accelerated
        subclass (OpenEquivariance, cuEquivariance), naming it.
    """
    found = [(n, m) for n, m in model.named_modules() if isinstance(m, TensorProductScatter)]
    if not found:
        raise ValueError(f"{type(model).__name__}: no nequip TensorProductScatter to replace")
    refused = [
        f"{n} ({type(m).__name__})"
        for n, m in found
        if type(m) not in (TensorProductScatter, ClebschTensorProductScatter)
    ]
    if refused:
        raise ValueError(
            "clebsch_torch.nequip.enable_clebsch: unsupported (already accelerated; rebuild "
            "with e3nn): " + ", ".join(refused)
        )
    for n, m in found:
        try:
            problem_from_e3nn(m.tp)
        except (TypeError, ValueError) as e:
            raise ValueError(f"clebsch_torch.nequip.enable_clebsch: {n}.tp: {e}") from e

    def factory(old):
        return (
            old
            if isinstance(old, ClebschTensorProductScatter)
            else ClebschTensorProductScatter(old)
        )

    return replace_submodules(model, TensorProductScatter, factory)

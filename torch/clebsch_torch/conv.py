# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""The fused convolution as a function (a scriptable wrapper of torch.ops.clebsch.conv)."""

import torch


def conv(
    x: torch.Tensor,
    y: torch.Tensor,
    w: torch.Tensor,
    sender: torch.Tensor,
    receiver: torch.Tensor,
    num_receivers: int,
    problem: str,
) -> torch.Tensor:
    """``out[r] = sum over edges e with receiver[e] = r of TP(x[sender[e]], y[e], w[e])``.

    The messages are never materialised. Differentiable twice in ``x``, ``y`` and ``w``.

    Parameters
    ----------
    x : torch.Tensor
        Node features ``[num_senders, irreps_in1.dim]`` (e3nn's layout), float32 or float64.
    y : torch.Tensor
        Edge attributes (spherical harmonics) ``[E, irreps_in2.dim]``.
    w : torch.Tensor
        Per-edge weights ``[E, weight_numel]`` in e3nn's instruction order.
    sender, receiver : torch.Tensor
        ``[E]`` int64 or int32 node indices (MACE: ``edge_index[0]``, ``edge_index[1]``).
    num_receivers : int
        Rows of the output (rows without edges are zero).
    problem : str
        The description from :func:`clebsch_torch.problem_from_e3nn` or
        :func:`clebsch_torch.conv_problem`.

    Returns
    -------
    torch.Tensor
        ``[num_receivers, irreps_out.dim]``.

    Examples
    --------
    >>> # out = conv(x, y, w, edge_index[0], edge_index[1], x.shape[0], problem)
    """
    return torch.ops.clebsch.conv(x, y, w, sender, receiver, num_receivers, problem)

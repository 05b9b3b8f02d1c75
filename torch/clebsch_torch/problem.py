# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Problem descriptions of the convolution operators (the JSON string of csrc/conv_problem.h).

A description names the irreps of ``x``, ``y`` and the output, the instruction list and,
optionally, each instruction's dense coupling table. From an e3nn module the couplings are the
module's own (``path_weight * wigner_3j`` of the installed e3nn), so that the operators compute
what the module computes whatever e3nn version built it (0.4.4 for mace-torch, 0.6 for nequip);
without couplings the C++ core derives e3nn 0.6's.
"""

import json
from typing import Any, Optional, Sequence

SUPPORTED_MODES = ("uvw", "uvu", "uvv", "uuw", "uuu")


def conv_problem(
    irreps_in1: str,
    irreps_in2: str,
    irreps_out: str,
    instructions: Sequence[Sequence[Any]],
    couplings: Optional[Sequence[Sequence[float]]] = None,
    irrep_normalization: str = "component",
    path_normalization: str = "element",
) -> str:
    """Describe a convolution problem.

    Parameters
    ----------
    irreps_in1, irreps_in2, irreps_out : str
        e3nn irreps strings of the node features, the edge attributes and the output.
    instructions : sequence of (i_in1, i_in2, i_out, mode, has_weight, path_weight)
        e3nn's instruction tuples.
    couplings : sequence of sequences of float, optional
        Instruction n's coupling ``P[i, j, k]`` flattened row-major over
        ``(2 l1 + 1, 2 l2 + 1, 2 l_out + 1)`` with every normalisation folded in.
    irrep_normalization, path_normalization : str
        e3nn's options, used only without ``couplings``.

    Returns
    -------
    str
        The description, for :func:`clebsch_torch.conv`.

    Examples
    --------
    >>> p = conv_problem("2x0e", "0e", "2x0e", [(0, 0, 0, "uvu", True, 1.0)])
    >>> json.loads(p)["irreps_out"]
    '2x0e'
    """
    rows = []
    for n, ins in enumerate(instructions):
        if len(ins) != 6:
            raise ValueError(
                f"instruction {n} must be (i_in1, i_in2, i_out, mode, has_weight, path_weight), "
                f"got {ins!r}"
            )
        i1, i2, io, mode, has_weight, path_weight = ins
        if mode not in SUPPORTED_MODES:
            raise ValueError(f"instruction {n}: mode {mode!r} is not one of {SUPPORTED_MODES}")
        rows.append([int(i1), int(i2), int(io), str(mode), bool(has_weight), float(path_weight)])
    d = {
        "irreps_in1": str(irreps_in1),
        "irreps_in2": str(irreps_in2),
        "irreps_out": str(irreps_out),
        "instructions": rows,
        "irrep_normalization": irrep_normalization,
        "path_normalization": path_normalization,
    }
    if couplings is not None:
        if len(couplings) != len(rows):
            raise ValueError(f"{len(couplings)} couplings for {len(rows)} instructions")
        d["couplings"] = [[float(c) for c in table] for table in couplings]
    # repr-exact floats: json writes the shortest string that reads back to the same double.
    return json.dumps(d, separators=(",", ":"))


def problem_from_e3nn(tp: Any) -> str:
    """Describe the convolution of an e3nn ``TensorProduct`` with per-edge external weights.

    Parameters
    ----------
    tp : e3nn.o3.TensorProduct
        With ``shared_weights=False`` and ``internal_weights=False`` (weights come per edge,
        as MACE's and NequIP's radial MLPs give them).

    Returns
    -------
    str

    Raises
    ------
    TypeError
        When ``tp`` is not an e3nn TensorProduct.
    ValueError
        When it has shared or internal weights, or a connection mode the kernels lack.

    Examples
    --------
    >>> # problem = problem_from_e3nn(model.interactions[0].conv_tp)
    """
    import torch
    from e3nn import o3

    if not isinstance(tp, o3.TensorProduct):
        raise TypeError(f"expected an e3nn.o3.TensorProduct, got {type(tp).__name__}")
    if tp.shared_weights or tp.internal_weights:
        raise ValueError(
            f"{type(tp).__name__} {tp}: the convolution needs per-edge external weights "
            f"(shared_weights={tp.shared_weights}, internal_weights={tp.internal_weights})"
        )
    instructions, couplings = [], []
    for n, ins in enumerate(tp.instructions):
        if ins.connection_mode not in SUPPORTED_MODES:
            raise ValueError(
                f"{type(tp).__name__} {tp}: instruction {n} has mode {ins.connection_mode!r}"
            )
        l1 = tp.irreps_in1[ins.i_in1].ir.l
        l2 = tp.irreps_in2[ins.i_in2].ir.l
        lo = tp.irreps_out[ins.i_out].ir.l
        c = float(ins.path_weight) * o3.wigner_3j(l1, l2, lo, dtype=torch.float64)
        couplings.append(c.reshape(-1).tolist())
        instructions.append(
            (
                ins.i_in1,
                ins.i_in2,
                ins.i_out,
                ins.connection_mode,
                ins.has_weight,
                float(ins.path_weight),
            )
        )
    return conv_problem(
        str(tp.irreps_in1), str(tp.irreps_in2), str(tp.irreps_out), instructions, couplings
    )

# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Small random convolution problems and e3nn's unfused reference convolution, for the tests."""

import json

import torch
from e3nn import o3


def uvu_tp(irreps_in1: str, irreps_sh: str, lmax_out: int, uvw_out: str = "") -> o3.TensorProduct:
    """An e3nn TensorProduct as MACE's and NequIP's convolutions build it: every allowed uvu
    path ``(in1, sh) -> ir_out`` with ``l_out <= lmax_out``, one output block per path (MACE's
    rule), per-edge weights. ``uvw_out`` adds uvw paths into those irreps (a mixed problem)."""
    in1, sh = o3.Irreps(irreps_in1), o3.Irreps(irreps_sh)
    out, ins = [], []
    for i1, (mul, ir1) in enumerate(in1):
        for i2, (_, ir2) in enumerate(sh):
            for ir in ir1 * ir2:
                if ir.l <= lmax_out:
                    ins.append((i1, i2, len(out), "uvu", True))
                    out.append((mul, ir))
    for mul, ir in o3.Irreps(uvw_out):
        for i1, (_, ir1) in enumerate(in1):
            for i2, (_, ir2) in enumerate(sh):
                if ir in ir1 * ir2:
                    ins.append((i1, i2, len(out), "uvw", True))
        out.append((mul, ir))
    # Built in float64: e3nn stores its wigner_3j buffers in the default dtype at construction.
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return o3.TensorProduct(
            in1, sh, o3.Irreps(out), ins, shared_weights=False, internal_weights=False
        )
    finally:
        torch.set_default_dtype(old)


def random_inputs(tp, num_nodes: int, num_edges: int, seed: int, dtype=torch.float64):
    """x, y, w, sender, receiver; node num_nodes-1 receives nothing (an all-zero output row)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(num_nodes, tp.irreps_in1.dim, generator=g, dtype=dtype)
    y = torch.randn(num_edges, tp.irreps_in2.dim, generator=g, dtype=dtype)
    w = torch.randn(num_edges, tp.weight_numel, generator=g, dtype=dtype)
    sender = torch.randint(0, num_nodes, (num_edges,), generator=g)
    receiver = torch.randint(0, max(1, num_nodes - 1), (num_edges,), generator=g)
    return x, y, w, sender, receiver


def e3nn_conv(tp, x, y, w, sender, receiver, num_receivers):
    """The unfused reference: gather, e3nn tensor product per edge, index_add."""
    msg = tp(x[sender], y, w)
    out = torch.zeros(num_receivers, msg.shape[1], dtype=msg.dtype)
    return out.index_add(0, receiver, msg)


def dim_out(problem: str) -> int:
    """Width of the output rows of a problem description."""
    return o3.Irreps(json.loads(problem)["irreps_out"]).dim

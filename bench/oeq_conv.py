# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""OpenEquivariance's fused convolution, timed on the same GPU in the same run as bench_conv.

``openequivariance.TensorProductConv`` (0.7) on each problem of docs/kernels.md: the same uvu
instructions, output blocks and per-edge weights as ``e3nn_conv.conv_tp`` (MACE's rule), rows =
receivers (sorted), cols = senders; both of its accumulation modes, atomic and deterministic
(the latter with the sender permutation it requires, and on a symmetric graph with the same N and
E: its deterministic backward is only right for graphs that contain every edge's reverse, as a
full neighbour list does). Forward, forward+backward and double backward through its registered
autograd ops. Method and output: ``peer_common.py``.

OpenEquivariance 0.7 ships as a source distribution whose CMake build downloads LibTorch; on a
host without network its pure-Python package is put on ``PYTHONPATH`` and its PyTorch extension
is JIT-compiled on first import (torch.utils.cpp_extension, ~1-2 minutes, cached under
``TORCH_EXTENSIONS_DIR``). ``run_bench.sh`` does this from ``.whl/peers/openequivariance-*.tar.gz``.

Examples
--------
>>> # python3 bench/oeq_conv.py --problems mace-medium --dtypes float32 --json oeq.jsonl
"""

from __future__ import annotations

import os
import sys
import warnings

import numpy as np
import torch

from peer_common import NotSupported, Peer, conv_tp, main


class OeqPeer(Peer):
    name = "oeq"
    modes = ("atomic", "deterministic")

    def __init__(self):
        # The JIT fallback warns at import; it is expected here (see the module docstring).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import openequivariance as oeq
        self.oeq = oeq
        if not getattr(oeq, "BUILT_EXTENSION", True):
            raise NotSupported(f"extension not built: {oeq.BUILT_EXTENSION_ERROR}")

    def version(self) -> str:
        return str(getattr(self.oeq, "__version__", None) or os.environ.get("OEQ_VERSION", "?"))

    def needs_symmetric_graph(self, mode):
        # Its deterministic backward reads the transposed edges in the forward (row-sorted)
        # order (templates/loop_unroll_conv_det.cuh swaps rows and cols and indexes edge data
        # through the permutation): right only when the edge set is closed under reversal.
        return mode == "deterministic"

    def build(self, node, edge, target, dtype, mode):
        ref = conv_tp(node, edge, target)
        ins = [
            (i.i_in1, i.i_in2, i.i_out, i.connection_mode, i.has_weight) for i in ref.instructions
        ]
        npdt = {torch.float32: np.float32, torch.float64: np.float64}[dtype]
        problem = self.oeq.TPProblem(
            str(ref.irreps_in1),
            str(ref.irreps_in2),
            str(ref.irreps_out),
            ins,
            shared_weights=False,
            internal_weights=False,
            irrep_dtype=npdt,
            weight_dtype=npdt,
            label=f"{node} x {edge}",
        )
        module = self.oeq.TensorProductConv(problem, deterministic=(mode == "deterministic"))
        module._bench_dims = (ref.irreps_in1.dim, ref.irreps_out.dim, ref.weight_numel)
        module._bench_det = mode == "deterministic"
        return module

    def graph(self, module, receiver, sender, n):
        rows, cols = receiver.long().contiguous(), sender.long().contiguous()
        perm = None
        if module._bench_det:
            # Edge indices in (sender, receiver) order: the transpose of the adjacency matrix,
            # which the deterministic backward walks (OpenEquivariance's CoordGraph.transpose_perm).
            perm = torch.argsort(cols * n + rows, stable=True).contiguous()
        return {"rows": rows, "cols": cols, "perm": perm}

    def forward(self, module, x, y, w, graph):
        return module(x, y, w, graph["rows"], graph["cols"], graph["perm"])

    def x_dim(self, module):
        return module._bench_dims[0]

    def out_dim(self, module):
        return module._bench_dims[1]

    def weight_numel(self, module):
        return module._bench_dims[2]

    def w_from_e3nn(self, module, w):
        return module.reorder_weights_from_e3nn(w, True)

    def w_to_e3nn(self, module, gw):
        return module.reorder_weights_to_e3nn(gw, True)


if __name__ == "__main__":
    sys.exit(main(OeqPeer, __doc__))

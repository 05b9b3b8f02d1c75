# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""cuEquivariance's channel-wise convolution, timed on the same GPU in the same run as bench_conv.

The way MACE runs its interaction with cuEquivariance (``mace.modules.wrapper_ops``):
``cuequivariance_torch.ChannelWiseTensorProduct`` (0.13, ``cuequivariance-ops-torch-cu13``
kernels) with per-edge weights (``shared_weights=False``), the output filtered to the problem's
output irreps, and the gather of x by sender and the scatter-sum to the receivers fused into the
kernel (``indices_1=sender, indices_out=receiver``), in the ``ir_mul`` layout MACE uses with
cuEquivariance (so no layout transposes are timed). Its paths and their sorted output blocks are
those of ``e3nn_conv.conv_tp``; its weights are stored in the sorted output order and its irreps
as (component, channel), so the check against e3nn converts both. Method and output:
``peer_common.py``. cuEquivariance has one accumulation mode (reported as ``fused``).

Examples
--------
>>> # python3 bench/cueq_conv.py --problems mace-medium --dtypes float32 --json cueq.jsonl
"""

from __future__ import annotations

import sys
from typing import List, Tuple

import torch
from e3nn import o3

from peer_common import NotSupported, Peer, conv_tp, main


def _blocks(irreps) -> List[Tuple[int, int, int]]:
    """(offset, mul, dim) of each block of an e3nn or cuEquivariance Irreps."""
    out, off = [], 0
    for mul, ir in irreps:
        out.append((off, mul, ir.dim))
        off += mul * ir.dim
    return out


class CueqPeer(Peer):
    name = "cueq"
    modes = ("fused",)

    def __init__(self):
        import cuequivariance as cue
        import cuequivariance_torch as cuet

        try:
            import cuequivariance_ops_torch  # noqa: F401  (the CUDA kernels; without them: naive)
        except ImportError as exc:
            raise NotSupported(f"cuequivariance_ops_torch missing ({exc})") from exc
        self.cue, self.cuet = cue, cuet

    def version(self) -> str:
        import cuequivariance_torch

        return str(getattr(cuequivariance_torch, "__version__", "?"))

    def build(self, node, edge, target, dtype, mode):
        cue = self.cue
        i1, i2 = cue.Irreps("O3", node), cue.Irreps("O3", edge)
        filt = [ir for _, ir in cue.Irreps("O3", target)]
        module = self.cuet.ChannelWiseTensorProduct(
            i1,
            i2,
            filt,
            layout=cue.ir_mul,
            shared_weights=False,
            internal_weights=False,
            device="cuda",
            dtype=dtype,
            math_dtype=dtype,
        )
        if module.method != "uniform_1d":
            # The naive method is einsum in PyTorch, not cuEquivariance's kernel: not its speed.
            raise NotSupported(
                f"cuEquivariance chose method {module.method!r}, not its uniform_1d CUDA kernel"
            )
        self._index_maps(module, node, edge, target)
        return module

    def _index_maps(self, module, node, edge, target):
        """Column maps between e3nn's layout (mul_ir, instruction-ordered weights) and the
        module's (ir_mul, weights in sorted output order)."""
        ref = conv_tp(node, edge, target)
        # Paths in cuEquivariance's enumeration order (its _channelwise_tensor_product_core).
        keys = []
        for a, (_, ir1) in enumerate(module.irreps_in1):
            for b, (_, ir2) in enumerate(module.irreps_in2):
                for ir3 in ir1 * ir2:
                    if any(ir3 == ir for _, ir in module.irreps_out):
                        keys.append((a, b, ir3.l, ir3.p))
        # Its stable sort puts path k in the first free output block of the same irrep.
        used, cue_block = set(), {}
        for key in keys:
            j = next(
                j
                for j, (_, ir) in enumerate(module.irreps_out)
                if j not in used and (ir.l, ir.p) == key[2:]
            )
            used.add(j)
            cue_block[key] = j
        if len(keys) != len(ref.instructions) or len(used) != len(module.irreps_out):
            raise NotSupported(
                f"cuEquivariance has {len(keys)} paths, e3nn {len(ref.instructions)}"
            )
        cue_out, e3_out = _blocks(module.irreps_out), _blocks(ref.irreps_out)
        idx_out = torch.empty(ref.irreps_out.dim, dtype=torch.long)
        idx_w = torch.empty(ref.weight_numel, dtype=torch.long)
        sign_w = torch.ones(ref.weight_numel, dtype=torch.float64)
        cue_w = [0]
        for _, mul, _ in cue_out:
            cue_w.append(cue_w[-1] + mul)
        w_off = 0
        for ins in ref.instructions:
            ir = ref.irreps_out[ins.i_out].ir
            j = cue_block[(ins.i_in1, ins.i_in2, ir.l, ir.p)]
            oc, mul, dim = cue_out[j]
            oe = e3_out[ins.i_out][0]
            u = torch.arange(mul).view(mul, 1)
            i = torch.arange(dim).view(1, dim)
            idx_out[(oe + u * dim + i).flatten()] = (oc + i * mul + u).flatten()
            idx_w[w_off : w_off + mul] = torch.arange(cue_w[j], cue_w[j] + mul)
            # The two libraries' CG tensors differ in sign for some paths with l1 + l2 + l3 odd
            # (a convention; a trained model absorbs it in its weights): carry the sign in the
            # converted weights. A basis mismatch would not be a sign and still fails the check.
            ir1, ir2 = ref.irreps_in1[ins.i_in1].ir, ref.irreps_in2[ins.i_in2].ir
            cg = self.cue.clebsch_gordan(
                module.irreps_in1[ins.i_in1].ir,
                module.irreps_in2[ins.i_in2].ir,
                module.irreps_out[j].ir,
            )[0]
            dot = float(
                (
                    torch.as_tensor(cg, dtype=torch.float64)
                    * o3.wigner_3j(ir1.l, ir2.l, ir.l, dtype=torch.float64)
                ).sum()
            )
            if dot < 0:
                sign_w[w_off : w_off + mul] = -1
            w_off += mul
        # x: the same blocks, (mul, dim) -> (dim, mul) within each.
        idx_x = torch.empty(ref.irreps_in1.dim, dtype=torch.long)
        for off, mul, dim in _blocks(ref.irreps_in1):
            u = torch.arange(mul).view(mul, 1)
            i = torch.arange(dim).view(1, dim)
            idx_x[(off + i * mul + u).flatten()] = (off + u * dim + i).flatten()
        # idx_x[c] = e3nn column of cue column c; idx_out[c] = cue column of e3nn column c;
        # idx_w[k] = cue weight column of e3nn weight k.
        module._bench_maps = {
            k: v.cuda() for k, v in (("x", idx_x), ("out", idx_out), ("w", idx_w), ("sign", sign_w))
        }
        module._bench_dims = (ref.irreps_in1.dim, ref.irreps_out.dim, ref.weight_numel)

    def graph(self, module, receiver, sender, n):
        return {
            "receiver": receiver.long().contiguous(),
            "sender": sender.long().contiguous(),
            "n": n,
        }

    def forward(self, module, x, y, w, graph):
        return module(
            x,
            y,
            weight=w,
            indices_1=graph["sender"],
            indices_out=graph["receiver"],
            size_out=graph["n"],
        )

    def x_dim(self, module):
        return module._bench_dims[0]

    def out_dim(self, module):
        return module._bench_dims[1]

    def weight_numel(self, module):
        return module._bench_dims[2]

    @staticmethod
    def _inv(idx):
        inv = torch.empty_like(idx)
        inv[idx] = torch.arange(len(idx), device=idx.device)
        return inv

    def x_from_e3nn(self, module, x):
        return x[:, module._bench_maps["x"]]

    def x_to_e3nn(self, module, gx):
        return gx[:, self._inv(module._bench_maps["x"])]

    def w_from_e3nn(self, module, w):
        return (w * module._bench_maps["sign"].to(w.dtype))[:, self._inv(module._bench_maps["w"])]

    def w_to_e3nn(self, module, gw):
        return gw[:, module._bench_maps["w"]] * module._bench_maps["sign"].to(gw.dtype)

    def out_to_e3nn(self, module, z):
        return z[:, module._bench_maps["out"]]

    def out_from_e3nn(self, module, g):
        return g[:, self._inv(module._bench_maps["out"])]


if __name__ == "__main__":
    sys.exit(main(CueqPeer, __doc__))

"""Reference values of the tensor-product graph convolution for ``test_e3nn_convolution.cpp``.

The convolution is written the way MACE and NequIP write it with e3nn: gather the sender rows,
apply ``o3.TensorProduct`` with per-edge weights, sum into the receivers with ``index_add``:
``out = zeros.index_add(0, receiver, tp(x[sender], Y, W))``. Each case stores the graph, the
inputs (Y are real spherical harmonics of random edge vectors, component normalisation), the
forward, the autograd backward of ``sum(out * grad_out)`` with respect to ``(x, Y, W)``, and the
autograd double backward: with random cotangents ``(dx, dY, dW)``, the gradient of
``<grad_x, dx> + <grad_Y, dY> + <grad_W, dW>`` with respect to ``(x, Y, W, grad_out)``.
"""

import torch
from e3nn import o3


def mace_uvu(irreps1, irreps2, target):
    """MACE's ``tp_out_irreps_with_instructions``: one output block per path, sorted, uvu."""
    irreps1, irreps2, target = o3.Irreps(irreps1), o3.Irreps(irreps2), o3.Irreps(target)
    out, instructions = [], []
    for i, (mul, ir_in) in enumerate(irreps1):
        for j, (_, ir_edge) in enumerate(irreps2):
            for ir_out in ir_in * ir_edge:
                if ir_out in target:
                    instructions.append((i, j, len(out), "uvu", True))
                    out.append((mul, ir_out))
    irreps_out, permut, _ = o3.Irreps(out).sort()
    instructions = [(i1, i2, permut[io], mode, w) for i1, i2, io, mode, w in instructions]
    return irreps_out, sorted(instructions, key=lambda x: x[2])


def graph(rng, num_senders, num_receivers, num_edges):
    """Random edges; the last receiver gets no edge and the last sender sends none, so empty
    rows are covered; one edge is repeated."""
    sender = rng.integers(0, num_senders - 1, num_edges)
    receiver = rng.integers(0, num_receivers - 1, num_edges)
    sender[-1], receiver[-1] = sender[0], receiver[0]
    return torch.tensor(sender), torch.tensor(receiver)


def build_cases():
    """(name, TensorProduct, num_senders, num_receivers, num_edges)."""
    cases = []
    sh3 = o3.Irreps.spherical_harmonics(3)
    out, ins = mace_uvu("3x0e+3x1o+3x2e", sh3, "0e+1o+2e+3o")
    tp = o3.TensorProduct("3x0e+3x1o+3x2e", sh3, out, ins, shared_weights=False)
    cases.append(("mace", tp, 6, 6, 20))

    # NequIP-like, more senders than receivers (ghost atoms send, only local atoms receive).
    sh2 = o3.Irreps.spherical_harmonics(2)
    out, ins = mace_uvu("2x0e+2x1o+2x1e+2x2e", sh2, "0e+0o+1o+1e+2e+2o")
    tp = o3.TensorProduct("2x0e+2x1o+2x1e+2x2e", sh2, out, ins, shared_weights=False)
    cases.append(("nequip", tp, 7, 4, 15))

    # Per-edge uvw weights (a fully connected conv).
    tp = o3.FullyConnectedTensorProduct(
        "2x0e+2x1o", "0e+1o", "3x0e+2x1o+1x1e", shared_weights=False
    )
    cases.append(("uvw", tp, 4, 5, 9))
    return cases


def generate(rng):
    """Evaluate every case on a graph and inputs drawn from ``rng``."""
    out_cases = []
    for name, tp, num_senders, num_receivers, num_edges in build_cases():
        sender, receiver = graph(rng, num_senders, num_receivers, num_edges)

        def rand(*shape):
            return torch.tensor(rng.standard_normal(shape), requires_grad=True)

        x = rand(num_senders, tp.irreps_in1.dim)
        vec = torch.tensor(rng.standard_normal((num_edges, 3)))
        Y = o3.spherical_harmonics(tp.irreps_in2, vec, normalize=True, normalization="component")
        Y = Y.detach().requires_grad_(True)
        W = rand(num_edges, tp.weight_numel)
        grad_out = rand(num_receivers, tp.irreps_out.dim)

        messages = tp(x[sender], Y, W)
        out = torch.zeros(num_receivers, tp.irreps_out.dim).index_add(0, receiver, messages)
        gx, gY, gW = torch.autograd.grad(out, [x, Y, W], grad_out, create_graph=True)
        dx = torch.tensor(rng.standard_normal(x.shape))
        dY = torch.tensor(rng.standard_normal(Y.shape))
        dW = torch.tensor(rng.standard_normal(W.shape))
        s = (gx * dx).sum() + (gY * dY).sum() + (gW * dW).sum()
        ddx, ddY, ddW, ddg = torch.autograd.grad(s, [x, Y, W, grad_out])
        out_cases.append(
            {
                "name": name,
                "irreps_in1": str(tp.irreps_in1),
                "irreps_in2": str(tp.irreps_in2),
                "irreps_out": str(tp.irreps_out),
                # every case is built with path_weight 1.0
                "instructions": [
                    [i.i_in1, i.i_in2, i.i_out, i.connection_mode, i.has_weight, 1.0]
                    for i in tp.instructions
                ],
                "weight_numel": tp.weight_numel,
                "num_senders": num_senders,
                "num_receivers": num_receivers,
                "sender": sender.tolist(),
                "receiver": receiver.tolist(),
                "x": x,
                "Y": Y,
                "W": W,
                "out": out,
                "grad_out": grad_out,
                "grad_x": gx,
                "grad_Y": gY,
                "grad_W": gW,
                "dx": dx,
                "dY": dY,
                "dW": dW,
                "dd_x": ddx,
                "dd_Y": ddY,
                "dd_W": ddW,
                "dd_grad_out": ddg,
            }
        )
    return {"cases": out_cases}

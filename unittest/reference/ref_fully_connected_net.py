"""Reference values of e3nn's ``nn.FullyConnectedNet`` for ``test_e3nn_fully_connected_net.cpp``.

Also records the normalize2mom constants e3nn computes for silu, tanh and an explicit identity,
which the C++ library tabulates. Each case holds the layer widths, the activation name and the
constant the module uses, the layer weights (flattened, layer 0 first, each [h_in][h_out]) and a
forward/backward evaluation: ``y = net(x)``, then autograd of ``sum(y * grad_y)``.
"""

import torch
from e3nn import nn
from e3nn.math import normalize2mom

ACTS = {
    "silu": torch.nn.functional.silu,
    "tanh": torch.tanh,
    "identity": lambda x: x,
    "none": None,
}

CASES = [
    ([8, 64, 64, 64, 16], "silu"),  # MACE radial MLP shape
    ([4, 16, 3], "tanh"),
    ([6, 5, 7, 2], "identity"),
    ([5, 7, 7, 6], "none"),  # act=None: every layer linear
    ([10, 1], "silu"),  # MACE density_fn: a single linear layer
]


def generate(rng):
    """Evaluate every case with weights, rows and output gradients drawn from ``rng``."""
    constants = {name: normalize2mom(f).cst for name, f in ACTS.items() if f is not None}
    cases = []
    for hs, act in CASES:
        net = nn.FullyConnectedNet(hs, ACTS[act])
        layers = [getattr(net, f"layer{i}") for i in range(len(hs) - 1)]
        with torch.no_grad():
            for layer in layers:
                layer.weight.copy_(torch.tensor(rng.standard_normal(tuple(layer.weight.shape))))
        # the act of the hidden layers (None when there are none, or for act=None)
        cst = layers[0].act.cst if layers[0].act is not None else None
        n_rows = 4
        x = torch.tensor(rng.standard_normal((n_rows, hs[0])), requires_grad=True)
        grad_y = torch.tensor(rng.standard_normal((n_rows, hs[-1])))
        y = net(x)
        weights = [layer.weight for layer in layers]
        grads = torch.autograd.grad((y * grad_y).sum(), [x] + weights)
        cases.append(
            {
                "hs": hs,
                "act": act,
                "cst": cst,
                "weight": torch.cat([w.reshape(-1) for w in weights]),
                "x": x,
                "y": y,
                "grad_y": grad_y,
                "grad_x": grads[0],
                "grad_weight": torch.cat([g.reshape(-1) for g in grads[1:]]),
            }
        )
    return {"normalize2mom": constants, "cases": cases}

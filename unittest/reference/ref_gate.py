"""Reference values of e3nn's ``nn.Gate`` for ``test_e3nn_gate.cpp``.

Each case holds the constructor arguments (irreps and activation names, "none" for None), the
irreps e3nn derives (irreps_in, irreps_out and the simplified scalars/gates/gated), the
normalize2mom constant of every activation, the gather indices (``torch.arange`` pushed through
``gate.sc``, concatenated) and a forward/backward evaluation: ``y = gate(x)``, then autograd of
``sum(y * grad_y)`` with respect to ``x``.
"""

import torch
from e3nn import nn

ACTS = {"silu": torch.nn.functional.silu, "tanh": torch.tanh, "none": None}

# (irreps_scalars, act_scalars, irreps_gates, act_gates, irreps_gated)
CASES = [
    # NequIP's hidden block: conv_irreps_out = 96x0e+32x1o+32x2e
    ("32x0e", ["silu"], "64x0e", ["silu"], "32x1o+32x2e"),
    # odd scalars and odd gates: tanh keeps 0o, and an odd gate flips the gated parity
    ("4x0e+3x0o", ["silu", "tanh"], "2x0o+3x0e", ["tanh", "silu"], "2x1e+1x2o+2x0e"),
    # gate blocks that split gated blocks (ElementwiseTensorProduct)
    ("2x0o+3x0e", ["tanh", "silu"], "2x0e+3x0o", ["silu", "tanh"], "3x1o+2x2e"),
    # unsorted gated irreps, None activations, a zero multiplicity, adjacent merges
    ("0x0e+5x0e+2x0o", ["silu", "none", "tanh"], "3x0e", ["none"], "2x2e+1x1o"),
    ("2x0e+2x0e", ["silu", "tanh"], "1x0e+1x0e", ["tanh", "silu"], "1x1o+1x1o"),
    # scalars only, and gates only
    ("8x0e", ["silu"], "", [], ""),
    ("", [], "4x0e", ["tanh"], "4x1o"),
]


def generate(rng):
    """Evaluate every case with rows and output gradients drawn from ``rng``."""
    cases = []
    for scalars, act_s, gates, act_g, gated in CASES:
        gate = nn.Gate(scalars, [ACTS[a] for a in act_s], gates, [ACTS[a] for a in act_g], gated)
        dim_in = gate.irreps_in.dim
        parts = gate.sc(torch.arange(dim_in, dtype=torch.float64))
        gather = torch.cat(parts).round().long().tolist()
        cst_s = [a.cst if a is not None else None for a in gate.act_scalars.acts]
        cst_g = [a.cst if a is not None else None for a in gate.act_gates.acts]
        n_rows = 3
        x = torch.tensor(rng.standard_normal((n_rows, dim_in)), requires_grad=True)
        y = gate(x)
        grad_y = torch.tensor(rng.standard_normal(tuple(y.shape)))
        (grad_x,) = torch.autograd.grad((y * grad_y).sum(), [x])
        cases.append(
            {
                "irreps_scalars_arg": scalars,
                "act_scalars": act_s,
                "irreps_gates_arg": gates,
                "act_gates": act_g,
                "irreps_gated_arg": gated,
                "cst_scalars": cst_s,
                "cst_gates": cst_g,
                "irreps_in": str(gate.irreps_in),
                "irreps_out": str(gate.irreps_out),
                "irreps_scalars": str(gate.irreps_scalars),
                "irreps_gates": str(gate.irreps_gates),
                "irreps_gated": str(gate.irreps_gated),
                "gather": gather,
                "x": x,
                "y": y,
                "grad_y": grad_y,
                "grad_x": grad_x,
            }
        )
    return {"cases": cases}

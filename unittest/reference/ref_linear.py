"""Reference values of e3nn's ``o3.Linear`` (no biases) for ``test_e3nn_linear.cpp``.

Each case holds the module's description (irreps, path normalization, optional explicit
instructions), the path weights and weight count e3nn derives, and a forward/backward
evaluation on random weights and rows: ``y = linear(x)``, then autograd of ``sum(y * grad_y)``
with respect to ``x`` and the flat weight vector.
"""

import torch
from e3nn import o3

# (irreps_in, irreps_out, path_normalization, explicit (i_in, i_out) list or None)
CASES = [
    # model-spec example: alpha = 1/2 for 0e, 1/sqrt(8) for 1o
    ("4x0e+4x1o+4x1o", "3x0e+3x1o", "element", None),
    # non-uniform multiplicities, repeated irreps, outputs with no path (1e, 3o) stay zero
    ("5x0e+3x1o+2x2e+4x1o", "2x0e+4x1o+3x1e+2x2e+2x3o", "element", None),
    ("5x0e+3x1o+2x2e+4x1o", "2x0e+4x1o+3x1e+2x2e+2x3o", "path", None),
    # zero multiplicities in and out
    ("0x0e+3x1o+2x0e", "2x1o+0x0e+1x0e", "element", None),
    # MACE/NequIP-like node features
    ("16x0e+16x1o+16x2e", "16x0e+16x1o+16x2e", "element", None),
    ("16x0e+8x1o+8x1e+4x2e", "8x0e+8x1o", "element", None),
    # explicit instructions: block-sparse, and a repeated pair (two weight blocks)
    ("4x0e+3x0e", "4x0e+3x0e", "element", [(0, 0), (1, 1)]),
    ("4x0e+3x0e+2x1o", "5x0e+2x1o", "element", [(0, 0), (0, 0), (1, 0), (2, 1)]),
    ("4x0e+3x0e+2x1o", "5x0e+2x1o", "path", [(1, 0), (0, 0), (2, 1)]),
]


def generate(rng):
    """Evaluate every case with weights, rows and output gradients drawn from ``rng``."""
    cases = []
    for irreps_in, irreps_out, norm, pairs in CASES:
        lin = o3.Linear(irreps_in, irreps_out, instructions=pairs, path_normalization=norm)
        n_rows = 3
        weight = torch.tensor(rng.standard_normal(lin.weight_numel), requires_grad=True)
        x = torch.tensor(rng.standard_normal((n_rows, lin.irreps_in.dim)), requires_grad=True)
        grad_y = torch.tensor(rng.standard_normal((n_rows, lin.irreps_out.dim)))
        y = lin(x, weight)
        grad_x, grad_weight = torch.autograd.grad((y * grad_y).sum(), [x, weight])
        cases.append(
            {
                "irreps_in": str(lin.irreps_in),
                "irreps_out": str(lin.irreps_out),
                "path_normalization": norm,
                "pairs": pairs,
                "instructions": [[i.i_in, i.i_out, i.path_weight] for i in lin.instructions],
                "weight_numel": lin.weight_numel,
                "weight": weight,
                "x": x,
                "y": y,
                "grad_y": grad_y,
                "grad_x": grad_x,
                "grad_weight": grad_weight,
            }
        )
    return {"cases": cases}

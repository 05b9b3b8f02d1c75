"""Reference values of e3nn's ``o3.TensorProduct`` for ``test_e3nn_tensor_product.cpp``.

Each case holds the module's description (irreps, instructions as given, normalisation options,
shared or per-row weights), what e3nn derives from it (per-instruction normalisation coefficient,
path shape, weight count) and, on random rows, the forward ``out = tp(x1, x2, w)``, the autograd
backward of ``sum(out * grad_out)`` with respect to ``(x1, x2, w)``, and the autograd double
backward: with random cotangents ``(dx1, dx2, dw)`` of those gradients, the gradient of
``<grad_x1, dx1> + <grad_x2, dx2> + <grad_w, dw>`` with respect to ``(x1, x2, w, grad_out)``.
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
    instructions = sorted(instructions, key=lambda x: x[2])
    return irreps_out, instructions


def build_cases():
    """(name, TensorProduct, batch, constructor options) for every case."""
    cases = []

    def add(
        name,
        tp,
        batch,
        path_weights=None,
        irrep_norm="component",
        path_norm="element",
        variances=None,
    ):
        options = {
            "irrep_normalization": irrep_norm,
            "path_normalization": path_norm,
            "path_weights": path_weights or [1.0] * len(tp.instructions),
            "variances": variances or [[], [], []],
        }
        cases.append((name, tp, batch, options))

    # MACE interaction conv_tp: node features x spherical harmonics (lmax 3), per-edge weights.
    irreps1, irreps2 = "3x0e+3x1o+3x2e", "1x0e+1x1o+1x2e+1x3o"
    out, ins = mace_uvu(irreps1, irreps2, "0e+1o+2e+3o")
    add("mace_uvu", o3.TensorProduct(irreps1, irreps2, out, ins, shared_weights=False), 3)

    # NequIP-like: both parities in the node features, SH with lmax 2.
    irreps1, irreps2 = "2x0e+2x1o+2x1e+2x2e", "0e+1o+2e"
    out, ins = mace_uvu(irreps1, irreps2, "0e+0o+1o+1e+2e+2o")
    add("nequip_uvu", o3.TensorProduct(irreps1, irreps2, out, ins, shared_weights=False), 2)

    # FullyConnectedTensorProduct (uvw), non-uniform multiplicities, shared weights, every
    # normalisation variant.
    for irrep_norm, path_norm in [
        ("component", "element"),
        ("norm", "element"),
        ("component", "path"),
        ("norm", "path"),
        ("none", "none"),
    ]:
        tp = o3.FullyConnectedTensorProduct(
            "3x0e+2x1o+1x2e+2x1e",
            "2x0e+1x1o+1x2e",
            "2x0e+3x1o+2x2e+1x3o+1x1e",
            irrep_normalization=irrep_norm,
            path_normalization=path_norm,
        )
        add(f"fctp_{irrep_norm}_{path_norm}", tp, 3, irrep_norm=irrep_norm, path_norm=path_norm)

    # FCTP with per-row weights (MACE's skip_tp with a one-hot species input, NequIP's sc).
    tp = o3.FullyConnectedTensorProduct(
        "4x0e+2x1o+2x2e", "3x0e", "3x0e+2x1o+1x2e", shared_weights=False
    )
    add("fctp_per_row", tp, 3)

    # ElementwiseTensorProduct (uuu, no weights), l up to 4, multiplicities split by e3nn.
    tp = o3.ElementwiseTensorProduct("3x0e+2x1o+2x2e+1x4e", "2x1o+3x2e+2x3o+1x4e")
    add("elementwise_uuu", tp, 3)

    # Explicit instructions: every mode, with and without weights, explicit path weights (one of
    # them 0), several instructions into one output (element normalisation sums their fan-in), l
    # up to 4.
    irreps1 = "3x0e+2x1o+2x2e+2x3o+1x4e"
    irreps2 = "2x0e+2x1o+1x2e+1x4e"
    irreps_out = "2x0e+2x1o+2x2e+2x3o+1x1e+2x4e+3x0e"
    instructions = [
        (0, 0, 0, "uvw", True, 1.0),
        (1, 1, 0, "uvw", True, 0.5),
        (1, 1, 2, "uuw", True, 2.0),
        (2, 2, 2, "uvw", True, 1.0),
        (1, 0, 1, "uvu", True, 1.0),
        (1, 0, 1, "uuu", False, 3.0),
        (1, 0, 1, "uuu", True, 0.0),
        (2, 1, 1, "uvv", True, 1.0),
        (3, 1, 2, "uvu", True, 0.25),
        (3, 1, 2, "uvu", False, 1.0),
        (2, 1, 3, "uvv", True, 1.0),
        (4, 1, 3, "uvv", False, 1.0),
        (1, 1, 4, "uuw", False, 1.0),
        (4, 3, 5, "uvw", True, 1.0),
        (2, 3, 5, "uvu", False, 1.5),
        (0, 0, 6, "uvw", True, 1.0),
        (0, 0, 6, "uvu", True, 1.0),
    ]
    pw = [i[5] for i in instructions]
    for shared in (True, False):
        tp = o3.TensorProduct(
            irreps1,
            irreps2,
            irreps_out,
            instructions,
            shared_weights=shared,
            internal_weights=False,
        )
        add("explicit_shared" if shared else "explicit_per_row", tp, 3, path_weights=pw)
    variances = [
        [1.0, 2.0, 0.5, 1.5, 3.0],
        [0.5, 2.0, 1.0, 4.0],
        [1.0, 0.5, 2.0, 1.0, 3.0, 0.25, 2.0],
    ]
    for path_norm in ("element", "path"):
        tp = o3.TensorProduct(
            irreps1,
            irreps2,
            irreps_out,
            instructions,
            in1_var=variances[0],
            in2_var=variances[1],
            out_var=variances[2],
            path_normalization=path_norm,
            irrep_normalization="norm",
            internal_weights=False,
        )
        add(f"explicit_vars_{path_norm}", tp, 2, pw, "norm", path_norm, variances)
    return cases


def generate(rng):
    """Evaluate every case on rows, weights and cotangents drawn from ``rng``."""
    out_cases = []
    for name, tp, batch, options in build_cases():

        def rand(*shape):
            return torch.tensor(rng.standard_normal(shape), requires_grad=True)

        x1 = rand(batch, tp.irreps_in1.dim)
        x2 = rand(batch, tp.irreps_in2.dim)
        wshape = (tp.weight_numel,) if tp.shared_weights else (batch, tp.weight_numel)
        w = rand(*wshape)
        grad_out = rand(batch, tp.irreps_out.dim)
        has_w = tp.weight_numel > 0
        out = tp(x1, x2, w) if has_w else tp(x1, x2)
        inputs = [x1, x2, w] if has_w else [x1, x2]
        grads = torch.autograd.grad(out, inputs, grad_out, create_graph=True)
        if not has_w:
            grads = list(grads) + [torch.zeros(wshape)]
        dx1 = torch.tensor(rng.standard_normal(x1.shape))
        dx2 = torch.tensor(rng.standard_normal(x2.shape))
        dw = torch.tensor(rng.standard_normal(wshape))
        s = (grads[0] * dx1).sum() + (grads[1] * dx2).sum()
        if has_w:
            s = s + (grads[2] * dw).sum()
        targets = [x1, x2, grad_out] + ([w] if has_w else [])
        second = torch.autograd.grad(s, targets, allow_unused=True)
        second = [torch.zeros_like(t) if g is None else g for t, g in zip(targets, second)]
        if not has_w:
            second.append(torch.zeros(wshape))
        out_cases.append(
            {
                "name": name,
                "irreps_in1": str(tp.irreps_in1),
                "irreps_in2": str(tp.irreps_in2),
                "irreps_out": str(tp.irreps_out),
                # as given to the constructor: (i1, i2, i_out, mode, has_weight, path_weight)
                "instructions": [
                    [i.i_in1, i.i_in2, i.i_out, i.connection_mode, i.has_weight, pw]
                    for i, pw in zip(tp.instructions, options["path_weights"])
                ],
                "irrep_normalization": options["irrep_normalization"],
                "path_normalization": options["path_normalization"],
                "in1_var": options["variances"][0],
                "in2_var": options["variances"][1],
                "out_var": options["variances"][2],
                "shared_weights": tp.shared_weights,
                # what e3nn derives
                "coefficients": [i.path_weight for i in tp.instructions],
                "path_shapes": [list(i.path_shape) for i in tp.instructions],
                "weight_numel": tp.weight_numel,
                "batch": batch,
                "x1": x1,
                "x2": x2,
                "w": w,
                "out": out,
                "grad_out": grad_out,
                "grad_x1": grads[0],
                "grad_x2": grads[1],
                "grad_w": grads[2],
                "dx1": dx1,
                "dx2": dx2,
                "dw": dw,
                "dd_x1": second[0],
                "dd_x2": second[1],
                "dd_grad_out": second[2],
                "dd_w": second[3],
            }
        )
    return {"cases": out_cases}

"""Reference values of mace-torch's ``SymmetricContraction`` for the C++ product basis.

Read by ``test_pkg_symmetric_contraction.cpp``.

Each case builds the real module (``mace.modules.symmetric_contraction``, e3nn 0.4.4 U matrices
from ``U_matrix_real``, no cuequivariance) for the MACE irreps of a (max_ell, max_L, correlation)
choice: A over C x (0e+1o+...+max_ell), outputs C x (0e+1o+...+max_L). Every weight tensor gets
random values (the ``EmptyParam`` ones too, so that the mapping of ``weights.{j}`` onto the
correlation order is tested for every path), then the module maps random node features A
[n, C, D] and one-hot species to B, and autograd gives grad_A of sum(B * grad_B). Tensors are
dumped as the module holds them: U sparse (shape, flat indices, values), weights dense, with
the ``weights_*_zeroed`` buffers for the record.
"""

VENV = "mace"

import mace  # noqa: F401,E402  (sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD before e3nn 0.4.4 loads)
import torch  # noqa: E402
from e3nn import o3  # noqa: E402
from mace.modules.symmetric_contraction import SymmetricContraction  # noqa: E402

# (max_ell, max_L, correlation, num_elements, channels, nodes)
CASES = [
    (1, 0, 1, 2, 3, 4),
    (1, 1, 2, 3, 4, 5),
    # L = 2 from 0e+1o: U_matrix_1 is zero, which makes MACE zero `weights.0` (the nu = 2 path)
    (1, 2, 3, 2, 3, 4),
    (2, 0, 2, 1, 5, 3),
    (2, 1, 3, 3, 2, 4),
    (2, 2, 2, 2, 3, 3),
    # MP-0 medium shape (max_ell 3, max_L 1, correlation 3), channels past one 32-wide block
    (3, 1, 3, 2, 33, 3),
    (3, 2, 3, 2, 2, 3),
]


def sparse(t):
    flat = t.detach().reshape(-1)
    idx = torch.nonzero(flat, as_tuple=False).reshape(-1)
    return {"shape": list(t.shape), "index": idx, "value": flat[idx]}


def dense(t):
    return {"shape": list(t.shape), "values": t.detach().reshape(-1)}


def generate(rng):
    cases = []
    for max_ell, max_L, corr, n_el, C, n in CASES:
        sh = o3.Irreps.spherical_harmonics(max_ell)
        irreps_in = o3.Irreps([(C, ir) for _, ir in sh])
        irreps_out = o3.Irreps([(C, (l, (-1) ** l)) for l in range(max_L + 1)])
        module = SymmetricContraction(irreps_in, irreps_out, corr, num_elements=n_el)
        contractions = []
        with torch.no_grad():
            for contraction, (_, ir) in zip(module.contractions, irreps_out):
                for p in contraction.parameters():
                    p.copy_(torch.tensor(rng.standard_normal(tuple(p.shape))))
                buffers = dict(contraction.named_buffers())
                params = dict(contraction.named_parameters())
                tensors = {k: sparse(v) for k, v in buffers.items() if k.startswith("U_matrix_")}
                tensors.update({k: dense(v) for k, v in params.items()})
                contractions.append(
                    {
                        "ir_out": str(ir),
                        "correlation": contraction.correlation,
                        "tensors": tensors,
                        "zeroed": {k: bool(v) for k, v in buffers.items() if k.endswith("_zeroed")},
                    }
                )
        D = sh.dim
        species = rng.integers(0, n_el, size=n)
        A = torch.tensor(rng.standard_normal((n, C, D)), requires_grad=True)
        node_attrs = torch.nn.functional.one_hot(torch.tensor(species), n_el).double()
        B = module(A, node_attrs)
        grad_B = torch.tensor(rng.standard_normal(tuple(B.shape)))
        (grad_A,) = torch.autograd.grad((B * grad_B).sum(), [A])
        cases.append(
            {
                "max_ell": max_ell,
                "max_L": max_L,
                "correlation": corr,
                "irreps_in": str(irreps_in),
                "irreps_out": str(irreps_out),
                "num_elements": n_el,
                "contractions": contractions,
                "species": species,
                "A": A,
                "B": B,
                "grad_B": grad_B,
                "grad_A": grad_A,
            }
        )
    return {"cases": cases}

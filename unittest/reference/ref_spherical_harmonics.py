"""Reference values of e3nn's ``o3.spherical_harmonics`` for ``test_e3nn_spherical_harmonics.cpp``.

The call is ``spherical_harmonics(list(range(lmax + 1)), v, normalize=True,
normalization="component")`` for every lmax e3nn implements (0..12), on random vectors of
lengths spread over six decades (the input is normalised inside) and on special vectors: the
axes, the zero vector and a vector shorter than ``F.normalize``'s eps = 1e-12, where e3nn
divides by eps instead of the norm. The gradient is torch's autograd Jacobian dY_i/dv_a.
"""

import torch
from e3nn import o3

LMAX = 12
N_RANDOM = 40
SPECIAL = [
    [1.0, 0.0, 0.0],
    [0.0, -2.0, 0.0],
    [0.0, 0.0, 0.5],
    [0.0, 0.0, 0.0],
    [3e-13, -1e-13, 2e-13],
    [1e-6, 2e-6, -3e-6],
]


def _sh(lmax, v):
    """e3nn's Y_0..Y_lmax of the rows of ``v``, as the models call it."""
    ls = list(range(lmax + 1))
    return o3.spherical_harmonics(ls, v, normalize=True, normalization="component")


def generate(rng):
    """Draw the random vectors from ``rng`` and evaluate e3nn on them for every lmax."""
    direction = rng.standard_normal((N_RANDOM, 3))
    length = 10.0 ** rng.uniform(-3.0, 3.0, size=(N_RANDOM, 1))
    vectors = torch.cat(
        [torch.tensor(direction * length), torch.tensor(SPECIAL, dtype=torch.float64)]
    )
    per_lmax = []
    for lmax in range(LMAX + 1):
        v = vectors.clone().requires_grad_(True)
        values = _sh(lmax, v)
        # Row n depends only on vector n, so one backward pass per output index k gives
        # dY[n, k] / dv[n, :] for every n at once: the Jacobian, [n, (lmax+1)^2, 3].
        # (For lmax = 0 the output is a constant with no graph: its Jacobian is zero.)
        jac = torch.stack(
            [
                torch.autograd.grad(values[:, k].sum(), v, retain_graph=True)[0]
                if values.requires_grad
                else torch.zeros_like(v)
                for k in range(values.shape[1])
            ],
            dim=1,
        )
        per_lmax.append({"lmax": lmax, "values": values.detach(), "gradients": jac})
    return {"vectors": vectors, "per_lmax": per_lmax}

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
    return o3.spherical_harmonics(list(range(lmax + 1)), v, normalize=True, normalization="component")


def generate(rng):
    """Draw the random vectors from ``rng`` and evaluate e3nn on them for every lmax."""
    direction = rng.standard_normal((N_RANDOM, 3))
    length = 10.0 ** rng.uniform(-3.0, 3.0, size=(N_RANDOM, 1))
    vectors = torch.cat(
        [torch.tensor(direction * length), torch.tensor(SPECIAL, dtype=torch.float64)]
    )
    per_lmax = []
    for lmax in range(LMAX + 1):
        values = _sh(lmax, vectors)
        # Jacobian of each row with respect to its own vector only: [n, (lmax+1)^2, 3].
        jac = torch.stack([torch.autograd.functional.jacobian(lambda x: _sh(lmax, x), v) for v in vectors])
        per_lmax.append({"lmax": lmax, "values": values, "gradients": jac})
    return {"vectors": vectors, "per_lmax": per_lmax}

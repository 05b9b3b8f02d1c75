"""Reference values of e3nn's ``Irreps.D_from_matrix`` for ``test_e3nn_wigner_d.cpp``.

Random rotations from ``rng`` (proper ones, and improper ones -R), with e3nn's representation
matrix of every single irrep ``1x(l, p)``, l = 0..12, p = +-1, and of a few direct sums with
multiplicities. e3nn builds D from Euler angles and matrix exponentials of the so(3)
generators, an entirely different route from Clebsch's, and is accurate to ~1e-14 at l = 12.
"""

import numpy as np
import torch
from e3nn import o3

LMAX = 12
N_ROTATIONS = 2
SUMS = ["2x0e+1x0o+1x1o+2x1e+1x2e+1x2o+1x3o", "3x1o+0x2e+2x4e+1x5o", "1x6o+1x9e"]


def _random_rotation(rng):
    """Haar rotation: QR of a Gaussian matrix, signs fixed, det +1."""
    q, r = np.linalg.qr(rng.standard_normal((3, 3)))
    q = q * np.sign(np.diag(r))
    if np.linalg.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return torch.tensor(q)


def generate(rng):
    """Draw rotations from ``rng`` and evaluate e3nn's D for each irrep and sum."""
    cases = []
    for _ in range(N_ROTATIONS):
        rot = _random_rotation(rng)
        for matrix in (rot, -rot):
            single = [
                {"l": l, "p": p, "D": o3.Irrep(l, p).D_from_matrix(matrix)}
                for l in range(LMAX + 1)
                for p in (1, -1)
            ]
            sums = [{"irreps": text, "D": o3.Irreps(text).D_from_matrix(matrix)} for text in SUMS]
            det = float(torch.det(matrix))
            cases.append({"R": matrix, "det": det, "single": single, "sums": sums})
    return {"cases": cases}

"""Reference values of e3nn's ``o3.wigner_3j`` for ``test_e3nn_clebsch_gordan.cpp``.

Every valid triple ``(l1, l2, l3)`` with all ``l <= 8``, and a selection of larger triples up
to ``l = 12`` (e3nn's own limit for spherical harmonics, and Clebsch's ``kMaxL``). Most entries
of a Wigner-3j tensor are zero, so each tensor is stored sparsely: the flat row-major indices of
its non-zero entries and their values, float64.
"""

import torch
from e3nn import o3

LMAX_ALL = 8
# Larger triples: the corners and the centre of the l <= 12 range, the couplings the spherical
# harmonics and Wigner-D recursions use (l, 1, l+1), and mixed even/odd sums.
EXTRA = [
    (9, 1, 10),
    (10, 1, 11),
    (11, 1, 12),
    (12, 1, 11),
    (1, 11, 12),
    (9, 9, 9),
    (10, 10, 10),
    (12, 12, 12),
    (12, 12, 11),
    (12, 12, 0),
    (0, 12, 12),
    (12, 6, 6),
    (12, 6, 7),
    (7, 12, 6),
    (10, 5, 7),
    (11, 9, 4),
    (12, 10, 3),
    (9, 12, 10),
]


def triples():
    """All (l1, l2, l3) with l <= LMAX_ALL allowed by the triangle rule, then EXTRA."""
    out = []
    for l1 in range(LMAX_ALL + 1):
        for l2 in range(LMAX_ALL + 1):
            for l3 in range(abs(l1 - l2), min(l1 + l2, LMAX_ALL) + 1):
                out.append((l1, l2, l3))
    return out + EXTRA


def generate(rng):
    """Compute the tensors (``rng`` is unused: the inputs are fixed)."""
    del rng
    cases = []
    for l1, l2, l3 in triples():
        c = o3.wigner_3j(l1, l2, l3, dtype=torch.float64).reshape(-1)
        index = torch.nonzero(c).reshape(-1)
        cases.append({"l": [l1, l2, l3], "index": index.tolist(), "value": c[index]})
    return {"triples": cases}

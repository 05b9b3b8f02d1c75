"""Reference behaviour of e3nn's ``o3.Irreps`` for ``test_e3nn_irreps.cpp``.

For each accepted string: the canonical text, dim, number of irreps, lmax (None where e3nn
raises, i.e. when every multiplicity is zero), the start of each
block, ``sort()`` (irreps, p, inv), ``simplify()``, ``regroup()`` and
``remove_zero_multiplicities()``. Strings that e3nn rejects are listed separately; Clebsch must
reject them too. ``Irreps.spherical_harmonics`` is recorded for a few lmax and both parities.
"""

from e3nn import o3

ACCEPTED = [
    "",
    "   ",
    "0e",
    "1x0e",
    "1o",
    "16x0e+16x1o+16x2e",
    "128x0e + 64x1o + 32x2e",
    " 2 x 1o + 3x0e ",
    "1y+2y+3y",
    "0y+0e+0o",
    "2o + 1e + 0e + 1e",
    "1e + 0e + 1e + 0x2e",
    "1x0e+0x1o+1x0e",
    "3x1e+2x1e",
    "1e + 1e + 0e + 1e",
    "0x0e",
    "0x0e+0x1o",
    "5x3o+2x3e+1x3o+4x2e+7x0o+1x12e+2x12o+3x11y",
    "01x01e",
    "96x0e+32x1o+32x2e",
    "32x0e+64x0e+32x1o+32x2e",
]

REJECTED = [
    "x0e",
    "1x",
    "-1x0e",
    "1x-1e",
    "1e+",
    "+1e",
    "1e++1o",
    "1X0e",
    "1x0E",
    "1.0x0e",
    "1.5x0e",
    "1x1z",
    "1x1",
    "e",
    "1xx1e",
    "2x1e,3x0e",
]


def _lmax(irreps):
    """e3nn's lmax, which counts only irreps with a non-zero multiplicity (None: e3nn raises)."""
    try:
        return irreps.lmax
    except ValueError:
        return None


def describe(irreps):
    """Everything the C++ side checks about one Irreps."""
    s = irreps.sort()
    return {
        "str": str(irreps),
        "dim": irreps.dim,
        "num_irreps": irreps.num_irreps,
        "lmax": _lmax(irreps),
        "offsets": [sl.start for sl in irreps.slices()] + [irreps.dim],
        "items": [[mul, ir.l, ir.p] for mul, ir in irreps],
        "sorted": str(s.irreps),
        "p": list(s.p),
        "inv": list(s.inv),
        "simplify": str(irreps.simplify()),
        "regroup": str(irreps.regroup()),
        "remove_zero_multiplicities": str(irreps.remove_zero_multiplicities()),
    }


def generate(rng):
    """Parse every string with e3nn (``rng`` is unused: the inputs are fixed)."""
    del rng
    accepted = [dict(text=text, **describe(o3.Irreps(text))) for text in ACCEPTED]
    for text in REJECTED:
        try:
            o3.Irreps(text)
        except ValueError:
            continue
        raise RuntimeError(f"e3nn accepts {text!r}: move it to ACCEPTED")
    sh = [
        {"lmax": lmax, "p": p, "str": str(o3.Irreps.spherical_harmonics(lmax, p))}
        for lmax in range(5)
        for p in (-1, 1)
    ]
    return {"accepted": accepted, "rejected": REJECTED, "spherical_harmonics": sh}

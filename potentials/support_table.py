"""The table of mace-torch module classes and whether the exporter supports them, generated
from the exporter's own lists (``read_mace.SUPPORTED_*``, ``read_mace_arch``), so that
``potentials/README.md`` cannot drift from the code (``tests/test_support_table.py`` checks
both the README block and that every class of the installed ``mace.modules`` is listed).

Run in the mace venv:  python -m potentials.support_table  (prints the Markdown block)

Examples
--------
>>> # print(markdown())
"""

from __future__ import annotations

from typing import Dict, List, Tuple

#: mace-torch 0.3.16 ``mace.modules`` classes by role (what the README table lists).
MACE_CLASSES: Dict[str, Tuple[str, ...]] = {
    "model": (
        "MACE",
        "ScaleShiftMACE",
        "AtomicDipolesMACE",
        "AtomicDielectricMACE",
        "EnergyDipolesMACE",
        "PolarMACE",
    ),
    "interaction": (
        "RealAgnosticInteractionBlock",
        "RealAgnosticResidualInteractionBlock",
        "RealAgnosticDensityInteractionBlock",
        "RealAgnosticDensityResidualInteractionBlock",
        "RealAgnosticResidualNonLinearInteractionBlock",
        "RealAgnosticAttResidualInteractionBlock",
    ),
    "readout": (
        "LinearReadoutBlock",
        "NonLinearReadoutBlock",
        "NonLinearBiasReadoutBlock",
        "GeneralNonLinearBiasReadoutBlock",
        "LinearDipoleReadoutBlock",
        "NonLinearDipoleReadoutBlock",
        "LinearDipolePolarReadoutBlock",
        "NonLinearDipolePolarReadoutBlock",
    ),
    "radial": (
        "BesselBasis",
        "GaussianBasis",
        "ChebychevBasis",
        "PolynomialCutoff",
        "AgnesiTransform",
        "SoftTransform",
        "ZBLBasis",
    ),
    "other": (
        "GenericJointEmbedding",
        "GatedEquivariantBlock",
        "RadialMLP",
        "LinearNodeEmbeddingBlock",
        "EquivariantProductBasisBlock",
        "AtomicEnergiesBlock",
        "RadialEmbeddingBlock",
        "ScaleShiftBlock",
    ),
}
#: Structural blocks every supported model is made of (read as part of their parents).
_STRUCTURAL = {
    "LinearNodeEmbeddingBlock",
    "EquivariantProductBasisBlock",
    "AtomicEnergiesBlock",
    "RadialEmbeddingBlock",
    "ScaleShiftBlock",
}


def rows() -> List[Tuple[str, str, str]]:
    """``(role, class, status)`` for every class of :data:`MACE_CLASSES`."""
    from . import read_mace, read_mace_arch

    supported = set(read_mace.SUPPORTED_MODELS)
    supported |= set(read_mace.SUPPORTED_INTERACTIONS) | set(read_mace_arch.NONLINEAR_INTERACTIONS)
    supported |= set(read_mace.SUPPORTED_READOUTS) | set(read_mace.SUPPORTED_RADIAL)
    supported |= set(read_mace.SUPPORTED_OTHER) | _STRUCTURAL
    out = []
    for role, classes in MACE_CLASSES.items():
        for cls in classes:
            if cls in supported:
                status = "supported"
            elif cls in read_mace_arch.REFUSED:
                status = f"refused: {read_mace_arch.REFUSED[cls]}"
            else:
                status = "refused by class name"
            out.append((role, cls, status))
    return out


def markdown() -> str:
    """The README block (between the ``support-table`` markers)."""
    lines = ["| role | mace-torch class | exporter |", "|---|---|---|"]
    lines += [f"| {r} | `{c}` | {s} |" for r, c, s in rows()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")

"""Random-weight models in the architectures of mace-torch's newer foundation models, scaled
down for CI (shared by the pytest checks and by ``unittest/make_arch_fixtures.py``).

Which blocks each case combines, and where mace-torch says so (mace-torch 0.3.16 source):

- ``mh1_style``: MACE-MH-0/MH-1 (``foundations_models.py`` ``mh-0``/``mh-1`` URLs). The MH
  model family is what ``tests/test_polar_models.py::_build_full_model`` builds PolarMACE on:
  ``RealAgnosticResidualNonLinearInteractionBlock`` as first and later interaction, 3
  interactions, ``hidden_irreps`` 512x0e+512x1o+512x2e, ``edge_irreps`` 128x0e+128x1o+128x2e
  (narrower than the hidden features), ``max_ell`` 3, correlation 3, r_max 6, 8 Bessel
  functions, cutoff p 6, radial_MLP [64,64,64]. ``scripts_utils.extract_config_mace_model``
  reads ``readout_cls`` from the model (``NonLinearBiasReadoutBlock`` for these models) and
  ``use_agnostic_product``; the MH models are multi-head (one head exported). Scaled down here
  to 2 layers, 4 channels (2 on edges), radial MLP [8, 8].
- ``omol_charged``: an OMOL-style charged model: the same blocks plus ``embedding_specs`` with
  categorical per-graph ``total_charge`` (with an offset) and ``total_spin``
  (``arg_parser.py --embedding_specs`` help text, ``tests/test_embedding_train.py``) and
  ``use_embedding_readout``; H/C/O; ``apply_cutoff=False`` (cutoff on the TP weights and the
  density).
- ``gaussian_basis``, ``chebyshev_basis``: ``radial_type`` gaussian / chebyshev
  (``radial.py::GaussianBasis``, ``ChebychevBasis``) on one non-linear layer.

Examples
--------
>>> # model = build_arch_case("mh1_style")
"""

from __future__ import annotations

from typing import Any, Dict

from potentials.tests.mace_factory import build_mace

_NONLINEAR = "RealAgnosticResidualNonLinearInteractionBlock"

ARCH_CASES: Dict[str, Dict[str, Any]] = {
    "mh1_style": dict(
        interaction_cls=_NONLINEAR,
        interaction_cls_first=_NONLINEAR,
        num_interactions=2,
        hidden_irreps="4x0e+4x1o+4x2e",
        edge_irreps="2x0e+2x1o+2x2e",
        max_ell=3,
        correlation=3,
        r_max=4.5,
        num_bessel=8,
        num_polynomial_cutoff=6,
        radial_MLP=[8, 8],
        MLP_irreps="4x0e",
        readout_cls="NonLinearBiasReadoutBlock",
        use_agnostic_product=True,
        heads=["omat_pbe", "spice_wB97M"],
    ),
    "omol_charged": dict(
        interaction_cls=_NONLINEAR,
        interaction_cls_first=_NONLINEAR,
        num_interactions=2,
        hidden_irreps="4x0e+4x1o",
        max_ell=2,
        correlation=2,
        apply_cutoff=False,
        radial_MLP=[8, 8],
        MLP_irreps="4x0e",
        readout_cls="NonLinearBiasReadoutBlock",
        atomic_numbers=[1, 6, 8],
        embedding_specs={
            "total_charge": {
                "type": "categorical",
                "per": "graph",
                "in_dim": 1,
                "emb_dim": 4,
                "num_classes": 21,
                "offset": 10,
            },
            "total_spin": {
                "type": "categorical",
                "per": "graph",
                "in_dim": 1,
                "emb_dim": 4,
                "num_classes": 11,
            },
        },
        use_embedding_readout=True,
    ),
}
# mace-torch's other radial bases (arg_parser.py --radial_type gaussian|chebyshev), on the same
# non-linear blocks, one small layer each.
for _basis in ("gaussian", "chebyshev"):
    ARCH_CASES[f"{_basis}_basis"] = dict(
        interaction_cls=_NONLINEAR,
        interaction_cls_first=_NONLINEAR,
        num_interactions=1,
        hidden_irreps="4x0e+4x1o",
        max_ell=1,
        correlation=2,
        radial_type=_basis,
        radial_MLP=[8],
        MLP_irreps="4x0e",
        readout_cls="NonLinearBiasReadoutBlock",
    )
# T_n of the raw distance grows like (2r)^n: 3 functions keep the random model's arithmetic
# conditioned well enough for 1e-10 (with 8, T_8(4.5) ~ 1e7 and round-off alone reaches 1e-9).
ARCH_CASES["chebyshev_basis"]["num_bessel"] = 3
ARCH_HEADS = {"mh1_style": "spice_wB97M"}


def build_arch_case(name: str, seed: int = 11):
    """The random-weight model of case ``name`` (float64)."""
    from e3nn import o3
    from mace import modules

    kw = dict(ARCH_CASES[name])
    kw["readout_cls"] = getattr(modules, kw["readout_cls"])
    if "edge_irreps" in kw:
        kw["edge_irreps"] = o3.Irreps(kw["edge_irreps"])
    return build_mace(seed=seed, **kw)

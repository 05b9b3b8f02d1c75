"""Build small MACE models with random weights through the real mace-torch constructors.

Examples
--------
>>> # model = build_mace(correlation=2, max_ell=2)
"""

from __future__ import annotations

from typing import Any, Dict

import numpy as np
import torch


def build_mace(
    seed: int = 0, model: str = "ScaleShiftMACE", dtype=torch.float64, **overrides: Any
) -> torch.nn.Module:
    """A randomly initialised MACE model; ``overrides`` are MACE constructor arguments,
    with ``interaction_cls``/``interaction_cls_first`` given as class names and
    ``hidden_irreps``/``MLP_irreps`` as strings. Weights are perturbed away from their
    initial values so that no path is accidentally zero (e.g. symmetric-contraction
    weights that MACE initialises small)."""
    import mace  # noqa: F401  (must precede e3nn: sets TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD)
    from e3nn import o3
    from mace import modules

    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        torch.manual_seed(seed)
        species = overrides.pop("atomic_numbers", [29, 79])
        heads = overrides.get("heads")
        n_heads = len(heads) if heads else 1
        kw: Dict[str, Any] = dict(
            r_max=4.5,
            num_bessel=6,
            num_polynomial_cutoff=5,
            max_ell=2,
            interaction_cls="RealAgnosticResidualInteractionBlock",
            interaction_cls_first="RealAgnosticResidualInteractionBlock",
            num_interactions=2,
            hidden_irreps="6x0e+6x1o",
            MLP_irreps="8x0e",
            avg_num_neighbors=12.0,
            correlation=2,
            gate=torch.nn.functional.silu,
            radial_MLP=[8, 8],
        )
        kw.update(overrides)
        kw["num_elements"] = len(species)
        kw["atomic_numbers"] = species
        rng = np.random.default_rng(seed)
        e0 = rng.normal(size=(n_heads, len(species))) - 3.0
        kw["atomic_energies"] = e0[0] if n_heads == 1 else e0
        kw["interaction_cls"] = modules.interaction_classes[kw["interaction_cls"]]
        kw["interaction_cls_first"] = modules.interaction_classes[kw["interaction_cls_first"]]
        kw["hidden_irreps"] = o3.Irreps(kw["hidden_irreps"])
        kw["MLP_irreps"] = o3.Irreps(kw["MLP_irreps"])
        if model == "ScaleShiftMACE":
            scale = 1.3 if n_heads == 1 else np.linspace(1.1, 1.5, n_heads)
            shift = 0.2 if n_heads == 1 else np.linspace(-0.3, 0.3, n_heads)
            net = modules.ScaleShiftMACE(atomic_inter_scale=scale, atomic_inter_shift=shift, **kw)
        elif model == "MACE":
            net = modules.MACE(**kw)
        else:
            raise ValueError(f"unknown model {model!r}")
        with torch.no_grad():
            for p in net.parameters():
                if p.requires_grad and p.numel() > 0:
                    p.add_(0.3 * torch.randn_like(p))
        return net.eval()
    finally:
        torch.set_default_dtype(old)

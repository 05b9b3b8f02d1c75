"""Reference values of mace-torch's and nequip's radial modules for ``test_pkg_radial.cpp``.

mace (``generate_mace``): ``RadialEmbeddingBlock`` (Bessel basis, polynomial cutoff, optional
Agnesi transform, apply_cutoff on/off; some cases with trained-looking buffers: perturbed
``bessel_weights``, ``prefactor`` and Agnesi ``q``, ``p``, ``a``) and ``ZBLBasis`` (default and
perturbed ``c``, ``a_exp``, ``a_prefactor``), on random graphs over several species.
nequip (``generate_nequip``): ``EdgeLengthNormalizer`` (global and per-edge-type cutoffs) ->
``BesselEdgeLengthEncoding`` (with its ``PolynomialCutoff``; trainable weights perturbed) ->
``ApplyFactor`` (2 pi / r_max^2), and the ``ZBL`` pair potential.

Every case dumps the modules' buffers, the random edge lengths and species, the outputs, and
autograd derivatives with respect to the edge lengths: per feature d feats_n / dr (one backward
per feature; each edge's outputs depend on its own length only) and, for ZBL, d(sum of node
energies)/dr, which is the edge energy's derivative. All float64.
"""

VENV = ("mace", "nequip")

import math  # noqa: E402

import torch  # noqa: E402


def _per_feature_grads(out, r):
    """d out[:, n] / d r[e] for every feature n (out: [E, N] or [E, 1]), as [E, N]."""
    cols = []
    for n in range(out.shape[1]):
        (g,) = torch.autograd.grad(out[:, n].sum(), [r], retain_graph=True, allow_unused=True)
        cols.append(torch.zeros_like(r.detach().reshape(-1)) if g is None else g.reshape(-1))
    return torch.stack(cols, dim=1)


def _graph(rng, n_nodes, n_edges):
    sender = rng.integers(0, n_nodes, size=n_edges)
    receiver = (sender + rng.integers(1, n_nodes, size=n_edges)) % n_nodes  # no self-edges
    return torch.tensor(sender), torch.tensor(receiver)


# --------------------------------------------------------------------------------------------
# mace


def generate_mace(rng):
    import mace  # noqa: F401  (before e3nn 0.4.4 loads its constants)
    from mace.modules.blocks import RadialEmbeddingBlock
    from mace.modules.radial import ZBLBasis

    atomic_numbers = torch.tensor([1, 6, 8, 29, 79])
    n_el = len(atomic_numbers)

    # (r_max, num_bessel, p, distance_transform, apply_cutoff, perturb buffers)
    radial_cases = [
        (5.0, 8, 5, "None", True, False),
        (6.0, 10, 5, "Agnesi", True, False),
        (6.0, 10, 5, "Agnesi", False, False),
        (4.5, 6, 6, "None", False, False),
        (4.0, 7, 3, "Agnesi", True, True),
        (5.5, 8, 5, "None", True, True),
    ]
    radial = []
    for r_max, num_bessel, p, transform, apply_cutoff, perturb in radial_cases:
        block = RadialEmbeddingBlock(
            r_max=r_max,
            num_bessel=num_bessel,
            num_polynomial_cutoff=p,
            distance_transform=transform,
            apply_cutoff=apply_cutoff,
        )
        if perturb:
            with torch.no_grad():
                w = block.bessel_fn.bessel_weights
                w.copy_(w * torch.tensor(rng.uniform(0.8, 1.2, size=tuple(w.shape))))
                block.bessel_fn.prefactor.fill_(float(rng.uniform(0.5, 1.0)))
                if transform == "Agnesi":
                    dt = block.distance_transform
                    dt.q.fill_(float(rng.uniform(0.7, 1.5)))
                    dt.p.fill_(float(rng.uniform(3.0, 6.0)))
                    dt.a.fill_(float(rng.uniform(0.7, 1.5)))
        n_nodes, n_edges = 8, 64
        species = torch.tensor(rng.integers(0, n_el, size=n_nodes))
        node_attrs = torch.nn.functional.one_hot(species, n_el).double()
        sender, receiver = _graph(rng, n_nodes, n_edges)
        edge_index = torch.stack([sender, receiver])
        r = torch.tensor(rng.uniform(0.3, 1.05 * r_max, size=(n_edges, 1)), requires_grad=True)
        feats, cutoff = block(r, node_attrs, edge_index, atomic_numbers)
        case = {
            "r_max": r_max,
            "num_bessel": num_bessel,
            "distance_transform": transform,
            "apply_cutoff": apply_cutoff,
            "bessel_weights": block.bessel_fn.bessel_weights,
            "prefactor": block.bessel_fn.prefactor,
            "cutoff_r_max": block.cutoff_fn.r_max,
            "cutoff_p": block.cutoff_fn.p,
            "species": species,
            "sender": sender,
            "receiver": receiver,
            "r": r.reshape(-1),
            "feats": feats,
            "dfeats_dr": _per_feature_grads(feats, r),
        }
        if transform == "Agnesi":
            dt = block.distance_transform
            case.update(
                {
                    "agnesi_q": dt.q,
                    "agnesi_p": dt.p,
                    "agnesi_a": dt.a,
                    "covalent_radii": dt.covalent_radii,
                }
            )
        if cutoff is not None:
            case["cutoff"] = cutoff.reshape(-1)
            case["dcutoff_dr"] = _per_feature_grads(cutoff, r).reshape(-1)
        radial.append(case)

    # (p, perturb buffers, r range as fractions of the pair's covalent cutoff)
    zbl_cases = [(6, False, 0.25, 1.1), (5, False, 0.5, 1.05), (6, True, 0.3, 1.1)]
    zbl = []
    for p, perturb, lo, hi in zbl_cases:
        module = ZBLBasis(p=p)
        if perturb:
            with torch.no_grad():
                module.c.copy_(module.c * torch.tensor(rng.uniform(0.8, 1.2, size=4)))
                module.a_exp.fill_(float(rng.uniform(0.25, 0.35)))
                module.a_prefactor.fill_(float(rng.uniform(0.4, 0.5)))
        n_nodes, n_edges = 10, 80
        species = torch.tensor(rng.integers(0, n_el, size=n_nodes))
        node_attrs = torch.nn.functional.one_hot(species, n_el).double()
        sender, receiver = _graph(rng, n_nodes, n_edges)
        z = atomic_numbers[species]
        r_cut = module.covalent_radii[z[sender]] + module.covalent_radii[z[receiver]]
        frac = torch.tensor(rng.uniform(lo, hi, size=n_edges))
        r = (frac * r_cut).detach().reshape(-1, 1).requires_grad_(True)
        energy = module(r, node_attrs, torch.stack([sender, receiver]), atomic_numbers)
        (grad_r,) = torch.autograd.grad(energy.sum(), [r])
        zbl.append(
            {
                "p": module.p,
                "c": module.c,
                "a_exp": module.a_exp,
                "a_prefactor": module.a_prefactor,
                "covalent_radii": module.covalent_radii,
                "species": species,
                "sender": sender,
                "receiver": receiver,
                "r": r.reshape(-1),
                "node_energy": energy,
                "grad_r": grad_r.reshape(-1),
            }
        )
    return {"atomic_numbers": atomic_numbers, "radial": radial, "zbl": zbl}


# --------------------------------------------------------------------------------------------
# nequip


def generate_nequip(rng):
    from nequip.data import AtomicDataDict
    from nequip.nn.embedding import BesselEdgeLengthEncoding, EdgeLengthNormalizer, PolynomialCutoff
    from nequip.nn.misc import ApplyFactor
    from nequip.nn.pair_potential import ZBL

    type_names = ["H", "C", "O", "Cu"]
    species = ["H", "C", "O", "Cu"]
    # (r_max, num_bessels, p, trainable, per_edge_type_cutoff)
    cases_spec = [
        (4.0, 8, 6, False, None),
        (5.0, 6, 6, True, None),
        (5.0, 8, 4, True, {"H": 3.0, "C": {"H": 3.5, "C": 4.5, "Cu": 4.0}, "Cu": 4.8}),
    ]
    cases = []
    for r_max, num_bessels, p, trainable, per_type in cases_spec:
        norm = EdgeLengthNormalizer(
            r_max=r_max, type_names=type_names, per_edge_type_cutoff=per_type
        )
        bessel = BesselEdgeLengthEncoding(
            cutoff=PolynomialCutoff(p),
            num_bessels=num_bessels,
            trainable=trainable,
            irreps_in=norm.irreps_out,
        )
        factor = ApplyFactor(
            in_field=AtomicDataDict.EDGE_EMBEDDING_KEY,
            factor=(2 * math.pi) / (r_max * r_max),
            irreps_in=bessel.irreps_out,
        )
        zbl = ZBL(
            type_names=type_names,
            chemical_species=species,
            units="metal",
            polynomial_cutoff_p=p,
            irreps_in=norm.irreps_out,
        )
        if trainable:
            with torch.no_grad():
                w = bessel.bessel_weights
                w.copy_(w * torch.tensor(rng.uniform(0.8, 1.2, size=tuple(w.shape))))
        n_nodes, n_edges = 10, 80
        atom_types = torch.tensor(rng.integers(0, len(type_names), size=n_nodes))
        center, neighbor = _graph(rng, n_nodes, n_edges)
        r = torch.tensor(rng.uniform(0.15, 1.05 * r_max, size=(n_edges, 1)), requires_grad=True)
        data = {
            AtomicDataDict.POSITIONS_KEY: torch.zeros(n_nodes, 3),
            AtomicDataDict.ATOM_TYPE_KEY: atom_types,
            AtomicDataDict.EDGE_INDEX_KEY: torch.stack([center, neighbor]),
            # Given vectors and lengths are used as they are (with_edge_vectors_), so the
            # lengths are the autograd leaf.
            AtomicDataDict.EDGE_VECTORS_KEY: torch.zeros(n_edges, 3),
            AtomicDataDict.EDGE_LENGTH_KEY: r,
        }
        data = factor(bessel(norm(data)))
        data = zbl(data)
        feats = data[AtomicDataDict.EDGE_EMBEDDING_KEY]
        cutoff = data[AtomicDataDict.EDGE_CUTOFF_KEY]
        energy = data[AtomicDataDict.PER_ATOM_ENERGY_KEY].reshape(-1)
        (grad_r,) = torch.autograd.grad(energy.sum(), [r], retain_graph=True)
        cases.append(
            {
                "r_max": r_max,
                "num_types": len(type_names),
                "rmax_recip": norm._rmax_recip.reshape(-1),
                "bessel_weights": bessel.bessel_weights.reshape(-1),
                "factor": factor.factor,
                "p": p,
                "zbl_atomic_numbers": zbl.atomic_numbers,
                "zbl_qqr2exesquare": zbl._qqr2exesquare,
                "zbl_p": zbl.cutoff.p,
                "atom_types": atom_types,
                "center": center,
                "neighbor": neighbor,
                "r": r.reshape(-1),
                "norm_length": data[AtomicDataDict.NORM_LENGTH_KEY].reshape(-1),
                "feats": feats,
                "dfeats_dr": _per_feature_grads(feats, r),
                "cutoff": cutoff.reshape(-1),
                "dcutoff_dr": _per_feature_grads(cutoff, r).reshape(-1),
                "node_energy": energy,
                "zbl_grad_r": grad_r.reshape(-1),
            }
        )
    return {"type_names": type_names, "cases": cases}

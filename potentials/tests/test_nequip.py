"""Export freshly built random-weight NequIP models and check the files with the NumPy reference.

Run in the nequip venv:  ~/.cache/clebsch/venv-nequip/bin/python -m pytest potentials/tests -q
"""

import numpy as np
import pytest

import nequip  # noqa: E402,F401  (the nequip venv; CMake runs this file there only)
import torch  # noqa: E402

from potentials import numpy_reference as nr  # noqa: E402
from potentials import read_nequip, write  # noqa: E402

TOL = 1e-10

ZBL = {
    "_target_": "nequip.nn.pair_potential.ZBL",
    "units": "metal",
    "chemical_species": ["Cu", "Au"],
}

CASES = {
    # parity on (0o/1e/2o features: odd l1+l2+l3 paths), per-edge-type cutoffs, ZBL,
    # per-type avg_num_neighbors, per-type scale/shift
    "parity_zbl_per_edge_cutoff": dict(
        l_max=2,
        parity=True,
        num_layers=2,
        num_features=4,
        avg_num_neighbors={"Cu": 10.0, "Au": 12.0},
        per_type_energy_scales={"Cu": 1.2, "Au": 0.8},
        per_type_energy_shifts={"Cu": -3.0, "Au": -2.0},
        pair_potential=ZBL,
        per_edge_type_cutoff={"Cu": 3.5, "Au": {"Cu": 3.8}},
    ),
    # parity off (the nequip presets' choice), three layers, scalar normalisation, float32
    "noparity_float32": dict(
        model_dtype="float32",
        l_max=1,
        parity=False,
        num_layers=3,
        num_features=[6, 3],
        avg_num_neighbors=9.0,
        per_type_energy_scales=1.5,
        per_type_energy_shifts=-1.0,
    ),
    # l_max 3 with parity, nonlinear readout, resnet, separate type-embedding width
    "lmax3_resnet_mlp_readout": dict(
        l_max=3,
        parity=True,
        num_layers=3,
        num_features=3,
        type_embed_num_features=5,
        radial_mlp_depth=1,
        radial_mlp_width=6,
        readout_mlp_hidden_layers_depth=1,
        readout_mlp_hidden_layers_width=5,
        convnet_resnet=True,
        avg_num_neighbors=11.0,
        per_type_energy_shifts={"Cu": -3.0, "Au": -2.0},
    ),
    # readout MLP nonlinearities gelu and mish (nequip_models.py readout_mlp_nonlinearity)
    "readout_gelu": dict(
        l_max=1,
        num_layers=1,
        num_features=3,
        readout_mlp_hidden_layers_depth=1,
        readout_mlp_hidden_layers_width=5,
        readout_mlp_nonlinearity="gelu",
        avg_num_neighbors=9.0,
    ),
    "readout_mish": dict(
        l_max=1,
        num_layers=1,
        num_features=3,
        readout_mlp_hidden_layers_depth=1,
        readout_mlp_hidden_layers_width=5,
        readout_mlp_nonlinearity="mish",
        avg_num_neighbors=9.0,
    ),
}


def build_nequip(seed=0, model_dtype="float64", **kw):
    read_nequip._ensure_global_state()
    from nequip.model import NequIPGNNModel

    args = dict(
        seed=seed,
        model_dtype=model_dtype,
        r_max=4.0,
        type_names=["Cu", "Au"],
        radial_mlp_depth=2,
        radial_mlp_width=8,
    )
    args.update(kw)
    model = NequIPGNNModel(**args)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return model.eval()


def _close(a, b, tol=TOL):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    scale = max(1.0, float(np.abs(b).max()) if b.size else 1.0)
    err = float(np.abs(a - b).max()) if a.size else 0.0
    assert err <= tol * scale, f"max deviation {err:.3e} (scale {scale:.3e})"


@pytest.fixture(scope="module", params=sorted(CASES))
def exported(request, tmp_path_factory):
    model = build_nequip(seed=len(request.param), **CASES[request.param])
    model_json, tensors = read_nequip.export_nequip(model)
    path = tmp_path_factory.mktemp(request.param) / "model.safetensors"
    write.write_model(path, model_json, tensors)
    model_json, tensors = write.read_model(path)
    golden_json, golden = read_nequip.golden_nequip(model, model_json)
    return request.param, model, model_json, tensors, golden_json, golden


def test_numpy_reference_matches_python_model(exported):
    name, _, model_json, tensors, golden_json, g = exported
    for s in golden_json["structures"]:
        n = s["name"]
        edges = (g[f"{n}.edge_centre"], g[f"{n}.edge_neighbour"], g[f"{n}.edge_shift"])
        out = nr.evaluate(
            model_json,
            tensors,
            g[f"{n}.positions"],
            g[f"{n}.species"],
            g[f"{n}.cell"],
            g[f"{n}.pbc"].astype(bool),
            edges=edges,
            intermediates=True,
        )
        _close(out["energy"], g[f"{n}.energy"])
        _close(out["node_energy"], g[f"{n}.node_energy"])
        compared = 0
        for key in s["keys"]:
            if key in out and key not in ("energy", "node_energy"):
                _close(out[key], g[f"{n}.{key}"])
                compared += 1
        assert compared >= 5, f"{name}/{n}: only {compared} intermediates compared"


def test_own_neighbour_list_gives_same_energy(exported):
    _, _, model_json, tensors, golden_json, g = exported
    for s in golden_json["structures"]:
        n = s["name"]
        out = nr.evaluate(
            model_json,
            tensors,
            g[f"{n}.positions"],
            g[f"{n}.species"],
            g[f"{n}.cell"],
            g[f"{n}.pbc"].astype(bool),
        )
        assert int(out["num_edges"][0]) == s["n_edges"]
        _close(out["energy"], g[f"{n}.energy"])


def test_edge_vectors_follow_documented_convention(exported):
    _, _, model_json, _, golden_json, g = exported
    assert model_json["graph"]["edge_vector"] == "neighbour_minus_centre"
    for s in golden_json["structures"]:
        n = s["name"]
        p, cell = g[f"{n}.positions"], g[f"{n}.cell"]
        i, j, S = g[f"{n}.edge_centre"], g[f"{n}.edge_neighbour"], g[f"{n}.edge_shift"]
        _close(p[j] + S @ cell - p[i], g[f"{n}.edge_vectors"], 1e-12)


def test_probed_cg_equals_installed_wigner_3j(exported):
    _, _, model_json, _, _, _ = exported
    tol = 1e-12 if model_json["model_dtype"] == "float64" else 1e-6
    for layer in model_json["nequip"]["layers"]:
        assert layer["tp"]["cg_max_deviation_from_wigner_3j"] < tol
        if layer["sc"] is not None:
            assert layer["sc"]["cg_max_deviation_from_wigner_3j"] < tol


def test_forces_and_virial_are_derivatives_of_exported_energy():
    model = build_nequip(seed=4, **CASES["parity_zbl_per_edge_cutoff"])
    model_json, tensors = read_nequip.export_nequip(model)
    from potentials.golden import reference_structures

    atoms = dict(reference_structures([29, 79], model_json["r_max"]))["periodic"]
    species = [0] * len(atoms)
    ref = read_nequip.evaluate_nequip(model, atoms, species, intermediates=False)
    fd = nr.finite_difference_forces(
        model_json, tensors, atoms.positions, species, atoms.cell[:], atoms.pbc
    )
    _close(fd, ref["forces"], 1e-6)
    h = 1e-5
    deriv = np.zeros((3, 3))
    for a in range(3):
        for b in range(3):
            vals = []
            for sgn in (1, -1):
                eps = np.zeros((3, 3))
                eps[a, b] += sgn * h / 2
                eps[b, a] += sgn * h / 2
                F = np.eye(3) + eps
                vals.append(
                    nr.evaluate(
                        model_json,
                        tensors,
                        atoms.positions @ F,
                        species,
                        atoms.cell[:] @ F,
                        atoms.pbc,
                    )["energy"][0]
                )
            deriv[a, b] = (vals[0] - vals[1]) / (2 * h)
    _close(ref["virial"], -deriv, 1e-6)


@pytest.mark.parametrize(
    "overrides, cls",
    [
        (dict(convnet_nonlinearity_type="norm"), "NormActivation"),
        (
            dict(
                pair_potential={
                    "_target_": "nequip.nn.pair_potential.LennardJones",
                    "lj_sigma": 2.0,
                    "lj_epsilon": 0.1,
                }
            ),
            "LennardJones",
        ),
    ],
)
def test_unsupported_modules_are_refused_by_class(overrides, cls):
    model = build_nequip(
        seed=2, l_max=1, num_layers=2, num_features=4, avg_num_neighbors=8.0, **overrides
    )
    with pytest.raises(ValueError, match=cls):
        read_nequip.export_nequip(model)

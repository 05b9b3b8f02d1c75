"""Export freshly built random-weight MACE models and check the files with the NumPy reference.

Run in the mace venv:  ~/.cache/clebsch/venv-mace/bin/python -m pytest potentials/tests -q
"""

import pathlib
import subprocess
import sys

import numpy as np
import pytest

import mace  # noqa: E402,F401  (the mace venv; CMake runs this file there only)
import torch  # noqa: E402

from potentials import numpy_reference as nr  # noqa: E402
from potentials import read_mace, write  # noqa: E402
from potentials.tests.mace_factory import build_mace  # noqa: E402

TOL = 1e-10  # float64 agreement, relative to max(1, |value|)

CASES = {
    # plain MACE class, non-residual first block (what --model=MACE builds), correlation 1
    "mace_corr1_l1": dict(
        model="MACE", correlation=1, max_ell=1, interaction_cls_first="RealAgnosticInteractionBlock"
    ),
    # ScaleShiftMACE, residual blocks, l=2 features, ZBL
    "corr2_l2_zbl": dict(
        correlation=2, max_ell=2, hidden_irreps="4x0e+4x1o+4x2e", pair_repulsion=True
    ),
    # MP-0b3-like: density blocks, Agnesi transform, ZBL, correlation 3, max_ell 3
    "corr3_l3_density_agnesi_zbl": dict(
        correlation=3,
        max_ell=3,
        hidden_irreps="4x0e+4x1o",
        pair_repulsion=True,
        distance_transform="Agnesi",
        interaction_cls_first="RealAgnosticDensityInteractionBlock",
        interaction_cls="RealAgnosticDensityResidualInteractionBlock",
    ),
    # non-natural parity: 0o and 1e features (odd l1+l2+l3 CG paths, e3nn 0.4.4 signs)
    "nonnatural_parity": dict(correlation=3, max_ell=2, hidden_irreps="4x0e+4x0o+4x1o+4x1e"),
    # gated 1e without 0o: the nu=1 U matrix of 1e is zero (EmptyParam path)
    "even_l1_corr3": dict(correlation=3, max_ell=2, hidden_irreps="4x0e+4x1e"),
    # three layers, per-layer correlation, cutoff applied to TP weights instead of basis
    "three_layers_no_apply_cutoff": dict(
        num_interactions=3,
        correlation=[3, 2, 1],
        apply_cutoff=False,
        max_ell=2,
        interaction_cls_first="RealAgnosticInteractionBlock",
        interaction_cls="RealAgnosticDensityResidualInteractionBlock",
    ),
    # one layer, Soft distance transform, three species
    "one_layer_soft": dict(
        num_interactions=1, distance_transform="Soft", correlation=2, atomic_numbers=[1, 8, 29]
    ),
    # species-agnostic product, last readout only, max_ell 3
    "agnostic_last_readout": dict(
        use_agnostic_product=True, use_last_readout_only=True, max_ell=3, correlation=2
    ),
    # multi-head model, second head exported
    "multihead": dict(heads=["pbe", "r2scan"], correlation=2, pair_repulsion=True),
    # model built and stored in float32
    "float32": dict(dtype=torch.float32, correlation=2),
}
HEADS = {"multihead": "r2scan"}


def _close(a, b, tol=TOL):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    scale = max(1.0, float(np.abs(b).max()) if b.size else 1.0)
    err = float(np.abs(a - b).max()) if a.size else 0.0
    assert err <= tol * scale, f"max deviation {err:.3e} (scale {scale:.3e})"
    return err


@pytest.fixture(scope="module", params=sorted(CASES))
def exported(request, tmp_path_factory):
    kw = dict(CASES[request.param])
    model = build_mace(seed=len(request.param), **kw)
    head = HEADS.get(request.param)
    model_json, tensors = read_mace.export_mace(model, head=head)
    path = tmp_path_factory.mktemp(request.param) / "model.safetensors"
    write.write_model(path, model_json, tensors)
    model_json, tensors = write.read_model(path)
    golden_json, golden = read_mace.golden_mace(model, model_json, head=head)
    return request.param, model, model_json, tensors, golden_json, golden


def test_numpy_reference_matches_python_model(exported):
    name, _, model_json, tensors, golden_json, g = exported
    assert len(golden_json["structures"]) == 3
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
        assert compared >= 6, f"{name}/{n}: only {compared} intermediates compared"


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
    assert model_json["graph"]["edge_vector"] == "centre_minus_neighbour"
    for s in golden_json["structures"]:
        n = s["name"]
        p, cell = g[f"{n}.positions"], g[f"{n}.cell"]
        i, j, S = g[f"{n}.edge_centre"], g[f"{n}.edge_neighbour"], g[f"{n}.edge_shift"]
        _close(p[i] - (p[j] + S @ cell), g[f"{n}.edge_vectors"], 1e-12)


def test_probed_cg_equals_installed_wigner_3j(exported):
    _, _, model_json, _, _, _ = exported
    # float32 models carry float32-rounded constants; the file stores them as the model has them
    tol = 1e-12 if model_json["model_dtype"] == "float64" else 1e-6
    for inter in model_json["mace"]["interactions"]:
        for tp in ("conv_tp", "skip_tp"):
            assert inter[tp]["cg_max_deviation_from_wigner_3j"] < tol


def test_forces_are_gradients_of_exported_energy():
    model = build_mace(seed=3, **CASES["corr3_l3_density_agnesi_zbl"])
    model_json, tensors = read_mace.export_mace(model)
    import ase

    rng = np.random.default_rng(0)
    atoms = ase.Atoms(numbers=[29, 79, 29, 29], pbc=False, positions=rng.normal(size=(4, 3)) * 1.2)
    ref = read_mace.evaluate_mace(model, atoms, intermediates=False)
    species = np.array([0, 1, 0, 0])
    fd = nr.finite_difference_forces(model_json, tensors, atoms.positions, species)
    _close(fd, ref["forces"], 1e-6)


def test_virial_is_minus_strain_derivative():
    model = build_mace(seed=5, **CASES["corr2_l2_zbl"])
    model_json, tensors = read_mace.export_mace(model)
    from potentials.golden import reference_structures

    atoms = dict(reference_structures([29, 79], model_json["r_max"]))["periodic"]
    ref = read_mace.evaluate_mace(model, atoms, intermediates=False)
    species = np.zeros(len(atoms), dtype=int)
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
    _close(ref["stress"], deriv / atoms.get_volume(), 1e-6)


def test_multihead_without_head_is_refused():
    model = build_mace(seed=1, **CASES["multihead"])
    with pytest.raises(ValueError, match="2 heads .* none is named 'default'"):
        read_mace.export_mace(model)
    with pytest.raises(ValueError, match="not one of the model's heads"):
        read_mace.export_mace(model, head="nope")


def test_every_head_is_exported_and_each_matches_mace_torch(tmp_path):
    """One file holds every head; the NumPy reference of each head equals mace-torch run on that
    head (the golden data of ``golden_mace(head=...)``), and the heads differ."""
    model = build_mace(seed=3, **CASES["multihead"])
    model_json, tensors = read_mace.export_mace(model, head="r2scan")
    path = tmp_path / "model.safetensors"
    write.write_model(path, model_json, tensors)
    model_json, tensors = write.read_model(path)
    mace_json = model_json["mace"]
    assert [h["name"] for h in mace_json["heads"]] == ["pbe", "r2scan"]
    assert mace_json["default_head"] == "r2scan" == model_json["source"]["head"]
    assert mace_json["readouts"] == mace_json["heads"][1]["readouts"]
    energies = {}
    for head in ("pbe", "r2scan"):
        golden_json, g = read_mace.golden_mace(model, model_json, head=head)
        assert golden_json["head"] == head
        for s in golden_json["structures"]:
            n = s["name"]
            edges = (g[f"{n}.edge_centre"], g[f"{n}.edge_neighbour"], g[f"{n}.edge_shift"])
            args = (g[f"{n}.positions"], g[f"{n}.species"], g[f"{n}.cell"])
            out = nr.evaluate(
                model_json, tensors, *args, g[f"{n}.pbc"].astype(bool), edges=edges, head=head
            )
            _close(out["energy"], g[f"{n}.energy"])
            _close(out["node_energy"], g[f"{n}.node_energy"])
            energies.setdefault(n, []).append(float(g[f"{n}.energy"][0]))
    for n, (e_pbe, e_r2scan) in energies.items():
        assert abs(e_pbe - e_r2scan) > 1e-3, (n, e_pbe, e_r2scan)
    with pytest.raises(ValueError, match="not one of the file's heads"):
        nr.mace_head(model_json, "nope")


def test_head_named_default_is_the_default():
    """mace-torch's calculator rule: with several heads and none named, the head 'default'."""
    model = build_mace(seed=4, **dict(CASES["multihead"], heads=["pt_head", "Default"]))
    model_json, _ = read_mace.export_mace(model)
    assert model_json["mace"]["default_head"] == "Default"
    assert model_json["source"]["heads"] == ["pt_head", "Default"]


@pytest.mark.parametrize(
    "overrides, cls",
    [
        (
            dict(interaction_cls="RealAgnosticAttResidualInteractionBlock"),
            "RealAgnosticAttResidualInteractionBlock",
        ),
    ],
)
def test_unsupported_modules_are_refused_by_class(overrides, cls):
    model = build_mace(seed=2, **overrides)
    with pytest.raises(ValueError, match=cls):
        read_mace.export_mace(model)


def test_cli_export_with_golden(tmp_path):
    model = build_mace(seed=7, **CASES["corr2_l2_zbl"])
    src = tmp_path / "tiny.model"
    torch.save(model, src)
    out = tmp_path / "tiny.safetensors"
    root = pathlib.Path(__file__).resolve().parents[2]
    run = subprocess.run(
        [sys.executable, "-m", "potentials.cli", "export-mace", str(src), str(out), "--golden"],
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "OK: NumPy reference matches" in run.stdout
    model_json, _ = write.read_model(out)
    assert model_json["source"]["sha256_of"] == "file"
    assert (tmp_path / "tiny.golden.safetensors").is_file()
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "potentials.cli",
            "check",
            str(out),
            "--golden",
            str(tmp_path / "tiny.golden.safetensors"),
        ],
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr

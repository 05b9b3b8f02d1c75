"""Format-level tests: versions, validation, spherical harmonics of the NumPy reference.

Run in either venv (the e3nn comparison uses whichever e3nn is installed).
"""

import doctest

import numpy as np
import pytest

from potentials import numpy_reference as nr
from potentials import schema, write


def _minimal():
    return {
        "format": "clebsch-model",
        "format_version": "1.0",
        "arch": "mace",
        "source": {},
        "units": {},
        "model_dtype": "float64",
        "tensor_dtype": "float64",
        "species": [{"index": 0, "Z": 29, "symbol": "Cu"}],
        "r_max": 5.0,
        "r_max_pairs": [[5.0]],
        "graph": {},
        "spherical_harmonics": {},
        "mace": {"w": {"tensor": "w", "shape": [2, 3]}, "irreps_in": "2x0e+1x1o"},
    }


def test_doctests_of_format_modules():
    for module in (schema, write):
        failures, _ = doctest.testmod(module)
        assert failures == 0


def test_unknown_major_version_is_rejected_naming_both():
    d = _minimal()
    d["format_version"] = "2.1"
    with pytest.raises(ValueError, match=r"2\.1.*1\.x"):
        schema.check_version(d)


def test_validate_checks_shapes_and_references():
    d = _minimal()
    schema.validate(d, {"w": np.zeros((2, 3))})
    with pytest.raises(ValueError, match="shape"):
        schema.validate(d, {"w": np.zeros((3, 2))})
    with pytest.raises(ValueError, match="does not hold"):
        schema.validate(d, {})
    with pytest.raises(ValueError, match="not referenced"):
        schema.validate(d, {"w": np.zeros((2, 3)), "extra": np.zeros(1)})
    d["mace"]["irreps_in"] = "2x0q"
    with pytest.raises(ValueError, match="malformed"):
        schema.validate(d, {"w": np.zeros((2, 3))})


def test_write_read_roundtrip(tmp_path):
    d = _minimal()
    write.write_model(tmp_path / "m.safetensors", d, {"w": np.arange(6.0).reshape(2, 3)})
    back, tensors = write.read_model(tmp_path / "m.safetensors")
    assert back == d
    assert tensors["w"].dtype == np.float64 and tensors["w"][1, 2] == 5.0
    with pytest.raises(ValueError, match="non-finite"):
        write.write_model(tmp_path / "bad.safetensors", d, {"w": np.full((2, 3), np.nan)})


def test_spherical_harmonics_component_normalised():
    rng = np.random.default_rng(0)
    v = rng.normal(size=(50, 3)) * 3.0
    Y = nr.spherical_harmonics(6, v)
    for l in range(7):
        block = Y[:, l * l : (l + 1) ** 2]
        np.testing.assert_allclose((block**2).sum(1), 2 * l + 1, rtol=1e-12)
    u = v / np.linalg.norm(v, axis=1, keepdims=True)
    np.testing.assert_allclose(Y[:, 1:4], np.sqrt(3) * u, rtol=1e-12)


def test_spherical_harmonics_equal_installed_e3nn():
    try:
        import mace  # noqa: F401  (e3nn 0.4.4 needs it imported first under torch >= 2.6)
    except ImportError:
        pass
    import torch
    from e3nn import o3  # both venvs have e3nn: a venv without it is broken, not skipped

    rng = np.random.default_rng(1)
    v = rng.normal(size=(40, 3))
    ref = o3.spherical_harmonics(
        list(range(7)), torch.tensor(v), normalize=True, normalization="component"
    ).numpy()
    np.testing.assert_allclose(nr.spherical_harmonics(6, v), ref, atol=1e-12)


def test_neighbour_list_sees_own_images():
    cell = np.diag([2.0, 10.0, 10.0])
    i, j, s = nr.neighbour_list(np.zeros((1, 3)), cell, [True, False, False], 4.5)
    assert sorted(s[:, 0].tolist()) == [-2, -1, 1, 2]
    assert np.all(i == 0) and np.all(j == 0)

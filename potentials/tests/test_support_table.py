"""The README's table of mace-torch classes is the generator's output, and lists every class
of the installed mace-torch (run in the mace venv)."""

import pathlib

import pytest

pytest.importorskip("mace")

from potentials import support_table  # noqa: E402

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_readme_block_is_generated():
    text = README.read_text()
    block = text.split("<!-- support-table begin -->\n")[1].split("<!-- support-table end -->")[0]
    assert block == support_table.markdown(), "regenerate: python -m potentials.support_table"


def test_every_installed_mace_class_is_listed():
    import mace.modules as m

    listed = {c for classes in support_table.MACE_CLASSES.values() for c in classes}
    names = {
        k
        for k in dir(m)
        if isinstance(getattr(m, k), type)
        and (k.endswith("Block") or k.endswith("Basis") or k.endswith("MACE"))
        and k != "InteractionBlock"
    }
    assert names <= listed, f"not in the support table: {sorted(names - listed)}"

# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Test setup of clebsch_torch (run by CTest in the mace venv; see unittest/CMakeLists.txt)."""

import os
import sys

# e3nn 0.4.4 (mace-torch's) loads its constants with torch.load of a pickle that newer torch
# refuses by default; mace-torch sets this for the same reason when it is imported.
os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
# The helpers next to the tests (problems.py).
sys.path.insert(0, os.path.dirname(__file__))

"""pytest configuration for the LAMMPS integration tests: make the harness importable."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

"""pytest configuration for the clebsch/kk tests: the LAMMPS harness and the plain style's
helpers live in ../lammps."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "lammps"))

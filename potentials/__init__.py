"""Clebsch exporter: MACE and NequIP models to self-describing ``.safetensors`` files.

The package runs at export time only, inside the Python environment the model was built in
(mace-torch pins e3nn 0.4.4, nequip needs e3nn 0.6, so they live in separate virtual
environments). ``schema`` and ``write`` and ``numpy_reference`` need only NumPy and
safetensors; ``read_mace`` needs mace-torch, ``read_nequip`` needs nequip.

See ``potentials/FORMAT.md`` for the file format and ``potentials/README.md`` for usage.
"""

__version__ = "1.0.0"

# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Finding and loading the operator library (libclebsch_torch_ops.so)."""

import os
import pathlib

import torch

LIBRARY_NAME = "libclebsch_torch_ops.so"


def library_path() -> pathlib.Path:
    """The library to load: ``$CLEBSCH_TORCH_LIBRARY`` (a build tree) or the installed one.

    Returns
    -------
    pathlib.Path

    Examples
    --------
    >>> library_path().name
    'libclebsch_torch_ops.so'
    """
    env = os.environ.get("CLEBSCH_TORCH_LIBRARY")
    if env:
        return pathlib.Path(env)
    return pathlib.Path(__file__).with_name(LIBRARY_NAME)


def load_library() -> None:
    """Load the operators once; refuse a library compiled against another torch.

    Raises
    ------
    ImportError
        When the library is missing or was built against a different torch version.
    """
    if hasattr(torch.ops.clebsch, "conv"):
        return
    path = library_path()
    if not path.is_file():
        raise ImportError(
            f"clebsch_torch: operator library {path} not found; build it with "
            "`pip install ./torch` from the Clebsch repository (or set CLEBSCH_TORCH_LIBRARY)"
        )
    torch.ops.load_library(str(path))
    built = torch.ops.clebsch.build_info()
    running = "torch " + torch.__version__.split("+")[0]
    if built != running:
        raise ImportError(
            f"clebsch_torch: {path} was compiled against {built} but this is {running}; "
            "rebuild it (pip install ./torch) in this environment"
        )

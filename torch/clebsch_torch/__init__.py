# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Clebsch's fused tensor-product convolution as PyTorch operators.

Importing the package loads the operator library, which registers ``torch.ops.clebsch.conv``,
``conv_backward`` and ``conv_double_backward`` (CPU kernels: the core library's host
convolution; autograd to second order; meta kernels for ``torch.compile`` and
``torch.export``; CUDA tensors: the generated kernels of Clebsch's CUDA engine, when the
library was built with its CUDA path, see torch/README.md).

Examples
--------
>>> import clebsch_torch
>>> # problem = clebsch_torch.problem_from_e3nn(tp)
>>> # out = clebsch_torch.conv(x, y, w, sender, receiver, num_nodes, problem)
"""

from ._library import load_library as _load_library

_load_library()

from .conv import conv  # noqa: E402
from .mace import patch_mace  # noqa: E402
from .problem import conv_problem, problem_from_e3nn  # noqa: E402

__all__ = ["conv", "conv_problem", "patch_mace", "problem_from_e3nn"]

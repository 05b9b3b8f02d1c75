# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Where the tests of the operators' device path run (test_conv_cuda.py, test_patch_mace_cuda.py).

Two targets, both the generated kernels of kernels/:

- ``cuda``: CUDA tensors on a real GPU (the GPU host, torch/gpu/run_cuda_tests.sh);
- ``emulated``: CPU tensors with ``CLEBSCH_TORCH_CPU_BACKEND=emulated``, the same generated source
  compiled for the host (CI, no GPU).

A test runs on ``cuda`` when a GPU is there and on ``emulated`` otherwise; the other target is
skipped with its reason (pytest -rs shows it). ``CLEBSCH_TORCH_REQUIRE_CUDA=1`` (set by the GPU
runner) makes a skipped ``cuda`` target a failure; ``CLEBSCH_TORCH_EMULATED=1`` runs the
emulated target beside a GPU too.
"""

import contextlib
import os

import pytest
import torch

import clebsch_torch  # noqa: F401  (loads the operators)

TARGETS = ("cuda", "emulated")


def has_device_path() -> bool:
    """Whether this build of the extension has the CUDA path (CLEBSCH_TORCH_CUDA)."""
    return "cuda" in torch.ops.clebsch.build_features()


def cuda_unavailable() -> str:
    """Why the ``cuda`` target cannot run ("" when it can)."""
    if not has_device_path():
        return "the extension was built without its CUDA path (CLEBSCH_TORCH_CUDA=OFF)"
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU build"
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch"
    return ""


def skip_or_fail(reason: str) -> None:
    """Skip with ``reason``, or fail where CLEBSCH_TORCH_REQUIRE_CUDA=1 demands the GPU."""
    if os.environ.get("CLEBSCH_TORCH_REQUIRE_CUDA", "0") not in ("", "0"):
        pytest.fail(f"CLEBSCH_TORCH_REQUIRE_CUDA=1 but the cuda target cannot run: {reason}")
    pytest.skip(reason)


class Target:
    """One target: its device and the environment its calls need."""

    def __init__(self, name: str):
        self.name = name
        self.device = torch.device("cuda") if name == "cuda" else torch.device("cpu")

    def to(self, *tensors):
        """The tensors on this target's device (one tensor alone if one was given)."""
        moved = tuple(None if t is None else t.to(self.device) for t in tensors)
        return moved[0] if len(moved) == 1 else moved

    @contextlib.contextmanager
    def active(self):
        """Inside: CPU tensors take the emulated device path (for ``emulated``)."""
        if self.name != "emulated":
            yield
            return
        old = os.environ.get("CLEBSCH_TORCH_CPU_BACKEND")
        os.environ["CLEBSCH_TORCH_CPU_BACKEND"] = "emulated"
        try:
            yield
        finally:
            if old is None:
                del os.environ["CLEBSCH_TORCH_CPU_BACKEND"]
            else:
                os.environ["CLEBSCH_TORCH_CPU_BACKEND"] = old

    def synchronize(self):
        if self.name == "cuda":
            torch.cuda.synchronize()


def make_target(name: str) -> Target:
    """The target ``name``, or a skip (a failure for ``cuda`` under REQUIRE_CUDA) saying why not."""
    why_not_cuda = cuda_unavailable()
    if name == "cuda":
        if why_not_cuda:
            skip_or_fail(why_not_cuda)
    else:
        if not has_device_path():
            pytest.skip("the extension was built without its CUDA path (CLEBSCH_TORCH_CUDA=OFF)")
        if not why_not_cuda and os.environ.get("CLEBSCH_TORCH_EMULATED", "0") in ("", "0"):
            pytest.skip(
                "a GPU is present: the emulated target is CI's (CLEBSCH_TORCH_EMULATED=1 "
                "runs it too)"
            )
    return Target(name)

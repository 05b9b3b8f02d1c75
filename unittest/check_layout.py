#!/usr/bin/env python3
# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
#
# The layout rules of src/README.md and kernels/README.md, checked on the includes of every
# source file (CTest "layout"): project headers are included through the one include root
# ("clebsch/<folder>/..." for src/<folder>/, "clebsch/cuda/<folder>/..." for kernels/<folder>/),
# each folder includes only the folders its README row allows, src/ and kernels/ include no LAMMPS,
# Kokkos or CUDA headers beyond what their rows allow, and no non-test source file outgrows
# MAX_LINES. Exits non-zero with one line per violation, naming the file, the line and the rule.
import pathlib
import re
import sys

MAX_LINES = 800
ROOT = pathlib.Path(__file__).resolve().parent.parent

# folder -> folders (as include prefixes) it may include, itself always allowed.
ALLOWED = {
    "src/support": set(),
    "src/o3": {"support"},
    "src/nn": {"o3", "support"},
    "src/model": {"nn", "o3", "support"},
    "src/engine": {"model", "nn", "o3", "support"},
    "kernels/templates": set(),
    "kernels/device": {"cuda/templates", "support"},
    "kernels/generator": {"cuda/device", "cuda/templates", "o3", "support"},
    "kernels/nn": {"cuda/device", "model", "o3", "support"},
    "kernels/graph": {"cuda/device", "cuda/templates", "engine", "support"},
    "kernels/engine": {
        "cuda/device",
        "cuda/generator",
        "cuda/nn",
        "cuda/graph",
        "cuda/templates",
        "engine",
        "model",
        "nn",
        "o3",
        "support",
    },
    "pair_style": {"cuda/engine", "engine", "model", "o3", "support"},
    # The extension's CUDA path runs the generated kernels through ConvRunner, as pair_style/
    # opens the CUDA engine: the engine folder's interface, nothing deeper.
    "torch/csrc": {"cuda/engine", "o3", "support"},
}
# System headers a folder may not include (the layering of DESIGN.md: only pair_style/ sees
# LAMMPS and Kokkos; CUDA's headers only in kernels/, and there for types only; LibTorch's
# only in torch/).
FORBIDDEN_SYSTEM = {
    "src": re.compile(r"^(cuda|cublas|nvrtc|Kokkos|lammps|mpi|torch/|ATen/|c10/)"),
    "kernels": re.compile(r"^(Kokkos|lammps|mpi|torch/|ATen/|c10/)"),
    "torch": re.compile(r"^(Kokkos|lammps|mpi)"),
}
# Generated at configure time into the build tree (kernels/CMakeLists.txt).
GENERATED = {"kernel_templates.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s+([<"])([^>"]+)[>"]')


def prefix_of(path: str) -> str:
    """Include prefix ("o3", "cuda/device") of a project header path like clebsch/o3/irreps.h."""
    parts = path.split("/")
    return "/".join(parts[1:3]) if parts[1] == "cuda" else parts[1]


def check() -> list:
    problems = []
    for folder, allowed in ALLOWED.items():
        top = folder.split("/")[0]
        own = None
        if top in ("src", "kernels") and "/" in folder:
            own = ("cuda/" if top == "kernels" else "") + folder.split("/")[1]
        for f in sorted((ROOT / folder).glob("*")):
            if f.suffix not in (".h", ".cpp", ".in"):
                continue
            rel = f.relative_to(ROOT)
            lines = f.read_text().splitlines()
            if len(lines) > MAX_LINES:
                problems.append(
                    f"{rel}: {len(lines)} lines, more than {MAX_LINES}: split it by stage"
                )
            for n, line in enumerate(lines, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                kind, name = m.groups()
                where = f"{rel}:{n}: {line.strip()}"
                if kind == "<":
                    bad = FORBIDDEN_SYSTEM.get(top)
                    if bad and bad.match(name):
                        problems.append(f"{where}: {top}/ may not include this system header")
                    continue
                if name.startswith("clebsch/"):
                    p = prefix_of(name)
                    if p != own and p not in allowed:
                        problems.append(f"{where}: {folder}/ may use only {sorted(allowed)}")
                    continue
                if name in GENERATED:
                    continue
                if top in ("pair_style", "torch"):
                    # Plain quoted names are LAMMPS's headers or the folder's own files: no
                    # Clebsch header is reachable without the prefix.
                    continue
                problems.append(f'{where}: project headers are included as "clebsch/<folder>/..."')
    return problems


if __name__ == "__main__":
    found = check()
    for p in found:
        print(p)
    print(f"layout: {len(found)} problems" if found else "layout: every rule holds")
    sys.exit(1 if found else 0)

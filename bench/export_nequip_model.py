# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Build and export the NequIP model of the model-step benchmark, and its structure.

A nequip-benzene-sized NequIP model (issue 23's NequIP target; kernels.md's nequip-benzene
convolution): ``NequIPGNNModel`` of nequip 0.19 with ``l_max`` 3 and both parities (features
``64x(0o+0e+1o+1e+2o+2e+3o+3e)``, harmonics ``0e+1o+2e+3o``), 4 layers, r_max 5 A, 8 Bessel
functions, radial MLP of one hidden layer of 64, species ``Cu``; random weights (seed 0, the
trained model's shapes, not its values), exported with the Clebsch exporter
(``potentials.read_nequip``) to ``OUT/model.safetensors``; the structure is
``bench_mace_cpu.build_structure``'s rattled fcc Cu of about ``--atoms`` atoms, in
``OUT/structure.safetensors``, which ``bench_mace_model`` reads (``--engine host,cuda`` runs the
host and CUDA NequIP engines; ``--backend emulated --ledger-only`` the CUDA engine's
device-memory ledger without a GPU).

Run in the nequip environment (``~/.cache/clebsch/venv-nequip``, which has ase)::

    PYTHONPATH=. python bench/export_nequip_model.py --atoms 256 --out /tmp/nequip-256
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

#: NequIPGNNModel arguments of the benchmark's model.
MODEL = dict(
    num_layers=4,
    l_max=3,
    parity=True,
    num_features=64,
    r_max=5.0,
    num_bessels=8,
    radial_mlp_depth=1,
    radial_mlp_width=64,
    avg_num_neighbors=42.0,
    type_names=["Cu"],
)


def build_model(seed: int = 0, mantissa_bits: int = 0):
    import torch
    from nequip.model import NequIPGNNModel

    from potentials import read_nequip

    read_nequip._ensure_global_state()
    model = NequIPGNNModel(seed=seed, model_dtype="float64", **MODEL)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
            if mantissa_bits:
                # Round to mantissa_bits significant bits: the float64 file then compresses
                # (xz) to a fraction of its 60 MB, small enough to carry to a GPU host that
                # lacks nequip. Timings and memory do not depend on the weights' values, and
                # the host engine, the force reference, reads the same file.
                m, e = torch.frexp(p)  # p = m 2^e, 1/2 <= |m| < 1
                p.copy_(torch.ldexp(torch.round(m * 2.0**mantissa_bits), e - mantissa_bits))
    return model.eval()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--atoms", type=int, default=10000)
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--round-mantissa",
        type=int,
        default=0,
        metavar="BITS",
        help="round the random weights to BITS significant bits (0: keep them), so that the "
        "model file compresses for a device carry",
    )
    args = ap.parse_args()
    from bench_mace_cpu import build_structure, write_structure

    from potentials import read_nequip, write

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = build_model(mantissa_bits=args.round_mantissa)
    model_json, tensors = read_nequip.export_nequip(model)
    write.write_model(out / "model.safetensors", model_json, tensors)
    atoms = build_structure(args.atoms)
    write_structure(atoms, out / "structure.safetensors")
    info = dict(
        model=MODEL,
        parameters=sum(p.numel() for p in model.parameters()),
        atoms=len(atoms),
    )
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())

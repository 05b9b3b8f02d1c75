"""CPU benchmark: the Clebsch MACE host engine beside mace-torch, energy + forces per atom-step.

Problems are named after the real models whose shapes they copy (random weights, built with the
real mace-torch constructors through ``potentials.tests.mace_factory``):

``mace-mp-0-small``
    ScaleShiftMACE, hidden ``128x0e``, max_ell 3, correlation 3, 2 layers, r_max 6 A,
    10 Bessel functions, radial MLP [64, 64, 64], readout MLP ``16x0e``;
``mace-mp-0-medium``
    the same with hidden ``128x0e+128x1o``.

Structures are fcc Cu-like periodic cells (a = 3.61 A, cubic, rattled by 0.05 A) of about 1,000
and 10,000 atoms. For each (model, size) the script exports the model with the Clebsch exporter,
writes the structure, runs ``bench_mace_cpu`` (the C++ side: neighbour list, a finite-difference
check of the forces, then warm-up and timed runs for fp64 / fp32 / mixed) and, in the same run and
with the same thread count (``torch.set_num_threads``), times mace-torch in float64 and float32.
The engine's float64 forces are checked against mace-torch's before any time is reported (pass
or FAIL per row). Prints a table and writes JSON.

Run it in the mace venv::

    OMP_NUM_THREADS=2 ~/.cache/clebsch/venv-mace/bin/python bench/bench_mace_cpu.py \\
        --binary build/bench_mace_cpu --threads 2 --sizes 1000,10000 --torch-max-atoms 2000 \\
        --json bench_mace_cpu.json

Examples
--------
>>> # python bench/bench_mace_cpu.py --binary build/bench_mace_cpu --sizes 1000
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")

PROBLEMS: Dict[str, Dict[str, Any]] = {
    "mace-mp-0-small": dict(hidden_irreps="128x0e"),
    "mace-mp-0-medium": dict(hidden_irreps="128x0e+128x1o"),
}
COMMON = dict(
    r_max=6.0,
    num_bessel=10,
    num_polynomial_cutoff=5,
    max_ell=3,
    correlation=3,
    num_interactions=2,
    radial_MLP=[64, 64, 64],
    MLP_irreps="16x0e",
    avg_num_neighbors=60.0,
    atomic_numbers=[29],
    interaction_cls="RealAgnosticResidualInteractionBlock",
    interaction_cls_first="RealAgnosticResidualInteractionBlock",
)


def build_structure(n_atoms: int, seed: int = 0):
    """fcc Cu-like cubic cell replicated to about ``n_atoms`` atoms, rattled."""
    import ase.build
    import numpy as np

    n_cells = max(1, round(n_atoms / 4))
    side = n_cells ** (1 / 3)
    reps = [max(2, int(round(side)))] * 2
    reps.append(max(2, int(round(n_cells / (reps[0] * reps[1])))))
    atoms = ase.build.bulk("Cu", "fcc", a=3.61, cubic=True) * tuple(reps)
    rng = np.random.default_rng(seed)
    atoms.positions += rng.normal(scale=0.05, size=atoms.positions.shape)
    return atoms


def write_structure(atoms, path: pathlib.Path) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    save_file(
        {
            "positions": np.ascontiguousarray(atoms.positions, dtype=np.float64),
            "cell": np.ascontiguousarray(atoms.cell[:], dtype=np.float64),
            "species": np.zeros(len(atoms), dtype=np.float64),
        },
        str(path),
    )


def time_torch(model, atoms, dtype, threads: int, repeat: int) -> Dict[str, Any]:
    """Median wall time of energy + forces with mace-torch (after one warm-up call)."""
    import numpy as np
    import torch
    from potentials.read_mace import _batch_for

    torch.set_num_threads(threads)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        m = model.to(dtype)
        batch = _batch_for(m, atoms, "Default", float(m.r_max))
        batch = {
            k: (v.to(dtype) if torch.is_tensor(v) and v.is_floating_point() else v)
            for k, v in batch.items()
        }
        times, cpu = [], []
        out = None
        for k in range(repeat + 1):
            t0, c0 = time.perf_counter(), time.process_time()
            out = m(batch, training=False, compute_force=True)
            if k > 0:
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
        times.sort()
        cpu.sort()
        return {
            "median_s": times[len(times) // 2],
            "min_s": times[0],
            "times_s": times,
            "cpu_s": cpu[len(cpu) // 2],
            "energy": float(out["energy"].detach().double().sum()),
            "forces": out["forces"].detach().double().numpy().astype(np.float64),
            "edges": int(batch["edge_index"].shape[1]),
        }
    finally:
        torch.set_default_dtype(old)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", required=True, help="path of bench_mace_cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--problems", default=",".join(PROBLEMS))
    parser.add_argument(
        "--torch-max-atoms",
        type=int,
        default=2000,
        help="time mace-torch only up to this many atoms (it is slow)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of the engine")
    parser.add_argument("--torch-repeat", type=int, default=2, help="timed runs of mace-torch")
    parser.add_argument("--precisions", default="fp64,fp32,mixed")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()

    import numpy as np
    import torch
    from potentials import read_mace, write
    from potentials.tests.mace_factory import build_mace

    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    torch.set_num_threads(args.threads)
    rows: List[Dict[str, Any]] = []
    info = {
        "cpu": platform.processor() or platform.machine(),
        "threads": args.threads,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    try:
        info["cpu"] = next(
            line.split(":", 1)[1].strip()
            for line in open("/proc/cpuinfo")
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    try:
        info["commit"] = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        info["commit"] = None
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = pathlib.Path(tmpdir)
        for name in args.problems.split(","):
            kw = dict(COMMON, **PROBLEMS[name])
            model = build_mace(seed=0, dtype=torch.float64, **kw)
            model_json, tensors = read_mace.export_mace(model)
            mpath = tmp / f"{name}.safetensors"
            write.write_model(mpath, model_json, tensors)
            for size in [int(s) for s in args.sizes.split(",")]:
                atoms = build_structure(size)
                spath = tmp / f"{name}-{size}.structure.safetensors"
                fpath = tmp / f"{name}-{size}.forces.bin"
                write_structure(atoms, spath)
                cmd = [
                    args.binary,
                    "--model",
                    str(mpath),
                    "--structure",
                    str(spath),
                    "--precision",
                    args.precisions,
                    "--repeat",
                    str(args.repeat),
                    "--forces-out",
                    str(fpath),
                ]
                env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
                print(f"[{name}, {len(atoms)} atoms] engine ...", flush=True)
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
                if proc.returncode != 0:
                    print(proc.stderr, file=sys.stderr)
                    return 1
                engine = json.loads(proc.stdout)
                f_engine = np.fromfile(fpath, dtype=np.float64).reshape(-1, 3)
                torch_res = {}
                if len(atoms) <= args.torch_max_atoms:
                    for label, dtype in (("fp64", torch.float64), ("fp32", torch.float32)):
                        if label not in args.precisions.split(","):
                            continue
                        print(f"[{name}, {len(atoms)} atoms] mace-torch {label} ...", flush=True)
                        torch_res[label] = time_torch(
                            model, atoms, dtype, args.threads, args.torch_repeat
                        )
                    model = model.to(torch.float64)
                check = None
                if "fp64" in torch_res:
                    ref = torch_res["fp64"]
                    check = {
                        "max_abs_dF_vs_torch_fp64": float(np.abs(f_engine - ref["forces"]).max()),
                        "rel_dE_vs_torch_fp64": abs(engine["results"][0]["energy"] - ref["energy"])
                        / abs(ref["energy"]),
                        "edges_torch": ref["edges"],
                    }
                    check["pass"] = (
                        check["max_abs_dF_vs_torch_fp64"] < 1e-8
                        and check["rel_dE_vs_torch_fp64"] < 1e-10
                        and ref["edges"] == engine["edges"]
                    )
                for res in engine["results"]:
                    p = res["precision"]
                    tref = torch_res.get("fp32" if p in ("fp32", "mixed") else "fp64")
                    row = {
                        "problem": name,
                        "atoms": len(atoms),
                        "edges": engine["edges"],
                        "precision": p,
                        "engine_s": res["median_s"],
                        "engine_cpu_s": res["cpu_s"],
                        "engine_max_rss_mb": engine.get("max_rss_mb"),
                        "torch_cpu_s": tref["cpu_s"] if tref else None,
                        "engine_us_per_atom_step": res["us_per_atom_step"],
                        "engine_fd_check": res.get("check"),
                        "torch_s": tref["median_s"] if tref else None,
                        "torch_us_per_atom_step": 1e6 * tref["median_s"] / len(atoms)
                        if tref
                        else None,
                        "speedup": tref["median_s"] / res["median_s"] if tref else None,
                        "verified_vs_torch": check,
                    }
                    if p != "fp64" and "max_abs_force_diff_vs_fp64" in res:
                        row["max_abs_dF_vs_engine_fp64"] = res["max_abs_force_diff_vs_fp64"]
                    if tref and p != "fp64":
                        f_t = tref["forces"]
                        row["torch_fp32_max_abs_dF_vs_torch_fp64"] = (
                            float(np.abs(f_t - torch_res["fp64"]["forces"]).max())
                            if "fp64" in torch_res
                            else None
                        )
                    rows.append(row)
                    print(
                        f"  {p:6s} engine {res['median_s']:8.3f} s"
                        + (
                            f"  torch {tref['median_s']:8.3f} s  x{row['speedup']:.1f}"
                            if tref
                            else ""
                        ),
                        flush=True,
                    )

    print()
    print(
        f"MACE energy+forces on {info['cpu']}, {args.threads} threads "
        f"(engine: Clebsch host engine; torch: mace-torch {torch.__version__}, same threads)"
    )
    print(
        "wall: median seconds per energy+forces step; cpu: CPU seconds of all threads (the "
        "machine may be shared)"
    )
    hdr = (
        f"{'problem':18s} {'atoms':>6s} {'edges':>8s} {'prec':>6s} {'engine s':>9s} "
        f"{'cpu s':>7s} {'us/atom':>8s} {'torch s':>9s} {'cpu s':>7s} {'us/atom':>8s} "
        f"{'speedup':>8s} {'check':>6s}"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        t = r["torch_s"]
        v = r["verified_vs_torch"]
        status = "-" if v is None else ("pass" if v["pass"] else "FAIL")
        if r["engine_fd_check"] == "FAIL":
            status = "FAIL"
        print(
            f"{r['problem']:18s} {r['atoms']:6d} {r['edges']:8d} {r['precision']:>6s} "
            f"{r['engine_s']:9.3f} {r['engine_cpu_s']:7.2f} {r['engine_us_per_atom_step']:8.1f} "
            + (
                f"{t:9.3f} {r['torch_cpu_s']:7.2f} {r['torch_us_per_atom_step']:8.1f} "
                f"{r['speedup']:7.1f}x"
                if t
                else f"{'-':>9s} {'-':>7s} {'-':>8s} {'-':>8s}"
            )
            + f" {status:>6s}"
        )
    result = {"info": info, "rows": rows}
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1))
        print(f"wrote {args.json}")
    failed = any(
        (r["verified_vs_torch"] is not None and not r["verified_vs_torch"]["pass"])
        or r["engine_fd_check"] == "FAIL"
        for r in rows
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

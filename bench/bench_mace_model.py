# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Model-level GPU benchmark: MACE energy + forces, Clebsch's engines beside mace-torch.

One model, one structure, one run, one GPU:

- the model (``--problem``): ``mace-mh-1`` (an MH-1-sized model, see ``PROBLEMS`` below; the
  CUDA engine refuses its blocks by name until it supports them), or ``mace-mp-0-medium`` of
  ``bench_mace_cpu.py`` (ScaleShiftMACE, hidden
  ``128x0e+128x1o``, max_ell 3, correlation 3, 2 layers, r_max 6 A, 10 Bessel functions, radial
  MLP [64, 64, 64]) with MACE-MP-0's 89 species (``--elements``; 4.69 M parameters); random
  weights, seed 0, built with the real mace-torch constructors through
  ``potentials.tests.mace_factory.build_mace``, exported with the Clebsch exporter
  (``potentials.read_mace`` + ``potentials.write``) to ``OUT/model.safetensors``; built and
  exported here, on the GPU host, so nothing large travels and the torch model is the very one
  that was exported;
- the structure: fcc Cu (a = 3.61 A, cubic cells, rattled by 0.05 A, seed 0), about ``--atoms``
  atoms (10,000 -> 10,192 atoms, ~795,000 edges within 6 A), periodic;
- Clebsch: ``bench_mace_model`` (bench_mace_model.cpp) through the Engine interface, the CUDA
  engine (``--engines cuda``) and the host engine for reference (``--engines host``, float64
  only by default: it is the CPU); it runs first, in its own process, so that the two do not
  share the device allocator; it writes its forces;
- mace-torch: the same model moved to the GPU in float64 and float32, ``compute_force=True``,
  ``--warmup`` calls, then the median of ``--repeat`` (>= 10) calls, each closed by
  ``torch.cuda.synchronize()``; peak extra device memory from PyTorch's allocator over the model
  and the batch;
- the check: max |dF| and |dE|/|E| of every Clebsch result against mace-torch float64 (and
  against mace-torch in the same precision); the float64 engine must agree to 1e-8 eV/A
  (relative to max |F| where that exceeds 1 eV/A);
- with ``--kernel-profile``: one more CUDA-engine call per precision with kernel timing on
  (every kernel, copy and cuBLAS GEMM of the step, by engine phase), written by
  ``bench_mace_model --kernel-profile`` to ``OUT/kernel_profile.json`` (bench/README.md).

mace-torch 0.3.16 pins e3nn 0.4.4; on the GPU host its wheels are installed into their own
``--target`` directory (see bench/WHEELS.md) that goes first on ``PYTHONPATH`` for this script
only, so e3nn 0.6 stays the one of the kernel benchmark.

Examples
--------
>>> # PYTHONPATH=/tmp/site-mace:. python3 bench/bench_mace_model.py \\
>>> #     --binary build-gpu/bench/bench_mace_model --out out-model --json out-model/model.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import pathlib
import platform
import subprocess
import sys
import time
from typing import Any, Dict, List

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")

from bench_mace_cpu import COMMON, build_structure, write_structure  # noqa: E402
from bench_mace_cpu import PROBLEMS as CPU_PROBLEMS  # noqa: E402

#: The problems of bench_mace_cpu.py plus an MH-1-sized model: the architecture mace-torch
#: 0.3.16 builds its MACE-MH family from (tests/test_polar_models.py::_build_full_model, the
#: MH-based PolarMACE: RealAgnosticResidualNonLinearInteractionBlock first and after, 3
#: interactions, hidden 512x0e+512x1o+512x2e, edge irreps 128x0e+128x1o+128x2e, max_ell 3,
#: correlation 3, r_max 6, 8 Bessel functions, cutoff p 6, radial MLP [64, 64, 64]) with the
#: NonLinearBiasReadoutBlock and species-agnostic product that extract_config_mace_model reads
#: from those models (potentials/tests/mace_arch_cases.py has the scaled-down twin). One head.
PROBLEMS = dict(
    CPU_PROBLEMS,
    **{
        "mace-mh-1": dict(
            interaction_cls="RealAgnosticResidualNonLinearInteractionBlock",
            interaction_cls_first="RealAgnosticResidualNonLinearInteractionBlock",
            num_interactions=3,
            hidden_irreps="512x0e+512x1o+512x2e",
            edge_irreps="128x0e+128x1o+128x2e",
            max_ell=3,
            correlation=3,
            r_max=6.0,
            num_bessel=8,
            num_polynomial_cutoff=6,
            radial_MLP=[64, 64, 64],
            readout_cls="NonLinearBiasReadoutBlock",
            use_agnostic_product=True,
        )
    },
)


def _constructor_args(kw: Dict[str, Any]) -> Dict[str, Any]:
    """Class names and irreps strings of PROBLEMS turned into what MACE's constructor takes."""
    from e3nn import o3
    from mace import modules

    kw = dict(kw)
    if isinstance(kw.get("readout_cls"), str):
        kw["readout_cls"] = getattr(modules, kw["readout_cls"])
    if isinstance(kw.get("edge_irreps"), str):
        kw["edge_irreps"] = o3.Irreps(kw["edge_irreps"])
    return kw


def write_structure_species(path: pathlib.Path, species) -> None:
    """Replace the species of a structure file written by ``write_structure``."""
    from safetensors.numpy import load_file, save_file

    data = load_file(str(path))
    data["species"] = species
    save_file(data, str(path))


def time_torch(model, atoms, dtype, device, warmup: int, repeat: int) -> Dict[str, Any]:
    """Median wall time (s) of energy + forces with mace-torch on ``device``."""
    import numpy as np
    import torch
    from potentials.read_mace import _batch_for

    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    rec: Dict[str, Any] = {"dtype": str(dtype).replace("torch.", "")}
    batch = None
    try:
        # A copy: moving the model itself to float32 and back would round its float64 weights.
        m = copy.deepcopy(model).to(device=device, dtype=dtype)
        t0 = time.perf_counter()
        batch = _batch_for(m, atoms, "Default", float(m.r_max))
        rec["neighbour_list_s"] = time.perf_counter() - t0
        batch = {
            k: (v.to(device=device, dtype=dtype) if v.is_floating_point() else v.to(device))
            if torch.is_tensor(v)
            else v
            for k, v in batch.items()
        }
        rec["edges"] = int(batch["edge_index"].shape[1])
        sync()
        base = torch.cuda.memory_allocated() if cuda else 0
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        out = None
        times: List[float] = []
        try:
            for k in range(warmup + repeat):
                t1 = time.perf_counter()
                out = m(batch, training=False, compute_force=True)
                sync()
                if k >= warmup:
                    times.append(time.perf_counter() - t1)
        except (torch.cuda.OutOfMemoryError, RuntimeError) as err:
            # mace-torch's TorchScript-compiled tensor products re-raise the allocator's
            # OutOfMemoryError as a plain RuntimeError.
            if "out of memory" not in str(err):
                raise
            rec["error"] = (
                "not run: out of device memory (peak "
                f"{(torch.cuda.max_memory_allocated() - base) / 1e9:.1f} GB extra)"
            )
            return rec
        if cuda:
            rec["peak_device_extra_bytes"] = torch.cuda.max_memory_allocated() - base
        rec["times_s"] = times
        s = sorted(times)
        rec["median_s"], rec["min_s"] = s[len(s) // 2], s[0]
        rec["energy"] = float(out["energy"].detach().double().sum())
        rec["forces"] = out["forces"].detach().double().cpu().numpy().astype(np.float64)
        return rec
    finally:
        torch.set_default_dtype(old)
        m = batch = None
        if cuda:
            torch.cuda.empty_cache()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", default="", help="bench_mace_model (absent: Clebsch not run)")
    ap.add_argument("--problem", default="mace-mp-0-medium", choices=list(PROBLEMS))
    ap.add_argument("--atoms", type=int, default=10000)
    ap.add_argument(
        "--elements",
        type=int,
        default=89,
        help="species of the model (Z = 1..N, Cu included): MACE-MP-0 has 89, which "
        "sizes its per-species weights and its skip tensor product",
    )
    ap.add_argument("--engines", default="cuda,host")
    ap.add_argument(
        "--precisions",
        default="fp64,fp32",
        help="mace-torch and CUDA-engine precisions (fp64, fp32; mixed: engine only)",
    )
    ap.add_argument("--host-precisions", default="fp64")
    ap.add_argument(
        "--torch-precisions",
        default=None,
        help="mace-torch precisions (default: --precisions; 'none': mace-torch not run, for "
        "sizes beyond its memory, where the CUDA engine is checked against the host engine or "
        "its own fp64)",
    )
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--host-repeat", type=int, default=2, help="timed runs of the host engine")
    ap.add_argument(
        "--atomic",
        action="store_true",
        help="CUDA engine with atomic accumulation (default: deterministic)",
    )
    ap.add_argument(
        "--kernel-profile",
        action="store_true",
        help="also write the CUDA engine's kernel-level profile of one step to "
        "OUT/kernel_profile.json (bench_mace_model --kernel-profile)",
    )
    ap.add_argument(
        "--edge-batch",
        type=int,
        default=0,
        help="edges per batch of the CUDA engines' weight stage (0: the engine chooses)",
    )
    ap.add_argument(
        "--kept-rows",
        default="auto",
        choices=["auto", "all", "batch"],
        help="what the CUDA engines keep from the forward to the backward (auto: the engine "
        "chooses; all: every atom's and edge's rows; batch: one edge batch's, made again in "
        "the backward)",
    )
    ap.add_argument(
        "--spline-intervals",
        type=int,
        default=1000,
        help="intervals of the radial tables of the *-spline engines "
        "(pair_style ... radial spline N)",
    )
    ap.add_argument("--out", default="out-model", help="model, structure and forces go here")
    ap.add_argument("--json", default="")
    ap.add_argument(
        "--export-only",
        action="store_true",
        help="write OUT/model.safetensors and the structure, run nothing (the "
        "LAMMPS MD benchmark's MACE-MP-0-medium-sized model)",
    )
    ap.add_argument("--device", default="cuda")
    ap.add_argument(
        "--backend",
        default="cuda",
        choices=["cuda", "emulated"],
        help="the CUDA engines' backend (emulated: device code on the host, no GPU; times "
        "meaningless, the memory ledger exact)",
    )
    ap.add_argument(
        "--ledger-only",
        action="store_true",
        help="one call per CUDA engine, for its device memory ledger (device_bytes_by_buffer) "
        "only: no timing (bench_mace_model --ledger-only)",
    )
    ap.add_argument(
        "--timeout-s",
        type=float,
        default=420,
        help="for each engine process (its first call includes NVRTC compiles)",
    )
    args = ap.parse_args()

    import numpy as np
    import torch

    import mace  # noqa: F401  (before e3nn)
    from potentials import read_mace, write
    from potentials.tests.mace_factory import build_mace

    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    info: Dict[str, Any] = {
        "problem": args.problem,
        "torch": torch.__version__,
        "mace": getattr(mace, "__version__", "?"),
        "python": platform.python_version(),
    }
    try:
        import e3nn

        info["e3nn"] = e3nn.__version__
    except ImportError:
        pass
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    try:
        info["commit"] = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        info["commit"] = None

    t0 = time.time()
    kw = _constructor_args(dict(COMMON, **PROBLEMS[args.problem]))
    kw["atomic_numbers"] = sorted(set(range(1, args.elements + 1)) | {29})
    model = build_mace(seed=0, dtype=torch.float64, **kw)
    info["parameters"] = sum(p.numel() for p in model.parameters())
    info["accumulation"] = "atomic" if args.atomic else "deterministic"  # the CUDA engines'
    model_json, tensors = read_mace.export_mace(model)
    mpath = out_dir / "model.safetensors"
    write.write_model(mpath, model_json, tensors)
    atoms = build_structure(args.atoms)
    spath = out_dir / "structure.safetensors"
    write_structure(atoms, spath)
    # Species are indices in the model's order (write_structure writes 0: one-species models).
    z_order = [int(z) for z in model.atomic_numbers]
    species = np.array([z_order.index(int(z)) for z in atoms.numbers], dtype=np.float64)
    write_structure_species(spath, species)
    info.update(atoms=len(atoms), model_bytes=mpath.stat().st_size, export_s=time.time() - t0)
    print(
        f"[{args.problem}] {info['parameters']:,} parameters, {len(atoms)} atoms; exported "
        f"in {info['export_s']:.1f} s",
        flush=True,
    )
    if args.export_only:
        return 0

    # Clebsch first, in its own process (see the module docstring).
    engine_rows: List[Dict[str, Any]] = []
    engines = [e for e in args.engines.split(",") if e]
    for kind in engines:
        on_gpu = kind.startswith("cuda")
        precs = args.precisions if on_gpu else args.host_precisions
        if not args.binary or not pathlib.Path(args.binary).exists():
            engine_rows += [
                {
                    "engine": kind,
                    "precision": p,
                    "error": f"not run: no bench_mace_model binary ({args.binary or 'none given'})",
                }
                for p in precs.split(",")
            ]
            continue
        cmd = [
            args.binary,
            "--model",
            str(mpath),
            "--structure",
            str(spath),
            "--engine",
            kind,
            "--precision",
            precs,
            "--warmup",
            str(args.warmup),
            "--repeat",
            str(args.repeat if on_gpu else args.host_repeat),
            "--forces-out",
            str(out_dir / "forces"),
        ]
        if args.atomic:
            cmd.append("--atomic")
        if args.edge_batch > 0:
            cmd += ["--edge-batch", str(args.edge_batch)]
        if on_gpu and args.kept_rows != "auto":
            cmd += ["--kept-rows", args.kept_rows]
        if "-spline" in kind:
            cmd += ["--spline-intervals", str(args.spline_intervals)]
        if on_gpu and args.backend != "cuda":
            cmd += ["--backend", args.backend]
        if args.ledger_only:
            cmd.append("--ledger-only")
        if args.kernel_profile and on_gpu:
            # One file per CUDA engine kind (cuda: kernel_profile.json, cuda-fused:
            # kernel_profile_cuda-fused.json) so that the forms are profiled side by side.
            name = "kernel_profile.json" if kind == "cuda" else f"kernel_profile_{kind}.json"
            info.setdefault("kernel_profiles", {})[kind] = str(out_dir / name)
            if kind == "cuda":
                info["kernel_profile"] = str(out_dir / name)
            cmd += ["--kernel-profile", str(out_dir / name)]
        print(f"[{args.problem}] clebsch {kind} engine: {' '.join(cmd)}", flush=True)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s)
        except subprocess.TimeoutExpired:
            engine_rows += [
                {"engine": kind, "precision": p, "error": f"not run: over {args.timeout_s:.0f} s"}
                for p in precs.split(",")
            ]
            continue
        sys.stderr.write(proc.stderr)
        if proc.returncode != 0:
            why = (proc.stderr.strip().splitlines() or ["?"])[-1]
            engine_rows += [
                {"engine": kind, "precision": p, "error": f"not run: {why}"}
                for p in precs.split(",")
            ]
            continue
        res = json.loads(proc.stdout)
        info["edges"] = res["edges"]
        for r in res["results"]:
            if "forces" in r:
                r["forces_array"] = np.fromfile(r["forces"], dtype=np.float64).reshape(-1, 3)
            engine_rows.append(r)

    torch_rows: Dict[str, Dict[str, Any]] = {}
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: mace-torch not run", flush=True)
    else:
        torch_precs = args.precisions if args.torch_precisions is None else args.torch_precisions
        for p in torch_precs.split(","):
            dtype = {"fp64": torch.float64, "fp32": torch.float32}.get(p)
            if dtype is None:
                continue
            print(f"[{args.problem}] mace-torch {p} ...", flush=True)
            torch_rows[p] = time_torch(
                model, atoms, dtype, torch.device(args.device), args.warmup, args.repeat
            )
            r = torch_rows[p]
            print(f"  {r.get('median_s', float('nan')):.4f} s {r.get('error', '')}", flush=True)

    ref64 = torch_rows.get("fp64", {})
    info.setdefault("edges", next((r["edges"] for r in torch_rows.values() if "edges" in r), None))
    # The host engine in float64 is the reference that needs no GPU memory: where mace-torch
    # float64 does not fit, the CUDA engine is still checked against it.
    host64 = next(
        (
            r.get("forces_array")
            for r in engine_rows
            if r["engine"] == "host" and r["precision"] == "fp64"
        ),
        None,
    )
    # Where neither mace-torch nor the host engine ran (sizes beyond them), the fused radial form
    # is checked against the unfused CUDA engine in float64 (itself checked against mace-torch at
    # the sizes where that runs).
    cuda64 = next(
        (
            r.get("forces_array")
            for r in engine_rows
            if r["engine"] in ("cuda", "cuda-unfused") and r["precision"] == "fp64"
        ),
        None,
    )
    # The force check is relative where forces exceed 1 eV/A: random weights of a large model
    # (the MH-1-sized one: |E|/N ~ 2e4 eV) make forces whose float64 round-off alone passes 1e-8.
    force_scale = 1.0
    if "forces" in ref64:
        info["max_abs_F_torch_fp64"] = float(np.abs(ref64["forces"]).max())
        force_scale = max(1.0, info["max_abs_F_torch_fp64"])
    rows = []
    for r in engine_rows:
        row = {k: v for k, v in r.items() if k not in ("forces_array", "times_s")}
        same = torch_rows.get("fp64" if r["precision"] == "fp64" else "fp32", {})
        row["torch_s"] = same.get("median_s")
        row["torch_peak_device_extra_bytes"] = same.get("peak_device_extra_bytes")
        row["torch_error"] = same.get("error")
        if "median_s" in r and row["torch_s"]:
            row["speedup"] = row["torch_s"] / r["median_s"]
        f = r.get("forces_array")
        if f is not None and "forces" in ref64:
            row["max_abs_dF_vs_torch_fp64"] = float(np.abs(f - ref64["forces"]).max())
            row["rel_dE_vs_torch_fp64"] = abs(r["energy"] - ref64["energy"]) / abs(ref64["energy"])
        if f is not None and host64 is not None and r["engine"] != "host":
            row["max_abs_dF_vs_host_fp64"] = float(np.abs(f - host64).max())
        if f is not None and cuda64 is not None and r["engine"] == "cuda-fused":
            row["max_abs_dF_vs_cuda_fp64"] = float(np.abs(f - cuda64).max())
        if f is not None and "forces" in same and same is not ref64:
            row["max_abs_dF_vs_torch_same_precision"] = float(np.abs(f - same["forces"]).max())
        if "-spline" in r["engine"]:
            # An approximation of the model by choice: its error against the exact model is
            # the measurement (no pass/fail at the exact engines' 1e-8).
            row["spline_intervals"] = args.spline_intervals
            row["check"] = "spline (error recorded)"
        elif r["precision"] == "fp64" and "max_abs_dF_vs_torch_fp64" in row:
            row["check"] = (
                "pass"
                if row["max_abs_dF_vs_torch_fp64"] < 1e-8 * force_scale
                and row["rel_dE_vs_torch_fp64"] < 1e-10
                else "FAIL"
            )
        elif r["precision"] == "fp64" and "max_abs_dF_vs_host_fp64" in row:
            row["check"] = (
                "pass (vs host)" if row["max_abs_dF_vs_host_fp64"] < 1e-8 else "FAIL (vs host)"
            )
        elif r["precision"] == "fp64" and "max_abs_dF_vs_cuda_fp64" in row:
            row["check"] = (
                "pass (vs cuda)" if row["max_abs_dF_vs_cuda_fp64"] < 1e-8 else "FAIL (vs cuda)"
            )
        rows.append(row)
    if "forces" in ref64 and "forces" in torch_rows.get("fp32", {}):
        info["torch_fp32_max_abs_dF_vs_fp64"] = float(
            np.abs(torch_rows["fp32"]["forces"] - ref64["forces"]).max()
        )

    print()
    print(
        f"MACE energy + forces, {args.problem} (random weights, {info['parameters']:,} "
        f"parameters), fcc Cu {info['atoms']} atoms, {info.get('edges', '?')} edges, on "
        f"{info.get('gpu', '?')}; mace-torch {info['mace']} (e3nn {info.get('e3nn', '?')}, "
        f"torch {info['torch']}): median of {args.repeat} after {args.warmup} warm-up"
    )
    print(
        "| engine | prec | Clebsch s | mace-torch s | speed-up | Clebsch peak dev GB | "
        "torch peak dev GB | max abs dF vs torch fp64 (eV/A) | vs host fp64 | check |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")

    def fmt(v, spec):
        return "-" if v is None else format(v, spec)

    for r in rows:
        peak = r.get("peak_device_extra_bytes")
        tp = r.get("torch_peak_device_extra_bytes")
        ours = r.get("error") or fmt(r.get("median_s"), ".4f")
        theirs = r.get("torch_error") or fmt(r.get("torch_s"), ".4f")
        print(
            f"| {r['engine']} | {r['precision']} | {ours} | {theirs} | "
            f"{fmt(r.get('speedup'), '.1f')} | "
            f"{fmt(peak / 1e9 if peak is not None and peak >= 0 else None, '.2f')} | "
            f"{fmt(tp / 1e9 if tp is not None else None, '.2f')} | "
            f"{fmt(r.get('max_abs_dF_vs_torch_fp64'), '.2e')} | "
            f"{fmt(r.get('max_abs_dF_vs_host_fp64'), '.2e')} | {r.get('check', '-')} |"
        )
    for r in rows:
        dg = r.get("device_graph") or {}
        if dg:
            # compute_device: the graph stays on the device, as the peers are timed.
            de = abs(dg.get("energy", float("nan")) - r["energy"]) / abs(r["energy"])
            same_e = f"|dE|/|E| vs the host-graph call {de:.1e}"
            print(
                f"{r['engine']} {r['precision']} with the graph on the device: "
                f"{dg.get('error') or fmt(dg.get('median_s'), '.4f') + ' s, ' + same_e}"
            )
    for r in rows:
        # The memory ledger (bench_mace_model.cpp memory_ledger): the largest buffers.
        ledger = r.get("device_bytes_by_buffer") or []
        if ledger:
            print(
                f"{r['engine']} {r['precision']} device memory: "
                f"{r['device_allocated_bytes_per_atom'] / 1e3:.1f} KB/atom allocated after the "
                f"call, {r['device_peak_allocated_bytes_per_atom'] / 1e3:.1f} KB/atom peak; "
                "largest buffers (KB/atom, per):"
            )
            for b in ledger[:12]:
                print(f"  {b['bytes_per_atom'] / 1e3:9.2f}  {b['per']:5}  {b['name']}")
    for p, r in torch_rows.items():
        print(
            f"mace-torch {p}: {r.get('error') or fmt(r.get('median_s'), '.4f') + ' s'}, peak "
            f"extra {fmt((r.get('peak_device_extra_bytes') or 0) / 1e9, '.2f')} GB"
        )
    result = {
        "info": info,
        "rows": rows,
        "torch": {p: {k: v for k, v in r.items() if k != "forces"} for p, r in torch_rows.items()},
    }
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1))
        print(f"wrote {args.json}")
    return 1 if any(str(r.get("check")).startswith("FAIL") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())

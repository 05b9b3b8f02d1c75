# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Merges a peers run (``peers_model_step.py``) into ``bench/results/latest.json``.

Reads ``peers.json`` (its ``records``: one per peer and precision that passed its check, the
peer's configuration named) and, with ``--clebsch-json``, the ``bench_mace_model.py`` result of
the same call (a ``clebsch-cuda`` record per precision); replaces the records of ``--latest``
with the same (what, engine, model, precision, atoms) and appends the new ones; writes the result
to ``--out-latest`` (default: over ``--latest``) and prints a markdown table of this run on
stdout, every peer with its configuration and Clebsch's speed-up over it.

Examples
--------
>>> # python3 bench/report_peers.py out/peers.json --clebsch-json out/clebsch/model.json \\
>>> #     --latest bench/results/latest.json --run bench/results/h200-peers
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any, Dict, List

MODEL_NAME = "mace-mp-0-medium-sized (89 species, random weights)"
MODEL_NAMES = {  # bench_mace_model.py --problem
    "mace-mp-0-medium": MODEL_NAME,
    "mace-mh-1": "mace-mh-1-sized (89 species, random weights)",
}
# bench_mace_model's CUDA engine kinds and what their records' configuration adds: the engine's
# default (cuda), the radial form forced either way (CudaEngineOptions::fused_radial), and the
# radial MLPs tabulated (pair_style ... radial spline N: not the exact model).
RADIAL_FORMS = {
    "cuda": "",
    "cuda-fused": ", fused radial form",
    "cuda-unfused": ", radial MLP outputs stored per edge",
    "cuda-spline": ", radial spline (tabulated radial MLPs, an approximation), interpolated "
    "inside the convolution",
    "cuda-spline-stored": ", radial spline (tabulated radial MLPs, an approximation), weights "
    "stored per edge",
}


def clebsch_records(path: str, run: str) -> List[Dict[str, Any]]:
    res = json.loads(pathlib.Path(path).read_text())
    info, out = res.get("info", {}), []
    # Results from before the field existed were all deterministic (the benchmark's default).
    mode = info.get("accumulation", "deterministic")
    for r in res.get("rows", []):
        form = RADIAL_FORMS.get(r.get("engine"))
        if form is None or "median_s" not in r:
            continue
        n = info.get("atoms")
        peak = r.get("peak_device_extra_bytes")
        out.append(
            {
                "what": "model_step",
                "engine": "clebsch-cuda",
                "configuration": f"CUDA engine, {mode}, default edge batches{form}",
                "model": MODEL_NAMES.get(info.get("problem"), info.get("problem") or MODEL_NAME),
                "precision": r["precision"],
                "atoms": n,
                "edges": info.get("edges"),
                "gpus": 1,
                "gpu": info.get("gpu"),
                "us_per_atom_step": round(r["median_s"] * 1e6 / n, 3),
                "device_bytes_per_atom": None if peak is None or peak < 0 else int(peak / n),
                "max_atoms": None,
                "run": run,
            }
        )
        if r.get("engine", "").startswith("cuda-spline"):
            # The approximation's size beside its speed: forces against the exact model.
            out[-1]["spline_intervals"] = r.get("spline_intervals")
            out[-1]["max_abs_dF_vs_exact_fp64"] = r.get(
                "max_abs_dF_vs_torch_fp64", r.get("max_abs_dF_vs_host_fp64")
            )
        dg = r.get("device_graph") or {}
        if "median_s" in dg:
            # The graph already on the device (compute_device: the clebsch/kk path), the setting
            # the peers are timed in; memory as the host-graph call's.
            out.append(
                dict(
                    out[-1],
                    configuration=f"CUDA engine, {mode}, default edge batches{form}, "
                    "graph on the device (compute_device, as clebsch/kk calls it)",
                    us_per_atom_step=round(dg["median_s"] * 1e6 / n, 3),
                )
            )
    return out


def key(r: Dict[str, Any]):
    return (
        r.get("what"),
        r.get("engine"),
        r.get("configuration"),
        r.get("model"),
        r.get("precision"),
        r.get("atoms"),
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("peers_json")
    ap.add_argument("--clebsch-json", default="")
    ap.add_argument("--latest", default="bench/results/latest.json")
    ap.add_argument("--out-latest", default="")
    ap.add_argument("--run", default="", help="results folder of this run (records' 'run')")
    args = ap.parse_args()

    new: List[Dict[str, Any]] = []
    rows: List[Dict[str, Any]] = []
    p = pathlib.Path(args.peers_json)
    if p.exists():
        res = json.loads(p.read_text())
        rows = res.get("rows", [])
        new += res.get("records", [])
    if args.run:
        for r in new:
            r["run"] = args.run
    if args.clebsch_json and pathlib.Path(args.clebsch_json).exists():
        new += clebsch_records(args.clebsch_json, args.run or args.clebsch_json)
    latest = json.loads(pathlib.Path(args.latest).read_text())
    keys = {key(r) for r in new}
    latest["records"] = [r for r in latest.get("records", []) if key(r) not in keys] + new
    if any(r["engine"] in ("mace-torch+cueq", "symmetrix-xl") for r in latest["records"]):
        latest["note"] = (
            "The figures the README quotes, one record per measurement (bench/README.md). "
            "Peers in their best GPU configuration (mace-torch + cuEquivariance, Symmetrix-XL) "
            "come from bench/run_peers.sh (bench/peers_model_step.py); each names its "
            "configuration. The 'mace-torch' record without cuEquivariance is not its best "
            "configuration."
        )
    out = pathlib.Path(args.out_latest or args.latest)
    out.write_text(json.dumps(latest, indent=1) + "\n")

    # The speed-ups are over Clebsch's default engine with the graph on the device (the setting
    # the peers are timed in), else over its last record of the precision.
    ours = {r["precision"]: r for r in new if r["engine"] == "clebsch-cuda"}
    ours.update(
        {
            r["precision"]: r
            for r in new
            if r["engine"] == "clebsch-cuda"
            and r["configuration"]
            == "CUDA engine, deterministic, default edge batches, graph "
            "on the device (compute_device, as clebsch/kk calls it)"
        }
    )
    print(
        "| engine | configuration | prec | atoms | us/atom-step | device bytes/atom | "
        "Clebsch speed-up |"
    )
    print("|---|---|---|---:|---:|---:|---:|")
    for r in sorted(new, key=lambda r: (r["precision"], r["engine"])):
        c = ours.get(r["precision"])
        sp = (
            f"{r['us_per_atom_step'] / c['us_per_atom_step']:.2f}"
            if c and r is not c and c["atoms"] == r["atoms"]
            else "-"
        )
        print(
            f"| {r['engine']} | {r['configuration']} | {r['precision']} | {r['atoms']} | "
            f"{r['us_per_atom_step']:.2f} | {r['device_bytes_per_atom']} | {sp} |"
        )
    for r in rows:
        if "error" in r or not str(r.get("check", "pass")).startswith("pass"):
            print(
                f"- {r.get('peer')} {r.get('precision', '')} {r.get('execution_profile', '')}: "
                f"{r.get('error') or r.get('check')}"
            )
    print(f"\nwrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

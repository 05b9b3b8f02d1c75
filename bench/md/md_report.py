# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Summarise a run_md_bench.sh folder: LAMMPS's own timing of each run (timesteps/s, ns/day, and
its breakdown: the share of the loop in Pair, the model, and in everything else: neighbor lists,
communication, integration, output) and the agreement of each GPU variant (pair_style clebsch
device gpu: "gpu"; clebsch/kk on Kokkos' GPU: "kk") with device cpu, or with the plain GPU run
where no CPU run was made (step-0 forces and per-atom energies of the same structure)."""

from __future__ import annotations

import argparse
import json
import pathlib
import re

import numpy as np

LOOP = re.compile(r"Loop time of ([\d.eE+-]+) on (\d+) procs for (\d+) steps with (\d+) atoms")
PERF = re.compile(
    r"Performance: ([\d.eE+-]+) ns/day, [\d.eE+-]+ hours/ns, ([\d.eE+-]+) timesteps/s"
)
SECTION = re.compile(r"^(Pair|Neigh|Comm|Output|Modify|Other)\s*\|.*?\|\s*([\d.]+)\s*$", re.M)


def read_forces(path: pathlib.Path) -> np.ndarray:
    """Rows id type fx fy fz e of the single dump frame, sorted by id."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("ITEM: ATOMS")) + 1
    return np.array([[float(v) for v in line.split()] for line in lines[start:] if line.strip()])


def read_run(log: pathlib.Path) -> dict:
    text = log.read_text()
    loops, perfs = LOOP.findall(text), PERF.findall(text)
    if len(loops) < 2 or not perfs:
        return {"error": "no MD timing in the log (run failed?)"}
    seconds, procs, steps, atoms = loops[-1]
    # The last run's breakdown (%total column): the MD run follows the step-0 "run 0".
    sections = {}
    for name, percent in SECTION.findall(text):
        sections[name] = float(percent)
    return {
        "atoms": int(atoms),
        "steps": int(steps),
        "loop_s": float(seconds),
        "ns_per_day": float(perfs[-1][0]),
        "steps_per_s": float(perfs[-1][1]),
        "pair_percent": sections.get("Pair"),
        "outside_model_percent": round(100.0 - sections["Pair"], 2) if "Pair" in sections else None,
        "breakdown_percent": sections,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folder", type=pathlib.Path)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument(
        "--tolerance",
        type=float,
        default=1e-9,
        help="max |dF| (eV/A) of gpu vs cpu allowed in fp64",
    )
    args = parser.parse_args()
    runs = {}
    for log in sorted(args.folder.glob("n*-*-*.log")):
        if log.stem.count("-") != 2:
            continue
        n, prec, dev = log.stem.split("-")
        runs[(int(n[1:]), prec, dev)] = read_run(log)
    rows, failed = [], False
    for (n, prec, dev), run in sorted(runs.items()):
        row = {"n": n, "precision": prec, "device": dev, **run}
        ref = "cpu" if (n, prec, "cpu") in runs else "gpu" if dev == "kk" else None
        if (
            dev != "cpu"
            and ref
            and (n, prec, ref) in runs
            and "error" not in run
            and "error" not in runs[(n, prec, ref)]
        ):
            row["reference"] = ref
            a = read_forces(args.folder / f"n{n}-{prec}-{dev}.forces")
            b = read_forces(args.folder / f"n{n}-{prec}-{ref}.forces")
            if a.shape != b.shape or not np.array_equal(a[:, 0], b[:, 0]):
                row["check"] = "FAIL: dumps differ in atoms"
                failed = True
            else:
                row["max_dF"] = float(np.abs(a[:, 2:5] - b[:, 2:5]).max())
                row["max_de"] = float(np.abs(a[:, 5] - b[:, 5]).max())
                ok = prec != "fp64" or row["max_dF"] <= args.tolerance
                row["check"] = "PASS" if ok else f"FAIL: |dF| > {args.tolerance}"
                failed |= not ok
        if "error" in run:
            failed = True
        rows.append(row)
    names = {
        "gpu": "clebsch device gpu",
        "kk": "clebsch/kk (Kokkos GPU)",
        "cpu": f"clebsch device cpu ({args.threads} threads)",
    }
    print(
        "| atoms | precision | style | timesteps/s | ns/day (2 fs) | Pair % | outside the model % "
        "(Neigh / Comm / Modify / Output / Other) | max abs dF (eV/A) | max abs de_i (eV) "
        "| vs | check |\n|---|---|---|---|---|---|---|---|---|---|---|"
    )
    for r in rows:
        style = names.get(r["device"], r["device"])
        if "error" in r:
            print(f"| 4n^3, n={r['n']} | {r['precision']} | {style} | {r['error']} | | | | | | | |")
            continue
        b = r.get("breakdown_percent", {})
        parts = " / ".join(
            f"{b.get(k, 0):.1f}" for k in ("Neigh", "Comm", "Modify", "Output", "Other")
        )
        print(
            f"| {r['atoms']:,} | {r['precision']} | {style} "
            f"| {r['steps_per_s']:.3g} | {r['ns_per_day']:.3g} | {r['pair_percent']} "
            f"| {r['outside_model_percent']} ({parts}) "
            f"| {r.get('max_dF', ''):{'.2e' if 'max_dF' in r else ''}} "
            f"| {r.get('max_de', ''):{'.2e' if 'max_de' in r else ''}} "
            f"| {r.get('reference', '')} | {r.get('check', '')} |"
        )
    (args.folder / "md.json").write_text(json.dumps(rows, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Markdown tables of the kernel-level step profiles that ``bench_mace_model --kernel-profile``
writes (bench/run_step_profile.sh): per run and precision, the wall time of the profiled call
beside the untimed median, the time by engine phase, and the largest kernels (phase, name,
calls, ms, share of the call, and for rows that move a known number of bytes the rate against
the device copy bandwidth of ``--copy-tbps``).

Examples
--------
>>> # python3 bench/report_step_profile.py out/10000/kernel_profile.json > profile.md
"""

from __future__ import annotations

import argparse
import json
import pathlib
from collections import OrderedDict


def phase_totals(profile):
    totals = OrderedDict()
    for row in profile["launches"]:
        label = row["label"] or "-"
        totals[label] = totals.get(label, 0.0) + row["us"] * 1e-3
    return totals


def report(path: pathlib.Path, top: int, copy_tbps: float) -> str:
    data = json.loads(path.read_text())
    lines = [f"## {data['atoms']} atoms, {data['edges']} edges ({path.parent.name})", ""]
    for p in data["profiles"]:
        per_atom_us = p["untimed_median_ms"] * 1e3 / max(1, data["atoms"])
        lines += [
            f"### {p['engine']} {p['precision']} on {p['backend']}",
            "",
            f"untimed median {p['untimed_median_ms']:.3f} ms ({per_atom_us:.2f} us/atom-step); "
            f"profiled call {p['wall_ms']:.3f} ms, of which kernels {p['kernel_ms']:.3f} ms and "
            f"idle/launch gaps {p['gap_ms']:.3f} ms; {p['records']} records",
            "",
            "| phase | ms | share |",
            "|---|---:|---:|",
        ]
        for label, ms in phase_totals(p).items():
            lines.append(f"| {label} | {ms:.3f} | {100 * ms / p['wall_ms']:.1f} % |")
        lines += [
            "",
            "| phase | kernel | calls | ms | share | GB moved | x copy floor |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for k in p["kernels"][:top]:
            moved = k.get("bytes", 0) or 0
            floor = ""
            # The device copy bandwidth bounds device-side rows only (not H2D/D2H over PCIe).
            if moved and not k["name"].startswith(("copy H2D", "copy D2H")):
                floor_ms = moved / (copy_tbps * 1e12) * 1e3
                floor = f"{k['total_ms'] / floor_ms:.1f}" if floor_ms > 0 else ""
            lines.append(
                f"| {k['label'] or '-'} | `{k['name']}` | {k['calls']} | {k['total_ms']:.3f} | "
                f"{100 * k['share']:.1f} % | {moved / 1e9:.3f} | {floor} |"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profiles", nargs="+", type=pathlib.Path)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument(
        "--copy-tbps",
        type=float,
        default=4.24,
        help="device copy bandwidth (TB/s), as bench_conv measures it",
    )
    args = ap.parse_args()
    print("\n".join(report(p, args.top, args.copy_tbps) for p in args.profiles))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

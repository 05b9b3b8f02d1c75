# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Markdown tables of the kernel-level step profiles that ``bench_mace_model --kernel-profile``
writes (bench/run_step_profile.sh): per run and precision, the wall time of the profiled call
beside the untimed median, the time by engine phase, and the largest kernels (phase, name,
calls, ms, share of the call, and each kernel's floor where the engine gave one: the least
bytes it moves (its operands read once, its results written once; the bytes of a copy or memset),
the time those bytes take at the device copy bandwidth of ``--copy-tbps``, time over that floor,
and its arithmetic rate (2 flops per multiply-add, for the GEMMs and convolution passes)).
Phases and the whole call get the sum of their kernels' floors too.

Examples
--------
>>> # python3 bench/report_step_profile.py out/10000/kernel_profile.json > profile.md
"""

from __future__ import annotations

import argparse
import json
import pathlib
from collections import OrderedDict


def floor_bytes(row) -> float:
    """The bytes a record must move: its floor, or for copies and memsets their bytes."""
    return float(row.get("floor_bytes", 0) or 0) or float(row.get("bytes", 0) or 0)


def device_side(name: str) -> bool:
    """Whether the copy bandwidth bounds the record (not host-device copies over PCIe)."""
    return not name.startswith(("copy H2D", "copy D2H"))


def phase_totals(profile):
    """Per phase: ms, the bytes of the floors of its device-side records and their ms."""
    totals = OrderedDict()
    for row in profile["launches"]:
        label = row["label"] or "-"
        ms, moved, floored_ms = totals.get(label, (0.0, 0.0, 0.0))
        extra = floor_bytes(row) if device_side(row["name"]) else 0.0
        floored = row["us"] * 1e-3 if extra else 0.0
        totals[label] = (ms + row["us"] * 1e-3, moved + extra, floored_ms + floored)
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
            "| phase | ms | share | floor ms (device-side records) |",
            "|---|---:|---:|---:|",
        ]
        step_floor = step_floored = 0.0
        for label, (ms, moved, floored_ms) in phase_totals(p).items():
            floor_ms = moved / (copy_tbps * 1e12) * 1e3
            step_floor += floor_ms
            step_floored += floored_ms
            lines.append(
                f"| {label} | {ms:.3f} | {100 * ms / p['wall_ms']:.1f} % | {floor_ms:.3f} |"
            )
        lines += [
            "",
            f"Sum of the device-side floors: {step_floor:.3f} ms at {copy_tbps} TB/s; the "
            f"records that have one take {step_floored:.3f} ms "
            f"({step_floored / max(step_floor, 1e-9):.1f}x), "
            f"of {p['kernel_ms']:.3f} ms of kernels.",
            "",
            "| phase | kernel | calls | ms | share | floor GB | floor ms | x floor | TFLOP/s |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for k in p["kernels"][:top]:
            moved = floor_bytes(k)
            floor_ms = moved / (copy_tbps * 1e12) * 1e3
            cells = ["", "", ""]
            if moved and device_side(k["name"]):
                cells[0] = f"{floor_ms:.3f}"
                cells[1] = f"{k['total_ms'] / floor_ms:.1f}" if floor_ms > 0 else ""
            flops = float(k.get("flops", 0) or 0)
            if flops and k["total_ms"] > 0:
                cells[2] = f"{flops / (k['total_ms'] * 1e-3) / 1e12:.1f}"
            lines.append(
                f"| {k['label'] or '-'} | `{k['name']}` | {k['calls']} | {k['total_ms']:.3f} | "
                f"{100 * k['share']:.1f} % | {moved / 1e9:.3f} | " + " | ".join(cells) + " |"
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

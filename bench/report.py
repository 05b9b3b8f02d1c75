# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Merge bench_conv's and e3nn_conv.py's JSON lines into one table and a targets summary.

Examples
--------
>>> # python3 bench/report.py out/clebsch.jsonl out/e3nn.jsonl --json out/report.json
"""

import argparse
import json
import sys


def load(path):
    """JSON objects of a JSON-lines file (missing file: none).

    Examples
    --------
    >>> load("/nonexistent")
    []
    """
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("clebsch")
    ap.add_argument("e3nn")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    ours = [r["result"] for r in load(args.clebsch) if "result" in r]
    header = next((r["header"] for r in load(args.clebsch) if "header" in r), {})
    e3nn = {(r["problem"], r["dtype"], r["op"]): r for r in load(args.e3nn)}

    rows = []
    best = {}
    for r in ours:
        if "times" not in r:
            continue
        for op, t in r["times"].items():
            key = (r["problem"], r["dtype"], op)
            entry = best.setdefault(key, {"floor_ms": t["floor_ms"], "modes": {}})
            entry["modes"][r["accumulation"]] = {
                "ms": t["median_ms"], "runs": t["runs"], "verify": r["verify"],
                "extra_MB": r["extra_device_bytes"] / 1e6}
    print(f"# {header.get('gpu', '?')}, driver {header.get('driver', '?')}, copy bandwidth "
          f"{header.get('copy_bandwidth_Bps', 0) / 1e12:.2f} TB/s\n")
    print("| problem | dtype | op | atomic ms | deterministic ms | byte floor ms | best/floor "
          "| e3nn ms (runs) | speedup vs e3nn | e3nn peak extra GB | our extra MB | check |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (prob, dt, op), entry in best.items():
        modes = entry["modes"]
        ms = [m["ms"] for m in modes.values()]
        b = min(ms)
        ref = e3nn.get((prob, dt, op), {})
        ref_ms = ref.get("median_ms")
        speed = ref_ms / b if ref_ms else None
        row = {"problem": prob, "dtype": dt, "op": op,
               "atomic_ms": modes.get("atomic", {}).get("ms"),
               "deterministic_ms": modes.get("deterministic", {}).get("ms"),
               "floor_ms": entry["floor_ms"], "best_over_floor": b / entry["floor_ms"],
               "e3nn_ms": ref_ms, "e3nn_runs": ref.get("runs"), "e3nn_error": ref.get("error"),
               "speedup": speed, "e3nn_peak_extra_GB": (ref.get("peak_extra_bytes") or 0) / 1e9,
               "extra_MB": max(m["extra_MB"] for m in modes.values()),
               "verify": "PASS" if all(m["verify"] == "PASS" for m in modes.values()) else "FAIL"}
        rows.append(row)

        def f(v, fmt):
            return "-" if v is None else format(v, fmt)
        e3 = ref.get("error") or (f"{ref_ms:.2f} ({ref.get('runs')})" if ref_ms else "-")
        print(f"| {prob} | {dt} | {op} | {f(row['atomic_ms'], '.3f')} | "
              f"{f(row['deterministic_ms'], '.3f')} | {row['floor_ms']:.3f} | "
              f"{row['best_over_floor']:.2f} | {e3} | {f(speed, '.1f')} | "
              f"{row['e3nn_peak_extra_GB']:.2f} | {row['extra_MB']:.1f} | {row['verify']} |")

    # float64 / float32 time per problem and op (best mode each).
    print("\n| problem | op | float64 / float32 |")
    print("|---|---|---|")
    by = {(r["problem"], r["dtype"], r["op"]): r for r in rows}
    for (prob, dt, op), r in by.items():
        if dt != "float32" or (prob, "float64", op) not in by:
            continue
        b32 = min(v for v in (r["atomic_ms"], r["deterministic_ms"]) if v is not None)
        r64 = by[(prob, "float64", op)]
        b64 = min(v for v in (r64["atomic_ms"], r64["deterministic_ms"]) if v is not None)
        print(f"| {prob} | {op} | {b64 / b32:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"header": header, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

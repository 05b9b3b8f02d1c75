# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Merge bench_conv's, e3nn_conv.py's and the peers' JSON lines into one table and a summary.

Columns: Clebsch (atomic and deterministic accumulation, best of the two against the byte floor),
e3nn, OpenEquivariance (``oeq_conv.py``, best of its modes) and cuEquivariance
(``cueq_conv.py``), Clebsch's speed-up over each (its time / Clebsch's best time), peak extra
device memory, and the checks. A peer time counts
only when that peer's check against e3nn passed; cells a peer did not run carry a numbered note
with the reason. The summary says, per peer, whether Clebsch is faster on every
(problem, dtype, op) where both ran, and lists the exceptions.

Examples
--------
>>> # python3 bench/report.py out/clebsch.jsonl out/e3nn.jsonl --peer oeq=out/oeq.jsonl \\
>>> #     --peer cueq=out/cueq.jsonl --json out/report.json
"""

import argparse
import json
import sys

PEER_TITLES = {"oeq": "OEQ", "cueq": "cuEq"}
OP_ORDER = {"fwd": 0, "fb": 1, "db": 2}


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


def load_many(paths):
    """``load`` of each comma-separated path, concatenated (the stages of a split run).

    Examples
    --------
    >>> load_many("/nonexistent,/nonexistent2")
    []
    """
    return [r for path in paths.split(",") if path for r in load(path)]


def problem_order(name):
    """Sort key: kernels.md's order (MACE, NequIP, then high l by l).

    Examples
    --------
    >>> sorted(["high-l-5", "nequip-water", "mace-medium", "high-l-4"], key=problem_order)
    ['mace-medium', 'nequip-water', 'high-l-4', 'high-l-5']
    """
    fixed = ["mace-medium", "mace-large", "nequip-benzene", "nequip-water"]
    if name in fixed:
        return (fixed.index(name), 0)
    if name.startswith("high-l-"):
        return (len(fixed), int(name.rsplit("-", 1)[1]))
    return (len(fixed) + 1, name)


def best_peer(records):
    """The fastest checked mode of one peer for one (problem, dtype, op).

    Returns (ms, mode, runs, peak_extra_bytes, None) or (None, None, None, None, reason).

    Examples
    --------
    >>> best_peer([{"mode": "a", "median_ms": 2.0, "verify": "PASS", "runs": 20},
    ...            {"mode": "b", "median_ms": 1.0, "verify": "FAIL", "runs": 20}])
    (2.0, 'a', 20, None, None)
    >>> best_peer([{"mode": "-", "error": "not run: no wheel"}])[4]
    'not run: no wheel'
    """
    ok = [r for r in records if r.get("median_ms") is not None and r.get("verify") == "PASS"]
    if ok:
        r = min(ok, key=lambda r: r["median_ms"])
        return r["median_ms"], r.get("mode"), r.get("runs"), r.get("peak_extra_bytes"), None
    failed = [r for r in records if r.get("median_ms") is not None]
    if failed:
        r = failed[0]
        return (
            None,
            None,
            None,
            None,
            (
                f"check FAILED against e3nn ({r.get('mode')}: fwd rel err "
                f"{r.get('verify_fwd_rel_err', float('nan')):.1e}, bwd "
                f"{r.get('verify_bwd_rel_err', float('nan')):.1e}"
                f"{', ' + r['verify_note'] if r.get('verify_note') else ''}); time not counted"
            ),
        )
    errors = sorted({r.get("error", "not run") for r in records})
    return None, None, None, None, "; ".join(errors) if errors else "not run"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("clebsch", help="bench_conv's JSON lines (comma-separated paths: merged)")
    ap.add_argument("e3nn", help="e3nn_conv.py's JSON lines (comma-separated paths: merged)")
    ap.add_argument(
        "--peer",
        action="append",
        default=[],
        help="NAME=PATH[,PATH...] of a peer's JSON lines (oeq, cueq); repeatable",
    )
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    ours = [r["result"] for r in load_many(args.clebsch) if "result" in r]
    header = next((r["header"] for r in load_many(args.clebsch) if "header" in r), {})
    e3nn = {(r["problem"], r["dtype"], r["op"]): r for r in load_many(args.e3nn)}
    peers = {}
    for spec in args.peer:
        name, _, path = spec.partition("=")
        if not path:
            raise ValueError(f"--peer wants NAME=PATH, got {spec!r}")
        by_key = {}
        for r in load_many(path):
            by_key.setdefault((r["problem"], r["dtype"], r["op"]), []).append(r)
        peers[name] = by_key

    best = {}
    for r in ours:
        if "times" not in r:
            continue
        for op, t in r["times"].items():
            key = (r["problem"], r["dtype"], op)
            entry = best.setdefault(
                key, {"floor_ms": t["floor_ms"], "modes": {}, "edges": r.get("edges")}
            )
            entry["modes"][r["accumulation"]] = {
                "ms": t["median_ms"],
                "runs": t["runs"],
                "verify": r["verify"],
                "extra_MB": r["extra_device_bytes"] / 1e6,
            }
    keys = set(best) | set(e3nn)
    for by_key in peers.values():
        keys |= set(by_key)
    keys = sorted(keys, key=lambda k: (problem_order(k[0]), k[1], OP_ORDER.get(k[2], 9)))

    notes = {}

    def note(text):
        if text not in notes:
            notes[text] = len(notes) + 1
        return f"[{notes[text]}]"

    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    print(
        f"# {header.get('gpu', '?')}, driver {header.get('driver', '?')}, copy bandwidth "
        f"{header.get('copy_bandwidth_Bps', 0) / 1e12:.2f} TB/s; commit "
        f"{header.get('commit') or '?'}\n"
    )
    peer_cols = "".join(f" {PEER_TITLES.get(p, p)} ms (mode) |" for p in peers)
    speed_cols = "".join(f" x{PEER_TITLES.get(p, p)} |" for p in peers)
    mem_cols = "".join(f" {PEER_TITLES.get(p, p)} GB |" for p in peers)
    print(
        "| problem | dtype | op | atomic ms | det. ms | floor ms | best/floor | e3nn ms (runs) |"
        + peer_cols
        + " x e3nn |"
        + speed_cols
        + " our extra MB | e3nn GB |"
        + mem_cols
        + " check |"
    )
    ncol = 12 + 3 * len(peers)
    print("|" + "---|" * ncol)
    rows = []
    for key in keys:
        prob, dt, op = key
        entry = best.get(key)
        modes = entry["modes"] if entry else {}
        ms = [m["ms"] for m in modes.values()]
        b = min(ms) if ms else None
        ref = e3nn.get(key, {})
        ref_ms = ref.get("median_ms")
        row = {
            "problem": prob,
            "dtype": dt,
            "op": op,
            "atomic_ms": modes.get("atomic", {}).get("ms"),
            "deterministic_ms": modes.get("deterministic", {}).get("ms"),
            "floor_ms": entry["floor_ms"] if entry else None,
            "best_over_floor": b / entry["floor_ms"] if entry and b else None,
            "e3nn_ms": ref_ms,
            "e3nn_runs": ref.get("runs"),
            "e3nn_error": ref.get("error"),
            "speedup": ref_ms / b if ref_ms and b else None,
            "e3nn_peak_extra_GB": (ref.get("peak_extra_bytes") or 0) / 1e9 if ref else None,
            "extra_MB": max(m["extra_MB"] for m in modes.values()) if modes else None,
            "verify": (
                "PASS"
                if modes and all(m["verify"] == "PASS" for m in modes.values())
                else ("FAIL" if modes else "not run")
            ),
        }
        cells_peer, cells_speed, cells_mem = "", "", ""
        for name, by_key in peers.items():
            recs = by_key.get(key, [])
            # A peer timed at another size (a smoke test's --scale) is not comparable.
            if entry and entry.get("edges"):
                other = [r for r in recs if r.get("edges") not in (None, entry["edges"])]
                recs = [r for r in recs if r not in other]
                if other and not recs:
                    recs = [
                        {
                            "error": f"not comparable: run with E = {other[0]['edges']}, "
                            f"Clebsch with E = {entry['edges']}"
                        }
                    ]
            p_ms, p_mode, p_runs, p_mem, why = best_peer(recs)
            if not recs:
                why = "not in this run"
            row[f"{name}_ms"], row[f"{name}_mode"], row[f"{name}_runs"] = p_ms, p_mode, p_runs
            row[f"{name}_peak_extra_GB"] = p_mem / 1e9 if p_mem is not None else None
            row[f"{name}_why"] = why
            row[f"speedup_vs_{name}"] = p_ms / b if p_ms and b else None
            cells_peer += f" {p_ms:.3f} ({p_mode}) |" if p_ms is not None else f" {note(why)} |"
            cells_speed += f" {f(row[f'speedup_vs_{name}'], '.1f')} |"
            cells_mem += f" {f(row[f'{name}_peak_extra_GB'], '.2f')} |"
        rows.append(row)
        e3 = (
            note(ref["error"])
            if ref.get("error")
            else (f"{ref_ms:.2f} ({ref.get('runs')})" if ref_ms else "-")
        )
        print(
            f"| {prob} | {dt} | {op} | {f(row['atomic_ms'], '.3f')} | "
            f"{f(row['deterministic_ms'], '.3f')} | {f(row['floor_ms'], '.3f')} | "
            f"{f(row['best_over_floor'], '.2f')} | {e3} |{cells_peer} "
            f"{f(row['speedup'], '.1f')} |{cells_speed} {f(row['extra_MB'], '.1f')} | "
            f"{f(row['e3nn_peak_extra_GB'], '.2f')} |{cells_mem} {row['verify']} |"
        )
    if notes:
        print()
        for text, k in notes.items():
            print(f"[{k}] {text}")

    # Where each peer ran, is Clebsch faster (best mode against the peer's best checked mode)?
    summary = {}
    print()
    for name in peers:
        both = [r for r in rows if r[f"speedup_vs_{name}"] is not None]
        slower = [r for r in both if r[f"speedup_vs_{name}"] <= 1.0]
        summary[name] = {
            "compared": len(both),
            "clebsch_slower_or_equal": [f"{r['problem']}:{r['dtype']}:{r['op']}" for r in slower],
        }
        title = PEER_TITLES.get(name, name)
        if not both:
            print(f"{title}: no (problem, dtype, op) where both ran.")
        elif not slower:
            lo = min(r[f"speedup_vs_{name}"] for r in both)
            print(
                f"{title}: Clebsch faster on all {len(both)} (problem, dtype, op) where both ran "
                f"(smallest speed-up {lo:.2f}x)."
            )
        else:
            print(
                f"{title}: Clebsch NOT faster on {len(slower)} of {len(both)}: "
                + ", ".join(summary[name]["clebsch_slower_or_equal"])
            )

    # float64 / float32 time per problem and op (best mode each).
    print("\n| problem | op | float64 / float32 |")
    print("|---|---|---|")
    by = {(r["problem"], r["dtype"], r["op"]): r for r in rows}
    for (prob, dt, op), r in by.items():
        r64 = by.get((prob, "float64", op))
        if dt != "float32" or r64 is None:
            continue
        t32 = [v for v in (r["atomic_ms"], r["deterministic_ms"]) if v is not None]
        t64 = [v for v in (r64["atomic_ms"], r64["deterministic_ms"]) if v is not None]
        if t32 and t64:
            print(f"| {prob} | {op} | {min(t64) / min(t32):.2f} |")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(
                {
                    "header": header,
                    "rows": rows,
                    "notes": {v: k for k, v in notes.items()},
                    "summary": summary,
                },
                out,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

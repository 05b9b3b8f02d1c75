# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Production-MD soak (issue 28): NVE from an equilibrated NVT state for each model, style and
precision, and a melt of the Cu-Au model across MPI ranks. Run through bench/md/soak.

NVE: fcc Cu3Au-like alloy of 4 n^3 atoms (n from --atoms), NVT at --temp for --equil-steps,
then NVE for --steps at --dt fs with the total energy every --thermo steps. Recorded per run:
the total-energy drift (least-squares slope, eV/atom/ns), its fluctuation (r.m.s. about the
line, eV/atom), LAMMPS's neighbor-list rebuild and dangerous-build counts, the atoms that
changed rank (migrations) and crossed a periodic boundary between dump frames, and the mean
squared displacement. Each becomes a record {"what": "nve", ...} in --results. The GPU fp64
drift is also fitted over the CPU run's steps and compared with the CPU fp64 drift.

Melt (--melt): the bundled Cu-Au model heated from --melt-t0 to --melt-t1 over --melt-steps on
--melt-ranks ranks, and its first --melt-compare steps on one rank: the potential energies of
the two must agree to round-off; a record {"what": "melt", ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BUNDLED = ROOT / "potentials" / "bundled"
# Bounds of issue 28 (eV/atom/ns).
BOUND = {"fp64": 1e-4, "mixed": 1e-4, "fp32": 1e-3}

NVE_INPUT = """
units metal
atom_style atomic
atom_modify map array
read_data {data}
plugin load {plugin}
pair_style clebsch device {device} precision {precision}{pair_extra}
pair_coeff * * {model} {elements}
neighbor 1.0 bin
timestep {dt_ps}
velocity all create {temp2} 4928459 mom yes rot yes dist gaussian loop geom
fix nvt all nvt temp {temp} {temp} {tdamp}
thermo {thermo}
run {equil}
unfix nvt
reset_timestep 0
compute msd all msd
thermo_style custom step temp pe ke etotal c_msd[4]
thermo_modify format float %.17g norm no flush yes
dump track all custom {track} track.dump id proc ix iy iz
fix nve all nve
run {steps}
"""


def crystal(n, au_fraction=0.25, a=3.75, jitter=0.05, seed=20261129):
    """A data file of the n^3 fcc Cu-Au crystal (the same system for any number of ranks)."""
    rng = np.random.default_rng(seed)
    basis = np.array([[0, 0, 0], [0.5, 0.5, 0], [0.5, 0, 0.5], [0, 0.5, 0.5]])
    cells = np.array([(i, j, k) for i in range(n) for j in range(n) for k in range(n)], float)
    x = ((cells[:, None, :] + basis[None, :, :]) * a).reshape(-1, 3)
    x += rng.normal(scale=jitter, size=x.shape)
    types = np.where(rng.random(len(x)) < au_fraction, 2, 1)
    length = n * a
    lines = ["Clebsch soak crystal", "", f"{len(x)} atoms", "2 atom types", ""]
    lines += [f"0 {length:.17g} {ax}lo {ax}hi" for ax in "xyz"]
    lines += ["", "Masses", "", "1 63.546", "2 196.97", "", "Atoms # atomic", ""]
    lines += [
        f"{i + 1} {t} {p[0]:.17g} {p[1]:.17g} {p[2]:.17g}" for i, (t, p) in enumerate(zip(types, x))
    ]
    return "\n".join(lines) + "\n"


def thermo_rows(log: str) -> list[dict[str, float]]:
    """Rows of every thermo table of a LAMMPS log."""
    rows, header = [], None
    for line in log.splitlines():
        words = line.split()
        if words[:1] == ["Step"]:
            header = words
            continue
        if header is None or len(words) != len(header):
            header = None
            continue
        try:
            rows.append(dict(zip(header, map(float, words))))
        except ValueError:
            header = None
    return rows


def fit_drift(rows, natoms, dt_fs, max_step=None):
    """(slope eV/atom/ns, r.m.s. about the line eV/atom, max-min eV/atom) of TotEng."""
    rows = [r for r in rows if "TotEng" in r and (max_step is None or r["Step"] <= max_step)]
    t_ns = np.array([r["Step"] for r in rows]) * dt_fs * 1e-6
    e = np.array([r["TotEng"] for r in rows]) / natoms
    slope, icpt = np.polyfit(t_ns, e, 1)
    rms = float(np.sqrt(np.mean((e - (slope * t_ns + icpt)) ** 2)))
    return float(slope), rms, float(e.max() - e.min())


def track_counts(path: pathlib.Path):
    """Atoms that changed rank, and periodic-boundary crossings, summed over consecutive frames
    of a dump of id proc ix iy iz (lower bounds: a frame every --track steps)."""
    frames, lines, i = [], path.read_text().splitlines(), 0
    while i < len(lines):
        if lines[i].startswith("ITEM: NUMBER OF ATOMS"):
            n = int(lines[i + 1])
            start = i + 7
            data = np.array([[int(v) for v in ln.split()] for ln in lines[start : start + n]])
            frames.append(data[np.argsort(data[:, 0])])
            i = start + n
        else:
            i += 1
    migrations = crossings = 0
    for a, b in zip(frames, frames[1:]):
        if a.shape != b.shape:
            continue
        migrations += int((a[:, 1] != b[:, 1]).sum())
        crossings += int(np.abs(a[:, 2:5] - b[:, 2:5]).sum())
    return migrations, crossings


def run_name(args, work):
    """What a record names as its run: --run-name/<run folder> when given (the committed results
    folder the logs are copied to), else the run's own folder."""
    return f"{args.run_name}/{work.name}" if args.run_name else str(work)


def run_lmp(cmd, cwd, env, timeout):
    """LAMMPS's exit status, output and log; a run over --timeout is that run's failure (rc
    124, as timeout(1) reports it) and the soak goes on with the next."""
    try:
        proc = subprocess.run(
            cmd,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )
        rc, out = proc.returncode, proc.stdout
    except subprocess.TimeoutExpired as e:
        partial = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc, out = 124, partial + f"\nsoak: over --timeout {timeout:.0f} s, stopped\n"
    log = (cwd / "log.lammps").read_text() if (cwd / "log.lammps").exists() else ""
    return rc, out, log


def launcher(args, nprocs):
    if nprocs <= 1:
        return []
    return [args.mpirun, "-np", str(nprocs), "--oversubscribe"]


def nve_run(args, name, model, elements, style, precision, env):
    cpu = style == "cpu"
    steps = args.cpu_steps if cpu else args.steps
    n = max(2, round((args.cpu_atoms if cpu else args.atoms) / 4) ** (1 / 3))
    n = int(round(n))
    tag = f"nve-{name}-{style}-{precision}"
    work = args.out / tag
    work.mkdir(parents=True, exist_ok=True)
    (work / "data.in").write_text(crystal(n))
    extra = f" deterministic {args.deterministic}" if style != "cpu" else ""
    text = NVE_INPUT.format(
        data="data.in",
        plugin=args.plugin,
        device="cpu" if cpu else "gpu",
        precision=precision,
        pair_extra=extra,
        model=model,
        elements=elements,
        dt_ps=args.dt * 1e-3,
        temp=args.temp,
        temp2=2 * args.temp,
        tdamp=100 * args.dt * 1e-3,
        thermo=args.thermo,
        equil=args.equil_steps,
        track=args.track or max(args.thermo, steps // 100),
        steps=steps,
    )
    (work / "in.nve").write_text(text)
    kk = args.kk_args.split() if style == "kk" else []
    cmd = launcher(args, args.nprocs) + [
        args.lmp,
        *kk,
        "-nocite",
        "-in",
        "in.nve",
        "-log",
        "log.lammps",
        "-screen",
        "none",
    ]
    rc, out, log = run_lmp(cmd, work, env, args.timeout)
    rec = {
        "what": "nve",
        "engine": "clebsch",
        "model": name,
        "style": style,
        "precision": precision,
        "atoms": 4 * n**3,
        "steps": steps,
        "dt_fs": args.dt,
        "temp_K": args.temp,
        "ranks": args.nprocs,
        "run": run_name(args, work),
    }
    if style != "cpu":
        rec["deterministic"] = args.deterministic
    if rc != 0:
        rec["error"] = (out + log)[-1500:]
        return rec, None
    rows = [r for r in thermo_rows(log) if "c_msd[4]" in r]
    drift, rms, spread = fit_drift(rows, 4 * n**3, args.dt)
    builds = re.findall(r"Neighbor list builds = (\d+)", log)
    dangerous = re.findall(r"Dangerous builds = (\d+)", log)
    migrations, crossings = track_counts(work / "track.dump")
    loop = re.findall(r"Loop time of ([\d.eE+-]+) on", log)
    rec.update(
        {
            "drift_ev_per_atom_ns": drift,
            "fluctuation_ev_per_atom": rms,
            "max_minus_min_ev_per_atom": spread,
            "neighbor_builds": int(builds[-1]) if builds else None,
            "dangerous_builds": int(dangerous[-1]) if dangerous else None,
            "migrations": migrations,
            "boundary_crossings": crossings,
            "msd_A2": rows[-1]["c_msd[4]"],
            "loop_s": float(loop[-1]) if loop else None,
            "bound_ev_per_atom_ns": BOUND[precision],
            "check": "PASS" if abs(drift) <= BOUND[precision] else "FAIL",
        }
    )
    return rec, rows


MELT_INPUT = """
units metal
atom_style atomic
atom_modify map array
read_data data.in
plugin load {plugin}
pair_style clebsch device {device}
pair_coeff * * {model} Cu Au
timestep {dt_ps}
velocity all create {t0} 4928459 mom yes rot yes dist gaussian loop geom
compute msd all msd
thermo_style custom step temp pe etotal c_msd[4]
thermo_modify format float %.17g norm no flush yes
thermo {thermo}
dump track all custom {track} track.dump id proc ix iy iz
fix nvt all nvt temp {t0} {t1} {tdamp}
# start/stop: the 1-rank comparison run follows the same temperature ramp for its first steps.
run {steps} start 0 stop {total}
"""


def melt(args, env):
    n = int(round((args.melt_atoms / 4) ** (1 / 3)))
    runs = {}
    for ranks, steps in ((args.melt_ranks, args.melt_steps), (1, args.melt_compare)):
        work = args.out / f"melt-{ranks}ranks"
        work.mkdir(parents=True, exist_ok=True)
        (work / "data.in").write_text(crystal(n))
        text = MELT_INPUT.format(
            plugin=args.plugin,
            device=args.melt_device,
            model=BUNDLED / "cuau-mace.safetensors",
            dt_ps=args.dt * 1e-3,
            t0=args.melt_t0,
            t1=args.melt_t1,
            tdamp=100 * args.dt * 1e-3,
            thermo=args.thermo,
            track=max(args.thermo, steps // 50),
            steps=steps,
            total=args.melt_steps,
        )
        (work / "in.melt").write_text(text)
        cmd = launcher(args, ranks) + [
            args.lmp,
            "-nocite",
            "-in",
            "in.melt",
            "-log",
            "log.lammps",
            "-screen",
            "none",
        ]
        rc, out, log = run_lmp(cmd, work, env, args.timeout)
        runs[ranks] = (rc, out, log, work)
    rc, out, log, work = runs[args.melt_ranks]
    rec = {
        "what": "melt",
        "engine": "clebsch",
        "model": "cuau-mace (bundled)",
        "device": args.melt_device,
        "atoms": 4 * n**3,
        "ranks": args.melt_ranks,
        "steps": args.melt_steps,
        "t0_K": args.melt_t0,
        "t1_K": args.melt_t1,
        "run": run_name(args, work),
    }
    if rc != 0 or runs[1][0] != 0:
        rec["error"] = (out + log)[-1500:] if rc else (runs[1][1] + runs[1][2])[-1500:]
        return rec
    many = {r["Step"]: r for r in thermo_rows(log) if "c_msd[4]" in r}
    one = {r["Step"]: r for r in thermo_rows(runs[1][2]) if "c_msd[4]" in r}
    common = sorted(set(many) & set(one))
    de = max(abs(many[s]["PotEng"] - one[s]["PotEng"]) / abs(one[s]["PotEng"]) for s in common)
    migrations, crossings = track_counts(work / "track.dump")
    last = many[max(many)]
    rec.update(
        {
            "completed": max(many) == args.melt_steps,
            "final_temp_K": last["Temp"],
            "msd_A2": last["c_msd[4]"],
            "migrations": migrations,
            "boundary_crossings": crossings,
            "compare_steps": args.melt_compare,
            "max_rel_pe_difference_vs_1_rank": de,
            "check": "PASS"
            if de <= args.melt_tolerance and max(many) == args.melt_steps
            else "FAIL",
        }
    )
    return rec


def write_results(path: pathlib.Path, records):
    """Replace the records of the same measurement (what, model, style, precision) in the
    results file and append the new ones."""
    data = json.loads(path.read_text()) if path.exists() else {"note": "", "records": []}

    def key(r):
        return (r.get("what"), r.get("model"), r.get("style", r.get("device")), r.get("precision"))

    new = {key(r) for r in records}
    data["records"] = [r for r in data["records"] if key(r) not in new] + records
    path.write_text(json.dumps(data, indent=1) + "\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--lmp", required=True)
    p.add_argument("--plugin", required=True)
    p.add_argument("--out", type=pathlib.Path, required=True)
    p.add_argument(
        "--models",
        default="cuau-mace,cuau-nequip",
        help="bundled names, or NAME=PATH:ELEMENTS (e.g. mp0-medium=m.safetensors:Cu,Au)",
    )
    p.add_argument("--styles", default="gpu,kk,cpu", help="gpu (device gpu), kk, cpu")
    p.add_argument("--precisions", default="fp64,mixed,fp32")
    p.add_argument("--cpu-precisions", default="fp64")
    p.add_argument("--steps", type=int, default=100000)
    p.add_argument("--atoms", type=int, default=10000)
    p.add_argument("--cpu-steps", type=int, default=10000)
    p.add_argument("--cpu-atoms", type=int, default=10000)
    p.add_argument("--equil-steps", type=int, default=2000)
    p.add_argument("--temp", type=float, default=600.0)
    p.add_argument("--dt", type=float, default=1.0, help="fs")
    p.add_argument("--thermo", type=int, default=100)
    p.add_argument("--track", type=int, default=0, help="steps between rank/image frames")
    p.add_argument("--deterministic", default="yes")
    p.add_argument("--kk-args", default="-k on g 1 -sf kk")
    p.add_argument("--nprocs", type=int, default=1)
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--timeout", type=float, default=7 * 24 * 3600)
    p.add_argument(
        "--run-name",
        default="",
        help="the folder the records name as their run (e.g. bench/results/h200-run21-soak, "
        "where the logs are committed); default: --out",
    )
    p.add_argument("--results", type=pathlib.Path, default=ROOT / "bench/results/latest.json")
    p.add_argument("--melt", action="store_true")
    p.add_argument("--no-nve", action="store_true")
    p.add_argument("--melt-atoms", type=int, default=4000)
    p.add_argument("--melt-ranks", type=int, default=4)
    p.add_argument("--melt-steps", type=int, default=20000)
    p.add_argument("--melt-compare", type=int, default=1000)
    p.add_argument("--melt-t0", type=float, default=300.0)
    p.add_argument("--melt-t1", type=float, default=2500.0)
    p.add_argument("--melt-device", default="cpu")
    p.add_argument("--melt-tolerance", type=float, default=1e-9)
    args = p.parse_args()
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    args.plugin = str(pathlib.Path(args.plugin).resolve())
    if "/" in args.lmp:
        args.lmp = str(pathlib.Path(args.lmp).resolve())
    env = dict(os.environ)
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    # The CPU reference on every core unless told otherwise (LAMMPS defaults to one thread).
    env.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 1))

    records, failed = [], False
    rows_of = {}
    for spec in [] if args.no_nve else args.models.split(","):
        if "=" in spec:
            name, rest = spec.split("=", 1)
            path, _, elements = rest.partition(":")
            model, elements = str(pathlib.Path(path).resolve()), elements.replace(",", " ")
        else:
            name, model, elements = spec, str(BUNDLED / f"{spec}.safetensors"), "Cu Au"
        for style in args.styles.split(","):
            precs = args.cpu_precisions if style == "cpu" else args.precisions
            for prec in precs.split(","):
                rec, rows = nve_run(args, name, model, elements or "Cu Au", style, prec, env)
                rows_of[(name, style, prec)] = (rows, rec)
                records.append(rec)
                print(json.dumps(rec), flush=True)
        # GPU fp64 against CPU fp64 over the CPU run's steps (issue 28: within 2x).
        cpu = rows_of.get((name, "cpu", "fp64"))
        for style in ("gpu", "kk"):
            gpu = rows_of.get((name, style, "fp64"))
            if cpu and gpu and cpu[0] and gpu[0] and gpu[1]["atoms"] == cpu[1]["atoms"]:
                window = cpu[1]["steps"]
                g, _, _ = fit_drift(gpu[0], gpu[1]["atoms"], args.dt, max_step=window)
                c = cpu[1]["drift_ev_per_atom_ns"]
                gpu[1]["drift_over_cpu_steps_ev_per_atom_ns"] = g
                gpu[1]["cpu_fp64_drift_ev_per_atom_ns"] = c
                ok = abs(g) <= 2 * abs(c) or abs(g) <= BOUND["fp64"] / 10
                gpu[1]["vs_cpu_check"] = "PASS" if ok else "FAIL"
    if args.melt:
        rec = melt(args, env)
        records.append(rec)
        print(json.dumps(rec), flush=True)
    for r in records:
        failed |= "error" in r or r.get("check") == "FAIL" or r.get("vs_cpu_check") == "FAIL"
    write_results(args.results, records)
    print(
        f"{len(records)} records written to {args.results}; "
        f"{'some FAILED' if failed else 'all passed'}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

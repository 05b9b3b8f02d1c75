# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Model-level peers in their best GPU configurations: mace-torch + cuEquivariance, Symmetrix-XL.

The same model and structure as ``bench_mace_model.py`` (``build_model`` and ``build_structure``:
MACE-MP-0-medium-sized, 89 species, random weights, seed 0; rattled fcc Cu, 10,000 -> 10,192
atoms, r_max 6 A), energy + forces in float32 and float64 with:

- ``mace-torch+cueq``: the mace-torch model converted with mace-torch's own e3nn -> cuEquivariance
  tool (``mace.cli.convert_e3nn_cueq.run``, what ``MACECalculator(enable_cueq=True)`` does) on the
  GPU: layout ``ir_mul``, ``optimize_all`` (cuEquivariance's linears, symmetric contraction and
  channel-wise tensor product) and ``conv_fusion`` (the gather, tensor product and scatter in one
  ``SegmentedPolynomial`` ``uniform_1d`` kernel); the modules actually built are counted and
  printed. The model keeps MACE's original symmetric-contraction basis (``use_reduced_cg=False``:
  with cuEquivariance importable mace-torch would otherwise build a different, reduced-basis model
  from the same seed; the converter handles the original basis, ``original_mace=True``);
- ``symmetrix-xl``: the same weights converted with Symmetrix-XL's own converter
  (``symmetrix.extract_mace_data``, the ``symmetrix_extract_mace`` tool: compact universal JSON),
  evaluated by its ASE calculator (``Symmetrix(json, dtype=...)``) on its CUDA 13 sm_90 backend
  with direct (edge-streamed, NVRTC-specialised) execution in its ``speed`` execution profile
  (its throughput policy; ``--symmetrix-profiles speed,capacity`` adds its default, ``capacity``,
  which picks the fastest policy it estimates to fit the device); its own neighbour list (cutoff
  + 0.5 A skin, its default, reused across the timed calls as in MD); on periodic cells it adds
  the stress to every call.

Checks before any timing: each peer's energy and forces against mace-torch float64 (e3nn, no
cuEquivariance) on a smaller structure of the same kind (``--check-atoms``: mace-torch float64
does not fit an H200 at 10k atoms), and at the timed size against Clebsch's forces where a
``bench_mace_model.py`` run of the same model and structure wrote them (``--clebsch-json``: its
``model.json``; the host engine's float64 forces first, else the CUDA engine's), and against the
other peer's float64. Pass thresholds: float64 max |dF| < 1e-6 eV/A (Symmetrix-XL's compact
radial splines are not bit-for-bit MACE's Bessel basis, so float64 agreement is to spline
accuracy; recorded as measured), float32 max |dF| < 1e-3 eV/A.

Timing (kernels.md / METHOD.md): ``--warmup`` calls, then the median of ``--repeat`` (>= 10)
calls, each closed by ``torch.cuda.synchronize()`` (mace-torch) or by the calculator returning
its forces on the host (Symmetrix-XL, which copies them back in every call); peak extra device
memory: PyTorch's allocator peak over the model and batch for mace-torch (as bench_mace_model.py),
and for both the device-wide used memory sampled every ~2 ms (NVML) during one extra call, less
the figure before the peer loaded. Each peer runs in its own process (``--worker``), so the two
share no allocator, and a peer that cannot be installed, converted or run is recorded as
``"error": "not run: <why>"`` while the rest goes on.

Output: ``OUT/peers.json`` (everything) and, per measurement, records in the format of
``bench/results/latest.json`` (``bench/report_peers.py`` merges them into it).

Examples
--------
>>> # PYTHONPATH=$MACE_PYTHONPATH:$PEERS_PYTHONPATH:$SYMMETRIX_PYTHONPATH:. \\
>>> #     python3 bench/peers_model_step.py --out /tmp/peers --clebsch-json /tmp/m/model.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import pathlib
import subprocess
import sys
import threading
import time
import traceback
from typing import Any, Callable, Dict, List, Optional

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")

from bench_mace_cpu import COMMON, PROBLEMS, build_structure  # noqa: E402

MODEL_NAME = "mace-mp-0-medium-sized (89 species, random weights)"
TOL = {"fp64": 1e-6, "fp32": 1e-3}
PEERS = ("cueq", "symmetrix")


def build_model(problem: str, elements: int, **extra):
    """The model of bench_mace_model.py (same constructor arguments and seed)."""
    import torch

    from potentials.tests.mace_factory import build_mace

    kw = dict(COMMON, **PROBLEMS[problem])
    kw["atomic_numbers"] = sorted(set(range(1, elements + 1)) | {29})
    return build_mace(seed=0, dtype=torch.float64, **kw, **extra)


class MemorySampler:
    """Device-wide used memory, sampled in a thread (NVML; else cudaMemGetInfo through torch)."""

    def __init__(self, device_index: int = 0, period_s: float = 0.002):
        self.period_s, self.peak, self._stop = period_s, 0, threading.Event()
        self.read: Optional[Callable[[], int]] = None
        self.how = "none"
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
            self.read = lambda: int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
            self.how = "nvml device used"
        except Exception:  # noqa: BLE001  (no NVML: fall back, or no sampling at all)
            try:
                import torch

                if torch.cuda.is_available():

                    def read() -> int:
                        free, total = torch.cuda.mem_get_info()
                        return int(total - free)

                    self.read, self.how = read, "cudaMemGetInfo"
            except ImportError:
                pass

    def now(self) -> Optional[int]:
        return self.read() if self.read else None

    def __enter__(self):
        self.peak = self.now() or 0
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        if self.read:
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.read())
            time.sleep(self.period_s)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self.read:
            self._thread.join()
            self.peak = max(self.peak, self.read())


def median(xs: List[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2]


def compare(rec: Dict[str, Any], name: str, e, f, ref: Optional[Dict[str, Any]]) -> None:
    """max |dF| and |dE|/|E| of (e, f) against ref (energy, forces) into rec[name_*]."""
    import numpy as np

    if ref is None or ref.get("forces") is None:
        return
    rec[f"max_abs_dF_vs_{name}"] = float(np.abs(np.asarray(f) - ref["forces"]).max())
    if ref.get("energy") is not None:
        rec[f"rel_dE_vs_{name}"] = abs(e - ref["energy"]) / abs(ref["energy"])


# --------------------------------------------------------------------------------------------
# Workers: one process per peer, both precisions.


def load_case(work: pathlib.Path, which: str):
    import ase.io

    return ase.io.read(str(work / f"{which}.extxyz"))


def save_rows(work: pathlib.Path, peer: str, rows: List[Dict[str, Any]]) -> None:
    """The worker's rows so far (a timeout of its process keeps the finished ones)."""
    (work / f"worker-{peer}.json").write_text(json.dumps(rows, indent=1, default=str))


def worker_cueq(args, work: pathlib.Path) -> List[Dict[str, Any]]:
    import numpy as np
    import torch

    import mace
    from mace.cli.convert_e3nn_cueq import run as e3nn_to_cueq
    from potentials.read_mace import _batch_for

    import cuequivariance_torch as cuet

    ops = None
    try:
        import cuequivariance_ops_torch as cuops

        ops = getattr(cuops, "__version__", "?")
    except ImportError as exc:
        if args.device == "cuda":
            raise RuntimeError(f"cuequivariance_ops_torch missing ({exc})") from exc
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    model = torch.load(str(work / "model.pt"), weights_only=False)
    out: List[Dict[str, Any]] = []
    for prec in args.precisions.split(","):
        dtype = {"fp64": torch.float64, "fp32": torch.float32}[prec]
        rec: Dict[str, Any] = {"peer": "mace-torch+cueq", "precision": prec}
        out.append(rec)
        old = torch.get_default_dtype()
        m = batch = None
        try:
            torch.set_default_dtype(dtype)
            src = copy.deepcopy(model).to(dtype=dtype)
            # mace-torch's tool; conv_fusion is on exactly when device == "cuda".
            m = e3nn_to_cueq(src, device=args.device).to(device=device, dtype=dtype).eval()
            torch.set_default_dtype(dtype)  # the converter sets it from the model (same here)
            # cuEquivariance modules that mace-torch's blocks hold (not their internals), with
            # the method each runs (uniform_1d: the CUDA kernels; naive: plain PyTorch).
            kinds: Dict[str, int] = {}
            for parent in m.modules():
                if type(parent).__module__.startswith("cuequivariance_torch"):
                    continue
                for mod in parent.children():
                    if type(mod).__module__.startswith("cuequivariance_torch"):
                        meth = getattr(mod, "method", None)
                        key = type(mod).__name__ + (f"({meth})" if isinstance(meth, str) else "")
                        kinds[key] = kinds.get(key, 0) + 1
            cc = getattr(m.interactions[0], "cueq_config", None)
            rec["configuration"] = (
                f"mace-torch {mace.__version__} + cuEquivariance {cuet.__version__} (ops "
                f"{ops or 'absent'}), torch {torch.__version__}, converted with "
                f"mace.cli.convert_e3nn_cueq (layout {getattr(cc, 'layout_str', '?')}, "
                f"optimize_all={getattr(cc, 'optimize_all', '?')}, "
                f"conv_fusion={getattr(cc, 'conv_fusion', '?')}), compute_force=True"
            )
            rec["cueq_modules"] = kinds
            print(f"  [{prec}] {rec['configuration']}; modules {kinds}", flush=True)

            def run(atoms, m=m, dtype=dtype):
                b = _batch_for(m, atoms, "Default", float(m.r_max))
                b = {
                    k: (v.to(device=device, dtype=dtype) if v.is_floating_point() else v.to(device))
                    if torch.is_tensor(v)
                    else v
                    for k, v in b.items()
                }
                return b

            # The check (small structure), then the timed one.
            for which in ("check", "timed"):
                atoms = load_case(work, which)
                batch = run(atoms)
                r = m(batch, training=False, compute_force=True)
                e = float(r["energy"].detach().double().sum())
                f = r["forces"].detach().double().cpu().numpy()
                rec[f"{which}_energy"] = e
                np.save(str(work / f"cueq-{prec}-{which}-forces.npy"), f)
                rec[f"{which}_atoms"] = len(atoms)
                rec[f"{which}_edges"] = int(batch["edge_index"].shape[1])
                if which == "check":
                    batch = r = None
            sync()
            base = torch.cuda.memory_allocated() if cuda else 0
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            times = []
            for k in range(args.warmup + args.repeat):
                t0 = time.perf_counter()
                r = m(batch, training=False, compute_force=True)
                sync()
                if k >= args.warmup:
                    times.append(time.perf_counter() - t0)
            if cuda:
                rec["peak_device_extra_bytes"] = torch.cuda.max_memory_allocated() - base
                rec["peak_device_extra_how"] = "torch allocator peak over model and batch"
            r = None
            sampler = MemorySampler()
            rec["device_used_before_bytes"] = args.baseline_used
            with sampler:
                r = m(batch, training=False, compute_force=True)
                sync()
            if sampler.read and args.baseline_used is not None:
                rec["sampled_device_extra_bytes"] = sampler.peak - args.baseline_used
                rec["sampled_how"] = sampler.how
            rec["times_s"] = times
            rec["median_s"], rec["min_s"] = median(times), min(times)
            print(f"  [{prec}] median {rec['median_s'] * 1e3:.1f} ms", flush=True)
        except Exception as exc:  # noqa: BLE001  (recorded; the other precision goes on)
            oom = "out of memory" in str(exc)
            rec["error"] = "not run: " + ("out of device memory" if oom else repr(exc)[:400])
            traceback.print_exc()
        finally:
            torch.set_default_dtype(old)
            m = batch = r = None
            if cuda:
                torch.cuda.empty_cache()
            save_rows(work, "cueq", out)
    return out


def worker_symmetrix(args, work: pathlib.Path) -> List[Dict[str, Any]]:
    import numpy as np

    jpath = work / "symmetrix.json"
    # Its JIT cache holds executable code and must be private (0700), or it refuses to run.
    cache = pathlib.Path(os.environ.setdefault("SYMMETRIX_JIT_CACHE", str(work / "symmetrix-jit")))
    cache.mkdir(parents=True, exist_ok=True)
    cache.chmod(0o700)
    t0 = time.time()
    if not jpath.exists():
        from symmetrix.extract_mace_data import extract_mace_data

        data = extract_mace_data(str(work / "model.pt"))
        with open(jpath, "w") as fh:
            json.dump(data, fh, separators=(",", ":"))
    convert_s = time.time() - t0
    import symmetrix
    from symmetrix import Symmetrix

    try:
        from symmetrix.backend_loader import selected_backend

        backend = selected_backend()
        backend = (backend or {}).get("selector") or "cpu"
    except Exception:  # noqa: BLE001  (diagnostic only)
        backend = "?"
    version = getattr(symmetrix, "__version__", "?")
    out: List[Dict[str, Any]] = []
    for prec in args.precisions.split(","):
        for profile in args.symmetrix_profiles.split(","):
            rec: Dict[str, Any] = {
                "peer": "symmetrix-xl",
                "precision": prec,
                "execution_profile": profile,
                "convert_s": convert_s,
            }
            out.append(rec)
            calc = None
            try:
                sampler = MemorySampler()
                t1 = time.time()
                calc = Symmetrix(
                    str(jpath),
                    dtype={"fp64": "float64", "fp32": "float32"}[prec],
                    execution_profile=profile,
                )
                rec["construct_s"] = time.time() - t1
                rec["jit_status"] = getattr(calc, "jit_status", None)
                rec["configuration"] = (
                    f"Symmetrix-XL {version} (backend {backend}), converted with its "
                    f"extract_mace_data (compact universal JSON), streamed_edges=direct, "
                    f"execution_profile={profile}, neighbor_skin=0.5 (list reused), "
                    f"energy+forces(+stress)"
                )
                print(
                    f"  [{prec} {profile}] {rec['configuration']}; jit {rec['jit_status']} "
                    f"in {rec['construct_s']:.1f} s",
                    flush=True,
                )
                for which in ("check", "timed"):
                    atoms = load_case(work, which)
                    atoms.calc = calc
                    e = float(atoms.get_potential_energy())
                    f = np.asarray(atoms.get_forces(), dtype=np.float64)
                    rec[f"{which}_energy"] = e
                    rec[f"{which}_atoms"] = len(atoms)
                    np.save(str(work / f"symmetrix-{prec}-{profile}-{which}-forces.npy"), f)
                # The timed structure is the calculator's current one; recompute each call.
                times = []
                for k in range(args.warmup + args.repeat):
                    t2 = time.perf_counter()
                    calc.calculate(atoms, ["energy", "forces"], ["positions"])
                    np.asarray(calc.results["forces"])
                    if k >= args.warmup:
                        times.append(time.perf_counter() - t2)
                with sampler:
                    calc.calculate(atoms, ["energy", "forces"], ["positions"])
                if sampler.read and args.baseline_used is not None:
                    rec["sampled_device_extra_bytes"] = sampler.peak - args.baseline_used
                    rec["peak_device_extra_bytes"] = rec["sampled_device_extra_bytes"]
                    rec["peak_device_extra_how"] = (
                        f"{sampler.how}, sampled every 2 ms in one call, less before loading"
                    )
                try:
                    plan = calc.execution_plan
                    rec["execution_plan"] = plan if isinstance(plan, (dict, str)) else str(plan)
                except Exception:  # noqa: BLE001  (diagnostic only)
                    pass
                rec["times_s"] = times
                rec["median_s"], rec["min_s"] = median(times), min(times)
                print(f"  [{prec} {profile}] median {rec['median_s'] * 1e3:.1f} ms", flush=True)
            except Exception as exc:  # noqa: BLE001  (recorded; the rest goes on)
                oom = "out of memory" in str(exc).lower()
                rec["error"] = "not run: " + ("out of device memory" if oom else repr(exc)[:400])
                traceback.print_exc()
            finally:
                calc = None
                save_rows(work, "symmetrix", out)
    return out


def worker_main(args) -> int:
    work = pathlib.Path(args.out)
    fn = {"cueq": worker_cueq, "symmetrix": worker_symmetrix}[args.worker]
    try:
        rows = fn(args, work)
    except Exception as exc:  # noqa: BLE001  (an import or a conversion: the whole peer)
        traceback.print_exc()
        rows = [{"peer": args.worker, "error": f"not run: {exc!r}"[:500]}]
    save_rows(work, args.worker, rows)
    return 0


# --------------------------------------------------------------------------------------------
# Driver.


def reference_torch(model, atoms, device) -> Dict[str, Any]:
    """mace-torch float64 (e3nn) energy and forces."""
    import torch

    from bench_mace_model import time_torch

    r = time_torch(model, atoms, torch.float64, device, 0, 1)
    return {"energy": r.get("energy"), "forces": r.get("forces"), "error": r.get("error")}


def clebsch_reference(path: str) -> Dict[str, Any]:
    """Clebsch's float64 forces of the timed structure from a bench_mace_model.py JSON."""
    import numpy as np

    res = json.loads(pathlib.Path(path).read_text())
    refs = {}
    for r in res.get("rows", []):
        if r.get("forces") and r.get("precision") == "fp64" and "error" not in r:
            p = pathlib.Path(r["forces"])
            if not p.exists():  # written on another machine: carried beside the JSON
                p = pathlib.Path(path).parent / p.name
            if p.exists():
                refs[r["engine"]] = {
                    "energy": r.get("energy"),
                    "forces": np.fromfile(str(p), dtype=np.float64).reshape(-1, 3),
                }
    for engine in ("host", "cuda"):
        if engine in refs:
            return dict(refs[engine], engine=f"clebsch-{engine} fp64")
    return {}


def records(rows: List[Dict[str, Any]], info: Dict[str, Any], run: str) -> List[Dict[str, Any]]:
    """latest.json records: one per timed measurement (the peer's best profile per precision)."""
    best: Dict[tuple, Dict[str, Any]] = {}
    for r in rows:
        if "median_s" not in r or not str(r.get("check", "")).startswith("pass"):
            continue
        key = (r["peer"], r["precision"])
        if key not in best or r["median_s"] < best[key]["median_s"]:
            best[key] = r
    out = []
    for (peer, prec), r in sorted(best.items()):
        n = r["timed_atoms"]
        peak = r.get("peak_device_extra_bytes")
        out.append(
            {
                "what": "model_step",
                "engine": peer,
                "configuration": r["configuration"],
                "model": MODEL_NAME,
                "precision": prec,
                "atoms": n,
                "edges": r.get("timed_edges") or info.get("edges"),
                "gpus": 1,
                "gpu": info.get("gpu"),
                "us_per_atom_step": round(r["median_s"] * 1e6 / n, 3),
                "device_bytes_per_atom": None if peak is None else int(peak / n),
                "max_atoms": None,
                "run": run,
            }
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", default="mace-mp-0-medium", choices=list(PROBLEMS))
    ap.add_argument("--atoms", type=int, default=10000, help="the timed structure")
    ap.add_argument("--check-atoms", type=int, default=1500, help="the check against e3nn fp64")
    ap.add_argument("--elements", type=int, default=89)
    ap.add_argument("--precisions", default="fp32,fp64")
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument(
        "--symmetrix-profiles",
        default="speed",
        help="Symmetrix-XL execution profiles (speed: its throughput policy; capacity: its "
        "default, which picks the fastest policy it estimates to fit, so the same at 10k atoms)",
    )
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--clebsch-json", default="", help="bench_mace_model.py's model.json")
    ap.add_argument("--run", default="", help="results folder named in the latest.json records")
    ap.add_argument("--out", default="out-peers")
    ap.add_argument("--json", default="", help="default OUT/peers.json")
    ap.add_argument("--timeout-s", type=float, default=300, help="for each peer's process")
    ap.add_argument("--worker", choices=PEERS, help=argparse.SUPPRESS)
    ap.add_argument("--baseline-used", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker_main(args)

    import numpy as np
    import torch

    import mace  # noqa: F401  (before e3nn)

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    info: Dict[str, Any] = {"problem": args.problem, "torch": torch.__version__}
    info["mace"] = getattr(mace, "__version__", "?")
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    t0 = time.time()
    # use_reduced_cg=False: the model bench_mace_model.py builds (see the docstring).
    model = build_model(args.problem, args.elements, use_reduced_cg=False)
    info["parameters"] = sum(p.numel() for p in model.parameters())
    torch.save(model, str(out / "model.pt"))
    import ase.io

    cases = {"check": build_structure(args.check_atoms), "timed": build_structure(args.atoms)}
    for which, atoms in cases.items():
        ase.io.write(str(out / f"{which}.extxyz"), atoms)
    info.update(atoms=len(cases["timed"]), check_atoms=len(cases["check"]))
    print(
        f"[peers] {info['parameters']:,} parameters; check {info['check_atoms']} atoms, timed "
        f"{info['atoms']} atoms; built in {time.time() - t0:.1f} s",
        flush=True,
    )
    device = torch.device(args.device)
    ref = reference_torch(model, cases["check"], device)
    info["reference_check"] = "mace-torch fp64 (e3nn, no cuEquivariance)"
    if ref.get("error"):
        print(f"[peers] mace-torch fp64 reference: {ref['error']}", flush=True)
    clebsch = clebsch_reference(args.clebsch_json) if args.clebsch_json else {}
    if clebsch.get("forces") is not None and len(clebsch["forces"]) != info["atoms"]:
        clebsch = {}
    info["reference_timed"] = clebsch.get("engine")
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    baseline = MemorySampler().now()
    rows: List[Dict[str, Any]] = []
    for peer in [p for p in args.peers.split(",") if p]:
        cmd = [sys.executable, __file__, "--worker", peer, "--out", str(out)]
        for k in ("precisions", "symmetrix_profiles", "repeat", "warmup", "device"):
            cmd += [f"--{k.replace('_', '-')}", str(getattr(args, k))]
        if baseline is not None:
            cmd += ["--baseline-used", str(baseline)]
        print(f"[peers] {peer}: {' '.join(cmd)}", flush=True)
        t1 = time.time()
        (out / f"worker-{peer}.json").unlink(missing_ok=True)
        try:
            proc = subprocess.run(cmd, timeout=args.timeout_s)
            res = out / f"worker-{peer}.json"
            got = json.loads(res.read_text()) if res.exists() else []
            if not got:
                got = [{"peer": peer, "error": f"not run: worker exited {proc.returncode}"}]
        except subprocess.TimeoutExpired:
            res = out / f"worker-{peer}.json"
            got = json.loads(res.read_text()) if res.exists() else []
            got.append({"peer": peer, "error": f"not run: process over {args.timeout_s:.0f} s"})
        for r in got:
            r["process_s"] = time.time() - t1
        rows += got

    # Checks: against mace-torch fp64 (check structure), Clebsch fp64 and the other peer (timed).
    def forces(r, which):
        tag = r["precision"] + (f"-{r['execution_profile']}" if "execution_profile" in r else "")
        name = "cueq" if r["peer"] == "mace-torch+cueq" else "symmetrix"
        p = out / f"{name}-{tag}-{which}-forces.npy"
        return np.load(str(p)) if p.exists() else None

    cueq64 = next(
        (r for r in rows if r.get("peer") == "mace-torch+cueq" and r.get("precision") == "fp64"),
        None,
    )
    cueq64_f = forces(cueq64, "timed") if cueq64 and "timed_energy" in cueq64 else None
    for r in rows:
        if "check_energy" not in r:
            continue
        compare(r, "torch_fp64", r["check_energy"], forces(r, "check"), ref)
        if "timed_energy" in r:
            f = forces(r, "timed")
            compare(r, "clebsch_fp64", r["timed_energy"], f, clebsch)
            if cueq64_f is not None and r is not cueq64:
                compare(
                    r,
                    "cueq_fp64",
                    r["timed_energy"],
                    f,
                    {"energy": cueq64["timed_energy"], "forces": cueq64_f},
                )
        tol = TOL[r["precision"]]
        dfs = [r[k] for k in ("max_abs_dF_vs_torch_fp64", "max_abs_dF_vs_clebsch_fp64") if k in r]
        if not dfs:
            r["check"] = "no reference"
        else:
            r["check"] = "pass" if max(dfs) < tol else "FAIL"
            r["check"] += f" (max |dF| {max(dfs):.1e} < {tol:g} eV/A)" if max(dfs) < tol else ""
    info["edges"] = next((r["timed_edges"] for r in rows if r.get("timed_edges")), None)

    print()
    print(
        f"Peers, energy + forces, {args.problem} ({info['parameters']:,} parameters), fcc Cu "
        f"{info['atoms']} atoms, on {info.get('gpu', args.device)}: median of {args.repeat} after "
        f"{args.warmup} warm-up; checks vs mace-torch fp64 ({info['check_atoms']} atoms) and "
        f"{info['reference_timed'] or 'no Clebsch run'} ({info['atoms']} atoms)"
    )
    print(
        "| peer | prec | profile | ms | us/atom-step | peak extra GB | dF vs torch fp64 | "
        "dF vs Clebsch fp64 | check |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---|")

    def fmt(v, spec):
        return "-" if v is None else format(v, spec)

    for r in rows:
        med = r.get("median_s")
        peak = r.get("peak_device_extra_bytes")
        print(
            f"| {r.get('peer')} | {r.get('precision', '-')} | {r.get('execution_profile', '-')} | "
            f"{r.get('error') or fmt(med * 1e3 if med else None, '.1f')} | "
            f"{fmt(med * 1e6 / r['timed_atoms'] if med else None, '.2f')} | "
            f"{fmt(peak / 1e9 if peak is not None else None, '.2f')} | "
            f"{fmt(r.get('max_abs_dF_vs_torch_fp64'), '.1e')} | "
            f"{fmt(r.get('max_abs_dF_vs_clebsch_fp64'), '.1e')} | {r.get('check', '-')} |"
        )
    result = {"info": info, "rows": rows, "records": records(rows, info, args.run or str(out))}
    path = pathlib.Path(args.json or out / "peers.json")
    path.write_text(json.dumps(result, indent=1, default=str))
    print(f"wrote {path}")
    return 1 if any(str(r.get("check")).startswith("FAIL") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())

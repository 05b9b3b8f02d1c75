# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Training-step benchmark: energy + force loss, backward, optimizer step, per engine.

Models (random weights, seed 0):

- ``mace-mp-0-medium``: ScaleShiftMACE of MACE-MP-0 medium's size (``bench_mace_cpu.COMMON``
  with hidden irreps 128x0e+128x1o, max_ell 3, correlation 3, 2 interactions, r_max 6 A, 89
  species) built by mace-torch's own constructors;
- ``nequip-benzene``: a NequIP-style interatomic potential written here in e3nn (species
  embedding, then 4 layers of linear -> uvu convolution with radial-MLP weights, messages summed
  per receiver / avg neighbours -> linear -> norm gate + self-connection, then a scalar readout)
  with nequip-benzene's feature irreps 64x(0o+0e+1o+1e+2o+2e+3o+3e), spherical harmonics up to
  l = 3 and r_max 4 A: the convolution problem of kernels.md's ``nequip-benzene`` (every allowed
  uvu path, summed into the feature irreps). The nequip package itself is not on the GPU host.

Engines: ``e3nn`` (the models as built: gather, e3nn tensor product, scatter); ``cueq``
(mace-torch's own e3nn -> cuEquivariance conversion, ``mace.cli.convert_e3nn_cueq.run``, as
``peers_model_step.py``; MACE only); ``oeq`` (OpenEquivariance 0.7's fused
``TensorProductConv`` in its atomic mode: mace-torch's ``mace.cli.convert_e3nn_oeq.run`` for
MACE, the module on the model's convolution problem for the NequIP-style model); ``clebsch``
(``clebsch_torch.patch_mace`` for MACE, the model's convolution on ``clebsch_torch.conv`` for
the NequIP-style model); ``clebsch+cueq`` (MACE only: the cuEquivariance model of ``cueq`` with
its convolution patched to Clebsch's, so the linears and symmetric contractions stay
cuEquivariance's).

The structure: rattled fcc Cu (``bench_mace_cpu.build_structure``), ``--atoms`` (10,000 ->
10,192) atoms, periodic; the loss (E - E0)^2 / N^2 + mean |F - F0|^2 against fixed random
labels, forces by autograd with ``create_graph=True`` (the double backward of every
convolution), ``loss.backward()``, Adam step. Before timing, each engine's energy and forces at
the initial weights are checked against the e3nn engine in float64 on a small structure
(``--check-atoms``); the deviation is recorded. Timing: ``--warmup`` steps, then the median of
``--repeat`` steps, each closed by ``torch.cuda.synchronize()``; memory: the allocator's peak
(``torch.cuda.max_memory_allocated``, model and batch included) over warm-up and timed steps.
A configuration that fails (out of memory, engine unavailable) is recorded with ``"error"`` and
the rest goes on. Each record is appended to ``--json`` as soon as it is made (one JSON object a
line, the record style of ``bench/results/latest.json``):
``{"what": "train_step", "engine", "model", "precision", "atoms", "edges", "ms_per_step",
"peak_device_bytes", "run", ...}``.

``--precompile`` compiles, without a GPU, every convolution module the clebsch engine loads
(both precisions, both models) for an H200 into the kernel cache (torch/gpu/make_carry.sh).

Examples
--------
>>> # PYTHONPATH=$MACE_PYTHONPATH:$CUEQ_PYTHONPATH:torch:. \\
>>> #     python3 bench/train_step.py --json /tmp/train_step.jsonl --run h200-run23
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import pathlib
import statistics
import sys
import time
import traceback
from typing import Any, Dict, List, Optional

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")

import torch  # noqa: E402

MODELS = ("mace-mp-0-medium", "nequip-benzene")
ENGINES = ("e3nn", "cueq", "oeq", "clebsch", "clebsch+cueq")
PRECISIONS = {"fp32": torch.float32, "fp64": torch.float64}
NEQUIP = dict(
    irreps="64x0o+64x0e+64x1o+64x1e+64x2o+64x2e+64x3o+64x3e",
    lmax=3,
    layers=4,
    r_max=4.0,
    num_basis=8,
    radial_hidden=64,
    avg_num_neighbors=20.0,
    species=[29],
)


# ---------------------------------------------------------------------------------------------
# The NequIP-style model.


class Conv(torch.nn.Module):
    """sum over edges into each receiver of uvu TP(x[sender], Y, W(r)) / avg_num_neighbors."""

    def __init__(self, irreps, lmax: int, num_basis: int, hidden: int, avg: float):
        super().__init__()
        from e3nn import nn as enn
        from e3nn import o3

        irreps = o3.Irreps(irreps)
        sh = o3.Irreps.spherical_harmonics(lmax)
        ins = []
        for i1, (_, ir1) in enumerate(irreps):
            for i2, (_, ir2) in enumerate(sh):
                for io, (_, ir) in enumerate(irreps):
                    if ir in ir1 * ir2:
                        ins.append((i1, i2, io, "uvu", True))
        self.tp = o3.TensorProduct(
            irreps, sh, irreps, ins, shared_weights=False, internal_weights=False
        )
        self.radial = enn.FullyConnectedNet(
            [num_basis, hidden, hidden, self.tp.weight_numel], torch.nn.functional.silu
        )
        self.avg = avg
        self.problem: Optional[str] = None  # set: clebsch_torch.conv instead of e3nn
        self.oeq: Optional[torch.nn.Module] = None  # set: OpenEquivariance's fused conv

    def use_oeq(self, dtype) -> None:
        """OpenEquivariance's TensorProductConv (atomic, its fastest mode) for this problem."""
        import numpy as np
        import openequivariance as oeq

        npdt = {torch.float32: np.float32, torch.float64: np.float64}[dtype]
        ins = [
            (i.i_in1, i.i_in2, i.i_out, i.connection_mode, i.has_weight)
            for i in self.tp.instructions
        ]
        problem = oeq.TPProblem(
            str(self.tp.irreps_in1),
            str(self.tp.irreps_in2),
            str(self.tp.irreps_out),
            ins,
            shared_weights=False,
            internal_weights=False,
            irrep_dtype=npdt,
            weight_dtype=npdt,
        )
        self.oeq = oeq.TensorProductConv(problem, deterministic=False)

    def forward(self, x, sh, basis, sender, receiver):
        w = self.radial(basis)
        if self.problem is not None:
            out = torch.ops.clebsch.conv(x, sh, w, sender, receiver, x.shape[0], self.problem)
        elif self.oeq is not None:
            # rows = receivers, cols = senders; weights from e3nn's order to its own
            w = self.oeq.reorder_weights_from_e3nn(w, True)
            out = self.oeq(x, sh, w, receiver, sender)
        else:
            msg = self.tp(x[sender], sh, w)
            out = torch.zeros(x.shape[0], msg.shape[1], dtype=msg.dtype, device=msg.device)
            out = out.index_add(0, receiver, msg)
        return out / self.avg


class NequipLike(torch.nn.Module):
    """The NequIP-style potential of the module docstring; forward gives energy and forces."""

    def __init__(
        self, irreps, lmax, layers, r_max, num_basis, radial_hidden, avg_num_neighbors, species
    ):
        super().__init__()
        from e3nn import nn as enn
        from e3nn import o3

        self.r_max = r_max
        self.num_basis = num_basis
        self.sh = o3.SphericalHarmonics(o3.Irreps.spherical_harmonics(lmax), True, "component")
        irreps = o3.Irreps(irreps)
        self.embed = o3.Linear(o3.Irreps(f"{len(species)}x0e"), irreps)
        self.pre = torch.nn.ModuleList()
        self.convs = torch.nn.ModuleList()
        self.post = torch.nn.ModuleList()
        self.gates = torch.nn.ModuleList()
        for _ in range(layers):
            self.pre.append(o3.Linear(irreps, irreps))
            self.convs.append(Conv(irreps, lmax, num_basis, radial_hidden, avg_num_neighbors))
            self.post.append(o3.Linear(irreps, irreps))
            self.gates.append(enn.NormActivation(irreps, torch.nn.functional.silu))
        self.readout = o3.Linear(irreps, o3.Irreps("1x0e"))

    def basis(self, r):
        # Bessel basis with a smooth polynomial cutoff (p = 6), as NequIP's defaults.
        n = torch.arange(1, self.num_basis + 1, dtype=r.dtype, device=r.device)
        x = r[:, None] / self.r_max
        b = math.sqrt(2.0 / self.r_max) * torch.sin(n * math.pi * x) / r[:, None]
        u = x.squeeze(1)
        p = 6.0
        env = (
            1
            - (p + 1) * (p + 2) / 2 * u**p
            + p * (p + 2) * u ** (p + 1)
            - p * (p + 1) / 2 * u ** (p + 2)
        )
        return b * (env * (u < 1))[:, None]

    def forward(self, batch: Dict[str, torch.Tensor], compute_force: bool = True):
        pos = batch["positions"]
        if compute_force:
            pos = pos.requires_grad_(True)
        sender, receiver = batch["edge_index"][0], batch["edge_index"][1]
        vec = pos[sender] - pos[receiver] + batch["shifts"]
        r = vec.norm(dim=1)
        sh = self.sh(vec)
        basis = self.basis(r)
        h = self.embed(batch["node_attrs"])
        for pre, conv, post, gate in zip(self.pre, self.convs, self.post, self.gates):
            m = conv(pre(h), sh, basis, sender, receiver)
            h = h + gate(post(m))
        energy = self.readout(h).sum()
        out = {"energy": energy.reshape(1)}
        if compute_force:
            (g,) = torch.autograd.grad(energy, pos, create_graph=self.training)
            out["forces"] = -g
        return out


def nequip_batch(atoms, dtype, device):
    from ase.neighborlist import neighbor_list

    i, j, shift = neighbor_list("ijS", atoms, NEQUIP["r_max"])
    cell = torch.tensor(atoms.cell.array, dtype=dtype)
    return {
        "positions": torch.tensor(atoms.positions, dtype=dtype, device=device),
        # edge_index[0] = sender j, [1] = receiver i (mace-torch's convention); the vector
        # from receiver to sender
        "edge_index": torch.stack([torch.tensor(j), torch.tensor(i)]).to(device),
        "shifts": (torch.tensor(shift, dtype=dtype) @ cell).to(device),
        "node_attrs": torch.ones(len(atoms), 1, dtype=dtype, device=device),
    }


# ---------------------------------------------------------------------------------------------
# Models per engine.


def mace_kwargs():
    from bench_mace_cpu import COMMON, PROBLEMS
    from bench_mace_model import _constructor_args

    kw = _constructor_args(dict(COMMON, **PROBLEMS["mace-mp-0-medium"]))
    kw["atomic_numbers"] = sorted(set(range(1, 90)) | {29})
    import inspect

    from mace import modules

    if "use_reduced_cg" in inspect.signature(modules.MACE.__init__).parameters:
        kw["use_reduced_cg"] = False  # the original basis, which the cueq converter handles
    return kw


_BASE: Dict[str, torch.nn.Module] = {}


def base_model(name: str, make) -> torch.nn.Module:
    """A fresh copy of the float64 e3nn model ``name`` (built once: MACE's 89-species
    constructor takes a while), on the CPU."""
    if name not in _BASE:
        _BASE[name] = make()
    try:
        return copy.deepcopy(_BASE[name])
    except Exception:  # a module deepcopy cannot copy (mace-torch's EmptyParam in some models)
        return make()


def require_oeq() -> None:
    # Without it, mace-torch's converter silently builds e3nn modules behind a fused entry.
    try:
        import openequivariance  # noqa: F401
    except ImportError as e:
        raise NotImplementedError(f"not run: OpenEquivariance is not importable ({e})") from e


def build(model_name: str, engine: str, dtype, device):
    """(model in training mode on device/dtype, batch function)."""
    if model_name == "mace-mp-0-medium":
        import mace  # noqa: F401  (before e3nn)
        from potentials.read_mace import _batch_for
        from potentials.tests.mace_factory import build_mace

        model = base_model(
            model_name, lambda: build_mace(seed=0, dtype=torch.float64, **mace_kwargs())
        )
        if engine in ("cueq", "clebsch+cueq"):
            from mace.cli.convert_e3nn_cueq import run as e3nn_to_cueq

            old = torch.get_default_dtype()
            try:
                model = e3nn_to_cueq(model, device=device.type)
            finally:
                torch.set_default_dtype(old)
        elif engine == "oeq":
            # mace-torch's own e3nn -> OpenEquivariance conversion (fused atomic conv); its
            # problems take their dtype from the default at construction, so convert in dtype
            require_oeq()
            from mace.cli.convert_e3nn_oeq import run as e3nn_to_oeq

            old = torch.get_default_dtype()
            try:
                model = e3nn_to_oeq(model.to(device=device, dtype=dtype), device=device.type)
            finally:
                torch.set_default_dtype(old)
        if engine in ("clebsch", "clebsch+cueq"):
            import clebsch_torch

            model = clebsch_torch.patch_mace(model)
        model = model.to(device=device, dtype=dtype)

        def batch(atoms):
            old = torch.get_default_dtype()
            torch.set_default_dtype(dtype)
            try:
                b = _batch_for(model, atoms, "Default", float(model.r_max))
            finally:
                torch.set_default_dtype(old)
            return {
                k: (v.to(device=device, dtype=dtype) if v.is_floating_point() else v.to(device))
                if torch.is_tensor(v)
                else v
                for k, v in b.items()
            }

        def forward(m, b):
            return m(dict(b), training=True, compute_force=True)

        return model, batch, forward
    if model_name == "nequip-benzene":
        if "cueq" in engine:
            raise NotImplementedError(
                "not run: mace-torch's cuEquivariance conversion covers MACE models only"
            )

        def make():
            old = torch.get_default_dtype()
            torch.set_default_dtype(torch.float64)
            try:
                torch.manual_seed(0)
                return NequipLike(**NEQUIP)
            finally:
                torch.set_default_dtype(old)

        model = base_model(model_name, make)
        if engine == "clebsch":
            import clebsch_torch

            for c in model.convs:
                c.problem = clebsch_torch.problem_from_e3nn(c.tp)
        elif engine == "oeq":
            require_oeq()
            for c in model.convs:
                c.use_oeq(dtype)
        model = model.to(device=device, dtype=dtype)

        def forward(m, b):
            return m(dict(b), compute_force=True)

        return model, (lambda atoms: nequip_batch(atoms, dtype, device)), forward
    raise ValueError(f"unknown model {model_name!r}")


def loss_of(out, labels, n_atoms):
    e, f = out["energy"], out["forces"]
    return ((e - labels["energy"]) ** 2).sum() / n_atoms**2 + ((f - labels["forces"]) ** 2).mean()


def conv_problems(model_name: str) -> List[str]:
    """The convolution problems the clebsch engine runs for a model."""
    import clebsch_torch

    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        if model_name == "mace-mp-0-medium":
            from potentials.tests.mace_factory import build_mace

            m = clebsch_torch.patch_mace(build_mace(seed=0, **mace_kwargs()))
            return [b.conv_tp.problem for b in m.interactions]
        torch.manual_seed(0)
        m = NequipLike(**NEQUIP)
        return [clebsch_torch.problem_from_e3nn(c.tp) for c in m.convs]
    finally:
        torch.set_default_dtype(old)


# ---------------------------------------------------------------------------------------------


def emit(path: Optional[str], rec: Dict[str, Any]) -> None:
    print(json.dumps(rec), flush=True)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(rec) + "\n")


def check(model_name, engine, device, check_atoms) -> Dict[str, Any]:
    """Max |dE| and |dF| of the engine against e3nn in float64 on a small structure."""
    from bench_mace_cpu import build_structure

    atoms = build_structure(check_atoms, seed=1)
    res = []
    for eng in ("e3nn", engine):
        model, batch, forward = build(model_name, eng, torch.float64, device)
        out = forward(model, batch(atoms))
        res.append((out["energy"].detach().double().cpu(), out["forces"].detach().double().cpu()))
        del model, out
    (e0, f0), (e1, f1) = res
    return {
        "check_atoms": len(atoms),
        "check_energy_abs_diff": float((e1 - e0).abs().max()),
        "check_force_max_abs_diff": float((f1 - f0).abs().max()),
        "check_force_scale": float(f0.abs().max()),
    }


_CHECKED: Dict[Any, Dict[str, Any]] = {}  # float64, so once per model and engine


def run_one(args, model_name, engine, prec, device) -> Dict[str, Any]:
    from bench_mace_cpu import build_structure

    dtype = PRECISIONS[prec]
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    rec: Dict[str, Any] = {
        "what": "train_step",
        "engine": engine,
        "model": model_name,
        "precision": prec,
        "run": args.run,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if cuda else "cpu",
    }
    try:
        if engine != "e3nn" and args.check_atoms > 0:
            key = (model_name, engine)
            if key not in _CHECKED:
                _CHECKED[key] = check(model_name, engine, device, args.check_atoms)
            rec.update(_CHECKED[key])
        atoms = build_structure(args.atoms)
        rec["atoms"] = len(atoms)
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        model, batch_of, forward = build(model_name, engine, dtype, device)
        model.train()
        batch = batch_of(atoms)
        rec["edges"] = int(batch["edge_index"].shape[1])
        g = torch.Generator().manual_seed(7)
        labels = {
            "energy": torch.randn(1, generator=g, dtype=torch.float64).to(device, dtype),
            "forces": torch.randn(len(atoms), 3, generator=g, dtype=torch.float64).to(
                device, dtype
            ),
        }
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.Adam(params, lr=1e-5)
        times, losses = [], []
        for k in range(args.warmup + args.repeat):
            sync()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = loss_of(forward(model, batch), labels, len(atoms))
            loss.backward()
            opt.step()
            sync()
            if k >= args.warmup:
                times.append(time.perf_counter() - t0)
            losses.append(float(loss.detach()))
        rec["ms_per_step"] = 1e3 * statistics.median(times)
        rec["ms_per_step_min"] = 1e3 * min(times)
        rec["steps_timed"] = len(times)
        rec["warmup"] = args.warmup
        rec["loss_first_last"] = [losses[0], losses[-1]]
        rec["peak_device_bytes"] = int(torch.cuda.max_memory_allocated()) if cuda else None
        if args.profile:
            rec["profile_top"] = profile_step(
                args.profile,
                f"{model_name} {engine} {prec}",
                model,
                forward,
                batch,
                labels,
                opt,
                len(atoms),
            )
    except Exception as exc:  # recorded, and the next configuration runs
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        rec["error"] = msg if msg.startswith("not run") else f"{type(exc).__name__}: {msg}"[:500]
        if not isinstance(exc, (NotImplementedError, torch.cuda.OutOfMemoryError)):
            traceback.print_exc()
    finally:
        model = batch = opt = loss = None
        if cuda:
            torch.cuda.empty_cache()
    return rec


def profile_step(path, label, model, forward, batch, labels, opt, n) -> List[List[Any]]:
    """One more training step under torch.profiler: its kernels by device time, appended to
    @p path as a table, and the ten largest as [name, ms, calls] for the record."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=acts) as prof:
        opt.zero_grad(set_to_none=True)
        loss_of(forward(model, batch), labels, n).backward()
        opt.step()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    events = prof.key_averages()
    key = "device_time_total" if hasattr(events[0], "device_time_total") else "cuda_time_total"
    with open(path, "a") as f:
        f.write(f"## {label}\n\n{events.table(sort_by=key, row_limit=40)}\n\n")
    kernels = [e for e in events if getattr(e, key, 0) > 0 and e.device_type.name == "CUDA"]
    kernels.sort(key=lambda e: -getattr(e, key))
    return [[e.key[:120], getattr(e, key) / 1e3, e.count] for e in kernels[:10]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--precisions", default="fp32,fp64")
    ap.add_argument("--atoms", type=int, default=10000)
    ap.add_argument("--check-atoms", type=int, default=108)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", default="", help="append one record a line here")
    ap.add_argument("--run", default="", help="the run's name, recorded in every record")
    ap.add_argument(
        "--profile",
        default="",
        help="after timing, profile one more step (torch.profiler) and append its table here",
    )
    ap.add_argument(
        "--precompile",
        action="store_true",
        help="compile the clebsch engine's modules for an H200 and exit",
    )
    args = ap.parse_args()
    models = [m for m in args.models.split(",") if m]
    if args.precompile:
        for m in models:
            for p in conv_problems(m):
                for d in ("float32", "float64"):
                    t0 = time.time()
                    what = torch.ops.clebsch.precompile_conv(p, d)
                    print(f"precompile {m} {d}: {what} ({time.time() - t0:.1f} s)", flush=True)
        return 0
    device = torch.device(args.device)
    for m in models:
        for prec in args.precisions.split(","):
            for e in args.engines.split(","):
                emit(args.json, run_one(args, m, e, prec, device))
    return 0


if __name__ == "__main__":
    sys.exit(main())

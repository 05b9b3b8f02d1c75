# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""Shared harness of the peer convolution benchmarks (``oeq_conv.py``, ``cueq_conv.py``).

A peer is an adapter that builds its fused (or gather + TP + scatter) uvu convolution for one
problem of docs/kernels.md and one dtype and accumulation mode. This module does the rest, with
the method of ``e3nn_conv.py`` so that every column of the report is measured the same way:

1. the graph: N nodes, E edges, receivers sorted, senders random (the same seeded draws as
   ``e3nn_conv.py``), then edges ordered by (receiver, sender) within each receiver, which is
   the order OpenEquivariance's deterministic mode requires and changes nothing else (the order
   of a receiver's edges is arbitrary). A peer mode that needs a symmetric graph
   (OpenEquivariance's deterministic backward walks the reversed edges in the forward order, so
   it is only right when every edge's reverse is present, as in a full neighbour list) gets
   E / 2 random pairs and their reverses, same N and E, recorded as ``"graph"``;
2. the check, before any timing: the peer's forward (and its gradients of x, Y, W) on a small
   sample graph with the same irreps, against e3nn in float64 with the same weights (converted
   to the peer's layout), so that a misconfigured peer (wrong paths, normalization, weight or
   irrep layout) prints FAIL instead of a fast wrong time;
3. forward, forward+backward (gradients of x, Y, W) and double backward (gradients of
   <grad_x, dx> + <grad_Y, dY> + <grad_W, dW> with respect to x, Y, W and grad_out): warm-up,
   CUDA events, median of ``--reps`` (fewer, at least ``--min-reps``, only where one run is longer
   than the budget allows; the count is recorded), fresh random normal inputs (never zeros);
4. peak extra device memory over the inputs (PyTorch's allocator), the peer's module and its
   workspace included;
5. anything a peer cannot do (an import, a problem, an op) is recorded as
   ``"error": "not run: why"`` and the run goes on.

Output: one JSON object per (problem, dtype, op, mode) line, the format ``report.py`` reads.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
import traceback
from typing import Any, Callable, Dict, List

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from e3nn_conv import SHAPES, conv_tp, timed  # noqa: E402

OPS = ("fwd", "fb", "db")


class NotSupported(Exception):
    """A peer cannot run this problem, dtype, mode or op; the message says why."""


class Peer:
    """What a peer adapter provides. Tensors are in e3nn's layout unless a method converts.

    ``modes``: the accumulation modes to time (e.g. ``("atomic", "deterministic")``).
    """

    name = "peer"
    modes = ("default",)

    def version(self) -> str:
        return "?"

    def needs_symmetric_graph(self, mode: str) -> bool:
        """True where the peer only handles graphs whose edge set is closed under reversal."""
        return False

    def build(self, node: str, edge: str, target: str, dtype: torch.dtype, mode: str) -> Any:
        """The peer's module for one problem; raise NotSupported when it cannot."""
        raise NotImplementedError

    def graph(self, module: Any, receiver: torch.Tensor, sender: torch.Tensor, n: int) -> Dict:
        """Peer-specific graph arguments (index dtypes, permutations); built once, not timed."""
        return {"receiver": receiver, "sender": sender, "n": n}

    def forward(self, module: Any, x, y, w, graph: Dict) -> torch.Tensor:
        """z[r] = sum over edges e with receiver r of TP(x[sender e], y[e], w[e])."""
        raise NotImplementedError

    def weight_numel(self, module: Any) -> int:
        raise NotImplementedError

    def x_dim(self, module: Any) -> int:
        raise NotImplementedError

    def out_dim(self, module: Any) -> int:
        raise NotImplementedError

    # Layout conversions for the check (identity where the peer uses e3nn's layout).
    def x_from_e3nn(self, module: Any, x: torch.Tensor) -> torch.Tensor:
        return x

    def w_from_e3nn(self, module: Any, w: torch.Tensor) -> torch.Tensor:
        return w

    def out_to_e3nn(self, module: Any, z: torch.Tensor) -> torch.Tensor:
        return z

    def out_from_e3nn(self, module: Any, g: torch.Tensor) -> torch.Tensor:
        return g

    def x_to_e3nn(self, module: Any, gx: torch.Tensor) -> torch.Tensor:
        return gx

    def w_to_e3nn(self, module: Any, gw: torch.Tensor) -> torch.Tensor:
        return gw


def make_graph(n: int, e: int, dev: torch.device, gen: torch.Generator, symmetric: bool = False):
    """Receivers sorted, senders random (``e3nn_conv.py``'s draws), then (receiver, sender) order.

    ``symmetric``: e // 2 random pairs and their reverses (as a full neighbour list is), for a
    peer mode that requires it; degrees are distributed as in the plain draw (Poisson, mean E/N).

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> r, s = make_graph(5, 20, torch.device("cpu"), g)
    >>> bool((r[1:] >= r[:-1]).all())
    True
    """
    if symmetric:
        a = torch.randint(0, n, (e // 2,), device=dev, generator=gen)
        b = torch.randint(0, n, (e - e // 2,), device=dev, generator=gen)
        # An odd count gets one self-edge, its own reverse.
        receiver = torch.cat([a, b[: e // 2], b[e // 2 :]])
        sender = torch.cat([b[: e // 2], a, b[e // 2 :]])
    else:
        receiver = torch.sort(torch.randint(0, n, (e,), device=dev, generator=gen)).values
        sender = torch.randint(0, n, (e,), device=dev, generator=gen)
    order = torch.argsort(receiver.long() * n + sender.long(), stable=True)
    return receiver[order].contiguous(), sender[order].contiguous()


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b| in float64 (inf on NaN)."""
    a, b = a.detach().double(), b.detach().double()
    if not torch.isfinite(a).all():
        return float("inf")
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def verify(
    peer: Peer,
    module: Any,
    node: str,
    edge: str,
    target: str,
    dtype: torch.dtype,
    dev: torch.device,
    seed: int,
    n: int = 61,
    e: int = 400,
    symmetric: bool = False,
) -> Dict[str, Any]:
    """Forward and gradients of the peer on a small graph against e3nn float64.

    The same module instance that is timed is checked (peer modules do not depend on N or E).
    """
    gen = torch.Generator(device=dev).manual_seed(seed + 1)
    ref_tp = conv_tp(node, edge, target).to(device=dev, dtype=torch.float64)
    receiver, sender = make_graph(n, e, dev, gen, symmetric)

    def randn(*shape):
        return torch.randn(*shape, device=dev, dtype=torch.float64, generator=gen)

    x, y = randn(n, ref_tp.irreps_in1.dim), randn(e, ref_tp.irreps_in2.dim)
    w, g = randn(e, ref_tp.weight_numel), randn(n, ref_tp.irreps_out.dim)
    if peer.weight_numel(module) != ref_tp.weight_numel:
        return {
            "verify": "FAIL",
            "verify_note": f"weight_numel {peer.weight_numel(module)} vs "
            f"e3nn {ref_tp.weight_numel}",
        }
    if peer.out_dim(module) != ref_tp.irreps_out.dim:
        return {
            "verify": "FAIL",
            "verify_note": f"output dim {peer.out_dim(module)} vs e3nn {ref_tp.irreps_out.dim}",
        }
    xr, yr, wr = (t.clone().requires_grad_(True) for t in (x, y, w))
    z_ref = torch.zeros(n, ref_tp.irreps_out.dim, device=dev, dtype=torch.float64)
    z_ref = z_ref.index_add(0, receiver, ref_tp(xr[sender], yr, wr))
    gx_ref, gy_ref, gw_ref = torch.autograd.grad(z_ref, (xr, yr, wr), g)

    xp = peer.x_from_e3nn(module, x).to(dtype).contiguous().requires_grad_(True)
    yp = y.to(dtype).contiguous().requires_grad_(True)
    wp = peer.w_from_e3nn(module, w).to(dtype).contiguous().requires_grad_(True)
    graph = peer.graph(module, receiver, sender, n)
    z = peer.forward(module, xp, yp, wp, graph)
    out = {"verify_fwd_rel_err": rel_err(peer.out_to_e3nn(module, z), z_ref)}
    # The output gradient goes to the peer in its own output layout.
    g_peer = peer.out_from_e3nn(module, g)
    gx, gy, gw = torch.autograd.grad(z, (xp, yp, wp), g_peer.to(dtype))
    out["verify_bwd_rel_err"] = max(
        rel_err(peer.x_to_e3nn(module, gx), gx_ref),
        rel_err(gy, gy_ref),
        rel_err(peer.w_to_e3nn(module, gw), gw_ref),
    )
    # Loose enough for CG tables that are not float64-exact (e3nn against cuEquivariance
    # differ by ~3e-8 in float64), tight enough that a wrong path, normalization or layout
    # (errors of order 1) fails.
    tol = 1e-6 if dtype == torch.float64 else 1e-4
    ok = out["verify_fwd_rel_err"] < tol and out["verify_bwd_rel_err"] < tol
    out["verify"] = "PASS" if ok else "FAIL"
    out["verify_tol"] = tol
    return out


def run_problem(
    peer: Peer, name: str, dtype: torch.dtype, mode: str, ops: List[str], skipped: List[str], args
) -> List[Dict[str, Any]]:
    node, edge, target, n, e = SHAPES[name]
    n, e = max(1, int(n * args.scale)), max(1, int(e * args.scale))
    dev = torch.device("cuda")
    dt = str(dtype).replace("torch.", "")
    head = {
        "peer": peer.name,
        "peer_version": peer.version(),
        "problem": name,
        "dtype": dt,
        "mode": mode,
        "nodes": n,
        "edges": e,
        "gpu": torch.cuda.get_device_name(dev),
        "torch": torch.__version__,
    }
    symmetric = peer.needs_symmetric_graph(mode)
    if symmetric:
        head["graph"] = "symmetric (this mode requires it)"
    recs = [
        dict(head, op=op, error="not run: in the skip list (known out of memory or unsupported)")
        for op in skipped
    ]

    def fail_all(why: str) -> List[Dict[str, Any]]:
        return recs + [dict(head, op=op, error=f"not run: {why}") for op in ops]

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    receiver, sender = make_graph(n, e, dev, gen, symmetric)
    t0 = time.time()
    mem0 = torch.cuda.memory_allocated()
    try:
        module = peer.build(node, edge, target, dtype, mode)
    except NotSupported as exc:
        return fail_all(str(exc))
    except Exception as exc:  # a peer's own failure is a result, not a crash of the run
        return fail_all(f"build failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
    head["setup_s"] = time.time() - t0
    # The module's own device memory (e.g. OpenEquivariance's workspace) counts as extra.
    head["module_bytes"] = max(0, torch.cuda.memory_allocated() - mem0)
    try:
        check = verify(peer, module, node, edge, target, dtype, dev, args.seed, symmetric=symmetric)
    except NotSupported as exc:
        return fail_all(str(exc))
    except Exception as exc:
        traceback.print_exc()
        check = {
            "verify": "FAIL",
            "verify_note": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
        }
    head.update(check)
    if check["verify"] != "PASS":
        print(json.dumps(dict(head, note="check failed")), file=sys.stderr, flush=True)
    torch.cuda.empty_cache()

    def randn(*shape, grad=False):
        return torch.randn(*shape, device=dev, dtype=dtype, generator=gen).requires_grad_(grad)

    try:
        x = randn(n, peer.x_dim(module), grad=True)
        y = randn(e, irreps_dim(edge), grad=True)
        w = randn(e, peer.weight_numel(module), grad=True)
        g = randn(n, peer.out_dim(module), grad=True)
        dx, dy, dw = randn(*x.shape), randn(*y.shape), randn(*w.shape)
        graph = peer.graph(module, receiver, sender, n)
    except torch.cuda.OutOfMemoryError:
        return fail_all("out of device memory for the inputs")

    def fwd():
        with torch.no_grad():
            peer.forward(module, x, y, w, graph)

    def fb():
        for t in (x, y, w):
            t.grad = None
        peer.forward(module, x, y, w, graph).backward(g)

    def db():
        for t in (x, y, w, g):
            t.grad = None
        gx, gy, gw = torch.autograd.grad(
            peer.forward(module, x, y, w, graph), (x, y, w), g, create_graph=True
        )
        ((gx * dx).sum() + (gy * dy).sum() + (gw * dw).sum()).backward()

    for op in ops:
        fn = {"fwd": fwd, "fb": fb, "db": db}[op]
        rec = dict(head, op=op)
        try:
            torch.cuda.synchronize()
            # Inputs are not counted; the module (and its workspace) is: it was built before the
            # inputs, so its bytes were counted then and are added here.
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            start = time.time()
            fn()
            torch.cuda.synchronize()
            single = time.time() - start
            rec["peak_extra_bytes"] = (
                torch.cuda.max_memory_allocated() - base + head["module_bytes"]
            )
            reps = args.reps
            if single * (reps + args.warmup) > args.budget_s:
                fit = int(args.budget_s / max(single, 1e-6)) - args.warmup
                reps = min(reps, max(args.min_reps, fit))
            rec["median_ms"], rec["runs"] = timed(fn, reps, args.warmup, True)
        except torch.cuda.OutOfMemoryError:
            rec["error"] = "not run: out of device memory"
        except Exception as exc:
            msg = str(exc).strip().splitlines()
            rec["error"] = f"not run: {type(exc).__name__}: {(msg[0] if msg else '')[:300]}"
        for t in (x, y, w, g):
            t.grad = None
        torch.cuda.empty_cache()
        recs.append(rec)
    torch.cuda.empty_cache()
    return recs


def irreps_dim(irreps: str) -> int:
    """Dimension of an irreps string such as ``0e+1o+2e`` or ``64x0e+64x1o``.

    Examples
    --------
    >>> irreps_dim("0e+1o+2e+3o"), irreps_dim("32x0o+32x1e")
    (16, 128)
    """
    total = 0
    for term in irreps.split("+"):
        mul, _, ir = term.rpartition("x")
        total += int(mul or 1) * (2 * int(ir[:-1]) + 1)
    return total


def main(peer_factory: Callable[[], Peer], doc: str) -> int:
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--problems", default=",".join(SHAPES))
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--ops", default="fwd,fb,db")
    ap.add_argument("--modes", default="", help="accumulation modes (default: all the peer has)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--min-reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument(
        "--budget-s",
        type=float,
        default=6.0,
        help="time budget per measurement; slow ones run fewer reps (>= --min-reps)",
    )
    ap.add_argument(
        "--skip", default="", help="problem:dtype:op triples not to run (recorded as not run)"
    )
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--json", default="")
    ap.add_argument("--scale", type=float, default=1.0, help="scale N and E (smoke tests only)")
    args = ap.parse_args()
    skip = set(args.skip.split(",")) if args.skip else set()
    out = open(args.json, "w") if args.json else None

    def emit(rec):
        print(json.dumps(rec), flush=True)
        if out:
            out.write(json.dumps(rec) + "\n")
            out.flush()

    problems = args.problems.split(",")
    for name in problems:
        if name not in SHAPES:
            raise ValueError(f"unknown problem {name!r}; known: {', '.join(SHAPES)}")
    try:
        if not torch.cuda.is_available():
            raise NotSupported("no CUDA device")
        peer = peer_factory()
    except Exception as exc:  # the peer is absent here: one line per cell says so
        why = str(exc).strip().splitlines()
        why = f"{type(exc).__name__}: {why[0][:300] if why else ''}"
        for name in problems:
            for dt in args.dtypes.split(","):
                for op in args.ops.split(","):
                    emit(
                        {
                            "problem": name,
                            "dtype": dt,
                            "op": op,
                            "mode": "-",
                            "error": f"not run: peer unavailable ({why})",
                        }
                    )
        return 0
    modes = args.modes.split(",") if args.modes else list(peer.modes)
    for name in problems:
        for dt in args.dtypes.split(","):
            dtype = {"float32": torch.float32, "float64": torch.float64}[dt]
            ops = [op for op in args.ops.split(",") if f"{name}:{dt}:{op}" not in skip]
            skipped = [op for op in args.ops.split(",") if f"{name}:{dt}:{op}" in skip]
            for mode in modes:
                for rec in run_problem(peer, name, dtype, mode, ops, skipped, args):
                    emit(rec)
    return 0

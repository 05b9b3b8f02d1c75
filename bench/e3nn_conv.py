# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
"""The e3nn reference convolution, timed on the same GPU in the same run as bench_conv.

For each benchmark problem of docs/kernels.md: gather x[sender] -> e3nn ``o3.TensorProduct``
(uvu, one output block per instruction, MACE's construction, per-edge weights) ->
``index_add`` to the receivers; forward, forward+backward (gradients of x, Y, W) and double
backward (gradients of <grad_x, dx> + <grad_Y, dY> + <grad_W, dW> with respect to x, Y, W and
grad_out). CUDA events, warm-up, median; peak extra device memory over the inputs.

Examples
--------
>>> # python3 bench/e3nn_conv.py --problems mace-medium --dtypes float32 --json e3nn.jsonl
"""

import argparse
import json
import sys
import time

import torch
from e3nn import o3

SHAPES = {
    "mace-medium": ("128x0e+128x1o", "0e+1o+2e+3o", "128x0e+128x1o+128x2e", 10000, 160000),
    "mace-large": (
        "128x0e+128x1o+128x2e",
        "0e+1o+2e+3o",
        "128x0e+128x1o+128x2e+128x3o",
        10000,
        160000,
    ),
    "nequip-benzene": (
        "64x0o+64x0e+64x1o+64x1e+64x2o+64x2e+64x3o+64x3e",
        "0e+1o+2e+3o",
        "64x0o+64x0e+64x1o+64x1e+64x2o+64x2e+64x3o+64x3e",
        10000,
        160000,
    ),
    "nequip-water": ("32x0o+32x0e+32x1o+32x1e", "0e+1o", "32x0o+32x0e+32x1o+32x1e", 10000, 160000),
}
for _L in range(4, 9):
    _nat = "+".join(f"{{m}}x{l}{'o' if l % 2 else 'e'}" for l in range(_L + 1))
    SHAPES[f"high-l-{_L}"] = (_nat.format(m=128), _nat.format(m=1), _nat.format(m=128), 1000, 16000)


def conv_tp(node, edge, target):
    """MACE's conv_tp: one uvu instruction and output block per path landing in ``target``.

    Parameters
    ----------
    node, edge, target : str
        Irreps of the node features, the edge attributes and the allowed outputs.

    Returns
    -------
    o3.TensorProduct
        With per-edge (external) weights.

    Examples
    --------
    >>> conv_tp("8x0e+8x1o", "0e+1o", "8x0e+8x1o").weight_numel
    32
    """
    node, edge, target = o3.Irreps(node), o3.Irreps(edge), o3.Irreps(target)
    allowed = [ir for _, ir in target]
    mid, ins = [], []
    for i, (mul, ir_in) in enumerate(node):
        for j, (_, ir_edge) in enumerate(edge):
            for ir_out in ir_in * ir_edge:
                if ir_out in allowed:
                    ins.append((i, j, len(mid), "uvu", True))
                    mid.append((mul, ir_out))
    out, p, _ = o3.Irreps(mid).sort()
    ins = [(i1, i2, p[io], mode, train) for i1, i2, io, mode, train in ins]
    return o3.TensorProduct(node, edge, out, ins, shared_weights=False, internal_weights=False)


def timed(fn, reps, warmup, cuda):
    """Median and count of the times (ms) of ``fn``: CUDA events after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        if cuda:
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2], len(times)


def run(name, dtype, ops, args):
    node, edge, target, n, e = SHAPES[name]
    n, e = max(1, int(n * args.scale)), max(1, int(e * args.scale))
    dev = torch.device(args.device)
    t0 = time.time()
    tp = conv_tp(node, edge, target).to(device=dev, dtype=dtype)
    setup = time.time() - t0
    gen = torch.Generator(device=dev).manual_seed(args.seed)

    def randn(*shape, grad=False):
        return torch.randn(*shape, device=dev, dtype=dtype, generator=gen).requires_grad_(grad)

    receiver = torch.sort(torch.randint(0, n, (e,), device=dev, generator=gen)).values
    sender = torch.randint(0, n, (e,), device=dev, generator=gen)
    x, y = randn(n, tp.irreps_in1.dim, grad=True), randn(e, tp.irreps_in2.dim, grad=True)
    w, g = randn(e, tp.weight_numel, grad=True), randn(n, tp.irreps_out.dim, grad=True)
    dx, dy, dw = randn(*x.shape), randn(*y.shape), randn(*w.shape)

    def forward():
        out = torch.zeros(n, tp.irreps_out.dim, device=dev, dtype=dtype)
        return out.index_add(0, receiver, tp(x[sender], y, w))

    def fwd():
        with torch.no_grad():
            forward()

    def fb():
        for t in (x, y, w):
            t.grad = None
        forward().backward(g)

    def db():
        for t in (x, y, w, g):
            t.grad = None
        gx, gy, gw = torch.autograd.grad(forward(), (x, y, w), g, create_graph=True)
        ((gx * dx).sum() + (gy * dy).sum() + (gw * dw).sum()).backward()

    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    results = []
    for op in ops:
        fn = {"fwd": fwd, "fb": fb, "db": db}[op]
        rec = {
            "problem": name,
            "dtype": str(dtype).replace("torch.", ""),
            "op": op,
            "nodes": n,
            "edges": e,
            "setup_s": setup,
        }
        try:
            sync()
            base = torch.cuda.memory_allocated() if cuda else 0
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            start = time.time()
            fn()
            sync()
            single = time.time() - start
            if cuda:
                rec["peak_extra_bytes"] = torch.cuda.max_memory_allocated() - base
            # At least args.reps runs; fewer only where one run takes longer than the budget
            # allows (recorded in "runs").
            reps = args.reps
            if single * (reps + args.warmup) > args.budget_s:
                fit = int(args.budget_s / max(single, 1e-6)) - args.warmup
                reps = min(reps, max(args.min_reps, fit))
            rec["median_ms"], rec["runs"] = timed(fn, reps, args.warmup, cuda)
        except torch.cuda.OutOfMemoryError:
            rec["error"] = "out of device memory"
        for t in (x, y, w, g):
            t.grad = None
        if cuda:
            torch.cuda.empty_cache()
        results.append(rec)
        print(json.dumps(rec), flush=True)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", default="mace-medium,mace-large,nequip-benzene,nequip-water")
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--ops", default="fwd,fb,db")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--min-reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument(
        "--budget-s",
        type=float,
        default=6.0,
        help="time budget per measurement; slow ones run fewer reps (>= --min-reps)",
    )
    ap.add_argument("--skip", default="", help="problem:dtype:op triples to skip (known OOM)")
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--json", default="")
    ap.add_argument("--device", default="cuda", help="cpu only for a smoke test of the script")
    ap.add_argument("--scale", type=float, default=1.0, help="scale N and E (smoke tests only)")
    args = ap.parse_args()
    skip = set(args.skip.split(",")) if args.skip else set()
    out = open(args.json, "w") if args.json else None
    for name in args.problems.split(","):
        if name not in SHAPES:
            raise ValueError(f"unknown problem {name!r}; known: {', '.join(SHAPES)}")
        for dt in args.dtypes.split(","):
            dtype = {"float32": torch.float32, "float64": torch.float64}[dt]
            ops = [op for op in args.ops.split(",") if f"{name}:{dt}:{op}" not in skip]
            skipped = [
                {
                    "problem": name,
                    "dtype": dt,
                    "op": op,
                    "error": "not run: in the skip list (known out of memory)",
                }
                for op in args.ops.split(",")
                if f"{name}:{dt}:{op}" in skip
            ]
            for rec in skipped + run(name, dtype, ops, args):
                if out:
                    out.write(json.dumps(rec) + "\n")
                    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

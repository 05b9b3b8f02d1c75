"""Export freshly built random-weight MACE and NequIP models for the C++ tests.

This is the CTest fixture ``exported_models`` (unittest/CMakeLists.txt). Every run builds the
models below from scratch with the real packages (``potentials.tests.mace_factory.build_mace``
in the mace venv, ``potentials.tests.test_nequip.build_nequip`` in the nequip venv: random
weights, perturbed away from their initial values), exports them with the Clebsch exporter
(``potentials.read_mace`` / ``potentials.read_nequip``, ``potentials.write``) and writes the
golden data of each (the exporter's golden option, FORMAT.md section 7). mace-torch pins e3nn
0.4.4 and nequip needs e3nn 0.6, so the driver runs one worker per venv, both at once.

Layout of ``--out`` (CTest: ``<build>/unittest/models``)::

    models.json                  the index below; written last, so it exists only when every
                                 export succeeded
    <name>.safetensors           model file (potentials/FORMAT.md)
    <name>.golden.safetensors    golden file: reference structures (molecule, periodic,
                                 multispecies) with the Python model's float64 outputs

``models.json``::

    {"format": "clebsch-exported-models", "version": 1,
     "packages": {"mace": {...versions...}, "nequip": {...}},
     "models": [
       {"name": "mace_residual_corr2_l2_zbl",
        "arch": "mace" | "nequip",
        "file": "<name>.safetensors",           # relative to models.json
        "golden": "<name>.golden.safetensors",  # relative to models.json
        "head": "r2scan" | null,                # default head of a multi-head MACE
        "head_goldens": {"pbe": "<name>.golden.pbe.safetensors", ...},
                                                # multi-head MACE: mace-torch on every head
        "features": ["residual", "zbl", ...],   # what the case exercises (tags)
        "hyperparameters": {...},               # the builder's keyword arguments
        "expect": {...}}, ...]}

``expect`` holds facts read from the live Python modules (not from the export), for tests to
compare with what a reader makes of the file. Common keys: ``species_Z``, ``r_max``,
``sh_lmax``, ``num_basis``, ``zbl`` (bool), ``model_dtype``. MACE adds ``num_interactions``,
``interactions`` (per block: ``class``, ``residual``, ``density``, ``conv_tp`` and ``skip_tp``
as ``{irreps_in1, irreps_in2, irreps_out, num_instructions, weight_numel}``,
``avg_num_neighbors`` or null), ``products`` (per block: ``irreps_out``, ``correlation`` per
contraction), ``readouts`` (per readout: ``"linear"``/``"nonlinear"``), ``distance_transform``
(null/``"agnesi"``/``"soft"``), ``apply_cutoff``, ``scale``, ``shift``, ``atomic_energies``.
NequIP adds ``type_names``, ``num_layers``, ``layers`` (per layer: ``tp`` as above, ``sc``
(bool), ``resnet``, ``irreps_out``), ``r_max_pairs``, ``scales``, ``shifts``.

``--seeds`` instead writes the two small exports checked into ``unittest/potentials/`` as the
seeds of the (Python-free, sanitized) reader mutation test, without golden files.

Examples
--------
>>> # python make_exported_models.py --out build/unittest/models \\
>>> #     --python mace=~/.cache/clebsch/venv-mace/bin/python \\
>>> #     --python nequip=~/.cache/clebsch/venv-nequip/bin/python
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Small but complete: few channels, few radial functions, narrow MLPs, so that building,
# exporting and the golden evaluation take seconds per model.
_MACE_SMALL = dict(num_bessel=4, radial_MLP=[8], MLP_irreps="4x0e", hidden_irreps="4x0e+4x1o")

#: name -> (features, build_mace keyword arguments, exported head)
MACE_CASES = {
    "mace_nonresidual_corr1_l1": (
        ["plain_MACE_class", "nonresidual", "correlation1", "max_ell1"],
        dict(
            _MACE_SMALL,
            model="MACE",
            correlation=1,
            max_ell=1,
            interaction_cls_first="RealAgnosticInteractionBlock",
            interaction_cls="RealAgnosticInteractionBlock",
        ),
        None,
    ),
    "mace_residual_corr2_l2_zbl": (
        ["residual", "correlation2", "max_ell2", "l2_features", "zbl"],
        dict(
            _MACE_SMALL,
            correlation=2,
            max_ell=2,
            hidden_irreps="4x0e+4x1o+4x2e",
            pair_repulsion=True,
        ),
        None,
    ),
    "mace_density_corr3_l3_agnesi_zbl": (
        ["density", "density_residual", "correlation3", "max_ell3", "agnesi", "zbl"],
        dict(
            _MACE_SMALL,
            correlation=3,
            max_ell=3,
            pair_repulsion=True,
            distance_transform="Agnesi",
            interaction_cls_first="RealAgnosticDensityInteractionBlock",
            interaction_cls="RealAgnosticDensityResidualInteractionBlock",
        ),
        None,
    ),
    "mace_nonnatural_parity": (
        ["non_natural_parity", "odd_cg_paths", "correlation3"],
        dict(_MACE_SMALL, correlation=3, max_ell=2, hidden_irreps="4x0e+4x0o+4x1o+4x1e"),
        None,
    ),
    "mace_multihead": (
        ["multi_head", "zbl", "nonlinear_readout"],
        dict(_MACE_SMALL, heads=["pbe", "r2scan"], correlation=2, pair_repulsion=True),
        "r2scan",
    ),
    "mace_three_species_soft_float32": (
        ["three_species", "soft_transform", "no_apply_cutoff", "per_layer_correlation", "float32"],
        dict(
            _MACE_SMALL,
            dtype="float32",
            num_interactions=3,
            correlation=[3, 2, 1],
            apply_cutoff=False,
            distance_transform="Soft",
            atomic_numbers=[1, 8, 29],
            interaction_cls_first="RealAgnosticInteractionBlock",
            interaction_cls="RealAgnosticDensityResidualInteractionBlock",
        ),
        None,
    ),
    "mace_agnostic_last_readout_l3": (
        ["species_agnostic_product", "last_readout_only", "max_ell3"],
        dict(
            _MACE_SMALL,
            use_agnostic_product=True,
            use_last_readout_only=True,
            max_ell=3,
            correlation=2,
        ),
        None,
    ),
}

#: name -> case of ``potentials.tests.mace_arch_cases`` (the architectures of mace-torch's newer
#: foundation models: MH-1-style and OMOL-style charged). Listed with ``"arch": "mace_arch"``,
#: apart from the classic MACE models, while not every engine supports them (the CUDA engine
#: does not yet); ``test_exported_mace_arch_golden.cpp`` reads them. Their golden files carry
#: ``structure_inputs`` (total charge and spin) when the model has an embedding.
MACE_ARCH_CASES = {
    "mace_arch_mh1_style": "mh1_style",
    "mace_arch_omol_charged": "omol_charged",
    "mace_arch_gaussian_basis": "gaussian_basis",
    "mace_arch_chebyshev_basis": "chebyshev_basis",
}

_ZBL = {
    "_target_": "nequip.nn.pair_potential.ZBL",
    "units": "metal",
    "chemical_species": ["Cu", "Au"],
}

#: name -> (features, build_nequip keyword arguments)
NEQUIP_CASES = {
    "nequip_parity_zbl_per_edge_cutoff": (
        [
            "parity",
            "non_natural_parity",
            "zbl",
            "per_edge_type_cutoff",
            "per_type_avg_num_neighbors",
            "per_type_scale_shift",
        ],
        dict(
            l_max=2,
            parity=True,
            num_layers=2,
            num_features=4,
            avg_num_neighbors={"Cu": 10.0, "Au": 12.0},
            per_type_energy_scales={"Cu": 1.2, "Au": 0.8},
            per_type_energy_shifts={"Cu": -3.0, "Au": -2.0},
            pair_potential=_ZBL,
            per_edge_type_cutoff={"Cu": 3.5, "Au": {"Cu": 3.8}},
        ),
    ),
    "nequip_noparity_float32": (
        ["no_parity", "float32", "three_layers", "scalar_scale_shift"],
        dict(
            model_dtype="float32",
            l_max=1,
            parity=False,
            num_layers=3,
            num_features=[6, 3],
            avg_num_neighbors=9.0,
            per_type_energy_scales=1.5,
            per_type_energy_shifts=-1.0,
        ),
    ),
    "nequip_lmax3_resnet_mlp_readout": (
        ["parity", "l_max3", "resnet", "mlp_readout", "type_embedding_width"],
        dict(
            l_max=3,
            parity=True,
            num_layers=3,
            num_features=3,
            type_embed_num_features=5,
            radial_mlp_depth=1,
            radial_mlp_width=6,
            readout_mlp_hidden_layers_depth=1,
            readout_mlp_hidden_layers_width=5,
            convnet_resnet=True,
            avg_num_neighbors=11.0,
            per_type_energy_shifts={"Cu": -3.0, "Au": -2.0},
        ),
    ),
    # Readout MLP nonlinearities gelu (two activated hidden layers) and mish (the case that
    # commit 035dc47 dropped), nequip_models.py readout_mlp_nonlinearity.
    "nequip_readout_gelu": (
        ["readout_gelu", "mlp_readout"],
        dict(
            l_max=1,
            num_layers=1,
            num_features=3,
            readout_mlp_hidden_layers_depth=2,
            readout_mlp_hidden_layers_width=5,
            readout_mlp_nonlinearity="gelu",
            avg_num_neighbors=9.0,
        ),
    ),
    "nequip_readout_mish": (
        ["readout_mish", "mlp_readout"],
        dict(
            l_max=1,
            num_layers=1,
            num_features=3,
            readout_mlp_hidden_layers_depth=1,
            readout_mlp_hidden_layers_width=5,
            readout_mlp_nonlinearity="mish",
            avg_num_neighbors=9.0,
        ),
    ),
}

#: The checked-in mutation-test seeds (unittest/potentials/): as much structure as possible in
#: tens of kilobytes.
SEED_CASES = {
    "mace": (
        "seed_mace",
        dict(
            num_bessel=3,
            radial_MLP=[4],
            MLP_irreps="2x0e",
            hidden_irreps="2x0e+2x0o+2x1o+2x1e",
            max_ell=2,
            correlation=2,
            num_interactions=2,
            pair_repulsion=True,
            distance_transform="Agnesi",
            interaction_cls_first="RealAgnosticDensityInteractionBlock",
            interaction_cls="RealAgnosticResidualInteractionBlock",
        ),
    ),
    "nequip": (
        "seed_nequip",
        dict(
            l_max=1,
            parity=True,
            num_layers=2,
            num_features=2,
            num_bessels=4,
            radial_mlp_depth=1,
            radial_mlp_width=4,
            avg_num_neighbors={"Cu": 10.0, "Au": 12.0},
            per_type_energy_shifts={"Cu": -3.0, "Au": -2.0},
            pair_potential=_ZBL,
            per_edge_type_cutoff={"Cu": 3.5, "Au": {"Cu": 3.8}},
        ),
    ),
}


# ---------------------------------------------------------------------------------------------
# Facts from the live modules


def _tp_facts(tp):
    return {
        "irreps_in1": str(tp.irreps_in1),
        "irreps_in2": str(tp.irreps_in2),
        "irreps_out": str(tp.irreps_out),
        "num_instructions": len(tp.instructions),
        "weight_numel": int(tp.weight_numel),
    }


def _mace_expect(model, head_index, model_dtype):
    import torch

    rad = model.radial_embedding
    dt = getattr(rad, "distance_transform", None)
    interactions = []
    for inter in model.interactions:
        name = type(inter).__name__
        interactions.append(
            {
                "class": name,
                "residual": "Residual" in name,
                "density": "Density" in name,
                "conv_tp": _tp_facts(inter.conv_tp),
                "skip_tp": _tp_facts(inter.skip_tp),
                "radial_mlp_out": int(inter.conv_tp.weight_numel),
                "avg_num_neighbors": (
                    None if "Density" in name else float(inter.avg_num_neighbors)
                ),
            }
        )
    products = [
        {
            "irreps_out": str(p.symmetric_contractions.irreps_out),
            "correlation": [int(c.correlation) for c in p.symmetric_contractions.contractions],
        }
        for p in model.products
    ]
    readouts = [
        "linear" if type(r).__name__ == "LinearReadoutBlock" else "nonlinear"
        for r in model.readouts
    ]
    e0 = torch.atleast_2d(model.atomic_energies_fn.atomic_energies.detach().double())
    e0 = e0[0] if e0.shape[0] == 1 else e0[head_index]
    if type(model).__name__ == "ScaleShiftMACE":
        scale = float(torch.atleast_1d(model.scale_shift.scale)[head_index])
        shift = float(torch.atleast_1d(model.scale_shift.shift)[head_index])
    else:
        scale, shift = 1.0, 0.0
    return {
        "species_Z": [int(z) for z in model.atomic_numbers],
        "r_max": float(model.r_max),
        "sh_lmax": int(max(ir.l for _, ir in model.spherical_harmonics.irreps_out)),
        "num_basis": int(rad.out_dim),
        "zbl": hasattr(model, "pair_repulsion"),
        "model_dtype": model_dtype,
        "num_interactions": len(model.interactions),
        "interactions": interactions,
        "products": products,
        "readouts": readouts,
        "distance_transform": (
            None
            if dt is None
            else {"AgnesiTransform": "agnesi", "SoftTransform": "soft"}.get(
                type(dt).__name__, type(dt).__name__
            )
        ),
        "apply_cutoff": bool(getattr(rad, "apply_cutoff", True)),
        "scale": scale,
        "shift": shift,
        "atomic_energies": [float(v) for v in e0],
    }


def _nequip_expect(model, model_dtype):
    from potentials import read_nequip

    func = read_nequip._func(model)
    names = sorted(
        [n for n, _ in func.named_children() if n.endswith("_convnet")], key=lambda s: int(s[5:-8])
    )
    layers = []
    for name in names:
        layer = getattr(func, name)
        layers.append(
            {
                "tp": _tp_facts(layer.conv.tp_scatter.tp),
                "sc": layer.conv.sc is not None,
                "resnet": bool(layer.resnet),
                "irreps_out": str(layer.equivariant_nonlin.irreps_out),
            }
        )
    type_names = list(read_nequip._type_names(model, func))
    n = len(type_names)
    recip = func.edge_norm._rmax_recip.detach().double().reshape(-1)
    if recip.numel() == 1:
        recip = recip.expand(n * n)
    ss = func.per_type_energy_scale_shift

    def per_type(t, has, default):
        if not has or t.numel() == 0:
            return [default] * n
        t = t.detach().double().reshape(-1)
        return [float(t[0])] * n if t.numel() == 1 else [float(v) for v in t]

    from ase.data import atomic_numbers

    return {
        "type_names": type_names,
        "species_Z": [int(atomic_numbers.get(t, 0)) for t in type_names],
        "r_max": float(func.edge_norm.r_max),
        "r_max_pairs": [[1.0 / float(recip[i * n + j]) for j in range(n)] for i in range(n)],
        "sh_lmax": int(max(ir.l for _, ir in func.spharm.sh.irreps_out)),
        "num_basis": int(func.bessel_encode.bessel_weights.numel()),
        "zbl": getattr(func, "pair_potential", None) is not None,
        "model_dtype": model_dtype,
        "num_layers": len(layers),
        "layers": layers,
        "scales": per_type(ss.scales, ss.has_scales, 1.0),
        "shifts": per_type(ss.shifts, ss.has_shifts, 0.0),
    }


# ---------------------------------------------------------------------------------------------
# Workers (run inside one venv)


def _quiet():
    import warnings

    warnings.filterwarnings("ignore")
    import torch

    torch.set_num_threads(1)  # the two workers share two cores


def _work_mace(out, names, golden, seeds):
    os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    sys.path.insert(0, str(ROOT))
    import torch

    _quiet()
    from potentials import read_mace, write
    from potentials.tests.mace_factory import build_mace

    if seeds:
        jobs = [(SEED_CASES["mace"][0], [], dict(SEED_CASES["mace"][1]), None)]
    else:
        jobs = [(n, *MACE_CASES[n]) for n in names if n in MACE_CASES]
    entries = []
    for i, (name, features, kw, head) in enumerate(jobs):
        t0 = time.time()
        kw = dict(kw)
        model_dtype = kw.pop("dtype", "float64")
        model = build_mace(seed=100 + i, dtype=getattr(torch, model_dtype), **kw)
        model_json, tensors = read_mace.export_mace(model, head=head)
        path = out / f"{name}.safetensors"
        write.write_model(path, model_json, tensors)
        entry = {
            "name": name,
            "arch": "mace",
            "file": path.name,
            "golden": None,
            "head": head,
            "features": features,
            "hyperparameters": dict(kw, dtype=model_dtype),
        }
        if golden:
            golden_json, golden_tensors = read_mace.golden_mace(model, model_json, head=head)
            gpath = write.golden_path_for(path)
            write.write_golden(gpath, golden_json, golden_tensors)
            entry["golden"] = gpath.name
            heads = [h["name"] for h in model_json["mace"]["heads"]]
            if len(heads) > 1:
                # mace-torch evaluated on every head: the references of head selection.
                entry["head_goldens"] = {}
                for h in heads:
                    hj, ht = read_mace.golden_mace(model, model_json, head=h)
                    hpath = out / f"{name}.golden.{h}.safetensors"
                    write.write_golden(hpath, hj, ht)
                    entry["head_goldens"][h] = hpath.name
        head_index = read_mace.select_head(model, head)[0]
        entry["expect"] = _mace_expect(model, head_index, model_dtype)
        entries.append(entry)
        print(
            f"  {name}: {path.stat().st_size / 1024:.0f} KiB, {time.time() - t0:.1f} s", flush=True
        )
    if not seeds:
        entries += _work_mace_arch(out, [n for n in names if n in MACE_ARCH_CASES], golden)
    return entries


def _work_mace_arch(out, names, golden):
    from potentials import read_mace, write
    from potentials.tests.mace_arch_cases import ARCH_CASES, ARCH_HEADS, build_arch_case

    entries = []
    for name in names:
        t0 = time.time()
        case = MACE_ARCH_CASES[name]
        head = ARCH_HEADS.get(case)
        model = build_arch_case(case)
        model_json, tensors = read_mace.export_mace(model, head=head)
        path = out / f"{name}.safetensors"
        write.write_model(path, model_json, tensors)
        entry = {
            "name": name,
            "arch": "mace_arch",
            "file": path.name,
            "golden": None,
            "head": head,
            "features": ["residual_nonlinear", "nonlinear_bias_readout"]
            + (["embedding"] if "embedding_specs" in ARCH_CASES[case] else []),
            "hyperparameters": {"case": case},
            "expect": {
                "species_Z": [int(z) for z in model.atomic_numbers],
                "r_max": float(model.r_max),
                "sh_lmax": int(max(ir.l for _, ir in model.spherical_harmonics.irreps_out)),
                "num_basis": int(model.radial_embedding.out_dim),
                "zbl": hasattr(model, "pair_repulsion"),
                "model_dtype": "float64",
                "embedding": hasattr(model, "joint_embedding"),
            },
        }
        if golden:
            golden_json, golden_tensors = read_mace.golden_mace(model, model_json, head=head)
            gpath = write.golden_path_for(path)
            write.write_golden(gpath, golden_json, golden_tensors)
            entry["golden"] = gpath.name
        entries.append(entry)
        print(f"  {name}: {time.time() - t0:.1f} s", flush=True)
    return entries


def _work_nequip(out, names, golden, seeds):
    sys.path.insert(0, str(ROOT))
    _quiet()
    from potentials import read_nequip, write
    from potentials.tests.test_nequip import build_nequip

    if seeds:
        jobs = [(SEED_CASES["nequip"][0], [], dict(SEED_CASES["nequip"][1]))]
    else:
        jobs = [(n, *NEQUIP_CASES[n]) for n in names]
    entries = []
    for i, (name, features, kw) in enumerate(jobs):
        t0 = time.time()
        model = build_nequip(seed=200 + i, **kw)
        model_dtype = kw.get("model_dtype", "float64")
        model_json, tensors = read_nequip.export_nequip(model)
        path = out / f"{name}.safetensors"
        write.write_model(path, model_json, tensors)
        entry = {
            "name": name,
            "arch": "nequip",
            "file": path.name,
            "golden": None,
            "head": None,
            "features": features,
            "hyperparameters": kw,
        }
        if golden:
            golden_json, golden_tensors = read_nequip.golden_nequip(model, model_json)
            gpath = write.golden_path_for(path)
            write.write_golden(gpath, golden_json, golden_tensors)
            entry["golden"] = gpath.name
        entry["expect"] = _nequip_expect(model, model_dtype)
        entries.append(entry)
        print(
            f"  {name}: {path.stat().st_size / 1024:.0f} KiB, {time.time() - t0:.1f} s", flush=True
        )
    return entries


def _versions(venv):
    from importlib.metadata import version

    out = {}
    for pkg in ("mace-torch" if venv == "mace" else "nequip", "e3nn", "torch"):
        try:
            out[pkg] = version(pkg)
        except Exception:  # noqa: BLE001  (absent from this venv)
            pass
    return out


def worker(venv, out, names, golden, seeds):
    work = _work_mace if venv == "mace" else _work_nequip
    entries = work(out, names, golden, seeds)
    fragment = {"venv": venv, "packages": _versions(venv), "models": entries}
    (out / f".fragment-{venv}.json").write_text(json.dumps(fragment))


# ---------------------------------------------------------------------------------------------
# Driver


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=pathlib.Path)
    parser.add_argument(
        "--python",
        action="append",
        default=[],
        metavar="VENV=PATH",
        help="interpreter of a venv: mace=/path/bin/python, nequip=/path/...",
    )
    parser.add_argument("--only", default=None, help="comma-separated case names (default: all)")
    parser.add_argument("--no-golden", action="store_true", help="skip the golden files")
    parser.add_argument(
        "--seeds",
        action="store_true",
        help="write the mutation-test seeds (unittest/potentials/) instead",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--names", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    golden = not (args.no_golden or args.seeds)

    if args.worker:
        names = [n for n in args.names.split(",") if n]
        worker(args.worker, out, names, golden, args.seeds)
        return 0

    pythons = {}
    for item in args.python:
        name, sep, path = item.partition("=")
        if not sep or not path:
            parser.error(f"--python expects VENV=PATH, got {item!r}")
        pythons[name] = path
    only = set(args.only.split(",")) if args.only else None
    plan = {
        "mace": [n for n in [*MACE_CASES, *MACE_ARCH_CASES] if only is None or n in only],
        "nequip": [n for n in NEQUIP_CASES if only is None or n in only],
    }
    if only is not None:
        unknown = only - set(MACE_CASES) - set(MACE_ARCH_CASES) - set(NEQUIP_CASES)
        if unknown:
            parser.error(f"unknown case(s) {sorted(unknown)}")
    index = out / "models.json"
    if not args.seeds and index.exists():
        index.unlink()  # a failed run must not leave an old index behind

    t0 = time.time()
    procs = {}
    for venv, names in plan.items():
        if not names and not args.seeds:
            continue
        if venv not in pythons:
            print(f"no interpreter for venv {venv!r} (pass --python {venv}=PATH)", file=sys.stderr)
            return 1
        cmd = [
            pythons[venv],
            str(pathlib.Path(__file__).resolve()),
            "--out",
            str(out),
            "--worker",
            venv,
            "--names",
            ",".join(names),
        ]
        if args.no_golden:
            cmd.append("--no-golden")
        if args.seeds:
            cmd.append("--seeds")
        procs[venv] = subprocess.Popen(cmd, cwd=str(ROOT))
    failures = [venv for venv, p in procs.items() if p.wait() != 0]
    if failures:
        print(f"export failed in venv(s) {failures}", file=sys.stderr)
        return 1

    models, packages = [], {}
    for venv in procs:
        fragment_path = out / f".fragment-{venv}.json"
        fragment = json.loads(fragment_path.read_text())
        fragment_path.unlink()
        packages[venv] = fragment["packages"]
        models.extend(fragment["models"])
    if args.seeds:
        print(f"wrote {[m['file'] for m in models]} in {time.time() - t0:.0f} s")
        return 0
    index.write_text(
        json.dumps(
            {
                "format": "clebsch-exported-models",
                "version": 1,
                "packages": packages,
                "models": models,
            },
            indent=1,
        )
    )
    print(f"wrote {len(models)} models and {index} in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

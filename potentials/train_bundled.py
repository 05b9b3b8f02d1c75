"""Train the bundled Cu-Au models (one MACE, one NequIP) on EMT data, seeded, on the CPU.

Three steps, each in the environment it needs (the data step works in either):

::

    ~/.cache/clebsch/venv-mace/bin/python   -m potentials.train_bundled data
    ~/.cache/clebsch/venv-mace/bin/python   -m potentials.train_bundled mace
    ~/.cache/clebsch/venv-nequip/bin/python -m potentials.train_bundled nequip

``data`` writes ``train/valid/test.xyz`` (ASE EMT reference: fcc Cu, fcc Au, Cu3Au, CuAu and
Cu-rich random alloys, from Langevin MD at 300-1500 K on strained cells, plus (111) slabs).
``mace``/``nequip`` train with the packages' own command-line tools (``mace_run_train``,
``nequip-train`` + ``nequip-package``), export to ``potentials/bundled/cuau-<arch>.safetensors``
with golden data, evaluate the held-out test set, run a short NVE check, and write
``potentials/bundled/cuau-<arch>.metrics.json``. The numbers in ``potentials/README.md`` come
from those files. Work files go to ``build/bundled-training`` (ignored by git).

Examples
--------
>>> # python -m potentials.train_bundled data && python -m potentials.train_bundled mace
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
from typing import Dict, List

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "potentials" / "bundled"
WORK = ROOT / "build" / "bundled-training"
SEED = 20261129
R_MAX = 5.0
SPECIES = ["Cu", "Au"]
THREADS = "2"


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------


def _emt_frames(rng: np.random.Generator) -> List:
    """Reference structures labelled with ASE's EMT calculator."""
    import ase.build
    from ase import units
    from ase.calculators.emt import EMT
    from ase.md.langevin import Langevin
    from ase.md.velocitydistribution import MaxwellBoltzmannDistribution

    def bulk(kind: str):
        if kind == "Cu":
            return ase.build.bulk("Cu", "fcc", a=3.59, cubic=True) * (2, 2, 2)
        if kind == "Au":
            return ase.build.bulk("Au", "fcc", a=4.06, cubic=True) * (2, 2, 2)
        atoms = ase.build.bulk("Cu", "fcc", a=3.75, cubic=True) * (2, 2, 2)
        n = len(atoms)
        if kind == "Cu3Au":  # L1_2 ordering: corner sites Au
            numbers = np.array([79 if i % 4 == 0 else 29 for i in range(n)])
        elif kind == "CuAu":
            numbers = np.array([79 if (i % 4) in (0, 1) else 29 for i in range(n)])
        else:  # random Cu-rich alloy
            numbers = np.where(rng.random(n) < 0.3, 79, 29)
        atoms.set_atomic_numbers(numbers)
        a = 3.59 + (4.06 - 3.59) * np.mean(numbers == 79)
        atoms.set_cell(atoms.cell[:] * a / 3.75, scale_atoms=True)
        return atoms

    frames = []
    kinds = ["Cu", "Cu", "Au", "Cu3Au", "CuAu", "random", "random"]
    for kind in kinds:
        for temperature in (300.0, 800.0, 1500.0):
            for strain in (-0.03, 0.0, 0.03):
                atoms = bulk(kind)
                F = np.eye(3) * (1.0 + strain) + rng.normal(scale=0.01, size=(3, 3))
                atoms.set_cell(atoms.cell[:] @ F, scale_atoms=True)
                atoms.calc = EMT()
                MaxwellBoltzmannDistribution(
                    atoms,
                    temperature_K=temperature,
                    rng=np.random.RandomState(rng.integers(1 << 31)),
                )
                dyn = Langevin(
                    atoms,
                    2.0 * units.fs,
                    temperature_K=temperature,
                    friction=0.02,
                    rng=np.random.RandomState(rng.integers(1 << 31)),
                )
                dyn.run(100)  # equilibrate
                for _ in range(2):
                    dyn.run(40)
                    frames.append(_labelled(atoms))
    # (111) slabs with vacuum, to see under-coordinated atoms
    for symbol, a in (("Cu", 3.59), ("Au", 4.06)):
        for temperature in (300.0, 900.0):
            slab = ase.build.fcc111(symbol, size=(2, 2, 4), a=a, vacuum=6.0)
            slab.pbc = (True, True, True)
            slab.calc = EMT()
            MaxwellBoltzmannDistribution(
                slab, temperature_K=temperature, rng=np.random.RandomState(rng.integers(1 << 31))
            )
            dyn = Langevin(
                slab,
                2.0 * units.fs,
                temperature_K=temperature,
                friction=0.02,
                rng=np.random.RandomState(rng.integers(1 << 31)),
            )
            dyn.run(60)
            for _ in range(4):
                dyn.run(30)
                frames.append(_labelled(slab))
    return frames


def _labelled(atoms):
    from ase.calculators.singlepoint import SinglePointCalculator

    copy = atoms.copy()
    energy = atoms.get_potential_energy()
    forces = atoms.get_forces()
    stress = atoms.get_stress(voigt=False)
    copy.calc = None
    copy.info["REF_energy"] = float(energy)
    copy.arrays["REF_forces"] = np.array(forces)
    copy.info["REF_stress"] = np.array(stress).reshape(-1)
    # nequip reads the standard keys from a calculator
    copy.calc = SinglePointCalculator(
        copy, energy=energy, forces=forces, stress=atoms.get_stress(voigt=True)
    )
    return copy


def isolated_energies() -> Dict[str, float]:
    """EMT energy of one isolated atom per element (the E0s / per-type shifts)."""
    from ase import Atoms
    from ase.calculators.emt import EMT

    out = {}
    for symbol in SPECIES:
        atom = Atoms(symbol, positions=[[0, 0, 0]], cell=[20, 20, 20], pbc=False)
        atom.calc = EMT()
        out[symbol] = float(atom.get_potential_energy())
    return out


def make_data(work: pathlib.Path, max_train: int = None) -> None:
    """Generate and split the EMT data set (seeded)."""
    import ase.io

    rng = np.random.default_rng(SEED)
    frames = _emt_frames(rng)
    order = rng.permutation(len(frames))
    n_test = len(frames) // 6
    n_valid = len(frames) // 10
    test = [frames[i] for i in order[:n_test]]
    valid = [frames[i] for i in order[n_test : n_test + n_valid]]
    train = [frames[i] for i in order[n_test + n_valid :]]
    if max_train is not None:
        train, valid, test = train[:max_train], valid[: max(2, max_train // 5)], test[:4]
    work.mkdir(parents=True, exist_ok=True)
    for name, part in (("train", train), ("valid", valid), ("test", test)):
        ase.io.write(work / f"{name}.xyz", part, format="extxyz")
    (work / "e0.json").write_text(json.dumps(isolated_energies()))
    print(
        f"data: {len(train)} train, {len(valid)} valid, {len(test)} test frames "
        f"({sum(len(f) for f in frames)} atoms) in {work}"
    )


# ---------------------------------------------------------------------------------------------
# Evaluation shared by both trainers
# ---------------------------------------------------------------------------------------------


def _errors(pred_e, ref_e, n_atoms, pred_f, ref_f) -> Dict[str, float]:
    de = (np.asarray(pred_e) - np.asarray(ref_e)) / np.asarray(n_atoms)
    df = np.concatenate(pred_f) - np.concatenate(ref_f)
    return {
        "energy_mae_meV_per_atom": 1e3 * float(np.mean(np.abs(de))),
        "energy_rmse_meV_per_atom": 1e3 * float(np.sqrt(np.mean(de**2))),
        "force_mae_meV_per_A": 1e3 * float(np.mean(np.abs(df))),
        "force_rmse_meV_per_A": 1e3 * float(np.sqrt(np.mean(df**2))),
        "n_frames": int(len(ref_e)),
        "n_atoms": int(np.sum(n_atoms)),
    }


def _evaluate_calc(calc, frames) -> Dict[str, float]:
    pe, re, na, pf, rf = [], [], [], [], []
    for atoms in frames:
        a = atoms.copy()
        a.calc = calc
        pe.append(a.get_potential_energy())
        pf.append(a.get_forces())
        re.append(atoms.info["REF_energy"])
        rf.append(atoms.arrays["REF_forces"])
        na.append(len(atoms))
    return _errors(pe, re, na, pf, rf)


def _file_agreement(model_path: pathlib.Path, frames, calc) -> float:
    """Largest |E(file, NumPy reference) - E(Python model)| per atom over some frames."""
    from potentials import numpy_reference as nr
    from potentials import write

    model_json, tensors = write.read_model(model_path)
    zs = [s["Z"] for s in model_json["species"]]
    worst = 0.0
    for atoms in frames:
        a = atoms.copy()
        a.calc = calc
        e_py = a.get_potential_energy()
        species = [zs.index(int(z)) for z in atoms.numbers]
        e_np = nr.evaluate(model_json, tensors, atoms.positions, species, atoms.cell[:], atoms.pbc)[
            "energy"
        ][0]
        worst = max(worst, abs(e_np - e_py) / len(atoms))
    return worst


def _nve_check(calc, steps: int = 500) -> Dict[str, float]:
    """NVE run (1 fs) of a 108-atom Cu3Au cell from 1200 K; energy drift and min distance."""
    import ase.build
    from ase import units
    from ase.md.velocitydistribution import MaxwellBoltzmannDistribution
    from ase.md.verlet import VelocityVerlet

    atoms = ase.build.bulk("Cu", "fcc", a=3.70, cubic=True) * (3, 3, 3)
    atoms.set_atomic_numbers([79 if i % 4 == 0 else 29 for i in range(len(atoms))])
    atoms.calc = calc
    MaxwellBoltzmannDistribution(atoms, temperature_K=1200.0, rng=np.random.RandomState(SEED))
    dyn = VelocityVerlet(atoms, 1.0 * units.fs)
    energies, dmin = [], 10.0
    t0 = time.time()
    for _ in range(steps // 10):
        dyn.run(10)
        energies.append(atoms.get_total_energy())
        d = atoms.get_all_distances(mic=True)
        dmin = min(dmin, float(np.min(d[np.triu_indices(len(atoms), 1)])))
    energies = np.array(energies)
    return {
        "steps": steps,
        "timestep_fs": 1.0,
        "atoms": len(atoms),
        "initial_temperature_K": 1200.0,
        "final_temperature_K": float(atoms.get_temperature()),
        "total_energy_drift_meV_per_atom": 1e3 * float(energies[-1] - energies[0]) / len(atoms),
        "total_energy_std_meV_per_atom": 1e3 * float(np.std(energies)) / len(atoms),
        "min_distance_A": dmin,
        "wall_s": time.time() - t0,
    }


def _emt_reference_nve() -> Dict[str, float]:
    from ase.calculators.emt import EMT

    return _nve_check(EMT())


def _write_metrics(outdir: pathlib.Path, arch: str, metrics: Dict) -> None:
    path = outdir / f"cuau-{arch}.metrics.json"
    path.write_text(json.dumps(metrics, indent=1) + "\n")
    print(json.dumps(metrics, indent=1))


def _run(cmd: List[str], cwd: pathlib.Path, log: pathlib.Path) -> None:
    env = dict(
        os.environ,
        OMP_NUM_THREADS=THREADS,
        MKL_NUM_THREADS=THREADS,
        PYTHONHASHSEED="0",
        TEST_VAL_TWO="2",
    )
    print("+", " ".join(cmd), flush=True)
    with open(log, "w") as handle:
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=handle, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = log.read_text()[-3000:]
        raise RuntimeError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{tail}")


# ---------------------------------------------------------------------------------------------
# MACE
# ---------------------------------------------------------------------------------------------

MACE_ARGS = dict(
    model="ScaleShiftMACE",
    num_interactions=2,
    num_channels=8,
    max_L=1,
    correlation=3,
    max_ell=2,
    r_max=R_MAX,
    num_radial_basis=8,
    radial_MLP="[16,16]",
    batch_size=4,
    valid_batch_size=10,
    max_num_epochs=60,
    lr=0.01,
    ema_decay=0.99,
    energy_weight=10.0,
    forces_weight=10.0,
    scaling="rms_forces_scaling",
    default_dtype="float64",
    device="cpu",
    seed=SEED % 10000,
    energy_key="REF_energy",
    forces_key="REF_forces",
    stress_key="REF_stress",
    error_table="PerAtomMAE",
    eval_interval=5,
    patience=1000,
)


def train_mace(
    work: pathlib.Path, epochs: int, outdir: pathlib.Path = BUNDLED, device: str = "cpu"
) -> None:
    import torch

    from potentials import read_mace, write

    torch.set_num_threads(int(THREADS))
    run = work / "mace"
    if run.exists():
        shutil.rmtree(run)
    run.mkdir(parents=True)
    e0 = json.loads((work / "e0.json").read_text())
    from ase.data import atomic_numbers

    args = dict(MACE_ARGS, max_num_epochs=epochs, device=device)
    cmd = [
        sys.executable,
        "-m",
        "mace.cli.run_train",
        "--name=cuau",
        f"--work_dir={run}",
        f"--train_file={work / 'train.xyz'}",
        f"--valid_file={work / 'valid.xyz'}",
        "--E0s={" + ", ".join(f"{atomic_numbers[s]}: {e!r}" for s, e in e0.items()) + "}",
        "--ema",
        "--amsgrad",
        "--save_cpu",
    ]
    cmd += [f"--{k}={v}" for k, v in args.items()]
    t0 = time.time()
    _run(cmd, run, run / "train.log")
    train_s = time.time() - t0
    model_file = run / "cuau.model"
    if not model_file.exists():
        candidates = sorted(run.rglob("*.model"))
        if not candidates:
            raise RuntimeError(f"mace produced no .model file in {run}")
        model_file = candidates[0]
    model = read_mace.load_mace(model_file)
    model_json, tensors = read_mace.export_mace(model, source_path=model_file)
    model_json["source"]["training"] = {
        "script": "potentials/train_bundled.py mace",
        "args": args,
        "seed": SEED,
    }
    out = outdir / "cuau-mace.safetensors"
    write.write_model(out, model_json, tensors)
    golden_json, golden = read_mace.golden_mace(model, model_json)
    write.write_golden(write.golden_path_for(out), golden_json, golden)

    from mace.calculators import MACECalculator
    import ase.io

    calc = MACECalculator(model_paths=str(model_file), device=device, default_dtype="float64")
    test = ase.io.read(work / "test.xyz", ":")
    metrics = {
        "arch": "mace",
        "file": out.name,
        "file_bytes": out.stat().st_size,
        "training_seconds": round(train_s, 1),
        "epochs": epochs,
        "hyperparameters": args,
        "test": _evaluate_calc(calc, test),
        "max_file_vs_python_eV_per_atom": _file_agreement(out, test[:5], calc),
        "nve": _nve_check(calc),
        "nve_emt_reference": _emt_reference_nve(),
        "source_sha256": model_json["source"]["sha256"],
    }
    _write_metrics(outdir, "mace", metrics)


# ---------------------------------------------------------------------------------------------
# NequIP
# ---------------------------------------------------------------------------------------------

NEQUIP_MODEL = dict(
    l_max=1,
    parity=False,
    num_layers=2,
    num_features=16,
    radial_mlp_depth=1,
    radial_mlp_width=16,
    num_bessels=8,
    polynomial_cutoff_p=6,
)
NEQUIP_EPOCHS = 100


def _nequip_config(
    work: pathlib.Path, epochs: int, e0: Dict[str, float], device: str = "cpu"
) -> str:
    def dataset(name):
        return {
            "_target_": "nequip.data.dataset.ASEDataset",
            "file_path": str(work / f"{name}.xyz"),
            "transforms": [
                {
                    "_target_": "nequip.data.transforms.ChemicalSpeciesToAtomTypeMapper",
                    "model_type_names": SPECIES,
                    "chemical_species_to_atom_type_map": {s: s for s in SPECIES},
                },
                {"_target_": "nequip.data.transforms.NeighborListTransform", "r_max": R_MAX},
            ],
        }

    loader = {"_target_": "torch.utils.data.DataLoader", "batch_size": 5}
    config = {
        "run": ["train", "test"],
        "seed": SEED % 10000,
        "data": {
            "_target_": "nequip.data.datamodule.NequIPDataModule",
            "seed": SEED % 10000,
            "train_dataset": dataset("train"),
            "val_dataset": dataset("valid"),
            "test_dataset": dataset("test"),
            "train_dataloader": dict(loader, batch_size=2, shuffle=True),
            "val_dataloader": dict(loader, batch_size=10),
            "test_dataloader": dict(loader, batch_size=10),
            "stats_manager": {
                "_target_": "nequip.data.CommonDataStatisticsManager",
                "type_names": SPECIES,
            },
        },
        "trainer": {
            "_target_": "lightning.Trainer",
            "max_epochs": epochs,
            "check_val_every_n_epoch": 1,
            "log_every_n_steps": 20,
            "accelerator": "gpu" if device == "cuda" else "cpu",
            "devices": 1,
            "enable_progress_bar": False,
            "callbacks": [
                {
                    "_target_": "lightning.pytorch.callbacks.ModelCheckpoint",
                    "monitor": "val0_epoch/weighted_sum",
                    "dirpath": str(work / "nequip"),
                    "filename": "best",
                    "save_top_k": 1,
                    "save_last": True,
                },
                {
                    "_target_": "lightning.pytorch.callbacks.LearningRateMonitor",
                    "logging_interval": "epoch",
                },
            ],
        },
        "training_module": {
            "_target_": "nequip.train.EMALightningModule",
            "ema_decay": 0.99,
            "loss": {
                "_target_": "nequip.train.EnergyForceLoss",
                "per_atom_energy": True,
                "coeffs": {"total_energy": 1.0, "forces": 1.0},
            },
            "val_metrics": {
                "_target_": "nequip.train.EnergyForceMetrics",
                "coeffs": {"per_atom_energy_mae": 1.0, "forces_mae": 1.0},
            },
            "test_metrics": {
                "_target_": "nequip.train.EnergyForceMetrics",
                "coeffs": {"per_atom_energy_mae": 1.0, "forces_mae": 1.0},
            },
            "optimizer": {"_target_": "torch.optim.Adam", "lr": 0.01},
            "lr_scheduler": {
                "scheduler": {
                    "_target_": "torch.optim.lr_scheduler.ReduceLROnPlateau",
                    "factor": 0.5,
                    "patience": 10,
                },
                "monitor": "val0_epoch/weighted_sum",
                "interval": "epoch",
                "frequency": 1,
            },
            "model": dict(
                {
                    "_target_": "nequip.model.NequIPGNNModel",
                    "seed": SEED % 10000,
                    "model_dtype": "float64",
                    "type_names": SPECIES,
                    "r_max": R_MAX,
                    "avg_num_neighbors": "${training_data_stats:num_neighbors_mean}",
                    "per_type_energy_scales": "${training_data_stats:forces_rms}",
                    "per_type_energy_shifts": "${training_data_stats:per_atom_energy_mean}",
                    "pair_potential": {
                        "_target_": "nequip.nn.pair_potential.ZBL",
                        "units": "metal",
                        "chemical_species": SPECIES,
                    },
                },
                **NEQUIP_MODEL,
            ),
        },
    }
    import yaml  # shipped with hydra/omegaconf in the nequip venv

    return yaml.safe_dump(config, sort_keys=False)


def train_nequip(
    work: pathlib.Path, epochs: int, outdir: pathlib.Path = BUNDLED, device: str = "cpu"
) -> None:
    import torch

    from potentials import read_nequip, write

    torch.set_num_threads(int(THREADS))
    run = work / "nequip"
    if run.exists():
        shutil.rmtree(run)
    run.mkdir(parents=True)
    e0 = json.loads((work / "e0.json").read_text())
    (run / "config.yaml").write_text(_nequip_config(work, epochs, e0, device))
    t0 = time.time()
    _run(
        [
            sys.executable,
            "-m",
            "nequip.scripts.train",
            "-cp",
            str(run),
            "-cn",
            "config",
            f"hydra.run.dir={run / 'hydra'}",
        ],
        run,
        run / "train.log",
    )
    train_s = time.time() - t0
    ckpt = run / "best.ckpt"
    package = run / "cuau.nequip.zip"
    _run(
        [sys.executable, "-m", "nequip.scripts.package", "build", str(ckpt), str(package)],
        run,
        run / "package.log",
    )
    model = read_nequip.load_nequip(package)
    model_json, tensors = read_nequip.export_nequip(model, source_path=package)
    model_json["source"]["training"] = {
        "script": "potentials/train_bundled.py nequip",
        "model": NEQUIP_MODEL,
        "epochs": epochs,
        "seed": SEED,
    }
    out = outdir / "cuau-nequip.safetensors"
    write.write_model(out, model_json, tensors)
    golden_json, golden = read_nequip.golden_nequip(model, model_json)
    write.write_golden(write.golden_path_for(out), golden_json, golden)

    import ase.io

    calc = _nequip_calculator(package)
    test = ase.io.read(work / "test.xyz", ":")
    metrics = {
        "arch": "nequip",
        "file": out.name,
        "file_bytes": out.stat().st_size,
        "training_seconds": round(train_s, 1),
        "epochs": epochs,
        "hyperparameters": NEQUIP_MODEL,
        "test": _evaluate_calc(calc, test),
        "max_file_vs_python_eV_per_atom": _file_agreement(out, test[:5], calc),
        "nve": _nve_check(calc),
        "source_sha256": model_json["source"]["sha256"],
    }
    _write_metrics(outdir, "nequip", metrics)


def _nequip_calculator(package: pathlib.Path):
    """An ASE calculator around the eager packaged model (float64, CPU)."""
    from ase.calculators.calculator import Calculator, all_changes

    from potentials import read_nequip

    model = read_nequip._double_copy(read_nequip.load_nequip(package))
    zs = {"Cu": 29, "Au": 79}
    order = [zs[s] for s in SPECIES]

    class _Calc(Calculator):
        implemented_properties = ["energy", "forces", "free_energy"]

        def calculate(self, atoms=None, properties=("energy",), system_changes=all_changes):
            Calculator.calculate(self, atoms, properties, system_changes)
            out = read_nequip.evaluate_nequip(
                model,
                self.atoms,
                [order.index(int(z)) for z in self.atoms.numbers],
                intermediates=False,
                copy=False,
            )
            self.results = {
                "energy": float(out["energy"][0]),
                "free_energy": float(out["energy"][0]),
                "forces": out["forces"],
            }

    return _Calc()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["data", "mace", "nequip"])
    parser.add_argument("--workdir", type=pathlib.Path, default=WORK)
    parser.add_argument("--outdir", type=pathlib.Path, default=BUNDLED)
    parser.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cpu",
        help="training device (the exported model is identical in kind)",
    )
    parser.add_argument("--epochs", type=int, default=None, help="override (smoke tests)")
    parser.add_argument(
        "--frames",
        type=int,
        default=None,
        help="data: keep only this many training frames (smoke tests)",
    )
    args = parser.parse_args(argv)
    args.outdir.mkdir(parents=True, exist_ok=True)
    if args.step == "data":
        make_data(args.workdir, args.frames)
    elif args.step == "mace":
        train_mace(
            args.workdir, args.epochs or MACE_ARGS["max_num_epochs"], args.outdir, args.device
        )
    else:
        train_nequip(args.workdir, args.epochs or NEQUIP_EPOCHS, args.outdir, args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())

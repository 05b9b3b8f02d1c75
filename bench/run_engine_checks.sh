#!/usr/bin/env bash
# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
#
# The correctness checks a GPU call runs beside its timings, for one carry (bench/make_carry.sh):
# the named GPU tests of the carry (bench/run_gpu_tests.sh with a gtest filter), then the
# MACE-MP-0-sized model at 2,000 atoms on the CUDA and host engines against mace-torch float64
# (bench_mace_model.py; the wheels of bench/WHEELS.md, .whl/mace). Each result is packed as
# OUT/tests.tar.xz and OUT/check2k.tar.xz (the model and force files left out); the summary
# lines go to stdout.
#   bench/run_engine_checks.sh CARRY OUT GTEST_FILTER
# CLEBSCH_MODELS_DIR: the fixture models of the test binaries (as run_gpu_tests.sh reads it).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
carry=${1:?usage: run_engine_checks.sh CARRY OUT GTEST_FILTER}
out=${2:?usage: run_engine_checks.sh CARRY OUT GTEST_FILTER}
filter=${3:?usage: run_engine_checks.sh CARRY OUT GTEST_FILTER}
mkdir -p "$out"
CLEBSCH_TEST_TIMEOUT=${CLEBSCH_TEST_TIMEOUT:-90} bash "$root/bench/run_gpu_tests.sh" "$carry" \
  "$out/tests" "$filter" 2>&1 | grep -E "^==|PASSED|FAILED|rc="
(cd "$out" && tar cJf tests.tar.xz tests && rm -rf tests)
set +e
source "$root/bench/setup_wheels.sh" "$root/.whl" >/dev/null 2>&1
(
  source "$root/bench/device_env.sh" "$carry" >/dev/null 2>&1
  PYTHONUNBUFFERED=1 PYTHONPATH=${MACE_PYTHONPATH:+$MACE_PYTHONPATH:}$root timeout 80 \
    python3 "$root/bench/bench_mace_model.py" --binary "$carry/bench/bench_mace_model" \
    --atoms 2000 --engines cuda,host --precisions fp32,fp64 --out "$out/check2k" \
    --json "$out/check2k/model.json" >"$out/check2k.log" 2>&1
  echo "check2k rc=$?"
)
grep -A5 '| engine | prec' "$out/check2k.log" | head -6
rm -f "$out/check2k/"*.safetensors "$out/check2k/"*.bin
(cd "$out" && tar cJf check2k.tar.xz check2k check2k.log && rm -rf check2k check2k.log)

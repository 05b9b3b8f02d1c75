#!/usr/bin/env bash
# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
#
# Kernel benchmark on a GPU host: build bench_conv if BUILD_DIR has none (cmake + ninja; needs
# the project's dependencies), run it (verification against the host reference first, then
# CUDA-event timing), run the e3nn reference on the same GPU in the same run, and merge both
# into OUT_DIR/table.md and OUT_DIR/report.json.
#
#   bench/run_bench.sh BUILD_DIR OUT_DIR [--problems a,b|all] [--dtypes float32,float64]
#                      [--e3nn-problems a,b|none] [--e3nn-skip p:dtype:op,...] [bench_conv args]
#
# Example (kernels.md's problems, both dtypes, both accumulation modes):
#   bench/run_bench.sh build-gpu out --problems mace-medium,mace-large --dtypes float32,float64
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:?usage: run_bench.sh BUILD_DIR OUT_DIR [args]}
out=${2:?usage: run_bench.sh BUILD_DIR OUT_DIR [args]}
shift 2
mkdir -p "$out"

problems="mace-medium,mace-large,nequip-benzene,nequip-water"
dtypes="float32,float64"
e3nn_problems=""
e3nn_skip="nequip-benzene:float64:db,high-l-8:float64:fwd,high-l-8:float64:fb,high-l-8:float64:db"
python=${PYTHON:-python3}
args=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --problems) problems=$2; shift 2 ;;
    --dtypes) dtypes=$2; shift 2 ;;
    --e3nn-problems) e3nn_problems=$2; shift 2 ;;
    --e3nn-skip) e3nn_skip=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
[[ -z $e3nn_problems ]] && e3nn_problems=$problems

if [[ ! -x $build/bench/bench_conv ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCLEBSCH_BUILD_PLUGIN=OFF \
        -DCLEBSCH_BUILD_TESTS=OFF
  cmake --build "$build" --target bench_conv -j "$(nproc)"
fi

commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || true)
export CLEBSCH_COMMIT=${CLEBSCH_COMMIT:-$commit}
status=0
"$build/bench/bench_conv" --problems "$problems" --dtypes "$dtypes" --json "$out/clebsch.jsonl" \
  "${args[@]}" 2>&1 | tee "$out/clebsch.txt" || status=1

if [[ $e3nn_problems != none ]]; then
  PYTHONUNBUFFERED=1 "$python" "$root/bench/e3nn_conv.py" --problems "$e3nn_problems" \
    --dtypes "$dtypes" --skip "$e3nn_skip" --json "$out/e3nn.jsonl" 2>&1 | tee "$out/e3nn.txt" \
    || status=1
fi
"$python" "$root/bench/report.py" "$out/clebsch.jsonl" "$out/e3nn.jsonl" --json "$out/report.json" \
  | tee "$out/table.md"
exit $status

#!/usr/bin/env bash
# Clebsch: equivariant interatomic potentials, natively. SPDX-License-Identifier: MIT
#
# On the GPU host: the PyTorch extension's CUDA path from a folder staged by
# torch/gpu/make_carry.sh (the prebuilt libclebsch_torch_ops.so + libclebsch_cuda.so and the
# sm_90 kernel cache, so that nothing compiles there), with the host's torch (2.11 + CUDA 13).
#   tests: torch/tests/test_conv_cuda.py (host e3nn 0.6) and test_patch_mace_cuda.py (mace-torch
#          and its e3nn 0.4.4 from .whl/mace) with CLEBSCH_TORCH_REQUIRE_CUDA=1 (a skipped cuda
#          target fails);
#   bench: bench/train_step.py (MACE-MP-0-medium-sized and NequIP-benzene-sized, fp32 and fp64,
#          clebsch, cueq and oeq from .whl/peers, e3nn; CLEBSCH_BENCH_ENGINES), records in
#          train_step.jsonl; CLEBSCH_BENCH_PROFILE=1: one more step of each under torch.profiler
#          (profile_<part>.md, the ten largest kernels in each record).
# Everything it writes (logs, junit XML, JSON records, how many kernel modules were compiled
# there) goes into OUT/torch-gpu.tar.xz, also when a part fails or runs out of time (each part
# has its own time limit: CLEBSCH_TESTS_TIMEOUT, default 240 s a file, CLEBSCH_BENCH_TIMEOUT,
# default 540 s).
#   torch/gpu/run_cuda_tests.sh CARRY OUT {tests|bench}
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
usage="usage: run_cuda_tests.sh CARRY OUT tests|bench"
carry=$(cd "${1:?$usage}" && pwd)
out=${2:?$usage}
mode=${3:?$usage}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d /tmp/torch-gpu.XXXXXX)
log=$work/run.log
pack() { tar cJf "$out/torch-gpu.tar.xz" -C "$work" . || true; }
trap pack EXIT
say() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$log"; }
status=0
# part NAME SECONDS CMD...: runs CMD with a time limit, its output in NAME.log (and the run log's
# tail); a failure is counted, not fatal.
part() {
  local name=$1 limit=$2 rc=0
  shift 2
  say "$name (limit ${limit} s): $*"
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$work/$name.log" 2>&1 || rc=$?
  [[ $rc -eq 124 || $rc -eq 137 ]] && echo "TIME LIMIT (${limit} s) reached" >>"$work/$name.log"
  say "$name: exit $rc, $((SECONDS - start)) s"
  grep -v -i 'warn' "$work/$name.log" | tail -25 | tee -a "$log"
  [[ $rc -eq 0 ]] || status=1
  return 0
}

say "host"
{
  nvidia-smi || true
  python3 -c 'import sys, torch; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' || true
  cat "$carry/build.txt" || true
  git -C "$root" log -1 --oneline 2>/dev/null || true
} >"$work/host.txt" 2>&1
cat "$work/host.txt" | tee -a "$log"

export CLEBSCH_TORCH_LIBRARY=$carry/lib/libclebsch_torch_ops.so
# shellcheck source=/dev/null
source "$root/bench/device_env.sh" "$carry" 2>>"$log"
export LD_LIBRARY_PATH=$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CLEBSCH_KERNEL_CACHE=/tmp/clebsch-kcache/kcache
cached_before=$(find "$CLEBSCH_KERNEL_CACHE" -name '*.cubin' | wc -l)
PYTHON=python3 source "$root/bench/setup_wheels.sh" "$root/.whl" >>"$log" 2>&1 || true
set -u
say "wheels: mace '${MACE_PYTHONPATH:-}', cueq '${CUEQ_PYTHONPATH:-}'"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
cd "$root"

case $mode in
  tests)
    export CLEBSCH_TORCH_REQUIRE_CUDA=1
    py=(python3 -m pytest -v -rs -p no:cacheprovider)
    part conv "${CLEBSCH_TESTS_TIMEOUT:-240}" env PYTHONPATH="$root/torch" \
      "${py[@]}" --junitxml="$work/conv.xml" torch/tests/test_conv_cuda.py
    part patch_mace "${CLEBSCH_TESTS_TIMEOUT:-240}" \
      env PYTHONPATH="${MACE_PYTHONPATH:+$MACE_PYTHONPATH:}$root/torch" \
      "${py[@]}" --junitxml="$work/patch_mace.xml" torch/tests/test_patch_mace_cuda.py
    ;;
  bench)
    # OpenEquivariance runs in a process of its own: with it importable, mace-torch imports it
    # (which JIT-compiles its extension, 1-2 min) in every process.
    engines=${CLEBSCH_BENCH_ENGINES:-clebsch,cueq,e3nn,oeq}
    others=$(tr ',' '\n' <<<"$engines" | grep -vx oeq | paste -sd, -)
    bench_part() {
      local name=$1 pythonpath=$2 which=$3
      part "$name" "${CLEBSCH_BENCH_TIMEOUT:-540}" \
        env PYTHONPATH="${MACE_PYTHONPATH:+$MACE_PYTHONPATH:}${pythonpath:+$pythonpath:}$root/torch:$root" \
        python3 bench/train_step.py --json "$work/train_step.jsonl" --run "${CLEBSCH_RUN:-h200-torch-train-step}" \
        --engines "$which" --warmup "${CLEBSCH_BENCH_WARMUP:-2}" \
        --repeat "${CLEBSCH_BENCH_REPEAT:-10}" --atoms "${CLEBSCH_BENCH_ATOMS:-10000}" \
        --models "${CLEBSCH_BENCH_MODELS:-mace-mp-0-medium,nequip-benzene}" \
        --precisions "${CLEBSCH_BENCH_PRECISIONS:-fp32,fp64}" \
        ${CLEBSCH_BENCH_PROFILE:+--profile "$work/profile_$name.md"}
    }
    [[ -n $others ]] && bench_part train_step "${CUEQ_PYTHONPATH:-}" "$others"
    if [[ ,$engines, == *,oeq,* ]]; then
      if [[ -n ${OEQ_VERSION:-} ]]; then
        bench_part train_step_oeq "${PEERS_PYTHONPATH:-}" oeq
      else
        say "oeq: not run: OpenEquivariance unavailable (.whl/peers lacks its source distribution)"
      fi
    fi
    ;;
  *)
    echo "run_cuda_tests.sh: mode must be tests or bench, got '$mode'" | tee -a "$log"
    status=1
    ;;
esac

cached_after=$(find "$CLEBSCH_KERNEL_CACHE" -name '*.cubin' | wc -l)
say "kernel cache: $cached_before modules carried, $((cached_after - cached_before)) compiled here"
say "done: status $status"
exit $status

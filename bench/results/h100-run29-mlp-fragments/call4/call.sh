#!/usr/bin/env bash
# Run 29 call 4 (H100, warm): Clebsch (final) and mace-torch + cuEquivariance on the same 10k
# system in one call (bench/run_peers.sh; Symmetrix-XL's wheels did not fit this call's carry).
set -u
[ -d .device/new/bench ] || (cd .device && tar xJf new-bin.tar.xz)
CLEBSCH_RESULTS_RUN=bench/results/h100-run29-mlp-fragments/call4 timeout 500 bash bench/run_peers.sh .device/new $OUT/peers 10000 > $OUT/peers.log 2>&1
echo "peers rc=$?"; tail -n 25 $OUT/peers.log

#!/usr/bin/env bash
# Run 33 call 3 (warm after call 2): Clebsch (v3, main's build) and Symmetrix-XL
# on the same 10k system in one call (bench/run_peers.sh; the cuEquivariance wheels do not fit beside
# Symmetrix-XL's: call 2).
set -u
[ -d .device/v3/bench ] || (cd .device && tar xJf v3-bin.tar.xz)
CLEBSCH_RESULTS_RUN=bench/results/run33-species-gemm/call3 timeout 560 bash bench/run_peers.sh .device/v3 $OUT/peers 10000 > $OUT/peers.log 2>&1
echo "peers rc=$?"; tail -n 25 $OUT/peers.log

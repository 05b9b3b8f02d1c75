#!/usr/bin/env bash
# Run 33 call 2 (warm after call 1): Clebsch (v3, main's build) and mace-torch + cuEquivariance
# on the same 10k system in one call (bench/run_peers.sh; Symmetrix-XL's wheels do not fit this
# call's carry beside cuEquivariance's: call 3).
set -u
[ -d .device/v3/bench ] || (cd .device && tar xJf v3-bin.tar.xz)
CLEBSCH_RESULTS_RUN=bench/results/run33-species-gemm/call2 timeout 560 bash bench/run_peers.sh .device/v3 $OUT/peers 10000 > $OUT/peers.log 2>&1
echo "peers rc=$?"; tail -n 25 $OUT/peers.log

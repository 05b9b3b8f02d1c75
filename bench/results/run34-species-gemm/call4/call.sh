#!/usr/bin/env bash
# Run 34 call 4 (warm after calls 2 and 3, whose cuEquivariance and Symmetrix-XL installs it
# finds): Clebsch (GEMM form) and both peers on 100,920 atoms of fcc Cu (bench/run_peers.sh).
# Carries: .device/v4-bin.tar.xz, .whl/mace.
set -u
FORM=${FORM:-gemm}
[ -d .device/v4/bench ] || (cd .device && tar xJf v4-bin.tar.xz)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt; cat $OUT/gpu.txt
CLEBSCH_SPECIES_FORM=$FORM CLEBSCH_RESULTS_RUN=bench/results/run34-species-gemm/call4 timeout 440 bash bench/run_peers.sh .device/v4 $OUT/peers 100000 > $OUT/peers.log 2>&1
echo "peers rc=$?"; tail -n 25 $OUT/peers.log

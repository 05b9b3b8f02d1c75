#!/usr/bin/env bash
# Run 34 call 2 (warm after call 1): Clebsch (this run's build, the species-factored first layer
# in the form call 1 measured faster: FORM) and mace-torch + cuEquivariance on the same 10k
# system in one call (bench/run_peers.sh). Carries: .device/v4-bin.tar.xz, .whl/mace, .whl/peers.
set -u
FORM=${FORM:-gemm}
[ -d .device/v4/bench ] || (cd .device && tar xJf v4-bin.tar.xz)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt; cat $OUT/gpu.txt
CLEBSCH_SPECIES_FORM=$FORM CLEBSCH_RESULTS_RUN=bench/results/run34-species-gemm/call2 timeout 560 bash bench/run_peers.sh .device/v4 $OUT/peers 10000 > $OUT/peers.log 2>&1
echo "peers rc=$?"; tail -n 25 $OUT/peers.log

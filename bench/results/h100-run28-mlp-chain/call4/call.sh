#!/usr/bin/env bash
# Run 28 call 4: mace-torch + cuEquivariance (its best GPU configuration) beside Clebsch on the
# same H100, 10k atoms (Symmetrix-XL's wheels did not fit this call's 64 MiB).
set -u
cd .device && tar xJf new-bin.tar.xz && cd ..
CLEBSCH_RESULTS_RUN=bench/results/h100-run28-mlp-chain/call4 timeout 330 bash bench/run_peers.sh .device/new $OUT/peers 10000 > $OUT/peers.log 2>&1
echo "peers rc=$?"; cat $OUT/peers/peers.md 2>/dev/null | head -40
rm -f $OUT/peers/clebsch/*.safetensors $OUT/peers/clebsch/*.bin $OUT/peers/peers/*.safetensors
cd $OUT && tar cJf peers.tar.xz peers peers.log && rm -rf peers

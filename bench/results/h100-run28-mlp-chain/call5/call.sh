#!/usr/bin/env bash
# Run 28 call 5: Symmetrix-XL (its CUDA 13 sm_90 wheel) beside Clebsch on the same H100, 10k atoms
# (The machine was the warm one of call 4: its /tmp/site-peers still held cuEquivariance, so both
# peers ran; the tar of the last line outlived the call's 300 s, the reports came back.)
set -u
cd .device && tar xJf new-bin.tar.xz && cd ..
CLEBSCH_RESULTS_RUN=bench/results/h100-run28-mlp-chain/call5 timeout 250 bash bench/run_peers.sh .device/new $OUT/peers 10000 > $OUT/peers.log 2>&1
echo "peers rc=$?"; cat $OUT/peers/peers.md 2>/dev/null | head -40
rm -f $OUT/peers/clebsch/*.safetensors $OUT/peers/clebsch/*.bin $OUT/peers/peers/*.safetensors
cd $OUT && tar cJf peers.tar.xz peers peers.log && rm -rf peers

#!/usr/bin/env bash
# Run 31 call 2 (H100; no H200 could be started): the NequIP model step at 10k atoms
# (bench/run_nequip_step.sh: the nequip-benzene-sized model of export_nequip_model.py
# --round-mantissa 8, the host engine's fp64 forces as the reference, engines cuda and
# cuda-fused).
set -u
cd .device && tar xJf main-bin.tar.xz && tar xJf nq10k.tar.xz && cd ..
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
CLEBSCH_REPEAT=5 timeout 220 bash bench/run_nequip_step.sh .device/main .device/nequip-10k $OUT/nequip > $OUT/nequip.log 2>&1
echo "nequip rc=$?"; tail -6 $OUT/nequip.log
grep -E "^\| (layer|upload|edge|download)|^untimed|^###" $OUT/nequip/profile.md | head -60 | cut -c1-150
(cd $OUT && tar cJf nequip.tar.xz nequip nequip.log && rm -rf nequip nequip.log)

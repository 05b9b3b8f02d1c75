#!/usr/bin/env bash
# Run 31 call 1: the float64 m16n8k8 GEMM and the 3xTF32 row-panel GEMM (branch f64-m16-gemm). The
# probe's fragment-layout check; the step at 10k atoms: run 30's final build, the branch (panel
# of 64 columns, the default), its tile kernels (CLEBSCH_TF32X3_PANEL=0), the panel of 32, the
# float64 MMA GEMM (CLEBSCH_F64_MMA_GEMM=1), the final build again; the GEMMs' GPU tests; the
# MP-0-sized model at 2k atoms against mace-torch and the host with both new GEMMs on.
set -u
cd .device && tar xJf final-bin.tar.xz && tar xJf f64-bin.tar.xz && cd ..
export CLEBSCH_MODELS_DIR=$PWD/.device/models
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt; cat $OUT/gpu.txt
.device/mma_peak > $OUT/mma_peak.txt 2>&1; grep -iE "f64|layout|WRONG|assumed" $OUT/mma_peak.txt | head -20
CLEBSCH_REPEAT=5 timeout 280 bash bench/run_step_ab.sh $OUT/ab10k 10000 final=.device/new new=.device/f64 new-tile=.device/f64:CLEBSCH_TF32X3_PANEL=0 new-p32=.device/f64:CLEBSCH_TF32X3_PANEL=32 new-f64mma=.device/f64:CLEBSCH_F64_MMA_GEMM=1 final-again=.device/new > $OUT/ab10k.log 2>&1
echo "ab10k rc=$?"; cat $OUT/ab10k/summary.txt
for v in final new new-p32 new-f64mma; do echo "== $v"; grep -E "gemm|mlp_mma" $OUT/ab10k/$v/profile.md | head -12 | cut -c1-130; done
rm -f $OUT/ab10k/model/*.safetensors $OUT/ab10k/*/kernel_profile*.json
(cd $OUT && tar cJf ab10k.tar.xz ab10k ab10k.log && rm -rf ab10k ab10k.log)
CLEBSCH_TEST_TIMEOUT=60 bash bench/run_gpu_tests.sh .device/f64 $OUT/tests '-*emulated*' 2>&1 | grep -E "^==|PASSED|FAILED|rc="
(cd $OUT && tar cJf tests.tar.xz tests && rm -rf tests)
set +e; source bench/setup_wheels.sh .whl > /dev/null 2>&1; set +e
( source bench/device_env.sh .device/f64 > /dev/null 2>&1; export CLEBSCH_F64_MMA_GEMM=1
  PYTHONUNBUFFERED=1 PYTHONPATH=$MACE_PYTHONPATH:. timeout 90 python3 bench/bench_mace_model.py --binary .device/f64/bench/bench_mace_model --atoms 2000 --engines cuda,host --precisions fp32,fp64 --out $OUT/check2k --json $OUT/check2k/model.json > $OUT/check2k.log 2>&1; echo "check2k rc=$?" )
grep -A5 '| engine | prec' $OUT/check2k.log | head -6; rm -f $OUT/check2k/*.safetensors $OUT/check2k/*.bin
(cd $OUT && tar cJf check2k.tar.xz check2k check2k.log && rm -rf check2k check2k.log)

#!/usr/bin/env bash
# Run 32 call 2: the species-factored first layer with kRecv receivers a block (v2, on
# main) beside call 1's one receiver a block (v1) and the form off, at 10k atoms; kRecv 1, 2, 4
# through CLEBSCH_SPECIES_RECV; v2's GPU tests; the MP-0-sized model at 2k atoms against
# mace-torch float64 with v2.
set -u
cd .device && tar xJf new-bin.tar.xz && tar xJf v2-bin.tar.xz && tar xJf models.tar.xz && cd ..
export CLEBSCH_MODELS_DIR=$PWD/.device/models
[ -e /work/main/potentials/bundled ] || { mkdir -p /work/main/potentials && ln -s $PWD/potentials/bundled /work/main/potentials/bundled; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt; cat $OUT/gpu.txt
CLEBSCH_REPEAT=5 timeout 330 bash bench/run_step_ab.sh $OUT/ab10k 10000 off=.device/v2:CLEBSCH_SPECIES_CONV=0 v1=.device/new v2=.device/v2 v2-r1=.device/v2:CLEBSCH_SPECIES_RECV=1 v2-r2=.device/v2:CLEBSCH_SPECIES_RECV=2 off-again=.device/v2:CLEBSCH_SPECIES_CONV=0 v2-again=.device/v2 > $OUT/ab10k.log 2>&1
echo "ab10k rc=$?"; cat $OUT/ab10k/summary.txt
for v in v1 v2 v2-r1 v2-r2; do echo "== $v"; grep -E "species" $OUT/ab10k/$v/profile.md | cut -c1-140; done
rm -f $OUT/ab10k/model/*.safetensors $OUT/ab10k/*/kernel_profile*.json
(cd $OUT && tar cJf ab10k.tar.xz ab10k ab10k.log && rm -rf ab10k ab10k.log)
CLEBSCH_TEST_TIMEOUT=90 bash bench/run_gpu_tests.sh .device/v2 $OUT/tests 'All/SpeciesConvTest.*/cuda:MaceCudaEngine.TheSpeciesFactoredFirstLayerMatchesTheHostEngine' 2>&1 | grep -E "^==|PASSED|FAILED|rc="
(cd $OUT && tar cJf tests.tar.xz tests && rm -rf tests)
set +e; source bench/setup_wheels.sh .whl > /dev/null 2>&1; set +e
( source bench/device_env.sh .device/v2 > /dev/null 2>&1
  PYTHONUNBUFFERED=1 PYTHONPATH=$MACE_PYTHONPATH:. timeout 80 python3 bench/bench_mace_model.py --binary .device/v2/bench/bench_mace_model --atoms 2000 --engines cuda,host --precisions fp32,fp64 --out $OUT/check2k --json $OUT/check2k/model.json > $OUT/check2k.log 2>&1; echo "check2k rc=$?" )
grep -A5 '| engine | prec' $OUT/check2k.log | head -6; rm -f $OUT/check2k/*.safetensors $OUT/check2k/*.bin
(cd $OUT && tar cJf check2k.tar.xz check2k check2k.log && rm -rf check2k check2k.log)

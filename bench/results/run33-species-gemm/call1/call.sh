#!/usr/bin/env bash
# Run 33 call 1 (run 32's planned call 3): main's species-factored first layer (one receiver a
# block forward, two backward: v3, built at ab9d152) as one build, beside the form off, at 10k
# atoms; v3's GPU tests; the MP-0-sized model at 2k atoms against mace-torch float64.
set -u
cd .device && tar xJf v3-bin.tar.xz && tar xJf models.tar.xz && cd ..
export CLEBSCH_MODELS_DIR=$PWD/.device/models
[ -e /work/main/potentials/bundled ] || { mkdir -p /work/main/potentials && ln -s $PWD/potentials/bundled /work/main/potentials/bundled; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt; cat $OUT/gpu.txt
CLEBSCH_REPEAT=5 timeout 300 bash bench/run_step_ab.sh $OUT/ab10k 10000 off=.device/v3:CLEBSCH_SPECIES_CONV=0 v3=.device/v3 off-again=.device/v3:CLEBSCH_SPECIES_CONV=0 v3-again=.device/v3 > $OUT/ab10k.log 2>&1
echo "ab10k rc=$?"; cat $OUT/ab10k/summary.txt
grep -E "species" $OUT/ab10k/v3/profile.md | cut -c1-140
rm -f $OUT/ab10k/model/*.safetensors $OUT/ab10k/*/kernel_profile*.json
(cd $OUT && tar cJf ab10k.tar.xz ab10k ab10k.log && rm -rf ab10k ab10k.log)
CLEBSCH_TEST_TIMEOUT=90 bash bench/run_gpu_tests.sh .device/v3 $OUT/tests 'All/SpeciesConvTest.*/cuda:MaceCudaEngine.TheSpeciesFactoredFirstLayerMatchesTheHostEngine:MaceCudaEngine.MatchesTheHostEngineInEveryPrecision' 2>&1 | grep -E "^==|PASSED|FAILED|rc="
(cd $OUT && tar cJf tests.tar.xz tests && rm -rf tests)
set +e; source bench/setup_wheels.sh .whl > /dev/null 2>&1; set +e
( source bench/device_env.sh .device/v3 > /dev/null 2>&1
  PYTHONUNBUFFERED=1 PYTHONPATH=$MACE_PYTHONPATH:. timeout 80 python3 bench/bench_mace_model.py --binary .device/v3/bench/bench_mace_model --atoms 2000 --engines cuda,host --precisions fp32,fp64 --out $OUT/check2k --json $OUT/check2k/model.json > $OUT/check2k.log 2>&1; echo "check2k rc=$?" )
grep -A5 '| engine | prec' $OUT/check2k.log | head -6; rm -f $OUT/check2k/*.safetensors $OUT/check2k/*.bin
(cd $OUT && tar cJf check2k.tar.xz check2k check2k.log && rm -rf check2k check2k.log)

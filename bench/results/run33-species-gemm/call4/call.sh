#!/usr/bin/env bash
# Run 33 call 4 (not run in session 33: no device was lent; run it from branch species-gemm):
# the species-factored first layer with its W4 contraction as GEMMs over the (receiver, species)
# slots (v4) beside main's v3 (one build each), at 10k atoms; v4 with the
# backward's edge stage split in two (CLEBSCH_SPECIES_SPLIT=1); v4's GPU tests; the MP-0-sized
# model at 2k atoms against mace-torch float64 with v4. Cut to the tests and v4 beside v3: little
# device time was left (the split variant and the 2k check dropped).
set -u
cd .device && tar xJf v3-bin.tar.xz && tar xJf v4-bin.tar.xz && tar xJf models.tar.xz && cd ..
export CLEBSCH_MODELS_DIR=$PWD/.device/models
[ -e /work/main/potentials/bundled ] || { mkdir -p /work/main/potentials && ln -s $PWD/potentials/bundled /work/main/potentials/bundled; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt; cat $OUT/gpu.txt
CLEBSCH_TEST_TIMEOUT=40 bash bench/run_gpu_tests.sh .device/v4 $OUT/tests 'All/SpeciesConvTest.*/cuda:MaceCudaEngine.TheSpeciesFactoredFirstLayerMatchesTheHostEngine:MaceCudaEngine.MatchesTheHostEngineInEveryPrecision' 2>&1 | grep -E "^==|PASSED|FAILED|rc="
(cd $OUT && tar cJf tests.tar.xz tests && rm -rf tests)
CLEBSCH_PROFILE_TOP=200 CLEBSCH_REPEAT=5 timeout 75 bash bench/run_step_ab.sh $OUT/ab10k 10000 v4=.device/v4 v3=.device/v3 > $OUT/ab10k.log 2>&1
echo "ab10k rc=$?"; cat $OUT/ab10k/summary.txt
for v in v3 v4; do echo "== $v"; grep -E "^\| layer 0 (forward|backward) \| \`(clebsch_species|clebsch_gemm|cublas)" $OUT/ab10k/$v/profile.md | cut -c1-150; done
rm -f $OUT/ab10k/model/*.safetensors $OUT/ab10k/*/kernel_profile*.json
(cd $OUT && tar cJf ab10k.tar.xz ab10k ab10k.log && rm -rf ab10k ab10k.log)

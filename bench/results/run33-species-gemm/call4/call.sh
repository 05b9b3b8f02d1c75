#!/usr/bin/env bash
# Run 33 call 4 (not run in session 33: no device was lent after call 3; for the next GPU
# session, built from branch species-gemm): the species-factored first layer with its W4
# contraction as GEMMs over the (receiver, species) slots (v4) beside main's v3 (one build each)
# at 10k atoms, v4 with the backward's edge stage split in two (CLEBSCH_SPECIES_SPLIT=1); v4's GPU
# tests and the MP-0-sized model at 2k atoms against mace-torch float64 (run_engine_checks.sh).
# Carries: .device/v3-bin.tar.xz, .device/v4-bin.tar.xz, .device/models.tar.xz, .whl/mace.
set -u
cd .device && tar xJf v3-bin.tar.xz && tar xJf v4-bin.tar.xz && tar xJf models.tar.xz && cd ..
export CLEBSCH_MODELS_DIR=$PWD/.device/models
[ -e /work/main/potentials/bundled ] || { mkdir -p /work/main/potentials && ln -s $PWD/potentials/bundled /work/main/potentials/bundled; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt; cat $OUT/gpu.txt
bash bench/run_engine_checks.sh .device/v4 $OUT 'All/SpeciesConvTest.*/cuda:MaceCudaEngine.TheSpeciesFactoredFirstLayerMatchesTheHostEngine:MaceCudaEngine.MatchesTheHostEngineInEveryPrecision'
CLEBSCH_PROFILE_TOP=200 CLEBSCH_REPEAT=5 timeout 300 bash bench/run_step_ab.sh $OUT/ab10k 10000 v3=.device/v3 v4=.device/v4 v4-split=.device/v4:CLEBSCH_SPECIES_SPLIT=1 v3-again=.device/v3 v4-again=.device/v4 > $OUT/ab10k.log 2>&1
echo "ab10k rc=$?"; cat $OUT/ab10k/summary.txt
for v in v3 v4 v4-split; do echo "== $v"; grep -E "^\| layer 0 (forward|backward) \| \`(clebsch_species|clebsch_gemm|cublas)" $OUT/ab10k/$v/profile.md | cut -c1-150; done
rm -f $OUT/ab10k/model/*.safetensors $OUT/ab10k/*/kernel_profile*.json
(cd $OUT && tar cJf ab10k.tar.xz ab10k ab10k.log && rm -rf ab10k ab10k.log)

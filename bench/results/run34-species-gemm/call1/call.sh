#!/usr/bin/env bash
# Run 34 call 1: the species-factored first layer as GEMMs over slots (CLEBSCH_SPECIES_FORM=gemm)
# beside main's per-receiver blocks (block) in one build: the GPU tests of both forms, the
# MACE-MP-0-sized model at 2,000 atoms against mace-torch float64 with the GEMM form, then both
# forms at 10k atoms (each twice, the kernels' times in each profile).
# Carries: .device/v4-bin.tar.xz, .device/models.tar.xz, .whl/mace.
set -u
cd .device && tar xJf v4-bin.tar.xz && tar xJf models.tar.xz && cd ..
export CLEBSCH_MODELS_DIR=$PWD/.device/models
[ -e /work/main/potentials/bundled ] || { mkdir -p /work/main/potentials && ln -s $PWD/potentials/bundled /work/main/potentials/bundled; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt; cat $OUT/gpu.txt
CLEBSCH_SPECIES_FORM=gemm bash bench/run_engine_checks.sh .device/v4 $OUT 'All/SpeciesConvTest.*/cuda:MaceCudaEngine.TheSpeciesFactoredFirstLayerMatchesTheHostEngine:MaceCudaEngine.MatchesTheHostEngineInEveryPrecision:MaceCudaEngine.TheDeviceLedgerNamesEveryBufferWithWhatItGrowsWith'
CLEBSCH_PROFILE_TOP=200 CLEBSCH_REPEAT=5 timeout 330 bash bench/run_step_ab.sh $OUT/ab10k 10000 block=.device/v4:CLEBSCH_SPECIES_FORM=block gemm=.device/v4:CLEBSCH_SPECIES_FORM=gemm block-again=.device/v4:CLEBSCH_SPECIES_FORM=block gemm-again=.device/v4:CLEBSCH_SPECIES_FORM=gemm > $OUT/ab10k.log 2>&1
echo "ab10k rc=$?"; cat $OUT/ab10k/summary.txt
for v in block gemm; do echo "== $v"; grep -E "^\| layer 0 (forward|backward) \| \`(clebsch_species|clebsch_gemm|cublas)" $OUT/ab10k/$v/profile.md | cut -c1-150; done
rm -f $OUT/ab10k/model/*.safetensors $OUT/ab10k/*/kernel_profile*.json
(cd $OUT && tar cJf ab10k.tar.xz ab10k ab10k.log && rm -rf ab10k ab10k.log)

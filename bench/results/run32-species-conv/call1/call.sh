#!/usr/bin/env bash
# Run 32 call 1: MACE's first layer in the species-factored form (kernels/engine/species_conv).
# The GPU tests (the form's kernels against the host convolution, the MACE CUDA engine with and
# without it against the host engine on every fixture model, the NequIP CUDA engine without its
# dE/dW clear), the step at 10k atoms with the form off and on (one build, CLEBSCH_SPECIES_CONV),
# the MP-0-sized model at 2k atoms against mace-torch float64.
set -u
cd .device && tar xJf new-bin.tar.xz && tar xJf models.tar.xz && cd ..
export CLEBSCH_MODELS_DIR=$PWD/.device/models
# The test binaries name the bundled models by the path of the checkout they were built from.
[ -e /work/main/potentials/bundled ] || { mkdir -p /work/main/potentials && ln -s $PWD/potentials/bundled /work/main/potentials/bundled; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $OUT/gpu.txt; cat $OUT/gpu.txt
CLEBSCH_REPEAT=5 timeout 200 bash bench/run_step_ab.sh $OUT/ab10k 10000 off=.device/new:CLEBSCH_SPECIES_CONV=0 on=.device/new off-again=.device/new:CLEBSCH_SPECIES_CONV=0 on-again=.device/new > $OUT/ab10k.log 2>&1
echo "ab10k rc=$?"; cat $OUT/ab10k/summary.txt
for v in off on; do echo "== $v"; grep -E "^\| layer 0|species|clebsch_conv_.*layer 0|layer 0 .*gemm" $OUT/ab10k/$v/profile.md | head -14 | cut -c1-140; done
rm -f $OUT/ab10k/model/*.safetensors $OUT/ab10k/*/kernel_profile*.json
(cd $OUT && tar cJf ab10k.tar.xz ab10k ab10k.log && rm -rf ab10k ab10k.log)
CLEBSCH_TEST_TIMEOUT=100 bash bench/run_gpu_tests.sh .device/new $OUT/tests 'All/SpeciesConvTest.*/cuda:MaceCudaEngine.TheSpeciesFactoredFirstLayerMatchesTheHostEngine:All/NequipCuda.*/cuda' 2>&1 | grep -E "^==|PASSED|FAILED|rc="
(cd $OUT && tar cJf tests.tar.xz tests && rm -rf tests)
set +e; source bench/setup_wheels.sh .whl > /dev/null 2>&1; set +e
( source bench/device_env.sh .device/new > /dev/null 2>&1
  PYTHONUNBUFFERED=1 PYTHONPATH=$MACE_PYTHONPATH:. timeout 80 python3 bench/bench_mace_model.py --binary .device/new/bench/bench_mace_model --atoms 2000 --engines cuda,host --precisions fp32,fp64 --out $OUT/check2k --json $OUT/check2k/model.json > $OUT/check2k.log 2>&1; echo "check2k rc=$?" )
grep -A5 '| engine | prec' $OUT/check2k.log | head -6; rm -f $OUT/check2k/*.safetensors $OUT/check2k/*.bin
(cd $OUT && tar cJf check2k.tar.xz check2k check2k.log && rm -rf check2k check2k.log)
# The NequIP step at 10k atoms without the dE/dW clear (the nequip-benzene-sized model of run 31,
# export_nequip_model.py --round-mantissa 8, exported again; its modules compile here).
(cd .device && tar xJf nq10k.tar.xz)
CLEBSCH_REPEAT=5 timeout 120 bash bench/run_nequip_step.sh .device/new .device/nequip-10k $OUT/nequip cuda > $OUT/nequip.log 2>&1
echo "nequip rc=$?"; tail -4 $OUT/nequip.log
grep -E "memset|^untimed" $OUT/nequip/profile.md | head -6 | cut -c1-150
(cd $OUT && tar cJf nequip.tar.xz nequip nequip.log && rm -rf nequip nequip.log)

#!/usr/bin/env bash
# Lease 3 (no carry): where the wait for the previous block's P V goes in the soft-capped and user-variant
# Hopper kernels (KG_PIN_PV_WAIT 1: after the first row's max, today's; 2: after the first row's sum;
# 3: after both rows' sums), interleaved A/B with twins: the built-in soft-cap at gpt-oss (d 64),
# llama3-8b (d 128) and gemma2-9b (d 256) heads, and the tanh.approx soft-cap snippet at gpt-oss heads;
# then the soft-cap and variant GPU tests with the mode that won (tools in the same folder: c3_pick.py).
set -u
export PYTHONPATH=$PWD
mkdir -p $OUT
run() {  # NAME SHAPE D BM BN EXTRA...
  local N=$1 S=$2 D=$3 BM=$4 BN=$5; shift 5
  timeout 150 python3 benchmarks/experiments/tile_ab.py --shapes $N=$S --twice --passes 2 "$@" \
    --configs p1=bf16:$D:$BM:$BN:2:p,p2=bf16:$D:$BM:$BN:2:p:KG_PIN_PV_WAIT=2,p3=bf16:$D:$BM:$BN:2:p:KG_PIN_PV_WAIT=3 \
    --json $OUT/pin_$N.json > $OUT/pin_$N.log 2>&1
  echo "pin $N rc $? at $SECONDS" >> $OUT/rc.txt
}
run gsc 1:16384:64:8:64:1 64 128 128 --softcap 50
run gsn 1:16384:64:8:64:1 64 128 128 --score-mod '50.f * tanhf(score / 50.f)'
run lsc 1:16384:32:8:128:1 128 128 128 --softcap 50
run msc 1:16384:16:8:256:1 256 128 80 --softcap 50
M=$(python3 docs/dev/benchmarks/s48/c3_pick.py $OUT/pin_*.json 2> $OUT/pick.log)
echo "picked $M" >> $OUT/rc.txt
KERNELGEN_DEFINES=KG_PIN_PV_WAIT=$M timeout ${T:-200} python3 -m pytest -q -p no:cacheprovider \
  tests/gpu/test_hopper_gpu.py tests/gpu/test_hopper_pack_gqa_gpu.py -k softcap > $OUT/tests_softcap.log 2>&1
echo "tests softcap rc $? at $SECONDS" >> $OUT/rc.txt
KERNELGEN_DEFINES=KG_PIN_PV_WAIT=$M timeout ${T2:-150} python3 -m pytest -q -p no:cacheprovider \
  tests/gpu/test_variant_gpu.py > $OUT/tests_variant.log 2>&1
echo "tests variant rc $? at $SECONDS" >> $OUT/rc.txt

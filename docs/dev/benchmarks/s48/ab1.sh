#!/usr/bin/env bash
# Call 1 (no carry): KG_CAP_PREMAX (the built-in soft-cap's row max from the raw scores) against the
# default, gpt-oss heads (d 64) and llama3-8b heads (d 128), causal 1 x 16k, soft-cap 50, interleaved
# CUDA-graph replays with twins (tile_ab --twice), two passes each.
set -u
export PYTHONPATH=$PWD
mkdir -p $OUT
for S in g=1:16384:64:8:64:1 l=1:16384:32:8:128:1; do
  N=${S%%=*}; D=$(echo $S | cut -d: -f5)
  timeout 200 python3 benchmarks/experiments/tile_ab.py --shapes $S --softcap 50 --twice --passes 2 \
    --configs p=bf16:$D:128:128:2:pt,pm=bf16:$D:128:128:2:pt:KG_CAP_PREMAX=1 --json $OUT/ab_$N.json > $OUT/ab_$N.log 2>&1
  echo "ab $N rc $? at $SECONDS" >> $OUT/rc.txt
done
# then the soft-cap GPU tests with KG_CAP_PREMAX=1 compiled into every kernel
KERNELGEN_DEFINES=KG_CAP_PREMAX=1 timeout ${T:-170} python3 -m pytest -q -p no:cacheprovider -x \
  tests/gpu/test_hopper_gpu.py tests/gpu/test_hopper_pack_gqa_gpu.py -k softcap > $OUT/tests_premax.log 2>&1
echo "tests rc $? at $SECONDS" >> $OUT/rc.txt

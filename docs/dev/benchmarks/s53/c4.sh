#!/usr/bin/env bash
# Fifty-third session, call 4 (carry [".devcache"] built for this tree; about 200 s): option "m" at head dim
# 256 on the soft-capped and tanh-snippet kernels (heuristics.SM90_MASK_SPLIT_MUFU_HEAD_DIMS): the
# mask-split GPU tests of soft-caps (now also at d 256) and the d 256 tanh snippet (packed, paged, split),
# then llama3-8b's d 128 snippet with "m" (tile_ab).  K= narrows the tests (-k).  Results in $OUT/w (one w.tgz).
set -u
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
W=$OUT/w; mkdir -p $W
nvidia-smi --query-gpu=name --format=csv,noheader > $W/gpu.txt
timeout 60 python3 tools/device_cache.py unpack --dir .devcache --cache-dir $KERNELGEN_CACHE_DIR > $W/devcache.log 2>&1
timeout ${T:-200} python3 -m pytest -v -p no:cacheprovider tests/gpu/test_mask_split_gpu.py -k "${K:-softcap or d256}" \
  > $W/tests.log 2>&1
echo "tests rc $? at $SECONDS" >> $W/rc.txt
# llama3-8b's d 128 tanh.approx snippet (two warpgroups, no "m" by default; 0.98x FA4 on the H100):
# "m" with twins, three passes (the built-in soft-cap there took it: 0.905-0.978x)
timeout 100 python3 benchmarks/experiments/tile_ab.py --shapes lsn=1:16384:32:8:128:1 --twice --passes 3 \
  --score-mod '50.f * tanhf(score / 50.f)' --configs p=bf16:128:128:128:2:p,mp=bf16:128:128:128:2:mp \
  --json $W/ab_lsn.json > $W/ab_lsn.log 2>&1
echo "ab lsn rc $? at $SECONDS" >> $W/rc.txt
tail -3 $W/tests.log; grep -E "FAILED|Error" $W/tests.log | head -20; cat $W/rc.txt; grep -A1 "min-max" $W/ab_lsn.log
cd $OUT && tar -czf w.tgz w

#!/usr/bin/env bash
# Fifty-fourth session, call 5 (carry [".devcache"], built for this tree; about 420 s): pack-GQA on the Hopper
# kernel with user variants (pack_gqa=True; heuristics.SM90_VARIANT_PACK_MAX_MEAN_Q 0 keeps the automatic choice
# off) and option "m" for tanh snippets at head dim 128: their GPU tests, the packed plain kernels' tests (the
# template changed around them), llama3-8b's d 128 snippet A/B in a second process, then packed / unpacked time
# of the tanh.approx soft-cap snippet (pack_gqa_ab.py --score-mod).  Results in $OUT/w (one w.tgz).
set -u
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
W=$OUT/w; mkdir -p $W
( sleep 420; cd $OUT && tar -czf w.tgz w ) & WD=$!
nvidia-smi --query-gpu=name --format=csv,noheader > $W/gpu.txt
timeout 60 python3 tools/device_cache.py unpack --dir .devcache --cache-dir $KERNELGEN_CACHE_DIR > $W/devcache.log 2>&1
timeout 300 python3 -m pytest -v -p no:cacheprovider "tests/gpu/test_mask_split_gpu.py::test_two_warpgroup_tanh_snippet" \
  tests/gpu/test_variant_gpu.py tests/gpu/test_hopper_pack_gqa_gpu.py > $W/tests.log 2>&1
echo "tests rc $? at $SECONDS" >> $W/rc.txt
timeout 60 python3 benchmarks/experiments/tile_ab.py --shapes lsn=1:16384:32:8:128:1 --twice --passes 3 \
  --score-mod '50.f * tanhf(score / 50.f)' --configs p=bf16:128:128:128:2:p,mp=bf16:128:128:128:2:mp \
  --json $W/ab_lsn.json > $W/ab_lsn.log 2>&1
echo "ab lsn rc $? at $SECONDS" >> $W/rc.txt
T=$(( 410 - SECONDS )); [ $T -gt 30 ] && timeout $T python3 benchmarks/experiments/pack_gqa_ab.py --passes 2 \
  --score-mod '50.f * tanhf(score / 50.f)' --shapes trace_gpt-oss,long_gpt-oss,trace_llama3-70b-tp8,chunk1024_gpt-oss \
  --json $W/pack_tanh.json > $W/pack_tanh.log 2>&1
echo "pack tanh rc $? at $SECONDS" >> $W/rc.txt
kill $WD
cat $W/gpu.txt; tail -3 $W/tests.log; grep -E "FAILED|Error" $W/tests.log | head -20; cat $W/rc.txt
grep -A1 "min-max" $W/ab_lsn.log; grep -o '"shape": "[^"]*", "pass": [0-9]\|"packed_over_unpacked": [0-9.]*\|"max_abs_diff": [0-9.e-]*' $W/pack_tanh.log | paste - - - 
cd $OUT && tar -czf w.tgz w

#!/usr/bin/env bash
# Fifty-fifth session, last call (carry [".devcache", ".devcache_bench"]; about 560 s): the GPU tests of the
# two twin levels (selection.spills: a packed call whose three-warpgroup variant kernel spills keeps packing on
# two warpgroups): test_variant_gpu.py (test_hopper_pack_gqa asserts "_pack_" again at d 64 split),
# test_mask_split_gpu.py, test_ex2_fma_gpu.py, test_hopper_pack_gqa_gpu.py.  On an H200 first the entries that
# need no peer (s48/h1.sh's FP8 / bf16 decode and gpt-oss's cost entries).  Results in $OUT/w (w.tgz).
set -u
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
W=$OUT/w; mkdir -p $W
( sleep 575; cd $OUT && tar -czf w.tgz w ) & WD=$!
nvidia-smi --query-gpu=name --format=csv,noheader > $W/gpu.txt
timeout 60 python3 tools/device_cache.py unpack --dir .devcache --cache-dir $KERNELGEN_CACHE_DIR > $W/devcache.log 2>&1
timeout 30 python3 tools/device_cache.py unpack --dir .devcache_bench --cache-dir $KERNELGEN_CACHE_DIR >> $W/devcache.log 2>&1
if grep -q H200 $W/gpu.txt; then
  timeout 120 python3 -m kernelgen bench --flex off --budget 0 --json $W/decode.json --suite decode --dtype bf16,e4m3 \
    --model llama3-8b --only 'fp8_decode_b128_paged16,decode_trace_b128_paged16' > $W/decode.log 2>&1
  echo "decode rc $? at $SECONDS" >> $W/rc.txt
  timeout 130 python3 -m kernelgen bench --flex off --budget 0 --json $W/cost.json --suite prefill \
    --model gpt-oss --only 'alibi_prefill_causal_*,variant_alibi_prefill_*,sinks_prefill_causal_*' > $W/cost.log 2>&1
  echo "cost rc $? at $SECONDS" >> $W/rc.txt
fi
timeout $(( 560 - SECONDS )) python3 -m pytest -v -p no:cacheprovider tests/gpu/test_variant_gpu.py \
  tests/gpu/test_mask_split_gpu.py tests/gpu/test_ex2_fma_gpu.py tests/gpu/test_hopper_pack_gqa_gpu.py > $W/tests.log 2>&1
echo "tests rc $? at $SECONDS" >> $W/rc.txt
kill $WD
cat $W/gpu.txt; tail -3 $W/tests.log; grep -E "FAILED|Error" $W/tests.log | head -20; cat $W/rc.txt
grep -h "^| \(fp8_decode\|decode_trace\|alibi_\|variant_alibi\|sinks_\)" $W/*.log 2>/dev/null | cut -c1-220
cd $OUT && tar -czf w.tgz w

#!/usr/bin/env bash
# session 37 call 12: the evict_first hint merged for the one-warp decode tiles (KV_EVICT_FIRST): the paged decode, fused and
# FP8 GPU tests; the mixed suite once; the layer-regime A/B of the working tree against HEAD's templates
set -u
W=$OUT/w; mkdir -p $W
( sleep 400; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 210 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_paged_decode_gpu.py tests/gpu/test_fused_gpu.py tests/gpu/test_fp8_gpu.py \
  --junitxml=$W/junit.xml > $W/tests.log 2>&1
echo "tests rc $? at $SECONDS" >> $W/rc.txt
T=$(( 330 - SECONDS )); [ $T -gt 30 ] && { LAYER=8b timeout $T python3 .s37/layerflush_ab.py --configs base=.s37/base/templates,new=. \
  --shapes decode_azure_b128_paged16,decode_trace_b32_paged16,decode_long_b8_128k --models llama3-8b --caches bf16,e4m3 --passes 1 --json $W/ab_layer.json > $W/ab_layer.log 2>&1; echo "ab rc $? at $SECONDS" >> $W/rc.txt; }
T=$(( 390 - SECONDS )); [ $T -gt 30 ] && { timeout $T python3 -m kernelgen bench --suite mixed --flex off --budget 0 --json $W/bench_mixed.json > $W/bench_mixed.log 2>&1; echo "mixed rc $? at $SECONDS" >> $W/rc.txt; }
kill $WD; cd $OUT && tar -czf w.tgz w

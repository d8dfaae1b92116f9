#!/usr/bin/env bash
# Sixty-third session, the first call of a lease (carry [".devcache", ".devcache_bench"], built for this code;
# any Hopper GPU): the GPU tests of the mask_mod kernels whose source the sixty-second session's return type
# changed (test_variant_gpu.py -k mask / document_mask / prefix_lm), then the rest of test_variant_gpu.py,
# within T s (default 300); then, on an H200 only, issue 24's FP8 decode entries beside the bf16 call
# (no peers: the copy roof and the bf16 call are the run's own).  Next on an H200: s62/try.sh, s60/b.sh;
# on an H100: s62/try.sh, s62/ab.sh.
set -u
T=${T:-300}
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $W/gpu.txt
timeout 60 python3 tools/device_cache.py unpack --dir .devcache > $W/devcache.log 2>&1; echo "unpack rc $? at $SECONDS" >> $W/rc.txt
timeout 30 python3 tools/device_cache.py unpack --dir .devcache_bench >> $W/devcache.log 2>&1
K="document_mask or prefix_lm or mask"
timeout $((T - SECONDS)) python3 -m pytest -m gpu -v -rf -p no:cacheprovider tests/gpu/test_variant_gpu.py -k "$K" \
  > $W/pytest_mask.log 2>&1
echo "mask tests rc $? at $SECONDS" >> $W/rc.txt
[ $((T - SECONDS)) -gt 20 ] && { timeout $((T - SECONDS)) python3 -m pytest -m gpu -v -rf -p no:cacheprovider \
  tests/gpu/test_variant_gpu.py -k "not ($K)" > $W/pytest_rest.log 2>&1; echo "other variant tests rc $? at $SECONDS" >> $W/rc.txt; }
if grep -q H200 $W/gpu.txt && [ $((T + 100 - SECONDS)) -gt 60 ]; then
  timeout $((T + 100 - SECONDS)) python3 -m kernelgen bench --budget 0 --json $W/decode.json --suite decode --dtype bf16,e4m3 \
    --model llama3-8b --only 'fp8_decode_b128_paged16,decode_trace_b128_paged16' > $W/decode.log 2>&1
  echo "decode rc $? at $SECONDS" >> $W/rc.txt; grep -h "^| [a-z]" $W/decode.log | cut -c1-200
fi
cat $W/rc.txt; tail -2 $W/pytest_mask.log; tail -2 $W/pytest_rest.log 2>/dev/null
grep -hE "^FAILED|Error" $W/pytest_*.log | head -20
cd $OUT && tar -czf w.tgz w

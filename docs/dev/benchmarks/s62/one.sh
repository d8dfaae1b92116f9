#!/usr/bin/env bash
# Sixty-second session, one short lease (carry [".devcache", ".devcache_bench"], built for this code):
# the GPU tests of the mask_mod kernels whose source the return type changed (test_variant_gpu.py -k
# mask / document_mask / prefix_lm; their SASS is unchanged on the CPU) within T s (default 200); then, on
# an H200 only, issue 24's FP8 decode entries (no peers: the copy roof and the bf16 call are the run's own).
set -u
T=${T:-200}
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $W/gpu.txt
timeout 60 python3 tools/device_cache.py unpack --dir .devcache > $W/devcache.log 2>&1; echo "unpack rc $? at $SECONDS" >> $W/rc.txt
timeout 30 python3 tools/device_cache.py unpack --dir .devcache_bench >> $W/devcache.log 2>&1
timeout $((T - SECONDS)) python3 -m pytest -m gpu -v -rf -p no:cacheprovider tests/gpu/test_variant_gpu.py \
  -k "document_mask or prefix_lm or mask" > $W/pytest.log 2>&1
echo "tests rc $? at $SECONDS" >> $W/rc.txt
if grep -q H200 $W/gpu.txt && [ $((T + 100 - SECONDS)) -gt 60 ]; then
  timeout $((T + 100 - SECONDS)) python3 -m kernelgen bench --budget 0 --json $W/decode.json --suite decode --dtype bf16,e4m3 \
    --model llama3-8b --only 'fp8_decode_b128_paged16,decode_trace_b128_paged16' > $W/decode.log 2>&1
  echo "decode rc $? at $SECONDS" >> $W/rc.txt; grep -h "^| [a-z]" $W/decode.log | cut -c1-200
fi
cat $W/rc.txt; tail -3 $W/pytest.log; grep -E "^FAILED|Error" $W/pytest.log | head -20
cd $OUT && tar -czf w.tgz w

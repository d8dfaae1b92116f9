#!/usr/bin/env bash
# Sixty-first session, a short H100 lease (carry [".devcache"], built for a92ed91's kernels, this code's):
# the GPU tests of the decode paths the sixtieth session's last template changes touched (the prefetch
# only on whole-line rows, no evict_first hint on FP8 tiles without a mask or splits, the new unmasked
# unsplit FP8 decode test; the fused, split, sinks / ALiBi and plan paths beside) within T s (default 330), then s60/desc.sh if 80 s are left.
set -u
T=${T:-330}
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $W/gpu.txt
timeout 90 python3 tools/device_cache.py unpack --dir .devcache > $W/devcache.log 2>&1; echo "unpack rc $? at $SECONDS" >> $W/rc.txt
timeout $((T - SECONDS)) python3 -m pytest -m gpu -v -rf -p no:cacheprovider tests/gpu/test_fp8_gpu.py \
  tests/gpu/test_paged_decode_gpu.py tests/gpu/test_fused_gpu.py tests/gpu/test_mask_split_gpu.py tests/gpu/test_sinks_gpu.py \
  tests/gpu/test_alibi_gpu.py tests/gpu/test_plan_gpu.py tests/gpu/test_attention_gpu.py > $W/pytest.log 2>&1
echo "tests rc $? at $SECONDS" >> $W/rc.txt
[ $((T + 90 - SECONDS)) -gt 80 ] && { timeout $((T + 90 - SECONDS)) bash docs/dev/benchmarks/s60/desc.sh > $W/desc.log 2>&1; echo "desc rc $? at $SECONDS" >> $W/rc.txt; tail -12 $W/desc.log; }
cat $W/rc.txt; tail -3 $W/pytest.log; grep -E "^FAILED|Error" $W/pytest.log | head -20
cd $OUT && tar -czf w.tgz w

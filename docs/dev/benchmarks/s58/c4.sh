#!/usr/bin/env bash
# Fifty-eighth session (carry [".devcache"]): the GPU tests of the split cap's final code
# (tests/gpu/test_ops_compat_gpu.py, test_plan_gpu.py, test_fused_gpu.py), T s.  Results in $OUT/w.
set -u
T=${T:-240}
mkdir -p $OUT/w
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $OUT/w/gpu.txt
timeout 60 python3 tools/device_cache.py unpack --dir .devcache --cache-dir $PWD/cache > $OUT/w/devcache.log 2>&1
timeout $(( T - 5 - SECONDS )) python3 -m pytest tests/gpu/test_ops_compat_gpu.py tests/gpu/test_plan_gpu.py \
  tests/gpu/test_fused_gpu.py -m gpu -q -rf -p no:cacheprovider --junitxml=$OUT/w/junit.xml > $OUT/w/pytest.log 2>&1
echo "pytest rc $? at $SECONDS" >> $OUT/w/rc.txt
cat $OUT/w/gpu.txt $OUT/w/rc.txt; tail -3 $OUT/w/pytest.log; grep -E "^FAILED" $OUT/w/pytest.log | head
cd $OUT && tar -czf w.tgz w

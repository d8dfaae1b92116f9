#!/usr/bin/env bash
# Sixty-fifth session, the first call of a lease, carrying nothing (this session's checkout started with no
# peers and no device caches): compile test_variant_gpu.py's kernels on the device's 16 cores, then run the
# GPU tests of the mask_mod kernels (sixty-second session's return type, sixty-fourth's document-mask guard),
# then the rest of test_variant_gpu.py, within T s (default 560).  Any Hopper GPU.
set -u
T=${T:-560}
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $W/gpu.txt
timeout 240 python3 tools/warm_gpu_tests.py --jobs 16 --cache-dir $PWD/cache --only variant,variant_pack > $W/warm.log 2>&1
echo "warm rc $? at $SECONDS" >> $W/rc.txt
K="document_mask or prefix_lm or mask"
timeout $((T - SECONDS)) python3 -m pytest -m gpu -v -rf -p no:cacheprovider tests/gpu/test_variant_gpu.py -k "$K" \
  > $W/pytest_mask.log 2>&1
echo "mask tests rc $? at $SECONDS" >> $W/rc.txt
[ $((T - SECONDS)) -gt 20 ] && { timeout $((T - SECONDS)) python3 -m pytest -m gpu -v -rf -p no:cacheprovider \
  tests/gpu/test_variant_gpu.py -k "not ($K)" > $W/pytest_rest.log 2>&1; echo "other variant tests rc $? at $SECONDS" >> $W/rc.txt; }
cat $W/rc.txt; tail -3 $W/warm.log; tail -2 $W/pytest_mask.log; tail -2 $W/pytest_rest.log 2>/dev/null
grep -hE "^FAILED|Error" $W/pytest_*.log | head -20
cd $OUT && tar -czf w.tgz w

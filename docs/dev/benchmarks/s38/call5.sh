#!/usr/bin/env bash
# session 38 call 5: the Hopper row gather (option "g") without per-copy waits (cp.async.mbarrier.arrive.noinc,
# consumers fence after the full wait): chunked prefill A/B on pages 24 / 16 / 8 / 32 (TMA boxes, the new gather,
# 5164905's gather), then the paged Hopper and fused GPU tests.  Kernels pre-compiled on the CPU (NVRTC 13.0), carried in cache/.
set -u
W=$OUT/w; mkdir -p $W
( sleep 262; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
timeout 95 python3 .s38/paged_ab.py --pages 24,16,8,32 --passes 1 \
  --configs tma=128:128:2:p,gnew=128:128:2:gp,gold=128:128:2:gp:.s38/base/templates > $W/paged_g2.log 2>&1
echo "paged_ab rc $? at $SECONDS" >> $W/rc.txt
T=$(( 255 - SECONDS )); [ $T -gt 30 ] && { timeout $T python3 -m pytest -q -x -p no:cacheprovider -m gpu tests/gpu/test_hopper_gpu.py -k "paged or fused_gpu" \
  tests/gpu/test_fused_gpu.py --junitxml=$W/junit.xml > $W/tests.log 2>&1; echo "tests rc $? at $SECONDS" >> $W/rc.txt; tail -3 $W/tests.log >> $W/rc.txt; }
kill $WD; cd $OUT && tar -czf w.tgz w

#!/usr/bin/env bash
# (next session) The lean row gather of the Hopper paged path, docs/dev/experiments/gather-lean-producer.patch:
# producers arrive through cp.async.mbarrier.arrive.noinc instead of waiting for each copy (consumers fence
# after the full wait), and each copy step takes one 64-bit shuffle of a row address computed once a block
# (SASS at d 128: about 10 instructions a step against about 37; 440 against 1,274 a producer warp and block).
# Before this call, on the CPU (NVRTC 13.0 here = the device's, so the cache carries over):
#   mkdir -p .s39/base && git archive HEAD templates | tar -x -C .s39/base
#   git apply docs/dev/experiments/gather-lean-producer.patch && python tests/dispatch_golden.py   (source hashes only)
#   KERNELGEN_CACHE_DIR=$PWD/cache python <warm_gpu_tests' paged_split_mixed group> (about 3 min, ~35 MB: carry ["cache"])
# Then run with carry ["cache"]: the A/B (old gather, new gather, TMA boxes) and the paged / fused GPU tests.
set -u
W=$OUT/w; mkdir -p $W
( sleep 280; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
timeout 100 python3 benchmarks/experiments/paged_prefill_ab.py --pages 24,16,8,32,1 --passes 2 \
  --configs tma=128:128:2:p,gnew=128:128:2:gp,gold=128:128:2:gp:.s39/base/templates > $W/paged_g.log 2>&1
echo "paged_ab rc $? at $SECONDS" >> $W/rc.txt
T=$(( 270 - SECONDS )); [ $T -gt 30 ] && { timeout $T python3 -m pytest -q -x -p no:cacheprovider -m gpu tests/gpu/test_hopper_gpu.py \
  -k "paged or fused_gpu" tests/gpu/test_fused_gpu.py --junitxml=$W/junit.xml > $W/tests.log 2>&1; echo "tests rc $? at $SECONDS" >> $W/rc.txt; tail -3 $W/tests.log >> $W/rc.txt; }
kill $WD; cd $OUT && tar -czf w.tgz w

#!/usr/bin/env bash
# (next session) Two builds for the paged prefill at small pages (perf log, "Thirty-eighth session"), both
# applied to the working tree (they touch different parts of mainloop_sm90.cuh and apply in either order):
#  - docs/dev/experiments/gather-lean-producer.patch: the row gather ("g") with producers that arrive through
#    cp.async.mbarrier.arrive.noinc instead of waiting, one 64-bit shuffle of a row address a copy step and the
#    swizzle offsets computed once a lane (SASS at d 128: ~440 instructions a producer warp and block, from 1,274);
#  - docs/dev/experiments/paged-tma-warps.patch: the TMA boxes of a paged block issued by the four producer
#    warps (box b by warp b % 4) instead of one warp's per-lane issue loop (16-bit K/V, standalone kernels).
# Before this call, on the CPU (NVRTC 13.0 here = the device's, so the cache carries over):
#   mkdir -p .s39/base && git archive HEAD templates | tar -x -C .s39/base
#   git apply docs/dev/experiments/gather-lean-producer.patch docs/dev/experiments/paged-tma-warps.patch
#   python tests/dispatch_golden.py   (source hashes only)
#   KERNELGEN_CACHE_DIR=$PWD/cache: compile warm_gpu_tests.py's paged_split_mixed group (one job: ~3 min,
#   ~35 MB; the process pool of two jobs died here), then carry ["cache"]: no compiles on the device
# Configurations: tma / gold = HEAD's TMA boxes / row gather, tmaw / gnew = the patched ones.
set -u
W=$OUT/w; mkdir -p $W
( sleep 330; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
timeout 160 python3 benchmarks/experiments/paged_prefill_ab.py --pages 16,8,32,64,packed --passes 2 \
  --configs tma=128:128:2:p:.s39/base/templates,tmaw=128:128:2:p,gold=128:128:2:gp:.s39/base/templates,gnew=128:128:2:gp \
  > $W/paged_ab.log 2>&1
echo "paged_ab rc $? at $SECONDS" >> $W/rc.txt
T=$(( 320 - SECONDS )); [ $T -gt 30 ] && { timeout $T python3 -m pytest -q -x -p no:cacheprovider -m gpu tests/gpu/test_hopper_gpu.py \
  -k "paged or fused_gpu" tests/gpu/test_fused_gpu.py --junitxml=$W/junit.xml > $W/tests.log 2>&1; echo "tests rc $? at $SECONDS" >> $W/rc.txt; tail -3 $W/tests.log >> $W/rc.txt; }
kill $WD; cd $OUT && tar -czf w.tgz w

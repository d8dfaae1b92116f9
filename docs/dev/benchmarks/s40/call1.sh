#!/usr/bin/env bash
# (next session) Four-warp paged TMA boxes in the Hopper fused mixed-batch kernel too (not run: this session's device
# time ran out).  Before this call, on the CPU (NVRTC 13.0 here = the device's, so the cache carries over):
#   git apply docs/dev/experiments/fused-tma-warps.patch      (TMA_WARPS without !QUEUE_ONLY; the fused kernel's
#       producer warps 0-3 run producer_loop with their warp index; it drops the fused kernel's
#       static_assert(kpre::TMA_WARPS == 1) and updates test_hopper_cpu.py's two source checks; its CPU tests
#       passed: test_hopper_cpu.py, test_fused_hopper_cpu.py, test_l2_hint_cpu.py, 0 spills in the paged_split_mixed
#       group's 170 kernels)
#   The racecheck below also runs three sanitizer cases added after this session's last device call (split-KV and
#   a window on pages of 64 and 16, the gather at head dim 192): a first run for them.
#   python tests/dispatch_golden.py   (source hashes only)
#   KERNELGEN_CACHE_DIR=$PWD/cache: compile warm_gpu_tests.py's paged_split_mixed group (one job, ~2 min, 34 MB),
#   then carry ["cache"].  KG_TMA_WARPS_MIN_NB=99 below keeps warp 0 the only issuer (the fused kernel as merged,
#   apart from warps 1-3 following the tile slots).
set -u
W=$OUT/w; mkdir -p $W/san; git log -1 --format=%h > $W/head.txt; git diff --stat >> $W/head.txt
( sleep 200; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
timeout 60 python3 -m pytest -q -x -p no:cacheprovider -m gpu tests/gpu/test_hopper_gpu.py -k "paged or fused_gpu" tests/gpu/test_fused_gpu.py \
  --junitxml=$W/junit.xml > $W/tests.log 2>&1; echo "tests rc $? at $SECONDS" >> $W/rc.txt; tail -2 $W/tests.log >> $W/rc.txt
timeout 100 python3 benchmarks/experiments/mixed_sweep.py --cases bench,long,short --short-ctas 36,44,52 \
  --defines ';KG_TMA_WARPS_MIN_NB=99' --rounds 4 --json $W/mixed_sweep.json > $W/mixed_sweep.log 2>&1
echo "sweep rc $? at $SECONDS" >> $W/rc.txt
T=$(( 195 - SECONDS )); [ $T -gt 40 ] && { OUT=$W/san SANITIZE_TOOLS=racecheck timeout $T bash tools/sanitize.sh > $W/sanitize.log 2>&1; echo "sanitize rc $? at $SECONDS" >> $W/rc.txt; grep -E "errors:" $W/sanitize.log >> $W/rc.txt; }
kill $WD; cd $OUT && tar -czf w.tgz w

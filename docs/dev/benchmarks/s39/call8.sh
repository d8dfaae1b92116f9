#!/usr/bin/env bash
# session 39 call 8: zero_v_tail writes nothing under GATHER (the copies zero-fill): compute-sanitizer memcheck +
# racecheck on the subset (call 6's racecheck flagged zero_v_tail's stores against the gather's cp.async writes),
# then the paged / fused Hopper GPU tests on this tree
set -u
W=$OUT/w; mkdir -p $W/san
( sleep 380; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
OUT=$W/san timeout 200 bash tools/sanitize.sh > $W/sanitize.log 2>&1
echo "sanitize rc $? at $SECONDS" >> $W/rc.txt; grep -E "errors:|rc " $W/sanitize.log >> $W/rc.txt
T=$(( 370 - SECONDS )); [ $T -gt 30 ] && { timeout $T python3 -m pytest -q -x -p no:cacheprovider -m gpu tests/gpu/test_hopper_gpu.py \
  -k "paged or fused_gpu" tests/gpu/test_fused_gpu.py --junitxml=$W/junit.xml > $W/tests.log 2>&1; echo "tests rc $? at $SECONDS" >> $W/rc.txt; tail -3 $W/tests.log >> $W/rc.txt; }
kill $WD; cd $OUT && tar -czf w.tgz w

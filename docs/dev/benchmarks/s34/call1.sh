#!/usr/bin/env bash
# call 1: seed 35's FP8 mismatch: replay, repeats, variants, the new GPU test, racecheck on the replay
set -u
W=$OUT/w; mkdir -p $W
( sleep 580; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
git log --oneline -1 > $W/head.txt
timeout 120 python3 tools/fuzz.py --replay 14176579 > $W/replay.log 2>&1; echo "replay rc $?" >> $W/rc.txt
timeout 200 python3 .s34/diag.py > $W/diag.log 2>&1; echo "diag rc $?" >> $W/rc.txt
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fp8_mma_gpu.py -m gpu > $W/test_mma.log 2>&1; echo "test rc $?" >> $W/rc.txt
tail -3 $W/test_mma.log >> $W/rc.txt
T=$(( 570 - SECONDS ))
timeout $T compute-sanitizer --tool racecheck --racecheck-report analysis python3 tools/fuzz.py --replay 14176579 > $W/racecheck.log 2>&1; echo "racecheck rc $?" >> $W/rc.txt
tail -5 $W/racecheck.log >> $W/rc.txt
kill $WD; cd $OUT && tar -czf w.tgz w

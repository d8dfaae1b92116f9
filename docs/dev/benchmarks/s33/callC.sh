#!/usr/bin/env bash
# call C: the final tree (fused FP8 kernel at 56 / 224): plan GPU tests, then the fuzz
set -u
W=$OUT/w; mkdir -p $W
( sleep 300; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_plan_gpu.py -m gpu > $W/plan.log 2>&1; echo "plan rc $?" >> $W/rc.txt; tail -1 $W/plan.log >> $W/rc.txt
T=$(( 290 - SECONDS ))
timeout $((T+5)) python3 tools/fuzz.py --batches 2000 --seed 35 --jobs 12 --time-limit $T --json $W/fuzz.json > $W/fuzz.log 2>&1
echo "fuzz rc $?" >> $W/rc.txt; tail -2 $W/fuzz.log >> $W/rc.txt
kill $WD; cd $OUT && tar -czf w.tgz w

#!/usr/bin/env bash
# Call C: the GPU suite and the 2000-batch fuzz (seed 41) on the current code, every kernel compiled before the
# call (tools/device_cache.py build --fuzz-seed 41 ...; gpu_check.sh unpacks .devcache first).  carry [".devcache"].
set -u
W=$OUT/w; mkdir -p $W
( sleep 560; cd $OUT && tar -czf w.tgz w ) & WD=$!
OUT=$W/suite PYTEST_LIMIT=330 bash tools/gpu_check.sh tests > $W/gpu_check.log 2>&1
echo "suite rc $? at $SECONDS" >> $W/rc.txt; tail -4 $W/suite/pytest.log >> $W/rc.txt; rm -f $W/suite/h200.md
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
T=$(( 550 - SECONDS ))
[ $T -gt 60 ] && { timeout $T python3 tools/fuzz.py --batches 2000 --seed 41 --jobs 12 --time-limit $(( T - 10 )) \
  --json $W/fuzz.json > $W/fuzz.log 2>&1; echo "fuzz rc $? at $SECONDS" >> $W/rc.txt; tail -2 $W/fuzz.log >> $W/rc.txt; }
kill $WD; cd $OUT && tar -czf w.tgz w

#!/usr/bin/env bash
# Call A (carry [".devcache"]): the GPU suite, compute-sanitizer memcheck / racecheck on the sanitize subset,
# and the 2000-batch fuzz (seed of the carried .devcache) on the commit with option "t" on by default.
set -u
W=$OUT/w; mkdir -p $W
( sleep 570; cd $OUT && tar -czf w.tgz w ) & WD=$!
OUT=$W/suite PYTEST_LIMIT=330 bash tools/gpu_check.sh tests > $W/gpu_check.log 2>&1
echo "suite rc $? at $SECONDS" >> $W/rc.txt; tail -4 $W/suite/pytest.log >> $W/rc.txt; rm -f $W/suite/h200.md
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
mkdir -p $W/san; OUT=$W/san SANITIZE_LIMIT=100 timeout 240 bash tools/sanitize.sh > $W/sanitize.log 2>&1
echo "sanitize rc $? at $SECONDS" >> $W/rc.txt; tail -5 $W/sanitize.log >> $W/rc.txt
SEED=$(python3 -c 'import json; print(json.load(open(".devcache/manifest.json"))["fuzz_seed"])')
T=$(( 560 - SECONDS ))
[ $T -gt 60 ] && { timeout $T python3 tools/fuzz.py --batches 2000 --seed $SEED --jobs 12 --time-limit $(( T - 10 )) \
  --json $W/fuzz.json > $W/fuzz.log 2>&1; echo "fuzz rc $? at $SECONDS" >> $W/rc.txt; tail -2 $W/fuzz.log >> $W/rc.txt; }
kill $WD; cd $OUT && tar -czf w.tgz w

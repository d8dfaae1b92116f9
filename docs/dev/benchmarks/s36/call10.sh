#!/usr/bin/env bash
# session 36 call 10: the fuzz (2000 batches, seed 38) at 300ea86
set -u
W=$OUT/w; mkdir -p $W
( sleep 330; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
T=$(( 320 - SECONDS )); echo "fuzz limit $T" >> $W/rc.txt
timeout $((T+5)) python3 tools/fuzz.py --batches 2000 --seed 38 --jobs 12 --time-limit $T --json $W/fuzz.json > $W/fuzz.log 2>&1
echo "fuzz rc $? at $SECONDS" >> $W/rc.txt; tail -3 $W/fuzz.log >> $W/rc.txt
kill $WD; cd $OUT && tar -czf w.tgz w

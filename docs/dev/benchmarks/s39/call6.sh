#!/usr/bin/env bash
# session 39 call 6 (peers call A): compute-sanitizer memcheck + racecheck on the sanitizer subset (two new paged
# prefill cases: four-warp TMA boxes at pages of 16, the lean row gather at pages of 24), then peers part 1
set -u
W=$OUT/w; mkdir -p $W/san
( sleep 500; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
OUT=$W/san timeout 420 bash tools/sanitize.sh > $W/sanitize.log 2>&1
echo "sanitize rc $? at $SECONDS" >> $W/rc.txt; grep -E "errors:|rc " $W/sanitize.log >> $W/rc.txt
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers1.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
kill $WD; cd $OUT && tar -czf w.tgz w

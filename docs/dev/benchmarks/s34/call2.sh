#!/usr/bin/env bash
# call 2: peers part 1 saved on this machine; the fuzz (2000 batches, seed 36) at HEAD
set -u
W=$OUT/w; mkdir -p $W
( sleep 330; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
git log --oneline -1 > $W/head.txt
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers1.log 2>&1; echo "peers1 rc $?" >> $W/rc.txt
T=$(( 320 - SECONDS )); echo "fuzz limit $T" >> $W/rc.txt
timeout $((T+5)) python3 tools/fuzz.py --batches 2000 --seed 36 --jobs 12 --time-limit $T --json $W/fuzz.json > $W/fuzz.log 2>&1
echo "fuzz rc $?" >> $W/rc.txt; tail -3 $W/fuzz.log >> $W/rc.txt
kill $WD; cd $OUT && tar -czf w.tgz w

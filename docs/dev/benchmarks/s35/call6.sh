#!/usr/bin/env bash
# s35 call F: peers part 1 saved on this machine; the fuzz (2000 batches, seed 37) at the final kernels
set -u
W=$OUT/w; mkdir -p $W
( sleep 330; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers1.log 2>&1; echo "peers1 rc $? at $SECONDS" >> $W/rc.txt
T=$(( 320 - SECONDS )); echo "fuzz limit $T" >> $W/rc.txt
timeout $((T+5)) python3 tools/fuzz.py --batches 2000 --seed 37 --jobs 12 --time-limit $T --json $W/fuzz.json > $W/fuzz.log 2>&1
echo "fuzz rc $? at $SECONDS" >> $W/rc.txt; tail -3 $W/fuzz.log >> $W/rc.txt
kill $WD; cd $OUT && tar -czf w.tgz w

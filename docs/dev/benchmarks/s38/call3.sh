#!/usr/bin/env bash
# session 38 call A (3): peers part 1 saved on this machine; the fuzz (2000 batches, seed 39) at 5720304 (the L2 hint);
# chunked prefill on pages 8 / 16 / 32: the paged TMA boxes against the producers' row gather ("g")
set -u
W=$OUT/w; mkdir -p $W
( sleep 560; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers1.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
T=$(( 440 - SECONDS )); echo "fuzz limit $T" >> $W/rc.txt
timeout $((T+5)) python3 tools/fuzz.py --batches 2000 --seed 39 --jobs 12 --time-limit $T --json $W/fuzz.json > $W/fuzz.log 2>&1
echo "fuzz rc $? at $SECONDS" >> $W/rc.txt; tail -3 $W/fuzz.log >> $W/rc.txt
T=$(( 550 - SECONDS )); [ $T -gt 30 ] && { timeout $T python3 .s38/paged_ab.py --pages 16,8,32 --configs tma=128:128:2:p,gather=128:128:2:gp --passes 2 > $W/paged_g.log 2>&1; echo "paged_g rc $? at $SECONDS" >> $W/rc.txt; }
kill $WD; cd $OUT && tar -czf w.tgz w

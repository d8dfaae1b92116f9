#!/usr/bin/env bash
# session 38 call B (4): peers part 2; the decode suite (llama3-8b, llama3-70b-tp8) with FA3 / FA4 at 5720304 (the L2 hint),
# after the bench's write flush (the report's regime) and after a read flush
set -u
W=$OUT/w; mkdir -p $W
( sleep 560; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers2.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers2.log)"
for f in write read; do
T=$(( 550 - SECONDS )); [ $T -gt 60 ] && { timeout $T python3 -m kernelgen bench --suite decode --model llama3-8b,llama3-70b-tp8 --flex off --budget 0 --flush $f --json $W/bench_decode_$f.json > $W/bench_decode_$f.log 2>&1
echo "bench $f rc $? at $SECONDS" >> $W/rc.txt; }
done
kill $WD; cd $OUT && tar -czf w.tgz w

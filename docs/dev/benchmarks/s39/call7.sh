#!/usr/bin/env bash
# session 39 call 7 (peers call B): peers part 2; the chunked paged prefill and mixed entries (llama3-8b) with FA3 / FA4,
# two more runs for the spread (call 5 was the first)
set -u
W=$OUT/w; mkdir -p $W
( sleep 500; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers2.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers2.log)"
for r in 2 3; do
T=$(( 480 - SECONDS )); [ $T -gt 60 ] && { timeout $T python3 -m kernelgen bench --suite prefill,mixed --model llama3-8b --only 'prefill_chunked*,mixed*' --flex off --budget 0 \
  --json $W/bench_run$r.json > $W/bench_run$r.log 2>&1
echo "bench run $r rc $? at $SECONDS" >> $W/rc.txt; }
done
kill $WD; cd $OUT && tar -czf w.tgz w

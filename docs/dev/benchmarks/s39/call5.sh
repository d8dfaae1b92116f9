#!/usr/bin/env bash
# session 39 call 5 (peers call B): peers part 2; the bench's chunked paged prefill and mixed entries (llama3-8b) with
# FA3 / FA4 in the same process, on this tree (four-warp paged boxes, lean gather)
set -u
W=$OUT/w; mkdir -p $W
( sleep 540; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers2.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers2.log)"
T=$(( 530 - SECONDS ))
timeout $T python3 -m kernelgen bench --suite prefill,mixed --model llama3-8b --only 'prefill_chunked*,mixed*' --flex off --budget 0 \
  --json $W/bench.json > $W/bench.log 2>&1
echo "bench rc $? at $SECONDS" >> $W/rc.txt
kill $WD; cd $OUT && tar -czf w.tgz w

#!/usr/bin/env bash
# session 40 call 3 (peers call B): peers part 2; the bench's chunked + mixed entries (llama3-8b) with FA3 / FA4 on
# the tree with the fused kernel's four issuing warps (fused-tma-warps.patch applied), then gpt-oss / gemma2 chunked
set -u
W=$OUT/w; mkdir -p $W
( sleep 560; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
git diff --stat > $W/head.txt
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers2.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers2.log)"
T=$(( 300 - SECONDS ))
timeout $T python3 -m kernelgen bench --suite prefill --model gpt-oss,gemma2-9b --only 'prefill_chunked*' --flex off --budget 0 \
  --json $W/bench_models.json > $W/bench_models.log 2>&1
echo "bench models rc $? at $SECONDS" >> $W/rc.txt
for r in 1 2; do
T=$(( 550 - SECONDS )); [ $T -gt 60 ] && { timeout $T python3 -m kernelgen bench --suite prefill,mixed --model llama3-8b --only 'prefill_chunked*,mixed*' --flex off --budget 0 \
  --json $W/bench_run$r.json > $W/bench_run$r.log 2>&1
echo "bench run $r rc $? at $SECONDS" >> $W/rc.txt; }
done
kill $WD; cd $OUT && tar -czf w.tgz w

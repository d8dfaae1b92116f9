#!/usr/bin/env bash
# Call P2 (right after P1; carry [".peers/manifest.json", ".peers/part2", ".devcache_bench"]): issue 22's entries
# (bf16 and fp16, llama3-8b) with FA3 / FA4 / cuDNN on branch t-default (option "t" on by default).
set -u
W=$OUT/w; mkdir -p $W
( sleep 560; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 30 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
T=$(( 550 - SECONDS ))
timeout $T python3 -m kernelgen bench --flex off --budget 0 --json $W/issue22_t.json --suite prefill --model llama3-8b \
  --dtype bf16,fp16 --only 'prefill_dense_*,prefill_varlen_trace,prefill_varlen_trace_fp16,prefill_chunked_paged*' > $W/issue22_t.log 2>&1
echo "issue22 rc $? at $SECONDS" >> $W/rc.txt
kill $WD; cd $OUT && tar -czf w.tgz w

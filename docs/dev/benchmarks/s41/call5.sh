#!/usr/bin/env bash
# call 5 (same lease, peers unpacked by call B): issue 22's entries again (second run: the spread), then the sanitizer
set -u
W=$OUT/w; mkdir -p $W/san
( sleep 470; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 60 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
timeout 230 python3 -m kernelgen bench --flex off --budget 0 --json $W/issue22_run2.json --suite prefill --model llama3-8b \
  --dtype bf16,fp16 --only 'prefill_dense_*,prefill_varlen_trace,prefill_varlen_trace_fp16,prefill_chunked_paged*' > $W/issue22_run2.log 2>&1
echo "issue22 run2 rc $? at $SECONDS" >> $W/rc.txt
T=$(( 460 - SECONDS )); [ $T -gt 60 ] && { OUT=$W/san timeout $T bash tools/sanitize.sh > $W/sanitize.log 2>&1;
  echo "sanitize rc $? at $SECONDS" >> $W/rc.txt; grep -E "errors:" $W/sanitize.log >> $W/rc.txt; }
kill $WD; cd $OUT && tar -czf w.tgz w

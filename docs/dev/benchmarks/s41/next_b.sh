#!/usr/bin/env bash
# Call B (peers call 2 of 2): FA3 / FA4 installed; every issue-22 entry in bf16 and fp16 with the peers in the same
# run (28 entries: the 10 dense shapes, prefill_varlen_trace, prefill_chunked_paged{16,64,128}, each also *_fp16);
# then, if time is left, llama3-8b's mixed entries (issue 23) and gpt-oss / gemma2's chunked ones.
# carry [".peers/manifest.json", ".peers/part2", ".devcache_bench"].
set -u
W=$OUT/w; mkdir -p $W
( sleep 565; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 60 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers2.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers2.log)"
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader >> $W/clocks.txt
bench() {  # name, limit (s since start), bench arguments...
  local n=$1 lim=$2; shift 2; local T=$(( lim - SECONDS ))
  [ $T -gt 40 ] || { echo "$n skipped at $SECONDS" >> $W/rc.txt; return; }
  timeout $T python3 -m kernelgen bench --flex off --budget 0 --json $W/$n.json "$@" > $W/$n.log 2>&1
  echo "$n rc $? at $SECONDS" >> $W/rc.txt
}
bench issue22 430 --suite prefill --model llama3-8b --dtype bf16,fp16 \
  --only 'prefill_dense_*,prefill_varlen_trace,prefill_varlen_trace_fp16,prefill_chunked_paged*'
bench mixed 500 --suite mixed --model llama3-8b --only 'mixed_trace,mixed_long_chunks,mixed_short_chunks'
bench models_chunked 555 --suite prefill --model gpt-oss,gemma2-9b --only 'prefill_chunked*'
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader >> $W/clocks.txt
kill $WD; cd $OUT && tar -czf w.tgz w

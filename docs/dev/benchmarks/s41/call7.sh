#!/usr/bin/env bash
# call 7 (after call 6 stashed the peers' part 1): issue 22's entries a third time; ncu of kernelgen and FA4 on the fp16 shapes
set -u
W=$OUT/w; mkdir -p $W
( sleep 440; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 60 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
timeout 220 python3 -m kernelgen bench --flex off --budget 0 --json $W/issue22_run3.json --suite prefill --model llama3-8b \
  --dtype bf16,fp16 --only 'prefill_dense_*,prefill_varlen_trace,prefill_varlen_trace_fp16,prefill_chunked_paged*' > $W/issue22_run3.log 2>&1
echo "issue22 run3 rc $? at $SECONDS" >> $W/rc.txt
ALL=dense_causal_16k,dense_4k,dense_causal_h64,dense_h64,dense_causal_h256,dense_h256,dense_causal_gqa,dense_causal_h96
ALL=$ALL,dense_causal_h192,dense_causal_h192x128,varlen_trace,chunked_p16,chunked_p64,chunked_p128
for impl in kernelgen fa4; do
  T=$(( 430 - SECONDS )); [ $T -gt 30 ] || break
  timeout $T ncu --profile-from-start off --clock-control none --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section LaunchStats --csv --page details \
    python3 benchmarks/experiments/profile_vs_peers.py --impl $impl --dtype fp16 --warm 2 --shapes $ALL > $W/ncu_${impl}_fp16.csv 2> $W/ncu_${impl}_fp16.err
  echo "ncu $impl fp16 rc $? at $SECONDS" >> $W/rc.txt
done
gzip -f $W/ncu_*.csv
kill $WD; cd $OUT && tar -czf w.tgz w

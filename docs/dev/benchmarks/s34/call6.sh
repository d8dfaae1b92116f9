#!/usr/bin/env bash
# call 6: FA3 peers; kernelgen bench --suite mixed runs 4 and 5; the Llama 3 FP8 prefill entries with FA3 FP8
set -u
W=$OUT/w; mkdir -p $W
( sleep 330; cd $OUT && tar -czf w.tgz w ) & WD=$!
clk() { nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,noheader >> $W/clocks.txt; }
clk
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
git log --oneline -1 > $W/head.txt
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers2.log 2>&1; echo "peers rc $?" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers2.log)"
for i in 4 5; do
  T=$(( 230 - SECONDS )); [ $T -lt 40 ] && break
  timeout $T python3 -m kernelgen bench --suite mixed --flex off --budget 0 --json $W/bench_mixed_$i.json > $W/bench_mixed_$i.log 2>&1
  echo "mixed $i rc $? at $SECONDS" >> $W/rc.txt; clk
done
T=$(( 320 - SECONDS ))
[ $T -gt 30 ] && timeout $T python3 -m kernelgen bench --suite prefill --model llama3-8b --only 'fp8_prefill*' --flex off --budget 0 --json $W/bench_fp8.json > $W/bench_fp8.log 2>&1
echo "fp8 rc $? at $SECONDS" >> $W/rc.txt; clk
kill $WD; cd $OUT && tar -czf w.tgz w

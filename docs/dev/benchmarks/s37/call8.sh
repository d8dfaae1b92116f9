#!/usr/bin/env bash
# session 37 call 8: peers part 2; `kernelgen bench --suite mixed` three times and the prefill suite, FA3 / FA4 beside, at HEAD (152d98f)
set -u
W=$OUT/w; mkdir -p $W
( sleep 560; cd $OUT && tar -czf w.tgz w ) & WD=$!
clk() { nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,noheader >> $W/clocks.txt; }
clk
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers2.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers2.log)"
for i in 1 2 3; do
timeout 100 python3 -m kernelgen bench --suite mixed --flex off --budget 0 --json $W/bench_mixed_$i.json > $W/bench_mixed_$i.log 2>&1
echo "mixed $i rc $? at $SECONDS" >> $W/rc.txt; clk
done
T=$(( 545 - SECONDS )); [ $T -gt 60 ] && { timeout $T python3 -m kernelgen bench --suite prefill --flex off --budget 0 --json $W/bench_prefill.json > $W/bench_prefill.log 2>&1; echo "prefill rc $? at $SECONDS" >> $W/rc.txt; clk; }
kill $WD; cd $OUT && tar -czf w.tgz w

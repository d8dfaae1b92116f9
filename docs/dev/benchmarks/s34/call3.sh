#!/usr/bin/env bash
# call 3: FA3 peers; kernelgen bench --suite mixed three times (4 batches with FA3 / FA4 one-call peers); mixed_sweep long / short
set -u
W=$OUT/w; mkdir -p $W
( sleep 565; cd $OUT && tar -czf w.tgz w ) & WD=$!
clk() { nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,noheader >> $W/clocks.txt; }
clk
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
git log --oneline -1 > $W/head.txt
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers2.log 2>&1; echo "peers rc $?" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers2.log)"
python3 -c "import flash_attn_interface" >> $W/rc.txt 2>&1 && echo "fa3 import ok" >> $W/rc.txt
for i in 1 2 3; do
  T=$(( 400 - SECONDS )); [ $T -lt 60 ] && break
  timeout $T python3 -m kernelgen bench --suite mixed --flex off --budget 0 --json $W/bench_mixed_$i.json > $W/bench_mixed_$i.log 2>&1
  echo "mixed $i rc $? at $SECONDS" >> $W/rc.txt; clk
done
T=$(( 555 - SECONDS ))
[ $T -gt 40 ] && timeout $T python3 benchmarks/experiments/mixed_sweep.py --cases long,short --short-ctas 0,22,44,66 --rounds 3 --json $W/sweep.json > $W/sweep.log 2>&1
echo "sweep rc $? at $SECONDS" >> $W/rc.txt; clk
kill $WD; cd $OUT && tar -czf w.tgz w

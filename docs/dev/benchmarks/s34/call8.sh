#!/usr/bin/env bash
# call 8: FA3 peers; the FP8 prefill sweep (issue 24's four dense shapes + chunked, FA3 FP8 beside); the Azure decode entry with FA3/FA4
set -u
W=$OUT/w; mkdir -p $W
( sleep 250; cd $OUT && tar -czf w.tgz w ) & WD=$!
clk() { nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,noheader >> $W/clocks.txt; }
clk
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers2.log 2>&1; echo "peers rc $?" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers2.log)"
timeout 80 python3 -m kernelgen bench --suite decode --only 'decode_azure*,decode_trace_b128_paged16' --flex off --budget 0 --json $W/bench_azure.json > $W/bench_azure.log 2>&1
echo "azure rc $? at $SECONDS" >> $W/rc.txt; clk
T=$(( 240 - SECONDS ))
timeout $T python3 tools/bench.py --fp8-prefill-sweep --json $W/fp8_sweep.json > $W/fp8_sweep.log 2>&1
echo "fp8 sweep rc $? at $SECONDS" >> $W/rc.txt; clk
kill $WD; cd $OUT && tar -czf w.tgz w

#!/usr/bin/env bash
# s35 call G: peers part 2; the decode suite (llama3-8b and llama3-70b-tp8, FA3 / FA4 beside, forced paths interleaved)
# and the Azure entry; per-kernel profile
set -u
W=$OUT/w; mkdir -p $W
( sleep 330; cd $OUT && tar -czf w.tgz w ) & WD=$!
clk() { nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,noheader >> $W/clocks.txt; }
clk
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers2.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers2.log)"
timeout 250 python3 -m kernelgen bench --suite decode --model llama3-8b,llama3-70b-tp8 --flex off --budget 0 --json $W/bench_decode.json > $W/bench_decode.log 2>&1
echo "bench rc $? at $SECONDS" >> $W/rc.txt; clk
T=$(( 320 - SECONDS )); [ $T -gt 15 ] && { timeout $T python3 benchmarks/experiments/decode_profile.py --model llama3-8b --shapes decode_azure_b128_paged16,decode_trace_b32_paged16 --iters 30 > $W/prof8b.log 2>&1; echo "prof rc $? at $SECONDS" >> $W/rc.txt; }
kill $WD; cd $OUT && tar -czf w.tgz w

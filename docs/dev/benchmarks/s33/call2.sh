#!/usr/bin/env bash
# call 2: the FP8 mixed step, where it loses (mixed_sweep / mixed_timeline with --kv-dtype e4m3)
set -u
W=$OUT/w; mkdir -p $W
( sleep 570; cd $OUT && tar -czf w.tgz w ) & WD=$!
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv > $W/clocks.txt
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers1.log 2>&1; echo "peers1 rc $?" >> $W/rc.txt
timeout 240 python3 benchmarks/experiments/mixed_sweep.py --cases bench,heavy --kv-dtype e4m3 --short-ctas 0,22,44,66 --fused-regs 40/232,56/224 --rounds 5 --json $W/sweep_fp8.json > $W/sweep_fp8.log 2>&1
echo "sweep fp8 rc $?" >> $W/rc.txt
timeout 120 python3 benchmarks/experiments/mixed_sweep.py --cases bench --short-ctas 44 --rounds 5 --json $W/sweep_bf16.json > $W/sweep_bf16.log 2>&1
echo "sweep bf16 rc $?" >> $W/rc.txt
T=$(( 560 - SECONDS ))
timeout $T python3 benchmarks/experiments/mixed_timeline.py --kv-dtype e4m3 --short-ctas 22,44 --runs 3 --json $W/timeline_fp8.json > $W/timeline_fp8.log 2>&1
echo "timeline rc $?" >> $W/rc.txt
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv >> $W/clocks.txt
kill $WD; cd $OUT && tar -czf w.tgz w

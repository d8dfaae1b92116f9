#!/usr/bin/env bash
# call 4: where the fused mixed step's split should sit on three batches (short-first CTAs 22..110); the full GPU suite at HEAD
set -u
W=$OUT/w; mkdir -p $W
( sleep 575; cd $OUT && tar -czf w.tgz w ) & WD=$!
clk() { nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,noheader >> $W/clocks.txt; }
clk
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
git log --oneline -1 > $W/head.txt
timeout 200 python3 benchmarks/experiments/mixed_sweep.py --cases short,long,bench --short-ctas 22,44,66,88,110 --rounds 3 --json $W/sweep.json > $W/sweep.log 2>&1
echo "sweep rc $? at $SECONDS" >> $W/rc.txt; clk
T=$(( 565 - SECONDS ))
OUT=$W/suite PYTEST_LIMIT=$(( T - 100 )) timeout $T bash tools/gpu_check.sh tests > $W/suite.log 2>&1
echo "suite rc $? at $SECONDS" >> $W/rc.txt; tail -3 $W/suite/pytest.log >> $W/rc.txt; clk
kill $WD; cd $OUT && rm -f w/suite/*.so; tar -czf w.tgz w

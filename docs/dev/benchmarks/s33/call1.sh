#!/usr/bin/env bash
# call 1: the GPU suite at HEAD, then the fuzz
set -u
W=$OUT/w; mkdir -p $W
( sleep 575; cd $OUT && tar -czf w.tgz w ) & WD=$!
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv > $W/clocks.txt
git log --oneline -1 > $W/head.txt
OUT=$W/suite PYTEST_LIMIT=300 timeout 470 bash tools/gpu_check.sh tests > $W/suite.log 2>&1
echo "suite rc $?" >> $W/rc.txt
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
T=$(( 560 - SECONDS )); echo "fuzz limit $T" >> $W/rc.txt
timeout $((T+5)) python3 tools/fuzz.py --batches 2000 --seed 34 --jobs 8 --time-limit $T --json $W/fuzz.json > $W/fuzz.log 2>&1
echo "fuzz rc $?" >> $W/rc.txt
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv >> $W/clocks.txt
kill $WD; cd $OUT && tar -czf w.tgz w

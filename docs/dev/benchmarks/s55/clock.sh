#!/usr/bin/env bash
# Fifty-fifth session (carry [".devcache_bench", ".peers/manifest.json", ".peers/part2"] after a call that carried
# ".peers/part1"): clock_pair.py with nvidia-smi sampling SM clock, power and temperature every 100 ms.
set -u
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
W=$OUT/w; mkdir -p $W
timeout 30 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/dc.log 2>&1
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu \
  --format=csv,nounits -lms 100 > $W/clock.csv 2>&1 & SMI=$!
PHASES=$W/phases.json timeout 150 python3 docs/dev/benchmarks/s55/clock_pair.py > $W/pair.log 2>&1
echo "pair rc $? at $SECONDS" >> $W/rc.txt
kill $SMI
cat $W/rc.txt; cat $W/pair.log | tail -8; head -3 $W/clock.csv; wc -l $W/clock.csv
cd $OUT && tar -czf w.tgz w

#!/usr/bin/env bash
# Seventieth session, call 1 (carry [".peers/manifest.json", ".peers/part1", ".devcache_bench"]): on an H200
# s67/one.sh (peers' part 1 stashed, issue 24's FP8 decode rows; s67/go.sh next); on an H100 the mixed
# step's decode tile: mixed_sweep on the bench and heavy batches, e4m3 cache, the fused kernel's FP8 decode tile
# at 2 / 4 stages (heuristics.SM90_FUSED_SHORT_STAGES_FP8) and 16 / 8 rows (8: the keys-as-rows tile with FP8 in
# registers, new; its outputs against serial's), within L s (default 300).
set -u
W=$OUT/w; mkdir -p $W
L=${L:-300}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $W/gpu.txt
if grep -q H200 $W/gpu.txt; then L=90 bash docs/dev/benchmarks/s67/one.sh; exit 0; fi
# (from call 5 on: an H100 runs s70/two.sh; the sweep below is what call 1 ran)
if [ -n "${TWO:-}" ]; then bash docs/dev/benchmarks/s70/two.sh; exit 0; fi
( sleep $L; cd $OUT && tar -czf w.tgz w ) > /dev/null 2>&1 & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 20 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
left() { echo $(( L - 10 - SECONDS )); }
S=benchmarks/experiments/mixed_sweep.py
timeout $(left) python3 $S --cases bench,heavy --kv-dtype e4m3 --short-ctas 44 --stages 2,4 --rows 8,16 --json $W/fp8.json > $W/fp8.log 2>&1
echo "fp8 rc $? at $SECONDS" >> $W/rc.txt
[ $(left) -gt 60 ] && { timeout $(left) python3 $S --cases bench --kv-dtype e4m3 --short-ctas 33,55 --stages 4 --rows 8,16 --json $W/fp8b.json > $W/fp8b.log 2>&1; echo "fp8b rc $? at $SECONDS" >> $W/rc.txt; }
kill $WD; cat $W/rc.txt; tail -n 40 $W/fp8.log $W/fp8b.log
cd $OUT && tar -czf w.tgz w

#!/usr/bin/env bash
# Call D (after B in the same lease: FA3 / FA4 unpacked there): ncu of kernelgen and FA3 side by side on issue 22's
# shapes still behind (the "Done when" of issues 22 and 23 asks for these profiles), the new dense shapes and the
# fp16 run of two of them; one profiled call a shape after 3 warm-ups (benchmarks/experiments/profile_vs_peers.py).
# Parse back here into a JSON like docs/dev/benchmarks/ncu_kernelgen_vs_fa3_h200.json.
# carry [".peers/manifest.json", ".devcache_bench"] (the peers' site from call B is reused; no part needed).
set -u
W=$OUT/w; mkdir -p $W
( sleep 560; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 60 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
SHAPES=dense_causal_h256,dense_causal_h64,dense_4k,dense_causal_h96,dense_causal_h192,dense_causal_h192x128,chunked_p128,decode_b128
prof() {  # impl, dtype, limit (s since start)
  local T=$(( $3 - SECONDS )); [ $T -gt 30 ] || { echo "$1 $2 skipped at $SECONDS" >> $W/rc.txt; return; }
  timeout $T ncu --profile-from-start off --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats \
    --csv --page details python3 benchmarks/experiments/profile_vs_peers.py --impl $1 --dtype $2 --shapes ${4:-$SHAPES} \
    > $W/ncu_$1_$2.csv 2> $W/ncu_$1_$2.err
  echo "ncu $1 $2 rc $? at $SECONDS" >> $W/rc.txt
}
prof kernelgen bf16 230
prof fa3 bf16 420
prof kernelgen fp16 490 dense_causal_h256,dense_causal_16k
prof fa3 fp16 550 dense_causal_h256,dense_causal_16k
gzip -f $W/ncu_*.csv
kill $WD; cd $OUT && tar -czf w.tgz w

#!/usr/bin/env bash
# Call D (right after B in the same lease: FA3 / FA4 are unpacked there): ncu of kernelgen and FA3 side by side on
# issue 22's shapes (the attention kernels only), bf16, then the dense shapes in fp16; one profiled call a shape
# after 3 warm-ups (benchmarks/experiments/profile_vs_peers.py).  Issue 22's "Done when" asks for these profiles for
# each shape still behind.  carry [".peers/manifest.json", ".devcache_bench"].
set -u
W=$OUT/w; mkdir -p $W
( sleep 500; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 60 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
ALL=dense_causal_16k,dense_4k,dense_causal_h64,dense_h64,dense_causal_h256,dense_h256,dense_causal_gqa,dense_causal_h96
ALL=$ALL,dense_causal_h192,dense_causal_h192x128,varlen_trace,chunked_p16,chunked_p64,chunked_p128
DENSE=dense_causal_16k,dense_4k,dense_causal_h64,dense_causal_h256,dense_causal_gqa,dense_causal_h96,dense_causal_h192
prof() {  # impl, dtype, limit (s since start), shapes
  local T=$(( $3 - SECONDS )); [ $T -gt 30 ] || { echo "$1 $2 skipped at $SECONDS" >> $W/rc.txt; return; }
  timeout $T ncu --profile-from-start off --clock-control none -k 'regex:kg_attention_fwd|device_kernel|flash' \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy \
    --section WarpStateStats --section SchedulerStats --section LaunchStats --csv --page details \
    python3 benchmarks/experiments/profile_vs_peers.py --impl $1 --dtype $2 --shapes $4 > $W/ncu_$1_$2.csv 2> $W/ncu_$1_$2.err
  echo "ncu $1 $2 rc $? at $SECONDS" >> $W/rc.txt
}
prof kernelgen bf16 180 $ALL
prof fa3 bf16 340 $ALL
prof kernelgen fp16 420 $DENSE
prof fa3 fp16 495 $DENSE
gzip -f $W/ncu_*.csv
kill $WD; cd $OUT && tar -czf w.tgz w

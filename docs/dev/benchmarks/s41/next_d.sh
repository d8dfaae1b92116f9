#!/usr/bin/env bash
# Call D (right after B in the same lease: FA3 / FA4 are unpacked there): ncu of kernelgen and FA3 side by side on
# issue 22's shapes (the attention kernels only), bf16; the A/B of option "e" (tile_ab.py, FA3 beside); two fp16
# shapes; one profiled call a shape after 3 warm-ups (benchmarks/experiments/profile_vs_peers.py).  Issue 22's "Done when" asks for these profiles for
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
# option "e" (6259c49: the next tile taken before the epilogue) against the default, with FA3 in the same process
for cfg in "128:128:128 c16k=1:16384:32:32:128:1,n4k=4:4096:32:32:128:0" "64:192:128 c2k=8:2048:32:32:64:1"; do
  set -- $cfg; IFS=: read d bm bn <<< "$1"
  T=$(( 430 - SECONDS )); [ $T -gt 25 ] || break
  timeout $T python3 benchmarks/experiments/tile_ab.py --shapes $2 --passes 2 \
    --configs p=bf16:$d:$bm:$bn:2:p,ep=bf16:$d:$bm:$bn:2:ep,fa3=fa3 > $W/early_ab_d$d.log 2>&1
  echo "early ab d$d rc $? at $SECONDS" >> $W/rc.txt
done
prof kernelgen fp16 465 dense_causal_h256,dense_causal_16k
prof fa3 fp16 495 dense_causal_h256,dense_causal_16k
gzip -f $W/ncu_*.csv
kill $WD; cd $OUT && tar -czf w.tgz w

#!/usr/bin/env bash
# Call D (s45: right after P1 in the same lease; carry [".peers/manifest.json", ".peers/part2", ".devcache_bench"]: it installs the peers):
# the profiles docs/dev/issue23_account.md still lacks.  1: ncu of the long decodes (llama3-8b and tp8, 8 x 128k) and
# the 128-request batches, kernelgen against FA3 and cuDNN (memory sections: DRAM throughput, L2, sectors a request);
# 2: mixed_timeline.py on the three mixed batches at the default 44 decode CTAs (prefill_only / decode_only / serial alone too; each class's SM-time, the tail);
# 3: tests/gpu/test_fp8_vs_fa3_gpu.py (issue 24 item 5); 4: decode_profile.py (per-kernel times).
set -u
W=$OUT/w; mkdir -p $W
( sleep 560; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 60 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
prof() {  # impl, limit (s since start), shapes
  local T=$(( $2 - SECONDS )); [ $T -gt 30 ] || { echo "$1 skipped at $SECONDS" >> $W/rc.txt; return; }
  timeout $T ncu --profile-from-start off --clock-control none \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats --csv --page details \
    python3 benchmarks/experiments/profile_vs_peers.py --impl $1 --shapes $3 > $W/ncu_$1.csv 2> $W/ncu_$1.err
  echo "ncu $1 rc $? at $SECONDS" >> $W/rc.txt
}
prof kernelgen 150 decode_long,decode_long_tp8,decode_b128,decode_b128_tp8,decode_azure
prof fa3 240 decode_long,decode_long_tp8,decode_b128,decode_b128_tp8,decode_azure
prof cudnn 280 decode_long,decode_long_tp8
for c in bench long short; do
  T=$(( 430 - SECONDS )); [ $T -gt 40 ] || break
  timeout $T python3 benchmarks/experiments/mixed_timeline.py --case $c --short-ctas 44 --runs 3 \
    --json $W/timeline_$c.json > $W/timeline_$c.log 2>&1; echo "timeline $c rc $? at $SECONDS" >> $W/rc.txt
done
# issue 24 item 5 (FA3 is installed here): kernelgen's FP8 error against FA3 FP8's on the same inputs
T=$(( 505 - SECONDS ))
[ $T -gt 30 ] && { timeout $T python3 -m pytest -q -s -p no:xdist -p no:cacheprovider tests/gpu/test_fp8_vs_fa3_gpu.py \
  --junitxml $W/fp8_vs_fa3.xml > $W/fp8_vs_fa3.log 2>&1; echo "fp8 vs fa3 rc $? at $SECONDS" >> $W/rc.txt; }
for m in llama3-8b llama3-70b-tp8; do
  T=$(( 550 - SECONDS )); [ $T -gt 20 ] || break
  timeout $T python3 benchmarks/experiments/decode_profile.py --model $m --json $W/decode_profile_$m.json \
    > $W/decode_profile_$m.log 2>&1; echo "decode_profile $m rc $? at $SECONDS" >> $W/rc.txt
done
gzip -f $W/ncu_*.csv
kill $WD; cd $OUT && tar -czf w.tgz w

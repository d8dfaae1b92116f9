#!/usr/bin/env bash
# ncu source view (per-SASS stall samples) of one implementation's attention kernel on the shapes behind.
# usage: src.sh IMPL LIMIT SHAPES...
set -u
IMPL=$1; LIMIT=$2; shift 2; S0=$SECONDS
W=$OUT/w; mkdir -p $W
( sleep $((LIMIT+15)); cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 60 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
ncu --version > $W/ncu_version.txt 2>&1
if [ $IMPL = kernelgen ]; then K='regex:kg_attention_fwd'; else K='regex:device_kernel'; fi
for s in "$@"; do
  T=$(( LIMIT - SECONDS )); [ $T -gt 25 ] || { echo "$s skipped at $SECONDS" >> $W/rc.txt; continue; }
  timeout $T ncu --profile-from-start off --clock-control none -k "$K" -c 1 --import-source no \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight --section InstructionStats \
    -o $W/${IMPL}_$s python3 benchmarks/experiments/profile_vs_peers.py --impl $IMPL --shapes $s > $W/${IMPL}_$s.log 2>&1
  echo "ncu $IMPL $s rc $? at $SECONDS" >> $W/rc.txt
  ncu -i $W/${IMPL}_$s.ncu-rep --page source --csv --print-source sass > $W/${IMPL}_${s}_sass.csv 2> $W/${IMPL}_${s}_sass.err
  echo "export rc $? at $SECONDS" >> $W/rc.txt
  ncu -i $W/${IMPL}_$s.ncu-rep --page details --csv > $W/${IMPL}_${s}_details.csv 2>> $W/${IMPL}_${s}_sass.err
done
gzip -f $W/*.csv
kill $WD; cd $OUT && tar -czf w.tgz w

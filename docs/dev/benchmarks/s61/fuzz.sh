#!/usr/bin/env bash
# Sixty-first session, the fuzz (carry [".devcache_fuzz"], built for this code): seed 61, within T
# seconds (default 560); then compute-sanitizer's subset if SAN=1 and time is left.
set -u
W=$OUT/w; mkdir -p $W
T=${T:-560}
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache PYTHONUNBUFFERED=1
[ -d .devcache_fuzz ] && timeout 60 python3 tools/device_cache.py unpack --dir .devcache_fuzz > $W/devcache.log 2>&1
timeout $((T - SECONDS)) python3 tools/fuzz.py --batches 2000 --seed 61 --time-limit $((T - 15 - SECONDS)) \
  --json $W/fuzz.json > $W/fuzz.log 2>&1
echo "fuzz rc $? at $SECONDS" >> $W/rc.txt
if [ "${SAN:-0}" = 1 ] && [ $((585 - SECONDS)) -gt 120 ]; then
  SANITIZE_LIMIT=$(( (580 - SECONDS) / 2 )) OUT=$W timeout $((585 - SECONDS)) bash tools/sanitize.sh > $W/sanitize.log 2>&1
  echo "sanitize rc $? at $SECONDS" >> $W/rc.txt
fi
cat $W/rc.txt; tail -4 $W/fuzz.log; tail -6 $W/sanitize.log 2>/dev/null
cd $OUT && tar -czf w.tgz w

#!/usr/bin/env bash
# Short call: option "t" against "p" and wider key blocks at d 96, "t" at d 192 (tile_ab, two passes).
set -u
W=$OUT/w; mkdir -p $W
( sleep 125; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 20 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
timeout 70 python3 benchmarks/experiments/tile_ab.py --shapes c96=4:4096:32:32:96:1 --passes 2 \
  --configs p=bf16:96:128:128:2:p,pt=bf16:96:128:128:2:pt,n144=bf16:96:128:144:2:p,n176=bf16:96:128:176:2:p > $W/ab_d96.log 2>&1
echo "d96 rc $? at $SECONDS" >> $W/rc.txt
T=$(( 118 - SECONDS ))
[ $T -gt 20 ] && { timeout $T python3 benchmarks/experiments/tile_ab.py --shapes c192=2:4096:16:16:192:1,c16k=1:16384:32:32:128:1 --passes 2 \
  --configs p=bf16:192:128:112:2:p,pt=bf16:192:128:112:2:pt > $W/ab_d192.log 2>&1; echo "d192 rc $? at $SECONDS" >> $W/rc.txt; }
kill $WD; cd $OUT && tar -czf w.tgz w

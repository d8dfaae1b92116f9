#!/usr/bin/env bash
# Sixty-seventh session, call 2 (carry [".peers/manifest.json", ".peers/part2", ".devcache_bench"]):
# on an H200 issue 25's one missing row (s64/snip.sh: the gpt-oss tanh.approx snippet against FA4,
# N=2 processes, then what time is left); on an H100 issue 24's FP8 d 64 candidate of s67's first
# lease (160-key blocks at 32 / 160 registers with the V^T hoist, "b160h": 0.976-0.987 of the
# dispatched tile's time there) against the dispatched tile and FA3 FP8, 5 passes.
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  L=${L:-220} N=2 bash docs/dev/benchmarks/s64/snip.sh
else
  W=$OUT/w; mkdir -p $W
  export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
  nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $W/gpu.txt
  timeout 20 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
  timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
  export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
  timeout ${L:-200} python3 benchmarks/experiments/tile_ab.py --passes 5 --shapes gptoss=1:16384:64:8:64:1 \
    --configs base=fp8q:64:192:128:2:p,b160h=fp8q:64:192:160:2:p:REGS_FP8_MMA_SMALL=32/160+KG_VT_HOIST,fa3=fa3fp8 \
    > $W/ab.log 2>&1; echo "ab rc $? at $SECONDS" >> $W/rc.txt
  cat $W/gpu.txt $W/rc.txt; tail -3 $W/ab.log
  cd $OUT && tar -czf w.tgz w
fi

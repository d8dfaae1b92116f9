#!/usr/bin/env bash
# Sixty-second session (carry [".peers/manifest.json", ".peers/part2", ".devcache_bench"], after try.sh on
# the same lease): issue 24's d 64 FP8 row, gpt-oss's heads (64 / 8, causal 1 x 16k, e4m3 q / k / v):
# tile_ab's interleaved graph replays of the dispatched tile (192 x 128, option p) against the V^T
# transposer with its lane constants hoisted (KG_VT_HOIST; docs/dev/fa3_fp8_d64_sass.md: -75
# instructions a block in the transposing warps) and without ping-pong, FA3's 160-key blocks at 32 / 160
# registers without and with the hoist (sixty-third session: NVRTC 13.0, no spills / 8 bytes), FA3 FP8
# beside; 3 passes.
set -u
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $W/gpu.txt
timeout 20 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
timeout ${L:-240} python3 benchmarks/experiments/tile_ab.py --passes 3 --shapes gptoss=1:16384:64:8:64:1 \
  --configs base=fp8q:64:192:128:2:p,hoist=fp8q:64:192:128:2:p:KG_VT_HOIST,nopp=fp8q:64:192:128:2:,b160=fp8q:64:192:160:2:p:REGS_FP8_MMA_SMALL=32/160,b160h=fp8q:64:192:160:2:p:REGS_FP8_MMA_SMALL=32/160+KG_VT_HOIST,fa3=fa3fp8 \
  > $W/ab.log 2>&1; echo "ab rc $? at $SECONDS" >> $W/rc.txt
cat $W/gpu.txt $W/rc.txt; tail -25 $W/ab.log
cd $OUT && tar -czf w.tgz w

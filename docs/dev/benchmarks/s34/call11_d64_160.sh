#!/usr/bin/env bash
# (next session; needs the FA3 peers installed: the two-call recipe) FP8 d 64 on FlashAttention-3's 192 x 160 tile at
# 32 / 160 registers against today's 192 x 128 at 56 / 152 (and 128 keys at 32 / 160), FA3 FP8 beside; three passes.
set -u
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 400 python3 benchmarks/experiments/tile_ab.py --passes 3 \
  --shapes c2k=8:2048:32:8:64:1,n2k=8:2048:32:8:64:0,oss16k=1:16384:64:8:64:1 \
  --configs b128=fp8q:64:192:128:2:p,r128=fp8q:64:192:128:2:p:REGS_FP8_MMA_SMALL=32/160,b160=fp8q:64:192:160:2:p:REGS_FP8_MMA_SMALL=32/160,fa3fp8=fa3fp8 \
  > $W/d64_160.log 2>&1
echo "tile_ab rc $?" >> $W/rc.txt

#!/usr/bin/env bash
# (next session; needs the FA3 peers installed: the two-call recipe) FP8 d 256 with the consumer warpgroup index
# made warp-uniform (docs/dev/experiments/fp8-mma-uniform-cg.patch: Q's descriptors in uniform registers, R2UR
# 96 -> 47, same spills; docs/dev/fa3_fp8_d256_sass.md predicts -2.2 %) against today's, FA3 FP8 beside; three passes
set -u
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
rm -rf /tmp/cgx && mkdir -p /tmp/cgx && cp -r templates /tmp/cgx/ && (cd /tmp/cgx && patch -p1 < $OLDPWD/docs/dev/experiments/fp8-mma-uniform-cg.patch) > $W/patch.log 2>&1
echo "patch rc $?" >> $W/rc.txt
timeout 300 python3 benchmarks/experiments/tile_ab.py --passes 3 \
  --shapes c4k=2:4096:16:4:256:1,n4k=2:4096:16:4:256:0 \
  --configs base=fp8q:256:128:128:2:p,cg=fp8q:256:128:128:2:p::/tmp/cgx/templates,fa3fp8=fa3fp8 \
  > $W/d256_cg.log 2>&1
echo "tile_ab rc $? at $SECONDS" >> $W/rc.txt

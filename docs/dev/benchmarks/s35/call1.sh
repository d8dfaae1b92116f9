#!/usr/bin/env bash
# s35 call A: peers part 1; the FP8 tensor-core GPU tests (check_mma's mean-error change); warm call B's d 64 tile kernels
set -u
W=$OUT/w; mkdir -p $W
( sleep 420; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader >> $W/clocks.txt
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers1.log 2>&1; echo "peers1 rc $? at $SECONDS" >> $W/rc.txt
timeout 200 python3 -m pytest -q -x tests/gpu/test_fp8_mma_gpu.py -p no:cacheprovider > $W/test_fp8_mma.log 2>&1; echo "fp8 mma tests rc $? at $SECONDS" >> $W/rc.txt
T=$(( 400 - SECONDS ))
timeout $T python3 benchmarks/experiments/tile_ab.py --passes 1 \
  --shapes c2k=8:2048:32:8:64:1 \
  --configs b128=fp8q:64:192:128:2:p,r128=fp8q:64:192:128:2:p:REGS_FP8_MMA_SMALL=32/160,b160=fp8q:64:192:160:2:p:REGS_FP8_MMA_SMALL=32/160 \
  > $W/warm.log 2>&1; echo "warm rc $? at $SECONDS" >> $W/rc.txt
kill $WD; cd $OUT && tar -czf w.tgz w

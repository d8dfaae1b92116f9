#!/usr/bin/env bash
# s35 call B: peers part 2; FP8 d 64 192 x 160 at 32 / 160 against 192 x 128 (and FA3 FP8), three passes; the carveout A/B (decode_profile)
set -u
W=$OUT/w; mkdir -p $W
( sleep 560; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader >> $W/clocks.txt
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers2.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers2.log)"
timeout 300 python3 benchmarks/experiments/tile_ab.py --passes 3 \
  --shapes c2k=8:2048:32:8:64:1,n2k=8:2048:32:8:64:0,oss16k=1:16384:64:8:64:1 \
  --configs b128=fp8q:64:192:128:2:p,r128=fp8q:64:192:128:2:p:REGS_FP8_MMA_SMALL=32/160,b160=fp8q:64:192:160:2:p:REGS_FP8_MMA_SMALL=32/160,fa3fp8=fa3fp8 \
  > $W/d64_160.log 2>&1
echo "tile_ab rc $? at $SECONDS" >> $W/rc.txt
S=decode_azure_b128_paged16,decode_trace_b32_paged16
for r in 1 2; do
  T=$(( 545 - SECONDS )); [ $T -lt 20 ] && break
  timeout $T python3 benchmarks/experiments/decode_profile.py --model llama3-8b --shapes $S --iters 30 > $W/base_$r.log 2>&1; echo "base $r rc $? at $SECONDS" >> $W/rc.txt
  T=$(( 545 - SECONDS )); [ $T -lt 20 ] && break
  KERNELGEN_SMEM_CARVEOUT=100 timeout $T python3 benchmarks/experiments/decode_profile.py --model llama3-8b --shapes $S --iters 30 > $W/c100_$r.log 2>&1; echo "c100 $r rc $? at $SECONDS" >> $W/rc.txt
done
kill $WD; cd $OUT && tar -czf w.tgz w

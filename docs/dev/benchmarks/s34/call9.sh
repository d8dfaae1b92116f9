#!/usr/bin/env bash
# call 9: the shared-memory carveout pinned (KERNELGEN_SMEM_CARVEOUT=100) against the default, per kernel (decode_profile), two rounds
set -u
W=$OUT/w; mkdir -p $W
( sleep 150; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
S=decode_azure_b128_paged16,decode_trace_b32_paged16
for r in 1 2; do
  T=$(( 145 - SECONDS )); [ $T -lt 15 ] && break
  timeout $T python3 benchmarks/experiments/decode_profile.py --model llama3-8b --shapes $S --iters 30 > $W/base_$r.log 2>&1; echo "base $r rc $? at $SECONDS" >> $W/rc.txt
  T=$(( 145 - SECONDS )); [ $T -lt 15 ] && break
  KERNELGEN_SMEM_CARVEOUT=100 timeout $T python3 benchmarks/experiments/decode_profile.py --model llama3-8b --shapes $S --iters 30 > $W/c100_$r.log 2>&1; echo "c100 $r rc $? at $SECONDS" >> $W/rc.txt
done
kill $WD; cd $OUT && tar -czf w.tgz w

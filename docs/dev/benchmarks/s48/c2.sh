#!/usr/bin/env bash
# Lease 2 (no carry): the MUFU mixing microbenchmark (tanh.approx / ex2.approx, benchmarks/experiments/mufu_mix.py)
# and the decode split sweep on the FP8 cache beside bf16 (decode_split_sweep.py --kv-dtype), trace b128.
set -u
export PYTHONPATH=$PWD
mkdir -p $OUT
for W in 8 16; do
  timeout 60 python3 benchmarks/experiments/mufu_mix.py --warps $W --json $OUT/mufu_w$W.json > $OUT/mufu_w$W.log 2>&1
  echo "mufu $W rc $? at $SECONDS" >> $OUT/rc.txt
done
for K in e4m3 bf16; do
  timeout 200 python3 benchmarks/experiments/decode_split_sweep.py --kv-dtype $K --shapes decode_trace_b128_paged16 \
    --splits 1,2,3,4,6,8,16 --rounds 5 --json $OUT/split_$K.json > $OUT/split_$K.log 2>&1
  echo "split $K rc $? at $SECONDS" >> $OUT/rc.txt
done

#!/usr/bin/env bash
# session 36 call 8: the page window (page ids of a tile's blocks from one load, shuffled per block) against HEAD 300ea86's
# templates (min share in both), decode A/B bf16 + e4m3; then the paged decode and FP8 GPU tests on it
set -u
W=$OUT/w; mkdir -p $W
( sleep 575; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader >> $W/clocks.txt
timeout 200 python3 benchmarks/experiments/decode_ab.py --configs old=.s36/old/templates,new=. \
  --shapes decode_azure_b128_paged16,decode_trace_b32_paged16,decode_trace_b128_paged16,decode_long_b8_128k,16x2048 --models llama3-8b,llama3-70b-tp8 \
  --caches bf16,e4m3 --passes 2 --json $W/ab.json > $W/ab.log 2>&1
echo "ab rc $? at $SECONDS" >> $W/rc.txt
T=$(( 560 - SECONDS )); [ $T -lt 60 ] && T=60
timeout $T python3 -m pytest -q -p no:cacheprovider tests/gpu/test_paged_decode_gpu.py tests/gpu/test_fp8_gpu.py -x > $W/tests.log 2>&1
echo "tests rc $? at $SECONDS" >> $W/rc.txt
kill $WD; cd $OUT && tar -czf w.tgz w

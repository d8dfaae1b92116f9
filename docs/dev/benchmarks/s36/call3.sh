#!/usr/bin/env bash
# session 36 call 3 (main + min_share + FP8 d256 uniform cg, uncommitted): decode A/B of the scheduler's minimum share
# (old = HEAD 2bbd70c's templates: its scheduler ignores min_share), then the GPU tests the change touches
set -u
W=$OUT/w; mkdir -p $W
( sleep 575; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader >> $W/clocks.txt
timeout 200 python3 benchmarks/experiments/decode_ab.py --configs old=.s36/old/templates,new=. \
  --shapes decode_azure_b128_paged16,decode_trace_b32_paged16,16x2048,4x8192,64x512,8x1024 --models llama3-8b,llama3-70b-tp8 \
  --caches bf16,e4m3 --passes 2 --json $W/ab.json > $W/ab.log 2>&1
echo "ab rc $? at $SECONDS" >> $W/rc.txt
T=$(( 560 - SECONDS )); [ $T -lt 60 ] && T=60
timeout $T python3 -m pytest -q -p no:cacheprovider tests/gpu/test_attention_gpu.py::test_scheduler_kernel_matches_reference tests/gpu/test_paged_decode_gpu.py \
  tests/gpu/test_plan_gpu.py tests/gpu/test_fp8_mma_gpu.py -x --junitxml=$W/junit.xml > $W/tests.log 2>&1
echo "tests rc $? at $SECONDS" >> $W/rc.txt
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader >> $W/clocks.txt
kill $WD; cd $OUT && tar -czf w.tgz w

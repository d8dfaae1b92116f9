#!/usr/bin/env bash
# session 36 call 4: the minimum share decided from the quantum's own work sum (no second reduction); A/B against HEAD's templates again
set -u
W=$OUT/w; mkdir -p $W
( sleep 575; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 200 python3 benchmarks/experiments/decode_ab.py --configs old=.s36/old/templates,new=. \
  --shapes decode_azure_b128_paged16,decode_trace_b32_paged16,16x2048,4x8192,64x512,8x1024 --models llama3-8b,llama3-70b-tp8 \
  --caches bf16,e4m3 --passes 2 --json $W/ab.json > $W/ab.log 2>&1
echo "ab rc $? at $SECONDS" >> $W/rc.txt
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_attention_gpu.py::test_scheduler_kernel_matches_reference \
  tests/gpu/test_paged_decode_gpu.py -x > $W/tests.log 2>&1
echo "tests rc $? at $SECONDS" >> $W/rc.txt
kill $WD; cd $OUT && tar -czf w.tgz w

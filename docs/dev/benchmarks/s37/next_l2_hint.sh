#!/usr/bin/env bash
# (next session) The L2 evict_first hint on the paged one-warp decode tiles, docs/dev/experiments/l2-evict-first-decode.patch
# (KV_EVICT_FIRST = NW == 1 && PAGED, and tests/test_l2_hint_cpu.py with its SASS guard against desc[UR1]).
# Before this call, on the CPU:  mkdir -p .s38/base && git archive HEAD templates | tar -x -C .s38/base
#   git apply docs/dev/experiments/l2-evict-first-decode.patch && python tests/dispatch_golden.py   (source hashes only)
#   python -m pytest -q tests/test_l2_hint_cpu.py tests/test_review_fp8q_cpu.py
# Then: the GPU tests of every path the hint touches (call 12 of session 37 died in test_fp8_gpu.py on the unrestricted
# hint: an illegal instruction from the packed FP8 kernels), and the A/B in the layer regime and the bench's write regime.
set -u
W=$OUT/w; mkdir -p $W
( sleep 570; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fp8_gpu.py tests/gpu/test_paged_decode_gpu.py \
  tests/gpu/test_fused_gpu.py tests/gpu/test_plan_gpu.py --junitxml=$W/junit.xml > $W/tests.log 2>&1
echo "tests rc $? at $SECONDS" >> $W/rc.txt
S=decode_azure_b128_paged16,decode_trace_b32_paged16,decode_trace_b128_paged16,decode_long_b8_128k
for f in layer write; do
T=$(( 560 - SECONDS )); [ $T -gt 40 ] && { timeout $T python3 benchmarks/experiments/decode_ab.py --configs base=.s38/base/templates,new=. \
  --shapes $S --models llama3-8b,llama3-70b-tp8 --caches bf16,e4m3 --passes 1 --flush $f --json $W/ab_$f.json > $W/ab_$f.log 2>&1
  echo "ab $f rc $? at $SECONDS" >> $W/rc.txt; }
done
kill $WD; cd $OUT && tar -czf w.tgz w

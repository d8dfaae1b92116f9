#!/usr/bin/env bash
# session 38 call 1: the L2 evict_first hint on paged one-warp decode tiles (l2-evict-first-decode.patch applied):
# GPU tests of every path it touches, then decode_ab in the layer and the write regimes; then ncu of the
# chunked prefill at pages 16 / 64 / packed (issue 22's 0.77x paged-16 entry): where the consumers wait.
set -u
W=$OUT/w; mkdir -p $W
( sleep 565; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > $W/smi.txt
timeout 260 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fp8_gpu.py tests/gpu/test_paged_decode_gpu.py \
  tests/gpu/test_fused_gpu.py tests/gpu/test_plan_gpu.py --junitxml=$W/junit.xml > $W/tests.log 2>&1
echo "tests rc $? at $SECONDS" >> $W/rc.txt
S=decode_azure_b128_paged16,decode_trace_b32_paged16,decode_trace_b128_paged16,decode_long_b8_128k
for f in layer write; do
T=$(( 430 - SECONDS )); [ $T -gt 40 ] && { timeout $T python3 benchmarks/experiments/decode_ab.py --configs base=.s38/base/templates,new=. \
  --shapes $S --models llama3-8b,llama3-70b-tp8 --caches bf16,e4m3 --passes 1 --flush $f --json $W/ab_$f.json > $W/ab_$f.log 2>&1
  echo "ab $f rc $? at $SECONDS" >> $W/rc.txt; }
done
for s in chunked_p16 chunked_p64 chunked_packed; do
  T=$(( 555 - SECONDS )); [ $T -gt 20 ] || break
  timeout $T ncu --profile-from-start off --clock-control none -k regex:kg_attention_fwd \
    --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section SourceCounters \
    --page source --print-source sass --csv python3 benchmarks/experiments/profile_vs_peers.py --shapes $s > $W/src_$s.csv 2> $W/src_$s.err
  timeout 60 ncu --profile-from-start off --clock-control none -k regex:kg_attention_fwd \
    --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy --csv \
    python3 benchmarks/experiments/profile_vs_peers.py --shapes $s > $W/ncu_$s.csv 2> $W/ncu_$s.err
  echo "ncu $s rc $? at $SECONDS" >> $W/rc.txt
done
kill $WD; cd $OUT && tar -czf w.tgz w

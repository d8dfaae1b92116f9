#!/usr/bin/env bash
# Fiftieth session, call 3 (no carry; any Hopper): the code to submit (FP8 pack-GQA at head dim 64 below
# 1024 tokens, the 16-bit 192-row tile packed at any length): GPU tests of the Hopper kernel, pack-GQA,
# FP8 tensor-core tile, sinks, quantised q, plans; then more pack_gqa_ab points (FP8 2k / 8k causal,
# 4k non-causal; bf16 at 4 query heads a KV head).  About 500 s.
set -u
export PYTHONPATH=$PWD
W=$OUT/w; mkdir -p $W
nvidia-smi --query-gpu=name --format=csv,noheader > $W/gpu.txt
timeout 400 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_hopper_pack_gqa_gpu.py tests/gpu/test_fp8_mma_gpu.py \
  tests/gpu/test_hopper_gpu.py tests/gpu/test_sinks_gpu.py tests/gpu/test_quant_q_gpu.py tests/gpu/test_plan_gpu.py \
  > $W/tests.log 2>&1
echo "tests rc $? at $SECONDS" >> $W/rc.txt
tail -3 $W/tests.log
ab() {  # name, args...
  local n=$1; shift
  [ $SECONDS -lt 540 ] || return
  timeout 45 python3 benchmarks/experiments/pack_gqa_ab.py --passes 3 --json $W/$n.json "$@" > $W/$n.log 2>&1
  echo "$n rc $? at $SECONDS: $(grep -o '"packed_over_unpacked": [0-9.]*' $W/$n.log | cut -d' ' -f2 | tr '\n' ' ')" >> $W/rc.txt
}
ab fp8_2k --dtype e4m3 --shapes long_gpt-oss --long 2048
ab fp8_8k --dtype e4m3 --shapes long_gpt-oss --long 8192
ab fp8_nc4k --dtype e4m3 --no-causal --shapes long_gpt-oss --long 4096
ab q4_4k --heads 32/8 --shapes long_gpt-oss --long 4096
ab q4_16k --heads 32/8 --shapes long_gpt-oss --long 16384
ab q4_trace --heads 32/8 --shapes trace_gpt-oss
cat $W/rc.txt
grep -h -o '"max_abs_diff": [0-9.e-]*' $W/*.log | sort | uniq -c
cd $OUT && tar -czf w.tgz w

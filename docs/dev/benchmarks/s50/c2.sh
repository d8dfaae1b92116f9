#!/usr/bin/env bash
# Fiftieth session, call 2 (no carry; any Hopper): pack-GQA on the FP8 tensor-core tile at head dim 64
# (new): its GPU tests, then packed / unpacked A/B (pack_gqa_ab.py) for FP8 (gpt-oss's varlen trace and
# one request of 4k / 16k) and for the bf16 192-row tile where the automatic rule does not pack yet:
# non-causal, a 128-token window, four chunks of 2048.  About 400 s.
set -u
export PYTHONPATH=$PWD
W=$OUT/w; mkdir -p $W
nvidia-smi --query-gpu=name --format=csv,noheader > $W/gpu.txt
timeout 330 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fp8_mma_gpu.py tests/gpu/test_hopper_pack_gqa_gpu.py \
  tests/gpu/test_quant_q_gpu.py > $W/tests.log 2>&1
echo "tests rc $? at $SECONDS" >> $W/rc.txt
tail -3 $W/tests.log
ab() {  # name, args...
  local n=$1; shift
  timeout 60 python3 benchmarks/experiments/pack_gqa_ab.py --passes 3 --json $W/$n.json "$@" > $W/$n.log 2>&1
  echo "$n rc $? at $SECONDS: $(grep -o '"packed_over_unpacked": [0-9.]*' $W/$n.log | cut -d' ' -f2 | tr '\n' ' ')" >> $W/rc.txt
}
ab fp8_trace --dtype e4m3 --shapes trace_gpt-oss
ab fp8_16k --dtype e4m3 --shapes long_gpt-oss --long 16384
ab fp8_4k --dtype e4m3 --shapes long_gpt-oss --long 4096
ab nc_16k --no-causal --shapes long_gpt-oss --long 16384
ab nc_4k --no-causal --shapes long_gpt-oss --long 4096
ab w128_16k --shapes long_gpt-oss-w128 --long 16384
ab w128_4k --shapes long_gpt-oss-w128 --long 4096
ab chunk2048 --shapes chunk2048_gpt-oss
ab fp8_16k_b --dtype e4m3 --shapes long_gpt-oss --long 16384
ab fp8_trace_b --dtype e4m3 --shapes trace_gpt-oss
cat $W/rc.txt
grep -h -o '"max_abs_diff": [0-9.e-]*' $W/*.log | sort | uniq -c
cd $OUT && tar -czf w.tgz w

#!/usr/bin/env bash
# FP8 decode tile for 16 (or 14) CTAs an SM (heuristics.FP8_DECODE_MIN_BLOCKS; at head dim 128 Q's
# fragments then wait in shared memory, AttentionSpec.q_fragments_at_128: 128 registers, no spills)
# against today's 12 (Q in registers, 166 registers), decode_ab.py on e4m3 caches (and bf16 rows as a
# control: unchanged kernels), then the FP8 / decode / fused / plan GPU tests with 16 forced.
# No carry; about 400 s.  Results in $OUT/w (one w.tgz).
set -u
export PYTHONPATH=$PWD
W=$OUT/w; mkdir -p $W
timeout 200 python3 benchmarks/experiments/decode_ab.py --configs head=.,mb16=.@mb16,mb14=.@mb14 --passes 3 \
  --shapes decode_trace_b128_paged16,decode_long_b8_128k,decode_trace_b32_paged16 \
  --models llama3-8b,llama3-70b-tp8,gpt-oss --caches e4m3 --json $W/qf_ab.json > $W/qf_ab.log 2>&1
echo "ab rc $? at $SECONDS" >> $W/rc.txt
tail -27 $W/qf_ab.log
timeout ${T:-330} python3 -c "
import sys, pytest
from kernelgen.selection import heuristics
heuristics.FP8_DECODE_MIN_BLOCKS = 16
sys.exit(pytest.main(['-q', '-x', '-p', 'no:cacheprovider', 'tests/gpu/test_fp8_gpu.py', 'tests/gpu/test_paged_decode_gpu.py',
                      'tests/gpu/test_fused_gpu.py', 'tests/gpu/test_plan_gpu.py', '-k', 'fp8 or e4m3 or e5m2 or kv8']))" > $W/tests_mb16.log 2>&1
echo "tests rc $? at $SECONDS" >> $W/rc.txt
tail -4 $W/tests_mb16.log; cat $W/rc.txt
cd $OUT && tar -czf w.tgz w

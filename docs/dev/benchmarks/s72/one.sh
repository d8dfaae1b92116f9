#!/usr/bin/env bash
# Seventy-second session, first call (carry [".devcache_new", ".devcache_lean", ".xd"]; any Hopper GPU):
# 1. the GPU tests of quantize_q (tests/gpu/test_quant_q_gpu.py: the new mixed step whose fused kernel runs its
#    long class on the FP8 tensor cores, its short class on the 16-bit q);
# 2. the bench's mixed_trace_fp8 and mixed_trace_fp8_qq entries (serial / two_streams peers), the qq one also
#    with 44 short-first CTAs (KERNELGEN_MIXED_SHORT_CTAS);
# 3. s71/ab2.sh's A/B of the KG_KT8_LEAN keys-as-rows decode loop (mixed_sweep, bench batch), decode_ab of the
#    standalone FP8 decode (KG_LEAN_MAX), then the FP8 / fused GPU test files built with both defines.
# L s in all (default 500).
set -u
W=$OUT/w; mkdir -p $W
L=${L:-500}
( sleep $L; cd $OUT && tar -czf w.tgz w ) > /dev/null 2>&1 & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $W/gpu.txt
for d in .devcache_new .devcache_lean; do timeout 20 python3 tools/device_cache.py unpack --dir $d >> $W/devcache.log 2>&1; done
python3 -m pip install --no-index --no-deps --target /tmp/xd .xd/*.whl > $W/xd.log 2>&1
left() { echo $(( L - 10 - SECONDS )); }
PYTHONPATH="$PWD:/tmp/xd" timeout 150 python3 -m pytest tests/gpu/test_quant_q_gpu.py -m gpu -n 4 -q -rf \
  -p no:cacheprovider > $W/qq_tests.log 2>&1; echo "qq tests rc $? at $SECONDS" >> $W/rc.txt
B="python3 -m kernelgen bench --flex off --budget 0"
[ $(left) -gt 60 ] && { timeout $(left) $B --json $W/mixed.json --suite mixed --dtype e4m3 --model llama3-8b \
  --only mixed_trace_fp8,mixed_trace_fp8_qq > $W/mixed.log 2>&1; echo "mixed rc $? at $SECONDS" >> $W/rc.txt; }
[ $(left) -gt 50 ] && { KERNELGEN_MIXED_SHORT_CTAS=44 timeout $(left) $B --json $W/mixed44.json --suite mixed \
  --dtype e4m3 --model llama3-8b --only mixed_trace_fp8_qq > $W/mixed44.log 2>&1; echo "mixed44 rc $? at $SECONDS" >> $W/rc.txt; }
[ $(left) -gt 60 ] && { timeout $(left) python3 benchmarks/experiments/mixed_sweep.py --cases bench --kv-dtype e4m3 \
  --short-ctas 33 --rows 8 --defines ';KG_KT8_LEAN' --rounds 5 --json $W/sweep.json > $W/sweep.log 2>&1; echo "sweep rc $? at $SECONDS" >> $W/rc.txt; }
[ $(left) -gt 40 ] && { timeout $(left) python3 benchmarks/experiments/decode_ab.py \
  --configs 'r16=.,r16lean=.@dKG_LEAN_MAX,r8lean=.@r8+dKG_KT8_LEAN' --shapes decode_trace_b128_paged16 --models llama3-8b,llama3-70b-tp8 --caches e4m3 --passes 2 \
  --flush write --json $W/dec.json > $W/dec.log 2>&1; echo "decode_ab rc $? at $SECONDS" >> $W/rc.txt; }
[ $(left) -gt 60 ] && KERNELGEN_DEFINES=KG_KT8_LEAN,KG_LEAN_MAX PYTHONPATH="$PWD:/tmp/xd" timeout $(( $(left) - 5 )) python3 -m pytest tests/gpu/test_fp8_gpu.py \
  tests/gpu/test_fused_gpu.py -m gpu -n 8 -q -rf -p no:cacheprovider > $W/lean_tests.log 2>&1; echo "lean tests rc $? at $SECONDS" >> $W/rc.txt
kill $WD; cat $W/gpu.txt $W/rc.txt; tail -n 4 $W/qq_tests.log; grep -h "^| [a-z]" $W/mixed*.log | grep -v "^| name\|^| entry\|^| ---\|^| peer" | cut -c1-200
grep -E "^ *(serial|fused|decode_only|prefill_only)" $W/sweep.log; tail -n 4 $W/dec.log; tail -n 3 $W/lean_tests.log
cd $OUT && tar -czf w.tgz w

#!/usr/bin/env bash
# Seventy-third session, call 1 (carry [".xd", ".devcache_new"]; any Hopper GPU, the timings meant for an H200):
# s72/two.sh's GPU tests (quantize_q with the plan test's per-class check, the FP8 and fused test files), the
# bench's mixed_trace_fp8 / mixed_trace_fp8_qq entries (qq at its default 44 short-first CTAs), on an H200 the
# FP8 and bf16 decode rows of issue 24 (fp8_decode_b128_paged16, decode_trace_b128_paged16), then decode_ab of
# the standalone FP8 decode on the 16-row tile against the keys-as-rows tile (@r8, @r8+mb16; write flush, two
# passes) on four presets, then qq at 33 / 55 short-first CTAs.  L s in all (default 330).
set -u
W=$OUT/w; mkdir -p $W
L=${L:-330}
( sleep $L; cd $OUT && tar -czf w.tgz w ) > /dev/null 2>&1 & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $W/gpu.txt
[ -d .devcache_new ] && timeout 20 python3 tools/device_cache.py unpack --dir .devcache_new > $W/devcache.log 2>&1
python3 -m pip install --no-index --no-deps --target /tmp/xd .xd/*.whl > $W/xd.log 2>&1
left() { echo $(( L - 10 - SECONDS )); }
PYTHONPATH="$PWD:/tmp/xd" timeout 170 python3 -m pytest tests/gpu/test_quant_q_gpu.py tests/gpu/test_fp8_gpu.py \
  tests/gpu/test_fused_gpu.py -m gpu -n 8 -q -rf -p no:cacheprovider > $W/tests.log 2>&1; echo "tests rc $? at $SECONDS" >> $W/rc.txt
B="python3 -m kernelgen bench --flex off --budget 0"
[ $(left) -gt 30 ] && { timeout $(left) $B --json $W/mixed.json --suite mixed --dtype e4m3 --model llama3-8b \
  --only mixed_trace_fp8,mixed_trace_fp8_qq > $W/mixed.log 2>&1; echo "mixed rc $? at $SECONDS" >> $W/rc.txt; }
if grep -q H200 $W/gpu.txt && [ $(left) -gt 30 ]; then
  timeout $(left) $B --json $W/decode.json --suite decode --dtype bf16,e4m3 --model llama3-8b \
    --only 'fp8_decode_b128_paged16,decode_trace_b128_paged16' > $W/decode.log 2>&1; echo "decode rc $? at $SECONDS" >> $W/rc.txt
fi
[ $(left) -gt 40 ] && { timeout $(left) python3 benchmarks/experiments/decode_ab.py --configs 'r16=.,r8=.@r8,r8mb16=.@r8+mb16' \
  --shapes decode_trace_b128_paged16,decode_trace_b32_paged16 --models llama3-8b,qwen2.5-7b,gpt-oss,llama3-70b-tp8 \
  --caches e4m3 --passes 2 --flush write --json $W/dec_ab.json > $W/dec_ab.log 2>&1; echo "decode_ab rc $? at $SECONDS" >> $W/rc.txt; }
for k in 33 55; do
  [ $(left) -gt 20 ] || break
  KERNELGEN_MIXED_SHORT_CTAS=$k timeout $(left) $B --json $W/qq$k.json --suite mixed --dtype e4m3 --model llama3-8b \
    --only mixed_trace_fp8_qq > $W/qq$k.log 2>&1; echo "qq k$k rc $? at $SECONDS" >> $W/rc.txt
done
kill $WD; cat $W/gpu.txt $W/rc.txt; tail -n 3 $W/tests.log
for f in $W/mixed.json $W/qq*.json; do [ -f $f ] && python3 -c "
import json; d=json.load(open('$f'))
for e in d['benchmarks']: print('$(basename $f)', e['name'], round(e['us']), {k: round(v) for k, v in e['peers'].items()}, round(e['us'] / e['peers']['serial'], 3))"; done
grep -hE "^\| (fp8_decode|decode_trace)" $W/decode.log 2>/dev/null | head -4
grep -E "^(llama|qwen|gpt|mistral)" $W/dec_ab.log 2>/dev/null
cd $OUT && tar -czf w.tgz w

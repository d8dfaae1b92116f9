#!/usr/bin/env bash
# Seventy-second session, second call (carry [".xd", ".devcache_new"]; any Hopper GPU, the timings meant for an H200): the GPU tests
# of quantize_q (the mixed plan test now checks each class against its own reference), the FP8 and fused test
# files (the keys-as-rows FP8 decode tile over pages of 8-64 keys on the default build), then the bench's
# mixed_trace_fp8 and mixed_trace_fp8_qq entries, the qq one at its default (44 on 132 SMs) and 33 / 55 / 66 short-first CTAs
# (KERNELGEN_MIXED_SHORT_CTAS).  L s in all (default 300).
set -u
W=$OUT/w; mkdir -p $W
L=${L:-300}
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
for k in 33 55 66; do
  [ $(left) -gt 20 ] || break
  KERNELGEN_MIXED_SHORT_CTAS=$k timeout $(left) $B --json $W/qq$k.json --suite mixed --dtype e4m3 --model llama3-8b \
    --only mixed_trace_fp8_qq > $W/qq$k.log 2>&1; echo "qq k$k rc $? at $SECONDS" >> $W/rc.txt
done
kill $WD; cat $W/gpu.txt $W/rc.txt; tail -n 3 $W/tests.log
for f in $W/mixed.json $W/qq*.json; do [ -f $f ] && python3 -c "
import json; d=json.load(open('$f'))
for e in d['benchmarks']: print('$(basename $f)', e['name'], round(e['us']), {k: round(v) for k, v in e['peers'].items()}, round(e['us'] / e['peers']['serial'], 3))"; done
cd $OUT && tar -czf w.tgz w

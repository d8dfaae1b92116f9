#!/usr/bin/env bash
# Seventy-first session (carry [".devcache_new", ".devcache_lean", ".xd"]): the keys-as-rows FP8 decode loop's
# KG_KT8_LEAN form (the vote before the column max: its shuffles, correction and O rescale only when some lane's
# score exceeds the running max; page ids a block ahead) against the default build: mixed_sweep (bench and heavy
# batches, e4m3 cache, 8-row tile, 33 short-first CTAs, --defines ';KG_KT8_LEAN': both builds interleaved in one
# process), then the FP8 and fused GPU test files built with KERNELGEN_DEFINES=KG_KT8_LEAN,KG_LEAN_MAX (the 16-row
# FP8 tile's vote too), then decode_ab (the standalone FP8 decode: the 16-row tile, its KG_LEAN_MAX build, the lean
# keys-as-rows one). L s in all (default 300); CASES the
# sweep's batches (default bench,heavy).
set -u
W=$OUT/w; mkdir -p $W
L=${L:-300}
( sleep $L; cd $OUT && tar -czf w.tgz w ) > /dev/null 2>&1 & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $W/gpu.txt
for d in .devcache_new .devcache_lean; do timeout 20 python3 tools/device_cache.py unpack --dir $d >> $W/devcache.log 2>&1; done
python3 -m pip install --no-index --no-deps --target /tmp/xd .xd/*.whl > $W/xd.log 2>&1
left() { echo $(( L - 10 - SECONDS )); }
[ $(left) -gt 40 ] && { timeout $(left) python3 benchmarks/experiments/mixed_sweep.py --cases ${CASES:-bench,heavy} --kv-dtype e4m3 \
  --short-ctas 33 --rows 8 --defines ';KG_KT8_LEAN' --rounds 5 --json $W/sweep.json > $W/sweep.log 2>&1; echo "sweep rc $? at $SECONDS" >> $W/rc.txt; }
[ $(left) -gt 60 ] && KERNELGEN_DEFINES=KG_KT8_LEAN,KG_LEAN_MAX PYTHONPATH="$PWD:/tmp/xd" timeout $(( $(left) - 20 )) python3 -m pytest tests/gpu/test_fp8_gpu.py \
  tests/gpu/test_fused_gpu.py -m gpu -n 8 -q -rf -p no:cacheprovider > $W/tests.log 2>&1; echo "tests rc $? at $SECONDS" >> $W/rc.txt
[ $(left) -gt 30 ] && { timeout $(left) python3 benchmarks/experiments/decode_ab.py \
  --configs 'r16=.,r16lean=.@dKG_LEAN_MAX,r8lean=.@r8+dKG_KT8_LEAN' --shapes decode_trace_b128_paged16 --models llama3-8b,llama3-70b-tp8 --caches e4m3 --passes 2 \
  --flush write --json $W/dec.json > $W/dec.log 2>&1; echo "decode_ab rc $? at $SECONDS" >> $W/rc.txt; }
kill $WD; cat $W/gpu.txt $W/rc.txt; tail -n 3 $W/tests.log; grep -E "^ *(serial|fused|decode_only|prefill_only) " $W/sweep.log
tail -n 4 $W/dec.log
cd $OUT && tar -czf w.tgz w

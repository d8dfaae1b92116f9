#!/usr/bin/env bash
# Seventieth session, a last lease (carry [".devcache_bench", ".xd"]): the FP8 and fused GPU test files on this tree
# (the keys-as-rows FP8 tile's new test among them), then on an H200 issue 24's FP8 rows that need no peer
# (mixed_trace_fp8 against its serial peer; the FP8 decode against the copy roof and its bf16 call), on an H100
# the standalone FP8 decode on the keys-as-rows tile (decode_ab @r8, @r8+mb16, write flush) and the mixed entry.
# L s in all (default 380).
set -u
W=$OUT/w; mkdir -p $W
L=${L:-380}
( sleep $L; cd $OUT && tar -czf w.tgz w ) > /dev/null 2>&1 & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $W/gpu.txt
timeout 20 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
python3 -m pip install --no-index --no-deps --target /tmp/xd .xd/*.whl > $W/xd.log 2>&1
left() { echo $(( L - 10 - SECONDS )); }
PYTHONPATH="$PYTHONPATH:/tmp/xd" timeout 170 python3 -m pytest tests/gpu/test_fp8_gpu.py tests/gpu/test_fused_gpu.py \
  -m gpu -n 6 -q -rf -p no:cacheprovider > $W/tests.log 2>&1; echo "tests rc $? at $SECONDS" >> $W/rc.txt
B="python3 -m kernelgen bench --flex off --budget 0"
if grep -q H200 $W/gpu.txt; then
  timeout $(left) $B --json $W/mixed.json --suite mixed --dtype e4m3 --model llama3-8b --only mixed_trace_fp8 \
    > $W/mixed.log 2>&1; echo "mixed rc $? at $SECONDS" >> $W/rc.txt
  [ $(left) -gt 30 ] && { timeout $(left) $B --json $W/decode.json --suite decode --dtype bf16,e4m3 --model llama3-8b \
    --only 'fp8_decode_b128_paged16,decode_trace_b128_paged16' > $W/decode.log 2>&1; echo "decode rc $? at $SECONDS" >> $W/rc.txt; }
else
  timeout $(left) python3 benchmarks/experiments/decode_ab.py --configs 'r16=.,r8=.@r8,r8mb16=.@r8+mb16' \
    --shapes decode_trace_b128_paged16 --models llama3-8b,llama3-70b-tp8 --caches e4m3 --passes 2 --flush write \
    --json $W/dec_write.json > $W/dec_write.log 2>&1; echo "decode_ab rc $? at $SECONDS" >> $W/rc.txt
  [ $(left) -gt 30 ] && { timeout $(left) $B --json $W/mixed.json --suite mixed --dtype e4m3 --model llama3-8b \
    --only mixed_trace_fp8 > $W/mixed.log 2>&1; echo "mixed rc $? at $SECONDS" >> $W/rc.txt; }
fi
kill $WD; cat $W/gpu.txt $W/rc.txt; tail -n 4 $W/tests.log; tail -n 14 $W/dec_write.log 2>/dev/null
grep -hE "^\| (mixed_trace_fp8|fp8_decode|decode_trace)" $W/*.log | head -8
cd $OUT && tar -czf w.tgz w

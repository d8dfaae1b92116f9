#!/usr/bin/env bash
# Seventieth session, call 5 (carry [".devcache_bench"]): the standalone FP8 decode on the keys-as-rows tile
# (decode_ab @r8, and @r8+mb16: 124 registers allow 16 CTAs an SM) against the 16-row tile, llama3-8b and
# llama3-70b-tp8 trace batches, e4m3, write flush and a layer's state; then the bench's mixed_trace_fp8 entry on
# this tree (keys-as-rows decode tile, 33 short-first CTAs).  L s in all (default 300).
set -u
W=$OUT/w; mkdir -p $W
L=${L:-300}
( sleep $L; cd $OUT && tar -czf w.tgz w ) > /dev/null 2>&1 & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $W/gpu.txt
timeout 20 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
left() { echo $(( L - 10 - SECONDS )); }
for F in write layer; do
  timeout $(left) python3 benchmarks/experiments/decode_ab.py --configs 'r16=.,r8=.@r8,r8mb16=.@r8+mb16' \
    --shapes decode_trace_b128_paged16 --models llama3-8b,llama3-70b-tp8 --caches e4m3 --passes 2 --flush $F \
    --json $W/dec_$F.json > $W/dec_$F.log 2>&1; echo "decode $F rc $? at $SECONDS" >> $W/rc.txt
done
[ $(left) -gt 40 ] && { timeout $(left) python3 -m kernelgen bench --flex off --budget 0 --suite mixed --dtype e4m3 \
  --model llama3-8b --only mixed_trace_fp8 --json $W/mixed.json > $W/mixed.log 2>&1; echo "mixed rc $? at $SECONDS" >> $W/rc.txt; }
kill $WD; cat $W/gpu.txt $W/rc.txt; tail -n 12 $W/dec_write.log $W/dec_layer.log; grep -E "^\| mixed_trace_fp8" $W/mixed.log | head -3
cd $OUT && tar -czf w.tgz w

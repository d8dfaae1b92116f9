#!/usr/bin/env bash
# Seventy-first session (carry [".devcache_bench", ".devcache_new", ".devcache_oldt", ".xd"]): the keys-as-rows FP8
# decode tile's page ids read a block ahead, and its max shuffles, correction and O rescale skipped when no lane's
# score exceeds the running max, against the
# templates of HEAD before them (.devcache_oldt/templates.tar, run from a copy of the package in /tmp/old):
# mixed_sweep (bench and heavy batches, e4m3 cache, 8-row tile, 33 short-first CTAs) old / new / old / new in
# separate processes, the new kernel's timeline, the FP8 and fused GPU test files on the new code, then ncu
# source counters of the new fused kernel. L s in all (default 400).
set -u
W=$OUT/w; mkdir -p $W
L=${L:-400}
( sleep $L; cd $OUT && tar -czf w.tgz w ) > /dev/null 2>&1 & WD=$!
export KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $W/gpu.txt
for d in .devcache_bench .devcache_new; do timeout 20 python3 tools/device_cache.py unpack --dir $d >> $W/devcache.log 2>&1; done
rm -rf /tmp/old && mkdir -p /tmp/old && cp -r kernelgen benchmarks /tmp/old/ && tar -xf .devcache_oldt/templates.tar -C /tmp/old
python3 -m pip install --no-index --no-deps --target /tmp/xd .xd/*.whl > $W/xd.log 2>&1
left() { echo $(( L - 10 - SECONDS )); }
SW="benchmarks/experiments/mixed_sweep.py --cases bench,heavy --kv-dtype e4m3 --short-ctas 33 --rows 8 --rounds 5"
ab() {
  ( cd /tmp/old && PYTHONPATH=/tmp/old timeout $(left) python3 $SW --json $W/old$1.json > $W/old$1.log 2>&1 ); echo "old $1 rc $? at $SECONDS" >> $W/rc.txt
  PYTHONPATH=$PWD timeout $(left) python3 $SW --json $W/new$1.json > $W/new$1.log 2>&1; echo "new $1 rc $? at $SECONDS" >> $W/rc.txt
}
ab 1
[ $(left) -gt 80 ] && { PYTHONPATH="$PWD:/tmp/xd" timeout $(left) python3 -m pytest tests/gpu/test_fp8_gpu.py tests/gpu/test_fused_gpu.py \
  -m gpu -n 6 -q -rf -p no:cacheprovider > $W/tests.log 2>&1; echo "tests rc $? at $SECONDS" >> $W/rc.txt; }
grep -q H200 $W/gpu.txt && [ $(left) -gt 40 ] && { PYTHONPATH=$PWD timeout $(left) python3 -m kernelgen bench --flex off --budget 0 \
  --json $W/mixed.json --suite mixed --dtype e4m3 --model llama3-8b --only mixed_trace_fp8 > $W/mixed.log 2>&1; echo "mixed rc $? at $SECONDS" >> $W/rc.txt; }
[ $(left) -gt 90 ] && ab 2
[ $(left) -gt 40 ] && { PYTHONPATH=$PWD timeout $(left) python3 benchmarks/experiments/mixed_timeline.py --case bench --kv-dtype e4m3 \
  --short-ctas 33 > $W/tl.log 2>&1; echo "timeline rc $? at $SECONDS" >> $W/rc.txt; }
[ $(left) -gt 60 ] && { PYTHONPATH=$PWD timeout $(left) python3 benchmarks/experiments/decode_ab.py --configs 'r16=.,r8=.@r8' \
  --shapes decode_trace_b128_paged16 --models llama3-8b,llama3-70b-tp8 --caches e4m3 --passes 2 --flush write \
  --json $W/dec.json > $W/dec.log 2>&1; echo "decode_ab rc $? at $SECONDS" >> $W/rc.txt; }
if [ $(left) -gt 50 ]; then
  PYTHONPATH=$PWD timeout $(left) ncu --profile-from-start off --clock-control none -k regex:kg_attention_fused -c 1 --import-source no \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight -o $W/fused python3 benchmarks/experiments/mixed_profile.py \
    --case bench --kv-dtype e4m3 --label fused_k33 > $W/ncu.log 2>&1; echo "ncu rc $? at $SECONDS" >> $W/rc.txt
  ncu -i $W/fused.ncu-rep --page source --csv --print-source sass 2> /dev/null | gzip > $W/fused_sass.csv.gz
  ncu -i $W/fused.ncu-rep --page details --csv 2> /dev/null | gzip > $W/fused_details.csv.gz; rm -f $W/fused.ncu-rep
fi
kill $WD; cat $W/gpu.txt $W/rc.txt; grep -h "fused_k33\|serial " $W/old*.log $W/new*.log; tail -n 3 $W/tests.log
grep -A3 "^fused_k33" $W/tl.log | cut -c1-400; tail -n 4 $W/dec.log; grep -h "^| mixed_trace_fp8" $W/mixed.log
cd $OUT && tar -czf w.tgz w

#!/usr/bin/env bash
# Seventy-fourth session: every row of issue 24 in ONE call of an H200 lease (carry [".peers_fa3/manifest.json", ".xd",
# ".peers_fa3/part1", ".devcache_new"]).  FA3 alone is the FP8 rows' peer (FA4 takes no FP8), and its wheel packs
# to one 9 MB part (`mkdir -p .peers_fa3/wheels; cp .peers/wheels/fa3_fwd-*.whl .peers_fa3/wheels/;
# python tools/peer_wheels.py pack --dir .peers_fa3`), so no second call is needed for the peers.  Rows:
# mixed_trace_fp8 / mixed_trace_fp8_qq (serial peers in the same process), fp8_decode_b128_paged16 with
# decode_trace_b128_paged16 (the 1.8x row), then fp8_prefill_* against FA3 FP8 for llama3-8b, gpt-oss and gemma2-9b.
# On another GPU (an H100 comes more often than an H200) it runs every GPU test instead (s68/tests.sh, T s,
# default 300; carry ".xd" too for pytest-xdist).  L s in all (default 320).
set -u
W=$OUT/w; mkdir -p $W
L=${L:-320}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $W/gpu.txt
if ! grep -q H200 $W/gpu.txt; then
  cat $W/gpu.txt; echo "not an H200: every GPU test instead"
  PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache timeout 20 python3 tools/device_cache.py unpack --dir .devcache_new > $W/devcache.log 2>&1
  T=${T:-300} bash docs/dev/benchmarks/s68/tests.sh; exit 0
fi
( sleep $L; cd $OUT && tar -czf w.tgz w ) > /dev/null 2>&1 & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 20 python3 tools/device_cache.py unpack --dir .devcache_new > $W/devcache.log 2>&1
timeout 60 python3 tools/peer_wheels.py install --dir .peers_fa3 --dest /tmp/kernelgen-peers-fa3 > $W/peers.log 2>&1
echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
left() { echo $(( L - 8 - SECONDS )); }
B="python3 -m kernelgen bench --flex off --budget 0"
timeout $(left) $B --json $W/mixed.json --suite mixed --dtype e4m3 --model llama3-8b \
  --only mixed_trace_fp8,mixed_trace_fp8_qq > $W/mixed.log 2>&1; echo "mixed rc $? at $SECONDS" >> $W/rc.txt
[ $(left) -gt 30 ] && { timeout $(left) $B --json $W/decode.json --suite decode --dtype bf16,e4m3 --model llama3-8b \
  --only 'fp8_decode_b128_paged16,decode_trace_b128_paged16' > $W/decode.log 2>&1; echo "decode rc $? at $SECONDS" >> $W/rc.txt; }
for M in llama3-8b gpt-oss gemma2-9b; do
  [ $(left) -gt 40 ] || break
  timeout $(left) $B --json $W/fp8_$M.json --suite prefill --dtype e4m3 --model $M --only 'fp8_prefill_*' \
    > $W/fp8_$M.log 2>&1; echo "fp8 $M rc $? at $SECONDS" >> $W/rc.txt
done
kill $WD; cat $W/gpu.txt $W/rc.txt; tail -n 2 $W/peers.log
python3 -c "
import json; d=json.load(open('$W/mixed.json'))
for e in d['benchmarks']: print(e['name'], round(e['us']), {k: round(v) for k, v in e['peers'].items()}, round(e['us'] / e['peers']['serial'], 3))"
grep -h "^| [a-z]" $W/decode.log $W/fp8_*.log | grep -v "^| name\|^| entry\|^| ---\|^| peer" | cut -c1-200
cd $OUT && tar -czf w.tgz w

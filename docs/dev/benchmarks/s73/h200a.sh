#!/usr/bin/env bash
# Seventy-third session, H200 call A (carry [".peers/manifest.json", ".peers/part1", ".devcache_new"]): on an H200
# the peers' part 1 stashed (rc 3 expected; h200b.sh with part 2 next), then issue 24's rows that need no peer:
# mixed_trace_fp8 and mixed_trace_fp8_qq (their serial peers in the same process), fp8_decode_b128_paged16 and
# decode_trace_b128_paged16.  On another GPU it stops at once.  L s in all (default 200).
set -u
W=$OUT/w; mkdir -p $W
L=${L:-200}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $W/gpu.txt
grep -q H200 $W/gpu.txt || { cat $W/gpu.txt; echo "not an H200: stopped"; exit 0; }
( sleep $L; cd $OUT && tar -czf w.tgz w ) > /dev/null 2>&1 & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 20 python3 tools/device_cache.py unpack --dir .devcache_new > $W/devcache.log 2>&1
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
left() { echo $(( L - 10 - SECONDS )); }
B="python3 -m kernelgen bench --flex off --budget 0"
timeout $(left) $B --json $W/mixed.json --suite mixed --dtype e4m3 --model llama3-8b \
  --only mixed_trace_fp8,mixed_trace_fp8_qq > $W/mixed.log 2>&1; echo "mixed rc $? at $SECONDS" >> $W/rc.txt
[ $(left) -gt 30 ] && { timeout $(left) $B --json $W/decode.json --suite decode --dtype bf16,e4m3 --model llama3-8b \
  --only 'fp8_decode_b128_paged16,decode_trace_b128_paged16' > $W/decode.log 2>&1; echo "decode rc $? at $SECONDS" >> $W/rc.txt; }
kill $WD; cat $W/gpu.txt $W/rc.txt; tail -n 2 $W/peers.log
python3 -c "
import json; d=json.load(open('$W/mixed.json'))
for e in d['benchmarks']: print(e['name'], round(e['us']), {k: round(v) for k, v in e['peers'].items()}, round(e['us'] / e['peers']['serial'], 3))"
grep -hE "^\| (fp8_decode|decode_trace)" $W/decode.log | head -4
cd $OUT && tar -czf w.tgz w

#!/usr/bin/env bash
# H200 call A (carry [".peers/manifest.json", ".peers/part1", ".devcache_bench"]): stash the peers' part 1
# (rc 3 expected), then the entries that need no peer: the FP8 decode beside its bf16 decode (issue 24's
# speed-up and copy-roof goals) and gpt-oss's cost entries with twins (issue 25's 3 % goals).
set -u
W=$OUT/w; mkdir -p $W
L=${L:-300}
( sleep $L; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/p1.log 2>&1; echo "p1 rc $? at $SECONDS" >> $W/rc.txt
timeout 30 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
T=$(( (L - 20 - SECONDS) / 2 ))
timeout $T python3 -m kernelgen bench --flex off --budget 0 --json $W/decode.json --suite decode --dtype bf16,e4m3 \
  --model llama3-8b --only 'fp8_decode_b128_paged16,decode_trace_b128_paged16' > $W/decode.log 2>&1
echo "decode rc $? at $SECONDS" >> $W/rc.txt
T=$(( L - 10 - SECONDS ))
timeout $T python3 -m kernelgen bench --flex off --budget 0 --json $W/cost.json --suite prefill \
  --model gpt-oss --only 'alibi_prefill_causal_*,variant_alibi_prefill_*,sinks_prefill_causal_*' > $W/cost.log 2>&1
echo "cost rc $? at $SECONDS" >> $W/rc.txt
kill $WD; cd $OUT && tar -czf w.tgz w
